//! Issue 49 point 2: the batch controllers' cost does not follow a number
//! a user typed. Each attack runs on a plane inside [`Limits::ATTACK`]
//! while another namespace's small Job has to complete.
//!
//! | attack (before) | here |
//! |---|---|
//! | a Job with `parallelism: 1000000`: out of memory at 28,010 pods, then on every pass | [`a_job_of_a_million_parallelism_is_made_in_bounded_batches`] |
//! | a ReplicaSet with `replicas: 1000000` | [`a_replicaset_of_a_million_replicas_is_made_in_bounded_batches`] |
//! | an Indexed Job with `completions: 1000000000` | [`an_indexed_job_of_a_billion_completions_runs_its_lowest_indexes`] |
//! | a `* * * * *` CronJob whose Jobs never end: one more a minute, silently | [`a_cronjob_piling_up_jobs_is_warned_of_and_held_to_its_quota`] |

use std::time::{Duration, Instant};

use anyhow::{Result, ensure};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, ListParams};
use serde_json::{Value, json};
use wasmlet_e2e::workload_plane::{self, workload};
use wasmlet_e2e::{Limits, Plane, create_json, eventually};

/// The job and cronjob controllers' plane, with a node for the small Job.
async fn plane() -> Result<(Plane, kube::Client)> {
    workload_plane::start_limited_with(
        "scheduler,wasi-runner,job-controller,cronjob-controller",
        &[],
        Limits::ATTACK,
    )
    .await
}

async fn namespace(client: &kube::Client, name: &str) -> Result<()> {
    let nss: Api<Namespace> = Api::all(client.clone());
    create_json(&nss, json!({"metadata": {"name": name}})).await?;
    Ok(())
}

/// How many pods `ns` holds, without listing them all.
async fn pods_in(client: &kube::Client, ns: &str) -> Result<u64> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let page = pods.list_metadata(&ListParams::default().limit(1)).await?;
    let rest = page.metadata.remaining_item_count.unwrap_or(0);
    Ok(page.items.len() as u64 + u64::try_from(rest).unwrap_or(0))
}

/// A Job whose pods no node takes (they stay Pending and keep counting),
/// with `spec` merged in.
fn pending_job(name: &str, spec: Value) -> Value {
    let mut job = json!({"metadata": {"name": name}, "spec": {
        "template": {"spec": {"restartPolicy": "Never", "nodeSelector": {"nowhere": "true"},
            "containers": [{"name": "main", "image": "busybox"}]}}}});
    for (k, v) in spec.as_object().into_iter().flatten() {
        job["spec"][k] = v.clone();
    }
    job
}

/// Creates the other tenant's Job in `ns`: one `hello` pod on the wasm node.
async fn small_job(client: &kube::Client, ns: &str) -> Result<Api<Job>> {
    let jobs: Api<Job> = Api::namespaced(client.clone(), ns);
    create_json(
        &jobs,
        json!({"metadata": {"name": "small"}, "spec": {"template": {"spec": {
            "restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
            "tolerations": [{"key": "kubernetes.io/arch", "operator": "Exists"}],
            "containers": [{"name": "hello", "image": workload("hello.wasm"), "args": ["small"]}]}}}}),
    )
    .await?;
    Ok(jobs)
}

/// The small Job reaches `what` (its status shows it) within 120 s.
async fn small_job_shows(
    jobs: &Api<Job>,
    what: &str,
    ok: impl Fn(&k8s_openapi::api::batch::v1::JobStatus) -> bool,
) -> Result<Duration> {
    let start = Instant::now();
    eventually(
        Duration::from_secs(120),
        &format!("the other namespace's small Job {what}"),
        || async {
            let st = jobs.get("small").await.ok()?.status?;
            ok(&st).then_some(())
        },
    )
    .await?;
    Ok(start.elapsed())
}

/// The small Job created and run to Complete; returns how long it took.
async fn small_job_completes(client: &kube::Client, ns: &str) -> Result<Duration> {
    let jobs = small_job(client, ns).await?;
    small_job_shows(&jobs, "Complete", |st| {
        st.conditions
            .iter()
            .flatten()
            .any(|c| c.type_ == "Complete" && c.status == "True")
    })
    .await
}

/// A controller's counters: (calls, traps, out of memory).
async fn counters(plane: &Plane, plugin: &str) -> Result<(f64, f64, f64)> {
    let c = |n: &'static str| plane.plugin_counter(n, plugin);
    Ok((
        c("calls").await?,
        c("traps").await?,
        c("out_of_memory").await?,
    ))
}

async fn job_controller(plane: &Plane) -> Result<(f64, f64, f64)> {
    counters(plane, "job-controller").await
}

/// Waits until `ns` holds at least `n` pods (within `secs`), printing the
/// count, `plugin`'s counters and the plane's RSS each 10 s; fails at once
/// when `plugin` trapped or ran out of memory.
async fn flood_reaches(
    plane: &mut Plane,
    client: &kube::Client,
    (plugin, ns): (&str, &str),
    n: u64,
    secs: u64,
) -> Result<()> {
    let start = Instant::now();
    loop {
        let have = pods_in(client, ns).await?;
        let (calls, traps, oom) = counters(plane, plugin).await?;
        let rss = plane.proc_status_mib("VmRSS:")?;
        println!(
            "{ns} {:>4} s: {have} pods; {plugin} calls {calls}, traps {traps}, out of memory {oom}; plane RSS {rss} MiB",
            start.elapsed().as_secs()
        );
        ensure!(
            traps == 0.0 && oom == 0.0,
            "{plugin} trapped {traps} times, ran out of memory {oom} times, at {have} pods"
        );
        if have >= n {
            return Ok(());
        }
        ensure!(
            start.elapsed() < Duration::from_secs(secs),
            "{ns} holds {have} pods after {secs} s, not {n}"
        );
        tokio::time::sleep(Duration::from_secs(10)).await;
    }
}

/// `parallelism: 1000000`: the job controller kept every pod decoded and
/// ran out of its 128 MiB at 28,010 pods (80 s in), then on every pass.
/// Now it keeps each pod cut to what it reads, makes at most 500 pods a
/// call (1, 2, 4, ... as upstream), and passes 35,000 pods without a trap
/// while another namespace's Job gets its pod. The store itself is bounded
/// by a ResourceQuota, as upstream (`quota::a_job_flood_is_held_...`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_of_a_million_parallelism_is_made_in_bounded_batches() -> Result<()> {
    let (mut plane, client) = plane().await?;
    namespace(&client, "flood").await?;
    let jobs: Api<Job> = Api::namespaced(client.clone(), "flood");
    create_json(
        &jobs,
        pending_job(
            "flood",
            json!({"parallelism": 1_000_000, "completions": 1_000_000}),
        ),
    )
    .await?;
    flood_reaches(&mut plane, &client, ("job-controller", "flood"), 5_000, 240).await?;
    // The job controller serves the other namespace meanwhile: its Job's
    // pod is made and counted. (Scheduling it waits behind the flood's
    // Pending pods in the scheduler's queue: issue 49's fairness point.)
    let small = small_job(&client, "default").await?;
    let took = small_job_shows(&small, "active", |st| {
        st.active.unwrap_or(0) + st.succeeded.unwrap_or(0) >= 1
    })
    .await?;
    println!("the other namespace's Job had its pod in {took:?}");
    flood_reaches(
        &mut plane,
        &client,
        ("job-controller", "flood"),
        35_000,
        600,
    )
    .await?;
    let (calls, _, _) = job_controller(&plane).await?;
    let n = pods_in(&client, "flood").await?;
    ensure!(
        n as f64 <= 500.0 * calls,
        "{n} pods in {calls} calls: more than 500 a call"
    );
    let peak = plane.proc_status_mib("VmHWM:")?;
    println!("{n} pods in {calls} job-controller calls; plane peak RSS {peak} MiB");
    Ok(())
}

/// `completions: 1000000000` in Indexed mode, three at a time, each pod
/// running `hello` to success: the indexes are taken lowest first, one pod
/// each, the done ones kept as one run (`completedIndexes: "0-N"`), and
/// the controller's work follows the pods and the runs, never the billion
/// indexes, while another namespace's Job completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_indexed_job_of_a_billion_completions_runs_its_lowest_indexes() -> Result<()> {
    const KEY: &str = "batch.kubernetes.io/job-completion-index";
    let (plane, client) = plane().await?;
    namespace(&client, "indexed").await?;
    let jobs: Api<Job> = Api::namespaced(client.clone(), "indexed");
    create_json(
        &jobs,
        json!({"metadata": {"name": "billion"}, "spec": {"completionMode": "Indexed",
            "completions": 1_000_000_000, "parallelism": 3,
            "template": {"spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
                "tolerations": [{"key": "kubernetes.io/arch", "operator": "Exists"}],
                "containers": [{"name": "hello", "image": workload("hello.wasm"),
                    "args": ["$(JOB_COMPLETION_INDEX)"]}]}}}}),
    )
    .await?;
    let small = small_job_completes(&client, "default").await?;
    println!("the other namespace's Job completed in {small:?}");
    let (done, succeeded) = eventually(
        Duration::from_secs(240),
        "indexes 0-5 or more completed",
        || async {
            let st = jobs.get("billion").await.ok()?.status?;
            let done = st.completed_indexes?;
            let last: i64 = done.strip_prefix("0-")?.parse().ok()?;
            (last >= 5).then_some((done, st.succeeded.unwrap_or(0)))
        },
    )
    .await?;
    // One run; succeeded counts its indexes once their pods are released
    // (upstream writes completedIndexes first, with uncountedTerminatedPods).
    let last: i32 = done.trim_start_matches("0-").parse()?;
    ensure!(
        (1..=last + 1).contains(&succeeded),
        "{done}: succeeded {succeeded}"
    );
    let pods: Api<Pod> = Api::namespaced(client.clone(), "indexed");
    let list = pods.list(&ListParams::default()).await?;
    let mut running = std::collections::BTreeMap::<String, usize>::new();
    for p in &list.items {
        let index = p
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(KEY))
            .cloned()
            .unwrap_or_default();
        let phase = p
            .status
            .as_ref()
            .and_then(|s| s.phase.clone())
            .unwrap_or_default();
        if p.metadata.deletion_timestamp.is_none()
            && !matches!(phase.as_str(), "Succeeded" | "Failed")
        {
            *running.entry(index).or_default() += 1;
        }
    }
    ensure!(
        running.values().sum::<usize>() <= 3 && running.values().all(|n| *n == 1),
        "pods running by index: {running:?}"
    );
    let (calls, traps, oom) = job_controller(&plane).await?;
    ensure!(
        traps == 0.0 && oom == 0.0,
        "traps {traps}, out of memory {oom}"
    );
    println!("completedIndexes {done}, succeeded {succeeded}, running {running:?}, {calls} calls");
    Ok(())
}

/// `replicas: 1000000` on a ReplicaSet: the same flood through the
/// ReplicaSet controller, which kept every pod whole and ran out of its
/// 128 MiB at 16,446 pods. Its pods are now kept cut as the job
/// controller's, 500 a call, and it passes 25,000; it still copies its own
/// pods on each pass and runs out near 31,000 (a quota is the bound there).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replicaset_of_a_million_replicas_is_made_in_bounded_batches() -> Result<()> {
    let (mut plane, client) = workload_plane::start_limited_with(
        "scheduler,wasi-runner,replicaset-controller",
        &[],
        Limits::ATTACK,
    )
    .await?;
    namespace(&client, "flood").await?;
    let sets: Api<k8s_openapi::api::apps::v1::ReplicaSet> =
        Api::namespaced(client.clone(), "flood");
    create_json(
        &sets,
        json!({"metadata": {"name": "flood"}, "spec": {"replicas": 1_000_000,
            "selector": {"matchLabels": {"app": "flood"}},
            "template": {"metadata": {"labels": {"app": "flood"}}, "spec": {
                "nodeSelector": {"nowhere": "true"},
                "containers": [{"name": "main", "image": "busybox"}]}}}}),
    )
    .await?;
    let target = ("replicaset-controller", "flood");
    flood_reaches(&mut plane, &client, target, 25_000, 600).await?;
    let (calls, _, _) = counters(&plane, "replicaset-controller").await?;
    let n = pods_in(&client, "flood").await?;
    ensure!(
        n as f64 <= 500.0 * calls,
        "{n} pods in {calls} calls: more than 500 a call"
    );
    let peak = plane.proc_status_mib("VmHWM:")?;
    println!("{n} pods in {calls} replicaset-controller calls; plane peak RSS {peak} MiB");
    Ok(())
}

/// A `* * * * *` CronJob allowing overlap, whose Jobs never end (here
/// suspended), in `ns`, with `owned` such Jobs already its own (as if it
/// had run that many minutes).
async fn piling_cronjob(client: &kube::Client, ns: &str, owned: usize) -> Result<()> {
    let cronjobs: Api<k8s_openapi::api::batch::v1::CronJob> = Api::namespaced(client.clone(), ns);
    let template = json!({"suspend": true, "template": {"spec": {"restartPolicy": "Never",
        "containers": [{"name": "main", "image": "busybox"}]}}});
    let cj = create_json(
        &cronjobs,
        json!({"metadata": {"name": "every-minute"}, "spec": {"schedule": "* * * * *",
            "concurrencyPolicy": "Allow", "jobTemplate": {"spec": template}}}),
    )
    .await?;
    let jobs: Api<Job> = Api::namespaced(client.clone(), ns);
    for i in 0..owned {
        let mut job = json!({"metadata": {"name": format!("earlier-{i}"),
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "CronJob",
                "name": "every-minute", "uid": cj.metadata.uid, "controller": true}]},
            "spec": template});
        job["spec"]["template"]["metadata"] = json!({});
        create_json(&jobs, job).await?;
    }
    Ok(())
}

/// The note of the first event of `reason` in `ns`, within 150 s (the next
/// minute, then the controller's pass).
async fn event_note(client: &kube::Client, ns: &str, reason: &str) -> Result<String> {
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(client.clone(), ns);
    eventually(
        Duration::from_secs(150),
        &format!("a {reason} event in {ns}"),
        || async {
            events
                .list(&ListParams::default())
                .await
                .ok()?
                .items
                .into_iter()
                .find(|e| e.reason.as_deref() == Some(reason))
                .map(|e| {
                    format!(
                        "{}: {}",
                        e.type_.unwrap_or_default(),
                        e.message.unwrap_or_default()
                    )
                })
        },
    )
    .await
}

/// Jobs that never end under a `* * * * *` CronJob with
/// `concurrencyPolicy: Allow` used to pile up one a minute without a word.
/// Now a new one beside five active ones comes with a `TooManyActiveJobs`
/// Warning (upstream has no such event) and `status.active` lists them;
/// with a ResourceQuota on `count/jobs.batch` the create is refused and
/// the CronJob's `FailedCreate` Warning names the quota.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cronjob_piling_up_jobs_is_warned_of_and_held_to_its_quota() -> Result<()> {
    let (plane, client) = plane().await?;
    namespace(&client, "pile").await?;
    namespace(&client, "capped").await?;
    let quotas: Api<k8s_openapi::api::core::v1::ResourceQuota> =
        Api::namespaced(client.clone(), "capped");
    create_json(
        &quotas,
        json!({"metadata": {"name": "jobs"}, "spec": {"hard": {"count/jobs.batch": "1"}}}),
    )
    .await?;
    eventually(Duration::from_secs(30), "the quota's used", || async {
        let q = quotas.get("jobs").await.ok()?;
        q.status?
            .used?
            .contains_key("count/jobs.batch")
            .then_some(())
    })
    .await?;
    piling_cronjob(&client, "pile", 5).await?;
    piling_cronjob(&client, "capped", 1).await?;

    let note = event_note(&client, "pile", "TooManyActiveJobs").await?;
    ensure!(
        note.starts_with("Warning: 5 Jobs of this CronJob are still active"),
        "{note}"
    );
    let cronjobs: Api<k8s_openapi::api::batch::v1::CronJob> =
        Api::namespaced(client.clone(), "pile");
    let active = eventually(Duration::from_secs(30), "status.active of 6", || async {
        let st = cronjobs.get("every-minute").await.ok()?.status?;
        let n = st.active?.len();
        (n >= 6).then_some(n)
    })
    .await?;
    let described = plane.kubectl_ok(&["describe", "cronjob", "every-minute", "-n", "pile"])?;
    ensure!(described.contains("TooManyActiveJobs"), "{described}");

    let note = event_note(&client, "capped", "FailedCreate").await?;
    ensure!(
        note.starts_with("Warning:")
            && note.contains("exceeded quota: jobs, requested: count/jobs.batch=1, used: count/jobs.batch=1, limited: count/jobs.batch=1"),
        "{note}"
    );
    let jobs: Api<Job> = Api::namespaced(client.clone(), "capped");
    let n = jobs.list(&ListParams::default()).await?.items.len();
    ensure!(n == 1, "{n} Jobs under a quota of 1");
    println!("pile: {active} active Jobs listed, warned; capped: {n} Job, {note}");
    Ok(())
}
