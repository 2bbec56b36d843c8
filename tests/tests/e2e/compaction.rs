//! Memory and disk given back (issue 10): watch history older than its age
//! limit is dropped (a watch from before it gets 410 Gone, as from a
//! compacted etcd), and after a burst of writes and deletes the database file
//! shrinks again.

use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, ListParams, PostParams, WatchEvent, WatchParams};
use serde_json::json;
use wasmlet_e2e::*;

/// The database and its write-ahead log, in bytes.
fn db_size(plane: &Plane) -> u64 {
    ["state.db", "state.db-wal"]
        .iter()
        .filter_map(|f| std::fs::metadata(plane.data_dir().join(f)).ok())
        .map(|m| m.len())
        .sum()
}

#[tokio::test]
async fn old_history_expires_and_the_database_shrinks_after_a_burst() -> anyhow::Result<()> {
    let plane = Plane::start(&["--watch-history-seconds", "1"]).await?;
    let client = plane.client().await?;
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    let before = db_size(&plane);

    // A burst: 200 objects of 64 KiB, then all deleted.
    let blob = "x".repeat(64 * 1024);
    let mut first_rv = None;
    for i in 0..200 {
        let cm: ConfigMap = serde_json::from_value(json!({
            "metadata": {"name": format!("big-{i}"), "labels": {"burst": "yes"}},
            "data": {"blob": blob},
        }))?;
        let c = api.create(&PostParams::default(), &cm).await?;
        first_rv.get_or_insert(c.metadata.resource_version.unwrap_or_default());
    }
    let peak = db_size(&plane);
    assert!(
        peak > before + 10 * 1024 * 1024,
        "the burst grew the database ({before} → {peak} bytes)"
    );
    api.delete_collection(
        &DeleteParams::default(),
        &ListParams::default().labels("burst=yes"),
    )
    .await?;

    // The history forgets the burst: a watch from its first revision is 410.
    let first_rv = first_rv.unwrap_or_default();
    eventually(
        Duration::from_secs(60),
        "the burst to leave the history",
        || {
            let api = api.clone();
            let rv = first_rv.clone();
            async move {
                let mut s = api
                    .watch(&WatchParams::default().disable_bookmarks(), &rv)
                    .await
                    .ok()?
                    .boxed();
                // The first event comes at once (410, or the history's
                // replay); the bound only retries a watch that says nothing.
                match tokio::time::timeout(Duration::from_secs(10), s.next()).await {
                    Ok(Some(Ok(WatchEvent::Error(e)))) if e.code == 410 => Some(()),
                    _ => None,
                }
            }
        },
    )
    .await?;
    // And the file gives the space back.
    let after = eventually(
        Duration::from_secs(30),
        "the database to shrink",
        || async {
            let now = db_size(&plane);
            (now < peak / 4).then_some(now)
        },
    )
    .await?;
    eprintln!("database: {before} bytes before, {peak} at peak, {after} after");
    // Nothing current was lost on the way.
    api.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "after"}}))?,
    )
    .await?;
    assert!(api.get("after").await.is_ok());
    Ok(())
}
