//! What a reconciler call returns, as host types: the plugin runtime converts
//! the guest's WIT records into these at the boundary (and rejects a status
//! that is not a JSON object there), so callers never see generated types.

use std::time::Duration;

use serde_json::Value;

use super::bindings::reconciler::exports::wasmlet::plugin::reconciler as wit;

/// A condition as the guest reports it; `status` is `True`, `False` or `Unknown`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuestCondition {
    pub type_: String,
    pub status: String,
    pub reason: String,
    pub message: String,
}

impl GuestCondition {
    pub fn new(type_: &str, status: &str, reason: &str, message: &str) -> GuestCondition {
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
    pub status: Option<Value>,
    pub conditions: Vec<GuestCondition>,
}

/// What `finalize` decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finalized {
    /// Cleanup finished: the finalizer may go.
    Done,
    /// Call `finalize` again after this long.
    RetryAfter(Duration),
}

/// A guest status that is not a JSON object.
#[derive(Debug)]
pub struct BadStatus(pub String);

fn status(s: Option<String>) -> Result<Option<Value>, BadStatus> {
    match s {
        None => Ok(None),
        Some(s) => match serde_json::from_str::<Value>(&s) {
            Ok(v) if v.is_object() => Ok(Some(v)),
            _ => Err(BadStatus(s)),
        },
    }
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
    type Error = BadStatus;
    fn try_from(o: wit::ReconcileOutcome) -> Result<Reconciled, BadStatus> {
        Ok(Reconciled {
            status: status(o.status)?,
            conditions: conditions(o.conditions),
            requeue_after: o.requeue_after_ms.map(Duration::from_millis),
        })
    }
}

impl TryFrom<wit::ReconcileError> for GuestError {
    type Error = BadStatus;
    fn try_from(e: wit::ReconcileError) -> Result<GuestError, BadStatus> {
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
