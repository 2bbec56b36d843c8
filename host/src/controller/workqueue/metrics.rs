//! Prometheus metrics of the workqueues (client-go / controller-runtime
//! names), shared by every queue and labelled with the queue's name.

use std::fmt::Debug;
use std::hash::Hash;
use std::sync::{Arc, Mutex, Weak};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use tokio::time::Instant;

use super::Inner;
use super::lanes::lock;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct NameLabels {
    name: String,
}

/// A queue and one of its lanes (`workqueue_depth`, `workqueue_adds_total`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LaneLabels {
    name: String,
    priority: String,
}

type FloatGauge = Gauge<f64, std::sync::atomic::AtomicU64>;
type HistogramFamily = Family<NameLabels, Histogram, fn() -> Histogram>;

/// controller-runtime's latency buckets: 10 ns … 1000 s, ×10.
fn duration_histogram() -> Histogram {
    Histogram::new(exponential_buckets(10e-9, 10.0, 12))
}

/// Workqueue metrics, shared by every queue (label `name` = queue name).
/// Clone is cheap; the families are `Arc`'d.
///
/// Registered names (Prometheus text):
/// `workqueue_depth{name,priority}` (priority = `high`|`low`|`scheduled`),
/// `workqueue_adds_total{name,priority}` (priority = `high`|`low`: the lane a
/// new key joins, or joins when its time comes; `sum by (name)` is
/// client-go's counter, and the `high` rate is the urgent work coming in),
/// `workqueue_queue_duration_seconds{name}`,
/// `workqueue_work_duration_seconds{name}`,
/// `workqueue_unfinished_work_seconds{name}`,
/// `workqueue_longest_running_processor_seconds{name}`,
/// `workqueue_retries_total{name}`.
#[derive(Clone)]
pub(crate) struct QueueMetrics {
    depth: Family<LaneLabels, Gauge>,
    adds: Family<LaneLabels, Counter>,
    queue_duration: HistogramFamily,
    work_duration: HistogramFamily,
    unfinished: Family<NameLabels, FloatGauge>,
    longest: Family<NameLabels, FloatGauge>,
    retries: Family<NameLabels, Counter>,
    pub(super) queues: Arc<Mutex<Vec<Weak<dyn Refresh>>>>,
}

impl Debug for QueueMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueueMetrics").finish_non_exhaustive()
    }
}

impl QueueMetrics {
    /// Creates the families and registers them in `registry`.
    pub(crate) fn new(registry: &mut Registry) -> QueueMetrics {
        let m = QueueMetrics {
            depth: Family::default(),
            adds: Family::default(),
            queue_duration: Family::new_with_constructor(duration_histogram),
            work_duration: Family::new_with_constructor(duration_histogram),
            unfinished: Family::default(),
            longest: Family::default(),
            retries: Family::default(),
            queues: Arc::new(Mutex::new(Vec::new())),
        };
        registry.register(
            "workqueue_depth",
            "Current depth of workqueue",
            m.depth.clone(),
        );
        // Counters get their `_total` suffix from the encoder.
        registry.register(
            "workqueue_adds",
            "Total number of adds handled by workqueue",
            m.adds.clone(),
        );
        registry.register(
            "workqueue_queue_duration_seconds",
            "How long in seconds an item stays in workqueue before being requested",
            m.queue_duration.clone(),
        );
        registry.register(
            "workqueue_work_duration_seconds",
            "How long in seconds processing an item from workqueue takes",
            m.work_duration.clone(),
        );
        registry.register(
            "workqueue_unfinished_work_seconds",
            "How many seconds of work has been done that is in progress and hasn't been observed by work_duration. Large values indicate stuck threads. One can deduce the number of stuck threads by observing the rate at which this increases",
            m.unfinished.clone(),
        );
        registry.register(
            "workqueue_longest_running_processor_seconds",
            "How many seconds has the longest running processor for workqueue been running",
            m.longest.clone(),
        );
        registry.register(
            "workqueue_retries",
            "Total number of retries handled by workqueue",
            m.retries.clone(),
        );
        m
    }

    /// Brings the time-dependent gauges (depth after due items moved,
    /// unfinished work, longest running processor) of every live queue up
    /// to date. Cheap: call it before encoding `/metrics`.
    pub(crate) fn refresh_gauges(&self) {
        let mut queues = self.queues.lock().unwrap_or_else(|e| e.into_inner());
        queues.retain(|q| match q.upgrade() {
            Some(q) => {
                q.refresh();
                true
            }
            None => false,
        });
    }

    pub(super) fn handles(&self, name: &str) -> QueueHandles {
        let n = NameLabels {
            name: name.to_string(),
        };
        let d = |p: &str| {
            self.depth.get_or_create_owned(&LaneLabels {
                name: name.to_string(),
                priority: p.to_string(),
            })
        };
        let adds = |p: &str| {
            self.adds.get_or_create_owned(&LaneLabels {
                name: name.to_string(),
                priority: p.to_string(),
            })
        };
        QueueHandles {
            depth_high: d("high"),
            depth_low: d("low"),
            depth_scheduled: d("scheduled"),
            adds_high: adds("high"),
            adds_low: adds("low"),
            queue_duration: self.queue_duration.get_or_create_owned(&n),
            work_duration: self.work_duration.get_or_create_owned(&n),
            unfinished: self.unfinished.get_or_create_owned(&n),
            longest: self.longest.get_or_create_owned(&n),
            retries: self.retries.get_or_create_owned(&n),
        }
    }
}

/// One queue's metric handles (registered, or detached when the queue has
/// no metrics — updating those is harmless).
pub(super) struct QueueHandles {
    pub(super) depth_high: Gauge,
    pub(super) depth_low: Gauge,
    pub(super) depth_scheduled: Gauge,
    pub(super) adds_high: Counter,
    pub(super) adds_low: Counter,
    pub(super) queue_duration: Histogram,
    pub(super) work_duration: Histogram,
    pub(super) unfinished: FloatGauge,
    pub(super) longest: FloatGauge,
    pub(super) retries: Counter,
}

impl QueueHandles {
    /// Counts a new key joining the lane of `priority`.
    pub(super) fn added(&self, priority: super::Priority) {
        match priority {
            super::Priority::High => self.adds_high.inc(),
            super::Priority::Low => self.adds_low.inc(),
        };
    }

    pub(super) fn detached() -> Self {
        QueueHandles {
            depth_high: Gauge::default(),
            depth_low: Gauge::default(),
            depth_scheduled: Gauge::default(),
            adds_high: Counter::default(),
            adds_low: Counter::default(),
            queue_duration: duration_histogram(),
            work_duration: duration_histogram(),
            unfinished: FloatGauge::default(),
            longest: FloatGauge::default(),
            retries: Counter::default(),
        }
    }
}

pub(super) trait Refresh: Send + Sync {
    fn refresh(&self);
}

impl<K: super::fair::Tenant + Clone + Eq + Hash + Debug + Send + Sync + 'static> Refresh
    for Inner<K>
{
    fn refresh(&self) {
        let now = Instant::now();
        let mut st = lock(&self.state);
        let moved = st.pump(now);
        self.sync_depth(&st);
        self.sync_processing(&st, now);
        drop(st);
        if moved {
            self.notify.notify_waiters();
        }
    }
}
