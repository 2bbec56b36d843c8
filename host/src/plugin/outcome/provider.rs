//! A provider export call and what it returned, as host types; and the
//! outcome the host takes of it. The record's JSON for the call's arguments
//! (and reading them back) is `record::provider`'s.

use serde_json::{Value, json};

use super::{CallError, CallKind, Outcome};
use crate::plugin::bindings::provider::exports::wasmlet::plugin::provider::{
    HandlerOutcome, WaitOn, WakeEvent,
};

/// A provider export call and its arguments (besides the pod).
#[derive(Debug, Clone)]
pub(crate) enum ProviderCall {
    Init,
    Handle {
        state: String,
        data: String,
        event: Option<WakeEvent>,
    },
    Status {
        state: String,
        data: String,
    },
}

impl ProviderCall {
    pub(crate) fn kind(&self) -> CallKind {
        match self {
            ProviderCall::Init => CallKind::Init,
            ProviderCall::Handle { .. } => CallKind::Handle,
            ProviderCall::Status { .. } => CallKind::Status,
        }
    }
}

/// What a provider export returned.
#[derive(Debug, Clone)]
pub(crate) enum ProviderResult {
    Init(Result<String, String>),
    Handle(Result<HandlerOutcome, String>),
    Status(String),
}

/// JSON text as the value it holds (text that is not JSON: as a string).
pub(crate) fn json_of(s: &str) -> Value {
    serde_json::from_str(s).unwrap_or_else(|_| Value::String(s.to_string()))
}

fn wait_on_json(w: &WaitOn) -> Value {
    match w {
        WaitOn::WorkloadExited(h) => json!({ "workload-exited": h }),
        WaitOn::Timer(ms) => json!({ "timer": ms }),
        WaitOn::PodChanged => json!("pod-changed"),
        WaitOn::FetchDone(f) => json!({ "fetch-done": f }),
    }
}

impl Outcome {
    /// The outcome of a provider call as the host took it.
    pub(crate) fn of_provider(r: &Result<ProviderResult, CallError>) -> Outcome {
        match r {
            Ok(ProviderResult::Init(Ok(data))) => Outcome::Initialized {
                state_data: json_of(data),
            },
            Ok(ProviderResult::Handle(Ok(HandlerOutcome::Transition(t)))) => Outcome::Transition {
                to: t.to.clone(),
                state_data: json_of(&t.state_data),
            },
            Ok(ProviderResult::Handle(Ok(HandlerOutcome::Wait(w)))) => Outcome::Wait {
                on: w.on.iter().map(wait_on_json).collect(),
                state_data: json_of(&w.state_data),
            },
            Ok(ProviderResult::Init(Err(m)) | ProviderResult::Handle(Err(m))) => {
                Outcome::HandlerError { message: m.clone() }
            }
            Ok(ProviderResult::Status(s)) => Outcome::PodStatus { status: json_of(s) },
            Err(e) => Outcome::Failed {
                error: e.to_string(),
            },
        }
    }
}
