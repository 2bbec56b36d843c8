//! `/metrics` of the embedded plane, with kube-apiserver's names and labels,
//! so what a client sends, and how long the plane takes to answer it, can be
//! read as on a real cluster:
//! - `apiserver_request_total` (`verb`, `group`, `version`, `resource`,
//!   `subresource`, `code`);
//! - `apiserver_request_duration_seconds`, a histogram with upstream's labels
//!   (`verb`, `dry_run`, `group`, `version`, `resource`, `subresource`,
//!   `scope`, `component`) and buckets. It measures until the handler has its
//!   response; a WATCH is not observed (upstream observes a watch's whole
//!   life, which says nothing of latency and which dashboards filter out).

use std::sync::Mutex;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct RequestLabels {
    /// Upstream's verbs: `GET`, `LIST`, `WATCH`, `POST`, `PUT`, `PATCH`,
    /// `DELETE`, `DELETECOLLECTION`.
    pub(crate) verb: String,
    pub(crate) group: String,
    pub(crate) version: String,
    pub(crate) resource: String,
    pub(crate) subresource: String,
    pub(crate) code: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct DurationLabels {
    pub(crate) verb: String,
    /// `All` for a dry run, else empty.
    pub(crate) dry_run: &'static str,
    pub(crate) group: String,
    pub(crate) version: String,
    pub(crate) resource: String,
    pub(crate) subresource: String,
    /// `resource` (one named object), `namespace` or `cluster`.
    pub(crate) scope: &'static str,
    pub(crate) component: &'static str,
}

/// kube-apiserver's buckets for `apiserver_request_duration_seconds`.
const BUCKETS: [f64; 23] = [
    0.005, 0.025, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 1.25, 1.5, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0,
    10.0, 15.0, 20.0, 30.0, 45.0, 60.0,
];

fn duration_histogram() -> Histogram {
    Histogram::new(BUCKETS)
}

pub(crate) struct ApiMetrics {
    registry: Mutex<Registry>,
    requests: Family<RequestLabels, Counter>,
    durations: Family<DurationLabels, Histogram>,
}

impl Default for ApiMetrics {
    fn default() -> Self {
        let mut registry = Registry::default();
        let requests = Family::<RequestLabels, Counter>::default();
        registry.register(
            "apiserver_request",
            "Counter of apiserver requests broken out for each verb, group, version, resource, subresource and HTTP response code",
            requests.clone(),
        );
        let durations = Family::new_with_constructor(duration_histogram as fn() -> Histogram);
        registry.register(
            "apiserver_request_duration_seconds",
            "Response latency distribution in seconds for each verb, dry run value, group, version, resource, subresource, scope and component",
            durations.clone(),
        );
        ApiMetrics {
            registry: Mutex::new(registry),
            requests,
            durations,
        }
    }
}

impl ApiMetrics {
    pub(crate) fn request(&self, labels: RequestLabels) {
        self.requests.get_or_create(&labels).inc();
    }

    pub(crate) fn duration(&self, labels: DurationLabels, took: Duration) {
        self.durations
            .get_or_create(&labels)
            .observe(took.as_secs_f64());
    }

    /// The text exposition.
    pub(crate) fn render(&self) -> String {
        let mut out = String::new();
        let registry = self.registry.lock().unwrap_or_else(|p| p.into_inner());
        let _ = prometheus_client::encoding::text::encode(&mut out, &registry);
        out
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::{Api, ListParams, PostParams, WatchParams};

    /// The `_count` of the duration series whose labels contain all of `want`.
    fn count(text: &str, want: &[&str]) -> u64 {
        text.lines()
            .filter(|l| l.starts_with("apiserver_request_duration_seconds_count{"))
            .filter(|l| want.iter().all(|w| l.contains(w)))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .sum()
    }

    #[tokio::test]
    async fn request_durations_are_histograms_with_upstreams_labels() {
        let (_data, server, client) = crate::test_server().await;
        let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
        let cm: ConfigMap =
            serde_json::from_value(serde_json::json!({"metadata": {"name": "a"}})).unwrap();
        cms.create(&PostParams::default(), &cm).await.unwrap();
        let dry = PostParams {
            dry_run: true,
            ..Default::default()
        };
        let other: ConfigMap =
            serde_json::from_value(serde_json::json!({"metadata": {"name": "b"}})).unwrap();
        cms.create(&dry, &other).await.unwrap();
        cms.get("a").await.unwrap();
        cms.list(&ListParams::default()).await.unwrap();
        Api::<ConfigMap>::all(client.clone())
            .list(&ListParams::default())
            .await
            .unwrap();
        drop(cms.watch(&WatchParams::default(), "0").await.unwrap());

        let req = http::Request::get("/metrics").body(Vec::new()).unwrap();
        let text = client.request_text(req).await.unwrap();
        let cm = r#"resource="configmaps""#;
        let apiserver = r#"component="apiserver""#;
        assert_eq!(
            count(
                &text,
                &[
                    r#"verb="POST""#,
                    cm,
                    r#"dry_run="""#,
                    r#"scope="namespace""#,
                    apiserver
                ]
            ),
            1,
            "{text}"
        );
        assert_eq!(count(&text, &[r#"verb="POST""#, cm, r#"dry_run="All""#]), 1);
        assert_eq!(
            count(&text, &[r#"verb="GET""#, cm, r#"scope="resource""#]),
            1
        );
        assert_eq!(
            count(&text, &[r#"verb="LIST""#, cm, r#"scope="namespace""#]),
            1
        );
        assert_eq!(
            count(&text, &[r#"verb="LIST""#, cm, r#"scope="cluster""#]),
            1
        );
        assert_eq!(
            count(&text, &[r#"verb="WATCH""#]),
            0,
            "a watch's life is not a latency"
        );
        // Upstream's buckets, the last one 60 s.
        assert!(text.lines().any(
            |l| l.starts_with("apiserver_request_duration_seconds_bucket{")
                && l.contains(r#"le="60.0""#)
        ));
        server.shutdown();
    }
}
