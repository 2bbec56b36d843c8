//! # wasi-runner: wasmlet's default provider
//!
//! Runs the pods bound to a wasmlet node as WASI workloads, as a state machine after
//! Krustlet v0.5 (one state per file under `states/`). Every call runs in a fresh
//! instance, so everything about a pod (module digests, volume ids, workload handles,
//! restart counts, back-offs) lives in [`pod::PodData`], the state data the host keeps.
//!
//! ```text
//! Registered ─► ImagePull ─► VolumeMount ─► Initializing ─► Starting ─► Running ─► Completed
//!     │            ▲  │           │  ▲            │ ▲  ▲         │ ▲       │  ▲
//!     │            │  ▼           ▼  │            ▼ │  │         ▼ │       ▼  │
//!     │       ImagePullBackOff  ContainerConfigError  CrashLoopBackOff ◄── Error
//!     └──────────────────────────────────────────────────────────────────► Error (Unsupported)
//! on delete (from anywhere): Terminated (kill with the grace period, wait, release-pod)
//! ```

mod pod;
mod spawn;
pub mod states;
mod unsupported;
mod volumes;

pub use pod::PodData;
use states::{
    Completed, ContainerConfigError, CrashLoopBackOff, Error, ImagePull, ImagePullBackOff,
    Initializing, Registered, Running, Starting, Terminated, VolumeMount,
};

wasmlet_sdk::edges! {
    PodData {
        Registered => [ImagePull, Error],
        ImagePull => [VolumeMount, ImagePullBackOff, Error],
        // The self-edge re-patches the status: the pull error first, then the back-off.
        ImagePullBackOff => [ImagePullBackOff, ImagePull],
        VolumeMount => [Initializing, ContainerConfigError, Error],
        ContainerConfigError => VolumeMount,
        // Self-edge: one step per init container, so the status follows each of them.
        Initializing => [Initializing, Starting, Error, ContainerConfigError, ImagePull, VolumeMount],
        Starting => [Running, Error, CrashLoopBackOff, ContainerConfigError, ImagePull],
        // Self-edge: a container ended for good while others run on. VolumeMount: the
        // host lost the workloads (it restarted), so volumes and containers start again.
        Running => [Running, Completed, Error, CrashLoopBackOff, VolumeMount],
        Error => [CrashLoopBackOff, Running],
        CrashLoopBackOff => [Starting, Initializing],
    }
}

// `Terminated` (on delete) is entered by the host only, so it is on no edge; the SDK
// dispatches the initial, on-delete and error states by name.
wasmlet_sdk::provider!(
    PodData,
    initial = Registered,
    on_delete = Terminated,
    error = Error,
    backoff = [ImagePullBackOff, CrashLoopBackOff, ContainerConfigError]
);

#[cfg(test)]
mod tests;
