//! The `graph` export: the machine's states and edges as the host sees them, built
//! from each state's [`State::NAME`](super::State::NAME).

use std::any::TypeId;

use crate::bindings::provider_exports as raw;

use super::{Machine, PodState, State};

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
