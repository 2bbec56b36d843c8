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
    assert_eq!(out.requeue, None, "settled and paused: nothing to follow");
    // Paused with a batch in flight: followed until it settles (pod events
    // do not wake the operator).
    w.pods(&["old", "old", "new", "new"], &[true, true, false, true]);
    let out = w.pass(t0() + secs(1));
    assert_eq!(out.status["phase"], "Paused");
    assert_eq!(out.status["readyReplicas"], 3);
    assert!(out.requeue.is_some());
    w.pods(&["old", "old", "new", "new"], &[true; 4]);
    let out = w.pass(t0() + secs(3));
    assert_eq!(out.status["readyReplicas"], 4);
    assert_eq!(out.requeue, None);
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

/// Consul is an external call: asked only when a batch is about to be judged
/// (the last one done, or the next one due), never while pods settle, the
/// interval runs, the rollout is paused, or once it is final.
#[test]
fn consul_is_asked_only_when_a_batch_is_judged() {
    let sd = json!({"serviceDiscovery": {"url": "http://127.0.0.1:8500", "dc": "dc1", "serviceNames": ["web"]},
        "minPodEvictionIntervalSeconds": 30});
    let w = World::ready(4, 100, sd, 2);
    w.consul_passing.set(4);
    let consul = || {
        w.requests()
            .iter()
            .filter(|r| r.1.contains("/v1/health/"))
            .count()
    };
    let _ = w.pass(t0());
    assert_eq!(consul(), 1, "the first batch is judged");
    assert_eq!(w.evictions().len(), 2);
    // The batch's pods settle: no call.
    w.pods(&["old", "old", "new", "new"], &[true, true, false, false]);
    let out = w.pass(t0() + secs(5));
    assert_eq!(out.status["phase"], "WaitingForPods");
    // Ready, but the interval runs: no call.
    w.pods(&["old", "old", "new", "new"], &[true; 4]);
    let out = w.pass(t0() + secs(10));
    assert_eq!(out.status["phase"], "WaitingForInterval");
    assert_eq!(consul(), 1, "nothing to judge yet");
    // What Consul said last still stands in the status.
    assert_eq!(out.status["readyReplicasServiceDiscovery"], 4);
    assert_eq!(out.status["pods"][0]["inServiceDiscovery"], true);
    let _ = w.pass(t0() + secs(31));
    assert_eq!(consul(), 2, "the next batch is judged");
    assert_eq!(w.evictions().len(), 4);
    w.pods(&["new"; 4], &[true; 4]);
    let out = w.pass(t0() + secs(40));
    assert_eq!(out.status["phase"], "RolloutDone");
    assert_eq!(consul(), 3, "the last batch is judged done");
    for s in [41, 100, 1000] {
        let _ = w.pass(t0() + secs(s));
    }
    assert_eq!(consul(), 3, "a finished rollout asks nothing");
}

/// A finished rollout, with chat, Consul and a callback configured, makes no
/// call outside the cluster's cache: no HTTP, no Secret read.
#[test]
fn a_finished_rollout_makes_no_external_call() {
    let spec = json!({"channel": "#deploys",
        "notifications": {"url": "http://127.0.0.1:9/api", "tokenSecret": {"name": "chat"}},
        "serviceDiscovery": {"url": "http://127.0.0.1:8500", "dc": "dc1", "serviceNames": ["web"]},
        "callback": {"url": "http://127.0.0.1:9/cb", "stageId": "s1"}});
    let w = World::ready(2, 100, spec, 1);
    w.consul_passing.set(2);
    w.pods_n(2, 2, true);
    let out = w.pass(t0());
    assert_eq!(out.status["phase"], "RolloutDone");
    assert_eq!(w.callbacks(), 1);
    assert!(w.secret_gets.get() >= 1, "the last word went to chat");
    let before = w.external_calls();
    for s in [1, 30, 600] {
        let out = w.pass(t0() + secs(s));
        assert_eq!(out.status["phase"], "RolloutDone");
        assert_eq!(out.requeue, None, "final: nothing to come back for");
    }
    assert_eq!(w.external_calls(), before, "{:?}", w.requests());
}

/// A finished rollout whose last word failed to reach the chat comes back
/// for it on its own (no pod event will wake it), and stops once it is out.
#[test]
fn a_failed_last_word_is_retried_by_requeue() {
    let spec = json!({"channel": "#deploys",
        "notifications": {"url": "http://127.0.0.1:9/api", "tokenSecret": {"name": "chat"}}});
    let w = World::ready(2, 100, spec, 1);
    w.pods_n(2, 2, true);
    w.chat_failures.set(1);
    let out = w.pass(t0());
    assert_eq!(out.status["phase"], "RolloutDone");
    assert_eq!(out.requeue, Some(crate::notify::RETRY));
    let out = w.pass(t0() + secs(10));
    assert_eq!(out.requeue, None, "delivered: {:?}", w.chat_calls());
    let sent = w.chat_calls().len();
    let _ = w.pass(t0() + secs(20));
    assert_eq!(w.chat_calls().len(), sent);
}

/// The chat token is read when a message is about to go out, not on every pass.
#[test]
fn the_chat_token_is_read_only_to_send() {
    let spec = json!({"channel": "#deploys",
        "notifications": {"url": "http://127.0.0.1:9/api", "tokenSecret": {"name": "chat"}}});
    let w = World::ready(120, 100, spec, 10);
    let _ = w.pass(t0());
    let (gets, sent) = (w.secret_gets.get(), w.chat_calls().len());
    assert!(gets >= 1 && sent >= 1);
    // Pods of the batch turning ready, 1 s later: nothing to send, no read.
    w.pods_n(120, 10, false);
    let _ = w.pass(t0() + secs(1));
    assert_eq!(w.chat_calls().len(), sent);
    assert_eq!(w.secret_gets.get(), gets, "no message, no token");
}

#[test]
fn the_budget_follows_max_unavailable_and_a_users_is_left_alone() {
    let w = World::new(4, 50, json!({"maxUnavailable": 2}));
    let _ = w.pass(t0());
    w.set_controller("new", "old");
    w.pods(&["old"; 4], &[true; 4]);
    let _ = w.pass(t0());
    assert_eq!(
        w.host.writes()[1..],
        ["create PodDisruptionBudget ns/web-sroll"]
    );
    // Edited: ours follows, once.
    w.edit(json!({"maxUnavailable": "50%"}));
    let out = w.pass(t0() + secs(1));
    assert_eq!(out.status["phase"], "UpdatingBudget");
    assert_eq!(
        w.host.writes()[2..],
        ["update PodDisruptionBudget ns/web-sroll"]
    );
    let pdb = w
        .host
        .object("policy/v1", "PodDisruptionBudget", Some("ns"), "web-sroll")
        .unwrap();
    assert_eq!(pdb["spec"]["maxUnavailable"], "50%");
    assert_eq!(pdb["metadata"]["ownerReferences"][0]["uid"], "sroll-uid");
    let _ = w.pass(t0() + secs(2));
    assert_eq!(w.host.writes().len(), 3, "{:?}", w.host.writes());
    // A user's own budget is used as it is.
    let w = World::ready(4, 100, json!({"maxUnavailable": 1}), 2);
    w.edit(json!({"maxUnavailable": 3}));
    let _ = w.pass(t0());
    assert!(
        !w.host
            .writes()
            .iter()
            .any(|x| x.contains("PodDisruptionBudget")),
        "{:?}",
        w.host.writes()
    );
    let pdb = w
        .host
        .object("policy/v1", "PodDisruptionBudget", Some("ns"), "web")
        .unwrap();
    assert_eq!(pdb["spec"]["maxUnavailable"], 2);
}

/// The callback is keyed on (stageId, rolloutIdentity, generation): a failed
/// rollout retried through a new identity reports its new outcome under the
/// same stage id; each outcome goes out once.
#[test]
fn a_retry_through_a_new_identity_is_reported() {
    let spec = json!({"rolloutIdentity": "a",
        "callback": {"url": "http://127.0.0.1:9/cb", "stageId": "s1"}});
    let w = World::ready(4, 100, spec, 2);
    w.pods(&["old", "old", "new", "new"], &[true, true, false, false]);
    w.crash("web-3");
    let out = w.pass(t0());
    assert_eq!(out.status["phase"], "RolloutFailed");
    let _ = w.pass(t0() + secs(5));
    assert_eq!(w.callbacks(), 1);
    w.pods(&["new"; 4], &[true; 4]);
    w.edit(json!({"rolloutIdentity": "b"}));
    let out = w.pass(t0() + secs(6));
    assert_eq!(out.status["phase"], "RolloutDone");
    let _ = w.pass(t0() + secs(60));
    let bodies = w.callback_bodies();
    assert_eq!(bodies.len(), 2, "{bodies:?}");
    assert_eq!(
        (&bodies[0]["outcome"], &bodies[0]["rolloutIdentity"]),
        (&json!("failure"), &json!("a"))
    );
    assert_eq!(
        (&bodies[1]["outcome"], &bodies[1]["rolloutIdentity"]),
        (&json!("success"), &json!("b"))
    );
    assert!(bodies.iter().all(|b| b["stageId"] == "s1"));
    assert_eq!(out.status["lastCallback"]["rolloutIdentity"], "b");
    assert_eq!(out.status["lastCallback"]["generation"], 2);
    // A status from before `lastCallback` (the stage id only) counts as sent.
    let w = World::ready(
        2,
        0,
        json!({"callback": {"url": "http://127.0.0.1:9/cb", "stageId": "s1"}}),
        1,
    );
    w.set_status(json!({"lastCallbackStageId": "s1"}));
    let _ = w.pass(t0());
    assert_eq!(w.callbacks(), 0, "an upgrade reports nothing twice");
}

/// The CRD refuses what the operator would refuse, at admission: percent
/// 0-100, intervals and deadlines bounded, and the StatefulSet typed (apps/v1's
/// schema: a misspelled field is refused or pruned, never kept unseen).
#[test]
fn the_crd_bounds_the_spec_and_types_the_statefulset() {
    let crd = serde_json::to_value(StatefulsetRollout::crd()).unwrap();
    let spec = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"];
    let bound = |field: &str, b: &str| spec[field][b].as_f64();
    assert_eq!(bound("percent", "minimum"), Some(0.0));
    assert_eq!(bound("percent", "maximum"), Some(100.0));
    assert_eq!(bound("minPodEvictionIntervalSeconds", "minimum"), Some(0.0));
    assert_eq!(bound("progressDeadlineSeconds", "minimum"), Some(1.0));
    let set = &spec["statefulset"];
    assert!(
        set.get("x-kubernetes-preserve-unknown-fields").is_none(),
        "{set}"
    );
    let set_spec = &set["properties"]["spec"]["properties"];
    for field in [
        "replicas",
        "selector",
        "template",
        "updateStrategy",
        "serviceName",
    ] {
        assert!(set_spec.get(field).is_some(), "{field}");
    }
    let containers = &set_spec["template"]["properties"]["spec"]["properties"]["containers"];
    assert!(
        containers["items"]["properties"]["image"].is_object(),
        "{containers}"
    );
}

/// README: buildMetadata comes from annotations ending in `git-branch` /
/// `git-commit`, on the set or its template.
#[test]
fn build_metadata_reads_annotations_ending_in_git_branch_and_commit() {
    let w = World::new(
        2,
        100,
        json!({"statefulset": {
            "metadata": {"annotations": {"deploy.example.com/app-git-branch": "main"}},
            "spec": {"template": {"metadata": {"annotations": {"example.com/git-commit": "abc123"}}}},
        }}),
    );
    let out = w.pass(t0());
    assert_eq!(
        out.status["buildMetadata"],
        json!({"branch": "main", "commit": "abc123"})
    );
}

fn t0() -> Timestamp {
    "2026-11-23T12:00:00Z".parse().unwrap()
}

fn secs(s: i64) -> SignedDuration {
    SignedDuration::from_secs(s)
}
