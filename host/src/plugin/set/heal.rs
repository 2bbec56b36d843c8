//! Named clusters that heal: a supervisor per named cluster checks, every
//! [`CHECK_EVERY`] and whenever a plugin loads, that it answers and that the
//! CRDs the loaded plugins ship there (`[clusters.NAME] crds`, else `*`'s)
//! are in it, and applies the missing ones; then it starts the caches of the
//! kinds their rules there let them read (so a first read is served from
//! memory, not the start of a watch). So a region that was down when a plugin loaded, or that
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

use super::crds::{apply_files, read_yaml_documents};
use super::{PluginEvent, PluginSet};
use crate::cluster::cache::Caches;
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

/// What a plugin declares for one cluster: its CRD files and the CRD names
/// in them, and the resources its rules let it read there.
struct Shipped {
    plugin: String,
    files: Vec<PathBuf>,
    names: Vec<String>,
    /// `(api group, resource)` its rules grant `get`, `list` or `watch` on,
    /// named (not `*`): the kinds whose caches start with the plugin.
    reads: Vec<(String, String)>,
}

/// The `(group, resource)` pairs `rules` let a plugin read, wildcards and
/// subresources left out.
fn readable(rules: &[crate::plugin::manifest::Rule]) -> Vec<(String, String)> {
    let reads = |v: &String| matches!(v.as_str(), "get" | "list" | "watch" | "*");
    let mut out = Vec::new();
    for r in rules.iter().filter(|r| r.verbs.iter().any(reads)) {
        for g in r.api_groups.iter().filter(|g| *g != "*") {
            for res in r.resources.iter().filter(|x| *x != "*" && !x.contains('/')) {
                if !out.contains(&(g.clone(), res.clone())) {
                    out.push((g.clone(), res.clone()));
                }
            }
        }
    }
    out
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
            events: self.subscribe(),
            cluster: name.to_string(),
            generation,
            caches,
            health,
            started: BTreeSet::new(),
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
                let reads = readable(&table.rules);
                (!names.is_empty() || !reads.is_empty()).then(|| Shipped {
                    plugin,
                    files: table.crds.clone(),
                    names,
                    reads,
                })
            })
            .collect()
    }
}

/// One cluster's supervisor: a check, then the next after [`CHECK_EVERY`],
/// or after the back-off when it failed.
struct Supervisor {
    set: Weak<PluginSet>,
    /// A plugin loaded or replaced: check now, not at the next tick.
    events: tokio::sync::broadcast::Receiver<PluginEvent>,
    cluster: String,
    /// The client it checks; another generation of the cluster has its own.
    generation: u64,
    caches: Arc<Caches>,
    health: Arc<Mutex<ClusterHealth>>,
    /// The `(group, resource)` caches it started.
    started: BTreeSet<(String, String)>,
}

impl Supervisor {
    async fn run(mut self) {
        let mut wait = RETRY_FIRST;
        loop {
            let Some(set) = self.set.upgrade() else {
                return;
            };
            if set.clusters().generation(&self.cluster) != Some(self.generation) {
                tracing::info!(cluster = %self.cluster, "named cluster removed or replaced; its supervisor stops");
                return;
            }
            let shipped = set.shipped_to(&self.cluster);
            drop(set);
            let found = tokio::time::timeout(
                CHECK_TIMEOUT,
                check(&self.cluster, self.caches.client(), &shipped),
            )
            .await
            .unwrap_or_else(|_| Err(format!("no answer in {}s", CHECK_TIMEOUT.as_secs())));
            let reached = found.is_ok();
            let next = record(&self.health, &self.cluster, found, &mut wait);
            if reached {
                self.start_informers(&shipped).await;
            }
            self.until_next(next).await;
        }
    }

    /// Starts the caches of the kinds the loaded plugins may read here, so
    /// that their first read is served from memory (and, with
    /// `[[watches]]`, their changes heard) instead of starting a watch then.
    async fn start_informers(&mut self, shipped: &[Shipped]) {
        for s in shipped {
            for (group, resource) in &s.reads {
                let key = (group.clone(), resource.clone());
                if self.started.contains(&key) {
                    continue;
                }
                match self.caches.cache_resource(group, resource).await {
                    Ok(_) => {
                        tracing::info!(plugin = %s.plugin, cluster = %self.cluster, group, resource, "informer started");
                        self.started.insert(key);
                    }
                    Err(e) => {
                        tracing::debug!(plugin = %s.plugin, cluster = %self.cluster, group, resource, error = %e, "informer not started yet")
                    }
                }
            }
        }
        let mut h = self.health.lock().unwrap_or_else(|p| p.into_inner());
        h.informers = self.started.len();
    }

    /// Sleeps `next`, or less when a plugin loads.
    async fn until_next(&mut self, next: Duration) {
        let sleep = tokio::time::sleep(next);
        tokio::pin!(sleep);
        loop {
            tokio::select! {
                _ = &mut sleep => return,
                event = self.events.recv() => match event {
                    Ok(PluginEvent::Added(_) | PluginEvent::Replaced(_)) => return,
                    Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => {
                        sleep.as_mut().await;
                        return;
                    }
                },
            }
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
