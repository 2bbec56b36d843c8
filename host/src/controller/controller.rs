//! One reconciler plugin's controller: its watches feed its own workqueue
//! (so one plugin's backlog never starves another's), its workers run the
//! host-owned reconcile loop for one key at a time.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::api::{Api, DynamicObject, Patch, PatchParams};
use serde_json::{Value, json};
use tokio::sync::broadcast::error::RecvError;
use tokio::task::JoinSet;
use tracing::Instrument;
use wasmlet_apimachinery::selector::LabelSelector;

use super::expectations::{Expectations, Seen};
use super::leader::Leadership;
use super::metrics::ControllerMetrics;
use super::source::Source;
use super::status::{GuestResult, desired_status, status_of};
use super::workqueue::{Priority, QueueConfig, WorkQueue};
use crate::cluster::ClientError;
use crate::cluster::cache::{CacheEvent, Caches, KindCache};
use crate::plugin::manifest::{Manifest, MapFn};
use crate::plugin::outcome::Finalized;

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
}

impl Default for ControllerConfig {
    fn default() -> Self {
        ControllerConfig {
            queue: QueueConfig::default(),
            resync: Duration::from_secs(600),
            expectations_timeout: Duration::from_secs(300),
            field_manager: "wasmlet".into(),
            priorities: true,
        }
    }
}

/// `ns/name`, or `name` for cluster-scoped kinds.
pub fn key_of(namespace: Option<&str>, name: &str) -> String {
    match namespace {
        Some(ns) if !ns.is_empty() => format!("{ns}/{name}"),
        _ => name.to_string(),
    }
}

fn split_key(key: &str) -> (Option<&str>, &str) {
    match key.split_once('/') {
        Some((ns, name)) => (Some(ns), name),
        None => (None, key),
    }
}

/// Outcome label for `controller_runtime_reconcile_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Success,
    Error,
    Requeue,
    RequeueAfter,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
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
    #[error("{plugin}: reconciles.label-selector: {message}")]
    Selector { plugin: String, message: String },
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
    pub fn retryable(&self) -> bool {
        matches!(self, StartError::Kind { .. })
    }
}

pub struct Controller {
    pub name: String,
    source: Arc<dyn Source>,
    caches: Arc<Caches>,
    primary: Arc<KindCache>,
    pub queue: WorkQueue<String>,
    expectations: Expectations,
    config: ControllerConfig,
    metrics: ControllerMetrics,
    selector: LabelSelector,
    manifest: Arc<Manifest>,
    /// Whether reconciles may run (leader election); checked before every call.
    pub leading: Leadership,
    /// Per key, the status last sent and what the server kept of it.
    written: std::sync::Mutex<HashMap<String, Written>>,
    /// Whether the "status is pruned" warning was given.
    warned_pruned: std::sync::atomic::AtomicBool,
}

/// A status write: what the host sent and what the server stored. They differ
/// when the CRD's status schema prunes host-owned fields (`conditions`,
/// `observedGeneration`); comparing the next desired status with what was
/// *sent* then keeps an unchanged object at zero API calls.
struct Written {
    sent: Value,
    kept: Value,
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
        let selector =
            LabelSelector::parse(rec.label_selector.as_deref().unwrap_or("")).map_err(|e| {
                StartError::Selector {
                    plugin: name.to_string(),
                    message: e.to_string(),
                }
            })?;
        let primary = caches
            .cache(&rec.api_version, &rec.kind)
            .await
            .map_err(kind_error("reconciles", &rec.api_version, &rec.kind))?;
        let queue = WorkQueue::new(name, config.queue.clone(), Some(metrics.queue()));
        let controller = Arc::new(Controller {
            name: name.to_string(),
            source,
            caches: caches.clone(),
            primary: primary.clone(),
            queue,
            expectations: Expectations::new(config.expectations_timeout),
            config,
            metrics,
            selector,
            manifest: manifest.clone(),
            leading,
            written: Default::default(),
            warned_pruned: Default::default(),
        });
        let mut tasks = JoinSet::new();
        {
            let c = controller.clone();
            let rx = primary.subscribe();
            // Anything already cached (another plugin started the watch first).
            for o in primary.store.state() {
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
            tasks.spawn(async move { c.pump_related(rx, None).await });
        }
        for (w, map) in &manifest.watches {
            let cache = caches
                .cache(&w.api_version, &w.kind)
                .await
                .map_err(kind_error("watches", &w.api_version, &w.kind))?;
            let c = controller.clone();
            let rx = cache.subscribe();
            let map = map.clone();
            tasks.spawn(async move { c.pump_related(rx, Some(map)).await });
        }
        {
            let c = controller.clone();
            tasks.spawn(async move { c.resync_loop().await });
        }
        for _ in 0..manifest.limits.concurrency {
            let c = controller.clone();
            tasks.spawn(async move { c.worker().await });
        }
        Ok((controller, tasks))
    }

    fn selected(&self, o: &DynamicObject) -> bool {
        let rec = self.manifest.reconciles.as_ref().expect("checked at start");
        if rec
            .namespace
            .as_ref()
            .is_some_and(|ns| o.metadata.namespace.as_ref() != Some(ns))
        {
            return false;
        }
        crate::cluster::cache::selects(&self.selector, o)
    }

    /// Whether the cached object under `key` is one this reconciler may act on
    /// (a key whose object is gone is: reconcile then forgets it).
    fn in_scope(&self, key: &str) -> bool {
        let (ns, name) = split_key(key);
        self.primary.get(ns, name).is_none_or(|o| self.selected(&o))
    }

    /// Seed 002's rule: an object already reconciled at its generation is low
    /// priority work during a (re)list; everything else is high.
    fn enqueue_primary(&self, o: &DynamicObject, initial: bool) {
        if !self.selected(o) {
            return;
        }
        let Some(name) = o.metadata.name.as_deref() else {
            return;
        };
        let key = key_of(o.metadata.namespace.as_deref(), name);
        let generation = o.metadata.generation.unwrap_or(0);
        let observed = o
            .data
            .pointer("/status/observedGeneration")
            .and_then(Value::as_i64);
        let up_to_date = observed == Some(generation) && o.metadata.deletion_timestamp.is_none();
        let priority = if self.config.priorities && initial && up_to_date {
            Priority::Low
        } else {
            Priority::High
        };
        self.queue.add(
            key,
            if self.config.priorities {
                priority
            } else {
                Priority::High
            },
        );
    }

    async fn pump_primary(self: Arc<Self>, mut rx: tokio::sync::broadcast::Receiver<CacheEvent>) {
        loop {
            match rx.recv().await {
                Ok(CacheEvent::Applied { object, initial }) => {
                    self.enqueue_primary(&object, initial)
                }
                Ok(CacheEvent::Deleted(o)) => {
                    if let Some(n) = o.metadata.name.as_deref() {
                        let key = key_of(o.metadata.namespace.as_deref(), n);
                        self.expectations.forget(&key);
                        self.written_lock().remove(&key);
                    }
                }
                Ok(CacheEvent::Synced) => {}
                Err(RecvError::Lagged(_)) => {
                    // Missed events: everything cached is a candidate again.
                    for o in self.primary.store.state() {
                        self.enqueue_primary(&o, false);
                    }
                }
                Err(RecvError::Closed) => return,
            }
        }
    }

    /// Owned (`map == None`: requeue the owner named in ownerReferences) or
    /// watched objects (requeue the key the map function names).
    async fn pump_related(
        self: Arc<Self>,
        mut rx: tokio::sync::broadcast::Receiver<CacheEvent>,
        map: Option<MapFn>,
    ) {
        let rec = self.manifest.reconciles.clone().expect("checked at start");
        let owner_group = rec
            .api_version
            .split_once('/')
            .map(|(g, _)| g)
            .unwrap_or("");
        loop {
            let o = match rx.recv().await {
                Ok(CacheEvent::Applied { object, .. }) | Ok(CacheEvent::Deleted(object)) => object,
                Ok(CacheEvent::Synced) => continue,
                Err(RecvError::Lagged(_)) => {
                    for o in self.primary.store.state() {
                        self.enqueue_primary(&o, false);
                    }
                    continue;
                }
                Err(RecvError::Closed) => return,
            };
            let ns = o.metadata.namespace.as_deref();
            match &map {
                None => {
                    for r in o.metadata.owner_references.iter().flatten() {
                        let group = r.api_version.split_once('/').map(|(g, _)| g).unwrap_or("");
                        if r.kind == rec.kind && group == owner_group {
                            self.queue.add(key_of(ns, &r.name), Priority::High);
                        }
                    }
                }
                Some(m) => {
                    let target = match m {
                        MapFn::Label(k) => {
                            o.metadata.labels.as_ref().and_then(|l| l.get(k)).cloned()
                        }
                        MapFn::Annotation(k) => o
                            .metadata
                            .annotations
                            .as_ref()
                            .and_then(|a| a.get(k))
                            .cloned(),
                        MapFn::Field(p) => {
                            let mut cur = &o.data;
                            let mut ok = true;
                            for part in p.split('.') {
                                match cur.get(part) {
                                    Some(v) => cur = v,
                                    None => {
                                        ok = false;
                                        break;
                                    }
                                }
                            }
                            if ok {
                                cur.as_str().map(str::to_string)
                            } else {
                                None
                            }
                        }
                    };
                    if let Some(t) = target.filter(|t| !t.is_empty()) {
                        let key = if t.contains('/') { t } else { key_of(ns, &t) };
                        self.queue.add(key, Priority::High);
                    }
                }
            }
        }
    }

    async fn resync_loop(self: Arc<Self>) {
        let mut tick = tokio::time::interval(self.config.resync);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        tick.tick().await;
        loop {
            tick.tick().await;
            for o in self.primary.store.state() {
                if self.selected(&o)
                    && let Some(n) = o.metadata.name.as_deref()
                {
                    self.queue
                        .add(key_of(o.metadata.namespace.as_deref(), n), Priority::Low);
                }
            }
        }
    }

    async fn worker(self: Arc<Self>) {
        self.primary.wait_synced().await;
        loop {
            // A follower takes no work: keys wait in the queue, at their
            // priority, until leadership comes.
            self.leading.acquired().await;
            let Some(item) = self.queue.next().await else {
                return;
            };
            let key = item.key.clone();
            if !self.leading.is_leading() {
                // Lost the lease while waiting for work: put the key back as it was.
                self.queue.add(key.clone(), item.priority);
                self.queue.done(&key);
                continue;
            }
            if !self.in_scope(&key) {
                // Only the reconciler's own scope decides what it acts on: keys from
                // `owns` and `watches` come from what other objects say, and whoever
                // may label a watched object could otherwise aim the plugin (its
                // finalizer, its status writes) at any object of the kind.
                self.metrics.out_of_scope(&self.name);
                self.queue.forget(&key);
                self.expectations.forget(&key);
                self.queue.done(&key);
                continue;
            }
            self.metrics.active_workers(&self.name, 1);
            let started = Instant::now();
            let span = tracing::info_span!("reconcile", plugin = %self.name, key = %key, generation = tracing::field::Empty, outcome = tracing::field::Empty);
            let outcome = self.reconcile(&key).instrument(span.clone()).await;
            span.record("outcome", outcome.as_str());
            self.metrics
                .reconciled(&self.name, outcome, started.elapsed());
            self.metrics.active_workers(&self.name, -1);
            self.queue.done(&key);
        }
    }

    fn lookup(&self) -> impl Fn(&str, &str, Option<&str>, &str) -> Option<Seen> + '_ {
        |av, kind, ns, name| {
            let cache = self.caches.existing(av, kind)?;
            let o = cache.get(ns, name)?;
            Some(Seen {
                uid: o.metadata.uid.clone().unwrap_or_default(),
                resource_version: o
                    .metadata
                    .resource_version
                    .as_deref()
                    .and_then(|r| r.parse().ok())
                    .unwrap_or(0),
                deleting: o.metadata.deletion_timestamp.is_some(),
            })
        }
    }

    fn api(&self) -> Api<DynamicObject> {
        let r = &self.primary.resolved;
        Api::all_with(self.caches.client().clone(), &r.resource)
    }

    fn api_in(&self, ns: Option<&str>) -> Api<DynamicObject> {
        let r = &self.primary.resolved;
        match ns {
            Some(ns) if r.namespaced => {
                Api::namespaced_with(self.caches.client().clone(), ns, &r.resource)
            }
            _ => self.api(),
        }
    }

    /// Writes finalizers with the object's resourceVersion as precondition.
    async fn set_finalizers(
        &self,
        o: &DynamicObject,
        list: Vec<String>,
    ) -> Result<(), ClientError> {
        let (ns, name) = (
            o.metadata.namespace.as_deref(),
            o.metadata.name.as_deref().unwrap_or_default(),
        );
        let patch = json!({"metadata": {"resourceVersion": o.metadata.resource_version, "finalizers": list}});
        self.api_in(ns)
            .patch(name, &PatchParams::default(), &Patch::Merge(patch))
            .await?;
        Ok(())
    }

    /// One pass of the host-owned reconcile loop for `key`.
    async fn reconcile(&self, key: &str) -> Outcome {
        let (ns, name) = split_key(key);
        let Some(obj) = self.primary.get(ns, name) else {
            // Gone: nothing to do, nothing to remember.
            self.queue.forget(&key.to_string());
            self.expectations.forget(key);
            self.written_lock().remove(key);
            return Outcome::Success;
        };
        if let Err(wait) = self.expectations.check(key, self.lookup()) {
            // Our own writes are not in the cache yet: acting now would act twice.
            self.queue
                .add_after(key.to_string(), wait.min(Duration::from_secs(1)));
            return Outcome::RequeueAfter;
        }
        tracing::Span::current().record("generation", obj.metadata.generation.unwrap_or(0));
        let Some(plugin) = self.source.current(&self.name) else {
            return Outcome::Error;
        };
        let finalizer = self.manifest.finalizer.clone();
        let mut finalizers = obj.metadata.finalizers.clone().unwrap_or_default();
        let obj_json = {
            let mut v = serde_json::to_value(obj.as_ref()).unwrap_or(Value::Null);
            v["apiVersion"] = json!(self.primary.resolved.resource.api_version);
            v["kind"] = json!(self.primary.resolved.resource.kind);
            v.to_string()
        };

        if obj.metadata.deletion_timestamp.is_some() {
            let Some(f) = finalizer.filter(|f| finalizers.contains(f)) else {
                return Outcome::Success;
            };
            return match plugin.finalize(key, &obj_json).await {
                Ok((Ok(Finalized::Done), report)) => {
                    self.expectations.record(key, &report.writes, |av, k| {
                        self.caches.existing(av, k).is_some()
                    });
                    finalizers.retain(|x| *x != f);
                    match self.set_finalizers(&obj, finalizers).await {
                        Ok(()) => {
                            self.queue.forget(&key.to_string());
                            Outcome::Success
                        }
                        Err(e) => self.retry(key, &e),
                    }
                }
                Ok((Ok(Finalized::RetryAfter(wait)), _)) => {
                    self.queue.add_after(key.to_string(), wait);
                    Outcome::RequeueAfter
                }
                Ok((Err(e), _)) => {
                    tracing::warn!(plugin = %self.name, %key, reason = %e.reason, message = %e.message, "finalize failed");
                    self.queue.add_rate_limited(key.to_string());
                    Outcome::Error
                }
                Err(e) => {
                    tracing::warn!(plugin = %self.name, %key, error = %e, "finalize failed");
                    self.queue.add_rate_limited(key.to_string());
                    Outcome::Error
                }
            };
        }
        if let Some(f) = &finalizer
            && !finalizers.contains(f)
        {
            finalizers.push(f.clone());
            // The cache will bring the updated object back: reconcile then.
            return match self.set_finalizers(&obj, finalizers).await {
                Ok(()) => Outcome::Success,
                Err(e) => self.retry(key, &e),
            };
        }

        let (result, outcome) = match plugin.reconcile(key, &obj_json).await {
            Ok((Ok(o), report)) => {
                self.expectations.record(key, &report.writes, |av, k| {
                    self.caches.existing(av, k).is_some()
                });
                let requeue = o.requeue_after;
                let result = GuestResult {
                    status: o.status,
                    conditions: o.conditions,
                    error: None,
                };
                (result, Ok((requeue, report.retry_soon)))
            }
            Ok((Err(e), report)) => {
                self.expectations.record(key, &report.writes, |av, k| {
                    self.caches.existing(av, k).is_some()
                });
                tracing::info!(plugin = %self.name, %key, reason = %e.reason, message = %e.message, terminal = e.terminal, "reconcile returned an error");
                let result = GuestResult {
                    status: e.status,
                    conditions: e.conditions,
                    error: Some((e.reason, e.message)),
                };
                (result, Err((e.terminal, report.retry_soon)))
            }
            Err(call) => {
                let result = GuestResult {
                    status: None,
                    conditions: vec![],
                    error: Some(("PluginFailed".into(), call.to_string())),
                };
                (result, Err((false, false)))
            }
        };
        let generation = obj.metadata.generation.unwrap_or(0);
        let current = status_of(&obj.data);
        // What the host last sent stands for the stored status while the
        // server still holds what it kept of that write.
        let base = match self.written_lock().get(key) {
            Some(w) if w.kept == current => w.sent.clone(),
            _ => current.clone(),
        };
        let now = chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string();
        let desired = desired_status(
            &base,
            &result,
            plugin.declared_conditions(),
            generation,
            &now,
        );
        if desired != base {
            let patch = json!({"metadata": {"resourceVersion": obj.metadata.resource_version}, "status": desired});
            let params = PatchParams {
                field_manager: Some(self.config.field_manager.clone()),
                ..Default::default()
            };
            let stored = match self
                .api_in(ns)
                .patch_status(name, &params, &Patch::Merge(patch))
                .await
            {
                Ok(stored) => stored,
                Err(e) => return self.retry(key, &e.into()),
            };
            self.metrics.status_written(&self.name);
            let kept = status_of(&stored.data);
            if kept != desired {
                self.warn_pruned(&desired, &kept);
            }
            self.written_lock().insert(
                key.to_string(),
                Written {
                    sent: desired,
                    kept,
                },
            );
        }
        match outcome {
            Ok((_, true)) | Err((false, true)) => {
                self.queue.add_soon(key.to_string());
                Outcome::Requeue
            }
            Ok((Some(wait), _)) => {
                self.queue.forget(&key.to_string());
                self.queue.add_after(key.to_string(), wait);
                Outcome::RequeueAfter
            }
            Ok((None, _)) => {
                self.queue.forget(&key.to_string());
                Outcome::Success
            }
            Err((true, _)) => {
                // Terminal: no retry until the object changes.
                self.queue.forget(&key.to_string());
                Outcome::Error
            }
            Err((false, _)) => {
                self.queue.add_rate_limited(key.to_string());
                Outcome::Error
            }
        }
    }

    fn written_lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Written>> {
        // A cache of the last writes: a poisoned one is still usable.
        self.written.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Says once per controller which host-owned status fields the server
    /// dropped, and where to declare them.
    fn warn_pruned(&self, sent: &Value, kept: &Value) {
        let dropped: Vec<&str> = ["conditions", "observedGeneration"]
            .into_iter()
            .filter(|f| sent.get(*f).is_some() && kept.get(*f).is_none())
            .collect();
        if dropped.is_empty()
            || self
                .warned_pruned
                .swap(true, std::sync::atomic::Ordering::Relaxed)
        {
            return;
        }
        let r = &self.primary.resolved.resource;
        let crd = format!("{}.{}", r.plural, r.group);
        tracing::warn!(
            plugin = %self.name, %crd, ?dropped,
            "the server prunes host-owned status fields: declare them in the CRD's status schema (or x-kubernetes-preserve-unknown-fields: true); until then the host compares with what it sent, so unchanged objects cost no writes"
        );
    }

    /// API errors from the host's own writes: 409 and 429 mean "soon".
    fn retry(&self, key: &str, e: &ClientError) -> Outcome {
        match e {
            ClientError::Conflict(_) | ClientError::TooManyRequests => {
                self.queue.add_soon(key.to_string());
                Outcome::Requeue
            }
            ClientError::NotFound => Outcome::Success,
            other => {
                tracing::warn!(plugin = %self.name, %key, error = %other, "host write failed");
                self.queue.add_rate_limited(key.to_string());
                Outcome::Error
            }
        }
    }
}
