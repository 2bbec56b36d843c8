//! One reconcile per change (issue 16): the watch event caused by the host's
//! own status write does not call the reconciler again, while every change by
//! someone else (spec, status, metadata) still does. In process: the embedded
//! API server, the shared caches and the controller engine, with a native
//! reconciler that records every object it is called with.
#![allow(clippy::unwrap_used)] // a bench or test: a failure should stop it loudly

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use serde_json::{Value, json};
use wasmlet::internals::Caches;
use wasmlet::internals::CallReport;
use wasmlet::internals::ControllerMetrics;
use wasmlet::internals::Leadership;
use wasmlet::internals::Manifest;
use wasmlet::internals::Resolver;
use wasmlet::internals::{Call, Fixed, Reconciler};
use wasmlet::internals::{Controller, ControllerConfig};
use wasmlet::internals::{Finalized, Reconciled};
use wasmlet_apiserver::{ApiServer, Config};
use wasmlet_e2e::eventually;

const CRD: &str = include_str!("../../../guests/testing/widget/widget.crd.yaml");
const MANIFEST: &str = include_str!("../../../guests/testing/widget/widget.toml");

/// guests/testing/widget's logic, natively, remembering every object it saw.
struct Recorder {
    manifest: Manifest,
    calls: Mutex<Vec<Value>>,
}

impl Recorder {
    fn new() -> anyhow::Result<Arc<Recorder>> {
        Ok(Arc::new(Recorder {
            manifest: Manifest::parse(MANIFEST, Path::new("widget.toml"))?,
            calls: Mutex::new(Vec::new()),
        }))
    }

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

/// The embedded API server with the Widget kind served; widgets are made in
/// namespace `default` through the returned Api.
async fn plane_with_widgets(
    dir: &Path,
) -> anyhow::Result<(ApiServer, kube::Client, Api<DynamicObject>)> {
    let server = ApiServer::start(Config {
        data_dir: dir.into(),
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
    Ok((server, client, api))
}

/// The controller engine running `recorder` as the widget reconciler; it
/// stops when the returned value is dropped.
async fn start_widget_controller(
    caches: Arc<Caches>,
    recorder: &Arc<Recorder>,
) -> anyhow::Result<impl Sized> {
    Ok(Controller::start(
        "widget",
        Arc::new(Fixed(recorder.clone())),
        caches,
        ControllerConfig::default(),
        ControllerMetrics::new(),
        Leadership::new(true),
    )
    .await?)
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
    let (_server, client, api) = plane_with_widgets(data.path()).await?;
    let recorder = Recorder::new()?;
    let caches = Caches::new(Arc::new(Resolver::new(client.clone())));
    let _running = start_widget_controller(caches, &recorder).await?;

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

/// The host starts the reconciled kinds' watches while the plugins compile,
/// so a controller may start halfway through its kind's first list: the
/// objects of the pages already delivered (not in the store until the list
/// completes) must be reconciled too. 2,500 objects are five list pages.
#[tokio::test]
async fn a_controller_started_during_the_first_list_reconciles_every_object() -> anyhow::Result<()>
{
    use futures::StreamExt;
    const N: usize = 2500;
    let data = tempfile::tempdir()?;
    let (_server, client, api) = plane_with_widgets(data.path()).await?;
    futures::stream::iter(0..N)
        .map(|i| {
            let api = api.clone();
            async move {
                let w: DynamicObject = serde_json::from_value(json!({
                    "apiVersion": "bench.wasmlet.dev/v1", "kind": "Widget",
                    "metadata": {"name": format!("w{i}")}, "spec": {"size": i},
                }))?;
                api.create(&PostParams::default(), &w).await?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(16)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<anyhow::Result<Vec<()>>>()?;

    let caches = Caches::new(Arc::new(Resolver::new(client.clone())));
    let cache = caches.cache("bench.wasmlet.dev/v1", "Widget").await?;
    let mut first = cache.subscribe();
    tokio::time::timeout(Duration::from_secs(30), async {
        while !matches!(
            first.recv().await,
            Ok(wasmlet::internals::CacheEvent::Applied { initial: true, .. })
        ) {}
    })
    .await?;
    let listing = !cache.is_synced();

    let recorder = Recorder::new()?;
    let _running = start_widget_controller(caches, &recorder).await?;
    let reconciled = || {
        recorder
            .calls()
            .iter()
            .filter_map(|c| {
                c.pointer("/metadata/name")
                    .and_then(Value::as_str)
                    .map(String::from)
            })
            .collect::<std::collections::BTreeSet<String>>()
    };
    let done = eventually(
        Duration::from_secs(120),
        "every widget reconciled",
        || async { (reconciled().len() == N).then_some(()) },
    )
    .await;
    assert!(
        done.is_ok(),
        "{} of {N} widgets reconciled (the controller started {} the first list)",
        reconciled().len(),
        if listing { "during" } else { "after" }
    );
    Ok(())
}
