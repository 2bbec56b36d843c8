//! Per-plugin counters (`wasmlet_plugin_*`), kept as atomics so the hot path
//! never locks; the metrics endpoint reads them.

use std::sync::atomic::{AtomicU64, Ordering};

#[derive(Debug, Default)]
pub struct PluginMetrics {
    pub calls: AtomicU64,
    pub traps: AtomicU64,
    pub timeouts: AtomicU64,
    pub out_of_memory: AtomicU64,
    pub malformed: AtomicU64,
    pub denied: AtomicU64,
    pub swaps: AtomicU64,
    pub load_failures: AtomicU64,
}

impl PluginMetrics {
    pub fn inc(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }
}
