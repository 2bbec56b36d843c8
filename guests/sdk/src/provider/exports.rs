//! The `init`, `handle` and `status` exports: the pod data and the current state's
//! value travel as JSON between calls (each runs in a fresh instance) and are
//! dispatched to the state type by name.

use serde_json::Value;

use crate::bindings::provider_exports as raw;

use super::graph::StateId;
use super::{Pod, PodState, State, StateError, Step, Transition, WaitOn, WakeEvent, to_json};

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

/// The `init` export: the pod data plus the initial state's default value.
#[doc(hidden)]
pub fn __init<S: Machine, I: State<S> + Default>(pod: String) -> Result<String, String> {
    crate::panic::install();
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
/// edge (a deletion, an undeclared transition), so they need not appear in [`crate::edges!`].
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
    crate::panic::install();
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
    crate::panic::install();
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
