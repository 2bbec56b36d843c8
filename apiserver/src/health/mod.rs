//! `/healthz`, `/livez` and `/readyz` as kube-apiserver serves them (the
//! format is [`format`](mod@format)'s, shared with the host's own address).
//!
//! The checks are upstream's names where the plane has the thing they check:
//! `ping`, `log`, `etcd` (the store takes writes: its writer runs and its last
//! commit succeeded), and for readiness `etcd-readiness`, `informer-sync` and
//! `shutdown`. The post-start hooks upstream lists have no counterpart here.

pub mod format;

use std::sync::Arc;

use axum::Router;
use axum::extract::{Path, RawQuery, State};
use axum::response::Response;
use axum::routing::get;

use crate::ApiState;

type Check = fn(&ApiState) -> Result<(), String>;

fn ok(_: &ApiState) -> Result<(), String> {
    Ok(())
}

fn storage(s: &ApiState) -> Result<(), String> {
    s.resources.store.health()
}

/// The checks of each endpoint, in upstream's order.
fn checks(endpoint: &str) -> Vec<(&'static str, Check)> {
    let mut c: Vec<(&'static str, Check)> = vec![("ping", ok), ("log", ok), ("etcd", storage)];
    if endpoint == "readyz" {
        c.extend([
            ("etcd-readiness", storage as Check),
            ("informer-sync", ok),
            ("shutdown", ok),
        ]);
    }
    c
}

/// The routes, to merge into the server's router.
pub(crate) fn routes() -> Router<Arc<ApiState>> {
    let mut router = Router::new();
    for endpoint in ["healthz", "livez", "readyz"] {
        router = router
            .route(
                &format!("/{endpoint}"),
                get(
                    move |State(s): State<Arc<ApiState>>, RawQuery(q): RawQuery| async move {
                        all(&s, endpoint, q.as_deref().unwrap_or(""))
                    },
                ),
            )
            .route(
                &format!("/{endpoint}/{{check}}"),
                get(
                    move |State(s): State<Arc<ApiState>>, Path(name): Path<String>| async move {
                        one(&s, endpoint, &name)
                    },
                ),
            );
    }
    router
}

fn run(s: &ApiState, endpoint: &str, name: &str) -> Result<(), String> {
    match checks(endpoint).into_iter().find(|(n, _)| *n == name) {
        Some((_, check)) => check(s),
        None => Ok(()),
    }
}

fn names(endpoint: &str) -> Vec<&'static str> {
    checks(endpoint).into_iter().map(|(n, _)| n).collect()
}

fn all(s: &ApiState, endpoint: &str, query: &str) -> Response {
    format::all(endpoint, query, &names(endpoint), |n| run(s, endpoint, n))
}

fn one(s: &ApiState, endpoint: &str, name: &str) -> Response {
    format::one(&names(endpoint), name, |n| run(s, endpoint, n))
}
