//! The process's HTTP endpoints: `/metrics` (every registered metric, the
//! plugin set's included), `/healthz`, `/livez` and `/readyz` (with
//! `?verbose`, `?exclude=` and `/readyz/CHECK`, as kube-apiserver; the checks
//! are `crate::health::host`'s), the status page at `/`, the same status as
//! JSON at `/status` (`wasmlet status`, `wasmlet plugin list`), and
//! `/shadow/NAME`, a plugin's shadow report as JSON (`wasmlet plugin
//! shadow-report`).
//!
//! The status page and the shadow reports show reconcile errors and pod
//! names, so they are served only to a peer on 127.0.0.1 or ::1 (the
//! machine itself, `kubectl port-forward`), or to a caller whose bearer
//! token the API server accepts (TokenReview) and who may `get` the
//! non-resource URL of the request's path (SubjectAccessReview), as
//! kube-rbac-proxy guards a path; else 401 or 403. A loopback peer is
//! trusted only when its `Host` names this server (the bind address, or
//! `localhost`, `127.0.0.1`, `[::1]`): a page in a local browser can point a
//! name of its own at 127.0.0.1 (DNS rebinding) and read the answers, but its
//! requests carry that name; they get 421 Misdirected Request. `/metrics`
//! and the health endpoints stay open to scrapers and probes.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

use anyhow::Context;
use axum::Router;
use axum::extract::{ConnectInfo, Path, RawQuery, Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use crate::controller::metrics::ControllerMetrics;
use crate::health::host::HostChecks;
use crate::node::kubelet::auth::{Gate, Refusal};

/// Whether a peer is this machine's own loopback address (127.0.0.1, ::1),
/// which only local processes can connect from. Other 127/8 addresses are
/// not trusted: a test (or a container runtime) can source connections there.
pub(crate) fn trusted_peer(ip: IpAddr) -> bool {
    match ip.to_canonical() {
        IpAddr::V4(v4) => v4 == Ipv4Addr::LOCALHOST,
        IpAddr::V6(v6) => v6 == Ipv6Addr::LOCALHOST,
    }
}

/// Whether `host` (a request's `Host`, or its URI's authority) names this
/// server bound at `bound`: the bind address itself, or a loopback name
/// (`localhost`, `127.0.0.1`, `[::1]`) on any port, since `kubectl
/// port-forward` and SSH tunnels reach the server through a port of their
/// own. A rebinding page cannot send any of these: its requests name its
/// own host.
pub(crate) fn names_this_server(host: &str, bound: SocketAddr) -> bool {
    let host = host.trim().to_ascii_lowercase();
    if host == bound.to_string() {
        return true;
    }
    // `name[:port]`, or `[v6][:port]`.
    let name = if let Some(rest) = host.strip_prefix('[') {
        match rest.split_once(']') {
            Some((v6, port))
                if port.is_empty() || port.strip_prefix(':').is_some_and(valid_port) =>
            {
                v6
            }
            _ => return false,
        }
    } else {
        match host.split_once(':') {
            Some((name, port)) if valid_port(port) => name,
            Some(_) => return false,
            None => host.as_str(),
        }
    };
    let name = name.strip_suffix('.').unwrap_or(name);
    name == "localhost"
        || name
            .parse::<IpAddr>()
            .is_ok_and(|ip| ip.is_loopback() && trusted_peer(ip))
}

fn valid_port(port: &str) -> bool {
    port.parse::<u16>().is_ok()
}

/// What the status page's guard holds: the gate for remote callers, and the
/// address the server is bound at (what a local `Host` may name).
#[derive(Clone)]
struct Guard {
    gate: Arc<Gate>,
    bound: SocketAddr,
}

/// The status page's guard (see the module's documentation).
async fn guard(
    State(Guard { gate, bound }): State<Guard>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    req: Request,
    next: Next,
) -> Response {
    let bearer = crate::node::kubelet::auth::bearer(req.headers()).map(str::to_owned);
    if trusted_peer(peer.ip()) {
        let host = req
            .headers()
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .or_else(|| req.uri().authority().map(|a| a.as_str()));
        match host {
            Some(host) if names_this_server(host, bound) => return next.run(req).await,
            // A token is checked as from anywhere else.
            _ if bearer.is_some() => {}
            host => {
                return (
                    StatusCode::MISDIRECTED_REQUEST,
                    format!(
                        "Misdirected Request: Host {:?} does not name this server; a request from 127.0.0.1/::1 must name {bound}, localhost, 127.0.0.1 or [::1] (a browser page on another name may be rebinding it to this machine)\n",
                        host.unwrap_or("")
                    ),
                )
                    .into_response();
            }
        }
    }
    match gate
        .admit_path(bearer.as_deref(), req.method(), req.uri().path())
        .await
    {
        Ok(_) => next.run(req).await,
        Err(Refusal::Unauthenticated) => (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, "Bearer")],
            "Unauthorized: the status page is served to 127.0.0.1/::1, or to a bearer token allowed to get this path (RBAC nonResourceURLs)\n",
        )
            .into_response(),
        Err(Refusal::Forbidden(why)) => (StatusCode::FORBIDDEN, format!("{why}\n")).into_response(),
    }
}

/// Serves the endpoints on `addr` until the process ends; returns the bound
/// address. `gate` authenticates and authorizes remote callers of the status page.
pub(crate) async fn serve(
    addr: SocketAddr,
    metrics: ControllerMetrics,
    checks: Arc<HostChecks>,
    page: Arc<crate::status_page::StatusPage>,
    gate: Arc<Gate>,
) -> anyhow::Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind(addr).await.with_context(|| {
        format!("metrics cannot listen on {addr} (flag --metrics-addr; port 0 picks a free one)")
    })?;
    let bound = listener.local_addr()?;
    let shadow_page = page.clone();
    let status_page = page.clone();
    let guarded = Router::new()
        .route(
            "/status",
            get(move || {
                let page = status_page.clone();
                async move { axum::Json(page.report()) }
            }),
        )
        .route(
            "/",
            get(move || {
                let page = page.clone();
                async move { axum::response::Html(page.render()) }
            }),
        )
        .route(
            "/shadow/{name}",
            get({
                let page = shadow_page;
                move |axum::extract::Path(name): axum::extract::Path<String>| {
                    let plugins = page.plugins.get().cloned();
                    async move {
                        match plugins {
                            Some(set) if set.get(&name).is_some() => {
                                axum::Json(set.shadow_slot(&name).report()).into_response()
                            }
                            _ => (StatusCode::NOT_FOUND, format!("no plugin {name}\n"))
                                .into_response(),
                        }
                    }
                }
            }),
        )
        .route_layer(middleware::from_fn_with_state(Guard { gate, bound }, guard));
    let app = Router::new()
        .route(
            "/metrics",
            get(move || {
                let m = metrics.clone();
                async move {
                    (
                        [(
                            "content-type",
                            "application/openmetrics-text; version=1.0.0; charset=utf-8",
                        )],
                        m.encode(),
                    )
                }
            }),
        )
        .merge(health_routes(checks))
        .merge(guarded);
    tokio::spawn(async move {
        let app = app.into_make_service_with_connect_info::<SocketAddr>();
        if let Err(e) = axum::serve(listener, app).await {
            tracing::error!(error = %e, "metrics server stopped");
        }
    });
    Ok(bound)
}

/// `/healthz`, `/livez`, `/readyz` and `/ENDPOINT/CHECK`.
fn health_routes(checks: Arc<HostChecks>) -> Router {
    let mut router = Router::new();
    for endpoint in ["healthz", "livez", "readyz"] {
        let c = checks.clone();
        let all = move |RawQuery(q): RawQuery| {
            let c = c.clone();
            async move {
                let names = c.names(endpoint);
                wasmlet_apiserver::health::format::all(
                    endpoint,
                    q.as_deref().unwrap_or(""),
                    &names,
                    |n| c.check(n),
                )
            }
        };
        let c = checks.clone();
        let one = move |Path(name): Path<String>| {
            let c = c.clone();
            async move {
                wasmlet_apiserver::health::format::one(&c.names(endpoint), &name, |n| c.check(n))
            }
        };
        router = router
            .route(&format!("/{endpoint}"), get(all))
            .route(&format!("/{endpoint}/{{check}}"), get(one));
    }
    router
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_loopback_address_itself_is_a_trusted_peer() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert!(trusted_peer(ip("127.0.0.1")));
        assert!(trusted_peer(ip("::1")));
        assert!(trusted_peer(ip("::ffff:127.0.0.1")));
        for other in [
            "127.0.0.3",
            "10.0.0.7",
            "192.168.1.1",
            "::ffff:10.0.0.1",
            "fe80::1",
        ] {
            assert!(!trusted_peer(ip(other)), "{other}");
        }
    }

    /// A loopback peer's `Host` must name this server: its bind address, or
    /// a loopback name on any port (port-forwards); a rebinding page's own
    /// name, an empty or malformed one, is refused.
    #[test]
    fn only_a_host_naming_this_server_is_trusted_from_loopback() {
        let bound: SocketAddr = "127.0.0.2:9100".parse().unwrap();
        for ok in [
            "127.0.0.2:9100",
            "localhost:9100",
            "LOCALHOST:8080",
            "localhost",
            "localhost.:9100",
            "127.0.0.1:9100",
            "127.0.0.1",
            "[::1]:9100",
            "[::1]",
        ] {
            assert!(names_this_server(ok, bound), "{ok}");
        }
        for bad in [
            "evil.example:9100",
            "evil.example",
            "localhost.evil.example:9100",
            "127.0.0.2:9101",
            "127.0.0.3:9100",
            "0.0.0.0:9100",
            "[::2]:9100",
            "localhost:notaport",
            "localhost:9100:1",
            "[::1]x",
            "[::1]9100",
            "",
        ] {
            assert!(!names_this_server(bad, bound), "{bad}");
        }
        let any: SocketAddr = "0.0.0.0:9100".parse().unwrap();
        assert!(names_this_server("0.0.0.0:9100", any));
        assert!(names_this_server("localhost:9100", any));
        assert!(!names_this_server("10.0.0.7:9100", any));
    }
}
