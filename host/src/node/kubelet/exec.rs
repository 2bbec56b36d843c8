//! `/exec/{namespace}/{pod}/{container}` and `/attach/...` (GET or POST with a
//! websocket upgrade, see [`channels`](super::channels)): `kubectl exec` runs
//! the command as another instance of the container's module
//! ([`WorkloadManager::exec`]); `kubectl attach` streams the running
//! instance's output. The API server forwards `pods/exec` and `pods/attach`
//! here as it forwards `pods/log`.
//!
//! A request that is malformed or names no pod here is an HTTP error before
//! the upgrade; what cannot start (a container not running, too many
//! sessions) and how the command ended are the error channel's Status, as
//! the kubelet reports a runtime's refusal. The instance is killed when the
//! client goes away.

use std::sync::Arc;

use axum::extract::ws::{
    Message, WebSocket, WebSocketUpgrade, rejection::WebSocketUpgradeRejection,
};
use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use axum::response::Response;
use futures::{SinkExt, StreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use tokio::io::AsyncWriteExt;
use tokio::sync::broadcast::error::RecvError;

use super::super::workloads::exec::{Exec, ExecRequest};
use super::super::workloads::logs::LogStream;
use super::super::workloads::{WorkloadError, WorkloadManager};
use super::channels::{self, CLOSE, ERROR, RESIZE, STDERR, STDIN, STDOUT, StreamOptions};
use super::{Kubelet, status};

type Upgrade = Result<WebSocketUpgrade, WebSocketUpgradeRejection>;
/// An HTTP refusal before the upgrade: its status and message.
type Refusal = (StatusCode, String);

/// Kills an instance when its session ends however it ends (a no-op once it exited).
struct KillOnDrop(Arc<WorkloadManager>, u64);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill(self.1, 0);
    }
}

pub(super) async fn exec(
    State(k): State<Kubelet>,
    Path((namespace, pod, container)): Path<(String, String, String)>,
    RawQuery(raw): RawQuery,
    ws: Upgrade,
) -> Response {
    let (ws, opts) = match prepare(ws, raw.as_deref()) {
        Ok(x) => x,
        Err((code, why)) => return status(code, why),
    };
    if opts.command.is_empty() {
        return status(
            StatusCode::BAD_REQUEST,
            "you must specify at least one command for the container",
        );
    }
    let uid = match pod_uid(&k, &namespace, &pod).await {
        Ok(u) => u,
        Err((code, why)) => return status(code, why),
    };
    let req = ExecRequest {
        pod_uid: uid,
        container: container.clone(),
        command: opts.command.clone(),
        stdin: opts.stdin,
        session: true,
        memory_cap: None,
    };
    tracing::info!(pod = %format!("{namespace}/{pod}"), %container, command = ?opts.command, "exec");
    // Started once upgraded: a refusal is the error channel's Status, which
    // kubectl prints as is (an HTTP error makes it try SPDY instead).
    ws.on_upgrade(move |socket| async move {
        match k.workloads.exec(req) {
            Ok(exec) => {
                let guard = KillOnDrop(k.workloads.clone(), exec.handle);
                run_exec(socket, k, exec, opts, guard).await
            }
            Err(e) => refuse(socket, &container, e).await,
        }
    })
}

pub(super) async fn attach(
    State(k): State<Kubelet>,
    Path((namespace, pod, container)): Path<(String, String, String)>,
    RawQuery(raw): RawQuery,
    ws: Upgrade,
) -> Response {
    let (ws, opts) = match prepare(ws, raw.as_deref()) {
        Ok(x) => x,
        Err((code, why)) => return status(code, why),
    };
    if opts.stdin {
        return status(
            StatusCode::BAD_REQUEST,
            "attaching stdin is not served on wasmlet nodes: a workload's stdin is closed when it starts (attach without -i to follow its output)",
        );
    }
    let uid = match pod_uid(&k, &namespace, &pod).await {
        Ok(u) => u,
        Err((code, why)) => return status(code, why),
    };
    ws.on_upgrade(move |socket| async move {
        match k.workloads.attach(&uid, &container) {
            Ok((handle, rx)) => run_attach(socket, k, handle, rx, opts).await,
            Err(e) => refuse(socket, &container, e).await,
        }
    })
}

/// The upgrade and the options, or the HTTP answer that refuses them.
fn prepare(ws: Upgrade, raw: Option<&str>) -> Result<(WebSocketUpgrade, StreamOptions), Refusal> {
    let Ok(ws) = ws else {
        return Err((
            StatusCode::BAD_REQUEST,
            "wasmlet nodes serve exec and attach over websockets only (v5.channel.k8s.io, v4.channel.k8s.io); SPDY is not served".into(),
        ));
    };
    let ws = ws.protocols(channels::PROTOCOLS);
    if ws.selected_protocol().is_none() {
        return Err((
            StatusCode::BAD_REQUEST,
            format!(
                "no supported websocket subprotocol was offered (served: {})",
                channels::PROTOCOLS.join(", ")
            ),
        ));
    }
    let opts = StreamOptions::parse(raw).map_err(|e| (StatusCode::BAD_REQUEST, e))?;
    Ok((ws, opts))
}

/// The uid of a pod that runs on this node.
async fn pod_uid(k: &Kubelet, namespace: &str, pod: &str) -> Result<String, Refusal> {
    let pods: Api<Pod> = Api::namespaced(k.client.clone(), namespace);
    let p = match pods.get_opt(pod).await {
        Ok(Some(p)) => p,
        Ok(None) => {
            return Err((
                StatusCode::NOT_FOUND,
                format!("pod {namespace}/{pod} not found"),
            ));
        }
        Err(e) => return Err((StatusCode::SERVICE_UNAVAILABLE, e.to_string())),
    };
    if p.spec.as_ref().and_then(|s| s.node_name.as_deref()) != Some(k.node.as_str()) {
        return Err((
            StatusCode::NOT_FOUND,
            format!("pod {namespace}/{pod} does not run on node {}", k.node),
        ));
    }
    Ok(p.metadata.uid.unwrap_or_default())
}

/// Ends a session that could not start, with why on the error channel.
async fn refuse(socket: WebSocket, container: &str, e: WorkloadError) {
    let (mut tx, _rx) = socket.split();
    let why = match e {
        WorkloadError::UnknownHandle => {
            format!("container {container} is not running on this node")
        }
        WorkloadError::Invalid(m) | WorkloadError::Failed(m) => m,
    };
    let end = channels::frame(ERROR, channels::failure(&why).to_string().as_bytes());
    let _ = tx.send(Message::Binary(end.into())).await;
    let _ = tx.send(normal_close()).await;
}

/// A close with status 1000: client-go reads any other end (even no status) as an
/// error on the streams it is still reading.
fn normal_close() -> Message {
    Message::Close(Some(axum::extract::ws::CloseFrame {
        code: axum::extract::ws::close_code::NORMAL,
        reason: "".into(),
    }))
}

fn channel_of(stream: LogStream, opts: &StreamOptions) -> Option<u8> {
    match stream {
        // A tty has one stream: stderr goes to stdout, as a terminal shows it.
        LogStream::Stderr if opts.tty => opts.stdout.then_some(STDOUT),
        LogStream::Stderr => opts.stderr.then_some(STDERR),
        LogStream::Stdout => opts.stdout.then_some(STDOUT),
    }
}

async fn run_exec(
    socket: WebSocket,
    k: Kubelet,
    exec: Exec,
    opts: StreamOptions,
    guard: KillOnDrop,
) {
    let (mut tx, mut rx) = socket.split();
    let Exec {
        handle,
        stdin,
        mut output,
    } = exec;
    // Client → stdin on a task of its own: a full stdin must never stop the
    // output from being read (the instance may be writing before it reads).
    let (gone_tx, mut gone) = tokio::sync::oneshot::channel::<()>();
    let reader = tokio::spawn(async move {
        let mut stdin = stdin;
        while let Some(Ok(msg)) = rx.next().await {
            match msg {
                Message::Binary(b) => match (b.first(), b.get(1)) {
                    (Some(&STDIN), _) => {
                        if let Some(s) = stdin.as_mut()
                            && s.write_all(&b[1..]).await.is_err()
                        {
                            stdin = None;
                        }
                    }
                    (Some(&CLOSE), Some(&STDIN)) => stdin = None,
                    // A terminal size means nothing to a WASI workload.
                    (Some(&RESIZE), _) => {}
                    _ => {}
                },
                Message::Close(_) => break,
                _ => {}
            }
        }
        let _ = gone_tx.send(());
    });
    let mut client_gone = false;
    loop {
        tokio::select! {
            m = output.recv() => match m {
                Some((stream, bytes)) => {
                    if let Some(ch) = channel_of(stream, &opts)
                        && tx.send(Message::Binary(channels::frame(ch, &bytes).into())).await.is_err()
                    {
                        client_gone = true;
                        break;
                    }
                }
                // Every writer is gone: the instance has finished.
                None => break,
            },
            _ = &mut gone => { client_gone = true; break; }
        }
    }
    if !client_gone {
        let end = match k.workloads.wait(handle).await {
            Ok(s) => channels::exit_status(&s),
            Err(e) => channels::failure(&e.to_string()),
        };
        let _ = tx
            .send(Message::Binary(
                channels::frame(ERROR, end.to_string().as_bytes()).into(),
            ))
            .await;
        let _ = tx.send(normal_close()).await;
    }
    reader.abort();
    drop(guard);
}

async fn run_attach(
    socket: WebSocket,
    k: Kubelet,
    handle: u64,
    mut output: tokio::sync::broadcast::Receiver<(LogStream, bytes::Bytes)>,
    opts: StreamOptions,
) {
    let (mut tx, mut rx) = socket.split();
    let (gone_tx, mut gone) = tokio::sync::oneshot::channel::<()>();
    let reader = tokio::spawn(async move {
        while let Some(Ok(msg)) = rx.next().await {
            if matches!(msg, Message::Close(_)) {
                break;
            }
        }
        let _ = gone_tx.send(());
    });
    let workloads = k.workloads.clone();
    let exited = workloads.wait(handle);
    tokio::pin!(exited);
    loop {
        tokio::select! {
            m = output.recv() => match m {
                Ok((stream, bytes)) => {
                    if let Some(ch) = channel_of(stream, &opts)
                        && tx.send(Message::Binary(channels::frame(ch, &bytes).into())).await.is_err()
                    {
                        break;
                    }
                }
                // A client slower than the workload misses what it lagged behind.
                Err(RecvError::Lagged(n)) => tracing::debug!(missed = n, "attach lagged"),
                Err(RecvError::Closed) => break,
            },
            _ = &mut exited => {
                let ok = channels::frame(ERROR, br#"{"metadata":{},"status":"Success"}"#);
                let _ = tx.send(Message::Binary(ok.into())).await;
                let _ = tx.send(normal_close()).await;
                break;
            }
            _ = &mut gone => break,
        }
    }
    reader.abort();
}
