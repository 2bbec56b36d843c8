//! `/metrics` of the embedded plane: `apiserver_request_total` with
//! kube-apiserver's labels (`verb`, `group`, `version`, `resource`,
//! `subresource`, `code`), so what a client sends can be counted as on a real
//! cluster.

use std::sync::Mutex;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    /// Upstream's verbs: `GET`, `LIST`, `WATCH`, `POST`, `PUT`, `PATCH`,
    /// `DELETE`, `DELETECOLLECTION`.
    pub verb: String,
    pub group: String,
    pub version: String,
    pub resource: String,
    pub subresource: String,
    pub code: String,
}

pub struct ApiMetrics {
    registry: Mutex<Registry>,
    requests: Family<RequestLabels, Counter>,
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
        ApiMetrics {
            registry: Mutex::new(registry),
            requests,
        }
    }
}

impl ApiMetrics {
    pub fn request(&self, labels: RequestLabels) {
        self.requests.get_or_create(&labels).inc();
    }

    /// The text exposition.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let registry = self.registry.lock().unwrap_or_else(|p| p.into_inner());
        let _ = prometheus_client::encoding::text::encode(&mut out, &registry);
        out
    }
}
