//! `/healthz`, `/livez` and `/readyz` as kube-apiserver serves them: `ok`, or
//! with `?verbose` one `[+]check ok` line per check and `livez check passed`;
//! a failing check makes the answer 500 with every line and the reason
//! withheld; `?exclude=NAME` skips a check; `/readyz/NAME` asks one.
//!
//! The checks are upstream's names where the plane has the thing they check:
//! `ping`, `log`, `etcd` (the store takes writes: its writer runs and its last
//! commit succeeded), and for readiness `etcd-readiness`, `informer-sync` and
//! `shutdown`. The post-start hooks upstream lists have no counterpart here.

use std::sync::Arc;

use axum::Router;
use axum::extract::{Path, RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use super::ApiState;

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
pub fn routes() -> Router<Arc<ApiState>> {
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

fn text(code: StatusCode, body: String) -> Response {
    (code, [("content-type", "text/plain; charset=utf-8")], body).into_response()
}

fn all(s: &ApiState, endpoint: &str, query: &str) -> Response {
    let mut verbose = false;
    let mut exclude: Vec<String> = Vec::new();
    for (k, v) in url::form_urlencoded::parse(query.as_bytes()) {
        match &*k {
            "verbose" => verbose = true,
            "exclude" => exclude.push(v.into_owned()),
            _ => {}
        }
    }
    let mut out = String::new();
    let mut failed = false;
    for (name, check) in checks(endpoint) {
        if let Some(i) = exclude.iter().position(|e| e == name) {
            exclude.remove(i);
            out.push_str(&format!("[+]{name} excluded: ok\n"));
            continue;
        }
        match check(s) {
            Ok(()) => out.push_str(&format!("[+]{name} ok\n")),
            Err(why) => {
                tracing::warn!(check = name, reason = %why, "{endpoint} check failed");
                failed = true;
                out.push_str(&format!("[-]{name} failed: reason withheld\n"));
            }
        }
    }
    if !exclude.is_empty() {
        out.push_str(&format!(
            "warn: some health checks cannot be excluded: no matches for {}\n",
            exclude
                .iter()
                .map(|e| format!("\"{e}\""))
                .collect::<Vec<_>>()
                .join(",")
        ));
    }
    if failed {
        return text(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("{out}{endpoint} check failed\n"),
        );
    }
    if verbose {
        text(StatusCode::OK, format!("{out}{endpoint} check passed\n"))
    } else {
        text(StatusCode::OK, "ok".into())
    }
}

fn one(s: &ApiState, endpoint: &str, name: &str) -> Response {
    match checks(endpoint).into_iter().find(|(n, _)| *n == name) {
        None => text(StatusCode::NOT_FOUND, "404 page not found\n".into()),
        Some((_, check)) => match check(s) {
            Ok(()) => text(StatusCode::OK, "ok".into()),
            Err(why) => text(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("internal server error: {why}\n"),
            ),
        },
    }
}
