//! The kubelet API subset the API server needs for `kubectl logs`, `exec` and
//! `attach`: `GET /containerLogs/{namespace}/{pod}/{container}` with `follow`,
//! `tailLines`, `sinceSeconds`, `timestamps`, `previous` and `limitBytes`;
//! `/exec/...` and `/attach/...` over a websocket ([`exec`], [`channels`]).
//!
//! Callers authenticate and are authorized as a kubelet's are (see [`auth`]):
//! a client certificate signed by the configured CA (what kube-apiserver
//! presents with `--kubelet-client-certificate`) or a bearer token, then a
//! SubjectAccessReview for `nodes/proxy` on this node. Anonymous callers get
//! 401, callers without the permission 403.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use axum::Router;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use super::workloads::WorkloadManager;
use auth::{Attributes, Gate, Refusal, User};

pub(crate) mod auth;
mod channels;
mod exec;
mod logs;
pub(crate) mod review_cache;

/// The TLS material of the kubelet endpoint.
pub struct KubeletTls {
    pub(crate) cert_pem: String,
    pub(crate) key_pem: String,
    /// CA whose client certificates are accepted.
    pub(crate) client_ca_pem: String,
    /// Where `client_ca_pem` came from, for the message when a client
    /// certificate is refused (e.g. "--kubelet-client-ca /etc/ca.crt").
    pub(crate) client_ca_source: String,
}

#[derive(Clone)]
struct Kubelet {
    client: kube::Client,
    node: String,
    workloads: Arc<WorkloadManager>,
    gate: Arc<Gate>,
}

/// The user a connection's verified client certificate names, if any.
#[derive(Clone)]
struct ClientCert(Option<User>);

fn status(code: StatusCode, msg: impl Into<String>) -> Response {
    (code, msg.into()).into_response()
}

/// Every route but `/healthz`: authenticated and authorized (see [`auth`]).
async fn admit(State(k): State<Kubelet>, req: Request, next: Next) -> Response {
    let cert = req
        .extensions()
        .get::<ClientCert>()
        .and_then(|c| c.0.clone());
    let bearer = auth::bearer(req.headers()).map(str::to_owned);
    let attrs = Attributes::of(req.method(), req.uri().path());
    match k.gate.admit(cert.as_ref(), bearer.as_deref(), &attrs).await {
        Ok(_) => next.run(req).await,
        Err(Refusal::Unauthenticated) => status(StatusCode::UNAUTHORIZED, "Unauthorized"),
        Err(Refusal::Forbidden(why)) => status(StatusCode::FORBIDDEN, why),
    }
}

/// Logs a refused client certificate at most once a minute: a kubelet whose
/// client CA is not the API server's breaks `kubectl logs`, and the fix is a flag.
struct Refused {
    ca: String,
    last: std::sync::Mutex<Option<Instant>>,
}

impl Refused {
    fn log(&self, e: &std::io::Error) {
        let certificate = e
            .get_ref()
            .and_then(|e| e.downcast_ref::<rustls::Error>())
            .is_some_and(|e| {
                matches!(
                    e,
                    rustls::Error::InvalidCertificate(_) | rustls::Error::NoCertificatesPresented
                )
            });
        if !certificate {
            return;
        }
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        if last.is_some_and(|t| t.elapsed() < Duration::from_secs(60)) {
            return;
        }
        *last = Some(Instant::now());
        tracing::warn!(error = %e, expected_ca = %self.ca, "kubelet API refused a client certificate not signed by the expected CA; `kubectl logs` through an API server needs its kubelet client CA here (flag --kubelet-client-ca)");
    }
}

/// Serves the kubelet API on `addr` until the process ends.
pub(crate) async fn serve(
    addr: SocketAddr,
    tls: KubeletTls,
    client: kube::Client,
    node: String,
    workloads: Arc<WorkloadManager>,
) -> anyhow::Result<SocketAddr> {
    let config =
        wasmlet_apiserver::tls_server_config(&tls.cert_pem, &tls.key_pem, &tls.client_ca_pem)
            .context("the kubelet API's TLS configuration")?;
    let acceptor = tokio_rustls::TlsAcceptor::from(config);
    let listener = tokio::net::TcpListener::bind(addr).await.with_context(|| {
        format!(
            "the kubelet API cannot listen on {addr} (flags --node-address, --kubelet-port; --kubelet-port 0 picks a free port)"
        )
    })?;
    let bound = listener.local_addr()?;
    let kubelet = Kubelet {
        gate: Arc::new(Gate::new(client.clone(), node.clone())),
        client,
        node,
        workloads,
    };
    let app = Router::new()
        .route(
            "/containerLogs/{namespace}/{pod}/{container}",
            get(logs::container_logs),
        )
        .route(
            "/exec/{namespace}/{pod}/{container}",
            get(exec::exec).post(exec::exec),
        )
        .route(
            "/attach/{namespace}/{pod}/{container}",
            get(exec::attach).post(exec::attach),
        )
        .route_layer(middleware::from_fn_with_state(kubelet.clone(), admit))
        .route("/healthz", get(|| async { "ok" }))
        .with_state(kubelet);
    let refused = Arc::new(Refused {
        ca: tls.client_ca_source.clone(),
        last: Default::default(),
    });
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                continue;
            };
            let acceptor = acceptor.clone();
            let app = app.clone();
            let refused = refused.clone();
            tokio::spawn(async move {
                let tls = match acceptor.accept(tcp).await {
                    Ok(tls) => tls,
                    Err(e) => return refused.log(&e),
                };
                // rustls verified the chain against the client CA already.
                let user = tls
                    .get_ref()
                    .1
                    .peer_certificates()
                    .and_then(|c| c.first())
                    .and_then(|c| User::from_certificate(c));
                let app = app.layer(axum::Extension(ClientCert(user)));
                let service = hyper_util::service::TowerToHyperService::new(app);
                let _ = hyper_util::server::conn::auto::Builder::new(
                    hyper_util::rt::TokioExecutor::new(),
                )
                .serve_connection_with_upgrades(hyper_util::rt::TokioIo::new(tls), service)
                .await;
            });
        }
    });
    tracing::info!(%bound, "kubelet API listening");
    Ok(bound)
}
