//! The controller engine: everything a reconciler plugin would otherwise
//! re-implement, done once by the host.
//!
//! - [`cache`]: one watch + cache per kind, shared by every plugin;
//! - [`workqueue`]: dedup, per-key back-off, priorities (high / low / scheduled);
//! - [`controller`]: per plugin, watches → queue → guest → host-owned status;
//! - [`status`]: merging the guest's status, conditions, `Ready`, `observedGeneration`;
//! - [`expectations`]: no second reconcile before the cache saw the first one's writes;
//! - [`leader`]: Lease-based leader election;
//! - [`metrics`]: controller-runtime's metric names, `/healthz`, `/readyz`.
//!
//! The [`Manager`] follows the plugin directory: a new reconciler gets a
//! controller, a replaced one keeps its controller and queue (calls pick up
//! the new version), a removed one is stopped.

pub mod cache;
#[allow(clippy::module_inception)]
pub mod controller;
pub mod expectations;
pub mod leader;
pub mod metrics;
pub mod source;
pub mod status;
pub mod workqueue;

use self::leader::Leadership;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Mutex;
use tokio::task::JoinSet;

use self::cache::Caches;
use self::controller::{Controller, ControllerConfig};
use self::metrics::ControllerMetrics;
use crate::plugin::manifest::PluginKind;
use crate::plugin::{PluginEvent, PluginSet};

struct Running {
    controller: Arc<Controller>,
    _tasks: JoinSet<()>,
    /// What the controller was started for; a replacement that changes it restarts the controller.
    shape: String,
}

pub struct Manager {
    pub plugins: Arc<PluginSet>,
    pub caches: Arc<Caches>,
    pub config: ControllerConfig,
    pub metrics: ControllerMetrics,
    pub leading: Leadership,
    running: Mutex<HashMap<String, Running>>,
    /// Plugins whose controller failed to start, to try again.
    retry_tx: tokio::sync::mpsc::UnboundedSender<String>,
    retry_rx: Mutex<Option<tokio::sync::mpsc::UnboundedReceiver<String>>>,
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
            running: Mutex::new(HashMap::new()),
            retry_tx,
            retry_rx: Mutex::new(Some(retry_rx)),
        })
    }

    pub async fn controller(&self, name: &str) -> Option<Arc<Controller>> {
        self.running
            .lock()
            .await
            .get(name)
            .map(|r| r.controller.clone())
    }

    fn shape(&self, name: &str) -> Option<String> {
        let p = self.plugins.get(name)?;
        if p.manifest.plugin.kind != PluginKind::Reconciler {
            return None;
        }
        let m = &p.manifest;
        Some(format!(
            "{:?}|{:?}|{:?}|{}",
            m.reconciles.as_ref().map(|r| (
                &r.api_version,
                &r.kind,
                &r.namespace,
                &r.label_selector
            )),
            m.owns,
            m.watches
                .iter()
                .map(|(w, _)| w.map.clone())
                .collect::<Vec<_>>(),
            m.limits.concurrency
        ))
    }

    /// Starts, restarts or stops the controller of `name` to match the plugin set.
    async fn sync(self: &Arc<Self>, name: &str) {
        let shape = self.shape(name);
        let mut running = self.running.lock().await;
        match (shape, running.get(name).map(|r| r.shape.clone())) {
            (None, Some(_)) => {
                if let Some(r) = running.remove(name) {
                    r.controller.queue.shutdown();
                }
                tracing::info!(plugin = %name, "controller stopped");
            }
            (Some(s), Some(old)) if s == old => {}
            (Some(s), _) => {
                if let Some(r) = running.remove(name) {
                    r.controller.queue.shutdown();
                }
                self.warn_overlaps(name, &running);
                match Controller::start(
                    name,
                    self.plugins.clone() as Arc<dyn source::Source>,
                    self.caches.clone(),
                    self.config.clone(),
                    self.metrics.clone(),
                    self.leading.clone(),
                )
                .await
                {
                    Ok((controller, tasks)) => {
                        tracing::info!(plugin = %name, "controller started");
                        running.insert(
                            name.to_string(),
                            Running {
                                controller,
                                _tasks: tasks,
                                shape: s,
                            },
                        );
                    }
                    Err(e) => {
                        // Typically a CRD that is not served yet: try again shortly.
                        tracing::warn!(plugin = %name, error = %e, "controller could not start; retrying");
                        let tx = self.retry_tx.clone();
                        let name = name.to_string();
                        tokio::spawn(async move {
                            tokio::time::sleep(Duration::from_secs(2)).await;
                            let _ = tx.send(name);
                        });
                    }
                }
            }
            (None, None) => {}
        }
    }

    /// Two reconcilers of the same objects would fight over their status:
    /// say so when their kinds match and their selectors may overlap.
    fn warn_overlaps(&self, name: &str, running: &HashMap<String, Running>) {
        let Some(me) = self
            .plugins
            .get(name)
            .and_then(|p| p.manifest.reconciles.clone())
        else {
            return;
        };
        for other in running.keys().filter(|n| *n != name) {
            let Some(o) = self
                .plugins
                .get(other)
                .and_then(|p| p.manifest.reconciles.clone())
            else {
                continue;
            };
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

    /// Follows the plugin set until it goes away.
    pub async fn run(self: Arc<Self>) {
        let mut events = self.plugins.subscribe();
        let Some(mut retries) = self.retry_rx.lock().await.take() else {
            return;
        };
        for name in self.plugins.names() {
            self.sync(&name).await;
        }
        loop {
            let event = tokio::select! {
                e = events.recv() => e,
                Some(name) = retries.recv() => {
                    self.sync(&name).await;
                    continue;
                }
            };
            match event {
                Ok(PluginEvent::Added(n) | PluginEvent::Replaced(n) | PluginEvent::Removed(n)) => {
                    self.sync(&n).await
                }
                Ok(PluginEvent::Rejected(..)) => {}
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                    let mut names: Vec<String> = self.plugins.names();
                    names.extend(self.running.lock().await.keys().cloned());
                    for n in names {
                        self.sync(&n).await;
                    }
                }
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
            }
        }
    }
}
