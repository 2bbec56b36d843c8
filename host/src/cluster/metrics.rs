//! Requests to the host's named clusters, per cluster: a tower layer in each
//! named cluster's kube client counts every request the host makes there
//! (the guests' calls, the caches' lists and watches, CRD applies) by verb
//! and response code, and times those that are not watches. So an operator
//! sees which region is slow or refusing without reading logs.
//!
//! ```ignore
//! use prometheus_client::registry::Registry;
//! use wasmlet::cluster::metrics::ClusterMetrics;
//! let metrics = ClusterMetrics::default();
//! let mut registry = Registry::default();
//! metrics.register(&mut registry);
//! // Per cluster: `ClientBuilder::try_from(config)?.with_layer(&metrics.layer("eu-west")).build()`.
//! let _layer = metrics.layer("eu-west");
//! ```

use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use futures::future::BoxFuture;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    cluster: String,
    verb: &'static str,
    /// The HTTP status, or `error` when no response came (connection refused, TLS).
    code: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LatencyLabels {
    cluster: String,
    verb: &'static str,
}

type Latency = Family<LatencyLabels, Histogram, fn() -> Histogram>;

fn latency_histogram() -> Histogram {
    // 1 ms to ~16 s.
    Histogram::new(exponential_buckets(0.001, 2.0, 15))
}

/// The counters of every named cluster, cheap to clone.
#[derive(Clone)]
pub(crate) struct ClusterMetrics {
    requests: Family<RequestLabels, Counter>,
    latency: Latency,
}

impl Default for ClusterMetrics {
    fn default() -> Self {
        ClusterMetrics {
            requests: Family::default(),
            latency: Family::new_with_constructor(latency_histogram),
        }
    }
}

impl ClusterMetrics {
    /// `wasmlet_cluster_requests_total{cluster,verb,code}` and
    /// `wasmlet_cluster_request_duration_seconds{cluster,verb}`.
    pub(crate) fn register(&self, registry: &mut Registry) {
        registry.register(
            "wasmlet_cluster_requests",
            "Requests to a named cluster (--cluster) by verb and response code",
            self.requests.clone(),
        );
        registry.register(
            "wasmlet_cluster_request_duration_seconds",
            "Time to a named cluster's response headers, watches excluded",
            self.latency.clone(),
        );
    }

    /// The layer for cluster `name`'s client.
    pub(crate) fn layer(&self, name: &str) -> CountLayer {
        CountLayer {
            cluster: name.into(),
            metrics: self.clone(),
        }
    }

    fn observe(&self, cluster: &str, verb: &'static str, code: Option<u16>, started: Instant) {
        self.requests
            .get_or_create(&RequestLabels {
                cluster: cluster.to_string(),
                verb,
                code: code.map_or_else(|| "error".to_string(), |c| c.to_string()),
            })
            .inc();
        if verb != "watch" {
            self.latency
                .get_or_create(&LatencyLabels {
                    cluster: cluster.to_string(),
                    verb,
                })
                .observe(started.elapsed().as_secs_f64());
        }
    }
}

/// The Kubernetes verb of a request, from its method (and `watch=true`).
fn verb_of<B>(req: &http::Request<B>) -> &'static str {
    match *req.method() {
        http::Method::GET => {
            let watching = req
                .uri()
                .query()
                .is_some_and(|q| q.split('&').any(|p| p == "watch=true" || p == "watch=1"));
            if watching { "watch" } else { "get" }
        }
        http::Method::POST => "create",
        http::Method::PUT => "update",
        http::Method::PATCH => "patch",
        http::Method::DELETE => "delete",
        _ => "other",
    }
}

/// Counts one cluster's requests (see the module docs).
#[derive(Clone)]
pub(crate) struct CountLayer {
    cluster: Arc<str>,
    metrics: ClusterMetrics,
}

impl<S> tower_layer::Layer<S> for CountLayer {
    type Service = Counted<S>;

    fn layer(&self, inner: S) -> Counted<S> {
        Counted {
            inner,
            layer: self.clone(),
        }
    }
}

#[derive(Clone)]
pub(crate) struct Counted<S> {
    inner: S,
    layer: CountLayer,
}

impl<S, B, RB> tower_service::Service<http::Request<B>> for Counted<S>
where
    S: tower_service::Service<http::Request<B>, Response = http::Response<RB>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = BoxFuture<'static, Result<S::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let verb = verb_of(&req);
        let started = Instant::now();
        let layer = self.layer.clone();
        let response = self.inner.call(req);
        Box::pin(async move {
            let r = response.await;
            let code = r.as_ref().ok().map(|r| r.status().as_u16());
            layer.metrics.observe(&layer.cluster, verb, code, started);
            r
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(method: http::Method, uri: &str) -> http::Request<()> {
        http::Request::builder()
            .method(method)
            .uri(uri)
            .body(())
            .unwrap()
    }

    #[test]
    fn verbs_follow_the_method_and_the_watch_parameter() {
        assert_eq!(verb_of(&request(http::Method::GET, "/api/v1/pods")), "get");
        assert_eq!(
            verb_of(&request(
                http::Method::GET,
                "/api/v1/pods?resourceVersion=5&watch=true"
            )),
            "watch"
        );
        assert_eq!(verb_of(&request(http::Method::PATCH, "/x")), "patch");
        assert_eq!(verb_of(&request(http::Method::DELETE, "/x")), "delete");
    }

    #[tokio::test]
    async fn a_layered_service_counts_its_requests_per_cluster() {
        use tower_layer::Layer;
        use tower_service::Service;
        let metrics = ClusterMetrics::default();
        let mut registry = Registry::default();
        metrics.register(&mut registry);
        let mut svc = metrics.layer("eu-west").layer(tower::service_fn(
            |req: http::Request<()>| async move {
                let code = if req.method() == http::Method::DELETE {
                    404
                } else {
                    200
                };
                Ok::<_, std::convert::Infallible>(
                    http::Response::builder().status(code).body(()).unwrap(),
                )
            },
        ));
        for m in [http::Method::GET, http::Method::GET, http::Method::DELETE] {
            svc.call(request(m, "/apis/x/v1/things")).await.unwrap();
        }
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        assert!(
            text.contains(
                "wasmlet_cluster_requests_total{cluster=\"eu-west\",verb=\"get\",code=\"200\"} 2"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "wasmlet_cluster_requests_total{cluster=\"eu-west\",verb=\"delete\",code=\"404\"} 1"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "wasmlet_cluster_request_duration_seconds_count{cluster=\"eu-west\",verb=\"get\"} 2"
            ),
            "{text}"
        );
    }
}

/// The module documentation's example (its modules are private to the
/// crate, so rustdoc cannot compile it from outside).
#[cfg(test)]
mod doc_example {
    #[test]
    fn the_module_example_registers_and_makes_a_layer() {
        use crate::cluster::metrics::ClusterMetrics;
        use prometheus_client::registry::Registry;
        let metrics = ClusterMetrics::default();
        let mut registry = Registry::default();
        metrics.register(&mut registry);
        // Per cluster: `ClientBuilder::try_from(config)?.with_layer(&metrics.layer("eu-west")).build()`.
        let _layer = metrics.layer("eu-west");
    }
}
