//! Providers: a pod's lifecycle as a typestate machine (after Krustlet v0.5).
//!
//! Each state is a Rust type implementing [`State<S>`], where `S` is the provider's
//! per-pod data ([`PodState`]) shared by all its states. A handler returns
//! [`Transition::next(self, Next)`](Transition::next), which compiles only when the
//! edge `Current => Next` is declared with [`crate::edges!`]; the same macro records the
//! edge list that the `graph` export hands to the host, which enforces it again at run
//! time. A handler never blocks: it returns [`Transition::wait`] on host events instead.
//!
//! Every call runs in a fresh instance, so the SDK carries the pod data and the current
//! state's value between calls as JSON (`{"pod": S, "state": <state value>}`), which is
//! why states and pod data are `Serialize + DeserializeOwned`.
//!
//! ```
//! use serde::{Deserialize, Serialize};
//! use wasmlet_sdk::provider::{Pod, PodState, State, StateError, Transition, WakeEvent};
//!
//! #[derive(Serialize, Deserialize)]
//! struct Runner { restarts: u32 }
//! impl PodState for Runner {
//!     fn new(_pod: &Pod) -> Result<Self, StateError> { Ok(Runner { restarts: 0 }) }
//! }
//!
//! #[derive(Default, Serialize, Deserialize)] struct Registered;
//! #[derive(Serialize, Deserialize)] struct Running { handle: u64 }
//! #[derive(Serialize, Deserialize)] struct Finished;
//!
//! impl State<Runner> for Registered {
//!     const NAME: &'static str = "Registered";
//!     fn next(self, _: &Pod, _: &mut Runner, _: Option<&WakeEvent>) -> Result<Transition<Runner>, StateError> {
//!         Ok(Transition::next(self, Running { handle: 7 }))
//!     }
//! }
//! impl State<Runner> for Running {
//!     const NAME: &'static str = "Running";
//!     fn next(self, _: &Pod, _: &mut Runner, wake: Option<&WakeEvent>) -> Result<Transition<Runner>, StateError> {
//!         match wake {
//!             Some(WakeEvent::WorkloadExited(_)) => Ok(Transition::next(self, Finished)),
//!             _ => {
//!                 let on = [wasmlet_sdk::provider::WaitOn::WorkloadExited(self.handle)];
//!                 Ok(Transition::wait(self, on))
//!             }
//!         }
//!     }
//! }
//! impl State<Runner> for Finished {
//!     const NAME: &'static str = "Finished";
//!     fn next(self, _: &Pod, _: &mut Runner, _: Option<&WakeEvent>) -> Result<Transition<Runner>, StateError> {
//!         Ok(Transition::wait(self, []))
//!     }
//! }
//!
//! wasmlet_sdk::edges! {
//!     Runner {
//!         Registered => Running,
//!         Running => [Finished],
//!     }
//! }
//! wasmlet_sdk::provider!(Runner, initial = Registered, on_delete = Finished, error = Finished);
//! ```

use std::fmt;
use std::marker::PhantomData;
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::workloads::{FetchId, WorkloadHandle};

pub use k8s_openapi::api::core::v1::Pod;

mod exports;
mod graph;
mod macros;

#[doc(hidden)]
pub use exports::{
    __handle, __handle_as, __handle_in, __init, __status, __status_as, __status_in, HandleFn,
    Machine, Named,
};
#[doc(hidden)]
pub use graph::{__graph, __graph_or_trap, StateId};

/// The provider's per-pod data, shared by all states (Krustlet's `PodState`).
pub trait PodState: Serialize + DeserializeOwned + Sized + 'static {
    /// The data for a pod the host has just bound to this node.
    fn new(pod: &Pod) -> Result<Self, StateError>;
}

/// One state of the machine whose pod data is `S`.
pub trait State<S: PodState>: Serialize + DeserializeOwned + Sized + 'static {
    /// The name the host sees (in the graph, in events, in metrics, in the state the
    /// host keeps for each pod, so renaming a state strands pods already in it). Unique
    /// within a machine: two states with one name make the `graph` export fail.
    const NAME: &'static str;

    /// Handles the state: called on entering it (`wake` is `None`) and again after each
    /// [`Transition::wait`] with the event that ended the wait. Must not block.
    fn next(
        self,
        pod: &Pod,
        pod_state: &mut S,
        wake: Option<&WakeEvent>,
    ) -> Result<Transition<S>, StateError>;

    /// The pod status fragment (phase, reason, message, containerStatuses, ...)
    /// the host patches when the pod comes to rest in this state: its handler
    /// returns a wait (the first since the pod entered it) or takes a self-edge.
    /// A state the pod passes straight through is not written. Default: nothing.
    fn status(&self, pod: &Pod, pod_state: &S) -> Value {
        let _ = (pod, pod_state);
        Value::Object(Default::default())
    }
}

/// `Self => Next` is a declared edge. Implemented by [`crate::edges!`] only.
#[diagnostic::on_unimplemented(
    message = "`{Self} => {Next}` is not a declared edge of this state machine",
    label = "no edge `{Self} => {Next}`",
    note = "declare it in `wasmlet_sdk::edges!` if the transition is intended"
)]
pub trait TransitionTo<Next> {}

/// What a handler waits for before it is called again in the same state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitOn {
    /// The workload with this handle exited (or was killed).
    WorkloadExited(WorkloadHandle),
    /// This much time passed.
    Timer(Duration),
    /// The pod object changed (spec, labels, deletionTimestamp).
    PodChanged,
    /// A module pull started by `workloads::fetch_module` finished.
    FetchDone(FetchId),
}

/// Why a handler is called again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WakeEvent {
    /// A workload the handler waited on exited.
    WorkloadExited(WorkloadHandle),
    /// The timer the handler asked for elapsed.
    TimerElapsed,
    /// The pod object changed (spec, labels, deletionTimestamp).
    PodChanged,
    /// A module fetch the handler waited on finished, successfully or not.
    FetchDone(FetchId),
}

/// A handler failure, never final: the host counts it as a provider fault, the
/// pod waits in the host's `ProviderBackOff` state (the kubelet's back-off, 10 s
/// doubling to 300 s; `status.reason` `ProviderBackOff` with this message, a
/// Warning Event), then the same state's handler runs again (or the on-delete
/// state's, if the pod was deleted meanwhile). The machine's error state is
/// entered only on an undeclared transition, never on an error.
/// Any `std::error::Error` converts with `?`; make others with [`StateError::new`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateError(pub String);

impl StateError {
    /// A handler failure with this message (it reaches the pod's status and the host's log).
    pub fn new(message: impl Into<String>) -> Self {
        StateError(message.into())
    }
}

impl fmt::Display for StateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl<E: std::error::Error> From<E> for StateError {
    fn from(e: E) -> Self {
        StateError(e.to_string())
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Step {
    Next {
        to: &'static str,
        data: Result<Value, String>,
    },
    Wait {
        on: Vec<WaitOn>,
        data: Result<Value, String>,
    },
}

/// A handler's answer: move to another state, or wait in this one.
#[derive(Debug, Clone, PartialEq)]
#[must_use]
pub struct Transition<S> {
    step: Step,
    _machine: PhantomData<fn() -> S>,
}

impl<S: PodState> Transition<S> {
    /// Moves from `from` (the handler's `self`) to `to`. Compiles only when the edge was
    /// declared with [`crate::edges!`]: `from`'s type implements `TransitionTo<O>`.
    pub fn next<I, O>(from: I, to: O) -> Self
    where
        I: State<S> + TransitionTo<O>,
        O: State<S>,
    {
        drop(from);
        Transition {
            step: Step::Next {
                to: O::NAME,
                data: to_json(&to),
            },
            _machine: PhantomData,
        }
    }

    /// Stays in `this` state (keeping its value) until one of `on` happens. An empty
    /// `on` waits for nothing: a final state.
    pub fn wait<I: State<S>>(this: I, on: impl IntoIterator<Item = WaitOn>) -> Self {
        Transition {
            step: Step::Wait {
                on: on.into_iter().collect(),
                data: to_json(&this),
            },
            _machine: PhantomData,
        }
    }

    /// The target state's name, or `None` for a wait (for tests).
    pub fn target(&self) -> Option<&'static str> {
        match &self.step {
            Step::Next { to, .. } => Some(to),
            Step::Wait { .. } => None,
        }
    }

    /// What a wait waits on, or `None` for a move (for tests).
    pub fn waits_on(&self) -> Option<&[WaitOn]> {
        match &self.step {
            Step::Next { .. } => None,
            Step::Wait { on, .. } => Some(on),
        }
    }
}

fn to_json<T: Serialize>(v: &T) -> Result<Value, String> {
    serde_json::to_value(v).map_err(|e| {
        format!(
            "state {} did not serialise: {e}",
            std::any::type_name::<T>()
        )
    })
}
