//! The reconciler half of the SDK, natively against the fake host: the typed client,
//! the export glue (what the host receives), and error mapping.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use kube::ResourceExt;
use serde_json::json;
use wasmlet_sdk::bindings::reconciler_exports as raw;
use wasmlet_sdk::prelude::*;
use wasmlet_sdk::testing::FakeHost;

fn config_map(name: &str, labels: serde_json::Value, data: serde_json::Value) -> serde_json::Value {
    json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": { "name": name, "namespace": "ns", "labels": labels },
        "data": data,
    })
}

/// Counts the keys of ConfigMaps labelled with the reconciled map's name.
fn reconcile(obj: Arc<ConfigMap>, ctx: &Context) -> Result<Action, Error> {
    let selector = format!("summary={}", obj.name_any());
    let maps: Vec<ConfigMap> = ctx
        .client()
        .list(&ListParams::namespaced("ns").labels(&selector))?;
    let keys: usize = maps
        .iter()
        .map(|m| m.data.as_ref().map_or(0, |d| d.len()))
        .sum();
    ctx.info("listed");
    ctx.event(Event::normal("Summarised", "Reconcile").note(format!("{keys} keys")))?;
    Ok(Action::requeue(Duration::from_millis(1500))
        .status(json!({ "keys": keys }))
        .condition(
            Condition::is_true("Summarised")
                .reason("Listed")
                .message(format!("{keys} keys")),
        ))
}

wasmlet_sdk::reconciler!(ConfigMap, reconcile, conditions = ["Summarised"]);

#[test]
fn reconcile_glue_encodes_status_conditions_and_requeue() {
    let host = FakeHost::new();
    host.insert(config_map(
        "a",
        json!({ "summary": "owner" }),
        json!({ "x": "1", "y": "2" }),
    ));
    host.insert(config_map(
        "b",
        json!({ "summary": "owner" }),
        json!({ "z": "3" }),
    ));
    host.insert(config_map(
        "c",
        json!({ "summary": "other" }),
        json!({ "w": "4" }),
    ));
    let _guard = host.install();

    let owner = config_map("owner", json!({}), json!({})).to_string();
    let out = wasmlet_sdk::reconciler::__reconcile::<ConfigMap>(owner, reconcile)
        .expect("reconcile succeeds");
    assert_eq!(out.requeue_after_ms, Some(1500));
    let status: serde_json::Value = serde_json::from_str(out.status.as_deref().unwrap()).unwrap();
    assert_eq!(status, json!({ "keys": 3 }));
    assert_eq!(out.conditions.len(), 1);
    assert_eq!(out.conditions[0].type_, "Summarised");
    assert!(matches!(
        out.conditions[0].status,
        raw::ConditionStatus::True
    ));
    assert_eq!(out.conditions[0].message, "3 keys");
    // The event defaults to the reconciled object.
    assert_eq!(
        host.events(),
        vec![(
            "Normal".to_owned(),
            "Summarised".to_owned(),
            "3 keys".to_owned()
        )]
    );
    assert_eq!(host.logs(), vec![("info".to_owned(), "listed".to_owned())]);
}

/// The applied generation travels in the status the host reads, under the
/// key the host takes out of it, beside the guest's own fields or alone.
#[test]
fn an_applied_generation_goes_to_the_host_in_the_status() {
    let _guard = FakeHost::new().install();
    let owner = config_map("owner", json!({}), json!({})).to_string();
    let status = |f: fn(Arc<ConfigMap>, &Context) -> Result<Action, Error>| {
        let out = wasmlet_sdk::reconciler::__reconcile::<ConfigMap>(owner.clone(), f).unwrap();
        serde_json::from_str::<serde_json::Value>(out.status.as_deref().unwrap()).unwrap()
    };
    assert_eq!(
        status(|_, _| Ok(Action::done()
            .status(json!({"keys": 1}))
            .applied_generation(2))),
        json!({"keys": 1, "wasmlet.dev/appliedGeneration": 2})
    );
    assert_eq!(
        status(|_, _| Ok(Action::done().applied_generation(4))),
        json!({"wasmlet.dev/appliedGeneration": 4})
    );
}

#[test]
fn an_object_that_does_not_decode_is_a_terminal_error() {
    let _guard = FakeHost::new().install();
    let err = wasmlet_sdk::reconciler::__reconcile::<ConfigMap>("{\"kind\": 3}".into(), reconcile)
        .unwrap_err();
    assert!(matches!(err.kind, raw::ErrorKind::Terminal));
    assert_eq!(err.reason, "InvalidObject");
}

#[test]
fn denied_calls_surface_as_terminal_errors_with_status_kept() {
    let host = FakeHost::new();
    host.deny("Secret");
    let _guard = host.install();
    let f = |_obj: Arc<ConfigMap>, ctx: &Context| -> Result<Action, Error> {
        let e = ctx.client().list::<Secret>(&ListParams::all()).unwrap_err();
        assert!(matches!(e, ClientError::Denied(_)));
        Err(Error::from(e).condition(Condition::is_false("Summarised").reason("Forbidden")))
    };
    let err = wasmlet_sdk::reconciler::__reconcile::<ConfigMap>(
        config_map("o", json!({}), json!({})).to_string(),
        f,
    )
    .unwrap_err();
    assert!(matches!(err.kind, raw::ErrorKind::Terminal));
    assert_eq!(err.reason, "Forbidden");
    assert_eq!(err.conditions.len(), 1);
}

#[test]
fn conflicts_are_transient_and_retry_soon() {
    let e = ClientError::Conflict("stale".into());
    assert!(e.is_retry_soon());
    assert_eq!(
        Error::from(e).kind,
        wasmlet_sdk::reconciler::ErrorKind::Transient
    );
    assert!(ClientError::TooManyRequests.is_retry_soon());
    assert!(!ClientError::NotFound.is_retry_soon());
}

#[test]
fn typed_client_round_trips() {
    let host = FakeHost::new();
    let _guard = host.install();
    let client = Client::new();
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": { "name": "p", "namespace": "ns", "labels": { "app": "web" } },
    }))
    .unwrap();
    let created = client.create(&pod).unwrap();
    assert!(created.metadata.resource_version.is_some());
    assert_eq!(client.get::<Pod>("ns", "p").unwrap().name_any(), "p");
    assert!(client.get_opt::<Pod>("ns", "missing").unwrap().is_none());
    assert_eq!(
        client.get::<Pod>("ns", "missing").unwrap_err(),
        ClientError::NotFound
    );
    let patched: Pod = client
        .patch(
            "ns",
            "p",
            &Patch::merge(json!({ "metadata": { "labels": { "seen": "yes" } } })),
        )
        .unwrap();
    assert_eq!(
        patched.labels().get("seen").map(String::as_str),
        Some("yes")
    );
    assert_eq!(
        client
            .list::<Pod>(&ListParams::all().labels("app=web,seen"))
            .unwrap()
            .len(),
        1
    );
    assert_eq!(
        client
            .list::<Pod>(&ListParams::all().labels("app!=web"))
            .unwrap()
            .len(),
        0
    );
    assert_eq!(
        client
            .list::<Pod>(&ListParams::all().fields("metadata.name=p"))
            .unwrap()
            .len(),
        1
    );
    // A stale update conflicts.
    let mut stale = created.clone();
    stale.metadata.labels = None;
    assert!(matches!(
        client.update(&stale),
        Err(ClientError::Conflict(_))
    ));
    client.evict("ns", "p").unwrap();
    assert_eq!(
        client.delete::<Pod>("ns", "p", &DeleteParams::background()),
        Err(ClientError::NotFound)
    );
    assert_eq!(
        host.writes(),
        vec!["create Pod ns/p", "patch Pod ns/p", "evict Pod ns/p"]
    );
}
