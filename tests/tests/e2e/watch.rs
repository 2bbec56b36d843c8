//! WATCH: from a resourceVersion, event order, bookmarks, timeoutSeconds,
//! 410 for compacted revisions, LIST-then-WATCH consistency under writes,
//! many watchers, a slow watcher, and `kube::runtime::watcher` across a
//! server restart.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{
    Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use kube::runtime::wait::Condition;
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;
use wasmlet_e2e::*;

type Events = futures::stream::BoxStream<'static, kube::Result<WatchEvent<ConfigMap>>>;

async fn watch(api: &Api<ConfigMap>, wp: &WatchParams, rv: &str) -> anyhow::Result<Events> {
    Ok(api.watch(wp, rv).await?.boxed())
}

/// Watch parameters without bookmarks (kube's `WatchParams` asks for them by default).
fn quiet() -> WatchParams {
    WatchParams::default().disable_bookmarks()
}

/// The next event, failing after a minute of silence (every caller expects
/// one at once: the bound only turns a lost event into a failure).
async fn next(s: &mut Events) -> WatchEvent<ConfigMap> {
    tokio::time::timeout(Duration::from_secs(60), s.next())
        .await
        .expect("no watch event within 60 s")
        .expect("the watch ended")
        .expect("a decodable event")
}

/// The next event that is not a bookmark: a watch with bookmarks gets one
/// every 5 s, which on a loaded machine can fall between two writes.
async fn next_change(s: &mut Events) -> WatchEvent<ConfigMap> {
    loop {
        match next(s).await {
            WatchEvent::Bookmark(_) => continue,
            e => return e,
        }
    }
}

fn describe(e: &WatchEvent<ConfigMap>) -> (String, String) {
    match e {
        WatchEvent::Added(o) => ("ADDED".into(), o.metadata.name.clone().unwrap()),
        WatchEvent::Modified(o) => ("MODIFIED".into(), o.metadata.name.clone().unwrap()),
        WatchEvent::Deleted(o) => ("DELETED".into(), o.metadata.name.clone().unwrap()),
        WatchEvent::Bookmark(b) => ("BOOKMARK".into(), b.metadata.resource_version.clone()),
        WatchEvent::Error(s) => ("ERROR".into(), format!("{} {}", s.code, s.reason)),
    }
}

fn rv_of_event(e: &WatchEvent<ConfigMap>) -> u64 {
    match e {
        WatchEvent::Added(o) | WatchEvent::Modified(o) | WatchEvent::Deleted(o) => rv_of(o),
        WatchEvent::Bookmark(b) => b.metadata.resource_version.parse().unwrap(),
        WatchEvent::Error(_) => 0,
    }
}

#[tokio::test]
async fn watch_from_resource_version_in_order() -> anyhow::Result<()> {
    let plane = Plane::start(&[]).await?;
    let client = plane.client().await?;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    cms.create(&PostParams::default(), &configmap("before", &[]))
        .await?;
    let start = cms
        .list(&ListParams::default())
        .await?
        .metadata
        .resource_version
        .unwrap();

    // Writes before the watch starts, after `start`: replayed from history.
    cms.create(&PostParams::default(), &configmap("a", &[]))
        .await?;
    cms.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"x": "1"}})),
    )
    .await?;
    let mut s = watch(&cms, &quiet(), &start).await?;
    // Writes after it starts: live.
    cms.create(&PostParams::default(), &configmap("b", &[]))
        .await?;
    cms.delete("a", &DeleteParams::default()).await?;
    cms.patch(
        "b",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"y": "2"}})),
    )
    .await?;

    let mut got = Vec::new();
    let mut last = start.parse::<u64>()?;
    for _ in 0..5 {
        let e = next(&mut s).await;
        let rv = rv_of_event(&e);
        assert!(rv > last, "event rv {rv} not after {last}");
        last = rv;
        got.push(describe(&e));
    }
    let want: Vec<(String, String)> = [
        ("ADDED", "a"),
        ("MODIFIED", "a"),
        ("ADDED", "b"),
        ("DELETED", "a"),
        ("MODIFIED", "b"),
    ]
    .iter()
    .map(|(t, n)| (t.to_string(), n.to_string()))
    .collect();
    assert_eq!(got, want);
    // Nothing else was written: the next event is a marker written now
    // (events come in revision order, so an extra one would come first).
    cms.create(&PostParams::default(), &configmap("marker", &[]))
        .await?;
    assert_eq!(
        describe(&next(&mut s).await),
        ("ADDED".into(), "marker".into()),
        "an extra event arrived (nothing was written)"
    );
    cms.delete("marker", &DeleteParams::default()).await?;

    // Without a resourceVersion, the watch starts with the current objects as ADDED.
    let mut s = watch(&cms, &quiet(), "0").await?;
    let mut initial = BTreeSet::new();
    for _ in 0..2 {
        let (t, n) = describe(&next(&mut s).await);
        assert_eq!(t, "ADDED");
        initial.insert(n);
    }
    assert_eq!(initial, ["b".to_string(), "before".to_string()].into());

    // A label-selected watch sees an object leave its selector as DELETED.
    let mut s = watch(&cms, &quiet().labels("app=x"), &last.to_string()).await?;
    cms.patch(
        "b",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"app": "x"}}})),
    )
    .await?;
    cms.patch(
        "before",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"z": "1"}})),
    )
    .await?;
    cms.patch(
        "b",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"app": "y"}}})),
    )
    .await?;
    assert_eq!(describe(&next(&mut s).await), ("ADDED".into(), "b".into()));
    assert_eq!(
        describe(&next(&mut s).await),
        ("DELETED".into(), "b".into())
    );
    Ok(())
}

#[tokio::test]
async fn bookmarks_and_timeout() -> anyhow::Result<()> {
    let plane = Plane::start(&[]).await?;
    let client = plane.client().await?;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let c = cms
        .create(&PostParams::default(), &configmap("a", &[]))
        .await?;
    let rv = c.metadata.resource_version.clone().unwrap();

    // Two idle watches from the same revision: without and with bookmarks.
    // `without` is opened first, so a bookmark it wrongly got would be due
    // before the one `with` gets. Their timeouts are not under test: long
    // enough to outlast every step below on a loaded machine.
    let mut without = watch(
        &cms,
        &WatchParams::default().disable_bookmarks().timeout(600),
        &rv,
    )
    .await?;
    let mut with = watch(&cms, &WatchParams::default().timeout(600), &rv).await?;
    let later = cms
        .create(&PostParams::default(), &configmap("b", &[]))
        .await?;
    assert_eq!(
        describe(&next_change(&mut with).await),
        ("ADDED".into(), "b".into())
    );
    assert_eq!(
        describe(&next(&mut without).await),
        ("ADDED".into(), "b".into())
    );

    // timeoutSeconds ends the stream (cleanly, no error), and not at once:
    // a write after it opened still reaches it. (10 s: the write and its
    // event must come within it, on a loaded machine too; the server's
    // default is 30 minutes, so the end below is this timeout's. No
    // bookmarks: one would be due after 5 s.)
    let mut s = watch(
        &cms,
        &quiet().timeout(10),
        &later.metadata.resource_version.clone().unwrap(),
    )
    .await?;
    cms.create(&PostParams::default(), &configmap("c", &[]))
        .await?;
    assert_eq!(describe(&next(&mut s).await), ("ADDED".into(), "c".into()));
    let end = tokio::time::timeout(Duration::from_secs(120), s.next())
        .await
        .expect("the watch outlived its timeout");
    assert!(
        end.is_none(),
        "expected the stream to end, got {:?}",
        end.map(|e| e.map(|e| describe(&e)))
    );
    assert_eq!(
        describe(&next_change(&mut with).await),
        ("ADDED".into(), "c".into())
    );
    assert_eq!(
        describe(&next(&mut without).await),
        ("ADDED".into(), "c".into())
    );

    // allowWatchBookmarks: the idle watch is told the current revision.
    // Bookmarks come every 5 s (the bound only catches none at all).
    let e = tokio::time::timeout(Duration::from_secs(60), with.next())
        .await
        .expect("no bookmark in 60 s")
        .unwrap()?;
    match e {
        WatchEvent::Bookmark(b) => {
            let brv: u64 = b.metadata.resource_version.parse()?;
            assert!(
                brv >= rv_of(&later),
                "bookmark {brv} behind the last event {}",
                rv_of(&later)
            );
        }
        other => panic!("expected a bookmark, got {:?}", describe(&other)),
    }
    // Without allowWatchBookmarks, none arrived: the next event is a write
    // made after `with` got its bookmark.
    cms.create(&PostParams::default(), &configmap("d", &[]))
        .await?;
    assert_eq!(
        describe(&next(&mut without).await),
        ("ADDED".into(), "d".into()),
        "an unasked-for event arrived"
    );
    Ok(())
}

#[tokio::test]
async fn watch_older_than_history_gets_410() -> anyhow::Result<()> {
    let plane = Plane::start(&["--watch-history", "5"]).await?;
    let client = plane.client().await?;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let first = cms
        .create(&PostParams::default(), &configmap("first", &[]))
        .await?;
    for i in 0..10 {
        cms.create(&PostParams::default(), &configmap(&format!("c{i}"), &[]))
            .await?;
    }
    let mut s = watch(&cms, &quiet(), &first.metadata.resource_version.unwrap()).await?;
    match next(&mut s).await {
        WatchEvent::Error(status) => {
            assert_eq!(status.code, 410, "{status:?}");
            assert_eq!(status.reason, "Expired");
        }
        other => panic!("expected a 410 ERROR event, got {:?}", describe(&other)),
    }
    // A recent revision still works.
    let recent = cms
        .list(&ListParams::default())
        .await?
        .metadata
        .resource_version
        .unwrap();
    let mut s = watch(&cms, &quiet(), &recent).await?;
    cms.create(&PostParams::default(), &configmap("new", &[]))
        .await?;
    assert_eq!(
        describe(&next(&mut s).await),
        ("ADDED".into(), "new".into())
    );
    Ok(())
}

/// Objects by name → data["v"], as a client would rebuild them.
type State = BTreeMap<String, String>;

fn state_of(items: &[ConfigMap]) -> State {
    items
        .iter()
        .map(|c| {
            (
                c.metadata.name.clone().unwrap(),
                c.data
                    .as_ref()
                    .and_then(|d| d.get("v").cloned())
                    .unwrap_or_default(),
            )
        })
        .collect()
}

#[tokio::test]
async fn list_then_watch_loses_nothing_while_writes_continue() -> anyhow::Result<()> {
    let plane = Plane::start(&[]).await?;
    let client = plane.client().await?;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    for i in 0..20 {
        cms.create(
            &PostParams::default(),
            &configmap(&format!("c{i}"), &[("v", "0")]),
        )
        .await?;
    }
    // Writers: creates, updates and deletes from 4 tasks, counting their writes.
    let (done_tx, mut done_rx) = tokio::sync::watch::channel(0usize);
    let mut writers = Vec::new();
    for w in 0..4 {
        let cms = cms.clone();
        let done_tx = done_tx.clone();
        writers.push(tokio::spawn(async move {
            for i in 0..40 {
                let name = format!("c{}", (i * 7 + w * 5) % 30);
                let v = format!("{w}-{i}");
                let r = match i % 4 {
                    0 | 1 => cms
                        .patch(
                            &name,
                            &PatchParams::default(),
                            &Patch::Merge(json!({"data": {"v": v}})),
                        )
                        .await
                        .map(|_| ()),
                    2 => cms
                        .delete(&name, &DeleteParams::default())
                        .await
                        .map(|_| ()),
                    _ => cms
                        .create(&PostParams::default(), &configmap(&name, &[("v", &v)]))
                        .await
                        .map(|_| ()),
                };
                // 404 / 409 AlreadyExists are expected in the race.
                if let Err(kube::Error::Api(s)) = &r {
                    assert!(s.code == 404 || s.code == 409, "{s:?}");
                } else {
                    r.unwrap();
                }
                done_tx.send_modify(|n| *n += 1);
            }
        }));
    }
    // LIST in the middle of the writes (once some are in), then WATCH from its revision.
    tokio::time::timeout(Duration::from_secs(30), done_rx.wait_for(|n| *n >= 10))
        .await
        .expect("the writers made no progress in 30 s")?;
    let list = cms.list(&ListParams::default()).await?;
    let list_rv: u64 = list.metadata.resource_version.clone().unwrap().parse()?;
    let mut state = state_of(&list.items);
    let mut s = watch(&cms, &quiet(), &list_rv.to_string()).await?;
    for w in writers {
        w.await?;
    }
    let final_list = cms.list(&ListParams::default()).await?;
    let final_rv: u64 = final_list
        .metadata
        .resource_version
        .clone()
        .unwrap()
        .parse()?;

    let mut last = list_rv;
    let mut seen = BTreeSet::new();
    while last < final_rv {
        let e = next(&mut s).await;
        let rv = rv_of_event(&e);
        assert!(rv > last, "reordered or duplicated: {rv} after {last}");
        assert!(seen.insert(rv));
        last = rv;
        match e {
            WatchEvent::Added(o) | WatchEvent::Modified(o) => {
                state.insert(
                    o.metadata.name.clone().unwrap(),
                    o.data
                        .as_ref()
                        .and_then(|d| d.get("v").cloned())
                        .unwrap_or_default(),
                );
            }
            WatchEvent::Deleted(o) => {
                assert!(
                    state.remove(o.metadata.name.as_deref().unwrap()).is_some(),
                    "DELETED for an unknown object"
                );
            }
            other => panic!("unexpected {:?}", describe(&other)),
        }
    }
    assert_eq!(last, final_rv);
    assert_eq!(
        state,
        state_of(&final_list.items),
        "LIST + WATCH does not rebuild the final state"
    );
    Ok(())
}

#[tokio::test]
async fn two_hundred_watchers_see_every_event() -> anyhow::Result<()> {
    let plane = Plane::start(&[]).await?;
    let client = plane.client().await?;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let rv = cms
        .list(&ListParams::default())
        .await?
        .metadata
        .resource_version
        .unwrap();
    let mut streams = Vec::new();
    for _ in 0..200 {
        streams.push(watch(&cms, &quiet(), &rv).await?);
    }
    const N: usize = 30;
    for i in 0..N {
        cms.create(&PostParams::default(), &configmap(&format!("c{i}"), &[]))
            .await?;
    }
    let want: Vec<String> = (0..N).map(|i| format!("c{i}")).collect();
    let results = futures::future::join_all(streams.into_iter().map(|mut s| {
        let want = want.clone();
        async move {
            let mut got = Vec::new();
            while got.len() < want.len() {
                match tokio::time::timeout(Duration::from_secs(60), s.next()).await {
                    Ok(Some(Ok(WatchEvent::Added(o)))) => got.push(o.metadata.name.unwrap()),
                    other => {
                        return Err(format!(
                            "after {} events: {:?}",
                            got.len(),
                            other.map(|o| o.map(|e| e.map(|e| describe(&e))))
                        ));
                    }
                }
            }
            if got == want {
                Ok(())
            } else {
                Err(format!("got {got:?}"))
            }
        }
    }))
    .await;
    let failed: Vec<&String> = results.iter().filter_map(|r| r.as_ref().err()).collect();
    assert!(
        failed.is_empty(),
        "{} of 200 watchers missed events: {:?}",
        failed.len(),
        failed.first()
    );
    Ok(())
}

#[tokio::test]
async fn slow_watcher_stalls_neither_writers_nor_other_watchers() -> anyhow::Result<()> {
    let plane = Plane::start(&[]).await?;
    let client = plane.client().await?;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let rv = cms
        .list(&ListParams::default())
        .await?
        .metadata
        .resource_version
        .unwrap();
    // A watcher that is opened and never read from, on its own connection.
    let slow_client = plane.client().await?;
    let slow_api: Api<ConfigMap> = Api::namespaced(slow_client, "default");
    let _slow = watch(&slow_api, &quiet(), &rv).await?;
    let mut fast = watch(&cms, &quiet(), &rv).await?;

    // 300 × 64 KiB ≈ 19 MiB of events: far more than the slow watcher's socket buffers hold.
    let big = "x".repeat(64 * 1024);
    const N: usize = 300;
    let reader = tokio::spawn(async move {
        let mut n = 0;
        while n < N {
            match tokio::time::timeout(Duration::from_secs(60), fast.next()).await {
                Ok(Some(Ok(WatchEvent::Added(_)))) => n += 1,
                other => panic!(
                    "fast watcher after {n}: {:?}",
                    other.map(|o| o.map(|e| e.map(|e| describe(&e))))
                ),
            }
        }
        n
    });
    let mut tasks = Vec::new();
    for w in 0..4 {
        let cms = cms.clone();
        let big = big.clone();
        tasks.push(tokio::spawn(async move {
            for i in (w..N).step_by(4) {
                cms.create(
                    &PostParams::default(),
                    &configmap(&format!("c{i:03}"), &[("big", &big)]),
                )
                .await
                .unwrap();
            }
        }));
    }
    // Stalled writers would never finish: the deadline only bounds the wait
    // (19 MiB through a debug build on a loaded machine takes a while).
    for t in tasks {
        tokio::time::timeout(Duration::from_secs(300), t)
            .await
            .expect("writers stalled")?;
    }
    assert_eq!(
        tokio::time::timeout(Duration::from_secs(300), reader)
            .await
            .expect("fast watcher stalled")?,
        N
    );
    Ok(())
}

#[tokio::test]
async fn runtime_watcher_resumes_across_restart() -> anyhow::Result<()> {
    let port = free_port().to_string();
    let mut plane = Plane::start(&["--port", &port]).await?;
    let client = plane.client().await?;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    cms.create(&PostParams::default(), &configmap("before", &[]))
        .await?;

    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let cfg = watcher::Config::default().timeout(30);
    let stream = watcher(cms.clone(), cfg).default_backoff();
    let task = tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        loop {
            match stream.try_next().await {
                Ok(Some(watcher::Event::Apply(o) | watcher::Event::InitApply(o))) => {
                    let _ = tx.send(("apply", o.metadata.name.unwrap()));
                }
                Ok(Some(watcher::Event::Delete(o))) => {
                    let _ = tx.send(("delete", o.metadata.name.unwrap()));
                }
                Ok(Some(_)) => {}
                Ok(None) => break,
                Err(_) => {} // connection errors while the server is down; the backoff retries
            }
        }
    });
    wait_for(&mut rx, "apply", "before").await;
    cms.create(&PostParams::default(), &configmap("live", &[]))
        .await?;
    wait_for(&mut rx, "apply", "live").await;

    plane.kill9();
    plane.spawn().await?;
    // The same address and credentials: the original client works again.
    cms.create(&PostParams::default(), &configmap("after-restart", &[]))
        .await?;
    cms.delete("live", &DeleteParams::default()).await?;
    wait_for(&mut rx, "apply", "after-restart").await;
    wait_for(&mut rx, "delete", "live").await;
    task.abort();
    Ok(())
}

async fn wait_for(
    rx: &mut tokio::sync::mpsc::UnboundedReceiver<(&'static str, String)>,
    kind: &str,
    name: &str,
) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, rx.recv()).await {
            Ok(Some((k, n))) if k == kind && n == name => return,
            Ok(Some(_)) => {}
            _ => panic!("watcher never reported {kind} {name}"),
        }
    }
}

#[tokio::test]
async fn await_condition_on_one_object() -> anyhow::Result<()> {
    // kube's await_condition watches one object by metadata.name, as controllers and tests do.
    let plane = Plane::start(&[]).await?;
    let client = plane.client().await?;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let target = cms
        .create(&PostParams::default(), &configmap("target", &[]))
        .await?;
    cms.create(&PostParams::default(), &configmap("other", &[]))
        .await?;
    // Every state the condition is asked about, in order: the first is the
    // initial list, so from then on the wait's watch sees every change.
    let (seen_tx, mut seen) = tokio::sync::mpsc::unbounded_channel::<Option<ConfigMap>>();
    let waiter = tokio::spawn(kube::runtime::wait::await_condition(
        cms.clone(),
        "target",
        move |c: Option<&ConfigMap>| {
            let _ = seen_tx.send(c.cloned());
            c.and_then(|c| c.data.as_ref())
                .is_some_and(|d| d.get("ready").map(String::as_str) == Some("yes"))
        },
    ));
    let name_of = |c: &Option<ConfigMap>| c.as_ref().and_then(|c| c.metadata.name.clone());
    let first = asked(&mut seen).await;
    assert_eq!(name_of(&first).as_deref(), Some("target"));
    cms.patch(
        "other",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"ready": "yes"}})),
    )
    .await?;
    // A change of target that does not satisfy the wait comes after the one
    // of other in the event order: once the condition saw it, it would have
    // seen other's.
    cms.patch(
        "target",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"ready": "not yet"}})),
    )
    .await?;
    let now = asked(&mut seen).await;
    assert_eq!(
        name_of(&now).as_deref(),
        Some("target"),
        "the wait was asked about another object"
    );
    assert_eq!(
        now.as_ref()
            .and_then(|c| c.data.as_ref())
            .and_then(|d| d.get("ready"))
            .map(String::as_str),
        Some("not yet")
    );
    assert!(
        !waiter.is_finished(),
        "another object's change satisfied the wait"
    );
    cms.patch(
        "target",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"ready": "yes"}})),
    )
    .await?;
    let got = tokio::time::timeout(Duration::from_secs(60), waiter)
        .await
        .expect("await_condition never returned")??;
    assert_eq!(got.unwrap().metadata.name.as_deref(), Some("target"));
    // The deletion of a watched object ends a wait for "gone" (of this uid:
    // `is_deleted("")` holds for any object, so it would not wait at all).
    let uid = target.metadata.uid.clone().expect("a uid");
    // (whether target was there, whether the condition held)
    let (asked_tx, mut states) = tokio::sync::mpsc::unbounded_channel::<(bool, bool)>();
    let gone = tokio::spawn(kube::runtime::wait::await_condition(
        cms.clone(),
        "target",
        move |c: Option<&ConfigMap>| {
            let deleted = kube::runtime::wait::conditions::is_deleted(&uid).matches_object(c);
            let _ = asked_tx.send((c.is_some(), deleted));
            deleted
        },
    ));
    // The wait's watch is up once it was asked about the existing target.
    assert_eq!(
        asked(&mut states).await,
        (true, false),
        "the wait first sees target, not yet deleted"
    );
    cms.delete("target", &DeleteParams::default()).await?;
    tokio::time::timeout(Duration::from_secs(60), gone)
        .await
        .expect("is_deleted never fired")??;
    Ok(())
}

/// The next state an `await_condition` condition was asked about.
async fn asked<T>(rx: &mut tokio::sync::mpsc::UnboundedReceiver<T>) -> T {
    tokio::time::timeout(Duration::from_secs(60), rx.recv())
        .await
        .expect("the condition was not asked in 60 s")
        .expect("the wait ended")
}

/// One user cannot hold more than `--max-watches-per-user` watches open: the
/// next one gets 429 naming the user and the flag, and a closed watch frees
/// its place.
#[tokio::test]
async fn watches_past_the_per_user_limit_get_429() -> anyhow::Result<()> {
    let plane = Plane::start(&["--max-watches-per-user", "2"]).await?;
    let client = plane.client_without_retries().await?;
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    let bounded = |api: Api<ConfigMap>| async move {
        tokio::time::timeout(Duration::from_secs(30), watch(&api, &quiet(), "0"))
            .await
            .expect("the watch request got no answer within 30 s")
    };
    let first = bounded(api.clone()).await?;
    let _second = bounded(api.clone()).await?;
    let refused = bounded(api.clone()).await;
    let e = refused.err().expect("a third watch was let through");
    let e = e.downcast_ref::<kube::Error>().expect("a kube error");
    let kube::Error::Api(status) = e else {
        panic!("expected an API error, got {e}");
    };
    assert_eq!(status.code, 429, "{status:?}");
    assert!(
        status.message.contains("wasmlet-admin")
            && status.message.contains("--max-watches-per-user"),
        "{}",
        status.message
    );
    // Closing one watch frees its place (the server notices the closed stream).
    drop(first);
    eventually(Duration::from_secs(30), "a watch after one closed", || {
        let api = api.clone();
        async move { bounded(api).await.ok().map(drop) }
    })
    .await?;
    Ok(())
}
