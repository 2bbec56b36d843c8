//! Provider calls in records (format version 2): which export ran with what
//! (state, state data, wake event), and what it returned, as the record's
//! JSON; and back again, so a replay can make the same call.
//!
//! The provider world's variants are written in the WIT's own kebab-case
//! (`{"workload-exited": 3}`, `"pod-changed"`), and state data (JSON text in
//! the contract) as the JSON value it holds.

use serde_json::{Value, json};

use super::{CallKind, CallRecord, Outcome};
use crate::plugin::loaded::CallError;
use crate::plugin::provider::{HandlerOutcome, WaitOn, WakeEvent};

/// A provider export call and its arguments (besides the pod).
#[derive(Debug, Clone)]
pub enum ProviderCall {
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

/// What a provider export returned.
#[derive(Debug, Clone)]
pub enum ProviderResult {
    Init(Result<String, String>),
    Handle(Result<HandlerOutcome, String>),
    Status(String),
}

/// A record that does not say how to make its provider call again.
#[derive(Debug, thiserror::Error)]
#[error("record {seq} ({key}): {field}: {message}")]
pub struct BadProviderRecord {
    pub seq: u64,
    pub key: String,
    pub field: &'static str,
    pub message: String,
}

/// JSON text as the value it holds (text that is not JSON: as a string).
pub fn json_of(s: &str) -> Value {
    serde_json::from_str(s).unwrap_or_else(|_| Value::String(s.to_string()))
}

/// A wake event as a record holds it.
pub fn event_json(e: &WakeEvent) -> Value {
    match e {
        WakeEvent::WorkloadExited(h) => json!({ "workload-exited": h }),
        WakeEvent::TimerElapsed => json!("timer-elapsed"),
        WakeEvent::PodChanged => json!("pod-changed"),
        WakeEvent::FetchDone(f) => json!({ "fetch-done": f }),
    }
}

/// The reverse of [`event_json`].
pub fn event_of(v: &Value) -> Result<WakeEvent, String> {
    let id = |k: &str| v.get(k).and_then(Value::as_u64);
    match v.as_str() {
        Some("timer-elapsed") => return Ok(WakeEvent::TimerElapsed),
        Some("pod-changed") => return Ok(WakeEvent::PodChanged),
        _ => {}
    }
    if let Some(h) = id("workload-exited") {
        return Ok(WakeEvent::WorkloadExited(h));
    }
    if let Some(f) = id("fetch-done") {
        return Ok(WakeEvent::FetchDone(f));
    }
    Err(format!(
        "{v} is no wake event (\"timer-elapsed\", \"pod-changed\", {{\"workload-exited\": HANDLE}} or {{\"fetch-done\": ID}})"
    ))
}

fn wait_on_json(w: &WaitOn) -> Value {
    match w {
        WaitOn::WorkloadExited(h) => json!({ "workload-exited": h }),
        WaitOn::Timer(ms) => json!({ "timer": ms }),
        WaitOn::PodChanged => json!("pod-changed"),
        WaitOn::FetchDone(f) => json!({ "fetch-done": f }),
    }
}

impl ProviderCall {
    pub fn kind(&self) -> CallKind {
        match self {
            ProviderCall::Init => CallKind::Init,
            ProviderCall::Handle { .. } => CallKind::Handle,
            ProviderCall::Status { .. } => CallKind::Status,
        }
    }

    /// The record's `state`, `state-data` and `event`.
    pub fn record_fields(&self) -> (Option<String>, Option<Value>, Option<Value>) {
        match self {
            ProviderCall::Init => (None, None, None),
            ProviderCall::Handle { state, data, event } => (
                Some(state.clone()),
                Some(json_of(data)),
                event.as_ref().map(event_json),
            ),
            ProviderCall::Status { state, data } => {
                (Some(state.clone()), Some(json_of(data)), None)
            }
        }
    }

    /// The call `record` holds; `None` for a reconciler's call.
    pub fn of_record(record: &CallRecord) -> Option<Result<ProviderCall, BadProviderRecord>> {
        match record.call {
            CallKind::Reconcile | CallKind::Finalize => None,
            kind => Some(Self::read(record, kind)),
        }
    }

    fn read(record: &CallRecord, kind: CallKind) -> Result<ProviderCall, BadProviderRecord> {
        let bad = |field: &'static str, message: String| BadProviderRecord {
            seq: record.seq,
            key: record.key.clone(),
            field,
            message,
        };
        if kind == CallKind::Init {
            return Ok(ProviderCall::Init);
        }
        let state = record.state.clone().ok_or_else(|| {
            bad(
                "state",
                "missing (a handle or status call names its state)".into(),
            )
        })?;
        let data = record
            .state_data
            .as_ref()
            .map(Value::to_string)
            .ok_or_else(|| bad("state-data", "missing".into()))?;
        if kind == CallKind::Status {
            return Ok(ProviderCall::Status { state, data });
        }
        let event = record
            .event
            .as_ref()
            .map(event_of)
            .transpose()
            .map_err(|m| bad("event", m))?;
        Ok(ProviderCall::Handle { state, data, event })
    }
}

impl Outcome {
    /// The outcome of a provider call as the host took it.
    pub fn of_provider(r: &Result<ProviderResult, CallError>) -> Outcome {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugin::provider::{Transition, Wait};

    #[test]
    fn events_and_outcomes_read_as_the_wit_spells_them() {
        for e in [
            WakeEvent::WorkloadExited(7),
            WakeEvent::TimerElapsed,
            WakeEvent::PodChanged,
            WakeEvent::FetchDone(3),
        ] {
            let v = event_json(&e);
            assert_eq!(format!("{:?}", event_of(&v).unwrap()), format!("{e:?}"));
        }
        assert_eq!(
            event_json(&WakeEvent::WorkloadExited(7)),
            json!({"workload-exited": 7})
        );
        assert!(
            event_of(&json!("exited"))
                .unwrap_err()
                .contains("no wake event")
        );

        let wait = Outcome::of_provider(&Ok(ProviderResult::Handle(Ok(HandlerOutcome::Wait(
            Wait {
                on: vec![
                    WaitOn::WorkloadExited(2),
                    WaitOn::Timer(500),
                    WaitOn::PodChanged,
                ],
                state_data: r#"{"uid":"u"}"#.into(),
            },
        )))));
        assert_eq!(
            serde_json::to_value(&wait).unwrap(),
            json!({"kind": "wait", "on": [{"workload-exited": 2}, {"timer": 500}, "pod-changed"],
                   "state-data": {"uid": "u"}})
        );
        let moved = Outcome::of_provider(&Ok(ProviderResult::Handle(Ok(
            HandlerOutcome::Transition(Transition {
                to: "Running".into(),
                state_data: "not json".into(),
            }),
        ))));
        assert_eq!(
            serde_json::to_value(&moved).unwrap(),
            json!({"kind": "transition", "to": "Running", "state-data": "not json"})
        );
        let failed = Outcome::of_provider(&Ok(ProviderResult::Init(Err("no uid".into()))));
        assert_eq!(
            serde_json::to_value(&failed).unwrap(),
            json!({"kind": "handler-error", "message": "no uid"})
        );
    }
}
