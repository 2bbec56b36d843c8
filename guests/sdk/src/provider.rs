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

use std::any::TypeId;
use std::fmt;
use std::marker::PhantomData;
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::bindings::provider_exports as raw;
use crate::workloads::{FetchId, WorkloadHandle};

pub use k8s_openapi::api::core::v1::Pod;

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

    /// The pod status fragment to patch on entering this state (phase, reason,
    /// message, containerStatuses, ...). Default: nothing.
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
    WorkloadExited(WorkloadHandle),
    Timer(Duration),
    /// The pod object changed (spec, labels, deletionTimestamp).
    PodChanged,
    /// A module pull started by `workloads::fetch_module` finished.
    FetchDone(FetchId),
}

/// Why a handler is called again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WakeEvent {
    WorkloadExited(WorkloadHandle),
    TimerElapsed,
    PodChanged,
    FetchDone(FetchId),
}

/// A handler failure: the host moves the pod to the machine's error state.
/// Any `std::error::Error` converts with `?`; make others with [`StateError::new`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateError(pub String);

impl StateError {
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

/// A state as the graph sees it: its [`State::NAME`] and which type carries it, so that
/// two types with one name are caught. Made by [`crate::edges!`] and [`crate::provider!`].
#[doc(hidden)]
#[derive(Debug, Clone, Copy)]
pub struct StateId {
    pub name: &'static str,
    type_id: TypeId,
    type_name: &'static str,
}

impl StateId {
    pub fn of<S: PodState, T: State<S>>() -> Self {
        StateId {
            name: T::NAME,
            type_id: TypeId::of::<T>(),
            type_name: std::any::type_name::<T>(),
        }
    }
}

/// The machine behind a [`PodState`]: its edges and a dispatcher from state names to
/// state types. Implemented by [`crate::edges!`].
#[doc(hidden)]
pub trait Machine: PodState {
    fn edges() -> Vec<(StateId, StateId)>;
    fn handle_state(
        state: &str,
        data: Value,
        pod: &Pod,
        pod_state: &mut Self,
        wake: Option<&WakeEvent>,
    ) -> Option<Result<Transition<Self>, StateError>>;
    fn status_of(
        state: &str,
        data: Value,
        pod: &Pod,
        pod_state: &Self,
    ) -> Option<Result<Value, StateError>>;
}

#[doc(hidden)]
pub fn __handle_as<S: PodState, T: State<S>>(
    data: Value,
    pod: &Pod,
    pod_state: &mut S,
    wake: Option<&WakeEvent>,
) -> Result<Transition<S>, StateError> {
    let state: T = serde_json::from_value(data)
        .map_err(|e| StateError(format!("state data of {} does not decode: {e}", T::NAME)))?;
    state.next(pod, pod_state, wake)
}

#[doc(hidden)]
pub fn __status_as<S: PodState, T: State<S>>(
    data: Value,
    pod: &Pod,
    pod_state: &S,
) -> Result<Value, StateError> {
    let state: T = serde_json::from_value(data)
        .map_err(|e| StateError(format!("state data of {} does not decode: {e}", T::NAME)))?;
    Ok(state.status(pod, pod_state))
}

/// What the SDK stores in the host's opaque `state-data`.
#[derive(serde::Serialize, serde::Deserialize)]
struct Envelope<P> {
    pod: P,
    state: Value,
}

fn decode_pod(pod: &str) -> Result<Pod, String> {
    serde_json::from_str(pod).map_err(|e| format!("the pod does not decode: {e}"))
}

fn decode_envelope<S: PodState>(data: &str) -> Result<Envelope<S>, String> {
    serde_json::from_str(data)
        .map_err(|e| format!("the provider's state data does not decode: {e}"))
}

/// The `graph` export. Used by [`crate::provider!`]. Fails when two state types share
/// a [`State::NAME`]: the host could not tell them apart.
#[doc(hidden)]
pub fn __graph<S: Machine>(
    initial: StateId,
    on_delete: StateId,
    error: StateId,
    backoff: &[StateId],
) -> Result<raw::StateGraph, String> {
    let edges = S::edges();
    let mut states: Vec<StateId> = Vec::new();
    let named = [initial, on_delete, error]
        .into_iter()
        .chain(backoff.iter().copied());
    for state in named.chain(edges.iter().flat_map(|(a, b)| [*a, *b])) {
        match states.iter().find(|s| s.name == state.name) {
            None => states.push(state),
            Some(seen) if seen.type_id == state.type_id => {}
            Some(seen) => {
                return Err(format!(
                    "states {} and {} are both named {:?}: give each its own `State::NAME`",
                    seen.type_name, state.type_name, state.name
                ));
            }
        }
    }
    let name = |s: StateId| s.name.to_owned();
    Ok(raw::StateGraph {
        states: states.into_iter().map(name).collect(),
        edges: edges.into_iter().map(|(a, b)| (name(a), name(b))).collect(),
        initial: name(initial),
        on_delete: name(on_delete),
        error_state: name(error),
        backoff_states: backoff.iter().copied().map(name).collect(),
    })
}

/// [`__graph`] for the export itself. The contract's `graph` returns no `result` (a
/// valid machine cannot fail to describe itself), so a clash, a bug in the provider,
/// is logged as an error (the host prints guest logs under the plugin's name) and the
/// call traps: the host then refuses to load that plugin version.
#[doc(hidden)]
pub fn __graph_or_trap<S: Machine>(
    initial: StateId,
    on_delete: StateId,
    error: StateId,
    backoff: &[StateId],
) -> raw::StateGraph {
    match __graph::<S>(initial, on_delete, error, backoff) {
        Ok(graph) => graph,
        Err(e) => {
            let message = format!("invalid state graph: {e}");
            crate::log::error(&message);
            panic!("{message}");
        }
    }
}

/// The `init` export: the pod data plus the initial state's default value.
#[doc(hidden)]
pub fn __init<S: Machine, I: State<S> + Default>(pod: String) -> Result<String, String> {
    let pod = decode_pod(&pod)?;
    let pod_state = S::new(&pod).map_err(|e| e.0)?;
    let state = to_json(&I::default())?;
    serde_json::to_string(&Envelope {
        pod: pod_state,
        state,
    })
    .map_err(|e| e.to_string())
}

/// A state's `handle`, type-erased over the state's own JSON.
#[doc(hidden)]
pub type HandleFn<S> =
    fn(Value, &Pod, &mut S, Option<&WakeEvent>) -> Result<Transition<S>, StateError>;

/// A state the [`crate::provider!`] macro dispatches by name besides those on declared
/// edges: the initial, on-delete and error states, which the host may enter without an
/// edge (a deletion, a handler error), so they need not appear in [`crate::edges!`].
#[doc(hidden)]
pub struct Named<S> {
    pub name: &'static str,
    pub handle: HandleFn<S>,
    pub status: fn(Value, &Pod, &S) -> Result<Value, StateError>,
}

impl<S: PodState> Named<S> {
    pub fn of<T: State<S>>() -> Self {
        Named {
            name: T::NAME,
            handle: __handle_as::<S, T>,
            status: __status_as::<S, T>,
        }
    }
}

/// The `handle` export.
#[doc(hidden)]
pub fn __handle<S: Machine>(
    state: String,
    pod: String,
    data: String,
    event: Option<raw::WakeEvent>,
) -> Result<raw::HandlerOutcome, String> {
    __handle_in::<S>(&[], state, pod, data, event)
}

/// The `handle` export, also dispatching the `named` states (see [`Named`]).
#[doc(hidden)]
pub fn __handle_in<S: Machine>(
    named: &[Named<S>],
    state: String,
    pod: String,
    data: String,
    event: Option<raw::WakeEvent>,
) -> Result<raw::HandlerOutcome, String> {
    let pod = decode_pod(&pod)?;
    let Envelope {
        pod: mut pod_state,
        state: value,
    } = decode_envelope::<S>(&data)?;
    let wake = event.map(|e| match e {
        raw::WakeEvent::WorkloadExited(h) => WakeEvent::WorkloadExited(h),
        raw::WakeEvent::TimerElapsed => WakeEvent::TimerElapsed,
        raw::WakeEvent::PodChanged => WakeEvent::PodChanged,
        raw::WakeEvent::FetchDone(id) => WakeEvent::FetchDone(id),
    });
    let transition = S::handle_state(&state, value.clone(), &pod, &mut pod_state, wake.as_ref())
        .or_else(|| {
            named
                .iter()
                .find(|n| n.name == state)
                .map(|n| (n.handle)(value, &pod, &mut pod_state, wake.as_ref()))
        })
        .ok_or_else(|| format!("unknown state {state:?}"))?
        .map_err(|e| format!("{state}: {e}"))?;
    let envelope = |value: Value| {
        serde_json::to_string(&Envelope {
            pod: &pod_state,
            state: value,
        })
        .map_err(|e| e.to_string())
    };
    Ok(match transition.step {
        Step::Next { to, data } => raw::HandlerOutcome::Transition(raw::Transition {
            to: to.to_owned(),
            state_data: envelope(data?)?,
        }),
        Step::Wait { on, data } => raw::HandlerOutcome::Wait(raw::Wait {
            on: on
                .into_iter()
                .map(|w| match w {
                    WaitOn::WorkloadExited(h) => raw::WaitOn::WorkloadExited(h),
                    WaitOn::Timer(d) => {
                        raw::WaitOn::Timer(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
                    }
                    WaitOn::PodChanged => raw::WaitOn::PodChanged,
                    WaitOn::FetchDone(id) => raw::WaitOn::FetchDone(id),
                })
                .collect(),
            state_data: envelope(data?)?,
        }),
    })
}

/// The `status` export. A failure yields an empty patch: status is advisory, and the
/// handler (which runs next) reports real problems.
#[doc(hidden)]
pub fn __status<S: Machine>(state: String, pod: String, data: String) -> String {
    __status_in::<S>(&[], state, pod, data)
}

/// The `status` export, also for the `named` states (see [`Named`]).
#[doc(hidden)]
pub fn __status_in<S: Machine>(
    named: &[Named<S>],
    state: String,
    pod: String,
    data: String,
) -> String {
    let result = (|| -> Result<Value, String> {
        let pod = decode_pod(&pod)?;
        let envelope = decode_envelope::<S>(&data)?;
        S::status_of(&state, envelope.state.clone(), &pod, &envelope.pod)
            .or_else(|| {
                named
                    .iter()
                    .find(|n| n.name == state)
                    .map(|n| (n.status)(envelope.state, &pod, &envelope.pod))
            })
            .ok_or_else(|| format!("unknown state {state:?}"))?
            .map_err(|e| e.0)
    })();
    match result {
        Ok(v) => v.to_string(),
        Err(e) => {
            crate::log::log(
                crate::log::Level::Warn,
                "provider status failed",
                &[("state", &state), ("error", &e)],
            );
            "{}".to_owned()
        }
    }
}

/// Declares the edges of a provider's state machine, for pod data type `S`:
/// implements `TransitionTo` for each edge (so `Transition::next` compiles for exactly
/// these) and records the list the `graph` export reports.
///
/// ```ignore
/// wasmlet_sdk::edges! {
///     RunnerState {
///         Registered => ImagePull,
///         ImagePull => [VolumeMount, ImagePullBackOff],
///         ImagePullBackOff => ImagePull,
///     }
/// }
/// ```
///
/// States are plain identifiers (import them first); every state must implement
/// `State<S>`. Declaring an edge twice is a compile error (conflicting impls).
#[macro_export]
macro_rules! edges {
    ($machine:ident { $($from:ident => $to:tt),+ $(,)? }) => {
        $crate::edges!(@collect $machine [] $($from => $to,)+);
    };
    (@collect $machine:ident [$(($f:ident $t:ident))*] $from:ident => [$($to:ident),+ $(,)?], $($rest:tt)*) => {
        $crate::edges!(@collect $machine [$(($f $t))* $(($from $to))+] $($rest)*);
    };
    (@collect $machine:ident [$(($f:ident $t:ident))*] $from:ident => $to:ident, $($rest:tt)*) => {
        $crate::edges!(@collect $machine [$(($f $t))* ($from $to)] $($rest)*);
    };
    (@collect $machine:ident [$(($f:ident $t:ident))*]) => {
        $(impl $crate::provider::TransitionTo<$t> for $f {})*

        impl $crate::provider::Machine for $machine {
            fn edges() -> ::std::vec::Vec<($crate::provider::StateId, $crate::provider::StateId)> {
                ::std::vec![$((
                    $crate::provider::StateId::of::<$machine, $f>(),
                    $crate::provider::StateId::of::<$machine, $t>(),
                )),*]
            }

            #[allow(unreachable_code)]
            fn handle_state(
                state: &str,
                data: $crate::__private::serde_json::Value,
                pod: &$crate::provider::Pod,
                pod_state: &mut Self,
                wake: ::std::option::Option<&$crate::provider::WakeEvent>,
            ) -> ::std::option::Option<::std::result::Result<$crate::provider::Transition<Self>, $crate::provider::StateError>> {
                // A state appears once per edge it is on; the first match wins.
                $(
                    if state == <$f as $crate::provider::State<$machine>>::NAME {
                        return ::std::option::Option::Some($crate::provider::__handle_as::<$machine, $f>(data, pod, pod_state, wake));
                    }
                    if state == <$t as $crate::provider::State<$machine>>::NAME {
                        return ::std::option::Option::Some($crate::provider::__handle_as::<$machine, $t>(data, pod, pod_state, wake));
                    }
                )*
                ::std::option::Option::None
            }

            fn status_of(
                state: &str,
                data: $crate::__private::serde_json::Value,
                pod: &$crate::provider::Pod,
                pod_state: &Self,
            ) -> ::std::option::Option<::std::result::Result<$crate::__private::serde_json::Value, $crate::provider::StateError>> {
                $(
                    if state == <$f as $crate::provider::State<$machine>>::NAME {
                        return ::std::option::Option::Some($crate::provider::__status_as::<$machine, $f>(data, pod, pod_state));
                    }
                    if state == <$t as $crate::provider::State<$machine>>::NAME {
                        return ::std::option::Option::Some($crate::provider::__status_as::<$machine, $t>(data, pod, pod_state));
                    }
                )*
                ::std::option::Option::None
            }
        }
    };
}

/// Exports a provider: its pod data type (whose edges [`crate::edges!`] declared), the
/// initial state (which must be `Default`), the state a deleted pod enters, the error
/// state, and optionally the back-off states. Use it once per crate. The initial,
/// on-delete and error states are dispatched by name even when no declared edge names
/// them (the host enters the on-delete and error states without an edge).
///
/// ```ignore
/// wasmlet_sdk::provider!(RunnerState, initial = Registered, on_delete = Terminated,
///     error = Error, backoff = [ImagePullBackOff, CrashLoopBackOff]);
/// ```
#[macro_export]
macro_rules! provider {
    ($machine:ident, initial = $initial:ident, on_delete = $on_delete:ident, error = $error:ident
        $(, backoff = [$($backoff:ident),* $(,)?])? $(,)?) => {
        const _: () = {
            struct __WasmletProvider;

            // The states the host may enter without a declared edge.
            fn __named() -> [$crate::provider::Named<$machine>; 3] {
                [
                    $crate::provider::Named::of::<$initial>(),
                    $crate::provider::Named::of::<$on_delete>(),
                    $crate::provider::Named::of::<$error>(),
                ]
            }

            impl $crate::bindings::provider_exports::Guest for __WasmletProvider {
                fn graph() -> $crate::bindings::provider_exports::StateGraph {
                    $crate::provider::__graph_or_trap::<$machine>(
                        $crate::provider::StateId::of::<$machine, $initial>(),
                        $crate::provider::StateId::of::<$machine, $on_delete>(),
                        $crate::provider::StateId::of::<$machine, $error>(),
                        &[$($($crate::provider::StateId::of::<$machine, $backoff>()),*)?],
                    )
                }

                fn init(pod: ::std::string::String) -> ::std::result::Result<::std::string::String, ::std::string::String> {
                    $crate::provider::__init::<$machine, $initial>(pod)
                }

                fn handle(
                    state: ::std::string::String,
                    pod: ::std::string::String,
                    state_data: ::std::string::String,
                    event: ::std::option::Option<$crate::bindings::provider_exports::WakeEvent>,
                ) -> ::std::result::Result<$crate::bindings::provider_exports::HandlerOutcome, ::std::string::String> {
                    $crate::provider::__handle_in::<$machine>(&__named(), state, pod, state_data, event)
                }

                fn status(
                    state: ::std::string::String,
                    pod: ::std::string::String,
                    state_data: ::std::string::String,
                ) -> ::std::string::String {
                    $crate::provider::__status_in::<$machine>(&__named(), state, pod, state_data)
                }
            }

            $crate::bindings::provider::export_provider!(
                __WasmletProvider with_types_in $crate::bindings::provider
            );
        };
    };
}
