//! The host's status as data: `GET /status` (JSON) on the metrics address,
//! which `wasmlet status` and `wasmlet plugin list` print. The same sources
//! as the page: each plugin with its version, its state and its queue, and
//! the node's pods per state.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{StatusPage, samples};
use crate::cluster::named::ClusterHealth;
use crate::plugin::manifest::PluginKind;
use crate::plugin::metrics::PluginMetrics;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct HostStatus {
    pub(crate) plugins: Vec<PluginStatus>,
    /// The node agent's part (a controllers-only host has none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) node: Option<NodeStatus>,
    /// The named clusters (`--cluster`): reachable or since when not, and
    /// their plugins' CRDs.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub(crate) clusters: BTreeMap<String, ClusterHealth>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct PluginStatus {
    pub(crate) name: String,
    /// `reconciler` or `provider`; none for a plugin no version of which loaded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) kind: Option<String>,
    /// The running version: its component's `sha256:` digest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) version: Option<String>,
    /// `reconciling`, `standby` (another host leads), `not started` (a
    /// reconciler whose controller has not started: a kind not served yet),
    /// `running pods` (the node's provider), `loaded`, or `rejected`.
    pub(crate) state: String,
    /// Why a version was rejected (the only one, or the newest).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) message: Option<String>,
    /// A reconciler's queue.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) queue: Option<QueueStatus>,
    pub(crate) calls: u64,
    /// Traps, timeouts, out-of-memory, malformed or oversized results.
    pub(crate) faults: u64,
    /// Versions swapped in while the host ran.
    pub(crate) swaps: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct QueueStatus {
    /// Keys ready to run, both lanes.
    pub(crate) ready: u64,
    /// Keys waiting for their time (back-off, requeue-after).
    pub(crate) scheduled: u64,
    pub(crate) processing: u64,
    /// Reconciles per second between the last two samples (every 5 s).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) reconciles_per_second: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct NodeStatus {
    pub(crate) name: String,
    pub(crate) provider: String,
    /// Pods per state.
    pub(crate) pods: BTreeMap<String, usize>,
}

impl StatusPage {
    /// The host's status now.
    pub(crate) fn report(&self) -> HostStatus {
        let mut plugins = Vec::new();
        let runner = self.pods.get();
        if let Some(set) = self.plugins.get() {
            for name in set.names() {
                let Some(loaded) = set.get(&name) else {
                    continue;
                };
                let m = set.metrics(&name);
                let kind = &loaded.manifest.plugin.kind;
                let controller = self.manager.get().and_then(|m| m.controller(&name));
                let state = match kind {
                    PluginKind::Reconciler => match &controller {
                        Some(c) if c.leading.is_leading() => "reconciling",
                        Some(_) => "standby",
                        None => "not started",
                    },
                    PluginKind::Provider if runner.is_some_and(|(_, r)| r.provider() == name) => {
                        "running pods"
                    }
                    PluginKind::Provider => "loaded",
                };
                let queue = controller.map(|c| {
                    let d = c.queue.depth();
                    let samples = self.samples.of(&name);
                    let rate = samples::rates(&samples[samples.len().saturating_sub(2)..]);
                    QueueStatus {
                        ready: (d.high + d.low) as u64,
                        scheduled: d.scheduled as u64,
                        processing: d.processing as u64,
                        reconciles_per_second: rate.first().copied(),
                    }
                });
                plugins.push(PluginStatus {
                    kind: Some(format!("{kind:?}").to_lowercase()),
                    version: Some(if loaded.digest.starts_with("sha256:") {
                        loaded.digest.clone()
                    } else {
                        format!("sha256:{}", loaded.digest)
                    }),
                    state: state.into(),
                    message: set
                        .rejection(&name)
                        .map(|why| format!("a newer version was rejected: {why}")),
                    queue,
                    calls: PluginMetrics::get(&m.calls),
                    faults: PluginMetrics::get(&m.traps)
                        + PluginMetrics::get(&m.timeouts)
                        + PluginMetrics::get(&m.out_of_memory)
                        + PluginMetrics::get(&m.malformed)
                        + PluginMetrics::get(&m.oversized),
                    swaps: PluginMetrics::get(&m.swaps),
                    name,
                });
            }
            for (name, why) in set.not_running() {
                plugins.push(PluginStatus {
                    name,
                    kind: None,
                    version: None,
                    state: "rejected".into(),
                    message: Some(why),
                    queue: None,
                    calls: 0,
                    faults: 0,
                    swaps: 0,
                });
            }
            plugins.sort_by(|a, b| a.name.cmp(&b.name));
        }
        let node = runner.map(|(node, r)| {
            let mut pods = BTreeMap::new();
            for (_, state, _) in r.pod_states() {
                *pods.entry(state).or_default() += 1;
            }
            NodeStatus {
                name: node.clone(),
                provider: r.provider().to_string(),
                pods,
            }
        });
        let clusters = self
            .plugins
            .get()
            .map(|set| set.cluster_health())
            .unwrap_or_default();
        HostStatus {
            plugins,
            node,
            clusters,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_host_reports_nothing_and_reads_back() {
        let status = StatusPage::default().report();
        assert_eq!(
            status,
            HostStatus {
                plugins: vec![],
                node: None,
                clusters: BTreeMap::new(),
            }
        );
        let json = serde_json::to_string(&status).unwrap();
        assert_eq!(json, r#"{"plugins":[]}"#);
        let back: HostStatus = serde_json::from_str(&json).unwrap();
        assert_eq!(back, status);
    }
}
