//! `/openapi/v2`: the Swagger 2.0 document in JSON (what kube-rs and the
//! Python client ask for) has the built-in kinds' and the CRDs' definitions,
//! and kubectl, which asks for it in protobuf, keeps working.

use serde_json::Value;
use wasmlet_e2e::*;

#[tokio::test]
async fn the_v2_document_has_definitions_and_kubectl_still_validates_lists() -> anyhow::Result<()> {
    let plane = Plane::start(&[]).await?;
    let client = plane.client().await?;
    install_widgets(&client).await?;

    // kube-rs, JSON.
    let req = http::Request::get("/openapi/v2").body(Vec::new())?;
    let doc: Value = serde_json::from_str(&client.request_text(req).await?)?;
    assert_eq!(doc["swagger"], "2.0");
    let defs = doc["definitions"].as_object().expect("definitions");
    let deployment = &defs["io.k8s.api.apps.v1.Deployment"];
    assert_eq!(
        deployment["properties"]["spec"]["$ref"], "#/definitions/io.k8s.api.apps.v1.DeploymentSpec",
        "{deployment}"
    );
    assert!(defs.contains_key("io.k8s.api.apps.v1.DeploymentSpec"));
    assert_eq!(
        deployment["x-kubernetes-group-version-kind"][0]["kind"],
        "Deployment"
    );
    let widget = defs
        .values()
        .find(|d| d["x-kubernetes-group-version-kind"][0]["kind"] == "Widget")
        .expect("the CRD's definition");
    let size = &widget["properties"]["spec"]["properties"]["size"];
    assert_eq!(size["minimum"].as_f64(), Some(1.0), "{size}");
    let post = &doc["paths"]["/apis/apps/v1/namespaces/{namespace}/deployments"]["post"];
    let body = post["parameters"]
        .as_array()
        .and_then(|ps| ps.iter().find(|p| p["in"] == "body"))
        .expect("a body parameter");
    assert_eq!(
        body["schema"]["$ref"],
        "#/definitions/io.k8s.api.apps.v1.Deployment"
    );
    // Nothing of v3's shape is left.
    let text = doc.to_string();
    assert!(!text.contains("#/components/") && !text.contains("\"nullable\":true"));

    // kubectl validates a List against the v2 document it asks for in
    // protobuf, and creates it.
    let dir = tempfile::tempdir()?;
    let list = dir.path().join("list.yaml");
    std::fs::write(
        &list,
        "apiVersion: v1\nkind: List\nitems:\n\
         - {apiVersion: v1, kind: ConfigMap, metadata: {name: a}, data: {x: \"1\"}}\n\
         - {apiVersion: v1, kind: ConfigMap, metadata: {name: b}, data: {x: \"2\"}}\n",
    )?;
    let out = plane.kubectl_ok(&["apply", "--validate=strict", "-f", list.to_str().unwrap()])?;
    assert!(out.contains("configmap/a created"), "{out}");
    let explain = plane.kubectl_ok(&["explain", "widgets.spec.size"])?;
    assert!(explain.contains("FIELD: size <integer>"), "{explain}");
    Ok(())
}
