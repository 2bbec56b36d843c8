//! The node agent's workloads: what the provider plugin's `workloads` imports do
//! (`wit/workloads.wit`), in plain Rust. The `impl workloads::Host` converts the WIT
//! records to these types and calls [`WorkloadManager`] one to one.
//!
//! Layout under the data directory:
//!
//! ```text
//! DATA/modules/sha256/<hex>.wasm              fetched modules, content-addressed, shared by all pods
//! DATA/modules/refs/<sha256 of reference>     reference -> digest (IfNotPresent / Never)
//! DATA/pods/<uid>/volumes/<name>/             emptyDir and files volumes
//! DATA/pods/<uid>/logs/<container>/<attempt>.log[.1]   CRI-format logs, rotated once
//! ```
//!
//! Compiled modules and components live in the engine's sealed cache
//! ([`crate::plugin::artifact`]), compiled in its compile child.
//!
//! Nothing here blocks: fetches and workloads run on tokio tasks; completion is
//! announced on [`WorkloadManager::subscribe_fetches`] / [`WorkloadManager::subscribe_exits`].

mod disk;
pub(crate) mod engine;
pub(crate) mod exec;
mod fetch;
pub(crate) mod files;
pub(crate) mod logs;
pub(crate) mod probe;
pub(crate) mod run;
mod table;
pub(crate) mod types;
mod volumes;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::broadcast;

pub(crate) use engine::WorkloadEngine;
pub(crate) use types::*;

enum Runnable {
    Component(wasmtime_wasi::p2::bindings::CommandPre<run::P2State>),
    Core(wasmtime::InstancePre<run::P1State>),
}

struct LoadedModule {
    #[allow(dead_code)]
    digest: ModuleRef,
    runnable: Runnable,
}

struct Inner {
    config: WorkloadConfig,
    engine: crate::plugin::engine::PluginEngine,
    rt: tokio::runtime::Handle,
    p2_linker: wasmtime::component::Linker<run::P2State>,
    p1_linker: wasmtime::Linker<run::P1State>,
    /// Loaded modules by digest hex.
    modules: Mutex<HashMap<String, Arc<LoadedModule>>>,
    /// Reference key → digest hex (mirror of `DATA/modules/refs`).
    refs: Mutex<HashMap<String, String>>,
    fetches: Mutex<fetch::FetchTable>,
    volumes: Mutex<volumes::VolumeTable>,
    workloads: Mutex<table::WorkloadTable>,
    /// The memory the running workloads hold together, capped at
    /// `memory_budget` (each workload's own cap is its limit).
    memory: Arc<crate::plugin::sandbox::MemoryPool>,
    /// Each container's last spawn (pod uid, container), what exec instances copy.
    templates: Mutex<HashMap<(String, String), (WorkloadHandle, exec::Template)>>,
    /// Evicted pods (uid → why): their spawns are refused until released.
    evicted: Mutex<HashMap<String, String>>,
    next_id: AtomicU64,
    exits: broadcast::Sender<WorkloadHandle>,
    fetch_done: broadcast::Sender<FetchId>,
}

impl Inner {
    fn next_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    fn log_path(&self, uid: &str, container: &str, attempt: u32) -> PathBuf {
        self.pod_dir(uid)
            .join("logs")
            .join(container)
            .join(format!("{attempt}.log"))
    }

    fn workload(&self, handle: WorkloadHandle) -> Result<Arc<run::Workload>, WorkloadError> {
        self.workloads
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(handle)
            .cloned()
            .ok_or(WorkloadError::UnknownHandle)
    }
}

pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Runs pods' WASI workloads; cheap to clone (shared state).
#[derive(Clone)]
pub struct WorkloadManager {
    inner: Arc<Inner>,
}

impl WorkloadManager {
    /// Must be called inside a tokio runtime: fetches and workloads run on it.
    /// `engine` is the workloads' own (see [`WorkloadEngine`]), not the plugins'.
    pub fn new(config: WorkloadConfig, engine: WorkloadEngine) -> anyhow::Result<WorkloadManager> {
        let engine = engine.0;
        let rt = tokio::runtime::Handle::try_current().map_err(|_| {
            anyhow::anyhow!("WorkloadManager::new must be called inside a tokio runtime")
        })?;
        for d in ["modules/sha256", "modules/refs", "pods"] {
            std::fs::create_dir_all(config.data_dir.join(d))?;
        }
        let mut p2_linker = wasmtime::component::Linker::new(&engine.engine);
        // Includes `wasi:cli/exit.exit-with-code` (stable since WASI 0.2.12).
        wasmtime_wasi::p2::add_to_linker_async(&mut p2_linker)
            .map_err(|e| anyhow::anyhow!("linking WASI 0.2: {e:#}"))?;
        files::cap_open_at(&mut p2_linker)
            .map_err(|e| anyhow::anyhow!("capping WASI 0.2 open-at: {e:#}"))?;
        let mut p1_linker = wasmtime::Linker::new(&engine.engine);
        wasmtime_wasi::p1::add_to_linker_async(&mut p1_linker, |s: &mut run::P1State| &mut s.ctx)
            .map_err(|e| anyhow::anyhow!("linking WASI preview 1: {e:#}"))?;
        let (exits, _) = broadcast::channel(1024);
        let (fetch_done, _) = broadcast::channel(1024);
        let memory = Arc::new(crate::plugin::sandbox::MemoryPool::new(
            usize::try_from(config.memory_budget).unwrap_or(usize::MAX),
        ));
        let manager = WorkloadManager {
            inner: Arc::new(Inner {
                config,
                engine,
                rt,
                p2_linker,
                p1_linker,
                modules: Mutex::default(),
                refs: Mutex::default(),
                fetches: Mutex::default(),
                volumes: Mutex::default(),
                workloads: Mutex::default(),
                memory,
                templates: Mutex::default(),
                evicted: Mutex::default(),
                next_id: AtomicU64::new(1),
                exits,
                fetch_done,
            }),
        };
        manager.inner.start_disk_monitor();
        Ok(manager)
    }

    pub(crate) fn config(&self) -> &WorkloadConfig {
        &self.inner.config
    }

    /// Whether workloads can start: the directories a start writes take a
    /// file ([`probe`]). Blocking file I/O.
    pub(crate) fn probe(&self) -> Result<(), String> {
        probe::probe(&self.inner.config.data_dir)
    }

    /// Workloads running now, and the memory they hold (bytes, against the budget).
    pub(crate) fn usage(&self) -> (usize, u64) {
        let running = self
            .inner
            .workloads
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .running();
        (running, self.inner.memory.used() as u64)
    }

    /// Looks up or starts fetching a module; never blocks. `Pending(id)`: wait for `id`
    /// on [`Self::subscribe_fetches`], then call again with the same request (or
    /// [`Self::poll_fetch`]) to collect the result, kept for [`FETCH_RESULT_TTL`].
    pub fn fetch_module(&self, req: &FetchRequest) -> Result<FetchProgress, FetchError> {
        self.inner.fetch_module(req)
    }

    /// The result of a finished fetch; `None` while it runs (or once it is forgotten,
    /// [`FETCH_RESULT_TTL`] after it finished, or for an unknown id).
    pub fn poll_fetch(&self, id: FetchId) -> Option<Result<ModuleRef, FetchError>> {
        self.inner.poll_fetch(id)
    }

    /// Announces each fetch id as it finishes (the provider's `fetch-done`).
    pub fn subscribe_fetches(&self) -> broadcast::Receiver<FetchId> {
        self.inner.fetch_done.subscribe()
    }

    /// `fetch_module` until it is ready or fails (for the agent's own use and tests).
    pub async fn fetch_wait(&self, req: &FetchRequest) -> Result<ModuleRef, FetchError> {
        let mut done = self.subscribe_fetches();
        let id = match self.fetch_module(req)? {
            FetchProgress::Ready(m) => return Ok(m),
            FetchProgress::Pending(id) => id,
        };
        loop {
            if let Some(r) = self.poll_fetch(id) {
                return r;
            }
            match done.recv().await {
                Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                Err(broadcast::error::RecvError::Closed) => {
                    return Err(FetchError::Other("shut down".into()));
                }
            }
        }
    }

    /// Creates (or finds; `files` are rewritten) a pod volume.
    pub fn prepare_volume(&self, req: &VolumeRequest) -> Result<VolumeId, WorkloadError> {
        self.inner.prepare_volume(req)
    }

    /// Starts a workload and returns at once.
    pub fn spawn(&self, spec: SpawnSpec) -> Result<WorkloadHandle, WorkloadError> {
        self.inner.spawn(spec)
    }

    pub fn status(&self, handle: WorkloadHandle) -> Result<WorkloadStatus, WorkloadError> {
        Ok(self.inner.workload(handle)?.status.borrow().clone())
    }

    /// Stops a workload: it may run on for `grace_ms`, then is interrupted and reported
    /// as `Exited(137)`. Returns at once; a no-op for a workload that has finished.
    pub fn kill(&self, handle: WorkloadHandle, grace_ms: u32) -> Result<(), WorkloadError> {
        let w = self.inner.workload(handle)?;
        if !w.running() {
            return Ok(());
        }
        if grace_ms == 0 {
            w.kill.fire();
        } else {
            let kill = w.kill.clone();
            self.inner.rt.spawn(async move {
                tokio::time::sleep(Duration::from_millis(grace_ms.into())).await;
                kill.fire();
            });
        }
        Ok(())
    }

    /// The last `max_bytes` of the workload's raw stdout+stderr (up to [`TAIL_BYTES`]).
    pub fn read_logs(
        &self,
        handle: WorkloadHandle,
        max_bytes: u32,
    ) -> Result<Vec<u8>, WorkloadError> {
        let w = self.inner.workload(handle)?;
        let tail = w.sink.as_ref().map_or_else(Vec::new, |s| {
            s.lock()
                .unwrap_or_else(|p| p.into_inner())
                .tail(max_bytes as usize)
        });
        Ok(tail)
    }

    /// Announces each workload handle as it finishes (the provider's `workload-exited`).
    pub fn subscribe_exits(&self) -> broadcast::Receiver<WorkloadHandle> {
        self.inner.exits.subscribe()
    }

    /// Waits until the workload has finished; its final status.
    pub async fn wait(&self, handle: WorkloadHandle) -> Result<WorkloadStatus, WorkloadError> {
        let mut rx = self.inner.workload(handle)?.status.subscribe();
        let s = rx
            .wait_for(|s| !matches!(s.state, RunState::Running))
            .await
            .map_err(|_| WorkloadError::Failed("workload vanished".into()))?;
        Ok(s.clone())
    }

    /// Kills (no grace) the pod's workloads, forgets its handles and volumes, and
    /// removes `DATA/pods/<uid>` (volumes and logs) once they have stopped. Returns at
    /// once; await the returned task to know the directory is gone. Idempotent.
    pub fn release_pod(&self, pod_uid: &str) -> tokio::task::JoinHandle<()> {
        let gone = self
            .inner
            .workloads
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove_pod(pod_uid);
        for w in &gone {
            w.kill.fire();
        }
        self.inner
            .volumes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove_pod(pod_uid);
        self.inner
            .evicted
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(pod_uid);
        self.inner
            .templates
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|(uid, _), _| uid != pod_uid);
        let dir = volumes::check_segment(pod_uid, "pod uid")
            .ok()
            .map(|_| self.inner.pod_dir(pod_uid));
        self.inner.rt.spawn(async move {
            for w in gone {
                let mut rx = w.status.subscribe();
                let _ = tokio::time::timeout(
                    Duration::from_secs(5),
                    rx.wait_for(|s| !matches!(s.state, RunState::Running)),
                )
                .await;
            }
            if let Some(dir) = dir {
                let _ = tokio::task::spawn_blocking(move || match std::fs::remove_dir_all(&dir) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => tracing::warn!(dir = %dir.display(), error = %e, "cannot remove pod directory"),
                })
                .await;
            }
        })
    }

    /// Stops every workload: `grace(pod uid)` to finish (asked once per pod),
    /// then killed; waits for all of them (node shutdown).
    pub(crate) async fn shutdown(&self, grace: impl Fn(&str) -> Duration) {
        let all: Vec<(WorkloadHandle, Arc<run::Workload>)> = self
            .inner
            .workloads
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|(h, w)| (*h, w.clone()))
            .collect();
        let mut graces: HashMap<&str, Duration> = HashMap::new();
        for (h, w) in &all {
            let g = *graces
                .entry(w.pod_uid.as_str())
                .or_insert_with(|| grace(&w.pod_uid));
            let _ = self.kill(*h, g.as_millis().min(u32::MAX as u128) as u32);
        }
        for (_, w) in all {
            let mut rx = w.status.subscribe();
            let _ = rx.wait_for(|s| !matches!(s.state, RunState::Running)).await;
        }
    }

    /// Where the attempt's log file is (`DATA/pods/<uid>/logs/<container>/<attempt>.log`);
    /// namespace and pod name are not part of the path (the uid is unique).
    pub fn log_path(
        &self,
        _namespace: &str,
        _pod: &str,
        uid: &str,
        container: &str,
        attempt: u32,
    ) -> PathBuf {
        self.inner.log_path(uid, container, attempt)
    }

    /// The files of one attempt's log, oldest first (`N.log.1` if rotated, then `N.log`);
    /// only those that exist.
    pub fn log_files(&self, uid: &str, container: &str, attempt: u32) -> Vec<PathBuf> {
        let current = self.inner.log_path(uid, container, attempt);
        [logs::rotated_path(&current), current]
            .into_iter()
            .filter(|p| p.is_file())
            .collect()
    }

    /// The attempts with a log file for the container, ascending: the last is the current
    /// one, the one before it `--previous`.
    pub fn log_attempts(&self, uid: &str, container: &str) -> Vec<u32> {
        if volumes::check_segment(uid, "").is_err()
            || volumes::check_segment(container, "").is_err()
        {
            return Vec::new();
        }
        let dir = self.inner.pod_dir(uid).join("logs").join(container);
        let mut out: Vec<u32> = std::fs::read_dir(&dir)
            .into_iter()
            .flatten()
            .filter_map(|e| e.ok())
            .filter_map(|e| e.file_name().to_str()?.strip_suffix(".log")?.parse().ok())
            .collect();
        out.sort_unstable();
        out
    }

    /// The log file of a running or finished workload (its attempt's `.log`).
    pub fn workload_log_path(&self, handle: WorkloadHandle) -> Result<PathBuf, WorkloadError> {
        Ok(self.inner.workload(handle)?.log_path.clone())
    }

    /// The module store's file for a module-ref, if present.
    pub fn module_file(&self, module: &str) -> Option<PathBuf> {
        let p = self.inner.module_path(fetch::digest_hex(module)?);
        p.is_file().then_some(p)
    }
}

#[allow(dead_code)]
fn _assert_send_sync() {
    fn is<T: Send + Sync>() {}
    is::<WorkloadManager>();
}
