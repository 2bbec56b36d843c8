//! Test guest: a provider that faults where the pod's annotations say, so the node
//! agent's back-off and forced teardown can be shown end to end (issue 33).
//!
//! | annotation | faults in |
//! |---|---|
//! | `testing.wasmlet.dev/fault-init` | `init` |
//! | `testing.wasmlet.dev/fault-handle` | the `Registered` handler (the move to `Running`) |
//! | `testing.wasmlet.dev/fault-teardown` | the `Terminated` (on-delete) handler |
//!
//! Each takes `error` (the handler returns an error), `trap` (`unreachable`) or `loop`
//! (spins past the deadline); anything else, or no annotation, does not fault. Removing
//! the annotation stops the fault: the host re-reads the pod before each retry. The
//! graph declares no back-off state, so the host's own back-off is used. Raw bindings:
//! the typed SDK's handlers cannot trap or loop by request.

use serde_json::Value;
use wasmlet_sdk::bindings::provider_exports::{
    Guest, HandlerOutcome, StateGraph, Transition, Wait, WaitOn, WakeEvent,
};

struct Faulty;

/// Faults as the pod's annotation `testing.wasmlet.dev/fault-{at}` says.
fn fault(pod: &str, at: &str) -> Result<(), String> {
    let pod: Value = serde_json::from_str(pod).map_err(|e| format!("pod JSON: {e}"))?;
    let key = format!("/metadata/annotations/testing.wasmlet.dev~1fault-{at}");
    match pod.pointer(&key).and_then(Value::as_str) {
        Some("error") => Err(format!("injected error in {at}")),
        Some("trap") => core::arch::wasm32::unreachable(),
        Some("loop") => loop {
            std::hint::black_box(&pod);
        },
        _ => Ok(()),
    }
}

impl Guest for Faulty {
    fn graph() -> StateGraph {
        let s = |x: &str| x.to_owned();
        StateGraph {
            states: vec![s("Registered"), s("Running"), s("Terminated"), s("Failed")],
            edges: vec![(s("Registered"), s("Running"))],
            initial: s("Registered"),
            on_delete: s("Terminated"),
            error_state: s("Failed"),
            backoff_states: vec![],
        }
    }

    fn init(pod: String) -> Result<String, String> {
        fault(&pod, "init")?;
        Ok("{}".to_owned())
    }

    fn handle(
        state: String,
        pod: String,
        state_data: String,
        _event: Option<WakeEvent>,
    ) -> Result<HandlerOutcome, String> {
        Ok(match state.as_str() {
            "Registered" => {
                fault(&pod, "handle")?;
                HandlerOutcome::Transition(Transition {
                    to: "Running".to_owned(),
                    state_data,
                })
            }
            "Terminated" => {
                fault(&pod, "teardown")?;
                HandlerOutcome::Wait(Wait {
                    on: vec![],
                    state_data,
                })
            }
            // Running rests until the pod changes; Failed rests for good.
            "Running" => HandlerOutcome::Wait(Wait {
                on: vec![WaitOn::PodChanged],
                state_data,
            }),
            _ => HandlerOutcome::Wait(Wait {
                on: vec![],
                state_data,
            }),
        })
    }

    fn status(state: String, _pod: String, _state_data: String) -> String {
        match state.as_str() {
            "Running" => r#"{"phase":"Running","conditions":[{"type":"Ready","status":"True"}]}"#,
            "Failed" => r#"{"phase":"Failed","reason":"ProviderError"}"#,
            // Registered is passed straight through (its handler transitions at
            // once): the host never writes this (issue 45's status rule).
            "Registered" => r#"{"phase":"Pending","message":"status of Registered"}"#,
            _ => r#"{"phase":"Pending"}"#,
        }
        .to_owned()
    }
}

wasmlet_sdk::bindings::provider::export_provider!(Faulty with_types_in wasmlet_sdk::bindings::provider);
