//! What the provider asks of the node's workloads and what it gets back:
//! the plain-Rust side of `wit/workloads.wit`'s records.

use std::path::PathBuf;
use std::time::Duration;

/// `sha256:<hex>` of a module in the store.
pub type ModuleRef = String;
pub type WorkloadHandle = u64;
pub type VolumeId = u64;
pub(crate) type FetchId = u64;

/// A pod's `imagePullPolicy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PullPolicy {
    Always,
    IfNotPresent,
    Never,
}

pub(crate) use crate::oci::PullSecret;

#[derive(Debug, Clone)]
pub struct FetchRequest {
    /// An OCI reference, or `file:///absolute/path/module.wasm`.
    pub image: String,
    pub pull_policy: PullPolicy,
    /// The pod's namespace (for logs; the caller resolves `pull_secrets` there).
    pub namespace: String,
    /// The credentials of the pod's `imagePullSecrets` (the first matching the
    /// registry is used).
    pub pull_secrets: Vec<PullSecret>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FetchProgress {
    Ready(ModuleRef),
    Pending(FetchId),
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FetchError {
    #[error("invalid image reference: {0}")]
    InvalidReference(String),
    #[error("not found: {0}")]
    NotFound(String),
    #[error("unauthorized: {0}")]
    Unauthorized(String),
    #[error("not wasm: {0}")]
    NotWasm(String),
    #[error("the image is not present and the pull policy is Never")]
    NeverPull,
    #[error("registry unavailable: {0}")]
    Unavailable(String),
    #[error("{0}")]
    Other(String),
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EmptyDir {
    /// Bytes on disk; a pod whose volume grows past it is evicted (see `disk.rs`).
    pub size_limit: Option<u64>,
}

#[derive(Clone, PartialEq, Eq)]
pub struct VolumeFile {
    /// Relative, no `..`, no leading `/`.
    pub path: String,
    pub contents: Vec<u8>,
    /// Unix permission bits, e.g. 0o644.
    pub mode: u32,
}

impl std::fmt::Debug for VolumeFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "VolumeFile({:?}, {} bytes, {:o})",
            self.path,
            self.contents.len(),
            self.mode
        )
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostPath {
    pub path: String,
    /// Create the directory if missing (`DirectoryOrCreate`).
    pub create: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VolumeSource {
    EmptyDir(EmptyDir),
    Files(Vec<VolumeFile>),
    HostPath(HostPath),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VolumeRequest {
    pub pod_uid: String,
    pub name: String,
    pub source: VolumeSource,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    pub volume: VolumeId,
    /// Absolute path the workload sees, e.g. `/data`.
    pub guest_path: String,
    /// A directory inside the volume to mount instead of its root.
    pub sub_path: Option<String>,
    /// Files volumes are always mounted read-only.
    pub read_only: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogTarget {
    pub pod_namespace: String,
    pub pod_name: String,
    pub pod_uid: String,
    pub container: String,
    /// The container's restart count.
    pub attempt: u32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpawnSpec {
    pub module: ModuleRef,
    /// The full argv, program name first; empty means `[container]`.
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    pub mounts: Vec<Mount>,
    /// Bytes of linear memory (all memories together; the container's
    /// `resources.limits.memory`): `None` takes [`WorkloadConfig::default_memory_limit`];
    /// above [`WorkloadConfig::max_memory_limit`] the spawn is refused.
    pub memory_limit: Option<u64>,
    pub logs: LogTarget,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunState {
    Running,
    /// The exit code: 0/1 for a WASI 0.2 `run` result, the exact code of `exit`
    /// (`proc_exit`, `exit-with-code`), [`KILLED_EXIT_CODE`](super::run::KILLED_EXIT_CODE) when killed after grace.
    Exited(i32),
    /// Trapped, out of memory (message starts with `OOMKilled:`), or failed to start
    /// (message starts with `failed to start:`).
    Failed(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkloadStatus {
    pub state: RunState,
    /// Milliseconds since the Unix epoch.
    pub started_at_ms: u64,
    pub finished_at_ms: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WorkloadError {
    #[error("unknown handle")]
    UnknownHandle,
    #[error("invalid: {0}")]
    Invalid(String),
    #[error("failed: {0}")]
    Failed(String),
}

/// The host's settings for workloads.
#[derive(Debug, Clone)]
pub struct WorkloadConfig {
    /// Root of the module store, pod volumes and logs.
    pub(crate) data_dir: PathBuf,
    /// `hostPath` volumes must lie under one of these directories.
    pub host_path_allow: Vec<PathBuf>,
    /// Registries reached over plain HTTP (`127.0.0.1:5000`, `localhost:5000`).
    pub insecure_registries: Vec<String>,
    /// `file://` images must lie under one of these directories (none by default: a
    /// pod must not run, or probe for, arbitrary files of the node).
    pub file_image_dirs: Vec<PathBuf>,
    /// A log file is rotated (to `.1`) when it would grow past this.
    pub log_max_bytes: u64,
    /// Running workloads at most (each holds an async stack of the engine's pool).
    pub(crate) max_workloads: usize,
    /// Largest module accepted from a file or registry.
    pub max_module_bytes: u64,
    /// A pull that takes longer fails as `unavailable`.
    pub(crate) pull_timeout: Duration,
    /// The memory cap of a container that sets no limit (kubelet's containers
    /// are unlimited; a wasm workload without one could take the node's
    /// memory). A bound on that one workload, not a reservation: the pod is
    /// admitted and scheduled by its requests, as upstream.
    pub default_memory_limit: u64,
    /// The largest memory limit a container may ask for.
    pub max_memory_limit: u64,
    /// The node-wide budget, the node's allocatable memory: pods are admitted
    /// by their requests against it, and the memory the running workloads
    /// hold together stays under it (all of them live in this process; a
    /// grow past it fails, the workload `OOMKilled`, as a container the
    /// kernel kills in the kubelet's `kubepods` cgroup).
    pub(crate) memory_budget: u64,
    /// Descriptors (files and directories, mounts included) a WASI 0.2
    /// workload may hold open; an open past it fails in the guest.
    pub(crate) max_open_files: usize,
    /// How often emptyDirs with a `sizeLimit` are measured (the kubelet's eviction
    /// manager checks every 10 s).
    pub disk_check_interval: Duration,
}

impl WorkloadConfig {
    pub fn new(data_dir: impl Into<PathBuf>) -> WorkloadConfig {
        WorkloadConfig {
            data_dir: data_dir.into(),
            host_path_allow: Vec::new(),
            insecure_registries: Vec::new(),
            file_image_dirs: Vec::new(),
            log_max_bytes: 10 * 1024 * 1024,
            max_workloads: 400,
            max_module_bytes: 256 * 1024 * 1024,
            pull_timeout: Duration::from_secs(300),
            default_memory_limit: 256 << 20,
            max_memory_limit: 2 << 30,
            memory_budget: u64::MAX,
            max_open_files: super::files::DEFAULT_MAX_OPEN_FILES,
            disk_check_interval: Duration::from_secs(10),
        }
    }
}
