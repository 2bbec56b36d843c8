//! Helpers for the StatefulsetRollout e2e tests (tests/tests/e2e/sroll.rs): the
//! rollout object, waiting on its status, replaying a pod watch history, and
//! a local HTTP server playing the chat API, Consul and the deploy callback.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Result, anyhow};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};

use crate::workload_plane::{is_ready, sleeper_spec, workload};
use crate::{Plane, eventually};

pub fn resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("rollouts.wasmlet.dev", "v1", "StatefulsetRollout"),
        "statefulsetrollouts",
    )
}

pub fn api(client: &kube::Client) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), "default", &resource())
}

/// Waits (up to 180 s) until the StatefulsetRollout CRD is served: the
/// operator has loaded and applied it.
pub async fn wait_served(client: &kube::Client) -> Result<()> {
    let api = api(client);
    eventually(
        Duration::from_secs(180),
        "the StatefulsetRollout CRD",
        || async { api.list(&Default::default()).await.ok() },
    )
    .await?;
    Ok(())
}

/// A pod template running `sleeper` with `VERSION=version` (each version is a
/// new template, so a new StatefulSet revision).
pub fn template(app: &str, version: &str) -> Value {
    let mut spec = sleeper_spec();
    spec["containers"][0]["env"] = json!([{"name": "VERSION", "value": version}]);
    json!({"metadata": {"labels": {"app": app}}, "spec": spec})
}

/// A template whose module exits 1 at once (a broken release).
pub fn failing_template(app: &str) -> Value {
    let mut t = template(app, "broken");
    t["spec"]["containers"][0]["image"] = json!(workload("exitcode.wasm"));
    t
}

/// The spec of a rollout `api` that uses every integration of the fake
/// server at `url`: chat (token in the Secret `chat`), Consul, a callback.
pub fn integrations(url: &str) -> Value {
    serde_json::json!({
        "channel": "#deploys",
        "notifications": {"url": format!("{url}/api"), "tokenSecret": {"name": "chat"}},
        "serviceDiscovery": {"url": url, "dc": "dc1", "serviceNames": ["api"]},
        "callback": {"url": format!("{url}/callback"), "stageId": "stage-1"},
    })
}

/// Rollout `name` of a 4-replica OnDelete set at `percent`, `spec` merged in.
pub fn rollout(name: &str, percent: i32, template: Value, spec: Value) -> Result<DynamicObject> {
    let mut s = json!({
        "percent": percent,
        "maxUnavailable": 2,
        "statefulset": {"spec": {
            "replicas": 4,
            "serviceName": name,
            "podManagementPolicy": "Parallel",
            "updateStrategy": {"type": "OnDelete"},
            "selector": {"matchLabels": {"app": name}},
            "template": template,
        }},
    });
    for (k, v) in spec.as_object().into_iter().flatten() {
        s[k] = v.clone();
    }
    Ok(serde_json::from_value(json!({
        "apiVersion": "rollouts.wasmlet.dev/v1", "kind": "StatefulsetRollout",
        "metadata": {"name": name}, "spec": s,
    }))?)
}

/// Merge-patches the rollout's spec.
pub async fn edit(api: &Api<DynamicObject>, name: &str, spec: Value) -> Result<()> {
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": spec})),
    )
    .await?;
    Ok(())
}

/// The status once it is for the object's generation and `pred` holds.
pub async fn wait_status(
    plane: &Plane,
    api: &Api<DynamicObject>,
    name: &str,
    what: &str,
    timeout: Duration,
    pred: impl Fn(&Value) -> bool,
) -> Result<Value> {
    let last = Mutex::new(Value::Null);
    let got = eventually(timeout, what, || async {
        let o = api.get(name).await.ok()?;
        let st = o.data.get("status").cloned().unwrap_or(Value::Null);
        *last.lock().unwrap() = st.clone();
        let current = st["observedGeneration"].as_i64() == o.metadata.generation;
        (current && pred(&st)).then_some(st)
    })
    .await;
    got.map_err(|e| {
        anyhow!(
            "{e}; last status {:#}; log tail:\n{}",
            last.lock().unwrap(),
            tail(&plane.log(), 60)
        )
    })
}

/// Waits for `phase` of the current generation.
pub async fn wait_phase(
    plane: &Plane,
    api: &Api<DynamicObject>,
    name: &str,
    phase: &str,
) -> Result<Value> {
    wait_status(plane, api, name, phase, Duration::from_secs(180), |s| {
        s["phase"] == phase
    })
    .await
}

fn tail(s: &str, n: usize) -> String {
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// The most pods that were unavailable (absent, deleting or not Ready) at
/// any point of a pod watch history of `replicas` ordinals `app-N`, counting
/// from the first moment all of them were seen.
pub fn max_unavailable(history: &[(bool, Pod)], app: &str, replicas: usize) -> usize {
    let mut state: BTreeMap<String, bool> = BTreeMap::new();
    let mut worst = 0;
    let mut started = false;
    for (gone, p) in history {
        let name = p.metadata.name.clone().unwrap_or_default();
        if !name.starts_with(&format!("{app}-")) {
            continue;
        }
        if *gone {
            state.remove(&name);
        } else {
            state.insert(
                name,
                is_ready(p)
                    && p.metadata.deletion_timestamp.is_none()
                    && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"),
            );
        }
        // The initial list arrives one pod at a time: count from the moment
        // every ordinal has been seen.
        started = started || state.len() >= replicas;
        if started {
            let available = state.values().filter(|r| **r).count();
            worst = worst.max(replicas.saturating_sub(available));
        }
    }
    worst
}

/// What the fake endpoints saw and how they answer.
#[derive(Default)]
pub struct Endpoints {
    /// (path, authorization, JSON body) of each chat call.
    pub chat: Vec<(String, String, Value)>,
    /// Passing instances Consul reports per service (absent: none).
    pub passing: BTreeMap<String, usize>,
    pub consul_calls: usize,
    /// Callback answers 503 this many more times.
    pub callback_failures: usize,
    /// Every callback request body (failed ones included).
    pub callbacks: Vec<Value>,
}

/// A local HTTP server for the chat API (`/api/chat.*`), Consul
/// (`/v1/health/service/NAME`) and the callback (`/callback`).
pub struct FakeServer {
    pub url: String,
    pub state: Arc<Mutex<Endpoints>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FakeServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FakeServer {
    pub async fn start() -> Result<FakeServer> {
        use axum::extract::{Path, State};
        use axum::http::{HeaderMap, StatusCode};
        use axum::routing::{get, post};
        type S = Arc<Mutex<Endpoints>>;

        async fn chat(
            State(s): State<S>,
            Path(method): Path<String>,
            headers: HeaderMap,
            body: String,
        ) -> axum::Json<Value> {
            let mut s = s.lock().unwrap();
            let auth = headers
                .get("authorization")
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_owned();
            let body: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
            let ts = match method.as_str() {
                "chat.update" => body["ts"].clone(),
                _ => json!(format!("1700000000.{:06}", s.chat.len())),
            };
            let channel = body["channel"].clone();
            s.chat.push((method, auth, body));
            axum::Json(json!({"ok": true, "channel": channel, "ts": ts}))
        }
        async fn consul(State(s): State<S>, Path(name): Path<String>) -> axum::Json<Value> {
            let mut s = s.lock().unwrap();
            s.consul_calls += 1;
            let n = s.passing.get(&name).copied().unwrap_or(0);
            let entries: Vec<Value> = (0..n)
                .map(|i| json!({"Node": {"Node": "workload-node"}, "Service": {"ID": format!("{name}-{i}"), "Service": name}}))
                .collect();
            axum::Json(json!(entries))
        }
        async fn callback(State(s): State<S>, body: String) -> StatusCode {
            let mut s = s.lock().unwrap();
            s.callbacks
                .push(serde_json::from_str(&body).unwrap_or(Value::Null));
            if s.callback_failures > 0 {
                s.callback_failures -= 1;
                return StatusCode::SERVICE_UNAVAILABLE;
            }
            StatusCode::OK
        }

        let state: S = Arc::default();
        let app = axum::Router::new()
            .route("/api/{method}", post(chat))
            .route("/v1/health/service/{name}", get(consul))
            .route("/callback", post(callback))
            .with_state(state.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}", listener.local_addr()?);
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(FakeServer { url, state, task })
    }
}
