//! A reconciler whose objects are the rows of a datastore table
//! (`[reconciles] source = "postgres"`): the datastore's watcher feeds the
//! controller's workqueue (the same lanes as a Kubernetes kind's), workers
//! call the guest through the same seam (`guest.rs`) and compute the status
//! with the same merge (`status.rs`); only reading the object and writing its
//! status differ (a row, `UPDATE ... WHERE revision = $seen`).
//!
//! Several hosts may share the table: each queues only the rows it owns
//! among the table's members, and reconciles a row only under the row's
//! advisory lock, reading it and writing its status on the lock's connection
//! (see [`crate::datastore::members`] and [`crate::datastore::lock`]). So a
//! table controller needs no leader election: it runs on every host.
//!
//! Finalizers work as for a custom resource: with a `finalizer` in the
//! manifest, the host adds it to the row's `finalizers` before the guest
//! first reconciles the row. The application deletes rows with a plain
//! `DELETE`; the table's trigger turns the delete of a row that still has
//! finalizers into setting `deleted_at` (`metadata.deletionTimestamp`), which
//! NOTIFYs. The host queues that row high and calls the guest's `finalize`
//! instead of `reconcile`; once it is done the host removes its finalizer,
//! and the row is deleted with its last finalizer. A failed finalize keeps
//! the row and is retried with back-off. All of it under the row's lock, so
//! no two hosts finalize a row at once. Without a finalizer in the manifest,
//! a deleted row is simply gone and the guest never hears of it.
//!
//! Watches (`[[watches]]`, usually of a named cluster: `cluster = "*"`) name
//! a row by a label, annotation or field of the watched object: when the
//! regional object a row's guest wrote changes (its status, written by the
//! region), the row is reconciled at once, with high priority. Objects a
//! watch lists when it starts requeue nothing: the table's own scan gives
//! every row its priority then.
//!
//! Not here (yet): expectations for the guest's cluster writes, owned kinds.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tokio::sync::broadcast::{self, error::RecvError};
use tokio::task::JoinSet;

use super::controller::{ControllerConfig, Outcome, StartError};
use super::enqueue::named_by;
use super::guest::{Requeue, call_reconcile, settle};
use super::metrics::{ControllerMetrics, ControllerSeries};
use super::priority::Listed;
use super::remote::remote_watches;
use super::source::{Reconciler, Source};
use super::status::{GuestResult, desired_status};
use super::worker::{Admit, Objects};
use super::workqueue::{Priority, WorkQueue};
use crate::cluster::cache::{CacheEvent, Caches};
use crate::datastore::lock::RowLock;
use crate::datastore::members::{Membership, MembershipConfig, keep};
use crate::datastore::rows::{LAST_RECONCILED, Removed};
use crate::datastore::watch::{Sink, WatchConfig, watch};
use crate::datastore::{Datastore, Row, RowState, Table};
use crate::plugin::outcome::Finalized;

/// How soon a row another host holds is tried again.
const LOCKED_RETRY: Duration = Duration::from_secs(1);
use crate::plugin::manifest::{Manifest, MapFn, Reconciles};

pub(crate) struct TableController {
    pub(crate) name: String,
    source: Arc<dyn Source>,
    store: Datastore,
    pub(crate) table: Table,
    pub(crate) queue: WorkQueue<String>,
    metrics: ControllerSeries,
    reconciles: Reconciles,
    /// The manifest's finalizer: set on every live row before its first
    /// reconcile, removed once `finalize` is done with a deleted one.
    finalizer: Option<String>,
    /// This host among the table's members: which rows are its own.
    pub(crate) membership: Arc<Membership>,
    priorities: bool,
    /// Rows waiting for a requeue-after (what `settle` keeps).
    keys: super::keys::Keys,
}

impl TableController {
    /// Starts the watcher and workers of plugin `name` on `manifest`'s table.
    /// Stops when `tasks` is dropped.
    /// `caches`: the host's own cluster, for watches that name no cluster.
    pub(crate) fn start(
        name: &str,
        source: Arc<dyn Source>,
        manifest: &Manifest,
        config: &ControllerConfig,
        caches: &Arc<Caches>,
        metrics: ControllerMetrics,
    ) -> Result<(Arc<TableController>, JoinSet<()>), StartError> {
        let reconciles = manifest
            .reconciles
            .clone()
            .ok_or_else(|| StartError::NotAReconciler(name.to_string()))?;
        let store = config
            .datastore
            .clone()
            .ok_or_else(|| StartError::NoDatastore(name.to_string()))?;
        let table = Table::new(reconciles.table.as_deref().unwrap_or_default()).map_err(|e| {
            StartError::Table {
                plugin: name.to_string(),
                source: e,
            }
        })?;
        let queue = WorkQueue::new(
            name,
            super::controller::queue_config(&config.queue, &manifest.limits, true),
            Some(metrics.queue()),
        );
        let membership = Membership::new(&Membership::name_for_this_process());
        let series = metrics.series(name);
        let controller = Arc::new(TableController {
            name: name.to_string(),
            source,
            store: store.clone(),
            table: table.clone(),
            queue,
            metrics: series.clone(),
            reconciles,
            finalizer: manifest.finalizer.clone(),
            membership: membership.clone(),
            priorities: config.priorities,
            keys: super::keys::Keys::new(series.waiting()),
        });
        let mut tasks = JoinSet::new();
        let watch_config = WatchConfig {
            resync: config.resync,
            rescan: Some(membership.changed.clone()),
            ..Default::default()
        };
        tasks.spawn(keep(
            store.clone(),
            table.clone(),
            membership,
            MembershipConfig::default(),
        ));
        tasks.spawn(watch(
            store,
            table,
            watch_config,
            controller.clone() as Arc<dyn Sink>,
        ));
        for remote in remote_watches(name, manifest, &config.clusters, Some(caches)) {
            let c = controller.clone();
            tasks.spawn(async move {
                let rx = remote.cache(&c.name).await.subscribe();
                let changes = remote.changes();
                c.pump_watched(rx, remote.map, changes).await
            });
        }
        for _ in 0..manifest.limits.workers() {
            let c = controller.clone();
            tasks.spawn(super::worker::run(c));
        }
        Ok((controller, tasks))
    }

    fn add(&self, id: String, priority: Priority) {
        if !self.membership.owns(&id) {
            return;
        }
        let priority = if self.priorities {
            priority
        } else {
            Priority::High
        };
        self.queue.add(id, priority);
    }

    /// A watched kind's changes, as the rows their map names (see the module docs).
    async fn pump_watched(
        self: Arc<Self>,
        mut rx: broadcast::Receiver<CacheEvent>,
        map: MapFn,
        changes: crate::plugin::manifest::Changes,
    ) {
        let mut gate = super::changes::ChangeGate::new(changes);
        loop {
            let event = rx.recv().await;
            if let Ok(e) = &event
                && !gate.passes(e)
            {
                continue;
            }
            let object = match event {
                Ok(CacheEvent::Applied { initial: true, .. }) | Ok(CacheEvent::Synced) => continue,
                Ok(CacheEvent::Applied { object, .. }) | Ok(CacheEvent::Deleted(object)) => object,
                // Missed changes: the table's resync scan catches up.
                Err(RecvError::Lagged(n)) => {
                    tracing::debug!(plugin = %self.name, missed = n, "a watch of the table's reconciler fell behind");
                    continue;
                }
                Err(RecvError::Closed) => return,
            };
            if let MapFn::Waiting = map {
                for id in self.keys.waiting() {
                    self.add(id, Priority::High);
                }
            } else if let Some(id) = named_by(&object, &map) {
                self.add(id, Priority::High);
            }
        }
    }

    /// Drops what the queue and `keys` keep of row `id` (gone, or done).
    fn forget(&self, id: &str) {
        self.queue.forget(&id.to_string());
        self.keys.forget(id);
    }

    /// The row as the guest reads it (JSON).
    fn document(&self, row: &Row) -> String {
        row.document(&self.reconciles.api_version, &self.reconciles.kind)
            .to_string()
    }

    /// One pass for row `id`: read it; if it is deleted, finalize it;
    /// otherwise make sure it carries the finalizer, call the guest, and
    /// write the status back if the row is still at the revision the guest
    /// saw.
    async fn reconcile(&self, id: &str, lock: &RowLock) -> Outcome {
        let key = id.to_string();
        let mut row = match lock.get(id).await {
            Ok(Some(row)) => row,
            Ok(None) => {
                // Deleted: nothing to do, nothing to remember.
                self.forget(id);
                return Outcome::Success;
            }
            Err(e) => {
                tracing::warn!(plugin = %self.name, row = %id, error = %e, "cannot read the row; retrying");
                self.queue.add_rate_limited(key);
                return Outcome::Error;
            }
        };
        tracing::Span::current().record("revision", row.revision);
        let Some(plugin) = self.source.current(&self.name) else {
            return Outcome::Error;
        };
        if row.deleted_at.is_some() {
            return self.finalize(&row, lock, &*plugin).await;
        }
        if let Some(outcome) = self.ensure_finalizer(&mut row, lock).await {
            return outcome;
        }
        let doc = self.document(&row);
        let call = call_reconcile(&*plugin, &self.name, id, &doc).await;
        if let Some((reason, message)) = &call.result.error {
            tracing::warn!(plugin = %self.name, table = %self.table, row = %id, revision = row.revision, %reason, %message, "row not reconciled");
        }
        if !self.reconciles.host_status {
            return settle(&self.queue, &self.keys, id, call.requeue);
        }
        // Done with this revision: a success, or a failure retrying cannot
        // fix. A retryable failure leaves the row "changed" (high priority).
        let reconciled = call.result.error.is_none() || call.requeue == Requeue::Terminal;
        let requeue_after = match call.requeue {
            Requeue::After(wait) => Some(wait),
            _ => None,
        };
        let now = super::status::now();
        let mut desired = desired_status(
            &row.status,
            &call.result,
            plugin.declared_conditions(),
            row.revision,
            &now,
        );
        let last = if reconciled {
            Some(json!(row.revision))
        } else {
            row.status.get(LAST_RECONCILED).cloned()
        };
        if let Some(status) = desired.as_object_mut() {
            // The host's field: whatever the guest put there is replaced.
            match last {
                Some(v) => status.insert(LAST_RECONCILED.into(), v),
                None => status.remove(LAST_RECONCILED),
            };
        }
        if desired != row.status || requeue_after.is_some() || row.due_in.is_some() {
            match lock
                .write_status(id, row.revision, &desired, requeue_after)
                .await
            {
                Ok(true) => self.metrics.status_written(),
                Ok(false) => {
                    // The spec moved on (or the row went) since it was read.
                    self.queue.add(key, Priority::High);
                    return Outcome::Requeue;
                }
                Err(e) => {
                    tracing::warn!(plugin = %self.name, row = %id, error = %e, "cannot write the row's status; retrying");
                    self.queue.add_rate_limited(key);
                    return Outcome::Error;
                }
            }
        }
        settle(&self.queue, &self.keys, id, call.requeue)
    }
}

/// A row's pass runs under the row's advisory lock: another host holding
/// it means "later", not a failure.
impl Objects for TableController {
    fn queue(&self) -> &WorkQueue<String> {
        &self.queue
    }

    fn series(&self) -> &ControllerSeries {
        &self.metrics
    }

    /// No leader election (see the module docs): always ready.
    async fn ready(&self) {}

    fn admit(&self, key: &str) -> Admit {
        // Queued before the members changed: another host's now.
        if self.membership.owns(key) {
            Admit::Reconcile
        } else {
            self.queue.forget(&key.to_string());
            Admit::Drop
        }
    }

    fn span(&self, key: &str) -> tracing::Span {
        tracing::info_span!("reconcile", plugin = %self.name, table = %self.table, row = %key, revision = tracing::field::Empty, outcome = tracing::field::Empty)
    }

    async fn reconcile_key(&self, key: &str) -> Outcome {
        match self.store.try_lock_row(&self.table, key).await {
            Ok(Some(lock)) => {
                let outcome = self.reconcile(key, &lock).await;
                lock.release().await;
                outcome
            }
            Ok(None) => {
                // Another host is on it (a member list not yet seen alike).
                self.queue.add_after(key.to_string(), LOCKED_RETRY);
                Outcome::Requeue
            }
            Err(e) => {
                tracing::warn!(plugin = %self.name, row = %key, error = %e, "cannot lock the row; retrying");
                self.queue.add_rate_limited(key.to_string());
                Outcome::Error
            }
        }
    }
}

/// Finalizers (see the module docs): the Kubernetes path's steps, on rows.
impl TableController {
    /// Adds the manifest's finalizer to a live row that lacks it, before the
    /// guest acts on the row: from then on a DELETE only marks the row, so
    /// `finalize` runs before it goes. The write is silent (no NOTIFY), so
    /// the pass goes on to reconcile, with the finalizer in the document.
    /// `Some(outcome)`: the pass ends here (the row went or began deleting
    /// since it was read, or the write failed).
    async fn ensure_finalizer(&self, row: &mut Row, lock: &RowLock) -> Option<Outcome> {
        let finalizer = self
            .finalizer
            .as_ref()
            .filter(|f| !row.finalizers.contains(f))?;
        match lock.add_finalizer(&row.id, finalizer).await {
            Ok(true) => {
                row.finalizers.push(finalizer.clone());
                None
            }
            Ok(false) => {
                // Deleted meanwhile: the next pass reads what is left of it.
                self.queue.add(row.id.clone(), Priority::High);
                Some(Outcome::Requeue)
            }
            Err(e) => {
                tracing::warn!(plugin = %self.name, table = %self.table, row = %row.id, %finalizer, error = %e, "cannot add the finalizer to the row; retrying");
                self.queue.add_rate_limited(row.id.clone());
                Some(Outcome::Error)
            }
        }
    }

    /// A deleted row still held by finalizers: while it carries this
    /// plugin's, the guest's `finalize` runs (as for a custom resource with a
    /// deletionTimestamp); when it is done the finalizer goes, and the row
    /// with its last one. A failure keeps the row, retried with back-off.
    async fn finalize(&self, row: &Row, lock: &RowLock, plugin: &dyn Reconciler) -> Outcome {
        let key = row.id.clone();
        let Some(finalizer) = self
            .finalizer
            .as_ref()
            .filter(|f| row.finalizers.contains(f))
        else {
            // Not ours to finalize: other finalizers hold the row.
            self.forget(&row.id);
            return Outcome::Success;
        };
        match plugin.finalize(&row.id, &self.document(row)).await {
            Ok((Ok(Finalized::Done), _)) => self.remove_finalizer(row, finalizer, lock).await,
            Ok((Ok(Finalized::RetryAfter(wait)), _)) => {
                self.queue.add_after(key, wait);
                Outcome::RequeueAfter
            }
            Ok((Err(e), _)) => {
                self.finalize_failed(row, lock, plugin, e.reason, e.message)
                    .await
            }
            Err(e) => {
                self.finalize_failed(row, lock, plugin, "FinalizeFailed".into(), e.to_string())
                    .await
            }
        }
    }

    /// A failed finalize: the row stays, retried with back-off, and its
    /// status says why (`Ready=False` with the guest's reason), since a row
    /// has no Events for the application to read.
    async fn finalize_failed(
        &self,
        row: &Row,
        lock: &RowLock,
        plugin: &dyn Reconciler,
        reason: String,
        message: String,
    ) -> Outcome {
        let retry_in = self.queue.add_rate_limited(row.id.clone());
        tracing::warn!(plugin = %self.name, table = %self.table, row = %row.id, revision = row.revision, %reason, %message, ?retry_in, "finalize failed; the row stays, retrying with back-off");
        if self.reconciles.host_status {
            let failed = GuestResult {
                error: Some((reason, format!("finalize: {message}"))),
                ..Default::default()
            };
            let now = super::status::now();
            let desired = desired_status(
                &row.status,
                &failed,
                plugin.declared_conditions(),
                row.revision,
                &now,
            );
            if desired != row.status
                && let Err(e) = lock
                    .write_status(&row.id, row.revision, &desired, None)
                    .await
            {
                tracing::warn!(plugin = %self.name, row = %row.id, error = %e, "cannot write the failed finalize into the row's status");
            }
        }
        Outcome::Error
    }

    /// After a successful finalize: removes this plugin's finalizer, guarded
    /// by the revision finalize saw (a spec changed meanwhile is finalized
    /// again, as a stale resourceVersion fails the Kubernetes path's patch).
    async fn remove_finalizer(&self, row: &Row, finalizer: &str, lock: &RowLock) -> Outcome {
        let id = &row.id;
        match lock.remove_finalizer(id, row.revision, finalizer).await {
            Ok(Removed::RowDeleted) => {
                tracing::info!(plugin = %self.name, table = %self.table, row = %id, "row finalized and deleted");
                self.forget(id);
                Outcome::Success
            }
            Ok(Removed::Others(left)) => {
                tracing::info!(plugin = %self.name, table = %self.table, row = %id, finalizers_left = left, "row finalized; it waits for its other finalizers");
                self.forget(id);
                Outcome::Success
            }
            Ok(Removed::Stale) => {
                self.queue.add(id.clone(), Priority::High);
                Outcome::Requeue
            }
            Err(e) => {
                tracing::warn!(plugin = %self.name, table = %self.table, row = %id, %finalizer, error = %e, "cannot remove the finalizer from the row; retrying");
                self.queue.add_rate_limited(id.clone());
                Outcome::Error
            }
        }
    }
}

/// The watcher's reports, as priorities (see [`crate::datastore`]).
impl Sink for TableController {
    fn notified(&self, id: String) {
        self.add(id, Priority::High);
    }

    fn scanned(&self, row: &RowState) {
        // A deleted row waits for its finalizers: as urgent as a change.
        if Listed::row(row).priority() == Priority::High {
            self.add(row.id.clone(), Priority::High);
            return;
        }
        match row.due_in {
            None => self.add(row.id.clone(), Priority::Low),
            // What the guest asked for, at its time.
            Some(secs) if secs > 0.0 => self.queue.add_after(
                row.id.clone(),
                Duration::try_from_secs_f64(secs).unwrap_or(Duration::MAX),
            ),
            // Overdue (the host was away): the guest's wait is over.
            Some(_) => self.add(row.id.clone(), Priority::High),
        }
    }
}
