//! batch/v1 Jobs and CronJobs end to end: served as upstream serves them to
//! kubectl and kube-rs (discovery, defaults, the generated selector,
//! validation naming the field, immutability, kubectl's columns), and run
//! by the built-in job controller on a node whose pods are real WASI
//! programs (`hello` exits 0, `exitcode` exits with its argument).

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, PostParams};
use serde_json::{Value, json};
use wasmlet_e2e::workload_plane::{self, History, record, workload};
use wasmlet_e2e::{Plane, eventually, kubectl_bin};

/// `kubectl ARGS -f -` with `body` on stdin: (success, stdout + stderr).
fn kubectl_stdin(plane: &Plane, args: &[&str], body: &Value) -> Result<(bool, String)> {
    let mut child = Command::new(kubectl_bin())
        .arg("--kubeconfig")
        .arg(plane.kubeconfig())
        .args(args)
        .args(["-f", "-"])
        .env("HOME", plane.dir.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    child
        .stdin
        .take()
        .context("stdin")?
        .write_all(body.to_string().as_bytes())?;
    let out = child.wait_with_output()?;
    Ok((
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    ))
}

fn header(table: &str) -> Vec<String> {
    table
        .lines()
        .next()
        .unwrap_or("")
        .split("  ")
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

fn cronjob(name: &str, schedule: &str) -> Value {
    json!({"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": name},
        "spec": {"schedule": schedule, "jobTemplate": {"spec": {"template": {"spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "c", "image": "example.com/hello:1"}]}}}}}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_and_cronjobs_are_served_as_upstream_serves_them() -> Result<()> {
    let plane = Plane::start(&[]).await?;
    let client = plane.client().await?;
    let k = |args: &[&str]| plane.kubectl_ok(args);

    // Discovery: the short name, the `all` category, the status subresource.
    let resources = k(&["api-resources", "--api-group=batch", "-o", "wide"])?;
    ensure!(
        resources
            .lines()
            .any(|l| l.starts_with("cronjobs") && l.contains(" cj ") && l.contains("all")),
        "{resources}"
    );
    ensure!(
        resources
            .lines()
            .any(|l| l.starts_with("jobs") && l.contains("batch/v1") && l.contains("all")),
        "{resources}"
    );

    // kubectl's imperative create (protobuf): upstream's defaults and the
    // selector generated from the Job's uid.
    k(&["create", "job", "hello", "--image=example.com/hello:1"])?;
    let job: Value = serde_json::from_str(&k(&["get", "job", "hello", "-o", "json"])?)?;
    let uid = job["metadata"]["uid"].as_str().context("uid")?;
    let spec = &job["spec"];
    ensure!(
        spec["completions"] == 1
            && spec["parallelism"] == 1
            && spec["backoffLimit"] == 6
            && spec["completionMode"] == "NonIndexed"
            && spec["suspend"] == false
            && spec["manualSelector"] == false
            && spec["podReplacementPolicy"] == "TerminatingOrFailed",
        "{spec}"
    );
    ensure!(
        spec["selector"] == json!({"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}),
        "{spec}"
    );
    let labels = &spec["template"]["metadata"]["labels"];
    ensure!(
        labels["batch.kubernetes.io/job-name"] == "hello"
            && labels["job-name"] == "hello"
            && labels["batch.kubernetes.io/controller-uid"] == uid
            && labels["controller-uid"] == uid,
        "{labels}"
    );
    ensure!(job["metadata"]["labels"] == *labels, "{}", job["metadata"]);
    ensure!(job["metadata"]["generation"] == 1, "{}", job["metadata"]);

    // The template, selector and completions are the Job's for life.
    let out = plane.kubectl(&[
        "patch",
        "job",
        "hello",
        "--type=merge",
        "-p",
        r#"{"spec":{"completions":3}}"#,
    ])?;
    let err = String::from_utf8_lossy(&out.stderr);
    ensure!(
        !out.status.success() && err.contains("spec.completions") && err.contains("immutable"),
        "{err}"
    );
    let out = plane.kubectl(&["set", "image", "job/hello", "hello=example.com/hello:2"])?;
    let err = String::from_utf8_lossy(&out.stderr);
    ensure!(
        !out.status.success() && err.contains("spec.template") && err.contains("immutable"),
        "{err}"
    );

    // A template that restarts Always is refused, naming the field.
    let mut always = json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "always"},
        "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "x:1"}]}}}});
    let (ok, out) = kubectl_stdin(&plane, &["create"], &always)?;
    ensure!(
        !ok && out.contains("spec.template.spec.restartPolicy")
            && out.contains("Unsupported value: \"Always\""),
        "{out}"
    );
    always["spec"]["template"]["spec"]["restartPolicy"] = json!("OnFailure");
    let (ok, out) = kubectl_stdin(&plane, &["create"], &always)?;
    ensure!(ok, "{out}");

    // kube-rs' typed API.
    let jobs: Api<Job> = Api::namespaced(client.clone(), "default");
    let typed: Job = serde_json::from_value(json!({"metadata": {"name": "typed"},
        "spec": {"completions": 2, "parallelism": 2, "template": {"spec": {"restartPolicy": "Never",
            "containers": [{"name": "c", "image": "x:1"}]}}}}))?;
    let made = jobs.create(&PostParams::default(), &typed).await?;
    let got = jobs.get("typed").await?;
    let spec = got.spec.context("typed spec")?;
    ensure!(
        spec.completions == Some(2) && spec.backoff_limit == Some(6),
        "{spec:?}"
    );
    ensure!(got.metadata.uid == made.metadata.uid);

    // CronJobs: defaults, and a schedule or time zone refused by name.
    let (ok, out) = kubectl_stdin(&plane, &["create"], &cronjob("bad", "every minute"))?;
    ensure!(
        !ok && out.contains("spec.schedule") && out.contains("every minute"),
        "{out}"
    );
    let mut zoned = cronjob("zoned", "0 3 * * *");
    zoned["spec"]["timeZone"] = json!("Mars/Olympus_Mons");
    let (ok, out) = kubectl_stdin(&plane, &["create"], &zoned)?;
    ensure!(!ok && out.contains("spec.timeZone"), "{out}");
    zoned["spec"]["timeZone"] = json!("Europe/Paris");
    let (ok, out) = kubectl_stdin(&plane, &["create"], &zoned)?;
    ensure!(ok, "{out}");
    k(&[
        "create",
        "cronjob",
        "nightly",
        "--image=example.com/hello:1",
        "--schedule=@daily",
    ])?;
    let cjs: Api<CronJob> = Api::namespaced(client.clone(), "default");
    let cj = cjs.get("nightly").await?.spec.context("cronjob spec")?;
    ensure!(
        cj.concurrency_policy.as_deref() == Some("Allow")
            && cj.suspend == Some(false)
            && cj.successful_jobs_history_limit == Some(3)
            && cj.failed_jobs_history_limit == Some(1),
        "{cj:?}"
    );

    // kubectl's columns, wide ones included, and `get all`.
    let table = k(&["get", "jobs", "-o", "wide"])?;
    ensure!(
        header(&table)
            == [
                "NAME",
                "STATUS",
                "COMPLETIONS",
                "DURATION",
                "AGE",
                "CONTAINERS",
                "IMAGES",
                "SELECTOR"
            ],
        "{table}"
    );
    let hello = table
        .lines()
        .find(|l| l.starts_with("hello "))
        .context("hello row")?;
    ensure!(
        hello.contains("Running") && hello.contains("0/1") && hello.contains("example.com/hello:1"),
        "{hello}"
    );
    let table = k(&["get", "cj", "-o", "wide"])?;
    ensure!(
        header(&table)
            == [
                "NAME",
                "SCHEDULE",
                "TIMEZONE",
                "SUSPEND",
                "ACTIVE",
                "LAST SCHEDULE",
                "AGE",
                "CONTAINERS",
                "IMAGES",
                "SELECTOR"
            ],
        "{table}"
    );
    ensure!(
        table.lines().any(|l| l.starts_with("zoned ")
            && l.contains("0 3 * * *")
            && l.contains("Europe/Paris")),
        "{table}"
    );
    let all = k(&["get", "all", "-o", "name"])?;
    ensure!(
        all.contains("job.batch/hello") && all.contains("cronjob.batch/nightly"),
        "{all}"
    );
    Ok(())
}

/// The job controller's plane: scheduler, node agent, job controller.
async fn job_plane(extra: &[&str]) -> Result<(Plane, kube::Client)> {
    workload_plane::start_with("scheduler,wasi-runner,job-controller", extra).await
}

/// What `kubectl create job NAME --image=MODULE -- ARGS` sends, with the
/// wasm node's toleration and a short grace period added (a Job's template
/// cannot change once created), and `spec` merged in.
fn job_manifest(
    plane: &Plane,
    name: &str,
    module: &str,
    args: &[&str],
    spec: Value,
) -> Result<Value> {
    let image = format!("--image={}", workload(module));
    let mut cmd = vec![
        "create",
        "job",
        name,
        image.as_str(),
        "--dry-run=client",
        "-o",
        "json",
    ];
    if !args.is_empty() {
        cmd.push("--");
        cmd.extend_from_slice(args);
    }
    let mut job: Value = serde_json::from_str(&plane.kubectl_ok(&cmd)?)?;
    let pod = &mut job["spec"]["template"]["spec"];
    pod["tolerations"] = json!([{"key": "kubernetes.io/arch", "operator": "Exists"}]);
    pod["terminationGracePeriodSeconds"] = json!(1);
    // kubectl puts the args in `command`; a WASI module takes them as args.
    if let Some(c) = pod["containers"][0].as_object_mut()
        && let Some(cmd) = c.remove("command")
    {
        c.insert("args".into(), cmd);
    }
    for (k, v) in spec.as_object().into_iter().flatten() {
        job["spec"][k] = v.clone();
    }
    Ok(job)
}

fn create(plane: &Plane, obj: &Value) -> Result<()> {
    let (ok, out) = kubectl_stdin(plane, &["create"], obj)?;
    ensure!(ok, "kubectl create: {out}");
    Ok(())
}

fn owned_by(p: &Pod, uid: &str) -> bool {
    p.metadata
        .owner_references
        .iter()
        .flatten()
        .any(|r| r.controller == Some(true) && r.uid == uid)
}

/// Every pod of the Job the watch saw (by name), and the most that were
/// running or pending at once.
fn pods_seen(history: &History<Pod>, uid: &str) -> (BTreeSet<String>, usize) {
    let mut live: BTreeMap<String, bool> = BTreeMap::new();
    let mut most = 0;
    for (deleted, p) in history.snapshot() {
        if !owned_by(&p, uid) {
            continue;
        }
        let phase = p
            .status
            .as_ref()
            .and_then(|s| s.phase.clone())
            .unwrap_or_default();
        let running = !deleted
            && p.metadata.deletion_timestamp.is_none()
            && !matches!(phase.as_str(), "Succeeded" | "Failed");
        live.insert(p.metadata.name.clone().unwrap_or_default(), running);
        most = most.max(live.values().filter(|r| **r).count());
    }
    (live.keys().cloned().collect(), most)
}

fn condition<'a>(
    job: &'a Job,
    type_: &str,
) -> Option<&'a k8s_openapi::api::batch::v1::JobCondition> {
    job.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_ && c.status == "True")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wasi_job_runs_to_completion_and_takes_its_pods_when_deleted() -> Result<()> {
    let (plane, client) = job_plane(&[]).await?;
    let jobs: Api<Job> = Api::namespaced(client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    create(
        &plane,
        &job_manifest(&plane, "hello", "hello.wasm", &["batch"], json!({}))?,
    )?;
    plane.kubectl_ok(&[
        "wait",
        "--for=condition=complete",
        "job/hello",
        "--timeout=90s",
    ])?;
    let row = plane.kubectl_ok(&["get", "jobs", "hello", "--no-headers"])?;
    ensure!(row.contains("Complete") && row.contains("1/1"), "{row}");
    let logs = plane.kubectl_ok(&["logs", "job/hello"])?;
    ensure!(
        logs.contains("hello from") && logs.contains("args: batch"),
        "{logs}"
    );

    let job = jobs.get("hello").await?;
    let st = job.status.clone().context("status")?;
    ensure!(
        st.succeeded == Some(1) && st.failed.unwrap_or(0) == 0 && st.active.unwrap_or(0) == 0,
        "{st:?}"
    );
    ensure!(
        st.start_time.is_some() && st.completion_time.is_some(),
        "{st:?}"
    );
    ensure!(condition(&job, "SuccessCriteriaMet").is_some(), "{st:?}");
    ensure!(
        condition(&job, "Complete")
            .is_some_and(|c| c.reason.as_deref() == Some("CompletionsReached")),
        "{st:?}"
    );
    let uncounted = st.uncounted_terminated_pods.unwrap_or_default();
    ensure!(
        uncounted.succeeded.unwrap_or_default().is_empty()
            && uncounted.failed.unwrap_or_default().is_empty(),
        "counted, not left uncounted"
    );
    let uid = job.metadata.uid.clone().context("uid")?;
    let list = pods.list(&ListParams::default()).await?;
    let ours: Vec<&Pod> = list.items.iter().filter(|p| owned_by(p, &uid)).collect();
    ensure!(ours.len() == 1, "one pod: {}", ours.len());
    ensure!(
        ours[0]
            .metadata
            .finalizers
            .clone()
            .unwrap_or_default()
            .is_empty(),
        "the tracking finalizer is removed once counted: {:?}",
        ours[0].metadata.finalizers
    );
    ensure!(
        ours[0]
            .metadata
            .labels
            .as_ref()
            .is_some_and(|l| l["batch.kubernetes.io/job-name"] == "hello"),
        "{:?}",
        ours[0].metadata.labels
    );

    // kubectl's default (background) delete: the garbage collector takes the pods.
    plane.kubectl_ok(&["delete", "job", "hello"])?;
    eventually(
        Duration::from_secs(30),
        "the Job's pods deleted",
        || async {
            let list = pods.list(&ListParams::default()).await.ok()?;
            (!list.items.iter().any(|p| owned_by(p, &uid))).then_some(())
        },
    )
    .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_job_fails_after_backoff_limit_plus_one_pods() -> Result<()> {
    let (plane, client) = job_plane(&[]).await?;
    let jobs: Api<Job> = Api::namespaced(client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let history = record(pods.clone()).await?;
    // backoffLimit 1: two pods, the second after upstream's 10 s back-off.
    let job = job_manifest(
        &plane,
        "doomed",
        "exitcode.wasm",
        &["3"],
        json!({"backoffLimit": 1}),
    )?;
    create(&plane, &job)?;
    plane.kubectl_ok(&[
        "wait",
        "--for=condition=failed",
        "job/doomed",
        "--timeout=90s",
    ])?;
    let job = jobs.get("doomed").await?;
    let st = job.status.clone().context("status")?;
    ensure!(
        st.failed == Some(2) && st.succeeded.unwrap_or(0) == 0,
        "{st:?}"
    );
    ensure!(
        st.completion_time.is_none(),
        "a failed Job has no completionTime: {st:?}"
    );
    for t in ["FailureTarget", "Failed"] {
        let c = condition(&job, t).with_context(|| format!("{t}: {st:?}"))?;
        ensure!(c.reason.as_deref() == Some("BackoffLimitExceeded"), "{c:?}");
    }
    let uid = job.metadata.uid.clone().context("uid")?;
    let (seen, _) = pods_seen(&history, &uid);
    ensure!(seen.len() == 2, "backoffLimit + 1 pods, got {seen:?}");
    let row = plane.kubectl_ok(&["get", "job", "doomed", "--no-headers"])?;
    ensure!(row.contains("Failed") && row.contains("0/1"), "{row}");
    Ok(())
}

/// Parallelism 3 over 2 completions: two pods, never more, each counted
/// once, with the caches held back (`--debug-cache-delay-ms`) so that only
/// the host's expectations and the tracking finalizer keep the controller
/// from creating or counting twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parallelism_three_over_two_completions_makes_two_pods_counted_once() -> Result<()> {
    let (plane, client) = job_plane(&["--debug-cache-delay-ms", "300"]).await?;
    let jobs: Api<Job> = Api::namespaced(client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let history = record(pods.clone()).await?;
    let job = job_manifest(
        &plane,
        "pair",
        "hello.wasm",
        &[],
        json!({"completions": 2, "parallelism": 3}),
    )?;
    create(&plane, &job)?;
    plane.kubectl_ok(&[
        "wait",
        "--for=condition=complete",
        "job/pair",
        "--timeout=90s",
    ])?;
    let job = jobs.get("pair").await?;
    let st = job.status.clone().context("status")?;
    ensure!(
        st.succeeded == Some(2) && st.failed.unwrap_or(0) == 0,
        "{st:?}"
    );
    let uid = job.metadata.uid.clone().context("uid")?;
    let (seen, most) = pods_seen(&history, &uid);
    ensure!(
        seen.len() == 2 && most <= 2,
        "pods {seen:?}, at most {most} at once"
    );
    let row = plane.kubectl_ok(&["get", "jobs", "pair", "--no-headers"])?;
    ensure!(row.contains("2/2") && row.contains("Complete"), "{row}");
    Ok(())
}

/// A CronJob's template as `kubectl create cronjob` sends it, made to run
/// `hello` on the wasm node.
fn cronjob_manifest(name: &str, schedule: &str, policy: &str) -> Value {
    json!({"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": name},
        "spec": {"schedule": schedule, "concurrencyPolicy": policy,
            "jobTemplate": {"spec": {"template": {"spec": {
                "restartPolicy": "Never",
                "terminationGracePeriodSeconds": 1,
                "tolerations": [{"key": "kubernetes.io/arch", "operator": "Exists"}],
                "containers": [{"name": "hello", "image": workload("hello.wasm"), "args": ["cron"]}]}}}}}})
}

/// `kubectl create job --from=cronjob/NAME` runs the CronJob's template at
/// once (a schedule a year away makes nothing by itself).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_from_a_cronjob_runs_at_once() -> Result<()> {
    let (plane, client) = workload_plane::start_with(
        "scheduler,wasi-runner,job-controller,cronjob-controller",
        &[],
    )
    .await?;
    create(&plane, &cronjob_manifest("yearly", "0 0 1 1 *", "Forbid"))?;
    plane.kubectl_ok(&["create", "job", "now", "--from=cronjob/yearly"])?;
    plane.kubectl_ok(&[
        "wait",
        "--for=condition=complete",
        "job/now",
        "--timeout=90s",
    ])?;
    let jobs: Api<Job> = Api::namespaced(client.clone(), "default");
    let job = jobs.get("now").await?;
    let owner = job
        .metadata
        .owner_references
        .clone()
        .unwrap_or_default()
        .into_iter()
        .find(|r| r.kind == "CronJob")
        .context("owned by the CronJob")?;
    ensure!(owner.name == "yearly", "{owner:?}");
    let logs = plane.kubectl_ok(&["logs", "job/now"])?;
    ensure!(logs.contains("args: cron"), "{logs}");
    // The CronJob itself made no Job: its schedule is not due.
    let list = jobs.list(&ListParams::default()).await?;
    ensure!(
        list.items.len() == 1,
        "{:?}",
        list.items
            .iter()
            .map(|j| j.metadata.name.clone())
            .collect::<Vec<_>>()
    );
    Ok(())
}

/// A CronJob due every minute fires within a minute of its creation: the
/// wait is bounded at 90 s (60 s to the next minute, then the run).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cronjob_fires_on_its_schedule() -> Result<()> {
    let (plane, client) = workload_plane::start_with(
        "scheduler,wasi-runner,job-controller,cronjob-controller",
        &[],
    )
    .await?;
    create(&plane, &cronjob_manifest("minutely", "* * * * *", "Forbid"))?;
    let cronjobs: Api<CronJob> = Api::namespaced(client.clone(), "default");
    let jobs: Api<Job> = Api::namespaced(client.clone(), "default");
    // The Job named for the latest scheduled minute, complete, and the
    // CronJob's lastSuccessfulTime set.
    let job = eventually(
        Duration::from_secs(90),
        "a scheduled run that succeeded",
        || async {
            let st = cronjobs.get("minutely").await.ok()?.status?;
            st.last_successful_time.as_ref()?;
            let scheduled = st.last_schedule_time?.0;
            let name = format!("minutely-{}", scheduled.as_second() / 60);
            let job = jobs.get(&name).await.ok()?;
            condition(&job, "Complete")?;
            Some(job)
        },
    )
    .await?;
    ensure!(
        job.metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key("batch.kubernetes.io/cronjob-scheduled-timestamp")),
        "{:?}",
        job.metadata.annotations
    );
    let table = plane.kubectl_ok(&["get", "cj", "minutely"])?;
    let cols: Vec<&str> = table
        .lines()
        .nth(1)
        .unwrap_or("")
        .split("  ")
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect();
    ensure!(
        cols.len() == 7 && cols[1] == "* * * * *" && cols[5] != "<none>",
        "LAST SCHEDULE is set: {table}"
    );
    Ok(())
}

/// Deleting a Job whose pod still runs (kubectl's background delete): the
/// pod carries the job-tracking finalizer and its Job is gone, so the
/// garbage collector releases it and the pod goes, as upstream's job
/// controller releases orphans. Without that it stayed Terminating forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_running_job_deletes_its_pod() -> Result<()> {
    let (plane, client) = job_plane(&[]).await?;
    let jobs: Api<Job> = Api::namespaced(client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    create(
        &plane,
        &job_manifest(&plane, "forever", "sleeper.wasm", &[], json!({}))?,
    )?;
    let uid = jobs.get("forever").await?.metadata.uid.context("uid")?;
    eventually(Duration::from_secs(60), "the Job's pod running", || async {
        let list = pods.list(&ListParams::default()).await.ok()?;
        list.items
            .iter()
            .any(|p| {
                owned_by(p, &uid)
                    && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
            })
            .then_some(())
    })
    .await?;
    plane.kubectl_ok(&["delete", "job", "forever", "--wait=false"])?;
    let left = eventually(
        Duration::from_secs(30),
        "the running pod deleted",
        || async {
            let list = pods.list(&ListParams::default()).await.ok()?;
            (!list.items.iter().any(|p| owned_by(p, &uid))).then_some(())
        },
    )
    .await;
    if left.is_err() {
        let list = pods.list(&ListParams::default()).await?;
        let stuck: Vec<_> = list
            .items
            .iter()
            .map(|p| (p.metadata.name.clone(), p.metadata.finalizers.clone()))
            .collect();
        anyhow::bail!("pods left: {stuck:?}");
    }
    Ok(())
}

/// An Indexed Job (completions 3, parallelism 2) of `hello` printing its
/// `$(JOB_COMPLETION_INDEX)` argument: one pod per index, named, labelled,
/// annotated and host-named for it, never two running at once for one
/// index nor more than two in all, each pod's log showing its own index
/// (the env var the controller adds, resolved by the node agent from the
/// index annotation), and `completedIndexes` in upstream's interval form.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_indexed_job_runs_each_index_once_and_lists_them_completed() -> Result<()> {
    const KEY: &str = "batch.kubernetes.io/job-completion-index";
    let (plane, client) = job_plane(&[]).await?;
    let jobs: Api<Job> = Api::namespaced(client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let history = record(pods.clone()).await?;
    let job = job_manifest(
        &plane,
        "idx",
        "hello.wasm",
        &["index=$(JOB_COMPLETION_INDEX)"],
        json!({"completions": 3, "parallelism": 2, "completionMode": "Indexed"}),
    )?;
    create(&plane, &job)?;
    plane.kubectl_ok(&[
        "wait",
        "--for=condition=complete",
        "job/idx",
        "--timeout=90s",
    ])?;
    let job = jobs.get("idx").await?;
    let st = job.status.clone().context("status")?;
    ensure!(
        st.completed_indexes.as_deref() == Some("0-2")
            && st.succeeded == Some(3)
            && st.failed.unwrap_or(0) == 0,
        "{st:?}"
    );
    let uid = job.metadata.uid.clone().context("uid")?;
    let (seen, most) = pods_seen(&history, &uid);
    ensure!(
        seen.len() == 3 && most <= 2,
        "pods {seen:?}, at most {most} at once"
    );
    // Never two unfinished pods for one index, in any state the watch saw.
    let mut live: BTreeMap<String, String> = BTreeMap::new();
    for (deleted, p) in history.snapshot() {
        if !owned_by(&p, &uid) {
            continue;
        }
        let name = p.metadata.name.clone().unwrap_or_default();
        let phase = p.status.as_ref().and_then(|s| s.phase.clone());
        let index = p
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(KEY).cloned());
        if deleted || matches!(phase.as_deref(), Some("Succeeded" | "Failed")) {
            live.remove(&name);
        } else if let Some(i) = index {
            live.insert(name, i);
        }
        let indexes: BTreeSet<&String> = live.values().collect();
        ensure!(
            indexes.len() == live.len(),
            "two pods for one index: {live:?}"
        );
    }
    let list = pods.list(&ListParams::default()).await?;
    let mut indexes = BTreeSet::new();
    for p in list.items.iter().filter(|p| owned_by(p, &uid)) {
        let name = p.metadata.name.clone().unwrap_or_default();
        let i = p
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(KEY).cloned())
            .with_context(|| format!("{name}: no {KEY} annotation"))?;
        ensure!(
            p.metadata.labels.as_ref().and_then(|l| l.get(KEY)) == Some(&i),
            "{name}: label {:?}",
            p.metadata.labels
        );
        ensure!(
            name.starts_with(&format!("idx-{i}-")),
            "{name} for index {i}"
        );
        let spec = p.spec.as_ref().context("spec")?;
        ensure!(
            spec.hostname.as_deref() == Some(format!("idx-{i}").as_str())
                && spec.subdomain.is_none(),
            "{name}: hostname {:?}, subdomain {:?}",
            spec.hostname,
            spec.subdomain
        );
        let logs = plane.kubectl_ok(&["logs", &name])?;
        ensure!(
            logs.contains(&format!("args: index={i}\n")),
            "{name} (index {i}): {logs}"
        );
        indexes.insert(i);
    }
    ensure!(
        indexes == BTreeSet::from(["0".into(), "1".into(), "2".into()]),
        "{indexes:?}"
    );
    let row = plane.kubectl_ok(&["get", "jobs", "idx", "--no-headers"])?;
    ensure!(row.contains("3/3") && row.contains("Complete"), "{row}");
    Ok(())
}
