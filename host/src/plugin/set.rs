//! The plugin directory, loaded and kept in sync: a plugin is `NAME.wasm` +
//! `NAME.toml`. Adding one loads it; changing either file loads the new
//! version *beside* the running one and swaps only if it compiles, links,
//! matches the contract and answers its first call; removing one stops it.
//!
//! Callers take the current version (`Arc<Loaded>`) per call, so in-flight
//! calls finish on the version they started with and nothing queued is lost
//! by a swap. The previous version is kept for [`PluginSet::rollback`].

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use arc_swap::ArcSwap;
use futures::StreamExt;
use sha2::{Digest, Sha256};
use tokio::sync::broadcast;

use super::engine::PluginEngine;
use super::loaded::{LoadError, Loaded};
use super::manifest::Manifest;
use super::metrics::PluginMetrics;
use super::observe::Watcher;
use super::record::{RecordSettings, RecordWriter, Recording, Redaction};
use super::sandbox::PluginCtx;
use super::shadow::ShadowSlot;
use crate::cluster::{Cluster, ClusterAccess};

pub(crate) mod crds;
pub(crate) mod heal;
pub(crate) mod shadows;

pub(crate) use crds::read_yaml_documents;

#[derive(Debug, Clone)]
pub enum PluginEvent {
    Added(String),
    Replaced(String),
    Removed(String),
    /// A version that failed to load; the running one (if any) stays.
    Rejected(String, String),
}

/// How many changes of the set are remembered.
pub(crate) const HISTORY: usize = 50;

/// A change of the set: a version loaded, replaced, rolled back, rejected or removed.
#[derive(Debug, Clone)]
pub(crate) struct Change {
    pub(crate) at: std::time::SystemTime,
    pub(crate) plugin: String,
    pub(crate) what: String,
}

pub(crate) struct Slot {
    current: ArcSwap<Loaded>,
    previous: Mutex<Option<Arc<Loaded>>>,
    pub(crate) metrics: Arc<PluginMetrics>,
    fingerprint: Mutex<String>,
}

impl Slot {
    pub(crate) fn current(&self) -> Arc<Loaded> {
        self.current.load_full()
    }
}

pub struct PluginSet {
    engine: PluginEngine,
    dir: PathBuf,
    /// Directories behind `dir`, first found wins (plugins pulled from
    /// registries, then the built-in ones): loaded unless `dir` holds a
    /// plugin of the same name.
    dirs_behind: RwLock<Vec<PathBuf>>,
    cluster: Option<Arc<Cluster>>,
    /// The host's named clusters (`--cluster NAME=KUBECONFIG`).
    clusters: RwLock<crate::cluster::NamedClusters>,
    /// Set on node agents: providers' `workloads` import runs here.
    workloads: RwLock<Option<Arc<dyn super::provider::Workloads>>>,
    /// Set on node agents: the provider that runs the node's pods
    /// (`--provider`); any other provider in the directory is refused.
    provider: RwLock<Option<String>>,
    slots: RwLock<BTreeMap<String, Arc<Slot>>>,
    /// Metrics outlive versions and removals, so counters never reset.
    metrics: Mutex<BTreeMap<String, Arc<PluginMetrics>>>,
    /// Fingerprints of versions that were rejected, so they are not retried
    /// (and re-counted) on every scan.
    rejected: Mutex<BTreeMap<String, String>>,
    /// Why each plugin's latest version was rejected, until one loads or
    /// its files go (the Node's condition and `/readyz` name it).
    rejections: Mutex<BTreeMap<String, String>>,
    events: broadcast::Sender<PluginEvent>,
    /// The last [`HISTORY`] changes, oldest first (the status page).
    history: Mutex<std::collections::VecDeque<Change>>,
    /// One scan at a time.
    scanning: tokio::sync::Mutex<()>,
    /// Scans so far (see [`PluginSet::scans`]).
    scans: std::sync::atomic::AtomicU64,
    /// Scans finished (see [`PluginSet::scanned`]).
    scanned: std::sync::atomic::AtomicU64,
    /// Plugins whose new version a scan is loading now (compile and first call).
    loading: Mutex<BTreeSet<String>>,
    /// Directory events the watch saw (see [`PluginSet::dir_events`]).
    dir_events: Arc<DirEvents>,
    /// Where calls are recorded, and which plugins record whatever their manifest says.
    record: RwLock<Option<RecordConfig>>,
    /// One record file writer per plugin name, shared by its versions.
    writers: Mutex<BTreeMap<String, Arc<RecordWriter>>>,
    /// Per reconciler name, shared by its versions: its shadow candidate.
    shadows: Mutex<BTreeMap<String, Arc<ShadowSlot>>>,
}

/// Recording for a set (`wasmlet up|run --record NAME`).
#[derive(Debug, Clone, Default)]
pub struct RecordConfig {
    /// The record files' directory (`DATA_DIR/records`).
    pub dir: PathBuf,
    /// Plugins recorded even without a manifest `[record]` (`*`: all).
    pub plugins: Vec<String>,
}

fn fingerprint(wasm: &Path, toml: &Path) -> std::io::Result<String> {
    let mut h = Sha256::new();
    h.update(std::fs::read(wasm)?);
    h.update(std::fs::read(toml)?);
    Ok(hex::encode(h.finalize()))
}

impl PluginSet {
    pub fn new(engine: PluginEngine, dir: &Path, cluster: Option<Arc<Cluster>>) -> Arc<PluginSet> {
        let (events, _) = broadcast::channel(256);
        Arc::new(PluginSet {
            engine,
            dir: dir.to_path_buf(),
            dirs_behind: RwLock::new(Vec::new()),
            cluster,
            clusters: RwLock::default(),
            workloads: RwLock::new(None),
            provider: RwLock::new(None),
            slots: RwLock::new(BTreeMap::new()),
            metrics: Mutex::new(BTreeMap::new()),
            rejected: Mutex::new(BTreeMap::new()),
            rejections: Mutex::new(BTreeMap::new()),
            events,
            history: Mutex::default(),
            scanning: tokio::sync::Mutex::new(()),
            scans: Default::default(),
            scanned: Default::default(),
            loading: Mutex::default(),
            dir_events: Arc::default(),
            record: RwLock::new(None),
            writers: Mutex::new(BTreeMap::new()),
            shadows: Mutex::new(BTreeMap::new()),
        })
    }

    /// Turns recording on for versions loaded from now on: those whose
    /// manifest has an enabled `[record]`, and those `config.plugins` names.
    pub fn set_recording(&self, config: RecordConfig) {
        *self.record.write().unwrap_or_else(|p| p.into_inner()) = Some(config);
    }

    /// The recording of a version of `name` with `manifest` (read from `toml`), if it records.
    fn recording_for(
        &self,
        name: &str,
        manifest: &Manifest,
        toml: &Path,
    ) -> Option<Arc<Recording>> {
        let config = self
            .record
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()?;
        let by_flag = config.plugins.iter().any(|p| p == name || p == "*");
        if !by_flag && !manifest.record.as_ref().is_some_and(|r| r.enabled) {
            return None;
        }
        let section = manifest.record.clone().unwrap_or_default();
        let writer = {
            let mut writers = self.writers.lock().unwrap_or_else(|p| p.into_inner());
            match writers.get(name) {
                Some(w) => w.clone(),
                None => {
                    let settings = RecordSettings {
                        dir: config.dir.clone(),
                        max_file_bytes: u64::from(section.max_file_mib) << 20,
                        max_files: section.max_files,
                    };
                    match RecordWriter::start(name, &settings) {
                        Ok(w) => {
                            tracing::info!(plugin = %name, file = %w.path.display(), "recording calls");
                            writers.insert(name.to_string(), w.clone());
                            w
                        }
                        Err(e) => {
                            tracing::warn!(plugin = %name, dir = %config.dir.display(), error = %e, "cannot record: no record file");
                            return None;
                        }
                    }
                }
            }
        };
        Some(Arc::new(Recording {
            writer,
            manifest_text: std::fs::read_to_string(toml).unwrap_or_default().into(),
            redaction: Redaction {
                keep_secrets: section.keep_secrets,
                sensitive_hosts: section.sensitive_http_hosts,
            },
        }))
    }

    /// The named clusters versions loaded from now on may reach (`clusters`
    /// import), and where their `[clusters.NAME] crds` are applied.
    pub(crate) fn set_clusters(&self, clusters: crate::cluster::NamedClusters) {
        *self.clusters.write().unwrap_or_else(|p| p.into_inner()) = clusters;
    }

    fn clusters(&self) -> crate::cluster::NamedClusters {
        self.clusters
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The node's provider (node agents call this before the first scan):
    /// a provider of another name is refused, naming both (one provider per
    /// node, as one container runtime per kubelet).
    pub(crate) fn set_provider(&self, name: &str) {
        *self.provider.write().unwrap_or_else(|p| p.into_inner()) = Some(name.to_string());
    }

    /// Refuses `loaded` when it is a second provider: one other than the
    /// node's (`set_provider`) or, on a host without a node, one beside a
    /// provider already loaded. Two providers on one node would both take
    /// its pods' `workloads`; which one runs a pod would be anyone's guess.
    fn one_provider(&self, name: &str, loaded: Loaded) -> Result<Loaded, LoadError> {
        if loaded.manifest.plugin.kind != super::manifest::PluginKind::Provider {
            return Ok(loaded);
        }
        let node = self
            .provider
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let other = match &node {
            Some(p) if p != name => Some(p.clone()),
            Some(_) => None,
            None => self.names().into_iter().find(|n| {
                n != name
                    && self.get(n).is_some_and(|l| {
                        l.manifest.plugin.kind == super::manifest::PluginKind::Provider
                    })
            }),
        };
        let Some(other) = other else {
            return Ok(loaded);
        };
        let hint = if node.is_some() {
            format!(
                "this node runs provider {other} (--provider {other}); remove {name}.wasm and {name}.toml from the plugin directory, or start the node with --provider {name}"
            )
        } else {
            format!(
                "provider {other} is already loaded; remove {name}.wasm and {name}.toml (or {other}'s) from the plugin directory"
            )
        };
        Err(LoadError::SecondProvider {
            name: name.to_string(),
            other,
            hint,
        })
    }

    /// Makes this set able to run providers (node agents call this before the first scan).
    pub fn set_workloads(&self, w: Arc<dyn super::provider::Workloads>) {
        *self.workloads.write().unwrap_or_else(|p| p.into_inner()) = Some(w);
    }

    /// Also loads the plugins of `dir` whose names neither the plugin
    /// directory nor a directory added before holds: a user's plugin replaces
    /// a pulled one, which replaces a built-in one.
    pub(crate) fn add_dir_behind(&self, dir: &Path) {
        self.dirs_behind
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .push(dir.to_path_buf());
    }

    /// Every plugin on disk and the directory it is loaded from (the first
    /// that has it); `None` when the plugin directory cannot be read.
    fn sources(&self) -> Option<BTreeMap<String, PathBuf>> {
        let names = match Self::plugins_in(&self.dir) {
            Ok(n) => n,
            Err(e) => {
                tracing::warn!(dir = %self.dir.display(), error = %e, "cannot read the plugin directory");
                return None;
            }
        };
        let mut sources: BTreeMap<String, PathBuf> =
            names.into_iter().map(|n| (n, self.dir.clone())).collect();
        let behind = self
            .dirs_behind
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        for dir in behind {
            match Self::plugins_in(&dir) {
                Ok(names) => {
                    for n in names {
                        sources.entry(n).or_insert_with(|| dir.clone());
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => {
                    tracing::warn!(dir = %dir.display(), error = %e, "cannot read a plugin directory")
                }
            }
        }
        Some(sources)
    }

    /// The Kubernetes kinds (apiVersion, kind) the reconcilers on disk
    /// reconcile, read from their manifests without loading anything (a
    /// manifest that does not parse names none). The host starts their
    /// watches while the plugins compile.
    pub fn reconciled_kinds(&self) -> BTreeSet<(String, String)> {
        self.sources()
            .unwrap_or_default()
            .iter()
            .filter_map(|(name, dir)| Manifest::load(&dir.join(format!("{name}.toml"))).ok())
            .filter_map(|m| m.reconciles)
            .filter(|r| r.source == super::manifest::ObjectSource::Kubernetes)
            .map(|r| (r.api_version, r.kind))
            .collect()
    }

    /// Plugin names (`NAME.wasm` beside `NAME.toml`) in `dir`; a shadow
    /// candidate (`NAME.shadow.wasm`) is not one.
    fn plugins_in(dir: &Path) -> std::io::Result<BTreeSet<String>> {
        Ok(std::fs::read_dir(dir)?
            .filter_map(|e| e.ok())
            .filter_map(|e| e.file_name().to_str().map(str::to_string))
            .filter(|n| !n.starts_with('.'))
            .filter_map(|n| n.strip_suffix(".wasm").map(str::to_string))
            .filter(|n| !n.ends_with(shadows::SUFFIX))
            .filter(|n| dir.join(format!("{n}.toml")).exists())
            .collect())
    }

    pub fn subscribe(&self) -> broadcast::Receiver<PluginEvent> {
        self.events.subscribe()
    }

    pub(crate) fn slot(&self, name: &str) -> Option<Arc<Slot>> {
        self.slots
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
            .cloned()
    }

    pub fn get(&self, name: &str) -> Option<Arc<Loaded>> {
        self.slot(name).map(|s| s.current())
    }

    pub fn names(&self) -> Vec<String> {
        self.slots
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .keys()
            .cloned()
            .collect()
    }

    /// Every plugin name that has counters, loaded or not (a rejected
    /// version still counts its load failures).
    pub(crate) fn metric_names(&self) -> Vec<String> {
        self.metrics
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .keys()
            .cloned()
            .collect()
    }

    pub fn metrics(&self, name: &str) -> Arc<PluginMetrics> {
        self.metrics
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(name.to_string())
            .or_default()
            .clone()
    }

    /// Swaps the previous version back in. Returns false when there is none.
    pub fn rollback(&self, name: &str) -> bool {
        let Some(slot) = self.slot(name) else {
            return false;
        };
        let Some(prev) = slot
            .previous
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
        else {
            return false;
        };
        let now = slot.current.swap(prev);
        *slot.previous.lock().unwrap_or_else(|p| p.into_inner()) = Some(now);
        PluginMetrics::inc(&slot.metrics.swaps);
        tracing::info!(plugin = %name, "rolled back to the previous version");
        self.publish(
            PluginEvent::Replaced(name.to_string()),
            "rolled back".into(),
        );
        true
    }

    /// Loads one plugin version from `wasm` + `toml` without installing it.
    pub async fn load_version(
        &self,
        name: &str,
        wasm: &Path,
        toml: &Path,
    ) -> Result<Loaded, LoadError> {
        let manifest = Arc::new(Manifest::load(toml)?);
        let events = self.cluster.as_ref().map(|cluster| {
            super::events::EventSink::new(kube::runtime::events::Recorder::new(
                cluster.client().clone(),
                kube::runtime::events::Reporter {
                    controller: format!("wasmlet-{name}"),
                    instance: hostname(),
                },
            ))
        });
        let clusters = self.clusters();
        let missing = super::manifest::clusters::unconfigured(&manifest.clusters, &clusters);
        // (Offline tools, `plugin check`, load with no cluster at all: no warning.)
        if self.cluster.is_some() && !missing.is_empty() {
            tracing::warn!(plugin = %name, clusters = ?missing, "the manifest names clusters this host was not given (--cluster NAME=KUBECONFIG); calls there fail");
        }
        let ctx = Arc::new(PluginCtx {
            name: name.to_string(),
            manifest: manifest.clone(),
            api: self.cluster.clone().map(|c| c as Arc<dyn ClusterAccess>),
            clusters,
            metrics: self.metrics(name),
            events,
            workloads: self
                .workloads
                .read()
                .unwrap_or_else(|p| p.into_inner())
                .clone(),
            http: Some(super::http::HttpClient::shared()),
            recording: self
                .recording_for(name, &manifest, toml)
                .map(|r| r as Arc<dyn Watcher>),
            replay: false,
            shadow: (manifest.plugin.kind == super::manifest::PluginKind::Reconciler)
                .then(|| self.shadow_slot(name) as Arc<dyn Watcher>),
        });
        Loaded::load(&self.engine, wasm, manifest, ctx).await
    }

    fn publish(&self, event: PluginEvent, what: String) {
        let plugin = match &event {
            PluginEvent::Added(n)
            | PluginEvent::Replaced(n)
            | PluginEvent::Removed(n)
            | PluginEvent::Rejected(n, _) => n.clone(),
        };
        self.remember(plugin, what);
        let _ = self.events.send(event);
    }

    /// Adds a change to the history (the status page).
    fn remember(&self, plugin: String, what: String) {
        let mut h = self.history.lock().unwrap_or_else(|p| p.into_inner());
        if h.len() == HISTORY {
            h.pop_front();
        }
        h.push_back(Change {
            at: std::time::SystemTime::now(),
            plugin,
            what,
        });
    }

    /// The set's recent changes, newest first.
    pub(crate) fn history(&self) -> Vec<Change> {
        let h = self.history.lock().unwrap_or_else(|p| p.into_inner());
        h.iter().rev().cloned().collect()
    }

    /// Brings the set in line with the directory. Returns what failed.
    pub async fn scan(&self) -> Vec<(String, LoadError)> {
        let _one = self.scanning.lock().await;
        self.scans
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut failures = Vec::new();
        let mut present = BTreeSet::new();
        let Some(sources) = self.sources() else {
            self.scanned
                .fetch_add(1, std::sync::atomic::Ordering::Release);
            return failures;
        };
        let mut changed = Vec::new();
        for (name, dir) in &sources {
            let name = name.clone();
            let wasm = dir.join(format!("{name}.wasm"));
            let toml = dir.join(format!("{name}.toml"));
            present.insert(name.clone());
            let Ok(fp) = fingerprint(&wasm, &toml) else {
                continue;
            };
            if let Some(slot) = self.slot(&name)
                && *slot.fingerprint.lock().unwrap_or_else(|p| p.into_inner()) == fp
            {
                continue;
            }
            if self
                .rejected
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get(&name)
                == Some(&fp)
            {
                continue;
            }
            changed.push((name, wasm, toml, fp));
        }
        self.loading
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend(changed.iter().map(|(name, ..)| name.clone()));
        // Compiles run side by side (a fresh host's eleven built-ins one after
        // another took most of its start); CRDs and installs stay in name
        // order, one at a time, as before.
        let parallel = std::thread::available_parallelism().map_or(1, |n| n.get());
        let mut loads = futures::stream::iter(changed)
            .map(|(name, wasm, toml, fp)| async move {
                let loaded = self.load_version(&name, &wasm, &toml).await;
                (name, fp, loaded)
            })
            .buffered(parallel);
        while let Some((name, fp, loaded)) = loads.next().await {
            let loaded = match loaded.and_then(|l| self.one_provider(&name, l)) {
                Ok(loaded) => self
                    .apply_crds(&name, &loaded.manifest)
                    .await
                    .map(|()| loaded),
                Err(e) => Err(e),
            };
            self.loading
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&name);
            match loaded {
                Ok(loaded) => {
                    self.rejected
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .remove(&name);
                    self.rejections
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .remove(&name);
                    self.install(&name, loaded, fp);
                }
                Err(e) => {
                    PluginMetrics::inc(&self.metrics(&name).load_failures);
                    tracing::error!(plugin = %name, error = %e, "plugin version rejected; the running version (if any) stays");
                    self.rejected
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .insert(name.clone(), fp);
                    self.rejections
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .insert(name.clone(), e.to_string());
                    self.publish(
                        PluginEvent::Rejected(name.clone(), e.to_string()),
                        format!("rejected: {e}"),
                    );
                    failures.push((name, e));
                }
            }
        }
        let gone: Vec<String> = self
            .names()
            .into_iter()
            .filter(|n| !present.contains(n))
            .collect();
        self.rejections
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|n, _| present.contains(n));
        self.scan_shadows(&sources).await;
        for name in gone {
            self.slots
                .write()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&name);
            self.stop_shadow(&name);
            tracing::info!(plugin = %name, "plugin removed");
            self.publish(PluginEvent::Removed(name), "removed".into());
        }
        self.scanned
            .fetch_add(1, std::sync::atomic::Ordering::Release);
        failures
    }

    fn install(&self, name: &str, loaded: Loaded, fp: String) {
        let loaded = Arc::new(loaded);
        let digest = loaded.digest.clone();
        let took = loaded.load_time;
        let existing = self.slot(name);
        match existing {
            Some(slot) => {
                let old = slot.current.swap(loaded);
                *slot.previous.lock().unwrap_or_else(|p| p.into_inner()) = Some(old);
                *slot.fingerprint.lock().unwrap_or_else(|p| p.into_inner()) = fp;
                PluginMetrics::inc(&slot.metrics.swaps);
                tracing::info!(plugin = %name, %digest, ?took, "plugin replaced (previous version kept for rollback)");
                self.publish(
                    PluginEvent::Replaced(name.to_string()),
                    format!("replaced by {digest}"),
                );
            }
            None => {
                let slot = Arc::new(Slot {
                    current: ArcSwap::new(loaded),
                    previous: Mutex::new(None),
                    metrics: self.metrics(name),
                    fingerprint: Mutex::new(fp),
                });
                self.slots
                    .write()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(name.to_string(), slot);
                tracing::info!(plugin = %name, %digest, ?took, "plugin loaded");
                self.publish(
                    PluginEvent::Added(name.to_string()),
                    format!("loaded {digest}"),
                );
            }
        }
    }

    /// Directory events the watch has seen: `(ignored, passed on)`; an
    /// ignored one (a file opened or read) can change nothing a scan finds,
    /// one passed on starts a scan once the directory is quiet.
    pub fn dir_events(&self) -> (u64, u64) {
        let get = |c: &std::sync::atomic::AtomicU64| c.load(std::sync::atomic::Ordering::Acquire);
        (get(&self.dir_events.ignored), get(&self.dir_events.passed))
    }

    /// How many times the directory has been scanned.
    pub fn scans(&self) -> u64 {
        self.scans.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// How many scans have finished: until the first, a plugin not loaded
    /// may still be on its way.
    pub(crate) fn scanned(&self) -> u64 {
        self.scanned.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Whether a scan is loading a new version of plugin `name` now.
    pub(crate) fn loading(&self, name: &str) -> bool {
        self.loading
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(name)
    }

    /// Why plugin `name`'s latest version was rejected, while no later
    /// version has loaded and its files are still in the directory.
    pub(crate) fn rejection(&self, name: &str) -> Option<String> {
        self.rejections
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
            .cloned()
    }

    /// Plugins in the directory with no running version: their only
    /// version was rejected (name, why).
    pub(crate) fn not_running(&self) -> Vec<(String, String)> {
        let rejections = self.rejections.lock().unwrap_or_else(|p| p.into_inner());
        rejections
            .iter()
            .filter(|(n, _)| self.slot(n).is_none())
            .map(|(n, why)| (n.clone(), why.clone()))
            .collect()
    }

    /// Scans now, then again whenever the directory changes (debounced).
    pub async fn watch(self: Arc<Self>) -> anyhow::Result<()> {
        use notify::{RecursiveMode, Watcher};
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let seen = self.dir_events.clone();
        let mut watcher = notify::recommended_watcher(move |ev: notify::Result<notify::Event>| {
            let Ok(ev) = ev else { return };
            let count = if changes_files(&ev.kind) {
                let _ = tx.send(());
                &seen.passed
            } else {
                &seen.ignored
            };
            count.fetch_add(1, std::sync::atomic::Ordering::Release);
        })?;
        watcher.watch(&self.dir, RecursiveMode::NonRecursive)?;
        self.scan().await;
        while rx.recv().await.is_some() {
            // Writers copy a file in several steps: wait for quiet.
            tokio::time::sleep(Duration::from_millis(150)).await;
            while rx.try_recv().is_ok() {}
            self.scan().await;
        }
        Ok(())
    }
}

/// Directory events the watch saw, by what it did with them.
#[derive(Default)]
struct DirEvents {
    ignored: std::sync::atomic::AtomicU64,
    passed: std::sync::atomic::AtomicU64,
}

/// Whether a directory event can change what a scan finds. A file opened or
/// closed unchanged cannot: notify reports opens (inotify `IN_OPEN`), and the
/// scan itself opens every plugin to fingerprint it, so reacting to them had
/// an idle host rescan, reading and hashing every plugin, about six times a
/// second.
fn changes_files(kind: &notify::EventKind) -> bool {
    !matches!(kind, notify::EventKind::Access(_))
}

fn hostname() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|s| s.trim().to_string())
}
