//! Exec instances and attach taps: what `kubectl exec`, `kubectl attach` and
//! exec probes reach on a wasmlet node.
//!
//! A WASI workload is not a process tree one can enter: "running a command in
//! the container" is running the container's module once more, with the
//! command as its argv and the container's environment and volume mounts
//! (the [`Template`] its last spawn left), beside the running instance. The
//! exec instance has the container's memory limit (a probe's is capped lower)
//! within the node's shared pool, counts against `--workload-max`, has no
//! sockets, and is killed with its pod. Its stdout and stderr go to its
//! caller through a window of [`OUTPUT_WINDOW`] unread bytes: a caller that
//! reads slowly makes the instance's writes wait, so memory stays bounded
//! whatever it prints.

use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};

use bytes::Bytes;
use tokio::io::AsyncWrite;
use tokio::sync::{Notify, broadcast, mpsc};
use wasmtime_wasi::WasiCtxBuilder;
use wasmtime_wasi::cli::{AsyncStdinStream, IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamResult};

use super::logs::LogStream;
use super::run::{Launched, preopen};
use super::{Inner, Mount, WorkloadError, WorkloadHandle, WorkloadManager};

/// Exec sessions (`kubectl exec`) one pod may run at once; probes are not counted
/// (each probe runs one instance at a time).
pub(crate) const MAX_SESSIONS_PER_POD: usize = 4;
/// Bytes an exec instance may have written that its caller has not read yet.
pub(crate) const OUTPUT_WINDOW: usize = 256 * 1024;
/// Bytes of stdin buffered between the caller and the instance.
const STDIN_BUFFER: usize = 64 * 1024;
/// Output chunks an attached client may lag behind before it misses some.
const ATTACH_BACKLOG: usize = 256;

/// What an exec instance copies from the container's last spawn.
#[derive(Debug, Clone)]
pub(crate) struct Template {
    pub(crate) module: String,
    pub(crate) env: Vec<(String, String)>,
    pub(crate) mounts: Vec<Mount>,
    pub(crate) memory: u64,
}

/// A running container's output as it is written, for attached clients;
/// nothing is copied while none is attached.
#[derive(Clone)]
pub(crate) struct AttachTap(broadcast::Sender<(LogStream, Bytes)>);

impl Default for AttachTap {
    fn default() -> Self {
        AttachTap(broadcast::channel(ATTACH_BACKLOG).0)
    }
}

impl AttachTap {
    pub(crate) fn send(&self, stream: LogStream, bytes: &[u8]) {
        if self.0.receiver_count() > 0 {
            let _ = self.0.send((stream, Bytes::copy_from_slice(bytes)));
        }
    }
}

/// A command to run in a running container.
#[derive(Debug, Clone)]
pub struct ExecRequest {
    pub pod_uid: String,
    pub container: String,
    /// The argv, program name first (the module sees it as is).
    pub command: Vec<String>,
    /// Whether the caller sends stdin (else the instance reads end-of-file).
    pub stdin: bool,
    /// A user's session (counted against [`MAX_SESSIONS_PER_POD`]); a probe is not.
    pub session: bool,
    /// At most this much memory, below the container's limit (probes).
    pub memory_cap: Option<u64>,
}

/// A started exec instance.
pub struct Exec {
    pub handle: WorkloadHandle,
    /// Write the instance's stdin here; dropping it closes stdin.
    pub stdin: Option<tokio::io::DuplexStream>,
    pub output: ExecOutput,
}

/// The instance's stdout and stderr, in the order written; ends when the
/// instance has finished.
pub struct ExecOutput {
    rx: mpsc::UnboundedReceiver<(LogStream, Bytes)>,
    window: Arc<Window>,
}

impl ExecOutput {
    pub async fn recv(&mut self) -> Option<(LogStream, Bytes)> {
        let m = self.rx.recv().await?;
        self.window.release(m.1.len());
        Some(m)
    }
}

/// Bytes written and not yet read, and a wake-up when some are read.
#[derive(Default)]
struct Window {
    pending: AtomicUsize,
    space: Notify,
}

impl Window {
    fn release(&self, n: usize) {
        self.pending.fetch_sub(n, Ordering::SeqCst);
        self.space.notify_waiters();
    }

    fn room(&self) -> usize {
        OUTPUT_WINDOW.saturating_sub(self.pending.load(Ordering::SeqCst))
    }
}

/// An exec instance's stdout or stderr.
#[derive(Clone)]
struct ExecOut {
    tx: mpsc::UnboundedSender<(LogStream, Bytes)>,
    window: Arc<Window>,
    stream: LogStream,
}

impl ExecOut {
    fn put(&self, bytes: Bytes) {
        if bytes.is_empty() {
            return;
        }
        self.window.pending.fetch_add(bytes.len(), Ordering::SeqCst);
        if self.tx.send((self.stream, bytes)).is_err() {
            // Nobody reads any more: what is written goes nowhere.
            self.window.pending.store(0, Ordering::SeqCst);
        }
    }
}

impl IsTerminal for ExecOut {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for ExecOut {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }

    fn async_stream(&self) -> Box<dyn AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for ExecOut {
    async fn ready(&mut self) {
        loop {
            let space = self.window.space.notified();
            tokio::pin!(space);
            space.as_mut().enable();
            if self.window.room() > 0 || self.tx.is_closed() {
                return;
            }
            space.await;
        }
    }
}

impl OutputStream for ExecOut {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        self.put(bytes);
        Ok(())
    }

    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        Ok(if self.tx.is_closed() {
            usize::MAX >> 1
        } else {
            self.window.room()
        })
    }
}

impl AsyncWrite for ExecOut {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let room = self.window.room();
        if room == 0 && !self.tx.is_closed() {
            // Woken when the caller reads; a spurious wake-up only polls again.
            let waker = cx.waker().clone();
            let window = self.window.clone();
            tokio::spawn(async move {
                window.space.notified().await;
                waker.wake();
            });
            return Poll::Pending;
        }
        let n = buf.len().min(room.max(1));
        self.put(Bytes::copy_from_slice(&buf[..n]));
        Poll::Ready(Ok(n))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

impl Inner {
    /// Remembers a container's spawn: exec instances copy it.
    pub(crate) fn remember(
        &self,
        pod_uid: &str,
        container: &str,
        handle: WorkloadHandle,
        t: Template,
    ) {
        self.templates
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert((pod_uid.to_string(), container.to_string()), (handle, t));
    }

    /// The container's running workload and its template.
    fn running_container(
        &self,
        pod_uid: &str,
        container: &str,
    ) -> Result<(WorkloadHandle, Template), WorkloadError> {
        let found = self
            .templates
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&(pod_uid.to_string(), container.to_string()))
            .cloned();
        let not_running =
            || WorkloadError::Invalid(format!("container {container} is not running on this node"));
        let (handle, t) = found.ok_or_else(not_running)?;
        if !self.workload(handle).is_ok_and(|w| w.running()) {
            return Err(not_running());
        }
        Ok((handle, t))
    }

    fn running_sessions(&self, pod_uid: &str) -> usize {
        self.workloads
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .of_pod(pod_uid)
            .filter(|w| w.session && w.running())
            .count()
    }
}

impl WorkloadManager {
    /// The workload a running container is now (for probes and liveness kills).
    pub fn container_handle(&self, pod_uid: &str, container: &str) -> Option<WorkloadHandle> {
        self.inner
            .running_container(pod_uid, container)
            .ok()
            .map(|(h, _)| h)
    }

    /// Runs `req.command` as another instance of the running container's module
    /// (see the module docs); returns at once.
    pub fn exec(&self, req: ExecRequest) -> Result<Exec, WorkloadError> {
        let inner = &self.inner;
        let (_, t) = inner.running_container(&req.pod_uid, &req.container)?;
        if req.command.is_empty() {
            return Err(WorkloadError::Invalid("no command was given".into()));
        }
        if let Some(a) = req.command.iter().find(|a| a.contains('\0')) {
            return Err(WorkloadError::Invalid(format!(
                "argument {a:?} contains NUL"
            )));
        }
        if req.session {
            let running = inner.running_sessions(&req.pod_uid);
            if running >= MAX_SESSIONS_PER_POD {
                return Err(WorkloadError::Failed(format!(
                    "too many exec sessions in this pod ({running} running, at most {MAX_SESSIONS_PER_POD})"
                )));
            }
        }
        inner.check_capacity()?;
        let module = inner.module_for_spawn(&t.module)?;
        let mounts = inner.resolve_mounts(&req.pod_uid, &t.mounts)?;
        let memory = req.memory_cap.map_or(t.memory, |c| c.min(t.memory));
        let mut b = WasiCtxBuilder::new();
        b.args(&req.command);
        b.envs(&t.env);
        let stdin = req.stdin.then(|| {
            let (ours, theirs) = tokio::io::duplex(STDIN_BUFFER);
            b.stdin(AsyncStdinStream::new(theirs));
            ours
        });
        let window = Arc::new(Window::default());
        let (tx, rx) = mpsc::unbounded_channel();
        for stream in [LogStream::Stdout, LogStream::Stderr] {
            let out = ExecOut {
                tx: tx.clone(),
                window: window.clone(),
                stream,
            };
            match stream {
                LogStream::Stdout => b.stdout(out),
                LogStream::Stderr => b.stderr(out),
            };
        }
        drop(tx);
        preopen(&mut b, mounts)?;
        let handle = inner.launch(
            module,
            b,
            memory,
            Launched {
                pod_uid: req.pod_uid.clone(),
                sink: None,
                log_path: PathBuf::new(),
                attach: AttachTap::default(),
                session: req.session,
            },
        );
        Ok(Exec {
            handle,
            stdin,
            output: ExecOutput { rx, window },
        })
    }

    /// The running container's output from now on (`kubectl attach`).
    pub fn attach(
        &self,
        pod_uid: &str,
        container: &str,
    ) -> Result<(WorkloadHandle, broadcast::Receiver<(LogStream, Bytes)>), WorkloadError> {
        let (handle, _) = self.inner.running_container(pod_uid, container)?;
        let w = self.inner.workload(handle)?;
        Ok((handle, w.attach.0.subscribe()))
    }
}
