//! Built-in kinds validated as upstream validates them, through kubectl and
//! the kube client: wrong JSON types refused with Go's decoding message,
//! unknown and duplicate fields per `fieldValidation`, immutable ConfigMaps,
//! Secret `stringData` and typed-secret keys, pod spec immutability.

use std::path::PathBuf;

use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use serde_json::json;
use wasmlet_e2e::*;

fn configmaps(client: &kube::Client) -> Api<DynamicObject> {
    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk("", "v1", "ConfigMap"));
    Api::namespaced_with(client.clone(), "default", &ar)
}

/// Writes a manifest to a file kubectl can read.
fn manifest(dir: &tempfile::TempDir, name: &str, text: &str) -> anyhow::Result<PathBuf> {
    let p = dir.path().join(name);
    std::fs::write(&p, text)?;
    Ok(p)
}

#[tokio::test]
async fn wrong_json_types_are_refused_and_the_namespace_stays_listable() -> anyhow::Result<()> {
    let plane = Plane::start(&[]).await?;
    let client = plane.client().await?;
    let bad: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "five"}, "data": 5,
    }))?;
    let s = expect_status(
        configmaps(&client)
            .create(&PostParams::default(), &bad)
            .await,
        400,
        "BadRequest",
    );
    assert_eq!(
        s.message,
        "ConfigMap in version \"v1\" cannot be handled as a ConfigMap: json: cannot unmarshal number into Go struct field ConfigMap.data of type map[string]string"
    );
    // A value of the wrong type inside the map names the map field too.
    let bad_value: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "port"}, "data": {"port": 8080},
    }))?;
    let s = expect_status(
        configmaps(&client)
            .create(&PostParams::default(), &bad_value)
            .await,
        400,
        "BadRequest",
    );
    assert!(
        s.message
            .ends_with("Go struct field ConfigMap.data of type string"),
        "{}",
        s.message
    );

    // kubectl reports the same error and stores nothing.
    let dir = tempfile::tempdir()?;
    let f = manifest(
        &dir,
        "cm.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: five\ndata: 5\n",
    )?;
    let out = plane.kubectl(&["create", "-f", f.to_str().unwrap_or_default()])?;
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("cannot unmarshal number into Go struct field ConfigMap.data"),
        "{stderr}"
    );

    // Nested fields of a pod: the innermost struct and the full path, as Go prints them.
    let pods: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        "default",
        &ApiResource::from_gvk(&GroupVersionKind::gvk("", "v1", "Pod")),
    );
    let bad_pod: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "c", "image": "i", "ports": [{"containerPort": "80"}]}]},
    }))?;
    let s = expect_status(
        pods.create(&PostParams::default(), &bad_pod).await,
        400,
        "BadRequest",
    );
    assert!(
        s.message.ends_with(
            "json: cannot unmarshal string into Go struct field ContainerPort.spec.containers.ports.containerPort of type int32"
        ),
        "{}",
        s.message
    );

    // The typed client can still list the namespace (it could not once `data: 5` was stored).
    let typed: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let names: Vec<String> = typed
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter_map(|c| c.metadata.name)
        .collect();
    assert!(
        !names.iter().any(|n| n == "five" || n == "port"),
        "{names:?}"
    );
    Ok(())
}

#[tokio::test]
async fn unknown_and_duplicate_fields_follow_field_validation() -> anyhow::Result<()> {
    let plane = Plane::start(&[]).await?;
    let client = plane.client().await?;
    let dir = tempfile::tempdir()?;
    let pod_yaml = |name: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  foo: bar\n  containers:\n  - name: c\n    image: busybox\n    bogus: 1\n"
        )
    };

    // kubectl's default is Strict: refused, both fields named, nothing stored.
    let strict = manifest(&dir, "strict.yaml", &pod_yaml("strict"))?;
    let out = plane.kubectl(&["create", "-f", strict.to_str().unwrap_or_default()])?;
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("strict decoding error: "), "{stderr}");
    assert!(stderr.contains("unknown field \"spec.foo\""), "{stderr}");
    assert!(
        stderr.contains("unknown field \"spec.containers[0].bogus\""),
        "{stderr}"
    );
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    assert!(pods.get_opt("strict").await?.is_none());

    // Warn: stored without the fields, one warning each.
    let warn = manifest(&dir, "warn.yaml", &pod_yaml("warn"))?;
    let out = plane.kubectl(&[
        "create",
        "--validate=warn",
        "-f",
        warn.to_str().unwrap_or_default(),
    ])?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("Warning: unknown field \"spec.foo\""),
        "{stderr}"
    );
    assert!(
        stderr.contains("Warning: unknown field \"spec.containers[0].bogus\""),
        "{stderr}"
    );
    let stored = plane.kubectl_ok(&["get", "pod", "warn", "-o", "json"])?;
    let stored: serde_json::Value = serde_json::from_str(&stored)?;
    assert!(stored["spec"].get("foo").is_none(), "{stored}");
    assert!(stored["spec"]["containers"][0].get("bogus").is_none());

    // Ignore: stored without them, silently.
    let ignore = manifest(&dir, "ignore.yaml", &pod_yaml("ignore"))?;
    let out = plane.kubectl(&[
        "create",
        "--validate=false",
        "-f",
        ignore.to_str().unwrap_or_default(),
    ])?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(!stderr.contains("Warning"), "{stderr}");
    assert!(pods.get("ignore").await?.spec.is_some());

    // The kube client: by default (Warn) stored without the unknown fields ...
    let extra: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "extra", "color": "red"},
        "data": {"a": "b"}, "spec": {"x": 1},
    }))?;
    let stored = configmaps(&client)
        .create(&PostParams::default(), &extra)
        .await?;
    assert!(stored.data.get("spec").is_none());
    assert_eq!(stored.data["data"], json!({"a": "b"}));
    // ... and a Strict patch adding them is a 400 naming both.
    let s = expect_status(
        configmaps(&client)
            .patch(
                "extra",
                &PatchParams::default().validation_strict(),
                &Patch::Merge(json!({"metadata": {"color": "red"}, "spec": {"x": 1}})),
            )
            .await,
        400,
        "BadRequest",
    );
    assert_eq!(
        s.message,
        "strict decoding error: unknown field \"metadata.color\", unknown field \"spec\""
    );

    // Duplicate fields: Strict refuses, Warn keeps the last value.
    let dup = br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"dup"},"immutable":false,"immutable":true}"#;
    let (code, body) = plane.raw(
        "POST",
        "/api/v1/namespaces/default/configmaps?fieldValidation=Strict",
        Some("application/json"),
        Some(dup),
    )?;
    assert_eq!(code, 400, "{body}");
    assert_eq!(
        body["message"],
        "strict decoding error: duplicate field \"immutable\""
    );
    let (code, body) = plane.raw(
        "POST",
        "/api/v1/namespaces/default/configmaps",
        Some("application/json"),
        Some(dup),
    )?;
    assert_eq!(code, 201, "{body}");
    assert_eq!(body["immutable"], true);
    Ok(())
}

#[tokio::test]
async fn immutable_configmaps_keep_their_data() -> anyhow::Result<()> {
    let plane = Plane::start(&[]).await?;
    let client = plane.client().await?;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let mut cm = configmap("frozen", &[("a", "1")]);
    cm.immutable = Some(true);
    cms.create(&PostParams::default(), &cm).await?;

    let patch = |p: serde_json::Value| {
        let cms = cms.clone();
        async move {
            cms.patch("frozen", &PatchParams::default(), &Patch::Merge(p))
                .await
        }
    };
    let s = expect_status(patch(json!({"data": {"a": "2"}})).await, 422, "Invalid");
    assert_eq!(
        s.message,
        "ConfigMap \"frozen\" is invalid: data: Forbidden: field is immutable when `immutable` is set"
    );
    let s = expect_status(patch(json!({"immutable": false})).await, 422, "Invalid");
    assert_eq!(
        s.message,
        "ConfigMap \"frozen\" is invalid: immutable: Forbidden: field is immutable when `immutable` is set"
    );
    // Metadata still changes, and the object can be deleted.
    patch(json!({"metadata": {"labels": {"tier": "gold"}}})).await?;
    assert_eq!(cms.get("frozen").await?.data.unwrap_or_default()["a"], "1");

    // kubectl edit-style replace gets the same answer.
    let dir = tempfile::tempdir()?;
    let f = manifest(
        &dir,
        "cm.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: frozen\nimmutable: true\ndata:\n  a: \"3\"\n",
    )?;
    let out = plane.kubectl(&["replace", "-f", f.to_str().unwrap_or_default()])?;
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("field is immutable when `immutable` is set")
    );
    cms.delete("frozen", &DeleteParams::default()).await?;
    Ok(())
}

#[tokio::test]
async fn secrets_merge_string_data_and_check_their_type() -> anyhow::Result<()> {
    let plane = Plane::start(&[]).await?;
    let client = plane.client().await?;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), "default");

    // stringData lands in data, base64-encoded, over a data key of the same
    // name; the type defaults to Opaque.
    let s: Secret = serde_json::from_value(json!({
        "metadata": {"name": "creds"},
        "data": {"user": "YWRtaW4=", "pass": "b2xk"},
        "stringData": {"pass": "s3cret"},
    }))?;
    let stored = secrets.create(&PostParams::default(), &s).await?;
    assert_eq!(stored.type_.as_deref(), Some("Opaque"));
    assert!(stored.string_data.is_none());
    let data = stored.data.unwrap_or_default();
    assert_eq!(data["pass"].0, b"s3cret");
    assert_eq!(data["user"].0, b"admin");
    let out = plane.kubectl_ok(&["get", "secret", "creds", "-o", "jsonpath={.data.pass}"])?;
    assert_eq!(out, "czNjcmV0");

    // The type cannot change afterwards.
    let st = expect_status(
        secrets
            .patch(
                "creds",
                &PatchParams::default(),
                &Patch::Merge(json!({"type": "kubernetes.io/basic-auth"})),
            )
            .await,
        422,
        "Invalid",
    );
    // (The update's own rule first, then the new type's required keys, as upstream orders them.)
    assert_eq!(
        st.message,
        "Secret \"creds\" is invalid: [type: Invalid value: \"kubernetes.io/basic-auth\": field is immutable, data[username]: Required value, data[password]: Required value]"
    );

    // A TLS secret without its key is refused, through kubectl too.
    let dir = tempfile::tempdir()?;
    let f = manifest(
        &dir,
        "tls.yaml",
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: web-tls\ntype: kubernetes.io/tls\ndata:\n  tls.crt: Y2VydA==\n",
    )?;
    let out = plane.kubectl(&["apply", "-f", f.to_str().unwrap_or_default()])?;
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("Secret \"web-tls\" is invalid: data[tls.key]: Required value"),
        "{stderr}"
    );
    assert!(secrets.get_opt("web-tls").await?.is_none());

    // Bad base64 in data does not decode: 400, as upstream.
    let (code, body) = plane.raw(
        "POST",
        "/api/v1/namespaces/default/secrets",
        Some("application/json"),
        Some(br#"{"apiVersion":"v1","kind":"Secret","metadata":{"name":"b64"},"data":{"k":"not base64!"}}"#),
    )?;
    assert_eq!(code, 400, "{body}");
    assert_eq!(
        body["message"],
        "Secret in version \"v1\" cannot be handled as a Secret: illegal base64 data at input byte 3"
    );
    Ok(())
}

#[tokio::test]
async fn pod_spec_is_immutable_after_creation_except_images() -> anyhow::Result<()> {
    let plane = Plane::start(&[]).await?;
    let client = plane.client().await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    pods.create(&PostParams::default(), &pod("fixed")).await?;

    // The image may change.
    pods.patch(
        "fixed",
        &PatchParams::default(),
        &Patch::Strategic(
            json!({"spec": {"containers": [{"name": "main", "image": "busybox:1.36"}]}}),
        ),
    )
    .await?;
    // Anything else in the spec may not.
    let s = expect_status(
        pods.patch(
            "fixed",
            &PatchParams::default(),
            &Patch::Strategic(json!({"spec": {"containers": [{"name": "main", "env": [{"name": "A", "value": "1"}]}]}})),
        )
        .await,
        422,
        "Invalid",
    );
    assert!(
        s.message.starts_with(
            "Pod \"fixed\" is invalid: spec: Forbidden: pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)"
        ),
        "{}",
        s.message
    );
    let stored = pods.get("fixed").await?;
    let c = &stored.spec.unwrap_or_default().containers[0];
    assert_eq!(c.image.as_deref(), Some("busybox:1.36"));
    assert!(c.env.is_none());

    // kubectl apply of a changed spec gets the same refusal; labels still change.
    let dir = tempfile::tempdir()?;
    let f = manifest(
        &dir,
        "pod.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: fixed\n  labels: {app: x}\nspec:\n  restartPolicy: Never\n  containers:\n  - name: main\n    image: busybox:1.36\n",
    )?;
    let out = plane.kubectl(&["apply", "-f", f.to_str().unwrap_or_default()])?;
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("pod updates may not change fields other than")
    );
    plane.kubectl_ok(&["label", "pod", "fixed", "app=y"])?;
    Ok(())
}

#[tokio::test]
async fn kubectl_explain_describes_built_in_kinds() -> anyhow::Result<()> {
    let plane = Plane::start(&[]).await?;
    let out = plane.kubectl_ok(&["explain", "pod.spec.containers"])?;
    assert!(out.contains("KIND:       Pod"), "{out}");
    assert!(out.contains("FIELD: containers <[]Container>"), "{out}");
    assert!(out.contains("image\t<string>"), "{out}");
    assert!(out.contains("Container image name."), "{out}");
    let out = plane.kubectl_ok(&["explain", "configmaps.data"])?;
    assert!(out.contains("FIELD: data <map[string]string>"), "{out}");
    // Applying a built-in kind still works with the real schemas published.
    let dir = tempfile::tempdir()?;
    let f = manifest(
        &dir,
        "cm.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: explained\ndata:\n  a: \"1\"\n",
    )?;
    plane.kubectl_ok(&["apply", "-f", f.to_str().unwrap_or_default()])?;
    Ok(())
}

#[tokio::test]
async fn custom_resources_share_the_field_validation_rules() -> anyhow::Result<()> {
    let plane = Plane::start(&[]).await?;
    let client = plane.client().await?;
    install_widgets(&client).await?;
    let dir = tempfile::tempdir()?;
    let f = manifest(
        &dir,
        "w.yaml",
        "apiVersion: test.wasmlet.dev/v1\nkind: Widget\nmetadata:\n  name: w\nspec:\n  size: 2\n  bogus: 1\n",
    )?;
    // Warn: stored without the field, with the warning upstream sends.
    let out = plane.kubectl(&[
        "create",
        "--validate=warn",
        "-f",
        f.to_str().unwrap_or_default(),
    ])?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("Warning: unknown field \"spec.bogus\""),
        "{stderr}"
    );
    let stored = plane.kubectl_ok(&["get", "widget", "w", "-o", "jsonpath={.spec}"])?;
    assert!(!stored.contains("bogus"), "{stored}");
    // Duplicate fields in a custom resource body under Strict.
    let (code, body) = plane.raw(
        "POST",
        "/apis/test.wasmlet.dev/v1/namespaces/default/widgets?fieldValidation=Strict",
        Some("application/json"),
        Some(br#"{"apiVersion":"test.wasmlet.dev/v1","kind":"Widget","metadata":{"name":"d"},"spec":{"size":1,"size":2}}"#),
    )?;
    assert_eq!(code, 400, "{body}");
    assert_eq!(
        body["message"],
        "strict decoding error: duplicate field \"spec.size\""
    );
    Ok(())
}

/// Bad request options and a custom object of the wrong kind are 422 Invalid,
/// naming the options kind and the field as upstream does.
#[tokio::test]
async fn bad_options_and_wrong_custom_kinds_are_unprocessable() -> anyhow::Result<()> {
    let plane = Plane::start(&[]).await?;
    let client = plane.client().await?;
    install_widgets(&client).await?;
    let cm = br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"o"}}"#;
    let (code, body) = plane.raw(
        "POST",
        "/api/v1/namespaces/default/configmaps?fieldValidation=Loose",
        Some("application/json"),
        Some(cm),
    )?;
    assert_eq!(code, 422, "{body}");
    assert_eq!(
        body["message"],
        "CreateOptions.meta.k8s.io \"\" is invalid: fieldValidation: Unsupported value: \"Loose\": supported values: \"Ignore\", \"Strict\", \"Warn\""
    );
    assert_eq!(body["details"]["causes"][0]["field"], "fieldValidation");

    let (code, body) = plane.raw(
        "PATCH",
        "/api/v1/namespaces/default/configmaps/o",
        Some("application/apply-patch+yaml"),
        Some(cm),
    )?;
    assert_eq!(code, 422, "{body}");
    assert_eq!(
        body["message"],
        "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch"
    );

    let (code, body) = plane.raw(
        "POST",
        "/apis/test.wasmlet.dev/v1/namespaces/default/widgets",
        Some("application/json"),
        Some(br#"{"apiVersion":"test.wasmlet.dev/v1","kind":"Gadget","metadata":{"name":"g"},"spec":{"size":1}}"#),
    )?;
    assert_eq!(code, 422, "{body}");
    assert_eq!(body["reason"], "Invalid");
    assert_eq!(body["details"]["causes"][0]["field"], "kind");
    assert!(
        body["message"]
            .as_str()
            .is_some_and(|m| m.ends_with("kind: Invalid value: \"Gadget\": must be Widget")),
        "{body}"
    );
    Ok(())
}
