//! ResourceQuota and LimitRange (issue 49 item 1): an administrator caps a
//! namespace with the YAML any cluster takes, creates past the cap are
//! refused with upstream's 403, `status.used` stays exact under racing
//! creates, deletes and pods that end, and LimitRange defaults and bounds
//! apply to new pods. Through the real kubectl and the kube client; all of
//! it holds on kube-apiserver too (the tests wait for the quota controller
//! to have measured a quota before relying on it, as upstream requires).

use std::time::Duration;

use futures::future::join_all;
use k8s_openapi::api::core::v1::{Namespace, Pod, ResourceQuota};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use wasmlet_e2e::*;

const WAIT: Duration = Duration::from_secs(60);

/// Writes `yaml` into the plane's directory and runs `kubectl VERB -f` on it.
fn kubectl_file(
    plane: &Plane,
    verb: &str,
    file: &str,
    yaml: &str,
) -> anyhow::Result<std::process::Output> {
    let path = plane.data_dir().join(file);
    std::fs::write(&path, yaml)?;
    plane.kubectl(&[verb, "-f", path.to_str().unwrap()])
}

async fn namespace(client: &kube::Client, name: &str) -> anyhow::Result<()> {
    let nss: Api<Namespace> = Api::all(client.clone());
    create_json(&nss, json!({"metadata": {"name": name}})).await?;
    Ok(())
}

/// Waits until the quota's `status.used[resource]` reads `want`.
async fn used_is(
    quotas: &Api<ResourceQuota>,
    name: &str,
    resource: &str,
    want: &str,
) -> anyhow::Result<()> {
    eventually(WAIT, &format!("{name} used {resource}={want}"), || async {
        let q = quotas.get(name).await.ok()?;
        let used = q.status?.used?;
        (used.get(resource)?.0 == want).then_some(())
    })
    .await
}

fn pod_json(name: &str, resources: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {"containers": [{"name": "main", "image": "busybox", "resources": resources}]}})
}

#[tokio::test]
async fn kubectl_sees_a_quota_refuse_creates_past_it_and_count_true_usage() -> anyhow::Result<()> {
    let plane = Plane::start(&[]).await?;
    let client = plane.client().await?;
    namespace(&client, "team").await?;
    let out = kubectl_file(
        &plane,
        "create",
        "quota.yaml",
        "apiVersion: v1\nkind: ResourceQuota\nmetadata:\n  name: q\n  namespace: team\n\
         spec:\n  hard:\n    pods: \"2\"\n    count/jobs.batch: \"1\"\n",
    )?;
    assert!(out.status.success(), "{out:?}");
    let quotas: Api<ResourceQuota> = Api::namespaced(client.clone(), "team");
    used_is(&quotas, "q", "pods", "0").await?;

    let pods: Api<Pod> = Api::namespaced(client.clone(), "team");
    for name in ["p1", "p2"] {
        pods.create(&PostParams::default(), &pod(name)).await?;
    }
    let out = kubectl_file(
        &plane,
        "create",
        "p3.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p3\n  namespace: team\n\
         spec:\n  containers:\n  - name: main\n    image: busybox\n",
    )?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains(
            "Error from server (Forbidden): error when creating \"",
        ) && stderr.contains(
            "pods \"p3\" is forbidden: exceeded quota: q, requested: pods=1, used: pods=2, limited: pods=2"
        ),
        "{stderr}"
    );

    // Any kind by count/<resource>.<group>: one Job, not two.
    let job = |name: &str| {
        format!(
            "apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: {name}\n  namespace: team\n\
             spec:\n  suspend: true\n  template:\n    spec:\n      restartPolicy: Never\n\
             \x20     containers:\n      - name: main\n        image: busybox\n"
        )
    };
    assert!(
        kubectl_file(&plane, "create", "j1.yaml", &job("j1"))?
            .status
            .success()
    );
    let out = kubectl_file(&plane, "create", "j2.yaml", &job("j2"))?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("jobs.batch \"j2\" is forbidden: exceeded quota: q, requested: count/jobs.batch=1, used: count/jobs.batch=1, limited: count/jobs.batch=1"),
        "{stderr}"
    );

    // `kubectl get quota` and `describe` show used against hard.
    let get = plane.kubectl_ok(&["get", "quota", "-n", "team"])?;
    assert!(get.contains("count/jobs.batch: 1/1, pods: 2/2"), "{get}");
    let describe = plane.kubectl_ok(&["describe", "quota", "q", "-n", "team"])?;
    let row = |r: &str| {
        describe
            .lines()
            .find(|l| l.split_whitespace().next() == Some(r))
            .map(|l| l.split_whitespace().collect::<Vec<_>>())
    };
    assert_eq!(row("pods"), Some(vec!["pods", "2", "2"]), "{describe}");

    // A pod that ends gives its slot back; a deleted one too.
    let done = json!({"status": {"phase": "Succeeded"}});
    pods.patch_status("p1", &PatchParams::default(), &Patch::Merge(&done))
        .await?;
    used_is(&quotas, "q", "pods", "1").await?;
    pods.delete("p2", &DeleteParams::default().grace_period(0))
        .await?;
    used_is(&quotas, "q", "pods", "0").await?;
    for name in ["p4", "p5"] {
        pods.create(&PostParams::default(), &pod(name)).await?;
    }
    used_is(&quotas, "q", "pods", "2").await?;
    Ok(())
}

/// Creates `n` pods at once; answers how many were created, after checking
/// that every refusal is the quota's.
async fn race(pods: &Api<Pod>, prefix: &str, n: usize) -> usize {
    let results = join_all((0..n).map(|i| {
        let pods = pods.clone();
        async move {
            pods.create(&PostParams::default(), &pod(&format!("{prefix}-{i}")))
                .await
        }
    }))
    .await;
    let mut created = 0;
    for r in results {
        match r {
            Ok(_) => created += 1,
            Err(kube::Error::Api(s)) => {
                assert_eq!(s.code, 403, "{s:?}");
                assert!(s.message.contains("exceeded quota: pods"), "{s:?}");
            }
            Err(e) => panic!("unexpected error: {e}"),
        }
    }
    created
}

#[tokio::test]
async fn racing_creates_never_pass_the_quota_and_used_stays_exact() -> anyhow::Result<()> {
    let plane = Plane::start(&[]).await?;
    let client = plane.client().await?;
    namespace(&client, "race").await?;
    let quotas: Api<ResourceQuota> = Api::namespaced(client.clone(), "race");
    create_json(
        &quotas,
        json!({"metadata": {"name": "pods"}, "spec": {"hard": {"pods": "10"}}}),
    )
    .await?;
    used_is(&quotas, "pods", "pods", "0").await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "race");

    assert_eq!(race(&pods, "a", 40).await, 10);
    used_is(&quotas, "pods", "pods", "10").await?;
    assert_eq!(pods.list(&Default::default()).await?.items.len(), 10);

    for i in 0..3 {
        let name = pods.list(&Default::default()).await?.items[i]
            .metadata
            .name
            .clone()
            .unwrap();
        pods.delete(&name, &DeleteParams::default().grace_period(0))
            .await?;
    }
    used_is(&quotas, "pods", "pods", "7").await?;
    assert_eq!(race(&pods, "b", 40).await, 3);
    used_is(&quotas, "pods", "pods", "10").await?;
    assert_eq!(pods.list(&Default::default()).await?.items.len(), 10);
    Ok(())
}

#[tokio::test]
async fn limitrange_defaults_pods_and_bounds_them_and_meets_a_compute_quota() -> anyhow::Result<()>
{
    let plane = Plane::start(&[]).await?;
    let client = plane.client().await?;
    namespace(&client, "lr").await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "lr");
    let quotas: Api<ResourceQuota> = Api::namespaced(client.clone(), "lr");
    create_json(
        &quotas,
        json!({"metadata": {"name": "mem"},
            "spec": {"hard": {"limits.memory": "1Gi", "requests.memory": "1Gi"}}}),
    )
    .await?;
    used_is(&quotas, "mem", "limits.memory", "0").await?;

    // Without a LimitRange, a quota on memory needs every container to say.
    let s = expect_status(
        create_json(&pods, pod_json("bare", json!({}))).await,
        403,
        "Forbidden",
    );
    assert_eq!(
        s.message,
        "pods \"bare\" is forbidden: failed quota: mem: must specify limits.memory for: main; requests.memory for: main"
    );

    let out = kubectl_file(
        &plane,
        "apply",
        "limits.yaml",
        "apiVersion: v1\nkind: LimitRange\nmetadata:\n  name: limits\n  namespace: lr\n\
         spec:\n  limits:\n  - type: Container\n    max:\n      memory: 512Mi\n\
         \x20   default:\n      memory: 256Mi\n",
    )?;
    assert!(out.status.success(), "{out:?}");
    let get = plane.kubectl_ok(&["get", "limits", "-n", "lr"])?;
    assert!(get.contains("limits"), "{get}");
    // Defaulted as upstream: defaultRequest from default.
    let lr = plane.kubectl_ok(&["get", "limitrange", "limits", "-n", "lr", "-o", "json"])?;
    let lr: Value = serde_json::from_str(&lr)?;
    assert_eq!(
        lr["spec"]["limits"][0]["defaultRequest"],
        json!({"memory": "256Mi"})
    );

    // A pod without resources gets the defaults, and is charged them.
    let out = kubectl_file(
        &plane,
        "create",
        "bare.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: bare\n  namespace: lr\n\
         spec:\n  containers:\n  - name: main\n    image: busybox\n",
    )?;
    assert!(out.status.success(), "{out:?}");
    let yaml = plane.kubectl_ok(&["get", "pod", "bare", "-n", "lr", "-o", "json"])?;
    let got: Value = serde_json::from_str(&yaml)?;
    assert_eq!(
        got["spec"]["containers"][0]["resources"],
        json!({"limits": {"memory": "256Mi"}, "requests": {"memory": "256Mi"}})
    );
    assert_eq!(
        got["metadata"]["annotations"]["kubernetes.io/limit-ranger"],
        "LimitRanger plugin set: memory request for container main; memory limit for container main"
    );
    assert_eq!(got["status"]["qosClass"], "Burstable");
    used_is(&quotas, "mem", "limits.memory", "256Mi").await?;

    // Past the LimitRange's max: upstream's message.
    let s = expect_status(
        create_json(&pods, pod_json("big", json!({"limits": {"memory": "1Gi"}}))).await,
        403,
        "Forbidden",
    );
    assert_eq!(
        s.message,
        "pods \"big\" is forbidden: maximum memory usage per Container is 512Mi, but limit is 1Gi."
    );

    // Past the quota's memory: 256Mi used, 3 × 256Mi fit, a fifth does not.
    for i in 0..3 {
        create_json(&pods, pod_json(&format!("m{i}"), json!({}))).await?;
    }
    let s = expect_status(
        create_json(&pods, pod_json("m3", json!({}))).await,
        403,
        "Forbidden",
    );
    assert_eq!(
        s.message,
        "pods \"m3\" is forbidden: exceeded quota: mem, requested: limits.memory=256Mi,requests.memory=256Mi, used: limits.memory=1Gi,requests.memory=1Gi, limited: limits.memory=1Gi,requests.memory=1Gi"
    );
    Ok(())
}

#[tokio::test]
async fn a_scoped_quota_counts_only_the_pods_in_its_scope() -> anyhow::Result<()> {
    let plane = Plane::start(&[]).await?;
    let client = plane.client().await?;
    namespace(&client, "scoped").await?;
    let quotas: Api<ResourceQuota> = Api::namespaced(client.clone(), "scoped");
    create_json(
        &quotas,
        json!({"metadata": {"name": "best-effort"},
            "spec": {"hard": {"pods": "1"}, "scopes": ["BestEffort"]}}),
    )
    .await?;
    used_is(&quotas, "best-effort", "pods", "0").await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "scoped");
    create_json(&pods, pod_json("be1", json!({}))).await?;
    let s = expect_status(
        create_json(&pods, pod_json("be2", json!({}))).await,
        403,
        "Forbidden",
    );
    assert!(
        s.message.contains(
            "exceeded quota: best-effort, requested: pods=1, used: pods=1, limited: pods=1"
        ),
        "{s:?}"
    );
    // A pod with requests is not BestEffort: outside the quota's scope.
    let sized = json!({"requests": {"cpu": "100m"}});
    create_json(&pods, pod_json("sized", sized)).await?;
    used_is(&quotas, "best-effort", "pods", "1").await?;
    // An unknown scope is refused as upstream's validation refuses it.
    let s = expect_status(
        create_json(
            &quotas,
            json!({"metadata": {"name": "bad"}, "spec": {"hard": {"pods": "1"}, "scopes": ["Sometimes"]}}),
        )
        .await,
        422,
        "Invalid",
    );
    assert!(
        s.message.contains("spec.scopes: Invalid value:")
            && s.message.contains(": unsupported scope"),
        "{s:?}"
    );
    Ok(())
}

/// The flood: a Job with `parallelism: 1000` in a namespace capped
/// at five pods gets five, and the job controller's refused creates are
/// visible as upstream's FailedCreate Warning.
#[tokio::test]
async fn a_job_flood_is_held_to_the_namespaces_pod_quota() -> anyhow::Result<()> {
    let plane = Plane::start_up(&["--builtin-plugins", "job-controller"]).await?;
    let client = plane.client().await?;
    namespace(&client, "flood").await?;
    let quotas: Api<ResourceQuota> = Api::namespaced(client.clone(), "flood");
    create_json(
        &quotas,
        json!({"metadata": {"name": "q"}, "spec": {"hard": {"pods": "5"}}}),
    )
    .await?;
    used_is(&quotas, "q", "pods", "0").await?;
    let jobs: Api<k8s_openapi::api::batch::v1::Job> = Api::namespaced(client.clone(), "flood");
    // Pods that no node may take stay Pending, and keep counting.
    create_json(
        &jobs,
        json!({"metadata": {"name": "flood"}, "spec": {"parallelism": 1000, "completions": 1000,
            "template": {"spec": {"restartPolicy": "Never", "nodeSelector": {"nowhere": "true"},
                "containers": [{"name": "main", "image": "busybox"}]}}}}),
    )
    .await?;
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(client.clone(), "flood");
    let note = eventually(WAIT, "a FailedCreate event for the job", || async {
        events
            .list(&Default::default())
            .await
            .ok()?
            .items
            .into_iter()
            .find(|e| e.reason.as_deref() == Some("FailedCreate"))
            .and_then(|e| e.message)
    })
    .await?;
    assert!(
        note.contains("exceeded quota: q, requested: pods=1, used: pods=5, limited: pods=5"),
        "{note}"
    );
    let pods: Api<Pod> = Api::namespaced(client.clone(), "flood");
    assert_eq!(pods.list(&Default::default()).await?.items.len(), 5);
    used_is(&quotas, "q", "pods", "5").await?;
    Ok(())
}
