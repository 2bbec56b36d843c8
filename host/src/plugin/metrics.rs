//! Per-plugin counters (`wasmlet_plugin_*`), kept as atomics so the hot path
//! never locks, and [`PluginCollector`], which exports them at each scrape.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{
    DescriptorEncoder, EncodeCounterValue, EncodeLabelSet, EncodeMetric,
};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;

use super::PluginSet;

#[derive(Debug, Default)]
pub struct PluginMetrics {
    pub(crate) calls: AtomicU64,
    pub traps: AtomicU64,
    pub timeouts: AtomicU64,
    pub out_of_memory: AtomicU64,
    pub(crate) malformed: AtomicU64,
    pub(crate) oversized: AtomicU64,
    pub denied: AtomicU64,
    pub swaps: AtomicU64,
    pub load_failures: AtomicU64,
    pub(crate) events_dropped: AtomicU64,
    /// Shadow mode: the candidate's calls by result, and live calls it skipped.
    pub(crate) shadow_same: AtomicU64,
    pub(crate) shadow_different: AtomicU64,
    pub(crate) shadow_error: AtomicU64,
    pub(crate) shadow_skipped: AtomicU64,
    /// Nanoseconds spent in calls: instantiation, the guest and the host
    /// calls it makes (not the host's status write after it).
    pub(crate) call_nanos: AtomicU64,
}

/// Adds the time from [`CallTimer::start`] to its drop to a call-time counter.
pub(crate) struct CallTimer<'a>(&'a AtomicU64, std::time::Instant);

impl<'a> CallTimer<'a> {
    pub(crate) fn start(counter: &'a AtomicU64) -> CallTimer<'a> {
        CallTimer(counter, std::time::Instant::now())
    }
}

impl Drop for CallTimer<'_> {
    fn drop(&mut self) {
        let nanos = u64::try_from(self.1.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.0.fetch_add(nanos, Ordering::Relaxed);
    }
}

impl PluginMetrics {
    pub(crate) fn inc(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }

    /// Every counter with its exported name and help.
    fn counters(&self) -> [(&'static str, &'static str, &AtomicU64); 10] {
        [
            ("calls", "Calls into the plugin", &self.calls),
            (
                "traps",
                "Calls that trapped (panic, unreachable, bad memory access)",
                &self.traps,
            ),
            (
                "timeouts",
                "Calls stopped at their deadline (wall time, host calls included)",
                &self.timeouts,
            ),
            (
                "out_of_memory",
                "Calls that hit their memory cap",
                &self.out_of_memory,
            ),
            (
                "malformed",
                "Calls that returned a malformed result",
                &self.malformed,
            ),
            (
                "oversized",
                "Calls whose result was over the host's size limit",
                &self.oversized,
            ),
            (
                "denied",
                "Host calls refused by the plugin's manifest",
                &self.denied,
            ),
            (
                "swaps",
                "Versions swapped in (hot replace or rollback)",
                &self.swaps,
            ),
            (
                "load_failures",
                "Versions rejected at load",
                &self.load_failures,
            ),
            (
                "events_dropped",
                "Events over record-event's rate limits, not published",
                &self.events_dropped,
            ),
        ]
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PluginLabels {
    plugin: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ShadowLabels {
    plugin: String,
    result: &'static str,
}

/// Exports `wasmlet_plugin_<counter>_total{plugin}` for every plugin the set
/// has counted, read at each scrape; register it where the set is owned.
pub(crate) struct PluginCollector(pub Arc<PluginSet>);

impl std::fmt::Debug for PluginCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PluginCollector")
    }
}

impl Collector for PluginCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let mut plugins: Vec<(String, Arc<PluginMetrics>)> = self
            .0
            .metric_names()
            .into_iter()
            .map(|n| {
                let m = self.0.metrics(&n);
                (n, m)
            })
            .collect();
        plugins.sort_by(|a, b| a.0.cmp(&b.0));
        for (i, (counter, help, _)) in PluginMetrics::default().counters().into_iter().enumerate() {
            let name = format!("wasmlet_plugin_{counter}");
            per_plugin(&mut encoder, &name, help, &plugins, |m| {
                PluginMetrics::get(m.counters()[i].2)
            })?;
        }
        per_plugin(
            &mut encoder,
            "wasmlet_plugin_call_seconds",
            "Time spent in calls: instantiation, the guest and the host calls it makes (divide by wasmlet_plugin_calls_total for the mean)",
            &plugins,
            |m| PluginMetrics::get(&m.call_nanos) as f64 / 1e9,
        )?;
        let mut family = encoder.encode_descriptor(
            "wasmlet_shadow_calls",
            "Shadow candidates' calls, by how their decision compared with the live version's",
            None,
            MetricType::Counter,
        )?;
        for (plugin, m) in &plugins {
            for (result, counter) in [
                ("same", &m.shadow_same),
                ("different", &m.shadow_different),
                ("error", &m.shadow_error),
            ] {
                let labels = ShadowLabels {
                    plugin: plugin.clone(),
                    result,
                };
                ConstCounter::new(PluginMetrics::get(counter))
                    .encode(family.encode_family(&labels)?)?;
            }
        }
        per_plugin(
            &mut encoder,
            "wasmlet_shadow_skipped",
            "Live calls not handed to the shadow candidate: it was too far behind or past its CPU share",
            &plugins,
            |m| PluginMetrics::get(&m.shadow_skipped),
        )?;
        Ok(())
    }
}

/// Counter family `name` with one sample per plugin, `value` of its metrics.
fn per_plugin<N: EncodeCounterValue>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    plugins: &[(String, Arc<PluginMetrics>)],
    value: impl Fn(&PluginMetrics) -> N,
) -> Result<(), std::fmt::Error> {
    let mut family = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
    for (plugin, m) in plugins {
        let labels = PluginLabels {
            plugin: plugin.clone(),
        };
        ConstCounter::new(value(m)).encode(family.encode_family(&labels)?)?;
    }
    Ok(())
}
