//! Watch and delete semantics as upstream's kube-apiserver has them (issue
//! 10): an object leaving a selector's scope is DELETED with the last state
//! that matched, the final DELETED after the last finalizer goes carries the
//! state as last stored, and DELETE answers per kind (the object, or a
//! `Status` naming it), and field selectors name the fields upstream lets
//! each kind select on.

use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Secret, ServiceAccount};
use kube::api::{
    Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use serde_json::json;
use wasmlet_e2e::*;

async fn next_event(
    s: &mut (impl futures::Stream<Item = kube::Result<WatchEvent<ConfigMap>>> + Unpin),
) -> anyhow::Result<WatchEvent<ConfigMap>> {
    Ok(tokio::time::timeout(Duration::from_secs(60), s.next())
        .await
        .map_err(|_| anyhow::anyhow!("no watch event within 60 s"))?
        .ok_or_else(|| anyhow::anyhow!("the watch ended"))??)
}

fn cm(name: &str, labels: serde_json::Value) -> anyhow::Result<ConfigMap> {
    Ok(serde_json::from_value(json!({
        "metadata": {"name": name, "labels": labels},
        "data": {"k": "v"},
    }))?)
}

#[tokio::test]
async fn leaving_a_selector_is_deleted_with_the_last_matching_state() -> anyhow::Result<()> {
    let plane = Plane::start(&[]).await?;
    let client = plane.client().await?;
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    let created = api
        .create(
            &PostParams::default(),
            &cm("leaver", json!({"tier": "web"}))?,
        )
        .await?;
    let wp = WatchParams::default()
        .labels("tier=web")
        .disable_bookmarks();
    let rv = created.metadata.resource_version.clone().unwrap();
    let mut events = api.watch(&wp, &rv).await?.boxed();

    let moved = api
        .patch(
            "leaver",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"tier": "db"}}, "data": {"k": "w"}})),
        )
        .await?;
    match next_event(&mut events).await? {
        WatchEvent::Deleted(o) => {
            let labels = o.metadata.labels.clone().unwrap_or_default();
            assert_eq!(
                labels.get("tier").map(String::as_str),
                Some("web"),
                "the DELETED object is the last state that matched the selector: {o:?}"
            );
            assert_eq!(
                o.data.as_ref().and_then(|d| d.get("k")).map(String::as_str),
                Some("v"),
                "the DELETED object carries the matching state's data: {o:?}"
            );
            assert_eq!(
                o.metadata.resource_version, moved.metadata.resource_version,
                "stamped with the revision of the change that moved it out"
            );
        }
        other => anyhow::bail!("expected DELETED, got {other:?}"),
    }
    Ok(())
}

#[tokio::test]
async fn the_final_deleted_carries_the_last_stored_finalizers() -> anyhow::Result<()> {
    let plane = Plane::start(&[]).await?;
    let client = plane.client().await?;
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    let mut obj = cm("held", json!({}))?;
    obj.metadata.finalizers = Some(vec!["example.com/hold".into()]);
    let created = api.create(&PostParams::default(), &obj).await?;
    let rv = created.metadata.resource_version.clone().unwrap();
    let wp = WatchParams::default()
        .fields("metadata.name=held")
        .disable_bookmarks();
    let mut events = api.watch(&wp, &rv).await?.boxed();

    api.delete("held", &DeleteParams::default()).await?;
    match next_event(&mut events).await? {
        WatchEvent::Modified(o) => assert!(o.metadata.deletion_timestamp.is_some()),
        other => anyhow::bail!("expected MODIFIED (deletionTimestamp set), got {other:?}"),
    }
    // Removing the last finalizer deletes the object; the update itself is
    // never stored, so watchers see the state as last stored.
    let answer = api
        .patch(
            "held",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await?;
    assert!(
        answer.metadata.finalizers.unwrap_or_default().is_empty(),
        "the PATCH is answered with the update as asked"
    );
    match next_event(&mut events).await? {
        WatchEvent::Deleted(o) => assert_eq!(
            o.metadata.finalizers.as_deref(),
            Some(&["example.com/hold".to_string()][..]),
            "the final DELETED carries the finalizer as last stored: {o:?}"
        ),
        other => anyhow::bail!("expected DELETED, got {other:?}"),
    }
    Ok(())
}

#[tokio::test]
async fn delete_answers_per_kind_as_upstream() -> anyhow::Result<()> {
    let plane = Plane::start(&[]).await?;
    let client = plane.client().await?;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let created = cms
        .create(&PostParams::default(), &cm("gone", json!({}))?)
        .await?;
    // ConfigMaps: a Status naming what was deleted.
    let answer = cms.delete("gone", &DeleteParams::default()).await?;
    let status = answer
        .right()
        .expect("a deleted ConfigMap is answered with a Status");
    let details = status.details.expect("the Status names the object");
    assert_eq!(details.name, "gone");
    assert_eq!(details.kind, "configmaps");
    assert_eq!(Some(details.uid), created.metadata.uid);

    // ServiceAccounts (ReturnDeletedObject upstream): the object itself.
    let sas: Api<ServiceAccount> = Api::namespaced(client, "default");
    sas.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "robot"}}))?,
    )
    .await?;
    let answer = sas.delete("robot", &DeleteParams::default()).await?;
    let sa = answer
        .left()
        .expect("a deleted ServiceAccount is answered with the object");
    assert_eq!(sa.metadata.name.as_deref(), Some("robot"));
    Ok(())
}

#[tokio::test]
async fn field_selectors_per_kind_as_upstream() -> anyhow::Result<()> {
    let plane = Plane::start(&[]).await?;
    let client = plane.client().await?;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), "default");
    for (name, ty) in [("plain", None), ("tls", Some("kubernetes.io/tls"))] {
        let mut s = json!({"metadata": {"name": name}, "data": {"tls.crt": "", "tls.key": ""}});
        if let Some(ty) = ty {
            s["type"] = json!(ty);
        }
        secrets
            .create(&PostParams::default(), &serde_json::from_value(s)?)
            .await?;
    }
    let names = |l: kube::core::ObjectList<Secret>| -> Vec<String> {
        l.items
            .into_iter()
            .filter_map(|s| s.metadata.name)
            .collect()
    };
    let tls = secrets
        .list(&ListParams::default().fields("type=kubernetes.io/tls"))
        .await?;
    assert_eq!(names(tls), ["tls"]);
    // `type` defaults to Opaque, and the selector sees the default.
    let opaque = secrets
        .list(&ListParams::default().fields("type=Opaque,metadata.name!=tls"))
        .await?;
    assert_eq!(names(opaque), ["plain"]);

    // A field the kind does not offer: 400, naming it.
    let err = secrets
        .list(&ListParams::default().fields("data.x=1"))
        .await;
    let s = expect_status(err, 400, "BadRequest");
    assert!(
        s.message.contains("field label not supported: data.x"),
        "{}",
        s.message
    );
    Ok(())
}

/// Foreground deletion deletes dependents that have no dependents of their
/// own directly, as upstream's garbage collector: a watcher of them sees one
/// DELETED each, no MODIFIED storm of finalizers.
#[tokio::test]
async fn foreground_deletion_deletes_leaf_dependents_directly() -> anyhow::Result<()> {
    let plane = Plane::start(&[]).await?;
    let client = plane.client().await?;
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    let owner = api
        .create(&PostParams::default(), &cm("owner", json!({}))?)
        .await?;
    let uid = owner.metadata.uid.clone().unwrap_or_default();
    let mut rv = String::new();
    for i in 0..3 {
        let mut d = cm(&format!("dep-{i}"), json!({"role": "dependent"}))?;
        d.metadata.owner_references = Some(vec![serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": uid,
            "blockOwnerDeletion": true,
        }))?]);
        rv = api
            .create(&PostParams::default(), &d)
            .await?
            .metadata
            .resource_version
            .unwrap_or_default();
    }
    let wp = WatchParams::default()
        .labels("role=dependent")
        .disable_bookmarks();
    let mut events = api.watch(&wp, &rv).await?.boxed();
    api.delete("owner", &DeleteParams::foreground()).await?;
    let mut seen = Vec::new();
    while seen
        .iter()
        .filter(|e: &&String| e.starts_with("DELETED"))
        .count()
        < 3
    {
        let e = next_event(&mut events).await?;
        seen.push(match e {
            WatchEvent::Added(o) => format!("ADDED {:?}", o.metadata.name),
            WatchEvent::Modified(o) => format!("MODIFIED {:?}", o.metadata.name),
            WatchEvent::Deleted(o) => format!("DELETED {:?}", o.metadata.name),
            other => format!("{other:?}"),
        });
    }
    assert!(
        seen.iter().all(|e| e.starts_with("DELETED")),
        "only DELETED events for leaf dependents: {seen:?}"
    );
    eventually(Duration::from_secs(60), "the owner to go", || async {
        api.get_opt("owner").await.ok()?.is_none().then_some(())
    })
    .await?;
    Ok(())
}
