//! The loop every controller's workers run, whatever its objects are (a
//! Kubernetes kind: `reconcile.rs`; a datastore table: `table.rs`): take a
//! key from the controller's queue, let the controller admit it, reconcile it
//! under a span, count the outcome, hand the key back. As kube-runtime's
//! `applier` runs under its `Controller`, the loop knows nothing of what a
//! reconcile does.
//!
//! ```ignore
//! for _ in 0..concurrency {
//!     tasks.spawn(worker::run(controller.clone()));
//! }
//! ```

use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use tracing::Instrument;

use super::controller::Outcome;
use super::metrics::ControllerSeries;
use super::workqueue::WorkQueue;

/// What a controller decides about a key it took from its queue.
pub(super) enum Admit {
    /// Reconcile it now.
    Reconcile,
    /// Not now (leadership lost while the key waited): back in the queue
    /// at the priority it had.
    PutBack,
    /// Not this controller's any more (out of scope, another host's row):
    /// dropped; the controller has forgotten what it kept of it.
    Drop,
}

/// A controller, as its workers see it.
pub(super) trait Objects: Send + Sync + 'static {
    fn queue(&self) -> &WorkQueue<String>;
    fn series(&self) -> &ControllerSeries;
    /// Waits until work may be taken (caches synced, leadership held).
    fn ready(&self) -> impl Future<Output = ()> + Send;
    fn admit(&self, key: &str) -> Admit;
    /// The span a reconcile of `key` runs in; it has an `outcome` field.
    fn span(&self, key: &str) -> tracing::Span;
    /// One reconcile of `key`; it queues the key again as it needs.
    fn reconcile_key(&self, key: &str) -> impl Future<Output = Outcome> + Send;
}

/// One worker: runs until the queue shuts down.
pub(super) async fn run<O: Objects>(objects: Arc<O>) {
    let queue = objects.queue();
    loop {
        objects.ready().await;
        let Some(item) = queue.next().await else {
            return;
        };
        let key = item.key;
        match objects.admit(&key) {
            Admit::Reconcile => {}
            Admit::PutBack => {
                queue.add(key.clone(), item.priority);
                queue.done(&key);
                continue;
            }
            Admit::Drop => {
                queue.done(&key);
                continue;
            }
        }
        let series = objects.series();
        series.active_workers(1);
        let started = Instant::now();
        let span = objects.span(&key);
        let outcome = objects.reconcile_key(&key).instrument(span.clone()).await;
        span.record("outcome", outcome.as_str());
        series.reconciled(outcome, started.elapsed());
        series.active_workers(-1);
        queue.done(&key);
    }
}
