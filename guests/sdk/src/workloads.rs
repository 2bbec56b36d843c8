//! Workloads for pods (providers only): fetch a module, prepare volumes, spawn, watch,
//! kill, read logs. The records are the contract's own (`wit/workloads.wit`).
//!
//! Nothing here blocks. A pull that is not finished returns
//! [`FetchProgress::Pending`]; wait for it with
//! [`WaitOn::FetchDone`](crate::provider::WaitOn::FetchDone) and ask again. A spawned
//! workload runs on; wait with [`WaitOn::WorkloadExited`](crate::provider::WaitOn::WorkloadExited)
//! and read [`status`].
//!
//! ```no_run
//! use wasmlet_sdk::workloads::{self, FetchProgress, FetchRequest, PullPolicy};
//! # fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let progress = workloads::fetch_module(&FetchRequest {
//!     image: "file:///opt/modules/hello.wasm".into(),
//!     pull_policy: PullPolicy::IfNotPresent,
//!     namespace: "default".into(),
//!     pull_secrets: vec![],
//! })?;
//! if let FetchProgress::Ready(module) = progress {
//!     // spawn(&SpawnSpec { module, .. })
//! }
//! # Ok(()) }
//! ```

use std::time::Duration;

use crate::host::with_host;

pub use crate::bindings::workloads::{
    EmptyDir, FetchError, FetchId, FetchProgress, FetchRequest, HostPath, LogTarget, ModuleRef,
    Mount, PullPolicy, RunState, SpawnSpec, VolumeFile, VolumeId, VolumeRequest, VolumeSource,
    WorkloadError, WorkloadHandle, WorkloadStatus,
};

/// Finds a module in the host's store or starts pulling it.
pub fn fetch_module(req: &FetchRequest) -> Result<FetchProgress, FetchError> {
    with_host(|h| h.fetch_module(req))
}

/// Creates (or finds, for the same pod uid and name) a pod volume.
pub fn prepare_volume(req: &VolumeRequest) -> Result<VolumeId, WorkloadError> {
    with_host(|h| h.prepare_volume(req))
}

/// Starts a workload.
pub fn spawn(spec: &SpawnSpec) -> Result<WorkloadHandle, WorkloadError> {
    with_host(|h| h.spawn(spec))
}

/// Where a workload stands.
pub fn status(handle: WorkloadHandle) -> Result<WorkloadStatus, WorkloadError> {
    with_host(|h| h.workload_status(handle))
}

/// Asks a workload to stop within `grace`, after which the host interrupts it.
pub fn kill(handle: WorkloadHandle, grace: Duration) -> Result<(), WorkloadError> {
    let grace_ms = u32::try_from(grace.as_millis()).unwrap_or(u32::MAX);
    with_host(|h| h.kill(handle, grace_ms))
}

/// The last `max_bytes` of a workload's output.
pub fn read_logs(handle: WorkloadHandle, max_bytes: u32) -> Result<Vec<u8>, WorkloadError> {
    with_host(|h| h.read_logs(handle, max_bytes))
}

/// Stops everything of the pod and removes its volumes (idempotent).
pub fn release_pod(pod_uid: &str) {
    with_host(|h| h.release_pod(pod_uid))
}
