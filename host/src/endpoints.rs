//! The process's HTTP endpoints: `/metrics` (every registered metric, the
//! plugin set's included), `/healthz` and `/readyz` (ready once the host has
//! loaded its plugins), the status page at `/`, and `/shadow/NAME`, a
//! plugin's shadow report as JSON (`wasmlet plugin shadow-report`).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::Context;
use axum::Router;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::get;

use crate::controller::metrics::ControllerMetrics;

/// Serves the endpoints on `addr` until the process ends; returns the bound address.
pub async fn serve(
    addr: SocketAddr,
    metrics: ControllerMetrics,
    ready: Arc<AtomicBool>,
    page: Arc<crate::status_page::StatusPage>,
) -> anyhow::Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind(addr).await.with_context(|| {
        format!("metrics cannot listen on {addr} (flag --metrics-addr; port 0 picks a free one)")
    })?;
    let bound = listener.local_addr()?;
    let shadow_page = page.clone();
    let app = Router::new()
        .route(
            "/",
            get(move || {
                let page = page.clone();
                async move { axum::response::Html(page.render()) }
            }),
        )
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
        .route("/healthz", get(|| async { "ok" }))
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
        .route(
            "/readyz",
            get(move || {
                let ready = ready.load(Ordering::Acquire);
                async move {
                    if ready {
                        (StatusCode::OK, "ok")
                    } else {
                        (StatusCode::SERVICE_UNAVAILABLE, "not ready")
                    }
                }
            }),
        );
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::error!(error = %e, "metrics server stopped");
        }
    });
    Ok(bound)
}
