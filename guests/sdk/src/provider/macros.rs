//! [`crate::edges!`] and [`crate::provider!`]: the macros a provider crate uses to
//! declare its machine's edges and export it.

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
///
/// # Only along declared edges
///
/// A transition along a declared edge compiles, and the machine exports:
///
/// ```
/// # use serde::{Deserialize, Serialize};
/// # use wasmlet_sdk::provider::{Pod, PodState, State, StateError, Transition, WakeEvent};
/// # #[derive(Serialize, Deserialize)]
/// # struct Machine;
/// # impl PodState for Machine {
/// #     fn new(_: &Pod) -> Result<Self, StateError> { Ok(Machine) }
/// # }
/// # #[derive(Default, Serialize, Deserialize)]
/// # struct Start;
/// # #[derive(Serialize, Deserialize)]
/// # struct Done;
/// # impl State<Machine> for Start {
/// #     const NAME: &'static str = "Start";
/// #     fn next(self, _: &Pod, _: &mut Machine, _: Option<&WakeEvent>) -> Result<Transition<Machine>, StateError> {
/// #         Ok(Transition::next(self, Done))
/// #     }
/// # }
/// impl State<Machine> for Done {
///     const NAME: &'static str = "Done";
///     fn next(self, _: &Pod, _: &mut Machine, _: Option<&WakeEvent>) -> Result<Transition<Machine>, StateError> {
///         Ok(Transition::wait(self, []))
///     }
/// }
///
/// wasmlet_sdk::edges! {
///     Machine {
///         Start => Done,
///     }
/// }
///
/// wasmlet_sdk::provider!(Machine, initial = Start, on_delete = Done, error = Done);
/// # fn main() {}
/// ```
///
/// and one along an undeclared edge does not ("`Done => _` is not a declared edge
/// of this state machine", E0277):
///
/// ```compile_fail,E0277
/// # use serde::{Deserialize, Serialize};
/// # use wasmlet_sdk::provider::{Pod, PodState, State, StateError, Transition, WakeEvent};
/// # #[derive(Serialize, Deserialize)]
/// # struct Machine;
/// # impl PodState for Machine {
/// #     fn new(_: &Pod) -> Result<Self, StateError> { Ok(Machine) }
/// # }
/// # #[derive(Default, Serialize, Deserialize)]
/// # struct Start;
/// # #[derive(Serialize, Deserialize)]
/// # struct Done;
/// # impl State<Machine> for Start {
/// #     const NAME: &'static str = "Start";
/// #     fn next(self, _: &Pod, _: &mut Machine, _: Option<&WakeEvent>) -> Result<Transition<Machine>, StateError> {
/// #         Ok(Transition::next(self, Done))
/// #     }
/// # }
/// impl State<Machine> for Done {
///     const NAME: &'static str = "Done";
///     fn next(self, _: &Pod, _: &mut Machine, _: Option<&WakeEvent>) -> Result<Transition<Machine>, StateError> {
///         Ok(Transition::next(self, Start)) // Done => Start is not declared
///     }
/// }
///
/// wasmlet_sdk::edges! {
///     Machine {
///         Start => Done,
///     }
/// }
/// # fn main() {}
/// ```
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
