//! One reconcile per change (issue 16): the watch event caused by the host's
//! own status write does not call the reconciler again, while every change by
//! someone else (spec, status, metadata) still does. In process: the embedded
//! API server, the shared caches and the controller engine, with a native
//! reconciler that records every object it is called with.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use serde_json::{Value, json};
use wasmlet::apiserver::{ApiServer, Config};
use wasmlet::cluster::Resolver;
use wasmlet::cluster::cache::Caches;
use wasmlet::controller::controller::{Controller, ControllerConfig};
use wasmlet::controller::leader::Leadership;
use wasmlet::controller::metrics::ControllerMetrics;
use wasmlet::controller::source::{Call, Fixed, Reconciler};
use wasmlet::plugin::Manifest;
use wasmlet::plugin::outcome::{Finalized, Reconciled};
use wasmlet::plugin::sandbox::CallReport;
use wasmlet_e2e::eventually;

const CRD: &str = include_str!("../../guests/testing/widget/widget.crd.yaml");
const MANIFEST: &str = include_str!("../../guests/testing/widget/widget.toml");

/// guests/testing/widget's logic, natively, remembering every object it saw.
struct Recorder {
    manifest: Manifest,
    calls: Mutex<Vec<Value>>,
}

impl Recorder {
    fn calls(&self) -> Vec<Value> {
        self.calls.lock().unwrap().clone()
    }
}

impl Reconciler for Recorder {
    fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    fn declared_conditions(&self) -> &[String] {
        &[]
    }

    fn reconcile<'a>(&'a self, _key: &'a str, obj: &'a str) -> Call<'a, Reconciled> {
        Box::pin(async move {
            let v: Value = serde_json::from_str(obj).unwrap_or(Value::Null);
            let size = v.pointer("/spec/size").and_then(Value::as_i64).unwrap_or(0);
            self.calls.lock().unwrap().push(v);
            Ok((
                Ok(Reconciled {
                    status: Some(json!({"summary": format!("size={size}")})),
                    conditions: vec![],
                    requeue_after: None,
                }),
                CallReport::default(),
            ))
        })
    }

    fn finalize<'a>(&'a self, _key: &'a str, _obj: &'a str) -> Call<'a, Finalized> {
        Box::pin(async move { Ok((Ok(Finalized::Done), CallReport::default())) })
    }
}

fn rv(o: &Value) -> String {
    o.pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

/// Waits (bounded) until widget `w`'s status says `summary`; returns its
/// resourceVersion then: the host's status write.
async fn summary_written(api: &Api<DynamicObject>, summary: &str) -> anyhow::Result<String> {
    eventually(
        Duration::from_secs(30),
        &format!("status.summary {summary}"),
        || async {
            let o = api.get("w").await.ok()?;
            (o.data.pointer("/status/summary") == Some(&json!(summary)))
                .then(|| o.metadata.resource_version.clone().unwrap_or_default())
        },
    )
    .await
}

#[tokio::test]
async fn the_hosts_own_status_write_reconciles_nothing_other_changes_do() -> anyhow::Result<()> {
    let data = tempfile::tempdir()?;
    let server = ApiServer::start(Config {
        data_dir: data.path().into(),
        listen: ([127, 0, 0, 1], 0).into(),
        ..Default::default()
    })
    .await?;
    let client = kube::Client::try_from(server.kube_config().await?)?;
    let crds: Api<
        k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
    > = Api::all(client.clone());
    crds.create(&PostParams::default(), &serde_yaml::from_str(CRD)?)
        .await?;
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("bench.wasmlet.dev", "v1", "Widget"),
        "widgets",
    );
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &ar);
    eventually(Duration::from_secs(30), "widgets served", || async {
        api.list(&Default::default()).await.ok()
    })
    .await?;

    let recorder = Arc::new(Recorder {
        manifest: Manifest::parse(MANIFEST, Path::new("widget.toml"))?,
        calls: Mutex::new(Vec::new()),
    });
    let caches = Caches::new(Arc::new(Resolver::new(client.clone())));
    let (_controller, _tasks) = Controller::start(
        "widget",
        Arc::new(Fixed(recorder.clone())),
        caches,
        ControllerConfig::default(),
        ControllerMetrics::new(),
        Leadership::new(true),
    )
    .await?;

    let widget: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "bench.wasmlet.dev/v1", "kind": "Widget",
        "metadata": {"name": "w"}, "spec": {"size": 1},
    }))?;
    api.create(&PostParams::default(), &widget).await?;
    let mut own = vec![summary_written(&api, "size=1").await?];
    // Someone else changes the spec, then the status.
    api.patch(
        "w",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"size": 2}})),
    )
    .await?;
    own.push(summary_written(&api, "size=2").await?);
    api.patch_status(
        "w",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"summary": "tampered"}})),
    )
    .await?;
    own.push(summary_written(&api, "size=2").await?);
    // A last change by someone else: a reconcile queued by any earlier event
    // runs before (or merged with) the one this label causes.
    api.patch(
        "w",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"last": "change"}}})),
    )
    .await?;
    eventually(
        Duration::from_secs(30),
        "the label change reconciled",
        || async {
            recorder
                .calls()
                .iter()
                .any(|c| c.pointer("/metadata/labels/last").is_some())
                .then_some(())
        },
    )
    .await?;

    let calls = recorder.calls();
    let seen: Vec<String> = calls.iter().map(rv).collect();
    for w in &own {
        assert!(
            !seen.contains(w),
            "reconciled the host's own status write (resourceVersion {w}); calls at {seen:?}"
        );
    }
    assert_eq!(
        calls.len(),
        4,
        "one call per change (create, spec, status, label); calls at {seen:?}, own writes {own:?}"
    );
    assert_eq!(calls[1]["spec"]["size"], 2);
    assert_eq!(calls[2]["status"]["summary"], "tampered");
    Ok(())
}
