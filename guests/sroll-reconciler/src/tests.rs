//! The decision logic against the SDK's fake host: what a user would see in
//! the cluster (writes, evictions, events, status) after each pass.

mod fixtures;

use std::time::Duration;

use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::CustomResourceExt;
use serde_json::{Value, json};

use crate::api::StatefulsetRollout;
use fixtures::*;

#[test]
fn shipped_crd_matches_the_types() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/statefulsetrollout.crd.yaml");
    let generated = serde_yaml::to_string(&StatefulsetRollout::crd()).unwrap();
    if std::env::var_os("UPDATE_CRDS").is_some() {
        std::fs::write(path, &generated).unwrap();
    }
    let shipped = std::fs::read_to_string(path).unwrap_or_default();
    assert!(
        shipped == generated,
        "{path} is stale: rerun with UPDATE_CRDS=1 cargo test -p wasmlet-sroll-reconciler"
    );
    let crd = serde_json::to_value(StatefulsetRollout::crd()).unwrap();
    assert_eq!(crd["spec"]["names"]["shortNames"], json!(["sroll"]));
    assert_eq!(
        crd["spec"]["versions"][0]["subresources"]["status"],
        json!({})
    );
}

#[test]
fn bad_specs_name_the_field_and_touch_nothing() {
    let cases = [
        (json!({"percent": 150}), "spec.percent"),
        (
            json!({"statefulset": {"spec": {"updateStrategy": {"type": "RollingUpdate"}}}}),
            "spec.statefulset.spec.updateStrategy.type",
        ),
        (
            json!({"statefulset": {"spec": {"updateStrategy": null}}}),
            "spec.statefulset.spec.updateStrategy.type",
        ),
        (
            json!({"statefulset": {"spec": {"replicas": null}}}),
            "spec.statefulset.spec.replicas",
        ),
        (
            json!({"statefulset": {"spec": {"selector": {"matchLabels": {"app": "other"}}}}}),
            "spec.statefulset.spec.selector",
        ),
        (json!({"maxUnavailable": "x%"}), "spec.maxUnavailable"),
    ];
    for (patch, field) in cases {
        let w = World::new(4, 50, patch);
        let out = w.pass(t0());
        assert!(
            w.host.writes().is_empty(),
            "{field}: wrote {:?}",
            w.host.writes()
        );
        assert_eq!(out.status["phase"], "InvalidSpec", "{field}");
        assert!(
            out.status["reason"].as_str().unwrap().starts_with(field),
            "{field}: {}",
            out.status
        );
        assert_eq!(out.progressing, ("False".into(), "InvalidSpec".into()));
        let events = w.host.events();
        assert!(
            events
                .iter()
                .any(|(t, r, n)| t == "Warning" && r == "InvalidSpec" && n.starts_with(field)),
            "{field}: {events:?}"
        );
        assert_eq!(out.requeue, None, "a bad spec waits for a change");
    }
}

#[test]
fn creates_the_set_then_a_budget_from_max_unavailable() {
    let w = World::new(4, 50, json!({"maxUnavailable": 2}));
    let out = w.pass(t0());
    assert_eq!(w.host.writes(), ["create StatefulSet ns/web"]);
    assert_eq!(out.status["phase"], "CreatingStatefulSet");
    let set = w
        .host
        .object("apps/v1", "StatefulSet", Some("ns"), "web")
        .unwrap();
    assert_eq!(set["metadata"]["ownerReferences"][0]["uid"], "sroll-uid");
    assert_eq!(set["metadata"]["ownerReferences"][0]["controller"], true);
    assert_eq!(
        set["spec"]["template"]["metadata"]["labels"]["rollouts.wasmlet.dev/rollout"],
        "web"
    );
    assert!(set["metadata"]["annotations"]["rollouts.wasmlet.dev/spec-hash"].is_string());
    // The set controller runs; no budget selects the pods: one is created.
    w.set_controller("new", "old");
    w.pods(&["old", "old", "old", "old"], &[true; 4]);
    let out = w.pass(t0());
    assert_eq!(
        w.host.writes()[1..],
        ["create PodDisruptionBudget ns/web-sroll"]
    );
    assert_eq!(out.status["phase"], "CreatingBudget");
    let pdb = w
        .host
        .object("policy/v1", "PodDisruptionBudget", Some("ns"), "web-sroll")
        .unwrap();
    assert_eq!(pdb["spec"]["maxUnavailable"], 2);
    assert_eq!(
        pdb["spec"]["selector"],
        json!({"matchLabels": {"app": "web"}})
    );
}

#[test]
fn rolls_in_batches_the_budget_allows_after_the_interval_and_readiness() {
    let w = World::ready(4, 50, json!({"minPodEvictionIntervalSeconds": 30}), 2);
    let out = w.pass(t0());
    assert_eq!(
        w.evictions(),
        ["web-3", "web-2"],
        "two at a time, top ordinals first"
    );
    assert_eq!(out.status["phase"], "RollingOut");
    assert_eq!(out.status["lastEvicted"], json!(["web-3", "web-2"]));
    // Replaced pods come back on the new revision but are not ready yet: wait.
    w.pods(&["old", "old", "new", "new"], &[true, true, false, false]);
    let out = w.pass(t0() + secs(40));
    assert_eq!(out.status["phase"], "WaitingForPods");
    assert_eq!(w.evictions().len(), 2);
    // 50 % is two pods: done once they are ready; final after that.
    w.pods(&["old", "old", "new", "new"], &[true; 4]);
    let out = w.pass(t0() + secs(41));
    assert_eq!(out.status["phase"], "RolloutDone");
    assert_eq!(out.status["percentDeployed"], 50);
    assert_eq!(out.requeue, None);
    let out = w.pass(t0() + secs(42));
    assert_eq!(out.status["phase"], "RolloutDone");
    assert_eq!(w.evictions().len(), 2);
    // 100 %: a new generation moves on, but not before the interval.
    w.edit(json!({"percent": 100}));
    let out = w.pass(t0() + secs(10));
    assert_eq!(out.status["phase"], "WaitingForInterval");
    assert!(out.requeue.unwrap() <= Duration::from_secs(21));
    assert_eq!(w.evictions().len(), 2);
    let _ = w.pass(t0() + secs(31));
    assert_eq!(w.evictions()[2..], ["web-1", "web-0"]);
}

#[test]
fn a_stale_budget_cannot_make_it_overshoot() {
    // The budget's status still allows 2, but one pod is already unready.
    let w = World::ready(4, 100, json!({}), 2);
    w.pods(&["old"; 4], &[true, false, true, true]);
    let _ = w.pass(t0());
    // The unready pod costs nothing; of the ready ones only 2 - 1 may go.
    assert_eq!(w.evictions(), ["web-1", "web-3"]);
}

#[test]
fn a_429_from_the_eviction_api_is_waiting_not_an_error() {
    let w = World::ready(4, 100, json!({}), 2);
    w.refuse_evictions.set(true);
    let out = w.pass(t0());
    assert_eq!(out.status["phase"], "WaitingForBudget");
    assert!(out.requeue.is_some());
    assert!(w.evictions().is_empty());
}

#[test]
fn pause_stops_evictions_and_resume_continues() {
    let w = World::ready(4, 100, json!({"pauseRequested": true}), 2);
    let out = w.pass(t0());
    assert!(w.evictions().is_empty());
    assert_eq!(out.status["phase"], "Paused");
    assert_eq!(out.status["paused"], true);
    assert_eq!(out.progressing.0, "Unknown");
    w.edit(json!({"pauseRequested": false}));
    let out = w.pass(t0() + secs(1));
    assert_eq!(out.status["paused"], false);
    assert_eq!(w.evictions().len(), 2);
}

#[test]
fn a_failing_new_pod_fails_the_rollout_until_a_new_identity() {
    let w = World::ready(4, 100, json!({"rolloutIdentity": "a"}), 2);
    w.pods(&["old", "old", "new", "new"], &[true, true, false, false]);
    w.crash("web-3");
    let out = w.pass(t0());
    assert_eq!(out.status["phase"], "RolloutFailed");
    assert!(
        out.status["reason"].as_str().unwrap().contains("web-3"),
        "{}",
        out.status
    );
    assert_eq!(out.progressing.0, "False");
    assert_eq!(out.requeue, None);
    let _ = w.pass(t0() + secs(5));
    assert!(w.evictions().is_empty());
    assert_eq!(w.status()["phase"], "RolloutFailed", "final");
    // Fixed: a new rolloutIdentity retries.
    w.pods(&["old", "old", "new", "new"], &[true; 4]);
    w.edit(json!({"rolloutIdentity": "b"}));
    let out = w.pass(t0() + secs(6));
    assert_eq!(out.status["rolloutIdentity"], "b");
    assert_eq!(w.evictions(), ["web-1", "web-0"]);
}

#[test]
fn no_progress_within_the_deadline_fails() {
    let w = World::ready(4, 100, json!({"progressDeadlineSeconds": 60}), 0);
    let out = w.pass(t0());
    assert_eq!(out.status["phase"], "WaitingForBudget");
    let out = w.pass(t0() + secs(61));
    assert_eq!(out.status["phase"], "RolloutFailed");
    assert!(
        out.status["reason"]
            .as_str()
            .unwrap()
            .contains("progressDeadlineSeconds")
    );
}

#[test]
fn a_deleted_set_is_recorded_and_recreated() {
    let w = World::ready(4, 100, json!({}), 2);
    let _ = w.pass(t0());
    w.host_remove("apps/v1", "StatefulSet", "web");
    let out = w.pass(t0() + secs(1));
    assert_eq!(out.status["deleted"], true);
    assert_eq!(out.status["phase"], "CreatingStatefulSet");
    assert!(
        w.host
            .object("apps/v1", "StatefulSet", Some("ns"), "web")
            .is_some()
    );
}

#[test]
fn a_new_template_is_applied_to_the_set() {
    let w = World::ready(4, 100, json!({}), 2);
    w.edit(json!({"statefulset": {"spec": {"template": {"spec": {"containers": [{"name": "main", "image": "v2"}]}}}}}));
    let out = w.pass(t0());
    assert_eq!(out.status["phase"], "UpdatingStatefulSet");
    assert_eq!(out.status["statefulsetSpecCurrent"], false);
    assert!(w.evictions().is_empty(), "one action per pass");
    let set = w
        .host
        .object("apps/v1", "StatefulSet", Some("ns"), "web")
        .unwrap();
    assert_eq!(
        set["spec"]["template"]["spec"]["containers"][0]["image"],
        "v2"
    );
}

#[test]
fn service_discovery_gates_each_step() {
    let w = World::ready(
        4,
        100,
        json!({"serviceDiscovery": {"url": "http://127.0.0.1:8500", "dc": "dc1", "serviceNames": ["web"]}}),
        2,
    );
    w.consul_passing.set(3);
    let out = w.pass(t0());
    assert_eq!(out.status["phase"], "WaitingForServiceDiscovery");
    assert!(w.evictions().is_empty());
    let req = w.requests();
    assert_eq!(
        req[0].1,
        "http://127.0.0.1:8500/v1/health/service/web?dc=dc1&passing"
    );
    w.consul_passing.set(4);
    let out = w.pass(t0() + secs(1));
    assert_eq!(w.evictions().len(), 2);
    assert_eq!(out.status["readyReplicasServiceDiscovery"], 4);
    assert_eq!(out.status["consulServices"], json!(["web"]));
    assert_eq!(out.status["pods"][0]["inServiceDiscovery"], true);
}

#[test]
fn chat_opens_one_message_updates_it_and_pages_pods_in_a_thread_at_the_end() {
    let spec = json!({"channel": "#deploys",
        "notifications": {"url": "http://127.0.0.1:9/api", "tokenSecret": {"name": "chat"}}});
    let w = World::ready(120, 100, spec, 10);
    // Opened when the set was created; the first batch updates the summary.
    let out = w.pass(t0());
    let calls = w.chat_calls();
    assert!(calls.iter().all(|c| c.2 == "Bearer s3cret"));
    let kinds: Vec<&str> = calls.iter().map(|c| c.0.as_str()).collect();
    assert_eq!(kinds, ["chat.postMessage", "chat.update"], "{calls:?}");
    assert_eq!(calls[1].1["ts"], calls_ts(0));
    assert_eq!(out.status["notificationMessage"]["ts"], calls_ts(0));
    // While it runs, no page goes to the thread.
    w.pods_n(120, 10, true);
    let _ = w.pass(t0() + secs(20));
    let n0 = calls.len();
    let calls = w.chat_calls();
    let later = &calls[n0..];
    assert_eq!(later.len(), 1, "the next batch: {later:?}");
    assert_eq!(later[0].1["ts"], calls_ts(0));
    // Done: at once (5 s after the last update), with the pods 50 to a
    // message: 120 pods, pods 0-49 in the summary and two thread replies.
    w.pods_n(120, 120, true);
    let out = w.pass(t0() + secs(25));
    assert_eq!(out.status["phase"], "RolloutDone");
    let n1 = calls.len();
    let calls = w.chat_calls();
    let later = &calls[n1..];
    let replies: Vec<_> = later
        .iter()
        .filter(|c| c.1.get("thread_ts").is_some())
        .collect();
    assert_eq!(replies.len(), 2, "{later:?}");
    assert!(replies.iter().all(|c| c.0 == "chat.postMessage"));
    assert!(replies.iter().all(|c| c.1["thread_ts"] == calls_ts(0)));
    assert_eq!(later.len(), 3, "the summary and two pages: {later:?}");
    assert_eq!(
        out.status["notificationMessage"]["pages"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
    // Nothing changed: nothing sent.
    let _ = w.pass(t0() + secs(60));
    assert_eq!(w.chat_calls().len(), calls.len());
}

/// The bench's finding (2,159 updates for a 1,000-pod rollout): pods turning
/// ready one by one while a batch settles send nothing; each batch updates
/// the summary, at most every `SUMMARY_EVERY`; the pod pages wait for the end.
#[test]
fn chat_follows_batches_at_a_bounded_rate() {
    let spec = json!({"channel": "#deploys",
        "notifications": {"url": "http://127.0.0.1:9/api", "tokenSecret": {"name": "chat"}}});
    let w = World::ready(120, 100, spec, 10);
    let _ = w.pass(t0());
    let opened = w.chat_calls().len();
    let sent = |from: usize| w.chat_calls()[from..].to_vec();
    // The next batch evicted 1 s after the last update: held back (too soon).
    w.pods_n(120, 10, true);
    let next = w.pass(t0() + secs(1));
    assert_eq!(next.status["phase"], "RollingOut");
    assert_eq!(sent(opened), vec![]);
    // Pods of the batch turning ready: the same batch, nothing sent but the
    // milestone held back at 1 s, with the first due pass.
    for (at, ready_new) in [(5, 2), (20, 5), (25, 9)] {
        let revs: Vec<&str> = (0..120)
            .map(|i| if i >= 100 { "new" } else { "old" })
            .collect();
        let ready: Vec<bool> = (0..120).map(|i| i < 100 + ready_new || i >= 110).collect();
        w.pods(&revs, &ready);
        let out = w.pass(t0() + secs(at));
        assert_eq!(out.status["phase"], "WaitingForPods");
        let s = sent(opened);
        let want = usize::from(at >= 20);
        assert_eq!(s.len(), want, "at {at} s: {s:?}");
    }
    let s = sent(opened);
    assert_eq!(s[0].0, "chat.update");
    assert_eq!(s[0].1["ts"], calls_ts(0), "the summary, not a page: {s:?}");
    // The batch ready: the next one starts, the summary follows (once).
    w.pods_n(120, 20, true);
    let _ = w.pass(t0() + secs(40));
    let s = sent(opened + 1);
    assert_eq!(s.len(), 1, "{s:?}");
    assert_eq!(s[0].1["ts"], calls_ts(0), "{s:?}");
    assert!(
        w.chat_calls()
            .iter()
            .all(|c| c.1.get("thread_ts").is_none())
    );
}

#[test]
fn the_callback_is_sent_once_per_stage_with_back_off() {
    let spec = json!({"callback": {"url": "http://127.0.0.1:9/cb", "stageId": "s1"}});
    let w = World::ready(2, 0, spec, 1);
    w.callback_failures.set(2);
    let out = w.pass(t0());
    assert_eq!(out.status["phase"], "RolloutDone");
    assert_eq!(out.requeue, Some(Duration::from_secs(2)));
    // Too early: no attempt.
    let _ = w.pass(t0() + SignedDuration::from_millis(500));
    assert_eq!(w.callbacks(), 1);
    let out = w.pass(t0() + secs(2));
    assert_eq!(w.callbacks(), 2);
    assert_eq!(out.requeue, Some(Duration::from_secs(4)));
    let out = w.pass(t0() + secs(6));
    assert_eq!(w.callbacks(), 3);
    assert_eq!(out.status["lastCallbackStageId"], "s1");
    assert_eq!(out.requeue, None);
    let _ = w.pass(t0() + secs(100));
    assert_eq!(w.callbacks(), 3, "exactly once per stage");
    let body: Value = w.callback_bodies()[2].clone();
    assert_eq!(body["stageId"], "s1");
    assert_eq!(body["outcome"], "success");
}

fn t0() -> Timestamp {
    "2026-11-23T12:00:00Z".parse().unwrap()
}

fn secs(s: i64) -> SignedDuration {
    SignedDuration::from_secs(s)
}
