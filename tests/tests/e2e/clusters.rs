//! Global reconcilers writing to named clusters (issue 14), end to end: a
//! private PostgreSQL server with table `projects`, two `wasmlet up` planes
//! standing in for regions `eu-west` and `us-east`, and a third `wasmlet up`
//! running the project-controller example with `--cluster eu-west=...
//! --cluster us-east=...`. The test plays each region's operator: it writes
//! the ProjectDeployments' status. Every wait is a bounded poll of the table
//! or a regional API, never a sleep standing in for a signal.

use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::core::ApiResource;
use serde_json::{Value, json};
use wasmlet_e2e::postgres::Postgres;
use wasmlet_e2e::summary::{create_configmap, create_summary, ready, summaries};
use wasmlet_e2e::{
    Plane, built_plugins, eventually, free_port, install_plugin, install_plugin_with, metric,
    wasmlet_bin,
};

const WAIT: Duration = Duration::from_secs(60);

fn deployments() -> ApiResource {
    ApiResource {
        group: "examples.wasmlet.dev".into(),
        version: "v1".into(),
        api_version: "examples.wasmlet.dev/v1".into(),
        kind: "ProjectDeployment".into(),
        plural: "projectdeployments".into(),
    }
}

/// A region: a bare `wasmlet up` plane (the host applies the example's CRD
/// there), and a client of its ProjectDeployments.
async fn region() -> Result<(Plane, Api<DynamicObject>)> {
    let plane = Plane::start_up(&["--no-node", "--no-builtins"]).await?;
    let api = Api::<DynamicObject>::all_with(plane.client().await?, &deployments());
    Ok((plane, api))
}

/// Waits until the region serves ProjectDeployments (its CRD applied).
async fn served(api: &Api<DynamicObject>, host: &Plane) -> Result<()> {
    eventually(WAIT, "the ProjectDeployment CRD served", || async {
        api.list(&Default::default()).await.ok().map(|_| ())
    })
    .await
    .with_context(|| format!("host log:\n{}", host.log()))
}

async fn insert(db: &tokio_postgres::Client, id: &str, spec: Value) -> Result<i64> {
    let row = db
        .query_one(
            "INSERT INTO projects (id, spec) VALUES ($1, $2) RETURNING revision",
            &[&id, &spec],
        )
        .await?;
    Ok(row.get(0))
}

async fn status(db: &tokio_postgres::Client, id: &str) -> Option<(i64, Value)> {
    let r = db
        .query_opt(
            "SELECT revision, status FROM projects WHERE id = $1",
            &[&id],
        )
        .await
        .ok()??;
    Some((r.get(0), r.get(1)))
}

fn condition<'a>(status: &'a Value, type_: &str) -> Option<&'a Value> {
    status["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
}

/// Waits for ProjectDeployment `name` in a region to satisfy `ok`; returns it.
async fn deployment(
    api: &Api<DynamicObject>,
    name: &str,
    ok: impl Fn(&Value) -> bool,
) -> Result<Value> {
    eventually(WAIT, &format!("ProjectDeployment {name}"), || async {
        let o = serde_json::to_value(api.get_opt(name).await.ok()??).ok()?;
        ok(&o).then_some(o)
    })
    .await
}

/// `wasmlet replay` of the record file `file` finds all its `n` calls the same.
fn replays_the_same(file: &std::path::Path, n: usize) -> Result<()> {
    let out = Command::new(wasmlet_bin())
        .arg("replay")
        .arg(file)
        .env("WASMLET_LOG", "warn")
        .output()?;
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success()
            && report.contains(&format!(
                "replayed {n} calls: {n} same, 0 different, 0 diverged"
            )),
        "{report}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

#[tokio::test]
async fn projects_land_in_their_regions_and_the_regional_status_comes_back() -> Result<()> {
    let pg = Postgres::start().await?;
    let init = Command::new(wasmlet_bin())
        .args([
            "datastore",
            "init",
            "--url",
            &pg.url(),
            "--table",
            "projects",
        ])
        .output()?;
    if !init.status.success() {
        bail!("datastore init: {}", String::from_utf8_lossy(&init.stderr));
    }
    let db = pg.client().await?;
    let ((eu_plane, eu), (us_plane, us)) = (region().await?, region().await?);
    let url = pg.url();
    let eu_flag = format!("eu-west={}", eu_plane.kubeconfig().display());
    let us_flag = format!("us-east={}", us_plane.kubeconfig().display());
    let host = Plane::start_up(&[
        "--no-node",
        "--no-builtins",
        "--datastore-url",
        &url,
        "--cluster",
        &eu_flag,
        "--cluster",
        &us_flag,
        "--record",
        "project-controller",
    ])
    .await?;
    install_plugin(&host.plugin_dir(), "project-controller")?;
    let started = std::time::Instant::now();
    // The plugin's `[clusters."*"] crds`: applied by the host to each region.
    served(&eu, &host).await?;
    served(&us, &host).await?;

    let r1 = insert(
        &db,
        "p1",
        json!({"region": "eu-west", "name": "Shop", "size": "small"}),
    )
    .await?;
    let r2 = insert(&db, "p2", json!({"region": "us-east", "size": "large"})).await?;
    let r3 = insert(&db, "p3", json!({"region": "ap-south", "size": "small"})).await?;

    // Each write lands in its project's region, and only there.
    let p1 = deployment(&eu, "p1", |_| true)
        .await
        .with_context(|| format!("host log:\n{}", host.log()))?;
    assert_eq!(p1["spec"]["replicas"], 1);
    assert_eq!(p1["spec"]["revision"], r1);
    assert_eq!(p1["spec"]["displayName"], "Shop");
    let p2 = deployment(&us, "p2", |_| true).await?;
    let first_writes = started.elapsed();
    assert_eq!(p2["spec"]["replicas"], 4);
    assert_eq!(p2["spec"]["revision"], r2);
    assert!(us.get_opt("p1").await?.is_none(), "p1 leaked into us-east");
    assert!(eu.get_opt("p2").await?.is_none(), "p2 leaked into eu-west");

    // A region the host was not given: a terminal error naming it, in the row.
    let (revision, s3) = eventually(WAIT, "p3's error in its row", || async {
        let (rev, s) = status(&db, "p3").await?;
        (s["lastReconciledRevision"] == json!(rev)).then_some((rev, s))
    })
    .await?;
    assert_eq!(revision, r3);
    let ready = condition(&s3, "Ready").context("p3 has a Ready condition")?;
    assert_eq!(ready["status"], "False", "{s3}");
    assert_eq!(ready["reason"], "RegionUnavailable", "{s3}");
    let message = ready["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("region \"ap-south\"")
            && message.contains("cluster \"ap-south\" is not configured on this host"),
        "{message}"
    );

    // Until the region reports, p1 is deployed but not running.
    let s1 = eventually(WAIT, "p1 reconciled", || async {
        let (rev, s) = status(&db, "p1").await?;
        (s["lastReconciledRevision"] == json!(rev)).then_some(s)
    })
    .await?;
    assert_eq!(s1["region"], "eu-west");
    assert_eq!(s1["deployment"]["phase"], "Pending");
    assert_eq!(condition(&s1, "Deployed").unwrap()["status"], "True");
    assert_eq!(condition(&s1, "Ready").unwrap()["status"], "False");

    // eu-west's operator reports p1 running: the row says so.
    let reported = std::time::Instant::now();
    eu.patch_status(
        "p1",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {
            "phase": "Running", "url": "https://p1.eu-west.example", "observedRevision": r1,
        }})),
    )
    .await?;
    // The host watches the regions' ProjectDeployments: the report reaches
    // the row well before the guest's own requeue (`POLL_PENDING`, 60 s)
    // would read it.
    let s1 = eventually(
        Duration::from_secs(30),
        "p1's regional status in its row",
        || async {
            let (_, s) = status(&db, "p1").await?;
            (condition(&s, "Ready")?["status"] == "True").then_some(s)
        },
    )
    .await
    .with_context(|| format!("host log:\n{}", host.log()))?;
    let status_back = reported.elapsed();
    assert_eq!(s1["deployment"]["url"], "https://p1.eu-west.example");
    assert_eq!(s1["deployment"]["observedRevision"], r1);

    // A spec change reaches the region as an update of the same object.
    let r2b: i64 = db
        .query_one(
            "UPDATE projects SET spec = '{\"region\": \"us-east\", \"size\": \"medium\"}' \
             WHERE id = 'p2' RETURNING revision",
            &[],
        )
        .await?
        .get(0);
    let p2b = deployment(&us, "p2", |o| o["spec"]["revision"] == json!(r2b)).await?;
    assert_eq!(p2b["spec"]["replicas"], 2);
    assert_eq!(p2b["metadata"]["uid"], p2["metadata"]["uid"]);

    // Moved to eu-west: it appears there and leaves us-east.
    db.execute(
        "UPDATE projects SET spec = '{\"region\": \"eu-west\", \"size\": \"medium\"}' WHERE id = 'p2'",
        &[],
    )
    .await?;
    deployment(&eu, "p2", |_| true).await?;
    eventually(WAIT, "p2 gone from us-east", || async {
        us.get_opt("p2").await.ok()?.is_none().then_some(())
    })
    .await?;
    println!(
        "first regional writes after {first_writes:?}; regional status in the row {status_back:?} after it was reported"
    );

    // Each region's requests are counted apart: the applies, and the watch.
    let metrics = host.metrics().await?;
    for region in ["eu-west", "us-east"] {
        let patches = metric(
            &metrics,
            "wasmlet_cluster_requests_total",
            &format!("cluster=\"{region}\",verb=\"patch\",code=\"200\""),
        );
        assert!(patches >= 1.0, "{region}: {patches} patches\n{metrics}");
        let watches = metric(
            &metrics,
            "wasmlet_cluster_requests_total",
            &format!("cluster=\"{region}\",verb=\"watch\",code=\"200\""),
        );
        assert!(watches >= 1.0, "{region}: {watches} watches\n{metrics}");
    }

    // Recorded with the cluster each call went to, and replayed the same
    // without any cluster (a snapshot beside the live file: later calls
    // cannot change it).
    let file = host.data_dir().join("records/project-controller.jsonl");
    let snapshot = host.data_dir().join("records/snapshot.jsonl");
    std::fs::copy(&file, &snapshot)?;
    let text = std::fs::read_to_string(&snapshot)?;
    let calls: Vec<Value> = text
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|c| c.get("call").is_some())
        .collect();
    let applied_in = |region: &str| {
        calls.iter().any(|c| {
            c["imports"].as_array().into_iter().flatten().any(|e| {
                e["op"] == "clusters.patch"
                    && e["args"]["cluster"] == region
                    && e["result"]["ok"].is_object()
            })
        })
    };
    assert!(applied_in("eu-west") && applied_in("us-east"), "{text}");
    replays_the_same(&snapshot, calls.len())?;

    // The project's finalizer is on its row, so deleting the row (a plain
    // DELETE) removes the ProjectDeployment from its region first, and then
    // the row. p3's region is not configured: nothing to clean up, it goes.
    let finalizers: Vec<String> = db
        .query_one("SELECT finalizers FROM projects WHERE id = 'p1'", &[])
        .await?
        .get(0);
    assert_eq!(finalizers, ["examples.wasmlet.dev/project-deployment"]);
    db.execute("DELETE FROM projects WHERE id IN ('p1', 'p3')", &[])
        .await?;
    for id in ["p1", "p3"] {
        eventually(WAIT, &format!("row {id} gone"), || async {
            let r = db
                .query_opt("SELECT 1 FROM projects WHERE id = $1", &[&id])
                .await
                .ok()?;
            r.is_none().then_some(())
        })
        .await
        .with_context(|| format!("host log:\n{}", host.log()))?;
    }
    // The row went only once the region had dropped the object.
    assert!(eu.get_opt("p1").await?.is_none(), "p1 left in eu-west");
    assert!(
        host.log()
            .contains("project p3: cannot clean up region \"ap-south\"")
    );
    // The other project is untouched.
    assert!(eu.get_opt("p2").await?.is_some(), "p2 gone from eu-west");
    assert!(status(&db, "p2").await.is_some());

    // The finalize calls were recorded too (the record writer is behind a
    // queue: waited for), and replay the same.
    let finalizes_in = |text: &str| {
        text.lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|c| c["call"] == "finalize")
            .count()
    };
    eventually(WAIT, "the finalize calls recorded", || async {
        let text = std::fs::read_to_string(&file).ok()?;
        (finalizes_in(&text) >= 2).then_some(())
    })
    .await?;
    let after = host.data_dir().join("records/after-deletes.jsonl");
    std::fs::copy(&file, &after)?;
    let text = std::fs::read_to_string(&after)?;
    let calls: Vec<Value> = text
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|c| c.get("call").is_some())
        .collect();
    replays_the_same(&after, calls.len())?;
    Ok(())
}

#[tokio::test]
async fn plugin_check_and_rbac_show_the_permissions_per_cluster() -> Result<()> {
    let out = Command::new(wasmlet_bin())
        .args(["plugin", "check"])
        .arg(built_plugins().join("project-controller.wasm"))
        .output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("# plugin project-controller: OK"), "{text}");
    assert!(
        text.contains("finalizer: examples.wasmlet.dev/project-deployment"),
        "{text}"
    );
    assert!(
        text.contains(
            "in any named cluster not listed here (--cluster): may call get,patch,delete on projectdeployments (examples.wasmlet.dev)"
        ),
        "{text}"
    );
    assert!(
        text.contains("in any named cluster not listed here (--cluster): applies CRD file ")
            && text.contains("projectdeployment.crd.yaml"),
        "{text}"
    );
    assert!(
        text.contains(
            "watches: examples.wasmlet.dev/v1 ProjectDeployment in every named cluster -> label:examples.wasmlet.dev/project"
        ),
        "{text}"
    );
    // The role to grant the host's identity in a region.
    let out = Command::new(wasmlet_bin())
        .args(["plugin", "rbac", "--cluster", "eu-west"])
        .arg(built_plugins().join("project-controller.wasm"))
        .output()?;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let docs: Vec<Value> = serde_yaml::Deserializer::from_slice(&out.stdout)
        .map(serde::Deserialize::deserialize)
        .collect::<Result<_, serde_yaml::Error>>()?;
    assert_eq!(docs[0]["kind"], "ClusterRole");
    // Its calls and the host's watch there; applying the CRD the plugin ships there.
    assert_eq!(
        docs[0]["rules"],
        json!([{
            "apiGroups": ["apiextensions.k8s.io"],
            "resources": ["customresourcedefinitions"],
            "verbs": ["create", "get", "patch"],
        }, {
            "apiGroups": ["examples.wasmlet.dev"],
            "resources": ["projectdeployments"],
            "verbs": ["delete", "get", "list", "patch", "watch"],
        }])
    );
    assert_eq!(docs[1]["kind"], "ClusterRoleBinding");
    Ok(())
}

/// A Kubernetes-sourced reconciler may watch a named cluster too: a ConfigMap
/// in region eu-west labelled for ConfigSummary `s1` reconciles `s1` (in the
/// host's own cluster), as one in the host's own cluster would.
#[tokio::test]
async fn a_kind_reconciler_is_called_for_changes_in_a_named_cluster() -> Result<()> {
    let eu = Plane::start_up(&["--no-node", "--no-builtins"]).await?;
    let flag = format!("eu-west={}", eu.kubeconfig().display());
    let host = Plane::start_up(&["--no-node", "--no-builtins", "--cluster", &flag]).await?;
    install_plugin_with(&host.plugin_dir(), "configmap-summary", |toml| {
        format!(
            "{toml}\n[[watches]]\ncluster = \"eu-west\"\napi-version = \"v1\"\nkind = \"ConfigMap\"\n\
             map = \"label:wasmlet.dev/summary\"\n\n[clusters.eu-west]\nrules = []\n"
        )
    })?;
    let client = host.client().await?;
    let api = summaries(&client);
    eventually(WAIT, "the ConfigSummary CRD served", || async {
        api.list(&Default::default()).await.ok().map(|_| ())
    })
    .await?;
    create_summary(&api, "s1", json!({})).await?;
    eventually(WAIT, "s1 reconciled", || async {
        ready(&api.get("s1").await.ok()?).map(|_| ())
    })
    .await
    .with_context(|| format!("host log:\n{}", host.log()))?;
    eventually(WAIT, "the watch in eu-west started", || async {
        host.log()
            .lines()
            .any(|l| l.contains("watching") && l.contains("eu-west") && l.contains("ConfigMap"))
            .then_some(())
    })
    .await
    .with_context(|| format!("host log:\n{}", host.log()))?;

    let reconciles = |m: &str| {
        metric(
            m,
            "controller_runtime_reconcile_total",
            "controller=\"configmap-summary\"",
        )
    };
    let before = reconciles(&host.metrics().await?);
    create_configmap(&eu.client().await?, "remote", "s1", 2).await?;
    eventually(WAIT, "s1 reconciled for eu-west's ConfigMap", || async {
        let m = host.metrics().await.ok()?;
        (reconciles(&m) > before).then_some(())
    })
    .await
    .with_context(|| format!("host log:\n{}", host.log()))?;
    Ok(())
}

/// `wasmlet apiserver` on a fixed port, standing in for a region that can go
/// down and come back at the same address; and a copy of its kubeconfig for
/// the host (the plane rewrites its own when it starts again).
async fn fixed_region(dir: &std::path::Path) -> Result<(Plane, std::path::PathBuf)> {
    let port = free_port().to_string();
    let plane = Plane::start(&["--port", &port]).await?;
    let kubeconfig = dir.join("eu-west.kubeconfig");
    std::fs::copy(plane.kubeconfig(), &kubeconfig)?;
    Ok((plane, kubeconfig))
}

/// The configmap-summary plugin, shipping its CRD to eu-west too.
fn install_shipping_to_eu_west(host: &Plane) -> Result<()> {
    install_plugin_with(&host.plugin_dir(), "configmap-summary", |toml| {
        format!("{toml}\n[clusters.eu-west]\nrules = []\ncrds = [\"configsummary.crd.yaml\"]\n")
    })
}

/// The host's `GET /status` entry for cluster `name`, once `pass` holds for it.
async fn cluster_status(
    host: &Plane,
    name: &str,
    what: &str,
    pass: impl Fn(&Value) -> bool,
) -> Result<Value> {
    eventually(WAIT, what, || async {
        let (code, body) = host.http_get("/status").await.ok()?;
        let v: Value = serde_json::from_str(&body).ok()?;
        let c = v["clusters"][name].clone();
        (code == 200 && pass(&c)).then_some(c)
    })
    .await
    .with_context(|| format!("host log:\n{}", host.log()))
}

/// Until eu-west serves ConfigSummaries.
async fn summaries_served(region: &Plane, host: &Plane) -> Result<()> {
    let api = summaries(&region.client().await?);
    eventually(WAIT, "the ConfigSummary CRD served in eu-west", || async {
        api.list(&Default::default()).await.ok().map(|_| ())
    })
    .await
    .with_context(|| format!("host log:\n{}", host.log()))
}

/// Issue 45: a region that is down when the plugin loads gets the plugin's
/// CRDs once it comes up, without a reload; until then the host reports it
/// unreachable (since when, and why) in `GET /status`.
#[tokio::test]
async fn a_region_down_when_the_plugin_loads_gets_its_crds_once_it_is_up() -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let (mut eu, kubeconfig) = fixed_region(tmp.path()).await?;
    eu.kill9();
    let flag = format!("eu-west={}", kubeconfig.display());
    let host = Plane::start_up(&["--no-node", "--no-builtins", "--cluster", &flag]).await?;
    install_shipping_to_eu_west(&host)?;
    // The plugin loads (its kind served in the host's own cluster) while
    // eu-west is down.
    let own = summaries(&host.client().await?);
    eventually(WAIT, "the ConfigSummary CRD served by the host", || async {
        own.list(&Default::default()).await.ok().map(|_| ())
    })
    .await?;
    let down = cluster_status(&host, "eu-west", "eu-west reported unreachable", |c| {
        c["connected"] == false && c["unreachableSince"].is_string()
    })
    .await?;
    assert!(down["lastError"].is_string(), "{down}");

    eu.spawn().await?;
    summaries_served(&eu, &host).await?;
    let up = cluster_status(&host, "eu-west", "eu-west reported connected", |c| {
        c["connected"] == true && c["crdsPresent"] == 1
    })
    .await?;
    assert_eq!(up["crdsWanted"], 1, "{up}");
    assert!(up.get("unreachableSince").is_none(), "{up}");
    let url = host.metrics_url().await?;
    let addr = url
        .trim_start_matches("http://")
        .trim_end_matches("/metrics");
    let out = Command::new(wasmlet_bin())
        .args(["status", "--host", addr])
        .output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("cluster eu-west: connected, CRDs 1/1"),
        "{text}"
    );
    Ok(())
}

/// Issue 45: a region rebuilt with an empty store (same address and
/// credentials, every object gone) gets the plugin's CRDs back without a
/// reload, and the host counts the re-apply.
#[tokio::test]
async fn a_rebuilt_region_gets_its_crds_back() -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let (mut eu, kubeconfig) = fixed_region(tmp.path()).await?;
    let flag = format!("eu-west={}", kubeconfig.display());
    let host = Plane::start_up(&["--no-node", "--no-builtins", "--cluster", &flag]).await?;
    install_shipping_to_eu_west(&host)?;
    summaries_served(&eu, &host).await?;

    eu.kill9();
    for f in std::fs::read_dir(eu.data_dir())? {
        let path = f?.path();
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        if name.starts_with("state.db") {
            std::fs::remove_file(&path)?;
        }
    }
    eu.spawn().await?;
    summaries_served(&eu, &host).await?;
    let c = cluster_status(&host, "eu-west", "the re-apply counted", |c| {
        c["crdsReapplied"].as_u64() >= Some(1) && c["crdsPresent"] == 1
    })
    .await?;
    assert_eq!(c["connected"], true, "{c}");
    Ok(())
}

/// Issue 45: named clusters from `--clusters-dir`, changed while the host
/// runs. A region whose kubeconfig file appears is used without a restart
/// (the plugin's CRDs applied there, a project's deployment lands there);
/// once its file is gone, calls there fail as for a region never given, and
/// the host no longer reports it.
#[tokio::test]
async fn a_region_added_at_run_time_is_used_and_one_removed_is_not() -> Result<()> {
    let pg = Postgres::start().await?;
    let init = Command::new(wasmlet_bin())
        .args([
            "datastore",
            "init",
            "--url",
            &pg.url(),
            "--table",
            "projects",
        ])
        .output()?;
    if !init.status.success() {
        bail!("datastore init: {}", String::from_utf8_lossy(&init.stderr));
    }
    let db = pg.client().await?;
    let (eu_plane, eu) = region().await?;
    let dir = tempfile::tempdir()?;
    let clusters = dir.path().display().to_string();
    let url = pg.url();
    let host = Plane::start_up(&[
        "--no-node",
        "--no-builtins",
        "--datastore-url",
        &url,
        "--clusters-dir",
        &clusters,
    ])
    .await?;
    install_plugin(&host.plugin_dir(), "project-controller")?;

    // Added: the file appears, the region gets the CRD and the project.
    std::fs::copy(eu_plane.kubeconfig(), dir.path().join("eu-west"))?;
    served(&eu, &host).await?;
    let r1 = insert(&db, "p1", json!({"region": "eu-west", "size": "small"})).await?;
    let p1 = deployment(&eu, "p1", |_| true)
        .await
        .with_context(|| format!("host log:\n{}", host.log()))?;
    assert_eq!(p1["spec"]["revision"], r1);
    cluster_status(&host, "eu-west", "eu-west reported connected", |c| {
        c["connected"] == true
    })
    .await?;

    // Removed: the file goes; a new project there is the terminal error of
    // a region the host was not given, and nothing lands in eu-west.
    std::fs::remove_file(dir.path().join("eu-west"))?;
    eventually(WAIT, "eu-west no longer reported", || async {
        let (_, body) = host.http_get("/status").await.ok()?;
        let v: Value = serde_json::from_str(&body).ok()?;
        v["clusters"].get("eu-west").is_none().then_some(())
    })
    .await
    .with_context(|| format!("host log:\n{}", host.log()))?;
    insert(&db, "p2", json!({"region": "eu-west", "size": "small"})).await?;
    let s2 = eventually(WAIT, "p2's error in its row", || async {
        let (rev, s) = status(&db, "p2").await?;
        (s["lastReconciledRevision"] == json!(rev)).then_some(s)
    })
    .await
    .with_context(|| format!("host log:\n{}", host.log()))?;
    let ready = condition(&s2, "Ready").context("p2 has a Ready condition")?;
    assert_eq!(ready["reason"], "RegionUnavailable", "{s2}");
    assert!(
        ready["message"]
            .as_str()
            .unwrap_or_default()
            .contains("cluster \"eu-west\" is not configured on this host"),
        "{s2}"
    );
    assert!(
        eu.get_opt("p2").await?.is_none(),
        "p2 landed in a removed region"
    );
    Ok(())
}

/// Issue 45: the cache of a kind a plugin may read in a named cluster starts
/// when the plugin loads, not on its first read there: this plugin never
/// reads eu-west, yet the host lists and watches eu-west's ConfigMaps once
/// it has loaded (its request counters show the watch; `GET /status` counts
/// the informer).
#[tokio::test]
async fn a_named_clusters_informer_starts_with_the_plugin_that_may_read_it() -> Result<()> {
    let eu = Plane::start(&[]).await?;
    let flag = format!("eu-west={}", eu.kubeconfig().display());
    let host = Plane::start_up(&["--no-node", "--no-builtins", "--cluster", &flag]).await?;
    let watches = |m: &str| {
        metric(
            m,
            "wasmlet_cluster_requests_total",
            "cluster=\"eu-west\",verb=\"watch\"",
        )
    };
    assert_eq!(
        watches(&host.metrics().await?),
        0.0,
        "a watch before any plugin"
    );
    install_plugin_with(&host.plugin_dir(), "configmap-summary", |toml| {
        format!(
            "{toml}\n[clusters.eu-west]\nrules = [{{ api-groups = [\"\"], resources = [\"configmaps\"], verbs = [\"get\", \"list\"] }}]\n"
        )
    })?;
    eventually(WAIT, "eu-west's ConfigMaps watched", || async {
        (watches(&host.metrics().await.ok()?) > 0.0).then_some(())
    })
    .await
    .with_context(|| format!("host log:\n{}", host.log()))?;
    cluster_status(&host, "eu-west", "the informer counted", |c| {
        c["informers"] == 1
    })
    .await?;
    Ok(())
}
