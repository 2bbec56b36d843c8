//! batch/v1 Jobs and CronJobs end to end: served as upstream serves them to
//! kubectl and kube-rs (discovery, defaults, the generated selector,
//! validation naming the field, immutability, kubectl's columns).

use std::io::Write;
use std::process::{Command, Stdio};

use anyhow::{Context, Result, ensure};
use k8s_openapi::api::batch::v1::{CronJob, Job};
use kube::api::{Api, PostParams};
use serde_json::{Value, json};
use wasmlet_e2e::{Plane, kubectl_bin};

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
