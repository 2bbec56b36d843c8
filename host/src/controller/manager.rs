//! The [`Manager`]: one controller per loaded reconciler, following the plugin
//! set.
//!
//! A new reconciler gets a controller; a replaced one keeps its controller and
//! queue (calls pick up the new version) unless what the controller was started
//! for changed (its shape); a removed one is stopped. Starting discovers
//! kinds and starts watches, which can take long (a CRD not served yet), so each
//! start runs in its own task and no lock is held across it: one slow plugin
//! never holds up another.
//!
//! ```ignore
//! # async fn demo(plugins: std::sync::Arc<wasmlet::plugin::PluginSet>,
//! #     caches: std::sync::Arc<wasmlet::cluster::cache::Caches>) {
//! use wasmlet::controller::Manager;
//! use wasmlet::controller::leader::Leadership;
//! use wasmlet::controller::metrics::ControllerMetrics;
//! let manager = Manager::new(plugins, caches, Default::default(),
//!     ControllerMetrics::new(), Leadership::new(true));
//! tokio::spawn(manager.run());
//! # }
//! ```

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::task::JoinSet;

use super::controller::{Controller, ControllerConfig};
use super::leader::Leadership;
use super::metrics::ControllerMetrics;
use super::source;
use super::table::TableController;
use crate::cluster::cache::Caches;
use crate::plugin::manifest::{MapFn, PluginKind, Reconciles, TypeRef, Watch};
use crate::plugin::{PluginEvent, PluginSet};

/// First and longest wait before starting a controller again after a
/// retryable failure (doubling in between).
const RETRY_FIRST: Duration = Duration::from_secs(2);
const RETRY_MAX: Duration = Duration::from_secs(60);

/// What a controller is started for: a replacement that changes any of it
/// restarts the controller (anything else reaches the running one through
/// the plugin set).
#[derive(Clone, Debug, PartialEq, Eq)]
struct Shape {
    reconciles: Option<Reconciles>,
    owns: Vec<TypeRef>,
    watches: Vec<(Watch, MapFn)>,
    finalizer: Option<String>,
    concurrency: u32,
}

/// A running controller: of a Kubernetes kind or of a datastore table.
enum Runner {
    Kind(Arc<Controller>),
    Table(Arc<TableController>),
}

impl Runner {
    fn queue(&self) -> &super::workqueue::WorkQueue<String> {
        match self {
            Runner::Kind(c) => &c.queue,
            Runner::Table(c) => &c.queue,
        }
    }

    fn stop(&self) {
        self.queue().shutdown();
    }
}

struct Running {
    runner: Runner,
    _tasks: JoinSet<()>,
    shape: Shape,
}

/// One plugin's controller: running, being started, or neither.
#[derive(Default)]
struct Slot {
    running: Option<Running>,
    /// The shape a start in flight is for.
    starting: Option<Shape>,
    /// Bumped by every change of plan, so a start that finishes after a newer
    /// one began is dropped.
    epoch: u64,
    /// Consecutive retryable start failures (for the back-off).
    failures: u32,
}

pub struct Manager {
    pub(crate) plugins: Arc<PluginSet>,
    pub(crate) caches: Arc<Caches>,
    pub(crate) config: ControllerConfig,
    pub(crate) metrics: ControllerMetrics,
    pub(crate) leading: Leadership,
    /// Never held across an await.
    slots: Mutex<HashMap<String, Slot>>,
    /// Plugins whose controller failed to start, to try again.
    retry_tx: tokio::sync::mpsc::UnboundedSender<String>,
    retry_rx: Mutex<Option<tokio::sync::mpsc::UnboundedReceiver<String>>>,
    /// Set by [`Manager::shutdown`]: no controller starts again.
    stopping: std::sync::atomic::AtomicBool,
}

impl Manager {
    pub fn new(
        plugins: Arc<PluginSet>,
        caches: Arc<Caches>,
        config: ControllerConfig,
        metrics: ControllerMetrics,
        leading: Leadership,
    ) -> Arc<Manager> {
        let (retry_tx, retry_rx) = tokio::sync::mpsc::unbounded_channel();
        Arc::new(Manager {
            plugins,
            caches,
            config,
            metrics,
            leading,
            slots: Mutex::new(HashMap::new()),
            retry_tx,
            retry_rx: Mutex::new(Some(retry_rx)),
            stopping: Default::default(),
        })
    }

    // A panic while holding the lock leaves the map consistent (every update
    // is a single insert or field write), so a poisoned lock is used as is.
    fn slots(&self) -> MutexGuard<'_, HashMap<String, Slot>> {
        self.slots.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The running controller of plugin `name` (of a Kubernetes kind).
    pub fn controller(&self, name: &str) -> Option<Arc<Controller>> {
        match &self.slots().get(name)?.running.as_ref()?.runner {
            Runner::Kind(c) => Some(c.clone()),
            Runner::Table(_) => None,
        }
    }

    fn shape(&self, name: &str) -> Option<Shape> {
        let p = self.plugins.get(name)?;
        if p.manifest.plugin.kind != PluginKind::Reconciler {
            return None;
        }
        let m = &p.manifest;
        Some(Shape {
            reconciles: m.reconciles.clone(),
            owns: m.owns.clone(),
            watches: m.watches.clone(),
            finalizer: m.finalizer.clone(),
            concurrency: m.limits.concurrency,
        })
    }

    /// Starts, restarts or stops the controller of `name` to match the plugin
    /// set. Returns at once: a start runs in its own task.
    /// `replaced`: a new version of the plugin loaded; a controller that
    /// keeps running re-runs every object with it (a restarted one lists
    /// them anew anyway).
    fn sync(self: &Arc<Self>, name: &str, replaced: bool) {
        if self.stopping.load(std::sync::atomic::Ordering::Acquire) {
            return;
        }
        let shape = self.shape(name);
        let mut slots = self.slots();
        let slot = slots.entry(name.to_string()).or_default();
        let current = slot
            .starting
            .as_ref()
            .or(slot.running.as_ref().map(|r| &r.shape));
        if current == shape.as_ref() {
            if let (
                true,
                Some(Running {
                    runner: Runner::Kind(c),
                    ..
                }),
            ) = (replaced, &slot.running)
            {
                let queued = c.requeue_all();
                tracing::info!(plugin = %name, queued, "new version: every object queued for it");
            }
            if shape.is_none() {
                slots.remove(name);
            }
            return;
        }
        slot.epoch += 1;
        slot.starting = None;
        if let Some(r) = slot.running.take() {
            r.runner.stop();
            tracing::info!(plugin = %name, "controller stopped");
        }
        let Some(shape) = shape else {
            slots.remove(name);
            return;
        };
        slot.starting = Some(shape.clone());
        let epoch = slot.epoch;
        self.warn_overlaps(name, &slots);
        drop(slots);
        let this = self.clone();
        let name = name.to_string();
        tokio::spawn(async move { this.start(name, shape, epoch).await });
    }

    async fn start(self: Arc<Self>, name: String, shape: Shape, epoch: u64) {
        let from_table = shape.reconciles.as_ref().is_some_and(|r| r.is_table());
        let started = if from_table {
            match self.plugins.get(&name) {
                Some(p) => TableController::start(
                    &name,
                    self.plugins.clone() as Arc<dyn source::Source>,
                    &p.manifest,
                    &self.config,
                    &self.caches,
                    self.metrics.clone(),
                )
                .map(|(c, tasks)| (Runner::Table(c), tasks)),
                None => Err(super::controller::StartError::NotLoaded(name.clone())),
            }
        } else {
            Controller::start(
                &name,
                self.plugins.clone() as Arc<dyn source::Source>,
                self.caches.clone(),
                self.config.clone(),
                self.metrics.clone(),
                self.leading.clone(),
            )
            .await
            .map(|(c, tasks)| (Runner::Kind(c), tasks))
        };
        let mut slots = self.slots();
        let stopping = self.stopping.load(std::sync::atomic::Ordering::Acquire);
        let Some(slot) = slots
            .get_mut(&name)
            .filter(|s| s.epoch == epoch && !stopping)
        else {
            // Superseded while starting: dropping the tasks stops them.
            return;
        };
        slot.starting = None;
        match started {
            Ok((runner, tasks)) => {
                tracing::info!(plugin = %name, "controller started");
                slot.failures = 0;
                slot.running = Some(Running {
                    runner,
                    _tasks: tasks,
                    shape,
                });
            }
            Err(e) if e.retryable() => {
                let wait = RETRY_FIRST
                    .saturating_mul(1 << slot.failures.min(16))
                    .min(RETRY_MAX);
                slot.failures += 1;
                tracing::warn!(plugin = %name, error = %e, retry_in = ?wait, "controller could not start; retrying");
                let tx = self.retry_tx.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(wait).await;
                    let _ = tx.send(name);
                });
            }
            Err(e) => {
                tracing::error!(plugin = %name, error = %e, "controller cannot start until the plugin is replaced");
            }
        }
    }

    /// Two reconcilers of the same objects would fight over their status:
    /// say so when their kinds match and their selectors may overlap.
    fn warn_overlaps(&self, name: &str, slots: &HashMap<String, Slot>) {
        let Some(me) = self
            .plugins
            .get(name)
            .and_then(|p| p.manifest.reconciles.clone())
        else {
            return;
        };
        for other in slots.keys().filter(|n| *n != name) {
            let Some(o) = self
                .plugins
                .get(other)
                .and_then(|p| p.manifest.reconciles.clone())
            else {
                continue;
            };
            if me.is_table() || o.is_table() {
                if me.is_table() && o.is_table() && me.table == o.table {
                    tracing::warn!(plugin = %name, other = %other, table = ?me.table, "two plugins reconcile the same table; their status writes will fight");
                }
                continue;
            }
            let disjoint_ns = matches!((&me.namespace, &o.namespace), (Some(a), Some(b)) if a != b);
            let disjoint_sel = me.label_selector.is_some()
                && o.label_selector.is_some()
                && me.label_selector != o.label_selector;
            if me.api_version == o.api_version && me.kind == o.kind && !disjoint_ns && !disjoint_sel
            {
                tracing::warn!(
                    plugin = %name, other = %other, kind = %me.kind,
                    "two plugins may reconcile the same objects; their status writes will fight (give them disjoint namespaces or label selectors)"
                );
            }
        }
    }

    /// The drain at shutdown: every controller stops taking work (its queue
    /// is shut down, so each worker finishes the call in hand and takes no
    /// other) and no controller starts again. Returns once no call is in
    /// flight, or after `within` with the number still running.
    pub(crate) async fn shutdown(&self, within: Duration) -> usize {
        self.stopping
            .store(true, std::sync::atomic::Ordering::Release);
        let queues: Vec<_> = self
            .slots()
            .values()
            .filter_map(|s| s.running.as_ref())
            .map(|r| {
                r.runner.stop();
                r.runner.queue().clone()
            })
            .collect();
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let busy: usize = queues.iter().map(|q| q.depth().processing).sum();
            if busy == 0 || tokio::time::Instant::now() >= deadline {
                return busy;
            }
            // The queue has no "idle" notification; a call takes milliseconds
            // to seconds, so a short poll costs nothing noticeable.
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Follows the plugin set until it goes away.
    pub async fn run(self: Arc<Self>) {
        let mut events = self.plugins.subscribe();
        let Some(mut retries) = self
            .retry_rx
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
        else {
            return;
        };
        for name in self.plugins.names() {
            self.sync(&name, false);
        }
        loop {
            let event = tokio::select! {
                e = events.recv() => e,
                Some(name) = retries.recv() => {
                    self.sync(&name, false);
                    continue;
                }
            };
            match event {
                Ok(PluginEvent::Replaced(n)) => self.sync(&n, true),
                Ok(PluginEvent::Added(n) | PluginEvent::Removed(n)) => self.sync(&n, false),
                Ok(PluginEvent::Rejected(..)) => {}
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                    let mut names: Vec<String> = self.plugins.names();
                    names.extend(self.slots().keys().cloned());
                    for n in names {
                        self.sync(&n, false);
                    }
                }
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
            }
        }
    }
}
