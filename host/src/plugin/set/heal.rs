//! Named clusters that heal: a supervisor per named cluster checks, every
//! [`CHECK_EVERY`], that it answers and that the CRDs the loaded plugins
//! ship there (`[clusters.NAME] crds`, else `*`'s) are in it, and applies
//! the missing ones. So a region that was down when a plugin loaded, or that
//! came back rebuilt and empty, gets its CRDs without a reload or a restart.
//! A failed check is retried with back-off (1 s, doubling to 30 s). What each
//! check found is the cluster's [`ClusterHealth`] (the status page, `GET
//! /status`, `wasmlet status`).
//!
//! A check lists the cluster's CRDs (metadata only) instead of watching
//! them: a watch resumed against a server rebuilt from an empty store asks
//! for a resourceVersion that server never had, and nothing in the watch
//! protocol says "relist" for that; a list every 10 s per region costs one
//! small request and finds a missing CRD whatever removed it.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

use super::PluginSet;
use super::crds::{apply_files, read_yaml_documents};
use crate::cluster::named::ClusterHealth;
use crate::plugin::manifest::clusters;

/// Between two checks of a cluster that answered.
const CHECK_EVERY: Duration = Duration::from_secs(10);
/// The back-off after a failed check: from this, doubling...
const RETRY_FIRST: Duration = Duration::from_secs(1);
/// ...to this.
const RETRY_MAX: Duration = Duration::from_secs(30);
/// A check that takes longer counts as failed (an unreachable region must
/// not hold its supervisor for the client's own timeouts).
const CHECK_TIMEOUT: Duration = Duration::from_secs(20);

/// A plugin's CRDs for one cluster: its name, its files, the CRD names in them.
struct Shipped {
    plugin: String,
    files: Vec<PathBuf>,
    names: Vec<String>,
}

impl PluginSet {
    /// Starts a supervisor per named cluster; each ends when the set is
    /// dropped or its cluster removed or given again.
    pub(crate) fn supervise_clusters(self: &Arc<Self>) {
        for name in self.clusters().names() {
            self.supervise(&name);
        }
    }

    fn supervise(self: &Arc<Self>, name: &str) {
        let named = self.clusters();
        let (Some(caches), Some(health), Some(generation)) = (
            named.caches(name),
            named.health(name),
            named.generation(name),
        ) else {
            return;
        };
        let supervisor = Supervisor {
            set: Arc::downgrade(self),
            cluster: name.to_string(),
            generation,
            client: caches.client().clone(),
            health,
        };
        tokio::spawn(supervisor.run());
    }

    /// Adds named cluster `name` while the host runs, or gives it a new
    /// client (its kubeconfig changed), and starts its supervisor: the
    /// loaded plugins' calls reach it from their next call, and their CRDs
    /// for it are applied at its first check.
    pub(crate) fn add_cluster(self: &Arc<Self>, name: &str, client: kube::Client) {
        self.clusters().insert(name, client);
        self.supervise(name);
    }

    /// Removes named cluster `name`: calls there fail from now on as for a
    /// cluster never given ("not configured on this host"); its supervisor
    /// stops. Whether it was there.
    pub(crate) fn remove_cluster(&self, name: &str) -> bool {
        self.clusters().remove(name)
    }

    /// The named clusters' health, by name.
    pub(crate) fn cluster_health(&self) -> std::collections::BTreeMap<String, ClusterHealth> {
        self.clusters().report()
    }

    /// What each loaded plugin ships to `cluster`.
    fn shipped_to(&self, cluster: &str) -> Vec<Shipped> {
        self.names()
            .into_iter()
            .filter_map(|plugin| {
                let loaded = self.get(&plugin)?;
                let table = clusters::table_for(&loaded.manifest.clusters, cluster)?;
                let names = table
                    .crds
                    .iter()
                    .flat_map(|f| read_yaml_documents(f).unwrap_or_default())
                    .filter_map(|d| Some(d.pointer("/metadata/name")?.as_str()?.to_string()))
                    .collect::<Vec<_>>();
                (!names.is_empty()).then(|| Shipped {
                    plugin,
                    files: table.crds.clone(),
                    names,
                })
            })
            .collect()
    }
}

/// One cluster's supervisor: a check, then the next after [`CHECK_EVERY`],
/// or after the back-off when it failed.
struct Supervisor {
    set: Weak<PluginSet>,
    cluster: String,
    /// The client it checks; another generation of the cluster has its own.
    generation: u64,
    client: kube::Client,
    health: Arc<Mutex<ClusterHealth>>,
}

impl Supervisor {
    async fn run(self) {
        let cluster = self.cluster.as_str();
        let mut wait = RETRY_FIRST;
        loop {
            let Some(set) = self.set.upgrade() else {
                return;
            };
            if set.clusters().generation(cluster) != Some(self.generation) {
                tracing::info!(
                    cluster,
                    "named cluster removed or replaced; its supervisor stops"
                );
                return;
            }
            let shipped = set.shipped_to(cluster);
            drop(set);
            let found = tokio::time::timeout(CHECK_TIMEOUT, check(cluster, &self.client, &shipped))
                .await
                .unwrap_or_else(|_| Err(format!("no answer in {}s", CHECK_TIMEOUT.as_secs())));
            let next = record(&self.health, cluster, found, &mut wait);
            tokio::time::sleep(next).await;
        }
    }
}

/// Writes what a check found into the cluster's health; the wait until the
/// next check (`wait` is the back-off, reset by a check that reached it).
fn record(
    health: &Mutex<ClusterHealth>,
    cluster: &str,
    found: Result<Found, String>,
    wait: &mut Duration,
) -> Duration {
    let mut h = health.lock().unwrap_or_else(|p| p.into_inner());
    match found {
        Ok(found) => {
            if !h.connected {
                tracing::info!(cluster, crds = found.wanted, "named cluster reachable");
            }
            h.reached(found.wanted, found.present, found.applied);
            *wait = RETRY_FIRST;
            CHECK_EVERY
        }
        Err(e) => {
            if h.connected || h.checked_at.is_none() {
                tracing::warn!(cluster, error = %e, "named cluster unreachable; retrying with back-off");
            }
            h.unreachable(e);
            let now = *wait;
            *wait = (*wait * 2).min(RETRY_MAX);
            now
        }
    }
}

/// What one check found.
struct Found {
    wanted: usize,
    present: usize,
    /// CRDs that were missing and are there now.
    applied: u64,
}

/// Reaches the cluster, lists its CRDs, and applies each plugin's missing ones.
async fn check(cluster: &str, client: &kube::Client, shipped: &[Shipped]) -> Result<Found, String> {
    client
        .apiserver_version()
        .await
        .map_err(|e| e.to_string())?;
    let wanted = shipped.iter().map(|s| s.names.len()).sum();
    if wanted == 0 {
        return Ok(Found {
            wanted,
            present: 0,
            applied: 0,
        });
    }
    let mut have = crd_names(client).await?;
    let mut missing: Vec<&String> = Vec::new();
    for s in shipped {
        let before = missing.len();
        missing.extend(s.names.iter().filter(|n| !have.contains(*n)));
        if missing.len() == before {
            continue;
        }
        tracing::info!(plugin = %s.plugin, cluster, missing = missing.len() - before, "CRDs missing in the named cluster; applying them again");
        if let Err(e) = apply_files(client, &s.plugin, &s.files, Some(cluster)).await {
            tracing::warn!(plugin = %s.plugin, cluster, error = %e, "CRDs not applied");
        }
    }
    if !missing.is_empty() {
        have = crd_names(client).await?;
    }
    let applied = missing.iter().filter(|n| have.contains(**n)).count() as u64;
    let present = shipped
        .iter()
        .flat_map(|s| &s.names)
        .filter(|n| have.contains(*n))
        .count();
    Ok(Found {
        wanted,
        present,
        applied,
    })
}

/// The names of the cluster's CRDs.
async fn crd_names(client: &kube::Client) -> Result<BTreeSet<String>, String> {
    let api: kube::Api<CustomResourceDefinition> = kube::Api::all(client.clone());
    let list = api
        .list_metadata(&Default::default())
        .await
        .map_err(|e| e.to_string())?;
    Ok(list
        .items
        .into_iter()
        .filter_map(|m| m.metadata.name)
        .collect())
}
