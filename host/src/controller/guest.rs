//! What every controller does around a guest's reconcile, whatever its
//! objects come from (a Kubernetes kind or a datastore table): call the
//! guest, turn its answer into the status input ([`GuestResult`]) and a
//! requeue decision, and apply that decision to the workqueue.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::controller::Outcome;
use super::source::Reconciler;
use super::status::GuestResult;
use super::workqueue::WorkQueue;
use crate::plugin::record::PendingRecord;
use crate::plugin::sandbox::Write;

/// How a reconcile asks to be queued again: `Ok((requeue_after,
/// retry_soon))` after a success, `Err((terminal, retry_soon))` after a
/// failure.
pub(super) type Requeue = Result<(Option<Duration>, bool), (bool, bool)>;

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
                error: None,
            },
            requeue: Ok((o.requeue_after, report.retry_soon)),
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
                },
                requeue: Err((e.terminal, report.retry_soon)),
                writes: report.writes,
                record: report.record,
            }
        }
        Err(call) => GuestCall {
            result: GuestResult {
                status: None,
                conditions: vec![],
                error: Some(("PluginFailed".into(), call.to_string())),
            },
            requeue: Err((false, false)),
            writes: Vec::new(),
            record: None,
        },
    }
}

/// Queues `key` again (or not) as the reconcile asked, and remembers in
/// `waiting` whether it waits for a requeue-after.
pub(super) fn settle(
    queue: &WorkQueue<String>,
    waiting: &Mutex<HashSet<String>>,
    key: &str,
    requeue: Requeue,
) -> Outcome {
    {
        let mut waiting = waiting.lock().unwrap_or_else(|p| p.into_inner());
        match requeue {
            Ok((Some(wait), false)) if !wait.is_zero() => waiting.insert(key.to_string()),
            _ => waiting.remove(key),
        };
    }
    match requeue {
        Ok((_, true)) | Err((false, true)) => {
            queue.add_soon(key.to_string());
            Outcome::Requeue
        }
        // "Again at once" goes through the per-key back-off, as
        // controller-runtime's `Requeue: true`: a guest that always asks
        // for 0 is slowed down instead of spinning a core.
        Ok((Some(wait), _)) if wait.is_zero() => {
            queue.add_rate_limited(key.to_string());
            Outcome::Requeue
        }
        Ok((Some(wait), _)) => {
            queue.forget(&key.to_string());
            queue.add_after(key.to_string(), wait);
            Outcome::RequeueAfter
        }
        Ok((None, _)) => {
            queue.forget(&key.to_string());
            Outcome::Success
        }
        Err((true, _)) => {
            // Terminal: no retry until the object changes.
            queue.forget(&key.to_string());
            Outcome::Error
        }
        Err((false, _)) => {
            let retry_in = queue.add_rate_limited(key.to_string());
            // Says how the back-off grows (also what the e2e tests read).
            tracing::info!(?retry_in, "reconcile failed; retrying with back-off");
            Outcome::Error
        }
    }
}

/// The keys waiting for a requeue-after (what [`settle`] keeps), for a
/// `waiting` watch to call now.
pub(super) fn waiting_keys(waiting: &Mutex<HashSet<String>>) -> Vec<String> {
    waiting
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .cloned()
        .collect()
}
