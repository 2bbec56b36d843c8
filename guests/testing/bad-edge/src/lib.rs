//! Test guest: a provider whose `Registered` handler moves straight to `Done`, an edge
//! its graph does not declare. The typed SDK cannot express that (it would not compile,
//! see `guests/sdk/tests/ui/undeclared_edge.rs`), so this guest implements the raw
//! contract to prove the host's run-time check: the pod must go to `Failed` (the error
//! state) with an Event naming the edge `Registered -> Done`.

use wasmlet_sdk::bindings::provider_exports::{
    Guest, HandlerOutcome, StateGraph, Transition, Wait, WakeEvent,
};

struct BadEdge;

impl Guest for BadEdge {
    fn graph() -> StateGraph {
        let s = |x: &str| x.to_owned();
        StateGraph {
            states: vec![s("Registered"), s("Running"), s("Done"), s("Failed")],
            edges: vec![(s("Registered"), s("Running")), (s("Running"), s("Done"))],
            initial: s("Registered"),
            on_delete: s("Done"),
            error_state: s("Failed"),
            backoff_states: vec![],
        }
    }

    fn init(_pod: String) -> Result<String, String> {
        Ok("{}".to_owned())
    }

    fn handle(
        state: String,
        _pod: String,
        state_data: String,
        _event: Option<WakeEvent>,
    ) -> Result<HandlerOutcome, String> {
        Ok(match state.as_str() {
            // The illegal move under test.
            "Registered" => HandlerOutcome::Transition(Transition {
                to: "Done".to_owned(),
                state_data,
            }),
            // Everything else rests.
            _ => HandlerOutcome::Wait(Wait {
                on: vec![],
                state_data,
            }),
        })
    }

    fn status(state: String, _pod: String, _state_data: String) -> String {
        match state.as_str() {
            "Failed" => r#"{"phase":"Failed","reason":"ProviderError"}"#,
            "Done" => r#"{"phase":"Succeeded"}"#,
            _ => r#"{"phase":"Pending"}"#,
        }
        .to_owned()
    }
}

wasmlet_sdk::bindings::provider::export_provider!(BadEdge with_types_in wasmlet_sdk::bindings::provider);
