//! The kube-runtime arm: the Widget reconciler as a native kube-runtime 5.0
//! `Controller`, run in its own process (the bench binary re-executed with
//! `VERSUS_ROLE=kube-runtime`) so its CPU and RSS are measured apart.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures::StreamExt;
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
}

struct Ctx {
    client: kube::Client,
    reconciles: AtomicU64,
}

/// The same logic as guests/testing/widget; like the wasmlet host, it writes
/// the status only when it differs.
async fn reconcile(w: Arc<Widget>, ctx: Arc<Ctx>) -> Result<Action, kube::Error> {
    ctx.reconciles.fetch_add(1, Ordering::Relaxed);
    let summary = format!("size={}", w.spec.size);
    if w.status.as_ref().and_then(|s| s.summary.as_deref()) != Some(summary.as_str()) {
        let ns = w.namespace().unwrap_or_default();
        let api: Api<Widget> = Api::namespaced(ctx.client.clone(), &ns);
        api.patch_status(
            &w.name_any(),
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"summary": summary}})),
        )
        .await?;
    }
    Ok(Action::await_change())
}

fn error_policy(_: Arc<Widget>, _: &kube::Error, _: Arc<Ctx>) -> Action {
    Action::requeue(Duration::from_secs(1))
}

/// Runs until killed; prints `reconciles N` on stdout whenever the count moves
/// (the orchestrator reads the last one).
pub async fn run(concurrency: u16) -> anyhow::Result<()> {
    let client = kube::Client::try_default().await?;
    let ctx = Arc::new(Ctx {
        client: client.clone(),
        reconciles: AtomicU64::new(0),
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
