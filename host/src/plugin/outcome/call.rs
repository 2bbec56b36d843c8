//! What became of one guest call, as recording, replay and shadowing all
//! compare it: which export ran ([`CallKind`]), how the sandbox failed it
//! ([`CallError`]) and its outcome as the host took it ([`Outcome`], the
//! record's `outcome`). Below the live call and its observers, so that each
//! of them can name it without importing the others.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{Finalized, GuestCondition, GuestError, Reconciled};

/// Why a call failed inside the sandbox (not the guest's own error result).
#[derive(Debug, Clone, thiserror::Error)]
pub enum CallError {
    #[error("the guest trapped: {0}")]
    Trap(String),
    #[error("the guest ran past its {0:?} deadline")]
    Timeout(Duration),
    #[error("the guest ran out of memory ({0} MiB cap)")]
    OutOfMemory(u32),
    #[error("the guest returned a malformed result: {0}")]
    Malformed(String),
    #[error("the guest returned a result of {bytes} bytes, over the host's limit of {limit} bytes")]
    TooLarge { bytes: usize, limit: usize },
}

/// Which export a call (and its record) is of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum CallKind {
    Reconcile,
    Finalize,
    /// Provider `init`: a pod's first state data (version 2).
    Init,
    /// Provider `handle`: one state handler run (version 2).
    Handle,
    /// Provider `status`: the pod status fragment for a state (version 2).
    Status,
}

/// A condition as the guest returned it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Condition {
    #[serde(rename = "type")]
    pub(crate) type_: String,
    pub(crate) status: String,
    pub(crate) reason: String,
    pub(crate) message: String,
}

impl From<&GuestCondition> for Condition {
    fn from(c: &GuestCondition) -> Condition {
        Condition {
            type_: c.type_.clone(),
            status: c.status.clone(),
            reason: c.reason.clone(),
            message: c.message.clone(),
        }
    }
}

/// What a call returned, as the host took it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(
    tag = "kind",
    rename_all = "kebab-case",
    rename_all_fields = "kebab-case",
    deny_unknown_fields
)]
pub(crate) enum Outcome {
    Reconciled {
        status: Option<Value>,
        conditions: Vec<Condition>,
        requeue_after_ms: Option<u64>,
    },
    Finalized {
        done: bool,
        retry_after_ms: Option<u64>,
    },
    GuestError {
        terminal: bool,
        reason: String,
        message: String,
        status: Option<Value>,
        conditions: Vec<Condition>,
    },
    /// Provider `init`: the pod's first state data.
    Initialized { state_data: Value },
    /// Provider `handle`: the pod moves to state `to`.
    Transition { to: String, state_data: Value },
    /// Provider `handle`: the pod waits in its state for any of `on`.
    Wait { on: Vec<Value>, state_data: Value },
    /// Provider `init` or `handle` returned an error (the pod goes to the
    /// error state).
    HandlerError { message: String },
    /// Provider `status`: the PodStatus fragment the host merges and patches.
    PodStatus { status: Value },
    /// The sandbox failed the call (trap, timeout, out of memory, refused result).
    Failed { error: String },
}

/// A reconciler export's result with whatever the call reported besides it.
type CallResult<T, R> = Result<(Result<T, GuestError>, R), CallError>;

impl Outcome {
    fn of_error(e: &GuestError) -> Outcome {
        Outcome::GuestError {
            terminal: e.terminal,
            reason: e.reason.clone(),
            message: e.message.clone(),
            status: e.status.clone(),
            conditions: e.conditions.iter().map(Condition::from).collect(),
        }
    }

    pub(crate) fn of_reconcile<R>(r: &CallResult<Reconciled, R>) -> Outcome {
        match r {
            Ok((Ok(o), _)) => Outcome::Reconciled {
                status: o.status.clone(),
                conditions: o.conditions.iter().map(Condition::from).collect(),
                requeue_after_ms: o.requeue_after.map(|d| d.as_millis() as u64),
            },
            Ok((Err(e), _)) => Outcome::of_error(e),
            Err(e) => Outcome::Failed {
                error: e.to_string(),
            },
        }
    }

    pub(crate) fn of_finalize<R>(r: &CallResult<Finalized, R>) -> Outcome {
        match r {
            Ok((Ok(Finalized::Done), _)) => Outcome::Finalized {
                done: true,
                retry_after_ms: None,
            },
            Ok((Ok(Finalized::RetryAfter(d)), _)) => Outcome::Finalized {
                done: false,
                retry_after_ms: Some(d.as_millis() as u64),
            },
            Ok((Err(e), _)) => Outcome::of_error(e),
            Err(e) => Outcome::Failed {
                error: e.to_string(),
            },
        }
    }
}
