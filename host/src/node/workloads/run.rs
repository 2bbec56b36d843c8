//! Spawning and running workloads: one Store per workload on a tokio task, WASI 0.2
//! command components (`wasi:cli/run`) and preview 1 core modules (`_start`).
//!
//! The engine has epoch interruption: a workload's deadline callback yields to tokio
//! every [`YIELD_TICKS`] ticks of CPU, so a busy loop never holds a worker, and traps
//! once its kill switch is set. The run future is also raced against the switch, so
//! a workload blocked in the host (sleeping, polling) is dropped at once.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::{Notify, watch};
use wasmtime::component::ResourceTable;
use wasmtime::{Store, Trap, UpdateDeadline};

use crate::plugin::sandbox::Limiter;
use wasmtime_wasi::p1::WasiP1Ctx;
use wasmtime_wasi::{I32Exit, WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

use super::logs::{Capture, LogSink, LogStream};
use super::volumes::{check_segment, preopen_path};
use super::{
    Inner, LoadedModule, RunState, Runnable, SpawnSpec, WorkloadError, WorkloadHandle,
    WorkloadStatus, now_ms,
};

/// Epoch ticks (5 ms each) of CPU between yields to the async runtime.
pub(crate) const YIELD_TICKS: u64 = 2;
/// The exit code reported for a workload stopped after its grace period (kubelet's SIGKILL).
pub const KILLED_EXIT_CODE: i32 = 137;

pub(crate) struct P2State {
    ctx: WasiCtx,
    table: ResourceTable,
    limiter: Limiter,
    /// Descriptors it may hold open (see `files.rs`).
    pub(crate) max_open_files: usize,
}

impl P2State {
    pub(crate) fn table_mut(&mut self) -> &mut ResourceTable {
        &mut self.table
    }
}

impl WasiView for P2State {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.ctx,
            table: &mut self.table,
        }
    }
}

pub(crate) struct P1State {
    pub(crate) ctx: WasiP1Ctx,
    limiter: Limiter,
}

/// Set once to stop a workload: the next epoch check traps, and the run future is dropped.
#[derive(Default)]
pub(crate) struct KillSwitch {
    killed: AtomicBool,
    notify: Notify,
    /// Set by an eviction: the workload is reported `Failed` with it, not killed.
    evicted: Mutex<Option<String>>,
}

impl KillSwitch {
    pub(crate) fn fire(&self) {
        self.killed.store(true, Ordering::SeqCst);
        self.notify.notify_one();
    }

    pub(crate) fn evict(&self, message: String) {
        self.evicted
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_or_insert(message);
        self.fire();
    }

    fn fired(&self) -> bool {
        self.killed.load(Ordering::SeqCst)
    }
}

pub(crate) struct Workload {
    pub(crate) pod_uid: String,
    pub(crate) status: watch::Sender<WorkloadStatus>,
    pub(crate) kill: Arc<KillSwitch>,
    /// The container's log; `None` for an exec instance (its output goes to its caller).
    pub(crate) sink: Option<Arc<Mutex<LogSink>>>,
    pub(crate) log_path: PathBuf,
    /// Its stdout and stderr as they are written, for `kubectl attach`.
    pub(crate) attach: super::exec::AttachTap,
    /// An exec session's instance (counted against [`super::exec::MAX_SESSIONS_PER_POD`]).
    pub(crate) session: bool,
}

impl Workload {
    pub(crate) fn running(&self) -> bool {
        matches!(self.status.borrow().state, RunState::Running)
    }
}

enum Prepared {
    P2(P2State),
    P1(P1State),
}

/// Yields every [`YIELD_TICKS`] of CPU; traps once the kill switch is set.
fn deadline_callback<T>(
    kill: Arc<KillSwitch>,
) -> impl FnMut(wasmtime::StoreContextMut<'_, T>) -> wasmtime::Result<UpdateDeadline>
+ Send
+ Sync
+ 'static {
    move |_| {
        Ok(if kill.fired() {
            UpdateDeadline::Interrupt
        } else {
            UpdateDeadline::Yield(YIELD_TICKS)
        })
    }
}

enum Outcome {
    Exit(i32),
    Killed,
    OutOfMemory(String),
    Trap(String),
    StartFailed(String),
}

fn classify(
    e: wasmtime::Error,
    memory_hit: bool,
    memory: Option<u64>,
    kill: &KillSwitch,
    started: bool,
) -> Outcome {
    if let Some(exit) = e.downcast_ref::<I32Exit>() {
        return Outcome::Exit(exit.0);
    }
    if kill.fired() && matches!(e.downcast_ref::<Trap>(), Some(Trap::Interrupt)) {
        return Outcome::Killed;
    }
    if memory_hit {
        return Outcome::OutOfMemory(format!(
            "OOMKilled: the memory limit of {} bytes was exceeded ({e:#})",
            memory.unwrap_or_default()
        ));
    }
    if started && super::files::is_p1_table_full(&e) {
        return Outcome::Trap(format!(
            "trapped: too many open files: the workload's cap of descriptors (--workload-max-open-files) was reached ({e:#})"
        ));
    }
    if started {
        Outcome::Trap(format!("trapped: {e:#}"))
    } else {
        Outcome::StartFailed(format!("{e:#}"))
    }
}

impl Inner {
    /// The loaded module for a spawn: in memory, or loaded now from the store (after a
    /// host restart a module-ref stays valid; its precompiled form makes this fast).
    pub(crate) fn module_for_spawn(
        &self,
        module: &str,
    ) -> Result<Arc<LoadedModule>, WorkloadError> {
        let hex = super::fetch::digest_hex(module).ok_or_else(|| {
            WorkloadError::Invalid(format!(
                "module {module:?} is not a sha256:<hex> module-ref"
            ))
        })?;
        if let Some(m) = self.loaded(hex) {
            return Ok(m);
        }
        let path = self.module_path(hex);
        let bytes = std::fs::read(&path).map_err(|_| {
            WorkloadError::Invalid(format!(
                "module {module} is not in the store: fetch it first"
            ))
        })?;
        self.load_module(hex, &bytes)
            .map_err(|e| WorkloadError::Invalid(format!("module {module}: {e}")))
    }

    /// Opens each mount beneath its volume; two at one path are refused.
    pub(crate) fn resolve_mounts(
        &self,
        pod_uid: &str,
        mounts: &[super::Mount],
    ) -> Result<Vec<(std::os::fd::OwnedFd, String, wasmtime_wasi::FsPerms)>, WorkloadError> {
        let mut out = Vec::new();
        for m in mounts {
            let resolved = self.resolve_mount(pod_uid, m)?;
            if out
                .iter()
                .any(|(_, g, _): &(std::os::fd::OwnedFd, String, _)| *g == resolved.1)
            {
                return Err(WorkloadError::Invalid(format!(
                    "two mounts at {}",
                    resolved.1
                )));
            }
            out.push(resolved);
        }
        Ok(out)
    }

    /// Refuses a start beyond `--workload-max` running workloads.
    pub(crate) fn check_capacity(&self) -> Result<(), WorkloadError> {
        let running = self
            .workloads
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .running();
        if running >= self.config.max_workloads {
            return Err(WorkloadError::Failed(format!(
                "too many workloads ({running} running)"
            )));
        }
        Ok(())
    }

    pub(crate) fn spawn(
        self: &Arc<Self>,
        spec: SpawnSpec,
    ) -> Result<WorkloadHandle, WorkloadError> {
        let t = &spec.logs;
        check_segment(&t.pod_uid, "pod uid")?;
        if let Some(why) = self
            .evicted
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&t.pod_uid)
        {
            return Err(WorkloadError::Failed(format!("the pod was evicted: {why}")));
        }
        check_segment(&t.container, "container name")?;
        let module = self.module_for_spawn(&spec.module)?;
        let invalid = |m: String| WorkloadError::Invalid(m);
        let memory = spec
            .memory_limit
            .unwrap_or(self.config.default_memory_limit);
        if memory > self.config.max_memory_limit {
            return Err(invalid(format!(
                "container {}: memory limit {memory} bytes is above this node's maximum of {} bytes",
                t.container, self.config.max_memory_limit
            )));
        }
        for a in &spec.args {
            if a.contains('\0') {
                return Err(invalid(format!("argument {a:?} contains NUL")));
            }
        }
        for (k, v) in &spec.env {
            if k.is_empty() || k.contains('=') || k.contains('\0') || v.contains('\0') {
                return Err(invalid(format!(
                    "environment variable name {k:?} is invalid"
                )));
            }
        }
        let mounts = self.resolve_mounts(&t.pod_uid, &spec.mounts)?;
        self.check_capacity()?;

        let log_path = self.log_path(&t.pod_uid, &t.container, t.attempt);
        if let Some(dir) = log_path.parent() {
            super::logs::prune_attempts(dir, t.attempt.saturating_sub(1));
        }
        let sink = LogSink::open(log_path.clone(), self.config.log_max_bytes).map_err(|e| {
            WorkloadError::Failed(format!("opening the log file {}: {e}", log_path.display()))
        })?;
        let sink = Arc::new(Mutex::new(sink));
        let attach = super::exec::AttachTap::default();

        let mut b = WasiCtxBuilder::new();
        if spec.args.is_empty() {
            b.arg(&t.container);
        } else {
            b.args(&spec.args);
        }
        b.envs(&spec.env);
        b.stdout(Capture {
            sink: sink.clone(),
            stream: LogStream::Stdout,
            attach: attach.clone(),
        });
        b.stderr(Capture {
            sink: sink.clone(),
            stream: LogStream::Stderr,
            attach: attach.clone(),
        });
        preopen(&mut b, mounts)?;
        let template = super::exec::Template {
            module: spec.module.clone(),
            env: spec.env.clone(),
            mounts: spec.mounts.clone(),
            memory,
        };
        let handle = self.launch(
            module,
            b,
            memory,
            Launched {
                pod_uid: t.pod_uid.clone(),
                sink: Some(sink),
                log_path,
                attach,
                session: false,
            },
        );
        self.remember(&t.pod_uid, &t.container, handle, template);
        Ok(handle)
    }

    /// Runs `module` with the WASI context `b` on its own task, with `memory`
    /// bytes at most (within the node's pool); returns at once.
    pub(crate) fn launch(
        self: &Arc<Self>,
        module: Arc<LoadedModule>,
        mut b: WasiCtxBuilder,
        memory: u64,
        l: Launched,
    ) -> WorkloadHandle {
        b.allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false);
        let handle = self.next_id();
        let started_at_ms = now_ms();
        let (status, _) = watch::channel(WorkloadStatus {
            state: RunState::Running,
            started_at_ms,
            finished_at_ms: None,
        });
        let kill = Arc::new(KillSwitch::default());
        let workload = Arc::new(Workload {
            pod_uid: l.pod_uid,
            status,
            kill: kill.clone(),
            sink: l.sink,
            log_path: l.log_path,
            attach: l.attach,
            session: l.session,
        });
        // The limit reserves nothing: pods were admitted by their requests
        // against the budget (node admission), and the budget caps the memory
        // the workloads hold together (`self.memory`), as the kubepods cgroup.
        self.workloads
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(handle, workload.clone());

        let engine = self.engine.engine.clone();
        let memory = Some(memory);
        let inner = self.clone();
        let prepared = match &module.runnable {
            Runnable::Component(_) => Prepared::P2(P2State {
                ctx: b.build(),
                table: ResourceTable::new(),
                limiter: Limiter::new(memory.map(|m| usize::try_from(m).unwrap_or(usize::MAX)))
                    .in_pool(self.memory.clone()),
                max_open_files: self.config.max_open_files,
            }),
            Runnable::Core(_) => Prepared::P1(P1State {
                ctx: {
                    let mut ctx = b.build_p1();
                    super::files::cap_p1_table(&mut ctx, self.config.max_open_files);
                    ctx
                },
                limiter: Limiter::new(memory.map(|m| usize::try_from(m).unwrap_or(usize::MAX)))
                    .in_pool(self.memory.clone()),
            }),
        };
        let run = async move {
            match (&module.runnable, prepared) {
                (Runnable::Component(pre), Prepared::P2(state)) => {
                    let mut store = Store::new(&engine, state);
                    store.limiter(|s| &mut s.limiter);
                    store.set_epoch_deadline(YIELD_TICKS);
                    store.epoch_deadline_callback(deadline_callback(kill.clone()));
                    let command = match pre.instantiate_async(&mut store).await {
                        Ok(c) => c,
                        Err(e) => {
                            return classify(e, store.data().limiter.hit, memory, &kill, false);
                        }
                    };
                    match command.wasi_cli_run().call_run(&mut store).await {
                        Ok(Ok(())) => Outcome::Exit(0),
                        Ok(Err(())) => Outcome::Exit(1),
                        Err(e) => classify(e, store.data().limiter.hit, memory, &kill, true),
                    }
                }
                (Runnable::Core(pre), Prepared::P1(state)) => {
                    let mut store = Store::new(&engine, state);
                    store.limiter(|s| &mut s.limiter);
                    store.set_epoch_deadline(YIELD_TICKS);
                    store.epoch_deadline_callback(deadline_callback(kill.clone()));
                    let instance = match pre.instantiate_async(&mut store).await {
                        Ok(i) => i,
                        Err(e) => {
                            return classify(e, store.data().limiter.hit, memory, &kill, false);
                        }
                    };
                    let start = match instance.get_typed_func::<(), ()>(&mut store, "_start") {
                        Ok(f) => f,
                        Err(e) => return Outcome::StartFailed(format!("{e:#}")),
                    };
                    match start.call_async(&mut store, ()).await {
                        Ok(()) => Outcome::Exit(0),
                        Err(e) => classify(e, store.data().limiter.hit, memory, &kill, true),
                    }
                }
                _ => Outcome::StartFailed(
                    "internal error: store kind does not match the module".into(),
                ),
            }
        };
        let kill = workload.kill.clone();
        self.rt.spawn(async move {
            let outcome = tokio::select! {
                biased;
                _ = kill.notify.notified() => Outcome::Killed,
                o = run => o,
            };
            let state = match outcome {
                Outcome::Exit(code) => RunState::Exited(code),
                Outcome::Killed => match kill
                    .evicted
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .clone()
                {
                    Some(why) => RunState::Failed(why),
                    None => RunState::Exited(KILLED_EXIT_CODE),
                },
                Outcome::OutOfMemory(m) | Outcome::Trap(m) => RunState::Failed(m),
                Outcome::StartFailed(m) => RunState::Failed(format!("failed to start: {m}")),
            };
            if let Some(sink) = &workload.sink {
                sink.lock().unwrap_or_else(|p| p.into_inner()).finish();
            }
            tracing::debug!(workload = handle, state = ?state, "workload finished");
            {
                // Under the table's lock, so a release cannot count it off too.
                let mut all = inner.workloads.lock().unwrap_or_else(|p| p.into_inner());
                workload.status.send_modify(|s| {
                    s.state = state;
                    s.finished_at_ms = Some(now_ms());
                });
                all.stopped(handle);
            }
            let _ = inner.exits.send(handle);
        });
        handle
    }
}

/// What a launched workload is, besides its module and context.
pub(crate) struct Launched {
    pub(crate) pod_uid: String,
    pub(crate) sink: Option<Arc<Mutex<LogSink>>>,
    pub(crate) log_path: PathBuf,
    pub(crate) attach: super::exec::AttachTap,
    pub(crate) session: bool,
}

/// Preopens each mount. Each is already open (resolved beneath its volume
/// without following symlinks); WASI reopens that same directory, never the
/// volume's path.
pub(crate) fn preopen(
    b: &mut WasiCtxBuilder,
    mounts: Vec<(std::os::fd::OwnedFd, String, wasmtime_wasi::FsPerms)>,
) -> Result<(), WorkloadError> {
    for (dir, guest, perms) in &mounts {
        b.preopened_dir(preopen_path(dir), guest, *perms)
            .map_err(|e| WorkloadError::Failed(format!("mounting {guest}: {e:#}")))?;
    }
    Ok(())
}
