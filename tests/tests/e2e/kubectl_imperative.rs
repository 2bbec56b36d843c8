//! kubectl's imperative commands against the plane. kubectl sends these
//! objects as Kubernetes protobuf (and asks for protobuf back), so each
//! test checks what the server then holds through the kube client (JSON),
//! not only kubectl's exit code: `create` of every kind the plane serves,
//! `run`, `label`, `annotate`, `edit` (with an editor script), `scale`,
//! `rollout status/restart/undo`, and `delete --cascade=...`.

use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::authentication::v1::TokenReview;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, Secret, Service, ServiceAccount};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;
use wasmlet_e2e::workload_plane::{self, workload};
use wasmlet_e2e::{Plane, eventually};

fn secret_text(s: &Secret, key: &str) -> String {
    let data = s.data.as_ref().expect("secret data");
    String::from_utf8(data[key].0.clone()).expect("UTF-8 secret data")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_makes_each_kind_as_kubectl_describes_it() -> Result<()> {
    let plane = Plane::start(&[]).await?;
    let client = plane.client().await?;
    let k = |args: &[&str]| plane.kubectl_ok(args);

    k(&["create", "namespace", "team"])?;
    let ns: Api<Namespace> = Api::all(client.clone());
    ensure!(ns.get_opt("team").await?.is_some(), "namespace team");

    let file = plane.data_dir().join("settings.conf");
    std::fs::write(&file, "mode=fast\n")?;
    let from_file = format!("--from-file={}", file.display());
    k(&[
        "-n",
        "team",
        "create",
        "configmap",
        "cfg",
        "--from-literal=a=1",
    ])?;
    k(&["-n", "team", "create", "configmap", "files", &from_file])?;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "team");
    let data = cms.get("cfg").await?.data.context("cfg data")?;
    ensure!(data["a"] == "1", "{data:?}");
    let data = cms.get("files").await?.data.context("files data")?;
    ensure!(data["settings.conf"] == "mode=fast\n", "{data:?}");

    let secrets: Api<Secret> = Api::namespaced(client.clone(), "team");
    k(&[
        "-n",
        "team",
        "create",
        "secret",
        "generic",
        "gen",
        "--from-literal=user=admin",
    ])?;
    let s = secrets.get("gen").await?;
    ensure!(s.type_.as_deref() == Some("Opaque"), "{:?}", s.type_);
    ensure!(secret_text(&s, "user") == "admin");
    let cert = rcgen::generate_simple_self_signed(vec!["example.com".into()])?;
    let (crt, key) = (
        plane.data_dir().join("tls.crt"),
        plane.data_dir().join("tls.key"),
    );
    std::fs::write(&crt, cert.cert.pem())?;
    std::fs::write(&key, cert.signing_key.serialize_pem())?;
    let (crt_arg, key_arg) = (
        format!("--cert={}", crt.display()),
        format!("--key={}", key.display()),
    );
    k(&[
        "-n", "team", "create", "secret", "tls", "tls", &crt_arg, &key_arg,
    ])?;
    let s = secrets.get("tls").await?;
    ensure!(s.type_.as_deref() == Some("kubernetes.io/tls"));
    ensure!(secret_text(&s, "tls.crt") == cert.cert.pem());
    k(&[
        "-n",
        "team",
        "create",
        "secret",
        "docker-registry",
        "reg",
        "--docker-server=registry.example",
        "--docker-username=u",
        "--docker-password=p",
    ])?;
    let s = secrets.get("reg").await?;
    ensure!(s.type_.as_deref() == Some("kubernetes.io/dockerconfigjson"));
    let config: serde_json::Value = serde_json::from_str(&secret_text(&s, ".dockerconfigjson"))?;
    ensure!(
        config["auths"]["registry.example"]["username"] == "u",
        "{config}"
    );

    k(&[
        "-n",
        "team",
        "create",
        "deployment",
        "web",
        "--image=example/web:1",
        "--replicas=2",
        "--port=80",
    ])?;
    let d = Api::<Deployment>::namespaced(client.clone(), "team")
        .get("web")
        .await?;
    let spec = d.spec.context("deployment spec")?;
    ensure!(spec.replicas == Some(2), "{:?}", spec.replicas);
    let labels = spec.selector.match_labels.context("selector")?;
    ensure!(labels["app"] == "web");
    let c = &spec.template.spec.context("pod template")?.containers[0];
    ensure!(c.image.as_deref() == Some("example/web:1"));
    ensure!(c.ports.as_ref().context("ports")?[0].container_port == 80);

    let svcs: Api<Service> = Api::namespaced(client.clone(), "team");
    k(&[
        "-n",
        "team",
        "create",
        "service",
        "clusterip",
        "svc",
        "--tcp=80:8080",
    ])?;
    let spec = svcs.get("svc").await?.spec.context("service spec")?;
    ensure!(spec.type_.as_deref() == Some("ClusterIP"));
    ensure!(
        spec.cluster_ip
            .as_deref()
            .is_some_and(|ip| ip.contains('.')),
        "{spec:?}"
    );
    let port = &spec.ports.context("ports")?[0];
    ensure!(
        port.port == 80 && port.target_port == Some(IntOrString::Int(8080)),
        "{port:?}"
    );
    k(&[
        "-n",
        "team",
        "create",
        "service",
        "nodeport",
        "np",
        "--tcp=81:8081",
        "--node-port=30081",
    ])?;
    let spec = svcs.get("np").await?.spec.context("service spec")?;
    ensure!(spec.type_.as_deref() == Some("NodePort"));
    ensure!(spec.ports.context("ports")?[0].node_port == Some(30081));

    k(&["-n", "team", "create", "serviceaccount", "bot"])?;
    let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), "team");
    ensure!(sas.get_opt("bot").await?.is_some(), "serviceaccount bot");
    let token = k(&["-n", "team", "create", "token", "bot"])?;
    let review: TokenReview = serde_json::from_value(json!({"spec": {"token": token.trim()}}))?;
    let review = Api::<TokenReview>::all(client.clone())
        .create(&PostParams::default(), &review)
        .await?;
    let status = review.status.context("review status")?;
    ensure!(status.authenticated == Some(true), "{status:?}");
    let user = status.user.context("user")?.username;
    ensure!(
        user.as_deref() == Some("system:serviceaccount:team:bot"),
        "{user:?}"
    );

    k(&[
        "-n",
        "team",
        "create",
        "role",
        "reader",
        "--verb=get,list",
        "--resource=pods,configmaps",
    ])?;
    let role = Api::<Role>::namespaced(client.clone(), "team")
        .get("reader")
        .await?;
    let rule = &role.rules.context("rules")?[0];
    ensure!(rule.verbs == ["get", "list"], "{rule:?}");
    ensure!(rule.resources.as_deref() == Some(&["pods".into(), "configmaps".into()][..]));
    k(&[
        "-n",
        "team",
        "create",
        "rolebinding",
        "rb",
        "--role=reader",
        "--serviceaccount=team:bot",
        "--user=alice",
    ])?;
    let rb = Api::<RoleBinding>::namespaced(client.clone(), "team")
        .get("rb")
        .await?;
    ensure!(rb.role_ref.kind == "Role" && rb.role_ref.name == "reader");
    let subjects = rb.subjects.context("subjects")?;
    ensure!(
        subjects
            .iter()
            .any(|s| s.kind == "ServiceAccount" && s.name == "bot")
    );
    ensure!(
        subjects
            .iter()
            .any(|s| s.kind == "User" && s.name == "alice")
    );
    k(&[
        "create",
        "clusterrole",
        "node-reader",
        "--verb=get,watch",
        "--resource=nodes",
    ])?;
    let cr = Api::<ClusterRole>::all(client.clone())
        .get("node-reader")
        .await?;
    ensure!(cr.rules.context("rules")?[0].verbs == ["get", "watch"]);
    k(&[
        "create",
        "clusterrolebinding",
        "crb",
        "--clusterrole=node-reader",
        "--group=devs",
    ])?;
    let crb = Api::<ClusterRoleBinding>::all(client.clone())
        .get("crb")
        .await?;
    ensure!(crb.subjects.context("subjects")?[0].name == "devs");

    k(&[
        "-n",
        "team",
        "create",
        "poddisruptionbudget",
        "pdb",
        "--selector=app=web",
        "--min-available=1",
    ])?;
    let pdb = Api::<PodDisruptionBudget>::namespaced(client.clone(), "team")
        .get("pdb")
        .await?;
    let spec = pdb.spec.context("pdb spec")?;
    ensure!(spec.min_available == Some(IntOrString::Int(1)), "{spec:?}");
    ensure!(
        spec.selector
            .context("selector")?
            .match_labels
            .context("labels")?["app"]
            == "web"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_label_annotate_and_edit_change_the_stored_object() -> Result<()> {
    let plane = Plane::start(&[]).await?;
    let client = plane.client().await?;
    let k = |args: &[&str]| plane.kubectl_ok(args);

    k(&[
        "run",
        "shell",
        "--image=example/busybox",
        "--restart=Never",
        "--labels=app=shell",
        "--env=GREETING=hi",
        "--port=8080",
        "--",
        "sleep",
        "10",
    ])?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let p = pods.get("shell").await?;
    ensure!(p.metadata.labels.context("labels")?["app"] == "shell");
    let spec = p.spec.context("pod spec")?;
    ensure!(spec.restart_policy.as_deref() == Some("Never"));
    let c = &spec.containers[0];
    ensure!(
        c.args.as_deref() == Some(&["sleep".into(), "10".into()][..]),
        "{:?}",
        c.args
    );
    ensure!(c.env.as_ref().context("env")?[0].value.as_deref() == Some("hi"));
    ensure!(c.ports.as_ref().context("ports")?[0].container_port == 8080);

    k(&[
        "create",
        "configmap",
        "cfg",
        "--from-literal=a=1",
        "--from-literal=b=2",
    ])?;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    k(&["label", "configmap", "cfg", "tier=gold", "team=blue"])?;
    k(&["label", "configmap", "cfg", "team-"])?;
    k(&["label", "--overwrite", "configmap", "cfg", "tier=silver"])?;
    k(&["annotate", "configmap", "cfg", "note=hello world"])?;
    let cm = cms.get("cfg").await?;
    let labels = cm.metadata.labels.context("labels")?;
    ensure!(
        labels.get("tier").map(String::as_str) == Some("silver"),
        "{labels:?}"
    );
    ensure!(!labels.contains_key("team"), "{labels:?}");
    let notes = cm.metadata.annotations.context("annotations")?;
    ensure!(notes["note"] == "hello world", "{notes:?}");

    // kubectl edit runs $KUBE_EDITOR on a YAML file and sends the difference.
    let editor = plane.data_dir().join("editor.sh");
    std::fs::write(
        &editor,
        "#!/bin/sh\nsed -i -e 's/^  a: \"1\"$/  a: edited/' -e '/^  b: \"2\"$/d' \"$1\"\n",
    )?;
    std::fs::set_permissions(&editor, std::os::unix::fs::PermissionsExt::from_mode(0o755))?;
    let out = Command::new(wasmlet_e2e::kubectl_bin())
        .arg("--kubeconfig")
        .arg(plane.kubeconfig())
        .args(["edit", "configmap", "cfg"])
        .env("HOME", plane.data_dir())
        .env("KUBE_EDITOR", &editor)
        .output()?;
    ensure!(
        out.status.success(),
        "kubectl edit: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let data = cms.get("cfg").await?.data.context("data")?;
    ensure!(
        data.get("a").map(String::as_str) == Some("edited"),
        "{data:?}"
    );
    ensure!(!data.contains_key("b"), "{data:?}");
    Ok(())
}

fn template_annotation(d: &Deployment, key: &str) -> Option<String> {
    d.spec
        .as_ref()?
        .template
        .metadata
        .as_ref()?
        .annotations
        .as_ref()?
        .get(key)
        .cloned()
}

async fn sets_of(client: &kube::Client, app: &str) -> Result<Vec<ReplicaSet>> {
    let sets: Api<ReplicaSet> = Api::namespaced(client.clone(), "default");
    Ok(sets
        .list(&ListParams::default().labels(&format!("app={app}")))
        .await?
        .items)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scale_rollout_and_cascading_deletes_of_a_created_deployment() -> Result<()> {
    let (plane, client) = workload_plane::start(&[]).await?;
    let k = |args: &[&str]| plane.kubectl_ok(args);
    let deps: Api<Deployment> = Api::namespaced(client.clone(), "default");
    let image = format!("--image={}", workload("sleeper.wasm"));
    k(&["create", "deployment", "web", &image, "--replicas=2"])?;
    // The wasm node is tainted: the pods need its toleration (and a short grace).
    k(&[
        "patch",
        "deployment",
        "web",
        "--type=json",
        "-p",
        r#"[{"op":"add","path":"/spec/template/spec/tolerations","value":[{"key":"kubernetes.io/arch","operator":"Exists"}]},
            {"op":"add","path":"/spec/template/spec/terminationGracePeriodSeconds","value":1}]"#,
    ])?;
    let status = |plane: &Plane| {
        let out = plane.kubectl_ok(&["rollout", "status", "deployment/web", "--timeout=90s"])?;
        ensure!(out.contains("successfully rolled out"), "{out}");
        anyhow::Ok(())
    };
    status(&plane)?;
    let d = deps.get("web").await?;
    ensure!(
        d.status.as_ref().and_then(|s| s.ready_replicas) == Some(2),
        "{:?}",
        d.status
    );

    k(&["scale", "deployment", "web", "--replicas=3"])?;
    ensure!(deps.get("web").await?.spec.context("spec")?.replicas == Some(3));
    status(&plane)?;
    let d = deps.get("web").await?;
    ensure!(
        d.status.as_ref().and_then(|s| s.ready_replicas) == Some(3),
        "{:?}",
        d.status
    );

    let restarted = "kubectl.kubernetes.io/restartedAt";
    k(&["rollout", "restart", "deployment/web"])?;
    ensure!(template_annotation(&deps.get("web").await?, restarted).is_some());
    status(&plane)?;
    k(&["rollout", "undo", "deployment/web"])?;
    ensure!(template_annotation(&deps.get("web").await?, restarted).is_none());
    status(&plane)?;

    // orphan: the Deployment goes, its ReplicaSets stay without an owner.
    k(&["delete", "deployment", "web", "--cascade=orphan"])?;
    ensure!(deps.get_opt("web").await?.is_none(), "web still exists");
    let sets = sets_of(&client, "web").await?;
    ensure!(!sets.is_empty(), "orphaned ReplicaSets were deleted");
    eventually(
        Duration::from_secs(30),
        "ReplicaSets without owners",
        || async {
            let sets = sets_of(&client, "web").await.ok()?;
            sets.iter()
                .all(|s| {
                    s.metadata
                        .owner_references
                        .as_ref()
                        .is_none_or(Vec::is_empty)
                })
                .then_some(())
        },
    )
    .await?;

    for (name, cascade) in [("fg", "foreground"), ("bg", "background")] {
        k(&["create", "deployment", name, "--image=example/none:1"])?;
        eventually(
            Duration::from_secs(30),
            "the Deployment's ReplicaSet",
            || async { (!sets_of(&client, name).await.ok()?.is_empty()).then_some(()) },
        )
        .await?;
        let flag = format!("--cascade={cascade}");
        k(&["delete", "deployment", name, &flag])?;
        eventually(
            Duration::from_secs(30),
            "the ReplicaSet's deletion",
            || async { sets_of(&client, name).await.ok()?.is_empty().then_some(()) },
        )
        .await?;
        ensure!(deps.get_opt(name).await?.is_none(), "{name} still exists");
    }
    Ok(())
}
