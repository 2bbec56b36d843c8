//! One reconciler plugin's controller: its watches feed its own workqueue
//! (so one plugin's backlog never starves another's), its workers run the
//! host-owned reconcile loop for one key at a time.
//!
//! This file holds the controller and its start; `enqueue.rs` what puts
//! keys in its queue, `reconcile.rs` what its workers do with them.

use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinSet;
use wasmlet_apimachinery::selector::{FieldSelector, LabelSelector};

use super::expectations::Expectations;
use super::leader::Leadership;
use super::metrics::{ControllerMetrics, ControllerSeries};
use super::source::Source;
use super::workqueue::{QueueConfig, WorkQueue};
use crate::cluster::ClientError;
use crate::cluster::cache::{Caches, KindCache};
use crate::plugin::manifest::Manifest;

/// Settings every controller shares.
#[derive(Clone, Debug)]
pub struct ControllerConfig {
    pub queue: QueueConfig,
    /// Every cached object is re-enqueued at low priority this often.
    pub resync: Duration,
    pub expectations_timeout: Duration,
    /// Field manager of the host's own writes.
    pub field_manager: String,
    /// `false`: a host that FIFOs everything at one priority (for benchmarks).
    pub priorities: bool,
    /// Where `source = "postgres"` reconcilers find their tables.
    pub datastore: Option<crate::datastore::Datastore>,
    /// The host's named clusters: `[[watches]] cluster = ...` watch there.
    pub clusters: crate::cluster::NamedClusters,
}

impl Default for ControllerConfig {
    fn default() -> Self {
        ControllerConfig {
            queue: QueueConfig::default(),
            resync: Duration::from_secs(600),
            expectations_timeout: Duration::from_secs(300),
            field_manager: "wasmlet".into(),
            priorities: true,
            datastore: None,
            clusters: Default::default(),
        }
    }
}

/// The host's queue settings with the plugin's say on the low lane: its rate,
/// and idle workers taking low items while one worker stays free for high
/// work (the only worker, at concurrency 1), by default for a Kubernetes kind
/// only (`table`: the plugin reconciles a datastore table).
pub(super) fn queue_config(
    host: &QueueConfig,
    limits: &crate::plugin::manifest::Limits,
    table: bool,
) -> QueueConfig {
    let workers = limits.concurrency as usize;
    QueueConfig {
        low_per_minute: limits.low_per_minute.unwrap_or(host.low_per_minute),
        idle_low: if limits.low_when_idle(table) {
            workers.saturating_sub(1).max(1)
        } else {
            0
        },
        ..host.clone()
    }
}

/// `ns/name`, or `name` for cluster-scoped kinds.
pub(crate) fn key_of(namespace: Option<&str>, name: &str) -> String {
    match namespace {
        Some(ns) if !ns.is_empty() => format!("{ns}/{name}"),
        _ => name.to_string(),
    }
}

pub(super) fn split_key(key: &str) -> (Option<&str>, &str) {
    match key.split_once('/') {
        Some((ns, name)) => (Some(ns), name),
        None => (None, key),
    }
}

/// Outcome label for `controller_runtime_reconcile_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    Success,
    Error,
    Requeue,
    RequeueAfter,
}

impl Outcome {
    pub(crate) const ALL: [Outcome; 4] = [
        Outcome::Success,
        Outcome::Error,
        Outcome::Requeue,
        Outcome::RequeueAfter,
    ];

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Outcome::Success => "success",
            Outcome::Error => "error",
            Outcome::Requeue => "requeue",
            Outcome::RequeueAfter => "requeue_after",
        }
    }
}

/// Why a controller did not start. Only [`StartError::Kind`] may heal by
/// itself (a CRD not served yet, an API server restarting), so only it is
/// retried.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("plugin {0} is not loaded")]
    NotLoaded(String),
    #[error("plugin {0} reconciles nothing")]
    NotAReconciler(String),
    #[error(
        "plugin {0} reconciles a datastore table, but the host has no datastore (--datastore-url or WASMLET_DATASTORE_URL)"
    )]
    NoDatastore(String),
    #[error("{plugin}: reconciles.table: {source}")]
    Table {
        plugin: String,
        #[source]
        source: crate::datastore::DatastoreError,
    },
    #[error("{plugin}: reconciles.{field}: {message}")]
    Selector {
        plugin: String,
        /// `label-selector` or `field-selector`.
        field: &'static str,
        message: String,
    },
    #[error("{plugin}: {role} {api_version} {kind}: {source}")]
    Kind {
        plugin: String,
        /// `reconciles`, `owns` or `watches`: the manifest table that names the kind.
        role: &'static str,
        api_version: String,
        kind: String,
        #[source]
        source: ClientError,
    },
}

impl StartError {
    pub(crate) fn retryable(&self) -> bool {
        matches!(self, StartError::Kind { .. })
    }
}

pub struct Controller {
    pub(crate) name: String,
    pub(super) source: Arc<dyn Source>,
    pub(super) caches: Arc<Caches>,
    pub(super) primary: Arc<KindCache>,
    pub queue: WorkQueue<String>,
    pub(super) expectations: Expectations,
    pub(super) config: ControllerConfig,
    pub(super) metrics: ControllerSeries,
    pub(super) selector: LabelSelector,
    /// `reconciles.field-selector`, matched against the cached object.
    pub(super) fields: FieldSelector,
    pub(super) manifest: Arc<Manifest>,
    /// Whether reconciles may run (leader election); checked before every call.
    pub(crate) leading: Leadership,
    /// Per key, the status last written and whether it waits for a
    /// requeue-after (a watch mapped `waiting` calls those at once).
    pub(super) keys: super::keys::Keys,
    /// The host's own status writes: their watch events reconcile nothing.
    pub(super) own_writes: super::own_writes::OwnWrites,
    /// The last [`RECENT_ERRORS`] failed reconciles, newest last (the status page).
    pub(super) recent_errors: std::sync::Mutex<std::collections::VecDeque<RecentError>>,
    /// Whether the "status is pruned" warning was given.
    pub(super) warned_pruned: std::sync::atomic::AtomicBool,
    /// The host's Events about the primary objects (a failed finalize).
    pub(super) recorder: kube::runtime::events::Recorder,
}

/// How many failed reconciles a controller remembers for the status page.
pub(crate) const RECENT_ERRORS: usize = 20;

/// A failed reconcile, as the status page lists it.
#[derive(Debug, Clone)]
pub(crate) struct RecentError {
    pub(crate) at: std::time::SystemTime,
    pub(crate) key: String,
    pub(crate) reason: String,
    pub(crate) message: String,
}

impl Controller {
    pub(super) fn note_error(&self, key: &str, reason: &str, message: &str) {
        let mut errors = self.recent_errors.lock().unwrap_or_else(|p| p.into_inner());
        if errors.len() == RECENT_ERRORS {
            errors.pop_front();
        }
        errors.push_back(RecentError {
            at: std::time::SystemTime::now(),
            key: key.to_string(),
            reason: reason.to_string(),
            message: message.to_string(),
        });
    }

    /// Reconciles so far, of any outcome (the status page's rate chart).
    pub(crate) fn reconciles(&self) -> u64 {
        self.metrics.reconciles()
    }

    /// The last failed reconciles, newest first.
    pub(crate) fn recent_errors(&self) -> Vec<RecentError> {
        let errors = self.recent_errors.lock().unwrap_or_else(|p| p.into_inner());
        errors.iter().rev().cloned().collect()
    }
}

impl Controller {
    /// Starts watches and workers for plugin `name`. Stops when `tasks` is dropped.
    pub async fn start(
        name: &str,
        source: Arc<dyn Source>,
        caches: Arc<Caches>,
        config: ControllerConfig,
        metrics: ControllerMetrics,
        leading: Leadership,
    ) -> Result<(Arc<Controller>, JoinSet<()>), StartError> {
        let loaded = source
            .current(name)
            .ok_or_else(|| StartError::NotLoaded(name.to_string()))?;
        let manifest = Arc::new(loaded.manifest().clone());
        let rec = manifest
            .reconciles
            .clone()
            .ok_or_else(|| StartError::NotAReconciler(name.to_string()))?;
        let kind_error = |role, api_version: &str, kind: &str| {
            let (api_version, kind) = (api_version.to_string(), kind.to_string());
            move |source| StartError::Kind {
                plugin: name.to_string(),
                role,
                api_version,
                kind,
                source,
            }
        };
        let bad_selector = |field: &'static str| {
            move |e: wasmlet_apimachinery::selector::SelectorError| StartError::Selector {
                plugin: name.to_string(),
                field,
                message: e.to_string(),
            }
        };
        let selector = LabelSelector::parse(rec.label_selector.as_deref().unwrap_or(""))
            .map_err(bad_selector("label-selector"))?;
        let fields = FieldSelector::parse(rec.field_selector.as_deref().unwrap_or(""))
            .map_err(bad_selector("field-selector"))?;
        let primary = caches
            .cache(&rec.api_version, &rec.kind)
            .await
            .map_err(kind_error("reconciles", &rec.api_version, &rec.kind))?;
        let queue = WorkQueue::new(
            name,
            queue_config(&config.queue, &manifest.limits, false),
            Some(metrics.queue()),
        );
        let series = metrics.series(name);
        let controller = Arc::new(Controller {
            name: name.to_string(),
            source,
            caches: caches.clone(),
            primary: primary.clone(),
            queue,
            expectations: Expectations::new(config.expectations_timeout),
            config,
            metrics: series.clone(),
            selector,
            fields,
            manifest: manifest.clone(),
            leading,
            keys: super::keys::Keys::new(series.waiting()),
            own_writes: Default::default(),
            recent_errors: Default::default(),
            warned_pruned: Default::default(),
            recorder: kube::runtime::events::Recorder::new(
                caches.client().clone(),
                kube::runtime::events::Reporter {
                    controller: format!("wasmlet-{name}"),
                    instance: None,
                },
            ),
        });
        let mut tasks = JoinSet::new();
        {
            let c = controller.clone();
            // Anything cached or listed already (another plugin, or the
            // host ahead of the plugins' compiles, started the watch first).
            let (rx, objects) = primary.subscribe_with_objects();
            for o in objects {
                c.enqueue_primary(&o, true);
            }
            tasks.spawn(async move { c.pump_primary(rx).await });
        }
        for owned in &manifest.owns {
            let cache = caches
                .cache(&owned.api_version, &owned.kind)
                .await
                .map_err(kind_error("owns", &owned.api_version, &owned.kind))?;
            let c = controller.clone();
            let rx = cache.subscribe();
            let changes = owned.changes;
            tasks.spawn(async move { c.pump_related(rx, None, changes).await });
        }
        for (w, map) in manifest.watches.iter().filter(|(w, _)| w.cluster.is_none()) {
            let cache = caches
                .cache(&w.api_version, &w.kind)
                .await
                .map_err(kind_error("watches", &w.api_version, &w.kind))?;
            let c = controller.clone();
            let rx = cache.subscribe();
            let (map, changes) = (map.clone(), w.changes);
            tasks.spawn(async move { c.pump_related(rx, Some(map), changes).await });
        }
        for remote in
            super::remote::remote_watches(name, &manifest, &controller.config.clusters, None)
        {
            let c = controller.clone();
            tasks.spawn(async move {
                let rx = remote.cache(&c.name).await.subscribe();
                let changes = remote.changes();
                c.pump_related(rx, Some(remote.map), changes).await
            });
        }
        {
            let c = controller.clone();
            tasks.spawn(async move { c.resync_loop().await });
        }
        for _ in 0..manifest.limits.workers() {
            let c = controller.clone();
            tasks.spawn(super::worker::run(c));
        }
        Ok((controller, tasks))
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    fn limits(extra: &str) -> crate::plugin::manifest::Limits {
        let text = format!(
            "[plugin]\nkind = \"reconciler\"\ncontract = \"0.1.0\"\n\
             [reconciles]\napi-version = \"v1\"\nkind = \"ConfigMap\"\n[limits]\n{extra}"
        );
        Manifest::parse(&text, Path::new("/plugins/x.toml"))
            .unwrap()
            .limits
    }

    #[test]
    fn idle_workers_take_low_items_but_one_stays_free() {
        let host = QueueConfig::default();
        let q = queue_config(&host, &limits("concurrency = 16"), false);
        assert_eq!((q.idle_low, q.low_per_minute), (15, 300));
        // The only worker takes low work when idle.
        assert_eq!(queue_config(&host, &limits(""), false).idle_low, 1);
    }

    #[test]
    fn a_plugin_may_cap_its_low_lane() {
        let q = queue_config(
            &QueueConfig::default(),
            &limits("concurrency = 4\nlow-per-minute = 60\nlow-when-idle = false"),
            false,
        );
        assert_eq!((q.idle_low, q.low_per_minute), (0, 60));
    }

    #[test]
    fn a_tables_low_lane_is_a_rate_unless_the_plugin_opts_in() {
        let host = QueueConfig::default();
        let q = queue_config(&host, &limits("concurrency = 16"), true);
        assert_eq!((q.idle_low, q.low_per_minute), (0, 300));
        let q = queue_config(
            &host,
            &limits("concurrency = 16\nlow-when-idle = true"),
            true,
        );
        assert_eq!(q.idle_low, 15);
    }
}
