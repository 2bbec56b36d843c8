//! Prometheus metrics with controller-runtime's names (so existing dashboards
//! work), plus `wasmlet_plugin_*`, served with `/healthz` and `/readyz`.

use anyhow::Context;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::routing::get;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use super::controller::Outcome;
use super::workqueue::QueueMetrics;
use crate::plugin::PluginSet;
use crate::plugin::metrics::PluginMetrics;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    controller: String,
    result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ControllerLabels {
    controller: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PluginLabels {
    plugin: String,
}

/// The plugin counters exported, by name.
const PLUGIN_COUNTERS: &[(&str, &str)] = &[
    ("calls", "Calls into the plugin"),
    (
        "traps",
        "Calls that trapped (panic, unreachable, bad memory access)",
    ),
    ("timeouts", "Calls stopped at their CPU deadline"),
    ("out_of_memory", "Calls that hit their memory cap"),
    ("malformed", "Calls that returned a malformed result"),
    ("denied", "Host calls refused by the plugin's manifest"),
    ("swaps", "Versions swapped in (hot replace or rollback)"),
    ("load_failures", "Versions rejected at load"),
];

fn plugin_counter(m: &PluginMetrics, name: &str) -> u64 {
    let c = match name {
        "calls" => &m.calls,
        "traps" => &m.traps,
        "timeouts" => &m.timeouts,
        "out_of_memory" => &m.out_of_memory,
        "malformed" => &m.malformed,
        "denied" => &m.denied,
        "swaps" => &m.swaps,
        _ => &m.load_failures,
    };
    PluginMetrics::get(c)
}

#[derive(Clone)]
pub struct ControllerMetrics {
    registry: Arc<Mutex<Registry>>,
    queue: QueueMetrics,
    reconcile_total: Family<ResultLabels, Counter>,
    reconcile_errors: Family<ControllerLabels, Counter>,
    reconcile_time: Family<ControllerLabels, Histogram>,
    active_workers: Family<ControllerLabels, Gauge>,
    out_of_scope: Family<ControllerLabels, Counter>,
    status_writes: Family<ControllerLabels, Counter>,
    plugin: Arc<Vec<(String, Family<PluginLabels, Counter>)>>,
    /// What the plugin counters were last exported at, to add only the delta.
    exported: Arc<Mutex<HashMap<(String, String), u64>>>,
}

impl Default for ControllerMetrics {
    fn default() -> Self {
        Self::new()
    }
}

impl ControllerMetrics {
    pub fn new() -> ControllerMetrics {
        let mut registry = Registry::default();
        let queue = QueueMetrics::new(&mut registry);
        let reconcile_total = Family::<ResultLabels, Counter>::default();
        registry.register(
            "controller_runtime_reconcile",
            "Reconciles per controller and result",
            reconcile_total.clone(),
        );
        let reconcile_errors = Family::<ControllerLabels, Counter>::default();
        registry.register(
            "controller_runtime_reconcile_errors",
            "Reconcile errors per controller",
            reconcile_errors.clone(),
        );
        let reconcile_time = Family::<ControllerLabels, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.0005, 2.0, 18))
        });
        registry.register(
            "controller_runtime_reconcile_time_seconds",
            "Time per reconcile",
            reconcile_time.clone(),
        );
        let active_workers = Family::<ControllerLabels, Gauge>::default();
        registry.register(
            "controller_runtime_active_workers",
            "Workers reconciling now",
            active_workers.clone(),
        );
        let out_of_scope = Family::<ControllerLabels, Counter>::default();
        registry.register(
            "wasmlet_controller_out_of_scope",
            "Keys from owns or watches that named an object outside the reconciler's namespace or label selector (dropped, not reconciled)",
            out_of_scope.clone(),
        );
        let status_writes = Family::<ControllerLabels, Counter>::default();
        registry.register(
            "wasmlet_controller_status_writes",
            "Status PATCHes the host sent for a controller's objects",
            status_writes.clone(),
        );
        let mut plugin = Vec::new();
        for (name, help) in PLUGIN_COUNTERS {
            let f = Family::<PluginLabels, Counter>::default();
            registry.register(format!("wasmlet_plugin_{name}"), *help, f.clone());
            plugin.push((name.to_string(), f));
        }
        ControllerMetrics {
            registry: Arc::new(Mutex::new(registry)),
            queue,
            reconcile_total,
            reconcile_errors,
            reconcile_time,
            active_workers,
            out_of_scope,
            status_writes,
            plugin: Arc::new(plugin),
            exported: Arc::default(),
        }
    }

    pub fn queue(&self) -> &QueueMetrics {
        &self.queue
    }

    pub fn status_written(&self, controller: &str) {
        self.status_writes
            .get_or_create(&ControllerLabels {
                controller: controller.to_string(),
            })
            .inc();
    }

    pub fn out_of_scope(&self, controller: &str) {
        self.out_of_scope
            .get_or_create(&ControllerLabels {
                controller: controller.to_string(),
            })
            .inc();
    }

    pub fn reconciled(&self, controller: &str, outcome: Outcome, took: Duration) {
        let c = ControllerLabels {
            controller: controller.to_string(),
        };
        self.reconcile_total
            .get_or_create(&ResultLabels {
                controller: controller.into(),
                result: outcome.as_str().into(),
            })
            .inc();
        if outcome == Outcome::Error {
            self.reconcile_errors.get_or_create(&c).inc();
        }
        self.reconcile_time
            .get_or_create(&c)
            .observe(took.as_secs_f64());
    }

    pub fn active_workers(&self, controller: &str, delta: i64) {
        self.active_workers
            .get_or_create(&ControllerLabels {
                controller: controller.to_string(),
            })
            .inc_by(delta);
    }

    /// The text exposition, with plugin counters brought up to date.
    pub fn encode(&self, plugins: Option<&PluginSet>) -> String {
        if let Some(plugins) = plugins {
            let mut exported = self.exported.lock().unwrap_or_else(|p| p.into_inner());
            for name in plugins.metric_names() {
                let m = plugins.metrics(&name);
                for (counter, family) in self.plugin.iter() {
                    let now = plugin_counter(&m, counter);
                    let last = exported.entry((name.clone(), counter.clone())).or_default();
                    if now > *last {
                        family
                            .get_or_create(&PluginLabels {
                                plugin: name.clone(),
                            })
                            .inc_by(now - *last);
                        *last = now;
                    }
                }
            }
        }
        self.queue.refresh_gauges();
        let mut out = String::new();
        let registry = self.registry.lock().unwrap_or_else(|p| p.into_inner());
        let _ = prometheus_client::encoding::text::encode(&mut out, &registry);
        out
    }

    /// Serves `/metrics`, `/healthz` and `/readyz` (ready once `ready` is set).
    pub async fn serve(
        self,
        addr: SocketAddr,
        plugins: Option<Arc<PluginSet>>,
        ready: Arc<AtomicBool>,
    ) -> anyhow::Result<SocketAddr> {
        let listener = tokio::net::TcpListener::bind(addr).await.with_context(|| {
            format!(
                "metrics cannot listen on {addr} (flag --metrics-addr; port 0 picks a free one)"
            )
        })?;
        let bound = listener.local_addr()?;
        let app = Router::new()
            .route(
                "/metrics",
                get(move || {
                    let m = self.clone();
                    let p = plugins.clone();
                    async move {
                        (
                            [(
                                "content-type",
                                "application/openmetrics-text; version=1.0.0; charset=utf-8",
                            )],
                            m.encode(p.as_deref()),
                        )
                    }
                }),
            )
            .route("/healthz", get(|| async { "ok" }))
            .route(
                "/readyz",
                get(move || {
                    let ready = ready.load(Ordering::Acquire);
                    async move {
                        if ready {
                            (axum::http::StatusCode::OK, "ok")
                        } else {
                            (axum::http::StatusCode::SERVICE_UNAVAILABLE, "not ready")
                        }
                    }
                }),
            );
        tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, app).await {
                tracing::error!(error = %e, "metrics server stopped");
            }
        });
        Ok(bound)
    }
}
