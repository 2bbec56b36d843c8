//! Which lane an object a list finds goes to (seed 002's rule), one rule for
//! a Kubernetes kind's list (a host start, a failover, a plugin load, a
//! relist) and a table's scan alike: what this host has not finished with
//! is high priority, whatever the size of the up-to-date backlog around it;
//! the rest is low, re-verified at the low lane's rate. Without it, a change
//! made while the host was away waits behind every object it lists.

use serde_json::Value;

use super::workqueue::Priority;
use crate::cluster::CachedObject;
use crate::datastore::RowState;

/// What a list tells of one object, whatever its source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Listed {
    /// Being deleted (`deletionTimestamp`; a row's `deleted_at`): its
    /// finalizers wait.
    pub(super) deleting: bool,
    /// The host is done with its current generation (or revision): its last
    /// pass there succeeded, or failed for good.
    pub(super) done: bool,
}

impl Listed {
    /// High unless the object is live and done with.
    pub(super) fn priority(self) -> Priority {
        if self.deleting || !self.done {
            Priority::High
        } else {
            Priority::Low
        }
    }

    /// A table row: done when `status.lastReconciledRevision` is its revision.
    pub(super) fn row(row: &RowState) -> Listed {
        Listed {
            deleting: row.deleting,
            done: row.up_to_date(),
        }
    }

    /// An object of a Kubernetes kind. With host-owned status (`host_status`)
    /// it is done when `status.observedGeneration` is its generation (the
    /// host moves it only after a successful or terminally failed pass) and
    /// it carries a `Ready` condition as the host writes them (with the
    /// `observedGeneration` of the pass that set it; without one the host
    /// never finished a pass on it). Without host status the guest owns the
    /// status: a stated `observedGeneration` must be the generation, and an
    /// object that carries `finalizer` (this plugin's) but no status was
    /// left between the host's finalizer write and the guest's first pass.
    pub(super) fn object(o: &CachedObject, host_status: bool, finalizer: Option<&str>) -> Listed {
        let generation = o.metadata.generation.unwrap_or(0);
        let status = o.status();
        let observed = status.get("observedGeneration").and_then(Value::as_i64);
        let done = if host_status {
            observed == Some(generation) && host_ready(&status)
        } else {
            let empty = status.as_object().is_none_or(|s| s.is_empty());
            let ours = finalizer.is_some_and(|f| {
                o.metadata
                    .finalizers
                    .as_ref()
                    .is_some_and(|l| l.iter().any(|x| x == f))
            });
            observed.is_none_or(|g| g == generation) && !(ours && empty)
        };
        Listed {
            deleting: o.metadata.deletion_timestamp.is_some(),
            done,
        }
    }
}

/// Whether `status` has a `Ready` condition as the host writes them: the
/// host stamps every condition it keeps with `observedGeneration`.
fn host_ready(status: &Value) -> bool {
    status
        .get("conditions")
        .and_then(Value::as_array)
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| c["type"] == "Ready" && c["observedGeneration"].is_i64())
        })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn object(v: serde_json::Value) -> CachedObject {
        serde_json::from_str(&v.to_string()).unwrap()
    }

    fn ready(generation: i64) -> serde_json::Value {
        json!({"type": "Ready", "status": "True", "reason": "Ready", "message": "",
               "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": generation})
    }

    #[test]
    fn what_the_host_finished_is_low_and_everything_else_high() {
        let meta = json!({"name": "a", "namespace": "default", "generation": 3});
        let at = |status: serde_json::Value| {
            Listed::object(
                &object(json!({"metadata": meta, "status": status})),
                true,
                None,
            )
            .priority()
        };
        assert_eq!(
            at(json!({"observedGeneration": 3, "conditions": [ready(3)]})),
            Priority::Low
        );
        // Changed while the host was away.
        assert_eq!(
            at(json!({"observedGeneration": 2, "conditions": [ready(2)]})),
            Priority::High
        );
        // Never reconciled, or a status someone else wrote.
        assert_eq!(at(json!({})), Priority::High);
        assert_eq!(
            at(
                json!({"observedGeneration": 3, "conditions": [{"type": "Ready", "status": "True"}]})
            ),
            Priority::High
        );
        // Being deleted, however up to date.
        let mut deleting = meta.clone();
        deleting["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        let o = object(json!({"metadata": deleting,
            "status": {"observedGeneration": 3, "conditions": [ready(3)]}}));
        assert_eq!(Listed::object(&o, true, None).priority(), Priority::High);
    }

    #[test]
    fn without_host_status_the_guests_observed_generation_and_the_finalizer_decide() {
        let o = |meta: serde_json::Value, status: serde_json::Value| {
            Listed::object(
                &object(json!({"metadata": meta, "status": status})),
                false,
                Some("example.dev/cleanup"),
            )
            .priority()
        };
        let meta = json!({"name": "p", "generation": 1});
        // A pod's status has no observedGeneration: nothing says it changed.
        assert_eq!(o(meta.clone(), json!({"phase": "Pending"})), Priority::Low);
        assert_eq!(
            o(
                json!({"name": "d", "generation": 4}),
                json!({"observedGeneration": 3})
            ),
            Priority::High
        );
        let ours = json!({"name": "f", "generation": 1, "finalizers": ["example.dev/cleanup"]});
        assert_eq!(o(ours.clone(), json!({})), Priority::High);
        assert_eq!(o(ours, json!({"observedGeneration": 1})), Priority::Low);
        let theirs = json!({"name": "f", "generation": 1, "finalizers": ["other/x"]});
        assert_eq!(o(theirs, json!({})), Priority::Low);
    }

    #[test]
    fn a_row_is_done_at_its_last_reconciled_revision() {
        let mut row = RowState {
            id: "r".into(),
            revision: 2,
            last_reconciled: Some(2),
            due_in: None,
            deleting: false,
        };
        assert_eq!(Listed::row(&row).priority(), Priority::Low);
        row.deleting = true;
        assert_eq!(Listed::row(&row).priority(), Priority::High);
        row.deleting = false;
        row.last_reconciled = Some(1);
        assert_eq!(Listed::row(&row).priority(), Priority::High);
    }
}
