//! The kubelet API subset the API server needs for `kubectl logs`:
//! `GET /containerLogs/{namespace}/{pod}/{container}` with `follow`,
//! `tailLines`, `sinceSeconds`, `timestamps`, `previous` and `limitBytes`.
//!
//! Callers authenticate as they do to a kubelet: a client certificate signed
//! by the configured CA (what kube-apiserver presents with
//! `--kubelet-client-certificate`), or a bearer token the API server confirms
//! through a TokenReview. Anonymous callers get 401.

use anyhow::Context;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Extension, Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use bytes::Bytes;
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use serde::Deserialize;

use super::workloads::WorkloadManager;
use super::workloads::logs::parse_cri_line;

/// The TLS material of the kubelet endpoint.
pub struct KubeletTls {
    pub cert_pem: String,
    pub key_pem: String,
    /// CA whose client certificates are accepted.
    pub client_ca_pem: String,
}

#[derive(Clone)]
struct Kubelet {
    client: kube::Client,
    node: String,
    workloads: Arc<WorkloadManager>,
}

/// Whether this connection presented a client certificate the CA signed.
#[derive(Clone, Copy)]
struct ClientCert(bool);

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct LogQuery {
    follow: Option<bool>,
    tail_lines: Option<i64>,
    since_seconds: Option<i64>,
    timestamps: Option<bool>,
    previous: Option<bool>,
    limit_bytes: Option<i64>,
}

fn status(code: StatusCode, msg: impl Into<String>) -> Response {
    (code, msg.into()).into_response()
}

/// Serves the kubelet API on `addr` until the process ends.
pub async fn serve(
    addr: SocketAddr,
    tls: KubeletTls,
    client: kube::Client,
    node: String,
    workloads: Arc<WorkloadManager>,
) -> anyhow::Result<SocketAddr> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    for c in rustls_pemfile::certs(&mut tls.client_ca_pem.as_bytes()) {
        roots.add(c?)?;
    }
    let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
        Arc::new(roots),
        provider.clone(),
    )
    .allow_unauthenticated()
    .build()?;
    let certs =
        rustls_pemfile::certs(&mut tls.cert_pem.as_bytes()).collect::<Result<Vec<_>, _>>()?;
    let key = rustls_pemfile::private_key(&mut tls.key_pem.as_bytes())?
        .ok_or_else(|| anyhow::anyhow!("no kubelet key"))?;
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_client_cert_verifier(verifier)
        .with_single_cert(certs, key)?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind(addr).await.with_context(|| {
        format!(
            "the kubelet API cannot listen on {addr} (flags --node-address, --kubelet-port; --kubelet-port 0 picks a free port)"
        )
    })?;
    let bound = listener.local_addr()?;
    let app = Router::new()
        .route(
            "/containerLogs/{namespace}/{pod}/{container}",
            get(container_logs),
        )
        .route("/healthz", get(|| async { "ok" }))
        .with_state(Kubelet {
            client,
            node,
            workloads,
        });
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                continue;
            };
            let acceptor = acceptor.clone();
            let app = app.clone();
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let verified = tls
                    .get_ref()
                    .1
                    .peer_certificates()
                    .is_some_and(|c| !c.is_empty());
                let app = app.layer(Extension(ClientCert(verified)));
                let service = hyper_util::service::TowerToHyperService::new(app);
                let _ = hyper_util::server::conn::auto::Builder::new(
                    hyper_util::rt::TokioExecutor::new(),
                )
                .serve_connection(hyper_util::rt::TokioIo::new(tls), service)
                .await;
            });
        }
    });
    tracing::info!(%bound, "kubelet API listening");
    Ok(bound)
}

async fn authenticated(k: &Kubelet, cert: ClientCert, headers: &HeaderMap) -> bool {
    if cert.0 {
        return true;
    }
    let Some(token) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
    else {
        return false;
    };
    let reviews: Api<TokenReview> = Api::all(k.client.clone());
    let review = TokenReview {
        spec: TokenReviewSpec {
            token: Some(token.trim().to_string()),
            ..Default::default()
        },
        ..Default::default()
    };
    match reviews.create(&PostParams::default(), &review).await {
        Ok(r) => r.status.and_then(|s| s.authenticated).unwrap_or(false),
        Err(e) => {
            tracing::warn!(error = %e, "TokenReview failed");
            false
        }
    }
}

/// Renders log lines: `sinceSeconds`, `tailLines`, `timestamps`; partial
/// lines (`P`) are joined to the next.
fn render(raw: &[u8], q: &LogQuery) -> Vec<u8> {
    let since = q
        .since_seconds
        .map(|s| chrono::Utc::now() - chrono::Duration::seconds(s));
    let mut lines: Vec<Vec<u8>> = Vec::new();
    let mut pending: Option<(String, Vec<u8>)> = None;
    for line in raw.split_inclusive(|b| *b == b'\n') {
        let Some(l) = parse_cri_line(line) else {
            continue;
        };
        if let Some(cut) = since
            && chrono::DateTime::parse_from_rfc3339(l.timestamp).is_ok_and(|t| t < cut)
        {
            continue;
        }
        let (ts, mut text) = pending
            .take()
            .unwrap_or_else(|| (l.timestamp.to_string(), Vec::new()));
        text.extend_from_slice(l.text);
        if l.partial {
            pending = Some((ts, text));
            continue;
        }
        let mut out = Vec::new();
        if q.timestamps == Some(true) {
            out.extend_from_slice(ts.as_bytes());
            out.push(b' ');
        }
        out.extend_from_slice(&text);
        out.push(b'\n');
        lines.push(out);
    }
    if let Some(n) = q.tail_lines
        && n >= 0
        && (n as usize) < lines.len()
    {
        lines.drain(..lines.len() - n as usize);
    }
    let mut out: Vec<u8> = lines.concat();
    if let Some(limit) = q.limit_bytes
        && limit >= 0
    {
        out.truncate(limit as usize);
    }
    out
}

fn read_all(files: &[PathBuf]) -> Vec<u8> {
    files
        .iter()
        .flat_map(|f| std::fs::read(f).unwrap_or_default())
        .collect()
}

async fn container_logs(
    State(k): State<Kubelet>,
    Extension(cert): Extension<ClientCert>,
    headers: HeaderMap,
    Path((namespace, pod, container)): Path<(String, String, String)>,
    Query(q): Query<LogQuery>,
) -> Response {
    if !authenticated(&k, cert, &headers).await {
        return status(StatusCode::UNAUTHORIZED, "Unauthorized");
    }
    let pods: Api<Pod> = Api::namespaced(k.client.clone(), &namespace);
    let p = match pods.get_opt(&pod).await {
        Ok(Some(p)) => p,
        Ok(None) => {
            return status(
                StatusCode::NOT_FOUND,
                format!("pod {namespace}/{pod} not found"),
            );
        }
        Err(e) => return status(StatusCode::SERVICE_UNAVAILABLE, e.to_string()),
    };
    if p.spec.as_ref().and_then(|s| s.node_name.as_deref()) != Some(k.node.as_str()) {
        return status(
            StatusCode::NOT_FOUND,
            format!("pod {namespace}/{pod} does not run on node {}", k.node),
        );
    }
    let uid = p.metadata.uid.clone().unwrap_or_default();
    let attempts = k.workloads.log_attempts(&uid, &container);
    let attempt = if q.previous == Some(true) {
        attempts.iter().rev().nth(1)
    } else {
        attempts.last()
    };
    let Some(&attempt) = attempt else {
        let what = if q.previous == Some(true) {
            "previous terminated container"
        } else {
            "container"
        };
        return status(
            StatusCode::BAD_REQUEST,
            format!("{what} \"{container}\" in pod \"{pod}\" not found (it has not started yet)"),
        );
    };
    let files = k.workloads.log_files(&uid, &container, attempt);
    let first = render(&read_all(&files), &q);
    if q.follow != Some(true) || q.previous == Some(true) {
        return ([(header::CONTENT_TYPE, "text/plain")], first).into_response();
    }
    // follow: stream what is appended to the attempt's file until the
    // container stops (or a newer attempt starts) and nothing more arrives.
    let current = files.last().cloned().unwrap_or_else(|| {
        k.workloads
            .log_path(&namespace, &pod, &uid, &container, attempt)
    });
    let mut offset = std::fs::metadata(&current).map(|m| m.len()).unwrap_or(0);
    let follow_q = LogQuery {
        timestamps: q.timestamps,
        ..Default::default()
    };
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(16);
    let _ = tx.try_send(Ok(Bytes::from(first)));
    tokio::spawn(async move {
        let mut idle = 0u32;
        loop {
            tokio::time::sleep(Duration::from_millis(200)).await;
            let len = std::fs::metadata(&current).map(|m| m.len()).unwrap_or(0);
            if len > offset {
                let data = std::fs::read(&current).unwrap_or_default();
                let start = (offset as usize).min(data.len());
                // Only whole lines; the rest waits for the next round.
                let end = data[start..]
                    .iter()
                    .rposition(|b| *b == b'\n')
                    .map(|i| start + i + 1)
                    .unwrap_or(start);
                if end > start {
                    if tx
                        .send(Ok(Bytes::from(render(&data[start..end], &follow_q))))
                        .await
                        .is_err()
                    {
                        return;
                    }
                    offset = end as u64;
                }
                idle = 0;
                continue;
            }
            idle += 1;
            // Every 2 s of silence, check whether the container is still running.
            if idle.is_multiple_of(10) {
                let running = k.workloads.log_attempts(&uid, &container).last() == Some(&attempt)
                    && pods
                        .get_opt(&pod)
                        .await
                        .ok()
                        .flatten()
                        .is_some_and(|p| container_running(&p, &container));
                if !running {
                    return;
                }
            }
            if tx.is_closed() {
                return;
            }
        }
    });
    let stream = tokio_stream::wrappers::ReceiverStream::new(rx);
    (
        [(header::CONTENT_TYPE, "text/plain")],
        Body::from_stream(stream),
    )
        .into_response()
}

fn container_running(p: &Pod, container: &str) -> bool {
    let s = p.status.as_ref();
    let all = s
        .and_then(|s| s.container_statuses.clone())
        .unwrap_or_default()
        .into_iter()
        .chain(
            s.and_then(|s| s.init_container_statuses.clone())
                .unwrap_or_default(),
        );
    for cs in all {
        if cs.name == container {
            return cs.state.and_then(|st| st.running).is_some();
        }
    }
    // Not reported yet: assume it is starting.
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOG: &[u8] = b"2026-01-01T00:00:00.000000001Z stdout F one\n\
2026-01-01T00:00:01.000000000Z stderr P tw\n\
2026-01-01T00:00:01.000000001Z stderr F o\n\
2026-01-01T00:00:02.000000000Z stdout F three\n";

    #[test]
    fn renders_like_kubelet() {
        assert_eq!(render(LOG, &LogQuery::default()), b"one\ntwo\nthree\n");
        let q = LogQuery {
            tail_lines: Some(2),
            ..Default::default()
        };
        assert_eq!(render(LOG, &q), b"two\nthree\n");
        let q = LogQuery {
            timestamps: Some(true),
            tail_lines: Some(1),
            ..Default::default()
        };
        assert_eq!(render(LOG, &q), b"2026-01-01T00:00:02.000000000Z three\n");
        let q = LogQuery {
            limit_bytes: Some(5),
            ..Default::default()
        };
        assert_eq!(render(LOG, &q), b"one\nt");
        // Everything is older than 10 s.
        let q = LogQuery {
            since_seconds: Some(10),
            ..Default::default()
        };
        assert_eq!(render(LOG, &q), b"");
    }
}
