//! Provider calls in records (format version 2): which export ran with what
//! (state, state data, wake event), and what it returned, as the record's
//! JSON; and back again, so a replay can make the same call.
//!
//! The provider world's variants are written in the WIT's own kebab-case
//! (`{"workload-exited": 3}`, `"pod-changed"`), and state data (JSON text in
//! the contract) as the JSON value it holds.

use serde_json::{Value, json};

use super::{CallKind, CallRecord};
pub(crate) use crate::plugin::outcome::ProviderCall;
pub(crate) use crate::plugin::outcome::provider::json_of;
use crate::plugin::provider::WakeEvent;

/// A record that does not say how to make its provider call again.
#[derive(Debug, thiserror::Error)]
#[error("record {seq} ({key}): {field}: {message}")]
pub(crate) struct BadProviderRecord {
    pub(crate) seq: u64,
    pub(crate) key: String,
    pub(crate) field: &'static str,
    pub(crate) message: String,
}

/// A wake event as a record holds it.
pub(crate) fn event_json(e: &WakeEvent) -> Value {
    match e {
        WakeEvent::WorkloadExited(h) => json!({ "workload-exited": h }),
        WakeEvent::TimerElapsed => json!("timer-elapsed"),
        WakeEvent::PodChanged => json!("pod-changed"),
        WakeEvent::FetchDone(f) => json!({ "fetch-done": f }),
    }
}

/// The reverse of [`event_json`].
pub(crate) fn event_of(v: &Value) -> Result<WakeEvent, String> {
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

/// A provider call's `state`, `state-data` and `event`, as its record holds them.
pub(crate) fn record_fields(call: &ProviderCall) -> (Option<String>, Option<Value>, Option<Value>) {
    match call {
        ProviderCall::Init => (None, None, None),
        ProviderCall::Handle { state, data, event } => (
            Some(state.clone()),
            Some(json_of(data)),
            event.as_ref().map(event_json),
        ),
        ProviderCall::Status { state, data } => (Some(state.clone()), Some(json_of(data)), None),
    }
}

/// The provider call `record` holds; `None` for a reconciler's call.
pub(crate) fn call_of(record: &CallRecord) -> Option<Result<ProviderCall, BadProviderRecord>> {
    match record.call {
        CallKind::Reconcile | CallKind::Finalize => None,
        kind => Some(read(record, kind)),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugin::bindings::provider::exports::wasmlet::plugin::provider::{Transition, Wait};
    use crate::plugin::outcome::{Outcome, ProviderResult};
    use crate::plugin::provider::{HandlerOutcome, WaitOn};

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
