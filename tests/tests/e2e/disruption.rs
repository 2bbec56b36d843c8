//! The built-in disruption controller end to end: `wasmlet up` with its
//! built-in plugins, sleeper pods that really run on the wasmlet node, and a
//! PodDisruptionBudget whose status the controller keeps while the Eviction
//! API reads and spends it.

use std::time::Duration;

use anyhow::{Result, ensure};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, EvictParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use wasmlet_e2e::workload_plane::{self, is_ready, record, sleeper_spec};
use wasmlet_e2e::{eventually, expect_status};

fn web_pod(name: &str, spec: Value) -> Result<Pod> {
    Ok(serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "web"}},
        "spec": spec,
    }))?)
}

/// (expectedPods, currentHealthy, desiredHealthy, disruptionsAllowed) once
/// the status is for the budget's generation.
fn counts(b: &PodDisruptionBudget) -> Option<(i32, i32, i32, i32)> {
    let st = b.status.as_ref()?;
    (st.observed_generation == b.metadata.generation).then_some((
        st.expected_pods,
        st.current_healthy,
        st.desired_healthy,
        st.disruptions_allowed,
    ))
}

fn allowed_condition(b: &PodDisruptionBudget) -> Option<(String, String)> {
    let c = b
        .status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "DisruptionAllowed")?;
    Some((c.status.clone(), c.reason.clone()))
}

async fn wait_counts(
    pdbs: &Api<PodDisruptionBudget>,
    want: (i32, i32, i32, i32),
    what: &str,
) -> Result<PodDisruptionBudget> {
    let last = std::sync::Mutex::new(None);
    let got = eventually(Duration::from_secs(40), what, || async {
        let b = pdbs.get("web").await.ok()?;
        *last.lock().unwrap() = b.status.clone();
        (counts(&b) == Some(want)).then_some(b)
    })
    .await;
    got.map_err(|e| anyhow::anyhow!("{e}; last status {:?}", last.lock().unwrap()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_budget_follows_its_pods_and_gates_evictions() -> Result<()> {
    let (plane, _) = workload_plane::start(&[]).await?;
    // No retries: kube's default policy would retry the 429s.
    let client = plane.client_without_retries().await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), "default");
    pdbs.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "web"},
            "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "web"}}}}))?,
    )
    .await?;
    // No pods yet: nothing may be disrupted.
    let b = wait_counts(&pdbs, (0, 0, 2, 0), "an empty budget").await?;
    assert_eq!(
        allowed_condition(&b),
        Some(("False".into(), "InsufficientPods".into()))
    );

    for name in ["web-0", "web-1", "web-2"] {
        pods.create(&PostParams::default(), &web_pod(name, sleeper_spec())?)
            .await?;
    }
    // A pod that never becomes ready (its module does not exist) is expected
    // but not healthy.
    let mut broken = sleeper_spec();
    broken["containers"][0]["image"] = json!("file:///nowhere/missing.wasm");
    pods.create(&PostParams::default(), &web_pod("web-broken", broken)?)
        .await?;
    let b = wait_counts(&pdbs, (4, 3, 2, 1), "three ready pods of four").await?;
    assert_eq!(
        allowed_condition(&b),
        Some(("True".into(), "SufficientPods".into()))
    );

    // A disruption the Eviction API recorded (as a real one would just
    // before deleting) stops the pod from counting until it expires: 110 s
    // ago leaves 10 s of the controller's 2 minutes.
    let history = record(pdbs.clone()).await?;
    let at = Time(Timestamp::now() - SignedDuration::from_secs(110));
    pdbs.patch_status(
        "web",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"disruptedPods": {"web-2": at}}})),
    )
    .await?;
    wait_counts(&pdbs, (4, 2, 2, 0), "the recorded disruption honoured").await?;
    let b = eventually(
        Duration::from_secs(30),
        "the disruption expired",
        || async {
            let b = pdbs.get("web").await.ok()?;
            let gone = b
                .status
                .as_ref()?
                .disrupted_pods
                .as_ref()
                .is_none_or(|d| d.is_empty());
            (gone && counts(&b) == Some((4, 3, 2, 1))).then_some(b)
        },
    )
    .await?;
    ensure!(
        b.status
            .unwrap()
            .disrupted_pods
            .unwrap_or_default()
            .is_empty(),
        "expired entries are dropped"
    );
    let statuses: Vec<_> = history
        .snapshot()
        .into_iter()
        .filter_map(|(_, b)| b.status)
        .collect();
    ensure!(
        statuses.iter().any(|s| s.current_healthy == 2
            && s.disrupted_pods
                .as_ref()
                .is_some_and(|d| d.contains_key("web-2"))),
        "the controller never discounted web-2 while it was recorded: {statuses:?}"
    );
    drop(history);

    // One disruption allowed: the first eviction succeeds and spends it, the
    // next one is refused at once.
    let s = pods.evict("web-0", &EvictParams::default()).await?;
    ensure!(s.is_success(), "{s:?}");
    let s = expect_status(
        pods.evict("web-1", &EvictParams::default()).await,
        429,
        "TooManyRequests",
    );
    assert_eq!(
        s.message,
        "Cannot evict pod as it would violate the pod's disruption budget."
    );
    // web-0 goes away: 2 healthy of 3 expected, nothing more allowed.
    wait_counts(&pdbs, (3, 2, 2, 0), "web-0 evicted").await?;
    expect_status(
        pods.evict("web-1", &EvictParams::default()).await,
        429,
        "TooManyRequests",
    );
    ensure!(pods.get_opt("web-1").await?.is_some_and(|p| is_ready(&p)));

    // A new pod becoming ready gives the budget room again.
    pods.create(&PostParams::default(), &web_pod("web-3", sleeper_spec())?)
        .await?;
    wait_counts(&pdbs, (4, 3, 2, 1), "web-3 ready").await?;
    let s = pods.evict("web-1", &EvictParams::default()).await?;
    ensure!(s.is_success(), "{s:?}");
    // The unready pod is not running: evicting it costs nothing.
    let s = pods.evict("web-broken", &EvictParams::default()).await?;
    ensure!(s.is_success(), "{s:?}");
    wait_counts(&pdbs, (2, 2, 2, 0), "two pods left").await?;
    Ok(())
}
