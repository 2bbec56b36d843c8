//! Prometheus metrics with controller-runtime's names (so existing dashboards
//! work), in the process's registry: the plugin set's counters join it as a
//! collector, and the process endpoints (`crate::endpoints`) serve it.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use super::controller::Outcome;
use super::workqueue::QueueMetrics;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    controller: String,
    result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ControllerLabels {
    controller: String,
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
    waiting: Family<ControllerLabels, Gauge>,
}

/// One controller's series in [`ControllerMetrics`] (see
/// [`ControllerMetrics::series`]).
#[derive(Clone)]
pub(crate) struct ControllerSeries {
    /// Per [`Outcome::ALL`], in its order.
    reconcile_total: [Counter; Outcome::ALL.len()],
    reconcile_errors: Counter,
    reconcile_time: Histogram,
    active_workers: Gauge,
    out_of_scope: Counter,
    status_writes: Counter,
    waiting: Gauge,
}

impl ControllerSeries {
    pub(crate) fn status_written(&self) {
        self.status_writes.inc();
    }

    pub(crate) fn out_of_scope(&self) {
        self.out_of_scope.inc();
    }

    pub(crate) fn reconciled(&self, outcome: Outcome, took: Duration) {
        if let Some(i) = Outcome::ALL.iter().position(|o| *o == outcome) {
            self.reconcile_total[i].inc();
        }
        if outcome == Outcome::Error {
            self.reconcile_errors.inc();
        }
        self.reconcile_time.observe(took.as_secs_f64());
    }

    /// Reconciles so far, of any outcome.
    pub(crate) fn reconciles(&self) -> u64 {
        self.reconcile_total.iter().map(Counter::get).sum()
    }

    pub(crate) fn active_workers(&self, delta: i64) {
        self.active_workers.inc_by(delta);
    }

    /// The gauge of keys waiting for a requeue-after (kept by `keys.rs`).
    pub(super) fn waiting(&self) -> Gauge {
        self.waiting.clone()
    }
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
        let waiting = Family::<ControllerLabels, Gauge>::default();
        registry.register(
            "wasmlet_controller_waiting_keys",
            "Objects whose last reconcile asked to be called again later and that wait for it (a watch mapped `waiting` calls them at once)",
            waiting.clone(),
        );
        ControllerMetrics {
            registry: Arc::new(Mutex::new(registry)),
            queue,
            reconcile_total,
            reconcile_errors,
            reconcile_time,
            active_workers,
            out_of_scope,
            status_writes,
            waiting,
        }
    }

    pub(crate) fn queue(&self) -> &QueueMetrics {
        &self.queue
    }

    /// `controller`'s series, created at zero as controller-runtime does (a
    /// dashboard's `rate()` and an alert's `absent()` see a controller that has
    /// not reconciled yet). The handles share the registry's values: a
    /// reconcile counts without looking its labels up again.
    pub(crate) fn series(&self, controller: &str) -> ControllerSeries {
        let c = ControllerLabels {
            controller: controller.to_string(),
        };
        let reconcile_total = Outcome::ALL.map(|outcome| {
            self.reconcile_total
                .get_or_create(&ResultLabels {
                    controller: controller.into(),
                    result: outcome.as_str().into(),
                })
                .clone()
        });
        ControllerSeries {
            reconcile_total,
            reconcile_errors: self.reconcile_errors.get_or_create(&c).clone(),
            reconcile_time: self.reconcile_time.get_or_create(&c).clone(),
            active_workers: self.active_workers.get_or_create(&c).clone(),
            out_of_scope: self.out_of_scope.get_or_create(&c).clone(),
            status_writes: self.status_writes.get_or_create(&c).clone(),
            waiting: self.waiting.get_or_create(&c).clone(),
        }
    }

    /// Adds metrics owned elsewhere (the plugin set's counters), read at each scrape.
    pub(crate) fn register_collector(&self, collector: Box<dyn Collector>) {
        self.registry
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .register_collector(collector);
    }

    /// Adds metrics families kept elsewhere (the named clusters' requests).
    pub(crate) fn register(&self, add: impl FnOnce(&mut Registry)) {
        add(&mut self.registry.lock().unwrap_or_else(|p| p.into_inner()));
    }

    /// The text exposition of every registered metric.
    pub fn encode(&self) -> String {
        self.queue.refresh_gauges();
        let mut out = String::new();
        let registry = self.registry.lock().unwrap_or_else(|p| p.into_inner());
        let _ = prometheus_client::encoding::text::encode(&mut out, &registry);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_started_controller_exports_every_series_at_zero() {
        let m = ControllerMetrics::new();
        let _ = m.series("demo");
        let text = m.encode();
        for outcome in Outcome::ALL {
            let line = format!(
                "controller_runtime_reconcile_total{{controller=\"demo\",result=\"{}\"}} 0",
                outcome.as_str()
            );
            assert!(text.contains(&line), "{line} missing:\n{text}");
        }
        for series in [
            "controller_runtime_reconcile_errors_total{controller=\"demo\"} 0",
            "controller_runtime_reconcile_time_seconds_count{controller=\"demo\"} 0",
            "controller_runtime_active_workers{controller=\"demo\"} 0",
            "wasmlet_controller_waiting_keys{controller=\"demo\"} 0",
        ] {
            assert!(text.contains(series), "{series} missing:\n{text}");
        }
    }

    #[test]
    fn a_controllers_series_count_into_the_registry() {
        let m = ControllerMetrics::new();
        let series = m.series("demo");
        series.reconciled(Outcome::Error, Duration::from_millis(2));
        series.status_written();
        let again = m.series("demo");
        again.reconciled(Outcome::Success, Duration::from_millis(2));
        let text = m.encode();
        for line in [
            "controller_runtime_reconcile_total{controller=\"demo\",result=\"error\"} 1",
            "controller_runtime_reconcile_total{controller=\"demo\",result=\"success\"} 1",
            "controller_runtime_reconcile_errors_total{controller=\"demo\"} 1",
            "controller_runtime_reconcile_time_seconds_count{controller=\"demo\"} 2",
            "wasmlet_controller_status_writes_total{controller=\"demo\"} 1",
        ] {
            assert!(text.contains(line), "{line} missing:\n{text}");
        }
    }
}
