//! kubectl against the plane: api-resources, apply (CRD, then custom
//! resources, with client-side validation on), get -o yaml, get -w, patch of
//! every type and of /status, delete that waits for a finalizer, and the
//! health endpoints.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::core::DynamicObject;
use serde_json::json;
use wasmlet_e2e::*;

const CRD_YAML: &str = r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.test.wasmlet.dev
spec:
  group: test.wasmlet.dev
  scope: Namespaced
  names:
    plural: widgets
    singular: widget
    kind: Widget
    shortNames: [wd]
  versions:
  - name: v1
    served: true
    storage: true
    subresources:
      status: {}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            required: [size]
            properties:
              size: {type: integer, minimum: 1, maximum: 10}
              color: {type: string, enum: [red, green, blue]}
          status:
            type: object
            properties:
              phase: {type: string}
"#;

const WIDGETS_YAML: &str = r#"apiVersion: test.wasmlet.dev/v1
kind: Widget
metadata:
  name: small
  labels: {app: demo}
spec:
  size: 1
  color: red
---
apiVersion: test.wasmlet.dev/v1
kind: Widget
metadata:
  name: large
spec:
  size: 9
"#;

#[tokio::test]
async fn api_resources_apply_get_and_patch() -> anyhow::Result<()> {
    let plane = Plane::start(&[]).await?;
    let out = plane.kubectl_ok(&["api-resources"])?;
    for r in [
        "pods",
        "configmaps",
        "namespaces",
        "customresourcedefinitions",
        "leases",
        "statefulsets",
        "poddisruptionbudgets",
        "events",
    ] {
        assert!(
            out.lines().any(|l| l.split_whitespace().next() == Some(r)),
            "api-resources lacks {r}:\n{out}"
        );
    }

    // apply -f a CRD, then (a second invocation) custom resources; no --validate=false.
    let crd = plane.data_dir().join("crd.yaml");
    std::fs::write(&crd, CRD_YAML)?;
    let out = plane.kubectl_ok(&["apply", "-f", crd.to_str().unwrap()])?;
    assert!(
        out.contains(
            "customresourcedefinition.apiextensions.k8s.io/widgets.test.wasmlet.dev created"
        ),
        "{out}"
    );
    let crs = plane.data_dir().join("widgets.yaml");
    std::fs::write(&crs, WIDGETS_YAML)?;
    let out = plane.kubectl_ok(&["apply", "-f", crs.to_str().unwrap()])?;
    assert!(
        out.contains("widget.test.wasmlet.dev/small created")
            && out.contains("widget.test.wasmlet.dev/large created"),
        "{out}"
    );
    // Re-applying is a no-op; a changed file is configured.
    let out = plane.kubectl_ok(&["apply", "-f", crs.to_str().unwrap()])?;
    assert!(out.contains("small unchanged"), "{out}");
    std::fs::write(&crs, WIDGETS_YAML.replace("size: 9", "size: 8"))?;
    let out = plane.kubectl_ok(&["apply", "-f", crs.to_str().unwrap()])?;
    assert!(out.contains("large configured"), "{out}");
    // Invalid objects are refused with the field named (server-side schema).
    let bad = plane.data_dir().join("bad.yaml");
    std::fs::write(
        &bad,
        "apiVersion: test.wasmlet.dev/v1\nkind: Widget\nmetadata:\n  name: bad\nspec:\n  size: 50\n",
    )?;
    let out = plane.kubectl(&["apply", "-f", bad.to_str().unwrap()])?;
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("spec.size"), "{err}");

    // get -o yaml.
    let yaml = plane.kubectl_ok(&["get", "widget", "large", "-o", "yaml"])?;
    let v: serde_json::Value = serde_yaml::from_str(&yaml)?;
    assert_eq!(v["apiVersion"], "test.wasmlet.dev/v1");
    assert_eq!(v["kind"], "Widget");
    assert_eq!(v["spec"]["size"], 8);
    assert!(v["metadata"]["uid"].is_string() && v["metadata"]["resourceVersion"].is_string());
    // Table output with the short name, and a label selector.
    let out = plane.kubectl_ok(&["get", "wd", "-l", "app=demo"])?;
    assert!(out.contains("small") && !out.contains("large"), "{out}");

    // patch --type merge | json | strategic, and --subresource=status.
    plane.kubectl_ok(&[
        "patch",
        "widget",
        "small",
        "--type",
        "merge",
        "-p",
        r#"{"spec":{"color":"green"}}"#,
    ])?;
    plane.kubectl_ok(&[
        "patch",
        "widget",
        "small",
        "--type",
        "json",
        "-p",
        r#"[{"op":"replace","path":"/spec/size","value":3}]"#,
    ])?;
    plane.kubectl_ok(&[
        "patch",
        "widget",
        "small",
        "--subresource",
        "status",
        "--type",
        "merge",
        "-p",
        r#"{"status":{"phase":"Ready"}}"#,
    ])?;
    let client = plane.client().await?;
    let ar = widget_resource("widgets", "Widget", "v1");
    let w = Api::<DynamicObject>::namespaced_with(client.clone(), "default", &ar)
        .get("small")
        .await?;
    assert_eq!(w.data["spec"]["color"], "green");
    assert_eq!(w.data["spec"]["size"], 3);
    assert_eq!(w.data["status"]["phase"], "Ready");

    let pods = plane.data_dir().join("pod.yaml");
    std::fs::write(
        &pods,
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\nspec:\n  containers:\n  - name: a\n    image: img-a:1\n  - name: b\n    image: img-b:1\n",
    )?;
    plane.kubectl_ok(&["apply", "-f", pods.to_str().unwrap()])?;
    plane.kubectl_ok(&[
        "patch",
        "pod",
        "web",
        "--type",
        "strategic",
        "-p",
        r#"{"spec":{"containers":[{"name":"b","image":"img-b:2"}]}}"#,
    ])?;
    plane.kubectl_ok(&[
        "patch",
        "pod",
        "web",
        "--subresource=status",
        "-p",
        r#"{"status":{"phase":"Running"}}"#,
    ])?;
    let p = Api::<Pod>::namespaced(client.clone(), "default")
        .get("web")
        .await?;
    let images: Vec<String> = p
        .spec
        .unwrap()
        .containers
        .into_iter()
        .filter_map(|c| c.image)
        .collect();
    assert_eq!(images, ["img-a:1", "img-b:2"]);
    assert_eq!(p.status.unwrap().phase.as_deref(), Some("Running"));
    // A patch on a custom resource with --type strategic is refused (as upstream).
    let out = plane.kubectl(&[
        "patch",
        "widget",
        "small",
        "--type",
        "strategic",
        "-p",
        r#"{"spec":{"size":2}}"#,
    ])?;
    assert!(!out.status.success());
    Ok(())
}

/// `kubectl get` prints a CRD's `additionalPrinterColumns` with upstream's
/// JSONPath: the `Ready` column kubebuilder generates (a filter on the
/// conditions), an index and a plain field.
#[tokio::test]
async fn get_prints_printer_columns_with_filters_and_indexes() -> anyhow::Result<()> {
    let plane = Plane::start(&[]).await?;
    let crd = CRD_YAML.replace(
        "    served: true\n",
        r#"    served: true
    additionalPrinterColumns:
    - {name: Size, type: integer, jsonPath: .spec.size}
    - {name: Ready, type: string, jsonPath: '.status.conditions[?(@.type=="Ready")].status'}
    - {name: Reason, type: string, jsonPath: '.status.conditions[?(@.type=="Ready")].reason'}
    - {name: First, type: string, jsonPath: '.status.conditions[0].type'}
"#,
    );
    let crd = crd.replace(
        "              phase: {type: string}\n",
        "              phase: {type: string}\n              conditions: {type: array, items: {type: object, x-kubernetes-preserve-unknown-fields: true}}\n",
    );
    let path = plane.data_dir().join("crd.yaml");
    std::fs::write(&path, crd)?;
    plane.kubectl_ok(&["apply", "-f", path.to_str().unwrap()])?;
    let crs = plane.data_dir().join("widgets.yaml");
    std::fs::write(&crs, WIDGETS_YAML)?;
    // The CRD's resource may take a moment to be served.
    eventually(Duration::from_secs(60), "widgets served", || async {
        let out = plane.kubectl(&["apply", "-f", crs.to_str()?]).ok()?;
        out.status.success().then_some(())
    })
    .await?;
    plane.kubectl_ok(&[
        "patch",
        "widget",
        "small",
        "--subresource=status",
        "--type=merge",
        "-p",
        r#"{"status":{"conditions":[{"type":"Synced","status":"True","reason":"Done"},{"type":"Ready","status":"False","reason":"Waiting"}]}}"#,
    ])?;
    let out = plane.kubectl_ok(&["get", "widgets", "--sort-by=.metadata.name"])?;
    let rows: Vec<Vec<&str>> = out
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        rows[0],
        ["NAME", "SIZE", "READY", "REASON", "FIRST", "AGE"],
        "{out}"
    );
    assert_eq!(
        rows[1][..5],
        ["large", "9", "<none>", "<none>", "<none>"],
        "{out}"
    );
    assert_eq!(
        rows[2][..5],
        ["small", "1", "False", "Waiting", "Synced"],
        "{out}"
    );
    // A column path must start with `.`, as upstream checks; the field is named.
    let bad = CRD_YAML
        .replace("widgets", "gadgets")
        .replace("widget", "gadget")
        .replace("kind: Widget", "kind: Gadget")
        .replace("[wd]", "[gd]")
        .replace(
            "    served: true\n",
            "    served: true\n    additionalPrinterColumns:\n    - {name: Size, type: integer, jsonPath: spec.size}\n",
        );
    std::fs::write(&path, bad)?;
    let out = plane.kubectl(&["apply", "-f", path.to_str().unwrap()])?;
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success()
            && err.contains("spec.versions[0].additionalPrinterColumns[0].jsonPath")
            && err.contains("must be a simple json path starting with ."),
        "{err}"
    );
    Ok(())
}

#[tokio::test]
async fn get_watch_streams_changes() -> anyhow::Result<()> {
    let plane = Plane::start(&[]).await?;
    let client = plane.client().await?;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    cms.create(&PostParams::default(), &configmap("existing", &[]))
        .await?;

    let mut child = Command::new(kubectl_bin())
        .arg("--kubeconfig")
        .arg(plane.kubeconfig())
        // Killed at the end; its timeout only keeps a lost kubectl from
        // running on, so it must outlast the test's steps on a loaded machine.
        .args(["get", "configmaps", "-w", "--request-timeout=300s"])
        .env("HOME", plane.data_dir())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?;
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let wait_line = |what: &str| -> anyhow::Result<String> {
        // Each line is expected at once; the bound only ends a silent wait.
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = rx
                .recv_timeout(left)
                .map_err(|_| anyhow::anyhow!("kubectl get -w never printed {what}"))?;
            if line.split_whitespace().next() == Some(what) {
                return Ok(line);
            }
        }
    };
    wait_line("existing")?;
    cms.create(&PostParams::default(), &configmap("fresh", &[("a", "1")]))
        .await?;
    let l = wait_line("fresh")?;
    assert!(l.split_whitespace().nth(1) == Some("1"), "DATA column: {l}");
    cms.patch(
        "fresh",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"b": "2"}})),
    )
    .await?;
    let l = wait_line("fresh")?;
    assert!(
        l.split_whitespace().nth(1) == Some("2"),
        "DATA column after the update: {l}"
    );
    let _ = child.kill();
    let _ = child.wait();
    Ok(())
}

#[tokio::test]
async fn delete_waits_for_finalizer() -> anyhow::Result<()> {
    let plane = Plane::start(&[]).await?;
    let client = plane.client().await?;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let held: ConfigMap = serde_json::from_value(
        json!({"metadata": {"name": "held", "finalizers": ["example.com/hold"]}}),
    )?;
    cms.create(&PostParams::default(), &held).await?;

    let kubeconfig = plane.kubeconfig();
    let home = plane.data_dir().to_path_buf();
    // kubectl waits for the deletion through a watch of the object: the
    // server counting one more configmaps WATCH proves it is waiting.
    let configmap_watches = |m: &str| -> f64 {
        m.lines()
            .filter(|l| {
                l.starts_with("apiserver_request_total")
                    && l.contains("verb=\"WATCH\"")
                    && l.contains("resource=\"configmaps\"")
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    // The API server's own /metrics (kube-apiserver's `apiserver_request_total`).
    let metrics = || async {
        let req = http::Request::get("/metrics").body(Vec::new())?;
        anyhow::Ok(client.request_text(req).await?)
    };
    let before = configmap_watches(&metrics().await?);
    let deleter = std::thread::spawn(move || {
        let out = Command::new(kubectl_bin())
            .arg("--kubeconfig")
            .arg(kubeconfig)
            // kubectl's own wait must outlast the steps below on a loaded
            // machine; it returns once the finalizer goes.
            .args(["delete", "configmap", "held", "--timeout=300s"])
            .env("HOME", home)
            .output()
            .unwrap();
        (out, Instant::now())
    });
    // The delete marks it; kubectl keeps waiting while the finalizer holds it.
    eventually(Duration::from_secs(60), "deletionTimestamp", || async {
        cms.get("held")
            .await
            .ok()?
            .metadata
            .deletion_timestamp
            .map(|_| ())
    })
    .await?;
    eventually(
        Duration::from_secs(60),
        "kubectl's watch for the deletion",
        || async {
            let m = metrics().await.ok()?;
            (configmap_watches(&m) > before).then_some(())
        },
    )
    .await?;
    assert!(
        !deleter.is_finished(),
        "kubectl delete returned while the finalizer was still there"
    );
    let released = Instant::now();
    cms.patch(
        "held",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await?;
    let (out, done) = tokio::task::spawn_blocking(move || deleter.join().unwrap()).await?;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("configmap \"held\" deleted"));
    assert!(
        done >= released,
        "kubectl returned before the finalizer went"
    );
    expect_status(cms.get("held").await, 404, "NotFound");
    Ok(())
}

/// `/readyz?verbose` and `/livez?verbose` list their checks as upstream, so
/// `kubectl get --raw` and probes that parse them work.
#[tokio::test]
async fn health_endpoints_list_their_checks() -> anyhow::Result<()> {
    let plane = Plane::start(&[]).await?;
    let ready = plane.kubectl_ok(&["get", "--raw", "/readyz?verbose"])?;
    for line in [
        "[+]ping ok",
        "[+]etcd ok",
        "[+]informer-sync ok",
        "[+]shutdown ok",
    ] {
        assert!(ready.contains(line), "{line} missing from:\n{ready}");
    }
    assert!(ready.trim_end().ends_with("readyz check passed"), "{ready}");
    let live = plane.kubectl_ok(&["get", "--raw", "/livez?verbose&exclude=etcd"])?;
    assert!(live.contains("[+]etcd excluded: ok"), "{live}");
    assert!(!live.contains("informer-sync"), "{live}");
    assert!(live.trim_end().ends_with("livez check passed"), "{live}");
    assert_eq!(
        plane.kubectl_ok(&["get", "--raw", "/readyz/etcd"])?.trim(),
        "ok"
    );
    assert_eq!(
        plane.kubectl_ok(&["get", "--raw", "/healthz"])?.trim(),
        "ok"
    );
    let missing = plane.kubectl(&["get", "--raw", "/readyz/nonesuch"])?;
    assert!(!missing.status.success(), "an unknown check is not found");
    Ok(())
}

/// `kubectl create -f` of a `List` validates it client-side through the
/// OpenAPI v2 document in protobuf, then creates each item; an unknown field
/// in an item is refused by the server (kubectl asks for Strict).
#[tokio::test]
async fn create_of_a_list_creates_each_item() -> anyhow::Result<()> {
    let plane = Plane::start(&[]).await?;
    let dir = tempfile::tempdir()?;
    let list = |extra: serde_json::Value| {
        let items: Vec<_> = (0..2)
            .map(|i| {
                let mut o = json!({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": format!("item-{i}")}, "data": {"a": "b"}});
                if let Some(m) = extra.as_object() {
                    for (k, v) in m {
                        o[k] = v.clone();
                    }
                }
                o
            })
            .collect();
        json!({"apiVersion": "v1", "kind": "List", "items": items}).to_string()
    };
    let good = dir.path().join("list.json");
    std::fs::write(&good, list(json!({})))?;
    let out = plane.kubectl_ok(&["create", "-f", good.to_str().unwrap_or_default()])?;
    assert!(out.contains("configmap/item-0 created"), "{out}");
    assert!(out.contains("configmap/item-1 created"), "{out}");
    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, list(json!({"bogus": 1})))?;
    let out = plane.kubectl(&["create", "-f", bad.to_str().unwrap_or_default()])?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("unknown field \"bogus\""), "{stderr}");
    Ok(())
}

/// The demo's pod (`examples/pod.yaml`) lists a toleration of its own;
/// applying it again must keep the not-ready/unreachable tolerations the
/// server added (upstream's DefaultTolerationSeconds adds them on update
/// too), not fail because the update "removes" them. `scripts/up` re-applies
/// it on every run.
#[tokio::test]
async fn a_pod_with_its_own_tolerations_applies_again() -> anyhow::Result<()> {
    let plane = Plane::start(&[]).await?;
    let manifest = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/pod.yaml"),
    )?
    .replace("WORKLOADS", "/nonexistent");
    let file = plane.data_dir().join("pod.yaml");
    std::fs::write(&file, manifest)?;
    let file = file.to_string_lossy();
    plane.kubectl_ok(&["apply", "-f", &file])?;
    let again = plane.kubectl_ok(&["apply", "-f", &file])?;
    assert!(
        again.contains("pod/ticker unchanged") || again.contains("pod/ticker configured"),
        "{again}"
    );
    let pod: Pod = Api::namespaced(plane.client().await?, "default")
        .get("ticker")
        .await?;
    let keys: Vec<String> = pod
        .spec
        .and_then(|s| s.tolerations)
        .unwrap_or_default()
        .into_iter()
        .filter_map(|t| t.key)
        .collect();
    assert_eq!(
        keys,
        [
            "kubernetes.io/arch",
            "node.kubernetes.io/not-ready",
            "node.kubernetes.io/unreachable"
        ]
    );
    Ok(())
}

/// A Deployment as a user keeps it in git: applied, re-applied unchanged,
/// its image changed by `kubectl set image`, by `kubectl apply` and by a
/// strategic patch that adds a container, then taken over by server-side
/// apply. Each needs the pod template's merge keys (containers by `name`).
#[tokio::test]
async fn a_deployment_applies_patches_and_changes_image_as_upstream() -> anyhow::Result<()> {
    use k8s_openapi::api::apps::v1::Deployment;
    let plane = Plane::start(&[]).await?;
    let file = plane.data_dir().join("web.yaml");
    let manifest = |image: &str| {
        format!(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  replicas: 2\n  \
             selector:\n    matchLabels: {{app: web}}\n  template:\n    metadata:\n      labels: {{app: web}}\n    \
             spec:\n      containers:\n      - name: main\n        image: {image}\n        \
             ports: [{{containerPort: 80}}]\n"
        )
    };
    let path = file.to_string_lossy().to_string();
    std::fs::write(&file, manifest("file:///m/v1.wasm"))?;
    plane.kubectl_ok(&["apply", "-f", &path])?;
    let api: Api<Deployment> = Api::namespaced(plane.client().await?, "default");
    let first = api.get("web").await?;
    // Unchanged: no new generation, no new resourceVersion.
    let again = plane.kubectl_ok(&["apply", "-f", &path])?;
    assert!(again.contains("deployment.apps/web unchanged"), "{again}");
    let same = api.get("web").await?;
    assert_eq!(
        (
            same.metadata.generation,
            same.metadata.resource_version.clone()
        ),
        (
            first.metadata.generation,
            first.metadata.resource_version.clone()
        )
    );
    let images = |d: &Deployment| -> Vec<(String, String)> {
        d.spec
            .as_ref()
            .and_then(|s| s.template.spec.as_ref())
            .map_or(vec![], |s| {
                s.containers
                    .iter()
                    .map(|c| (c.name.clone(), c.image.clone().unwrap_or_default()))
                    .collect()
            })
    };
    // A changed image through apply, diff first (kubectl diff exits 1 on a difference).
    std::fs::write(&file, manifest("file:///m/v2.wasm"))?;
    let diff = plane.kubectl(&["diff", "-f", &path])?;
    let text = String::from_utf8_lossy(&diff.stdout);
    assert_eq!(
        diff.status.code(),
        Some(1),
        "{text}{}",
        String::from_utf8_lossy(&diff.stderr)
    );
    assert!(
        text.lines()
            .any(|l| l.starts_with('+') && l.trim_end().ends_with("image: file:///m/v2.wasm")),
        "{text}"
    );
    plane.kubectl_ok(&["apply", "-f", &path])?;
    let d = api.get("web").await?;
    assert_eq!(images(&d), [("main".into(), "file:///m/v2.wasm".into())]);
    assert_eq!(
        d.metadata.generation,
        first.metadata.generation.map(|g| g + 1)
    );
    plane.kubectl_ok(&["set", "image", "deployment/web", "main=file:///m/v3.wasm"])?;
    // A strategic patch adds a container beside the existing one.
    plane.kubectl_ok(&[
        "patch",
        "deployment/web",
        "-p",
        r#"{"spec":{"template":{"spec":{"containers":[{"name":"side","image":"file:///m/side.wasm"}]}}}}"#,
    ])?;
    let d = api.get("web").await?;
    assert_eq!(
        images(&d),
        [
            ("side".into(), "file:///m/side.wasm".into()),
            ("main".into(), "file:///m/v3.wasm".into())
        ]
    );
    // Server-side apply of the same values after client-side apply: no conflict.
    std::fs::write(&file, manifest("file:///m/v3.wasm"))?;
    plane.kubectl_ok(&["apply", "--server-side", "-f", &path])?;
    Ok(())
}

/// `kubectl describe` finds an object's Events by `involvedObject.uid`: the
/// scheduler's (a plugin's `record-event`, whose reference names no uid) and
/// the node agent's must both carry it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn describe_shows_the_schedulers_and_the_nodes_events() -> anyhow::Result<()> {
    let plane = Plane::start_up(&[]).await?;
    let pods: Api<Pod> = Api::namespaced(plane.client().await?, "default");
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "described"},
        "spec": {"tolerations": [{"operator": "Exists"}],
            "containers": [{"name": "m", "image": "file:///nonexistent/m.wasm"}]}}))?;
    pods.create(&PostParams::default(), &pod).await?;
    let out = eventually(
        Duration::from_secs(60),
        "the pod's events in describe",
        || async {
            let out = plane.kubectl_ok(&["describe", "pod", "described"]).ok()?;
            let events = out.split_once("\nEvents:")?.1.to_string();
            let node_event = events
                .lines()
                .any(|l| l.contains("Warning") && !l.contains("Scheduled"));
            (events.contains("Scheduled") && node_event).then_some(out)
        },
    )
    .await
    .map_err(|e| {
        anyhow::anyhow!(
            "{e}; describe:\n{}",
            plane
                .kubectl_ok(&["describe", "pod", "described"])
                .unwrap_or_default()
        )
    })?;
    assert!(
        out.contains("default-scheduler") || out.contains("Successfully assigned"),
        "{out}"
    );
    Ok(())
}

/// `kubectl get KIND -o wide` prints upstream's columns for the built-in
/// kinds (issue 31 item 4): they showed only NAME and AGE.
#[tokio::test]
async fn get_wide_shows_upstreams_columns_for_built_in_kinds() -> anyhow::Result<()> {
    let plane = Plane::start(&[]).await?;
    plane.kubectl_ok(&[
        "create",
        "deployment",
        "web",
        "--image=file:///m/web.wasm",
        "--replicas=2",
    ])?;
    plane.kubectl_ok(&[
        "create",
        "poddisruptionbudget",
        "web",
        "--selector=app=web",
        "--min-available=1",
    ])?;
    plane.kubectl_ok(&[
        "create",
        "rolebinding",
        "readers",
        "--clusterrole=view",
        "--user=alice",
        "--serviceaccount=default:robot",
    ])?;
    plane.kubectl_ok(&["create", "role", "reader", "--verb=get", "--resource=pods"])?;
    let lease = plane.data_dir().join("lease.yaml");
    std::fs::write(
        &lease,
        "apiVersion: coordination.k8s.io/v1\nkind: Lease\nmetadata:\n  name: lock\nspec:\n  holderIdentity: replica-1\n",
    )?;
    plane.kubectl_ok(&["apply", "-f", lease.to_str().unwrap()])?;
    let table = |args: &[&str]| -> anyhow::Result<(String, String)> {
        let out = plane.kubectl_ok(args)?;
        let mut lines = out.lines();
        let header = lines
            .next()
            .unwrap_or("")
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        Ok((header, lines.next().unwrap_or("").to_string()))
    };
    let (h, row) = table(&["get", "deploy", "web", "-o", "wide"])?;
    assert_eq!(
        h,
        "NAME READY UP-TO-DATE AVAILABLE AGE CONTAINERS IMAGES SELECTOR"
    );
    assert!(
        row.starts_with("web")
            && row.contains("/2")
            && row.contains("file:///m/web.wasm")
            && row.contains("app=web"),
        "{row}"
    );
    let (h, row) = table(&["get", "pdb", "web"])?;
    assert_eq!(
        h,
        "NAME MIN AVAILABLE MAX UNAVAILABLE ALLOWED DISRUPTIONS AGE"
    );
    assert_eq!(
        row.split_whitespace().take(3).collect::<Vec<_>>(),
        ["web", "1", "N/A"],
        "{row}"
    );
    let (h, row) = table(&["get", "lease", "lock"])?;
    assert_eq!(h, "NAME HOLDER AGE");
    assert!(row.split_whitespace().nth(1) == Some("replica-1"), "{row}");
    let (h, row) = table(&["get", "rolebinding", "readers", "-o", "wide"])?;
    assert_eq!(h, "NAME ROLE AGE USERS GROUPS SERVICEACCOUNTS");
    assert!(
        row.contains("ClusterRole/view") && row.contains("alice") && row.contains("default:robot"),
        "{row}"
    );
    let (h, _) = table(&["get", "role", "reader"])?;
    assert_eq!(h, "NAME CREATED AT");
    Ok(())
}
