//! The embedded, Kubernetes-compatible API server.
//!
//! `kubectl` and the `kube` crate talk to it exactly as to kube-apiserver:
//! HTTPS with a generated CA, bearer-token auth, legacy discovery, OpenAPI v3,
//! JSON and YAML bodies, the four patch types, LIST/WATCH with
//! resourceVersions, finalizers, graceful pod deletion, garbage collection and
//! CRDs served the moment they are stored.
//!
//! ```no_run
//! # async fn demo() -> anyhow::Result<()> {
//! let server = wasmlet_apiserver::ApiServer::start(wasmlet_apiserver::Config {
//!     data_dir: "/tmp/wasmlet".into(),
//!     ..Default::default()
//! })
//! .await?;
//! let client = kube::Client::try_from(server.kube_config().await?)?;
//! # Ok(()) }
//! ```
//!
//! # Deviations from upstream
//! - No admission webhooks or aggregation. Authorization is RBAC
//!   (`rbac`, `authz`) with aggregated ClusterRoles and the escalation
//!   check. Kubernetes protobuf is read and written for built-in kinds only
//!   (custom resources are JSON, as upstream's), see `codec`.
//! - Built-in kinds are decoded against their published schemas (types,
//!   unknown and duplicate fields, see `validation`), but of upstream's
//!   hand-written validation only the rules wasmlet's controllers and agents
//!   depend on, and those of ConfigMaps, Secrets and pod updates, are kept.
//!   `fieldValidation=Strict` is a 400 as upstream's (not a 422).
//!   `/openapi/v3` publishes their definitions, and `/openapi/v2` in JSON
//!   (in protobuf it is an empty document: see `openapi_v2`).
//! - DELETE answers as upstream per kind (the object for custom resources,
//!   pods, services, ...; a `Status` naming it for the rest), always 200 (the
//!   deprecated `orphanDependents=false` 202 is not reproduced).
//! - Built-in kinds are defaulted as upstream (`defaults`), but the
//!   ServiceAccount admission neither rejects a pod whose ServiceAccount does
//!   not exist (the `default` one is created by a controller, which a pod
//!   created right after its namespace must not race) nor mounts a
//!   `kube-api-access` token volume; the Priority admission knows no
//!   PriorityClasses (priority 0 unless given).
//! - Services, Endpoints and EndpointSlices are stored and served, with cluster
//!   IPs from 10.96.0.0/12 (`services`); nothing proxies to them and no
//!   controller fills Endpoints from pods.
//! - Field selectors: upstream's per built-in kind (see `rest::read`); a
//!   CRD's `selectableFields` are not honoured yet.
//! - Watch history is kept in memory, bounded by count (`--watch-history`),
//!   age (`--watch-history-seconds`, 75 s as upstream's watch cache) and the
//!   bytes of the objects it holds (`--watch-history-mib`, 32: a burst of
//!   large objects, or their deletion, gives its memory back at once);
//!   upstream can still serve older revisions from etcd (kept 5 minutes),
//!   here they get 410 Gone and clients relist. Bookmarks every 5 s keep a
//!   watching client's revision fresh.
//! - `/readyz` and `/livez` have upstream's basic checks but none of its
//!   post-start hooks.
//! - See [`wasmlet_apimachinery::managedfields`] for server-side apply.
//! - `pods/log`, `pods/exec` and `pods/attach` do not verify the kubelet's
//!   serving certificate (as kube-apiserver without `--kubelet-certificate-authority`).
//! - `pods/exec` and `pods/attach` forward a websocket upgrade to the kubelet
//!   as it came (upstream 1.30+ translates it to SPDY for the kubelet); SPDY
//!   from the client is refused; `pods/portforward` is not served.
//! - ResourceQuota admission charges creates, not updates; a quota not yet
//!   measured is measured by the create that needs it (upstream refuses with
//!   "status unknown"); see `resourcequota` and `limitranger`.

mod auth;
mod cancel;
mod cause;
mod cel_rules;
mod codec;
mod connections;
mod controllers;
mod crd;
mod defaults;
mod discovery;
mod events;
pub mod health;
mod inflight;
mod limitranger;
mod logs;
mod meta;
mod metrics;
mod openapi;
mod openapi_v2;
mod printers;
mod priority;
pub mod private_dir;
mod query;
mod registry;
mod resourcequota;
mod resources;
mod rest;
mod services;
mod status;
mod store;
mod strategy;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
mod validation;
mod watch_quota;

// The public surface: what the host, its tests and benches use. Everything
// else is `pub(crate)`: a change inside the server cannot break the host.
pub use auth::authz::CONTROLLER_USER;
pub use auth::pki::Pki;
pub use auth::tls::server_config as tls_server_config;
pub use connections::{ConnectionLimits, raise_fd_limit};

/// Internals the fuzz targets and the benches reach (not a stable API): the
/// request handler and the per-kind decode and validation.
#[doc(hidden)]
pub mod internals {
    pub use crate::ApiState;
    pub use crate::registry::{Registry, ResourceType};
    pub use crate::rest::dispatch;
    pub use crate::status::{ApiError, Cause};
    pub use crate::validation::schemas::{KindSchema, for_kind};
    pub use crate::validation::{FieldChecks, decode, validate};
}

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, Result};
use axum::Router;
use axum::extract::{Path, State};
use axum::http::header;
use axum::middleware;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::json;

use self::registry::Registry;

/// The field manager of the API server's own writes (its bootstrap objects:
/// namespaces, the `kubernetes` Service, RBAC defaults), upstream's
/// `kube-apiserver`. Its controllers write under names of their own.
pub(crate) const MANAGER: &str = "wasmlet-apiserver";
use self::resources::{Resources, WriteOptions};
use self::status::ApiError;
use self::store::{Store, StoreConfig};

pub struct Config {
    pub data_dir: PathBuf,
    /// Where to listen; port 0 picks a free one (the kubeconfig names it).
    pub listen: SocketAddr,
    /// Revisions of watch history kept; older resourceVersions get 410 Gone.
    pub history: usize,
    /// How long an event stays in the watch history at most, however few
    /// there are (upstream's watch cache keeps 75 s fresh), so that memory
    /// comes back after a burst.
    pub history_max_age: std::time::Duration,
    /// How many bytes of objects the watch history holds at most.
    pub history_max_bytes: usize,
    /// Watches one user may hold open at once; past it a watch gets 429.
    pub max_watches_per_user: usize,
    /// Bounds on open connections; `None` derives them from the process's
    /// open-files limit ([`ConnectionLimits::from_fd_limit`]).
    pub connections: Option<ConnectionLimits>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            data_dir: PathBuf::from(".data"),
            listen: ([127, 0, 0, 1], 6443).into(),
            history: 10_000,
            history_max_age: store::DEFAULT_HISTORY_MAX_AGE,
            history_max_bytes: store::DEFAULT_HISTORY_MAX_BYTES,
            max_watches_per_user: 1_000,
            connections: None,
        }
    }
}

/// Shared by every request handler (the fuzz target's handle on the server).
#[doc(hidden)]
pub struct ApiState {
    pub(crate) resources: Resources,
    pub(crate) registry: Arc<Registry>,
    pub(crate) token: String,
    pub(crate) addr: SocketAddr,
    pub(crate) pki: Arc<auth::pki::Pki>,
    pub(crate) kubelets: logs::KubeletClients,
    pub(crate) metrics: metrics::ApiMetrics,
    /// Signs and verifies ServiceAccount tokens.
    pub(crate) tokens: auth::satoken::Signer,
    pub(crate) watches: watch_quota::WatchQuota,
    /// Places for requests in flight, per user and overall.
    pub(crate) inflight: inflight::Inflight,
    /// RBAC objects parsed once per revision.
    pub(crate) rbac: Arc<auth::rbac::PolicyCache>,
    /// The OpenAPI documents, built once per set of served types.
    pub(crate) openapi: openapi::Cache,
}

/// A running server; dropping it does not stop it (it runs until the process ends).
pub struct ApiServer {
    pub addr: SocketAddr,
    pub kubeconfig: PathBuf,
    #[doc(hidden)]
    pub state: Arc<ApiState>,
    handle: axum_server::Handle<SocketAddr>,
}

impl ApiServer {
    pub async fn start(config: Config) -> Result<ApiServer> {
        // The database, its WAL, the CA key and the kubeconfigs: this user's only.
        crate::private_dir::private_dir(&config.data_dir)
            .with_context(|| format!("data directory {}", config.data_dir.display()))?;
        let pki = auth::pki::Pki::load_or_create(&config.data_dir)?;
        tracing::info!(
            "pods/log is forwarded to kubelets authenticated by a client certificate of this CA; \
             their serving certificates are not verified (as kube-apiserver without \
             --kubelet-certificate-authority)"
        );
        let db = config.data_dir.join("state.db");
        let store = Store::open(
            &db,
            StoreConfig {
                history: config.history,
                max_age: config.history_max_age,
                max_bytes: config.history_max_bytes,
            },
        )
        .with_context(|| format!("opening {}", db.display()))?;
        let registry = Arc::new(Registry::with_builtins());
        let resources = Resources::new(store, registry.clone());
        resources.load_crds();
        bootstrap(&resources).await?;
        auth::rbac::bootstrap(&resources).await?;
        controllers::bootstrap::priority_classes(&resources).await?;
        controllers::bootstrap::label_existing(&resources).await;

        let listener = std::net::TcpListener::bind(config.listen)
            .with_context(|| {
                format!(
                    "the API server cannot listen on {} (flags --address, --port; --port 0 picks a free port)",
                    config.listen
                )
            })?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let pki = Arc::new(pki);
        let state = Arc::new(ApiState {
            resources: resources.clone(),
            registry,
            token: pki.token.clone(),
            addr,
            pki: pki.clone(),
            kubelets: Default::default(),
            metrics: Default::default(),
            tokens: auth::satoken::Signer::load_or_create(&pki.dir)?,
            watches: watch_quota::WatchQuota::new(config.max_watches_per_user),
            inflight: Default::default(),
            rbac: Default::default(),
            openapi: Default::default(),
        });
        tokio::spawn(auth::rbac::aggregate::run(resources.clone()));
        controllers::bootstrap::services(&resources, addr).await?;
        tokio::spawn(controllers::serviceaccounts::Controller::new(resources.clone()).run());
        tokio::spawn(controllers::apiservices::Controller::new(resources.clone()).run());
        let signer = pki.clone();
        tokio::spawn(
            controllers::csrsigning::Controller::new(
                resources.clone(),
                Arc::new(move |pem: &str, valid_for| signer.sign_client_request(pem, valid_for)),
            )
            .run(),
        );
        tokio::spawn(controllers::resourcequota::Controller::new(resources.clone()).run());
        tokio::spawn(controllers::gc::Controllers::new(resources).run());

        let app = router(state.clone());
        let tls = axum_server::tls_rustls::RustlsConfig::from_config(pki.rustls_config()?);
        let handle = axum_server::Handle::new();
        let limits = config
            .connections
            .unwrap_or_else(connections::ConnectionLimits::from_fd_limit);
        let acceptor = auth::tls::PeerCertAcceptor {
            inner: axum_server::tls_rustls::RustlsAcceptor::new(tls)
                .handshake_timeout(limits.handshake),
            connections: connections::Connections::new(limits.clone()),
        };
        let mut server = axum_server::from_tcp(listener)?
            .acceptor(acceptor)
            .handle(handle.clone());
        // Idle connections end (hyper's header timeout, which runs from the
        // end of one request to the next's headers, needs a timer).
        server
            .http_builder()
            .http1()
            .timer(hyper_util::rt::TokioTimer::new())
            .header_read_timeout(limits.idle);
        tokio::spawn(async move {
            if let Err(e) = server.serve(app.into_make_service()).await {
                tracing::error!(error = %e, "API server stopped");
            }
        });
        let kubeconfig = pki.write_kubeconfig(&config.data_dir, addr)?;
        tracing::info!(%addr, kubeconfig = %kubeconfig.display(), "API server listening");
        Ok(ApiServer {
            addr,
            kubeconfig,
            state,
            handle,
        })
    }

    /// The plane's CA, which signs the host's and the node's identities.
    pub fn pki(&self) -> &Pki {
        &self.state.pki
    }

    /// The store's health (its writer runs and its last commit succeeded),
    /// for the host's own `/readyz`.
    pub fn store_health(&self) -> impl Fn() -> Result<(), String> + Send + Sync + 'static {
        let store = self.state.resources.store.clone();
        move || store.health()
    }

    /// A `kube::Config` for this server, from the kubeconfig it wrote.
    pub async fn kube_config(&self) -> Result<kube::Config> {
        let kc = kube::config::Kubeconfig::read_from(&self.kubeconfig)?;
        Ok(kube::Config::from_custom_kubeconfig(kc, &Default::default()).await?)
    }

    /// Stops accepting connections; open watches end.
    pub fn shutdown(&self) {
        self.handle.shutdown();
    }

    /// The graceful stop: no new connections, and the open ones (requests in
    /// flight, watches) get up to `within` to end before they are cut. Every
    /// write is committed (fsynced) before it is answered, so the store has
    /// nothing left to flush.
    pub async fn drain(&self, within: std::time::Duration) {
        self.handle.graceful_shutdown(Some(within));
        let deadline = tokio::time::Instant::now() + within;
        while self.handle.connection_count() > 0 && tokio::time::Instant::now() < deadline {
            // axum-server signals no "all closed"; connections close within milliseconds.
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }
}

/// The namespaces every cluster has from the start.
async fn bootstrap(resources: &Resources) -> Result<()> {
    let nsrt = resources.registry.builtin("", "v1", "namespaces")?;
    for ns in ["default", "kube-system", "kube-node-lease", "kube-public"] {
        if resources.store.get(&nsrt.key("", ns)).is_none() {
            let obj = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}});
            match resources
                .create(&nsrt, "v1", "", obj, &WriteOptions::by(MANAGER))
                .await
            {
                Ok(_) => {}
                Err(e) if e.reason == "AlreadyExists" => {}
                Err(e) => return Err(anyhow::anyhow!("creating namespace {ns}: {e}")),
            }
        }
    }
    Ok(())
}

fn router(state: Arc<ApiState>) -> Router {
    Router::new()
        .route(
            "/metrics",
            get(|State(s): State<Arc<ApiState>>| async move {
                (
                    [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
                    s.metrics.render(),
                )
            }),
        )
        .route(
            "/version",
            get(|| async { rest::value_response(200, &discovery::version()) }),
        )
        .route(
            "/api",
            get(
                |State(s): State<Arc<ApiState>>, headers: axum::http::HeaderMap| async move {
                    match aggregated(&headers) {
                        true => discovery_v2(discovery::aggregated(&s.registry, true)),
                        false => json(discovery::api_versions(&s.addr.to_string())),
                    }
                },
            ),
        )
        .route(
            "/apis",
            get(
                |State(s): State<Arc<ApiState>>, headers: axum::http::HeaderMap| async move {
                    match aggregated(&headers) {
                        true => discovery_v2(discovery::aggregated(&s.registry, false)),
                        false => json(discovery::api_groups(&s.registry)),
                    }
                },
            ),
        )
        .route(
            "/apis/{group}",
            get(
                |State(s): State<Arc<ApiState>>, Path(g): Path<String>| async move {
                    discovery::api_group(&s.registry, &g)
                        .map(json)
                        .unwrap_or_else(not_found)
                },
            ),
        )
        .route(
            "/api/{version}",
            get(
                |State(s): State<Arc<ApiState>>, Path(v): Path<String>| async move {
                    discovery::resource_list(&s.registry, "", &v)
                        .map(json)
                        .unwrap_or_else(not_found)
                },
            ),
        )
        .route(
            "/apis/{group}/{version}",
            get(
                |State(s): State<Arc<ApiState>>, Path((g, v)): Path<(String, String)>| async move {
                    discovery::resource_list(&s.registry, &g, &v)
                        .map(json)
                        .unwrap_or_else(not_found)
                },
            ),
        )
        .route(
            "/openapi/v2",
            get(
                |State(s): State<Arc<ApiState>>, headers: axum::http::HeaderMap| async move {
                    // kubectl asks for the v2 document in protobuf (gnostic),
                    // which is not encoded here. A 406 would be upstream's
                    // answer, but kubectl 1.33 does not fall back from it:
                    // validating a `List` (`apply`/`create -f list.yaml`)
                    // then fails. An empty message is a valid document with
                    // no definitions, so kubectl validates nothing itself
                    // (the server validates with `fieldValidation`).
                    let accept = headers
                        .get(axum::http::header::ACCEPT)
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or("");
                    if accept.contains(openapi::V2_PROTOBUF_ACCEPT) {
                        return (
                            [(axum::http::header::CONTENT_TYPE, openapi::V2_PROTOBUF)],
                            Vec::new(),
                        )
                            .into_response();
                    }
                    rest::json_response(200, s.openapi.v2(&s.registry, openapi_v2::document))
                },
            ),
        )
        .route(
            "/openapi/v3",
            get(|State(s): State<Arc<ApiState>>| async move {
                rest::json_response(200, s.openapi.v3_root(&s.registry))
            }),
        )
        .route(
            "/openapi/v3/{*path}",
            get(
                |State(s): State<Arc<ApiState>>, Path(p): Path<String>| async move {
                    let parts: Vec<&str> = p.split('/').collect();
                    let doc = match parts.as_slice() {
                        ["api", v] => s.openapi.v3_doc(&s.registry, "", v),
                        ["apis", g, v] => s.openapi.v3_doc(&s.registry, g, v),
                        _ => None,
                    };
                    doc.map(|d| rest::json_response(200, d))
                        .unwrap_or_else(not_found)
                },
            ),
        )
        .merge(health::routes())
        .fallback(rest::dispatch)
        .layer(middleware::from_fn_with_state(
            state.clone(),
            auth::authn::guard,
        ))
        .with_state(state)
}

fn json(v: serde_json::Value) -> Response {
    rest::value_response(200, &v)
}

/// Whether the request's `Accept` asks for aggregated discovery.
fn aggregated(headers: &axum::http::HeaderMap) -> bool {
    headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(discovery::wants_aggregated)
}

/// An aggregated discovery document, with the media type clients check to
/// tell it from the legacy one.
fn discovery_v2(v: serde_json::Value) -> Response {
    let body = serde_json::to_vec(&v).unwrap_or_default();
    (
        [
            (header::CONTENT_TYPE, discovery::AGGREGATED),
            (header::VARY, "Accept"),
        ],
        body,
    )
        .into_response()
}

fn not_found() -> Response {
    ApiError::new(
        404,
        "NotFound",
        "the server could not find the requested resource",
    )
    .into_response()
}

/// Compares bearer tokens in constant time (`subtle`), so response timing
/// does not reveal how much of a guessed token was right.
pub(crate) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    use subtle::ConstantTimeEq;
    a.ct_eq(b).into()
}

#[cfg(test)]
pub(crate) use testing::test_server;
