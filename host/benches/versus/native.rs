//! The kube-runtime arm: the Widget reconciler as a native kube-runtime 5.0
//! `Controller`, run in its own process (the bench binary re-executed with
//! `VERSUS_ROLE=kube-runtime`) so its CPU and RSS are measured apart.
//!
//! With `VERSUS_CONDITIONS=1` it also writes what the wasmlet host adds to
//! every status: `observedGeneration` and a `Ready` condition, as a
//! kube-runtime author following the API conventions would. That arm does
//! the same work as the wasmlet arm, API server included.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::watcher;
use kube::{CustomResource, ResourceExt};
use serde::{Deserialize, Serialize};
use serde_json::json;

#[derive(CustomResource, Clone, Debug, Serialize, Deserialize)]
#[kube(
    group = "bench.wasmlet.dev",
    version = "v1",
    kind = "Widget",
    namespaced,
    status = "WidgetStatus",
    schema = "disabled"
)]
pub struct WidgetSpec {
    pub size: i64,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct WidgetStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
    #[serde(
        default,
        rename = "observedGeneration",
        skip_serializing_if = "Option::is_none"
    )]
    pub observed_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<Condition>>,
}

struct Ctx {
    client: kube::Client,
    reconciles: AtomicU64,
    /// Also write `observedGeneration` and a `Ready` condition.
    conditions: bool,
}

/// The same logic as guests/testing/widget; like the wasmlet host, it writes
/// the status only when it differs.
async fn reconcile(w: Arc<Widget>, ctx: Arc<Ctx>) -> Result<Action, kube::Error> {
    ctx.reconciles.fetch_add(1, Ordering::Relaxed);
    let summary = format!("size={}", w.spec.size);
    let status = w.status.clone().unwrap_or_default();
    let desired = if ctx.conditions {
        with_ready(&status, &summary, w.metadata.generation.unwrap_or(0))
    } else {
        json!({"summary": summary})
    };
    let current = serde_json::to_value(&status).unwrap_or_default();
    let mut merged = current.clone();
    json_patch::merge(&mut merged, &desired);
    if merged != current {
        let ns = w.namespace().unwrap_or_default();
        let api: Api<Widget> = Api::namespaced(ctx.client.clone(), &ns);
        api.patch_status(
            &w.name_any(),
            &PatchParams::default(),
            &Patch::Merge(json!({ "status": desired })),
        )
        .await?;
    }
    Ok(Action::await_change())
}

/// The status with `observedGeneration` and a `Ready=True` condition, whose
/// `lastTransitionTime` moves only when the condition changes.
fn with_ready(status: &WidgetStatus, summary: &str, generation: i64) -> serde_json::Value {
    let was = status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "Ready");
    let since = match was {
        Some(c) if c.status == "True" => c.last_transition_time.clone(),
        _ => Time(
            k8s_openapi::jiff::Timestamp::now()
                .round(k8s_openapi::jiff::Unit::Second)
                .unwrap_or_default(),
        ),
    };
    let ready = Condition {
        type_: "Ready".into(),
        status: "True".into(),
        reason: "Ready".into(),
        message: String::new(),
        last_transition_time: since,
        observed_generation: Some(generation),
    };
    json!({"summary": summary, "observedGeneration": generation, "conditions": [ready]})
}

fn error_policy(_: Arc<Widget>, _: &kube::Error, _: Arc<Ctx>) -> Action {
    Action::requeue(Duration::from_secs(1))
}

/// Runs until killed; prints `reconciles N` on stdout whenever the count moves
/// (the orchestrator reads the last one).
pub async fn run(concurrency: u16, conditions: bool) -> anyhow::Result<()> {
    let client = kube::Client::try_default().await?;
    let ctx = Arc::new(Ctx {
        client: client.clone(),
        reconciles: AtomicU64::new(0),
        conditions,
    });
    {
        let ctx = ctx.clone();
        tokio::spawn(async move {
            let mut last = 0;
            let mut tick = tokio::time::interval(Duration::from_millis(100));
            loop {
                tick.tick().await;
                let n = ctx.reconciles.load(Ordering::Relaxed);
                if n != last {
                    last = n;
                    println!("reconciles {n}");
                }
            }
        });
    }
    Controller::new(Api::<Widget>::all(client), watcher::Config::default())
        .with_config(controller::Config::default().concurrency(concurrency))
        .run(reconcile, error_policy, ctx)
        .for_each(|_| async {})
        .await;
    Ok(())
}
