//! LIST: label and field selectors, limit + continue over one consistent
//! snapshot, and resourceVersion / resourceVersionMatch.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::{Binding, ConfigMap, ObjectReference, Pod};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, VersionMatch};
use kube::core::ObjectMeta;
use serde_json::json;
use wasmlet_e2e::*;

fn names<K: kube::Resource>(items: &[K]) -> BTreeSet<String> {
    items.iter().filter_map(|o| o.meta().name.clone()).collect()
}

fn set(v: &[&str]) -> BTreeSet<String> {
    v.iter().map(|s| s.to_string()).collect()
}

#[tokio::test]
async fn label_selectors() -> anyhow::Result<()> {
    let plane = Plane::start(&[]).await?;
    let client = plane.client().await?;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    for (name, labels) in [
        ("web-prod", json!({"app": "web", "env": "prod"})),
        ("web-dev", json!({"app": "web", "env": "dev"})),
        (
            "db-prod",
            json!({"app": "db", "env": "prod", "tier": "data"}),
        ),
        ("nolabels", json!({})),
    ] {
        let cm: ConfigMap =
            serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}}))?;
        cms.create(&PostParams::default(), &cm).await?;
    }
    let sel = |s: &str| {
        let cms = cms.clone();
        let s = s.to_string();
        async move {
            names(
                &cms.list(&ListParams::default().labels(&s))
                    .await
                    .unwrap()
                    .items,
            )
        }
    };
    assert_eq!(sel("app=web").await, set(&["web-prod", "web-dev"]));
    assert_eq!(sel("app==web").await, set(&["web-prod", "web-dev"]));
    assert_eq!(
        sel("app!=web").await,
        set(&["db-prod", "nolabels"]),
        "!= matches objects without the label"
    );
    assert_eq!(
        sel("env in (prod,staging)").await,
        set(&["web-prod", "db-prod"])
    );
    assert_eq!(sel("env notin (prod)").await, set(&["web-dev", "nolabels"]));
    assert_eq!(sel("tier").await, set(&["db-prod"]));
    assert_eq!(
        sel("!tier").await,
        set(&["web-prod", "web-dev", "nolabels"])
    );
    assert_eq!(sel("app=web,env=prod").await, set(&["web-prod"]));
    assert_eq!(
        sel("app in (web,db),!tier,env!=dev").await,
        set(&["web-prod"])
    );
    assert_eq!(sel("app=nothing").await, set(&[]));
    // A malformed selector is a 400.
    expect_status(
        cms.list(&ListParams::default().labels("app in web")).await,
        400,
        "BadRequest",
    );
    Ok(())
}

#[tokio::test]
async fn field_selectors() -> anyhow::Result<()> {
    let plane = Plane::start(&[]).await?;
    let client = plane.client().await?;
    let nss: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    nss.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "other"}}))?,
    )
    .await?;
    for ns in ["default", "other"] {
        let cms: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
        for n in ["a", "b"] {
            cms.create(&PostParams::default(), &configmap(n, &[]))
                .await?;
        }
    }
    let all: Api<ConfigMap> = Api::all(client.clone());
    let keys = |items: &[ConfigMap]| -> BTreeSet<String> {
        items
            .iter()
            .map(|c| {
                format!(
                    "{}/{}",
                    c.metadata.namespace.clone().unwrap(),
                    c.metadata.name.clone().unwrap()
                )
            })
            .collect()
    };
    let l = all
        .list(&ListParams::default().fields("metadata.name=a"))
        .await?;
    assert_eq!(keys(&l.items), set(&["default/a", "other/a"]));
    let l = all
        .list(&ListParams::default().fields("metadata.namespace=other"))
        .await?;
    assert_eq!(keys(&l.items), set(&["other/a", "other/b"]));
    let l = all
        .list(&ListParams::default().fields("metadata.namespace!=other,metadata.name!=a"))
        .await?;
    assert_eq!(keys(&l.items), set(&["default/b"]));
    // Unsupported field: 400.
    expect_status(
        all.list(&ListParams::default().fields("data.x=1")).await,
        400,
        "BadRequest",
    );

    // Pods: spec.nodeName (set through the binding subresource, as a scheduler
    // does) and status.phase (set through /status, as a node agent does).
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    for n in ["p1", "p2", "p3"] {
        pods.create(&PostParams::default(), &pod(n)).await?;
    }
    let binding = Binding {
        metadata: ObjectMeta {
            name: Some("p1".into()),
            ..Default::default()
        },
        target: ObjectReference {
            kind: Some("Node".into()),
            name: Some("node-a".into()),
            ..Default::default()
        },
    };
    let _: serde_json::Value = pods
        .create_subresource("binding", "p1", &PostParams::default(), &binding)
        .await?;
    pods.patch_status(
        "p2",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"phase": "Running"}})),
    )
    .await?;
    let l = pods
        .list(&ListParams::default().fields("spec.nodeName=node-a"))
        .await?;
    assert_eq!(names(&l.items), set(&["p1"]));
    let l = pods
        .list(&ListParams::default().fields("spec.nodeName="))
        .await?;
    assert_eq!(
        names(&l.items),
        set(&["p2", "p3"]),
        "unscheduled pods have an empty nodeName"
    );
    let l = pods
        .list(&ListParams::default().fields("status.phase=Running"))
        .await?;
    assert_eq!(names(&l.items), set(&["p2"]));
    let l = pods
        .list(&ListParams::default().fields("status.phase!=Running,spec.nodeName!=node-a"))
        .await?;
    assert_eq!(names(&l.items), set(&["p3"]));
    Ok(())
}

#[tokio::test]
async fn limit_and_continue_page_one_consistent_snapshot() -> anyhow::Result<()> {
    let plane = Plane::start(&[]).await?;
    let client = plane.client().await?;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    for i in 0..25 {
        cms.create(
            &PostParams::default(),
            &configmap(&format!("cm-{i:02}"), &[("v", "0")]),
        )
        .await?;
    }
    let first = cms.list(&ListParams::default().limit(10)).await?;
    assert_eq!(first.items.len(), 10);
    let list_rv = first.metadata.resource_version.clone().unwrap();
    assert_eq!(first.metadata.remaining_item_count, Some(15));
    let token = first.metadata.continue_.clone().expect("a continue token");

    // Writes between pages: a delete of an unseen object, a new one, an update.
    cms.delete("cm-20", &DeleteParams::default()).await?;
    cms.create(&PostParams::default(), &configmap("cm-99", &[]))
        .await?;
    cms.patch(
        "cm-15",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"v": "1"}})),
    )
    .await?;

    let mut all = first.items.clone();
    let mut token = Some(token);
    while let Some(t) = token {
        let page = cms
            .list(&ListParams::default().limit(10).continue_token(&t))
            .await?;
        assert_eq!(
            page.metadata.resource_version.as_deref(),
            Some(list_rv.as_str()),
            "pages share the first page's revision"
        );
        assert!(page.items.len() <= 10);
        all.extend(page.items);
        token = page.metadata.continue_.filter(|c| !c.is_empty());
    }
    let got: Vec<String> = all
        .iter()
        .map(|c| c.metadata.name.clone().unwrap())
        .collect();
    let want: Vec<String> = (0..25).map(|i| format!("cm-{i:02}")).collect();
    assert_eq!(
        got, want,
        "the paged list is the snapshot at the first page, without duplicates"
    );
    let cm15 = all
        .iter()
        .find(|c| c.metadata.name.as_deref() == Some("cm-15"))
        .unwrap();
    assert_eq!(
        cm15.data.as_ref().unwrap()["v"],
        "0",
        "a later update leaked into an older snapshot"
    );

    // A fresh list sees the writes.
    let now = cms.list(&ListParams::default()).await?;
    let now_names = names(&now.items);
    assert!(now_names.contains("cm-99") && !now_names.contains("cm-20"));
    // Labels with paging: limit counts matching objects.
    let bad = cms
        .list(&ListParams::default().limit(5).continue_token("garbage"))
        .await;
    expect_status(bad, 400, "BadRequest");
    Ok(())
}

#[tokio::test]
async fn continue_token_older_than_history_is_gone() -> anyhow::Result<()> {
    let plane = Plane::start(&["--watch-history", "5"]).await?;
    let client = plane.client().await?;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    for i in 0..6 {
        cms.create(&PostParams::default(), &configmap(&format!("cm-{i}"), &[]))
            .await?;
    }
    let first = cms.list(&ListParams::default().limit(2)).await?;
    for i in 0..10 {
        cms.create(
            &PostParams::default(),
            &configmap(&format!("later-{i}"), &[]),
        )
        .await?;
    }
    let s = expect_status(
        cms.list(
            &ListParams::default()
                .limit(2)
                .continue_token(first.metadata.continue_.as_deref().unwrap()),
        )
        .await,
        410,
        "Expired",
    );
    assert!(s.message.contains("continue"), "{}", s.message);
    Ok(())
}

#[tokio::test]
async fn resource_version_match_exact_and_not_older_than() -> anyhow::Result<()> {
    let plane = Plane::start(&[]).await?;
    let client = plane.client().await?;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let a = cms
        .create(&PostParams::default(), &configmap("a", &[("v", "1")]))
        .await?;
    let rv1 = a.metadata.resource_version.clone().unwrap();
    cms.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"v": "2"}})),
    )
    .await?;
    cms.create(&PostParams::default(), &configmap("b", &[]))
        .await?;
    cms.delete("a", &DeleteParams::default()).await?;

    // Exact: the state at rv1 (a with v=1, no b), with that revision.
    let old = cms
        .list(&ListParams::default().at(&rv1).matching(VersionMatch::Exact))
        .await?;
    assert_eq!(old.metadata.resource_version.as_deref(), Some(rv1.as_str()));
    assert_eq!(names(&old.items), set(&["a"]));
    assert_eq!(old.items[0].data.as_ref().unwrap()["v"], "1");
    assert_eq!(
        old.items[0].metadata.resource_version.as_deref(),
        Some(rv1.as_str())
    );

    // NotOlderThan: at least as new as rv1: the current state.
    let now = cms
        .list(
            &ListParams::default()
                .at(&rv1)
                .matching(VersionMatch::NotOlderThan),
        )
        .await?;
    assert_eq!(names(&now.items), set(&["b"]));
    let now_rv: u64 = now.metadata.resource_version.clone().unwrap().parse()?;
    assert!(now_rv >= rv1.parse()?);
    // resourceVersion=0: any state (here: current).
    let any = cms.list(&ListParams::default().match_any()).await?;
    assert_eq!(names(&any.items), set(&["b"]));
    // A revision from the future: upstream's 504 Timeout "Too large resource version".
    let future = (now_rv + 1000).to_string();
    let cms: Api<ConfigMap> = Api::namespaced(plane.client_without_retries().await?, "default");
    let s = expect_status(
        cms.list(
            &ListParams::default()
                .at(&future)
                .matching(VersionMatch::NotOlderThan),
        )
        .await,
        504,
        "Timeout",
    );
    assert!(
        s.message.contains("Too large resource version"),
        "{}",
        s.message
    );
    // resourceVersionMatch without resourceVersion: 400.
    let (code, body) = plane.raw(
        "GET",
        "/api/v1/namespaces/default/configmaps?resourceVersionMatch=Exact",
        None,
        None,
    )?;
    assert_eq!((code, body["reason"].as_str()), (400, Some("BadRequest")));
    Ok(())
}

#[tokio::test]
async fn exact_list_older_than_history_is_gone() -> anyhow::Result<()> {
    let plane = Plane::start(&["--watch-history", "5"]).await?;
    let client = plane.client().await?;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let a = cms
        .create(&PostParams::default(), &configmap("a", &[]))
        .await?;
    for i in 0..10 {
        cms.create(
            &PostParams::default(),
            &configmap(&format!("later-{i}"), &[]),
        )
        .await?;
    }
    let rv = a.metadata.resource_version.unwrap();
    expect_status(
        cms.list(&ListParams::default().at(&rv).matching(VersionMatch::Exact))
            .await,
        410,
        "Expired",
    );
    Ok(())
}
