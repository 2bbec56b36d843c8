//! What a guest call returns, as host types: the plugin runtime converts
//! the guest's WIT records into these at the boundary (and rejects a status
//! that is not a JSON object there), so callers never see generated types.
//!
//! Below the live call (`loaded`) and its observers (`record`, `shadow`):
//! what a call was and what became of it (`call`, [`provider`]) is named
//! here, so that none of them needs to import another for it.

pub(crate) mod call;
pub(crate) mod provider;

pub(crate) use call::{CallError, CallKind, Outcome};
pub(crate) use provider::{ProviderCall, ProviderResult};

use std::time::Duration;

use serde_json::Value;

use super::bindings::reconciler::exports::wasmlet::plugin::reconciler as wit;

/// A condition as the guest reports it; `status` is `True`, `False` or `Unknown`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuestCondition {
    pub(crate) type_: String,
    pub(crate) status: String,
    pub(crate) reason: String,
    pub(crate) message: String,
}

impl GuestCondition {
    pub(crate) fn new(type_: &str, status: &str, reason: &str, message: &str) -> GuestCondition {
        GuestCondition {
            type_: type_.into(),
            status: status.into(),
            reason: reason.into(),
            message: message.into(),
        }
    }
}

/// A reconcile that succeeded.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Reconciled {
    /// Status fields the guest wants merged in (a JSON object).
    pub status: Option<Value>,
    pub conditions: Vec<GuestCondition>,
    /// Reconcile again after this long even if nothing changes.
    pub requeue_after: Option<Duration>,
}

/// A reconcile or finalize the guest reported as failed.
#[derive(Debug, Clone, PartialEq)]
pub struct GuestError {
    /// No retry until the object changes (else: back-off).
    pub terminal: bool,
    pub reason: String,
    pub message: String,
    /// Status and conditions to write anyway.
    pub(crate) status: Option<Value>,
    pub(crate) conditions: Vec<GuestCondition>,
}

/// What `finalize` decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finalized {
    /// Cleanup finished: the finalizer may go.
    Done,
    /// Call `finalize` again after this long.
    RetryAfter(Duration),
}

/// The most bytes a reconcile or finalize result may carry: its status JSON
/// plus the strings of its conditions and error. Upstream etcd refuses objects
/// over 1.5 MiB, so a bigger status could never be stored; refused here, it is
/// the guest's fault (counted, named in `Ready`) rather than a status write that
/// fails on every retry.
pub(crate) const MAX_RESULT_BYTES: usize = 1 << 20;

/// A guest result the host refuses.
#[derive(Debug)]
pub enum BadResult {
    /// The status is not a JSON object.
    Status(String),
    /// The result carries this many bytes, over [`MAX_RESULT_BYTES`].
    TooLarge(usize),
}

fn status(s: Option<String>) -> Result<Option<Value>, BadResult> {
    match s {
        None => Ok(None),
        Some(s) => match serde_json::from_str::<Value>(&s) {
            Ok(v) if v.is_object() => Ok(Some(v)),
            _ => Err(BadResult::Status(s)),
        },
    }
}

/// Refuses a result of `bytes` over the limit (before its status is parsed).
fn within_limit(bytes: usize) -> Result<(), BadResult> {
    if bytes > MAX_RESULT_BYTES {
        return Err(BadResult::TooLarge(bytes));
    }
    Ok(())
}

fn result_bytes(status: &Option<String>, cs: &[wit::Condition]) -> usize {
    let conditions: usize = cs
        .iter()
        .map(|c| c.type_.len() + c.reason.len() + c.message.len())
        .sum();
    status.as_ref().map_or(0, String::len) + conditions
}

fn conditions(cs: Vec<wit::Condition>) -> Vec<GuestCondition> {
    cs.into_iter()
        .map(|c| {
            let status = match c.status {
                wit::ConditionStatus::True => "True",
                wit::ConditionStatus::False => "False",
                wit::ConditionStatus::Unknown => "Unknown",
            };
            GuestCondition::new(&c.type_, status, &c.reason, &c.message)
        })
        .collect()
}

impl TryFrom<wit::ReconcileOutcome> for Reconciled {
    type Error = BadResult;
    fn try_from(o: wit::ReconcileOutcome) -> Result<Reconciled, BadResult> {
        within_limit(result_bytes(&o.status, &o.conditions))?;
        Ok(Reconciled {
            status: status(o.status)?,
            conditions: conditions(o.conditions),
            requeue_after: o.requeue_after_ms.map(Duration::from_millis),
        })
    }
}

impl TryFrom<wit::ReconcileError> for GuestError {
    type Error = BadResult;
    fn try_from(e: wit::ReconcileError) -> Result<GuestError, BadResult> {
        within_limit(result_bytes(&e.status, &e.conditions) + e.reason.len() + e.message.len())?;
        Ok(GuestError {
            terminal: matches!(e.kind, wit::ErrorKind::Terminal),
            reason: e.reason,
            message: e.message,
            status: status(e.status)?,
            conditions: conditions(e.conditions),
        })
    }
}

impl From<wit::FinalizeOutcome> for Finalized {
    fn from(o: wit::FinalizeOutcome) -> Finalized {
        match o {
            wit::FinalizeOutcome::Done => Finalized::Done,
            wit::FinalizeOutcome::RetryAfterMs(ms) => {
                Finalized::RetryAfter(Duration::from_millis(ms))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(status: String, message: String) -> wit::ReconcileOutcome {
        wit::ReconcileOutcome {
            status: Some(status),
            conditions: vec![wit::Condition {
                type_: "Done".into(),
                status: wit::ConditionStatus::True,
                reason: "Ok".into(),
                message,
            }],
            requeue_after_ms: None,
        }
    }

    fn blob(bytes: usize) -> String {
        serde_json::json!({ "blob": "x".repeat(bytes) }).to_string()
    }

    #[test]
    fn a_result_over_the_limit_is_refused_with_its_size() {
        let ok = Reconciled::try_from(outcome(blob(MAX_RESULT_BYTES / 2), String::new()));
        assert!(ok.is_ok(), "{ok:?}");
        let huge = blob(4 << 20);
        let n = huge.len() + "DoneOk".len();
        match Reconciled::try_from(outcome(huge, String::new())) {
            Err(BadResult::TooLarge(got)) => assert_eq!(got, n),
            other => panic!("expected TooLarge, got {other:?}"),
        }
        // Conditions count too: a small status with a huge message is no way around it.
        let r = Reconciled::try_from(outcome("{}".into(), "m".repeat(MAX_RESULT_BYTES)));
        assert!(matches!(r, Err(BadResult::TooLarge(_))), "{r:?}");
        let e = GuestError::try_from(wit::ReconcileError {
            kind: wit::ErrorKind::Transient,
            reason: "Big".into(),
            message: "m".repeat(MAX_RESULT_BYTES + 1),
            status: None,
            conditions: vec![],
        });
        assert!(matches!(e, Err(BadResult::TooLarge(_))), "{e:?}");
    }

    #[test]
    fn a_status_that_is_not_an_object_is_refused() {
        for s in ["{\"echo\": ", "[1, 2]", "\"text\"", "3"] {
            let r = Reconciled::try_from(outcome(s.into(), String::new()));
            assert!(
                matches!(r, Err(BadResult::Status(ref x)) if x == s),
                "{s}: {r:?}"
            );
        }
    }
}
