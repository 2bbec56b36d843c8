//! The controller engine's guarantees end to end (`wasmlet up`, real guests,
//! the kube client): finalizers, expectations (also under an artificially
//! delayed cache), back-off growth, and a storm of 409 Conflicts.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch,
    PatchParams, PostParams,
};
use kube::runtime::watcher;
use serde_json::{Value, json};
use wasmlet_e2e::summary::{create_configmap, create_summary, ready, status_keys, summaries};
use wasmlet_e2e::{Plane, built_plugins, eventually, install_plugin, install_plugin_with, metric};

const FINALIZER: &str = "examples.wasmlet.dev/cleanup";

fn configsets(client: &kube::Client) -> Api<DynamicObject> {
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("testing.wasmlet.dev", "v1", "ConfigSet"),
        "configsets",
    );
    Api::namespaced_with(client.clone(), "default", &ar)
}

async fn served(what: &str, api: &Api<DynamicObject>) -> anyhow::Result<()> {
    eventually(Duration::from_secs(30), what, || async {
        api.list(&Default::default()).await.ok()
    })
    .await?;
    Ok(())
}

/// Installs plugin `name` from the guest build with its manifest passed through
/// `edit` (CRDs first, then the manifest, the module last).
fn observed(o: &DynamicObject) -> Option<i64> {
    o.data
        .pointer("/status/observedGeneration")
        .and_then(Value::as_i64)
}

fn has_finalizer(o: &DynamicObject) -> bool {
    o.metadata
        .finalizers
        .iter()
        .flatten()
        .any(|f| f == FINALIZER)
}

/// Waits (bounded) for a watcher task to report `InitDone`: its initial list
/// is in, so every later change reaches it as an event.
async fn watching(ready: tokio::sync::oneshot::Receiver<()>) -> anyhow::Result<()> {
    tokio::time::timeout(Duration::from_secs(30), ready).await??;
    Ok(())
}

/// The back-off delays (in ms, in order) the host logged for failed
/// reconciles of `key` ("reconcile failed; retrying with back-off").
fn backoffs(log: &str, key: &str) -> Vec<f64> {
    let key = format!("key={key}");
    log.lines()
        .filter(|l| l.contains("retrying with back-off") && l.contains(&key))
        .filter_map(|l| {
            let d = l.split("retry_in=").nth(1)?.split_whitespace().next()?;
            let (n, scale) = [("ns", 1e-6), ("µs", 1e-3), ("ms", 1.0), ("s", 1e3)]
                .into_iter()
                .find_map(|(unit, scale)| Some((d.strip_suffix(unit)?, scale)))?;
            Some(n.parse::<f64>().ok()? * scale)
        })
        .collect()
}

#[tokio::test]
async fn finalizer_is_added_before_the_first_status_and_removed_after_finalize()
-> anyhow::Result<()> {
    let plane = Plane::start_up(&[]).await?;
    let client = plane.client().await?;
    install_plugin_with(&plane.plugin_dir(), "configmap-summary", |t| {
        format!("finalizer = \"{FINALIZER}\"\n{t}")
    })?;
    let api = summaries(&client);
    served("the ConfigSummary CRD", &api).await?;

    // Every state of f1 as a watcher sees it: (finalizer set, status written, deleting, deleted).
    type Row = (bool, bool, bool, bool);
    let seen: Arc<Mutex<Vec<Row>>> = Arc::default();
    let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
    let watch = {
        let (api, seen) = (api.clone(), seen.clone());
        let mut ready_tx = Some(ready_tx);
        tokio::spawn(async move {
            let mut s = watcher(api, watcher::Config::default().fields("metadata.name=f1")).boxed();
            while let Some(ev) = s.next().await {
                let row = match ev {
                    Ok(watcher::Event::InitDone) => {
                        if let Some(tx) = ready_tx.take() {
                            let _ = tx.send(());
                        }
                        continue;
                    }
                    Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) => (
                        has_finalizer(&o),
                        observed(&o).is_some(),
                        o.metadata.deletion_timestamp.is_some(),
                        false,
                    ),
                    Ok(watcher::Event::Delete(o)) => {
                        (has_finalizer(&o), observed(&o).is_some(), true, true)
                    }
                    _ => continue,
                };
                seen.lock().unwrap().push(row);
            }
        })
    };
    // f1 is created only once the watcher is up, so it sees every state.
    watching(ready_rx).await?;
    create_summary(&api, "f1", json!({})).await?;
    create_configmap(&client, "f1-cm", "f1", 2).await?;
    let o = eventually(Duration::from_secs(30), "f1 summarised", || async {
        let o = api.get("f1").await.ok()?;
        (status_keys(&o) == Some(2) && ready(&o).as_deref() == Some("True")).then_some(o)
    })
    .await?;
    assert!(
        has_finalizer(&o),
        "a reconciled object carries the plugin's finalizer: {:?}",
        o.metadata.finalizers
    );
    {
        // Our watcher may see the status a moment after the GET did.
        let rows = eventually(
            Duration::from_secs(30),
            "the watcher to see the status",
            || async {
                let rows = seen.lock().unwrap().clone();
                rows.iter().any(|r| r.1).then_some(rows)
            },
        )
        .await?;
        let first_status = rows.iter().position(|r| r.1).unwrap_or_default();
        assert!(
            rows[..first_status].iter().any(|r| r.0 && !r.1),
            "the finalizer must appear before the first status: {rows:?}"
        );
        assert!(
            rows[first_status..].iter().all(|r| r.0),
            "status without the finalizer: {rows:?}"
        );
    }

    let calls_before = metric(
        &plane.metrics().await?,
        "wasmlet_plugin_calls_total",
        "plugin=\"configmap-summary\"",
    );
    // The delete answers with the object still there, marked for deletion.
    let answer = api.delete("f1", &DeleteParams::default()).await?;
    let o = answer
        .left()
        .expect("f1 was deleted at once despite the finalizer");
    assert!(
        o.metadata.deletion_timestamp.is_some(),
        "the answer to the delete has a deletionTimestamp"
    );
    assert!(
        has_finalizer(&o),
        "and still our finalizer: {:?}",
        o.metadata.finalizers
    );
    eventually(Duration::from_secs(30), "f1 gone", || async {
        matches!(api.get_opt("f1").await, Ok(None)).then_some(())
    })
    .await?;
    let calls_after = metric(
        &plane.metrics().await?,
        "wasmlet_plugin_calls_total",
        "plugin=\"configmap-summary\"",
    );
    assert!(
        calls_after > calls_before,
        "finalize was called before the finalizer went ({calls_before} → {calls_after} calls)"
    );
    // The time those calls took is counted too (mean = seconds / calls).
    let seconds = metric(
        &plane.metrics().await?,
        "wasmlet_plugin_call_seconds_total",
        "plugin=\"configmap-summary\"",
    );
    assert!(
        seconds > 0.0 && seconds < calls_after * 1.0,
        "{seconds} s over {calls_after} calls"
    );
    let rows = eventually(
        Duration::from_secs(10),
        "the watcher saw the delete",
        || async {
            let rows = seen.lock().unwrap().clone();
            rows.last().is_some_and(|r| r.3).then_some(rows)
        },
    )
    .await?;
    let deleting = rows
        .iter()
        .position(|r| r.2)
        .expect("a state with a deletionTimestamp");
    assert!(
        rows[deleting].0,
        "while deleting, the finalizer holds the object: {rows:?}"
    );
    // As upstream, the DELETED event carries the object as last stored: the
    // update that removed the last finalizer is never stored, so the finalizer
    // is still listed (tests/watch_delete.rs checks this on its own).
    assert!(
        rows.last().expect("rows").0,
        "the DELETED event lost the finalizer it was last stored with: {rows:?}"
    );
    watch.abort();
    Ok(())
}

/// The label tying a ConfigMap to its ConfigSet (the guest's `SET_LABEL`).
const SET_LABEL: &str = "testing.wasmlet.dev/set";

/// Live ConfigMaps of one ConfigSet as a watcher sees them, and the fences
/// (see [`fence`]) it has seen.
#[derive(Default)]
struct Census {
    live: HashSet<String>,
    ever: HashSet<String>,
    max: usize,
    /// The lowest live count since the last `mark`.
    min_since_mark: usize,
    /// A (re)list in progress: what it brought so far. As kube-runtime's
    /// reflector, the live set is replaced when it completes (an object
    /// deleted while the watch was down gets no Delete event).
    relist: Option<HashSet<String>>,
    fences: HashSet<String>,
}

impl Census {
    fn mark(&mut self) {
        self.min_since_mark = self.live.len();
    }

    fn see(&mut self, ev: watcher::Event<ConfigMap>) {
        let name = |o: &ConfigMap| o.metadata.name.clone().unwrap_or_default();
        let fence = |o: &ConfigMap| {
            let labels = o.metadata.labels.as_ref();
            labels.and_then(|l| l.get(SET_LABEL)).map(String::as_str) == Some("fence")
        };
        match ev {
            watcher::Event::Init => self.relist = Some(HashSet::new()),
            watcher::Event::InitApply(o) | watcher::Event::Apply(o) if fence(&o) => {
                self.fences.insert(name(&o));
            }
            watcher::Event::InitApply(o) => {
                self.ever.insert(name(&o));
                self.relist.get_or_insert_default().insert(name(&o));
            }
            watcher::Event::InitDone => self.live = self.relist.take().unwrap_or_default(),
            watcher::Event::Apply(o) => {
                self.ever.insert(name(&o));
                self.live.insert(name(&o));
            }
            watcher::Event::Delete(o) => {
                self.live.remove(&name(&o));
            }
        }
        self.max = self.max.max(self.live.len());
        self.min_since_mark = self.min_since_mark.min(self.live.len());
    }
}

/// Waits until our watcher has seen every change to the set committed so
/// far: creates ConfigMap `name` labelled `set=fence` (the guest counts only
/// its own set, and nothing owns the fence, so no reconcile follows) and waits
/// for its event. A watch delivers events in resourceVersion order, so the
/// fence's comes after every earlier create and delete of the set.
async fn fence(cms: &Api<ConfigMap>, census: &Mutex<Census>, name: &str) -> anyhow::Result<()> {
    let cm: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {SET_LABEL: "fence"}},
    }))?;
    cms.create(&PostParams::default(), &cm).await?;
    eventually(
        Duration::from_secs(30),
        &format!("our watcher to see {name}"),
        || async { census.lock().unwrap().fences.contains(name).then_some(()) },
    )
    .await
}

/// Waits until the guest has reconciled `rs1` at `generation` on a cache
/// holding `replicas` ConfigMaps, then until our watcher has seen every change
/// made until then (a fence); checks that the watcher and the API server agree
/// on which ConfigMaps are live.
async fn settle(
    sets: &Api<DynamicObject>,
    cms: &Api<ConfigMap>,
    census: &Mutex<Census>,
    generation: i64,
    replicas: u64,
) -> anyhow::Result<()> {
    eventually(
        Duration::from_secs(60),
        &format!("{replicas} ConfigMaps seen by the guest at generation {generation}"),
        || async {
            let o = sets.get("rs1").await.ok()?;
            let seen = o.data.pointer("/status/seen").and_then(Value::as_u64);
            (observed(&o) == Some(generation) && seen == Some(replicas)).then_some(())
        },
    )
    .await?;
    fence(cms, census, &format!("fence-{generation}")).await?;
    let stored: HashSet<String> = cms
        .list(&ListParams::default().labels(&format!("{SET_LABEL}=rs1")))
        .await?
        .items
        .into_iter()
        .filter_map(|o| o.metadata.name)
        .collect();
    assert_eq!(
        census.lock().unwrap().live,
        stored,
        "our watcher and the API server disagree on the live ConfigMaps"
    );
    Ok(())
}

/// Seed 003: a ReplicaSet-like guest asked for 5 never creates more than 5,
/// and scaled 5 → 3 never deletes more than 2, however stale the cache is.
///
/// No quiet period: a guest acting on a stale cache does so in a reconcile
/// that ends before the one that writes `status.seen == replicas` (one worker
/// per key, and the cache only catches up). So once that status is written
/// every create and delete the guest will make has been made and answered
/// (the test guest's deadline, 60 s, is as long as this test waits), and a fence
/// created after it brings our watcher up to all of them.
///
/// The API server's request counters are no such record: a request its
/// client gave up on (a guest call past a 1 s deadline on a loaded machine)
/// can be committed and never counted, and a census compared with them never
/// matched ("timed out after 60s waiting for 3 ConfigMaps, seen by the guest
/// and by our watcher").
async fn replicaset_stays_exact(extra: &[&str]) -> anyhow::Result<()> {
    let plane = Plane::start_up(extra).await?;
    let client = plane.client().await?;
    install_plugin(&plane.plugin_dir(), "replicaset")?;
    let sets = configsets(&client);
    served("the ConfigSet CRD", &sets).await?;

    let census: Arc<Mutex<Census>> = Arc::default();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
    let watch = {
        let (census, cms) = (census.clone(), cms.clone());
        let mut ready_tx = Some(ready_tx);
        tokio::spawn(async move {
            let config = watcher::Config::default().labels(&format!("{SET_LABEL} in (rs1,fence)"));
            let mut s = watcher(cms, config).boxed();
            while let Some(ev) = s.next().await {
                let Ok(ev) = ev else { continue };
                let init_done = matches!(ev, watcher::Event::InitDone);
                census.lock().unwrap().see(ev);
                if init_done && let Some(tx) = ready_tx.take() {
                    let _ = tx.send(());
                }
            }
        })
    };
    watching(ready_rx).await?;

    let set: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "testing.wasmlet.dev/v1", "kind": "ConfigSet",
        "metadata": {"name": "rs1"}, "spec": {"replicas": 5}
    }))?;
    sets.create(&PostParams::default(), &set).await?;
    settle(&sets, &cms, &census, 1, 5).await?;
    {
        let c = census.lock().unwrap();
        assert_eq!(
            c.ever.len(),
            5,
            "exactly 5 ConfigMaps were ever created for replicas 5: {:?}",
            c.ever
        );
        assert_eq!(c.live.len(), 5, "and none deleted: {:?}", c.live);
        assert_eq!(
            c.max, 5,
            "at most 5 ConfigMaps may ever exist at once for replicas 5"
        );
    }

    census.lock().unwrap().mark();
    sets.patch(
        "rs1",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": 3}})),
    )
    .await?;
    settle(&sets, &cms, &census, 2, 3).await?;
    {
        let c = census.lock().unwrap();
        assert_eq!(c.min_since_mark, 3, "scaling 5 → 3 must never go below 3");
        assert_eq!(c.live.len(), 3, "scaling 5 → 3 deleted exactly 2");
        assert_eq!(
            c.ever.len(),
            5,
            "scaling down created nothing: {:?}",
            c.ever
        );
        assert_eq!(c.max, 5);
    }
    watch.abort();
    let m = plane.metrics().await?;
    assert_eq!(
        metric(
            &m,
            "controller_runtime_reconcile_errors_total",
            "controller=\"replicaset\""
        ),
        0.0,
        "{m}"
    );
    Ok(())
}

#[tokio::test]
async fn expectations_keep_a_replicaset_exact() -> anyhow::Result<()> {
    replicaset_stays_exact(&[]).await
}

#[tokio::test]
async fn expectations_keep_a_replicaset_exact_with_a_delayed_cache() -> anyhow::Result<()> {
    // Every watch event reaches the caches 300 ms late (and they queue up behind
    // each other): the guest's own creates and deletes show up one by one, seconds
    // after its reconcile returned.
    replicaset_stays_exact(&["--debug-cache-delay-ms", "300"]).await
}

#[tokio::test]
async fn failing_reconciles_back_off_exponentially() -> anyhow::Result<()> {
    let plane = Plane::start_up(&[]).await?;
    let client = plane.client().await?;
    // The CRD alone, not configmap-summary: two reconcilers of one object each
    // compute its `Ready` (True vs the trap's False) and rewrite each other's
    // status forever, which would requeue the trap on every write.
    let crd = built_plugins().join("configsummary.crd.yaml");
    plane.kubectl_ok(&["apply", "-f", &crd.display().to_string()])?;
    install_plugin(&plane.plugin_dir(), "trap")?;
    let api = summaries(&client);
    served("the ConfigSummary CRD", &api).await?;
    create_summary(&api, "t1", json!({"wasmlet.dev/test": "trap"})).await?;
    // The host logs the delay it schedules for each failed reconcile: the
    // growth is read off those lines in order, not off the wall clock. That
    // the queue holds a key for its delay is the workqueue's, tested on
    // paused time (`backoff_grows_exponentially_to_the_cap_and_forget_resets`).
    // The bound covers the plugin's compile in a debug host on a loaded
    // machine (beside a CPU hog, 30 s did not); the back-offs are 0.3 s.
    let delays = eventually(Duration::from_secs(120), "six trap back-offs", || async {
        let delays = backoffs(&plane.log(), "default/t1");
        (delays.len() >= 6).then_some(delays)
    })
    .await?;
    eprintln!("trap back-offs: {delays:?}");
    assert_eq!(delays[0], 5.0, "the first retry waits the 5 ms base");
    for w in delays[..6].windows(2) {
        assert!(
            (w[1] - 2.0 * w[0]).abs() < 0.01 * w[1],
            "each failure doubles the back-off: {delays:?} ms"
        );
    }
    // By counts: every trap reconcile ends as an `error` (the result requeued
    // with that per-key back-off, not the retry-soon `requeue` of a 409) and
    // each was requeued. A retry is counted inside the reconcile, its result
    // after it, so one retry may be ahead of the results.
    let m = plane.metrics().await?;
    let reconciles = metric(
        &m,
        "controller_runtime_reconcile_total",
        "controller=\"trap\"",
    );
    let errors = metric(
        &m,
        "controller_runtime_reconcile_total",
        "controller=\"trap\",result=\"error\"",
    );
    // A write the host makes around the first reconcile (the finalizer, the
    // first status) may meet a 409: that call ends as `requeue`, retried soon.
    let requeues = metric(
        &m,
        "controller_runtime_reconcile_total",
        "controller=\"trap\",result=\"requeue\"",
    );
    let retries = metric(&m, "workqueue_retries_total", "name=\"trap\"");
    eprintln!(
        "trap: {reconciles} reconciles, {errors} errors, {requeues} requeues, {retries} retries"
    );
    assert!(errors >= 6.0, "{m}");
    assert!(requeues <= 2.0, "{m}");
    assert_eq!(
        errors + requeues,
        reconciles,
        "no trap reconcile succeeds\n{m}"
    );
    let requeued = errors + requeues;
    assert!(
        retries == requeued || retries == requeued + 1.0,
        "every failure was requeued ({errors} errors, {requeues} requeues, {retries} retries)\n{m}"
    );
    let o = api.get("t1").await?;
    assert_eq!(ready(&o).as_deref(), Some("False"));
    Ok(())
}

#[tokio::test]
async fn conflict_storm_is_retried_not_counted_as_errors() -> anyhow::Result<()> {
    let plane = Plane::start_up(&[]).await?;
    let client = plane.client().await?;
    install_plugin(&plane.plugin_dir(), "configmap-summary")?;
    let api = summaries(&client);
    served("the ConfigSummary CRD", &api).await?;
    let n = 6;
    for i in 0..n {
        create_summary(&api, &format!("s{i}"), json!({})).await?;
    }
    // Four writers keep changing labels and annotations of the same objects:
    // every write bumps resourceVersion, so the host's status patches (which
    // carry the resourceVersion they were computed from) meet 409 Conflict.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writers: Vec<_> = (0..4)
        .map(|w| {
            let (api, stop) = (api.clone(), stop.clone());
            tokio::spawn(async move {
                let mut tick = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let name = format!("s{}", (tick as usize + w) % n);
                    let patch = json!({"metadata": {
                        "labels": {format!("storm-{w}"): tick.to_string()},
                        "annotations": {"storm/tick": format!("{w}-{tick}")},
                    }});
                    api.patch(&name, &PatchParams::default(), &Patch::Merge(patch))
                        .await?;
                    tick += 1;
                }
                anyhow::Ok(tick)
            })
        })
        .collect();
    // Every object summarises `rounds` rounds of ConfigMaps, and its status
    // is for its current generation.
    let summarised = |rounds: i64| {
        let api = api.clone();
        async move {
            let list = api.list(&Default::default()).await.ok()?;
            let done = list
                .items
                .iter()
                .filter(|o| {
                    let i: usize = o
                        .metadata
                        .name
                        .as_deref()
                        .and_then(|s| s[1..].parse().ok())
                        .unwrap_or(usize::MAX);
                    status_keys(o) == Some(rounds * (i as i64 + 1))
                        && ready(o).as_deref() == Some("True")
                        && observed(o) == o.metadata.generation
                })
                .count();
            (done == n).then_some(())
        }
    };
    // Meanwhile the summarised ConfigMaps change, so status has to be written:
    // each round is summarised while the storm still runs.
    for round in 0..4 {
        for i in 0..n {
            create_configmap(&client, &format!("s{i}-r{round}"), &format!("s{i}"), i + 1).await?;
        }
        eventually(
            Duration::from_secs(30),
            &format!("round {round} summarised during the storm"),
            || summarised(round + 1),
        )
        .await?;
    }
    assert!(
        writers.iter().all(|w| !w.is_finished()),
        "a storm writer stopped early"
    );
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut patches = 0;
    for w in writers {
        patches += w.await??;
    }
    eventually(Duration::from_secs(30), "every object summarised", || {
        summarised(4)
    })
    .await?;
    let m = plane.metrics().await?;
    let conflicts = metric(
        &m,
        "controller_runtime_reconcile_total",
        "controller=\"configmap-summary\",result=\"requeue\"",
    );
    eprintln!("{patches} storm patches; {conflicts} reconciles ended in a retry-soon requeue");
    assert!(
        conflicts >= 1.0,
        "the storm caused no 409 at all ({patches} patches): the test proved nothing\n{m}"
    );
    assert_eq!(
        metric(
            &m,
            "controller_runtime_reconcile_errors_total",
            "controller=\"configmap-summary\""
        ),
        0.0,
        "{m}"
    );
    assert_eq!(
        metric(
            &m,
            "controller_runtime_reconcile_total",
            "controller=\"configmap-summary\",result=\"error\""
        ),
        0.0,
        "409 is retry-soon, not an error\n{m}"
    );
    Ok(())
}

/// Issue 8 finding 3: whoever may label a watched ConfigMap names the key it
/// requeues, but a reconciler scoped by label selector must never act on an
/// object outside its scope: no status, no finalizer, no guest call.
#[tokio::test]
async fn watched_objects_cannot_aim_a_reconciler_outside_its_scope() -> anyhow::Result<()> {
    let plane = Plane::start_up(&[]).await?;
    let client = plane.client().await?;
    install_plugin_with(&plane.plugin_dir(), "configmap-summary", |t| {
        let t = t.replacen(
            "kind = \"ConfigSummary\"",
            "kind = \"ConfigSummary\"\nlabel-selector = \"team=a\"",
            1,
        );
        format!("finalizer = \"{FINALIZER}\"\n{t}")
    })?;
    let api = summaries(&client);
    served("the ConfigSummary CRD", &api).await?;
    create_summary(&api, "ours", json!({"team": "a"})).await?;
    create_summary(&api, "theirs", json!({"team": "b"})).await?;
    eventually(Duration::from_secs(30), "ours reconciled", || async {
        let o = api.get("ours").await.ok()?;
        (ready(&o).as_deref() == Some("True")).then_some(())
    })
    .await?;

    // The attack: a ConfigMap labelled to requeue the out-of-scope summary.
    create_configmap(&client, "aim", "theirs", 3).await?;
    let text = eventually(
        Duration::from_secs(30),
        "the out-of-scope key dropped",
        || async {
            let text = plane.metrics().await.ok()?;
            (metric(
                &text,
                "wasmlet_controller_out_of_scope_total",
                "controller=\"configmap-summary\"",
            ) >= 1.0)
                .then_some(text)
        },
    )
    .await?;
    let theirs = api.get("theirs").await?;
    assert!(
        theirs.data.get("status").is_none_or(Value::is_null),
        "an object outside the selector got a status: {:?}",
        theirs.data.get("status")
    );
    assert!(
        !has_finalizer(&theirs),
        "an object outside the selector got the plugin's finalizer"
    );
    assert!(
        text.contains("wasmlet_controller_out_of_scope_total"),
        "the drop is visible in the metrics"
    );

    // In scope, the same route still works.
    create_configmap(&client, "ours-cm", "ours", 2).await?;
    eventually(Duration::from_secs(30), "ours summarised", || async {
        let o = api.get("ours").await.ok()?;
        (status_keys(&o) == Some(2)).then_some(())
    })
    .await?;
    Ok(())
}

/// Issue 9: a CRD whose status schema has no `conditions` or
/// `observedGeneration` makes the API server prune what the host writes; an
/// unchanged object must still cost no status writes on every resync.
#[tokio::test]
async fn a_status_the_server_prunes_is_not_rewritten_on_every_reconcile() -> anyhow::Result<()> {
    let plane = Plane::start_up(&["--resync-seconds", "1"]).await?;
    let client = plane.client().await?;
    let src = built_plugins().join("configsummary.crd.yaml");
    let mut crd: serde_yaml::Value = serde_yaml::from_str(&std::fs::read_to_string(src)?)?;
    let status = &mut crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]
        ["properties"];
    let props = status.as_mapping_mut().expect("status properties");
    props.remove("conditions");
    props.remove("observedGeneration");
    std::fs::write(
        plane.plugin_dir().join("pruning.crd.yaml"),
        serde_yaml::to_string(&crd)?,
    )?;
    install_plugin_with(&plane.plugin_dir(), "configmap-summary", |t| {
        t.replace("configsummary.crd.yaml", "pruning.crd.yaml")
    })?;
    let check = std::process::Command::new(wasmlet_e2e::wasmlet_bin())
        .args(["plugin", "check"])
        .arg(plane.plugin_dir().join("configmap-summary.toml"))
        .output()?;
    let report = String::from_utf8_lossy(&check.stdout);
    assert!(
        report.contains("warning: CRD configsummaries.examples.wasmlet.dev (v1) has no status.conditions, status.observedGeneration"),
        "plugin check names the CRD and the fields it prunes: {report}"
    );
    let api = summaries(&client);
    served("the ConfigSummary CRD", &api).await?;
    create_summary(&api, "pruned", json!({})).await?;
    create_configmap(&client, "pruned-cm", "pruned", 2).await?;
    let o = eventually(Duration::from_secs(30), "pruned summarised", || async {
        let o = api.get("pruned").await.ok()?;
        (status_keys(&o) == Some(2)).then_some(o)
    })
    .await?;
    assert!(
        o.data.pointer("/status/conditions").is_none(),
        "the server kept conditions its schema does not declare: {:?}",
        o.data.get("status")
    );

    // Counted by the API server, as kube-apiserver's apiserver_request_total.
    let patches = || async {
        let req = http::Request::get("/metrics").body(Vec::new())?;
        let text = client.request_text(req).await?;
        anyhow::Ok(
            text.lines()
                .filter(|l| l.starts_with("apiserver_request_total{verb=\"PATCH\""))
                .filter(|l| l.contains("resource=\"configsummaries\",subresource=\"status\""))
                .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                .sum::<f64>(),
        )
    };
    let reconciles = |text: &str| {
        metric(
            text,
            "controller_runtime_reconcile_total",
            "controller=\"configmap-summary\"",
        )
    };
    let before = patches().await?;
    assert!(before >= 1.0, "the status was written at least once");
    let start = reconciles(&plane.metrics().await?);
    // Three more reconciles of the unchanged object (resync every second).
    eventually(Duration::from_secs(30), "three resyncs", || async {
        let text = plane.metrics().await.ok()?;
        (reconciles(&text) >= start + 3.0).then_some(())
    })
    .await?;
    assert_eq!(
        patches().await?,
        before,
        "status was written again for an unchanged object"
    );
    Ok(())
}

/// The fault plugin with a watch of ConfigMaps mapped `waiting`, and Fault
/// objects `(name, spec.fault)` created.
async fn waiting_faults(
    objects: &[(&str, &str)],
) -> anyhow::Result<(Plane, kube::Client, Api<DynamicObject>)> {
    let plane = Plane::start_up(&[]).await?;
    let client = plane.client().await?;
    install_plugin_with(&plane.plugin_dir(), "fault", |toml| {
        toml.replace(
            "[permissions]",
            "[[watches]]\napi-version = \"v1\"\nkind = \"ConfigMap\"\nmap = \"waiting\"\n\n[permissions]",
        )
    })?;
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("testing.wasmlet.dev", "v1", "Fault"),
        "faults",
    );
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &ar);
    served("the Fault CRD", &api).await?;
    for (name, fault) in objects {
        let o: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "testing.wasmlet.dev/v1", "kind": "Fault",
            "metadata": {"name": name},
            "spec": {"fault": fault, "value": "v0"},
        }))?;
        api.create(&PostParams::default(), &o).await?;
    }
    Ok((plane, client, api))
}

/// A watch mapped `waiting` calls at once the objects whose last reconcile
/// asked to be called later (here: never, by the clock), and only those.
#[tokio::test]
async fn a_waiting_watch_calls_the_objects_waiting_for_a_change() -> anyhow::Result<()> {
    let (plane, client, _) = waiting_faults(&[("waits", "requeue-max"), ("done", "none")]).await?;
    let count = |m: &str, result: &str| {
        metric(
            m,
            "controller_runtime_reconcile_total",
            &format!("controller=\"fault\",result=\"{result}\""),
        )
    };
    // Both reconciled once (their status written); then a quiet moment.
    let before = eventually(Duration::from_secs(30), "both reconciled", || async {
        let m = plane.metrics().await.ok()?;
        (count(&m, "requeue_after") >= 1.0 && count(&m, "success") >= 1.0).then_some(m)
    })
    .await?;

    create_configmap(&client, "poke", "nobody", 1).await?;
    let after = eventually(
        Duration::from_secs(30),
        "the waiting object called again",
        || async {
            let m = plane.metrics().await.ok()?;
            (count(&m, "requeue_after") > count(&before, "requeue_after")).then_some(m)
        },
    )
    .await?;
    assert_eq!(
        count(&after, "requeue_after"),
        count(&before, "requeue_after") + 1.0,
        "one call for the one waiting object"
    );
    assert_eq!(
        count(&after, "success"),
        count(&before, "success"),
        "the object that asked for nothing is not called"
    );
    Ok(())
}

/// A deleted object stops waiting for its requeue-after at once: the host
/// forgets every key's state when its object goes (it used to keep the key
/// `waiting` until a later `waiting` event reconciled the deleted object).
#[tokio::test]
async fn a_deleted_object_stops_waiting() -> anyhow::Result<()> {
    let (plane, _client, api) =
        waiting_faults(&[("first", "requeue-max"), ("second", "requeue-max")]).await?;
    let waiting = |m: &str| metric(m, "wasmlet_controller_waiting_keys", "controller=\"fault\"");
    eventually(Duration::from_secs(30), "both objects waiting", || async {
        (waiting(&plane.metrics().await.ok()?) == 2.0).then_some(())
    })
    .await?;
    api.delete("first", &Default::default()).await?;
    // Nothing else happens: no event of a watched kind, no clock (the
    // requeue-after is the longest a guest may ask for).
    eventually(
        Duration::from_secs(30),
        "the deleted object no longer waiting",
        || async { (waiting(&plane.metrics().await.ok()?) == 1.0).then_some(()) },
    )
    .await?;
    Ok(())
}

/// A finalize that fails says so where a user looks, as a failed reconcile
/// does: `Ready=False` with the guest's reason and a `finalize:` message, the
/// status and conditions the guest returned, a Warning Event (`kubectl
/// describe`), the status page's error list. Once finalize succeeds, the
/// object goes.
#[tokio::test]
async fn a_failing_finalize_is_reported_on_the_object_and_retried_until_it_succeeds()
-> anyhow::Result<()> {
    let plane = Plane::start_up(&[]).await?;
    let client = plane.client().await?;
    install_plugin_with(&plane.plugin_dir(), "fault", |t| {
        format!("finalizer = \"{FINALIZER}\"\n{t}")
    })?;
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("testing.wasmlet.dev", "v1", "Fault"),
        "faults",
    );
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &ar);
    served("the Fault CRD", &api).await?;
    let o: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "testing.wasmlet.dev/v1", "kind": "Fault",
        "metadata": {"name": "stuck"},
        "spec": {"fault": "none", "value": "v0", "finalize": "fail"},
    }))?;
    api.create(&PostParams::default(), &o).await?;
    eventually(Duration::from_secs(30), "stuck reconciled", || async {
        let o = api.get("stuck").await.ok()?;
        (has_finalizer(&o) && o.data.pointer("/status/echo") == Some(&json!("v0"))).then_some(())
    })
    .await?;

    api.delete("stuck", &DeleteParams::default()).await?;
    let condition = |o: &DynamicObject, t: &str| -> Option<Value> {
        o.data
            .pointer("/status/conditions")?
            .as_array()?
            .iter()
            .find(|c| c["type"] == t)
            .cloned()
    };
    let o = eventually(
        Duration::from_secs(30),
        "Ready=False from finalize",
        || async {
            let o = api.get("stuck").await.ok()?;
            let ready = condition(&o, "Ready")?;
            (ready["status"] == "False").then_some(o)
        },
    )
    .await?;
    let ready = condition(&o, "Ready").expect("Ready");
    assert_eq!(ready["reason"], "CleanupBlocked", "{ready}");
    let message = ready["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with("finalize: ") && message.contains("spec.finalize"),
        "{ready}"
    );
    assert_eq!(
        o.data.pointer("/status/cleanup"),
        Some(&json!("blocked")),
        "the status the failing finalize returned is written: {:?}",
        o.data.get("status")
    );
    let cleaned = condition(&o, "CleanedUp").expect("the guest's CleanedUp condition");
    assert_eq!(cleaned["status"], "False", "{cleaned}");
    assert!(has_finalizer(&o), "the finalizer holds the object");

    let described = eventually(
        Duration::from_secs(30),
        "a Warning Event in kubectl describe",
        || async {
            let out = plane.kubectl_ok(&["describe", "faults", "stuck"]).ok()?;
            out.lines()
                .any(|l| {
                    l.contains("Warning")
                        && l.contains("CleanupBlocked")
                        && l.contains("finalize: ")
                })
                .then_some(out)
        },
    )
    .await?;
    let url = plane.metrics_url().await?;
    let page_url = url.trim_end_matches("metrics");
    let page = eventually(Duration::from_secs(30), "the status page", || async {
        let out = std::process::Command::new("curl")
            .args(["-sf", page_url])
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    })
    .await?;
    let errors = page
        .split("Recent reconcile errors")
        .nth(1)
        .expect("the status page lists recent errors");
    assert!(
        errors.contains("default/stuck")
            && errors.contains("CleanupBlocked")
            && errors.contains("finalize: "),
        "the status page lists the failed finalize: {errors}"
    );

    // The cleanup unblocks: the next retry's finalize succeeds and the object goes.
    api.patch(
        "stuck",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"finalize": "ok"}})),
    )
    .await?;
    eventually(Duration::from_secs(60), "stuck gone", || async {
        matches!(api.get_opt("stuck").await, Ok(None)).then_some(())
    })
    .await
    .map_err(|e| anyhow::anyhow!("{e}; it was described as:\n{described}"))?;
    Ok(())
}
