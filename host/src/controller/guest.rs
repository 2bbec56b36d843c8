//! What every controller does around a guest's reconcile, whatever its
//! objects come from (a Kubernetes kind or a datastore table): call the
//! guest, turn its answer into the status input ([`GuestResult`]) and a
//! requeue decision, and apply that decision to the workqueue.

use std::sync::Arc;
use std::time::Duration;

use super::controller::Outcome;
use super::keys::Keys;
use super::source::Reconciler;
use super::status::GuestResult;
use super::workqueue::WorkQueue;
use crate::plugin::record::PendingRecord;
use crate::plugin::sandbox::Write;

/// How a reconcile asks to be queued again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Requeue {
    /// Done until the object changes.
    Done,
    /// Again after this long (a watch mapped `waiting` calls it sooner).
    After(Duration),
    /// Again at once, through the per-key back-off: a guest asking for 0
    /// every time is slowed down instead of spinning a core, as
    /// controller-runtime's `Requeue: true`.
    Again,
    /// Again soon, whatever the guest answered: one of its writes met a
    /// conflict or a 429 (the cache was behind; the next pass sees more).
    Soon,
    /// Failed: retried with back-off.
    Failed,
    /// Failed for good: not retried until the object changes.
    Terminal,
}

impl Requeue {
    /// A success asking to be called again after `after` (`None`: never).
    fn succeeded(after: Option<Duration>, retry_soon: bool) -> Requeue {
        match after {
            _ if retry_soon => Requeue::Soon,
            None => Requeue::Done,
            Some(wait) if wait.is_zero() => Requeue::Again,
            Some(wait) => Requeue::After(wait),
        }
    }

    /// A failure: a terminal one stays terminal even after a conflict.
    fn failed(terminal: bool, retry_soon: bool) -> Requeue {
        match (terminal, retry_soon) {
            (true, _) => Requeue::Terminal,
            (false, true) => Requeue::Soon,
            (false, false) => Requeue::Failed,
        }
    }
}

/// One guest reconcile, digested.
pub(super) struct GuestCall {
    /// The guest's status, conditions and error, for the host-owned status.
    pub(super) result: GuestResult,
    pub(super) requeue: Requeue,
    /// The cluster writes the guest made (for expectations).
    pub(super) writes: Vec<Write>,
    /// Recording: the call's record, which the host's own writes join.
    pub(super) record: Option<Arc<PendingRecord>>,
}

/// Calls `plugin`'s reconcile for `key` with the object `obj` (JSON).
pub(super) async fn call_reconcile(
    plugin: &dyn Reconciler,
    controller: &str,
    key: &str,
    obj: &str,
) -> GuestCall {
    match plugin.reconcile(key, obj).await {
        Ok((Ok(o), report)) => GuestCall {
            result: GuestResult {
                status: o.status,
                conditions: o.conditions,
                ..Default::default()
            },
            requeue: Requeue::succeeded(o.requeue_after, report.retry_soon),
            writes: report.writes,
            record: report.record,
        },
        Ok((Err(e), report)) => {
            tracing::info!(plugin = %controller, %key, reason = %e.reason, message = %e.message, terminal = e.terminal, "reconcile returned an error");
            GuestCall {
                result: GuestResult {
                    status: e.status,
                    conditions: e.conditions,
                    error: Some((e.reason, e.message)),
                    terminal: e.terminal,
                },
                requeue: Requeue::failed(e.terminal, report.retry_soon),
                writes: report.writes,
                record: report.record,
            }
        }
        Err(call) => GuestCall {
            result: GuestResult {
                error: Some(("PluginFailed".into(), call.to_string())),
                ..Default::default()
            },
            requeue: Requeue::Failed,
            writes: Vec::new(),
            record: None,
        },
    }
}

/// Queues `key` again (or not) as the reconcile asked, and remembers in
/// `keys` whether it waits for a requeue-after.
pub(super) fn settle(
    queue: &WorkQueue<String>,
    keys: &Keys,
    key: &str,
    requeue: Requeue,
) -> Outcome {
    keys.with(key, |s| s.waiting = matches!(requeue, Requeue::After(_)));
    match requeue {
        Requeue::Soon => {
            queue.add_soon(key.to_string());
            Outcome::Requeue
        }
        Requeue::Again => {
            queue.add_rate_limited(key.to_string());
            Outcome::Requeue
        }
        Requeue::After(wait) => {
            queue.forget(&key.to_string());
            queue.add_after(key.to_string(), wait);
            Outcome::RequeueAfter
        }
        Requeue::Done => {
            queue.forget(&key.to_string());
            Outcome::Success
        }
        Requeue::Terminal => {
            queue.forget(&key.to_string());
            Outcome::Error
        }
        Requeue::Failed => {
            let retry_in = queue.add_rate_limited(key.to_string());
            // Says how the back-off grows (also what the e2e tests read).
            tracing::info!(?retry_in, "reconcile failed; retrying with back-off");
            Outcome::Error
        }
    }
}
