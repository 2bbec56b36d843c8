//! Field ownership (`metadata.managedFields`) as kube-apiserver keeps it, seen
//! through kubectl's own commands: the move from client-side to server-side
//! apply (kubectl's upgrade), fields dropped from a manifest removed, no-op
//! applies recorded, managedFields a client sends honoured, and the plane's own
//! components writing under their names. Upstream's rules:
//! <https://kubernetes.io/docs/reference/using-api/server-side-apply/>.

use std::time::Duration;

use serde_json::Value;
use wasmlet_e2e::*;

/// `(manager, operation, subresource)` of each managedFields entry of `what`.
fn managers(plane: &Plane, what: &str) -> anyhow::Result<Vec<(String, String, String)>> {
    let out = plane.kubectl_ok(&["get", what, "-o", "json", "--show-managed-fields"])?;
    let v: Value = serde_json::from_str(&out)?;
    let text = |e: &Value, k: &str| e[k].as_str().unwrap_or_default().to_string();
    Ok(v["metadata"]["managedFields"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|e| {
                    (
                        text(e, "manager"),
                        text(e, "operation"),
                        text(e, "subresource"),
                    )
                })
                .collect()
        })
        .unwrap_or_default())
}

fn sorted_managers(plane: &Plane, what: &str) -> anyhow::Result<Vec<(String, String, String)>> {
    let mut m = managers(plane, what)?;
    m.sort();
    Ok(m)
}

/// The entries after kubectl's move to server-side apply: its own, and
/// `kubectl-last-applied` keeping the last-applied annotation (kubectl's
/// `saveLastApplyAnnotationIfNecessary`); `kubectl-client-side-apply` is gone.
fn migrated() -> Vec<(String, String, String)> {
    vec![
        entry("kubectl", "Apply"),
        entry("kubectl-last-applied", "Apply"),
    ]
}

fn entry(m: &str, op: &str) -> (String, String, String) {
    (m.into(), op.into(), String::new())
}

fn data(plane: &Plane, cm: &str) -> anyhow::Result<Value> {
    let out = plane.kubectl_ok(&["get", "configmap", cm, "-o", "json"])?;
    Ok(serde_json::from_str::<Value>(&out)?["data"].clone())
}

fn configmap(data: &[(&str, &str)]) -> String {
    let mut s =
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: app\n  labels: {tier: web}\ndata:\n"
            .to_string();
    for (k, v) in data {
        s.push_str(&format!("  {k}: \"{v}\"\n"));
    }
    s
}

/// Upstream's "Upgrading from client-side apply to server-side apply": after
/// `kubectl apply`, `kubectl apply --server-side` of a changed manifest is no
/// conflict with `kubectl-client-side-apply`, kubectl's fields move to its
/// Apply entry (kubectl sends them as a JSON patch of managedFields), and from
/// then on a field dropped from the manifest is removed.
#[tokio::test]
async fn client_side_apply_upgrades_to_server_side_apply() -> anyhow::Result<()> {
    let plane = Plane::start(&[]).await?;
    let file = plane.data_dir().join("app.yaml");
    let path = file.to_string_lossy().to_string();
    std::fs::write(&file, configmap(&[("a", "1"), ("b", "2")]))?;
    plane.kubectl_ok(&["apply", "-f", &path])?;
    assert_eq!(
        managers(&plane, "configmap/app")?,
        [entry("kubectl-client-side-apply", "Update")]
    );
    // A changed value: kube-apiserver lets kubectl take what its client-side
    // apply set (the value still matches the last-applied annotation).
    std::fs::write(&file, configmap(&[("a", "1"), ("b", "3")]))?;
    plane.kubectl_ok(&["apply", "--server-side", "-f", &path])?;
    assert_eq!(sorted_managers(&plane, "configmap/app")?, migrated());
    assert_eq!(
        data(&plane, "app")?,
        serde_json::json!({"a": "1", "b": "3"})
    );
    // The annotation follows the applied configuration (for a later downgrade).
    let last = plane.kubectl_ok(&[
        "get",
        "configmap",
        "app",
        "-o",
        r#"jsonpath={.metadata.annotations.kubectl\.kubernetes\.io/last-applied-configuration}"#,
    ])?;
    assert!(last.contains(r#""b":"3""#), "{last}");
    // Fields this applier owns alone and stops applying are removed.
    std::fs::write(&file, configmap(&[("b", "3")]))?;
    plane.kubectl_ok(&["apply", "--server-side", "-f", &path])?;
    assert_eq!(data(&plane, "app")?, serde_json::json!({"b": "3"}));
    Ok(())
}

/// The same manifest applied server-side after a client-side apply: kubectl's
/// migration of managedFields is stored (it was ignored), so dropping a field
/// afterwards removes it.
#[tokio::test]
async fn an_unchanged_manifest_migrates_and_then_prunes() -> anyhow::Result<()> {
    let plane = Plane::start(&[]).await?;
    let file = plane.data_dir().join("app.yaml");
    let path = file.to_string_lossy().to_string();
    std::fs::write(&file, configmap(&[("a", "1"), ("b", "2")]))?;
    plane.kubectl_ok(&["apply", "-f", &path])?;
    plane.kubectl_ok(&["apply", "--server-side", "-f", &path])?;
    assert_eq!(sorted_managers(&plane, "configmap/app")?, migrated());
    std::fs::write(&file, configmap(&[("a", "1")]))?;
    plane.kubectl_ok(&["apply", "--server-side", "-f", &path])?;
    assert_eq!(data(&plane, "app")?, serde_json::json!({"a": "1"}));
    Ok(())
}

/// `kubectl diff --server-side` of a changed manifest after a client-side
/// apply shows the change (it answered a conflict with kubectl-client-side-apply).
#[tokio::test]
async fn server_side_diff_after_client_side_apply_shows_the_change() -> anyhow::Result<()> {
    let plane = Plane::start(&[]).await?;
    let file = plane.data_dir().join("app.yaml");
    let path = file.to_string_lossy().to_string();
    std::fs::write(&file, configmap(&[("a", "1")]))?;
    plane.kubectl_ok(&["apply", "-f", &path])?;
    std::fs::write(&file, configmap(&[("a", "2")]))?;
    let diff = plane.kubectl(&["diff", "--server-side", "-f", &path])?;
    let (out, err) = (
        String::from_utf8_lossy(&diff.stdout),
        String::from_utf8_lossy(&diff.stderr),
    );
    // kubectl diff: 1 is "differences found", anything else an error.
    assert_eq!(diff.status.code(), Some(1), "{out}{err}");
    assert!(out.lines().any(|l| l.trim_end() == r#"+  a: "2""#), "{out}");
    // A dry run: nothing changed.
    assert_eq!(data(&plane, "app")?, serde_json::json!({"a": "1"}));
    Ok(())
}

/// Upstream's "Field management": two appliers setting the same value share
/// the field. The second apply changes no value, and is still recorded.
#[tokio::test]
async fn a_no_op_apply_by_a_second_manager_is_recorded() -> anyhow::Result<()> {
    let plane = Plane::start(&[]).await?;
    let file = plane.data_dir().join("app.yaml");
    let path = file.to_string_lossy().to_string();
    std::fs::write(&file, configmap(&[("a", "1")]))?;
    plane.kubectl_ok(&["apply", "--server-side", "-f", &path])?;
    plane.kubectl_ok(&[
        "apply",
        "--server-side",
        "--field-manager=second",
        "-f",
        &path,
    ])?;
    let mut got = managers(&plane, "configmap/app")?;
    got.sort();
    assert_eq!(got, [entry("kubectl", "Apply"), entry("second", "Apply")]);
    // Shared: a change by one of them is a conflict with the other.
    std::fs::write(&file, configmap(&[("a", "2")]))?;
    let out = plane.kubectl(&["apply", "--server-side", "-f", &path])?;
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains(r#"conflict with "second": .data.a"#), "{err}");
    Ok(())
}

/// managedFields sent on create are not stored as sent: the creator is
/// recorded (upstream tracks every object from its creation), so a later
/// `kubectl label` is recorded under `kubectl-label`; `managedFields: [{}]`
/// clears them (upstream's "Clearing managedFields"); and clearing keeps them
/// cleared until the next apply, which gives the fields there to
/// `before-first-apply`.
#[tokio::test]
async fn managed_fields_sent_by_clients_as_upstream_takes_them() -> anyhow::Result<()> {
    let plane = Plane::start(&[]).await?;
    let file = plane.data_dir().join("app.yaml");
    let path = file.to_string_lossy().to_string();
    std::fs::write(
        &file,
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: app\n  managedFields: []\ndata:\n  a: \"1\"\n",
    )?;
    plane.kubectl_ok(&["create", "-f", &path])?;
    assert_eq!(
        managers(&plane, "configmap/app")?,
        [entry("kubectl-create", "Update")]
    );
    plane.kubectl_ok(&["label", "configmap/app", "team=blue"])?;
    let mut got = managers(&plane, "configmap/app")?;
    got.sort();
    assert_eq!(
        got,
        [
            entry("kubectl-create", "Update"),
            entry("kubectl-label", "Update")
        ]
    );
    plane.kubectl_ok(&[
        "patch",
        "configmap/app",
        "--type=merge",
        "-p",
        r#"{"metadata":{"managedFields":[{}]}}"#,
    ])?;
    assert_eq!(managers(&plane, "configmap/app")?, []);
    std::fs::write(&file, configmap(&[("a", "1")]))?;
    plane.kubectl_ok(&["apply", "--server-side", "-f", &path])?;
    let mut got = managers(&plane, "configmap/app")?;
    got.sort();
    assert_eq!(
        got,
        [
            entry("before-first-apply", "Update"),
            entry("kubectl", "Apply")
        ]
    );
    Ok(())
}

/// The plane's own writers record their names: the scheduler's binding
/// (through `pods/binding`, by the host's client) and the node agent's status
/// writes, where every entry had no manager or the API server's; `kubectl
/// scale` is recorded with subresource `scale`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_planes_components_write_under_their_names() -> anyhow::Result<()> {
    let plane = Plane::start_up(&[]).await?;
    let file = plane.data_dir().join("pod.yaml");
    let path = file.to_string_lossy().to_string();
    std::fs::write(
        &file,
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: named\nspec:\n  \
         tolerations: [{key: kubernetes.io/arch, operator: Exists}]\n  \
         containers:\n  - name: main\n    image: file:///nothing.wasm\n",
    )?;
    plane.kubectl_ok(&["apply", "-f", &path])?;
    let want = [
        (
            "wasmlet".to_string(),
            "Update".to_string(),
            "binding".to_string(),
        ),
        ("wasmlet-node".into(), "Update".into(), "status".into()),
    ];
    let got = eventually(
        Duration::from_secs(60),
        "the binding and a status write",
        || async {
            let got = managers(&plane, "pod/named").ok()?;
            want.iter().all(|w| got.contains(w)).then_some(got)
        },
    )
    .await;
    assert!(got.is_ok(), "{:?}", managers(&plane, "pod/named")?);
    // Every entry names its writer.
    let got = managers(&plane, "pod/named")?;
    assert!(got.iter().all(|(m, _, _)| !m.is_empty()), "{got:?}");

    let file = plane.data_dir().join("sts.yaml");
    let path = file.to_string_lossy().to_string();
    std::fs::write(
        &file,
        "apiVersion: apps/v1\nkind: StatefulSet\nmetadata:\n  name: db\nspec:\n  replicas: 0\n  serviceName: db\n  selector:\n    matchLabels: {app: db}\n  template:\n    metadata:\n      labels: {app: db}\n    spec:\n      containers:\n      - name: main\n        image: file:///nothing.wasm\n",
    )?;
    plane.kubectl_ok(&["apply", "--server-side", "-f", &path])?;
    plane.kubectl_ok(&["scale", "statefulset/db", "--replicas=0"])?;
    plane.kubectl_ok(&["scale", "statefulset/db", "--replicas=1"])?;
    let got = managers(&plane, "statefulset/db")?;
    assert!(
        got.iter()
            .any(|(m, op, sub)| !m.is_empty() && op == "Update" && sub == "scale"),
        "{got:?}"
    );
    Ok(())
}

/// An apply configuration carrying managedFields is refused as upstream
/// refuses it (400 "metadata.managedFields must be nil"): only the server
/// writes them on an apply. They were silently dropped.
#[tokio::test]
async fn an_apply_carrying_managed_fields_is_refused() -> anyhow::Result<()> {
    let plane = Plane::start(&[]).await?;
    let file = plane.data_dir().join("app.yaml");
    let path = file.to_string_lossy().to_string();
    std::fs::write(
        &file,
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: app\n  managedFields:\n  - \
         {manager: someone, operation: Apply, apiVersion: v1, fieldsType: FieldsV1, fieldsV1: {f:data: {}}}\n\
         data:\n  a: \"1\"\n",
    )?;
    let out = plane.kubectl(&["apply", "--server-side", "-f", &path])?;
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("metadata.managedFields must be nil"), "{err}");
    Ok(())
}
