//! The runner driven as the node agent drives it (init, handle until a wait, status on
//! entering each state, edges checked against the graph), against the SDK's FakeHost.

use serde_json::{Value, json};
use wasmlet_sdk::bindings::provider_exports as raw;
use wasmlet_sdk::host::InstalledHost;
use wasmlet_sdk::provider::{self as sdk, Named, StateId};
use wasmlet_sdk::testing::FakeHost;
use wasmlet_sdk::workloads::{FetchError, VolumeSource};

use crate::PodData;
use crate::states::{
    ContainerConfigError, CrashLoopBackOff, Error, ImagePullBackOff, Registered, Terminated,
};

const HELLO: &str = "file:///modules/hello.wasm";

fn named() -> [Named<PodData>; 3] {
    [
        Named::of::<Registered>(),
        Named::of::<Terminated>(),
        Named::of::<Error>(),
    ]
}

fn graph() -> raw::StateGraph {
    sdk::__graph::<PodData>(
        StateId::of::<PodData, Registered>(),
        StateId::of::<PodData, Terminated>(),
        StateId::of::<PodData, Error>(),
        &[
            StateId::of::<PodData, ImagePullBackOff>(),
            StateId::of::<PodData, CrashLoopBackOff>(),
            StateId::of::<PodData, ContainerConfigError>(),
        ],
    )
    .expect("every state has its own name")
}

/// The host's side of one pod.
struct Agent {
    _guard: InstalledHost,
    pod: Value,
    state: String,
    data: String,
    /// States entered, in order.
    visited: Vec<String>,
    /// The status patched on entering the current state.
    status: Value,
    /// Every (state, status) patched.
    history: Vec<(String, Value)>,
}

impl Agent {
    fn new(host: &FakeHost, pod: Value) -> Self {
        let guard = host.install();
        let data = sdk::__init::<PodData, Registered>(pod.to_string()).expect("init");
        let mut a = Agent {
            _guard: guard,
            pod,
            state: String::new(),
            data,
            visited: vec![],
            status: Value::Null,
            history: vec![],
        };
        a.enter("Registered");
        a
    }

    fn enter(&mut self, state: &str) {
        self.state = state.to_owned();
        self.visited.push(state.to_owned());
        let status = sdk::__status_in::<PodData>(
            &named(),
            state.to_owned(),
            self.pod.to_string(),
            self.data.clone(),
        );
        self.status = serde_json::from_str(&status).expect("status is JSON");
        self.history.push((state.to_owned(), self.status.clone()));
    }

    /// Calls `handle` (with `event`, then `none` after each move) until a wait.
    fn run(&mut self, mut event: Option<raw::WakeEvent>) -> Vec<raw::WaitOn> {
        let g = graph();
        for _ in 0..50 {
            let out = sdk::__handle_in::<PodData>(
                &named(),
                self.state.clone(),
                self.pod.to_string(),
                self.data.clone(),
                event.take(),
            )
            .unwrap_or_else(|e| panic!("handler error in {}: {e}", self.state));
            match out {
                raw::HandlerOutcome::Transition(t) => {
                    assert!(
                        g.edges.iter().any(|(a, b)| *a == self.state && *b == t.to),
                        "undeclared edge {} -> {}",
                        self.state,
                        t.to
                    );
                    self.data = t.state_data;
                    self.enter(&t.to);
                }
                raw::HandlerOutcome::Wait(w) => {
                    self.data = w.state_data;
                    return w.on;
                }
            }
        }
        panic!("no wait after 50 moves: {:?}", self.visited);
    }

    fn wake(&mut self, event: raw::WakeEvent) -> Vec<raw::WaitOn> {
        self.run(Some(event))
    }

    /// The host's move on deletion: to the on-delete state with a `pod-changed` event.
    fn delete(&mut self, grace: Option<i64>) -> Vec<raw::WaitOn> {
        self.pod["metadata"]["deletionTimestamp"] = json!("2024-05-01T12:00:00Z");
        if let Some(g) = grace {
            self.pod["metadata"]["deletionGracePeriodSeconds"] = json!(g);
        }
        self.enter("Terminated");
        self.run(Some(raw::WakeEvent::PodChanged))
    }

    fn container(&self, i: usize) -> &Value {
        &self.status["containerStatuses"][i]
    }

    fn condition(&self, type_: &str) -> &str {
        self.status["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == type_)
            .and_then(|c| c["status"].as_str())
            .unwrap()
    }
}

fn pod(spec: Value) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": { "name": "hello", "namespace": "ns", "uid": "uid-1" },
        "spec": spec,
    })
}

fn exited(on: &[raw::WaitOn]) -> Vec<u64> {
    on.iter()
        .filter_map(|w| {
            if let raw::WaitOn::WorkloadExited(h) = w {
                Some(*h)
            } else {
                None
            }
        })
        .collect()
}

fn timer(on: &[raw::WaitOn]) -> Option<u64> {
    on.iter().find_map(|w| {
        if let raw::WaitOn::Timer(ms) = w {
            Some(*ms)
        } else {
            None
        }
    })
}

#[test]
fn graph_is_valid() {
    let g = graph();
    assert_eq!(g.initial, "Registered");
    assert_eq!(g.on_delete, "Terminated");
    assert_eq!(g.error_state, "Error");
    for s in [
        "Registered",
        "ImagePull",
        "ImagePullBackOff",
        "VolumeMount",
        "ContainerConfigError",
        "Initializing",
        "Starting",
        "Running",
        "Completed",
        "Error",
        "CrashLoopBackOff",
        "Terminated",
    ] {
        assert!(
            g.states.iter().any(|x| x == s),
            "{s} missing from {:?}",
            g.states
        );
    }
}

#[test]
fn hello_pod_walks_to_completed() {
    let host = FakeHost::new();
    let fetch = host.add_pending_module(HELLO, "sha256:aa");
    host.set_clock(1_714_564_800_000);
    let mut a = Agent::new(
        &host,
        pod(json!({
            "nodeName": "node-1",
            "restartPolicy": "Never",
            "containers": [{
                "name": "main", "image": HELLO,
                "command": ["hello.wasm", "--greet"], "args": ["$(WHO)"],
                "env": [
                    { "name": "WHO", "value": "world" },
                    { "name": "POD", "valueFrom": { "fieldRef": { "fieldPath": "metadata.name" } } },
                    { "name": "NS", "valueFrom": { "fieldRef": { "fieldPath": "metadata.namespace" } } },
                    { "name": "NODE", "valueFrom": { "fieldRef": { "fieldPath": "spec.nodeName" } } },
                    { "name": "IP", "valueFrom": { "fieldRef": { "fieldPath": "status.podIP" } } },
                ],
                "resources": { "limits": { "memory": "64Mi" } },
            }],
        })),
    );
    assert_eq!(a.status["phase"], "Pending");
    assert_eq!(
        a.container(0)["state"]["waiting"]["reason"],
        "ContainerCreating"
    );

    // The pull is pending: wait for it.
    let on = a.run(None);
    assert_eq!(a.state, "ImagePull");
    assert_eq!(on, vec![raw::WaitOn::FetchDone(fetch)]);
    host.finish_fetch(fetch);
    let on = a.wake(raw::WakeEvent::FetchDone(fetch));
    assert_eq!(
        a.visited,
        [
            "Registered",
            "ImagePull",
            "VolumeMount",
            "Initializing",
            "Starting",
            "Running"
        ]
    );

    let spawned = host.spawned();
    assert_eq!(spawned.len(), 1);
    let (h, spec) = &spawned[0];
    assert_eq!(
        on,
        vec![raw::WaitOn::WorkloadExited(*h), raw::WaitOn::PodChanged]
    );
    assert_eq!(spec.module, "sha256:aa");
    assert_eq!(spec.args, ["hello.wasm", "--greet", "world"]);
    let env: Vec<(&str, &str)> = spec
        .env
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    assert_eq!(
        env,
        [
            ("WHO", "world"),
            ("POD", "hello"),
            ("NS", "ns"),
            ("NODE", "node-1"),
            ("IP", "")
        ]
    );
    assert_eq!(spec.memory_limit, Some(64 << 20));
    assert_eq!(
        (
            spec.logs.pod_uid.as_str(),
            spec.logs.container.as_str(),
            spec.logs.attempt
        ),
        ("uid-1", "main", 0)
    );

    // Running: the status on entry.
    assert_eq!(a.status["phase"], "Running");
    assert_eq!(a.status["startTime"].as_str().map(str::len), Some(20));
    assert_eq!(
        a.container(0)["state"]["running"]["startedAt"],
        "2024-05-01T12:00:00Z"
    );
    assert_eq!(a.container(0)["ready"], true);
    assert_eq!(a.container(0)["containerID"], format!("wasmlet://{h}"));
    assert_eq!(a.container(0)["imageID"], "sha256:aa");
    assert_eq!(a.container(0)["image"], HELLO);
    assert_eq!(a.container(0)["name"], "main");
    assert_eq!(a.container(0)["restartCount"], 0);
    for c in ["PodScheduled", "Initialized", "ContainersReady", "Ready"] {
        assert_eq!(a.condition(c), "True", "{c}");
    }

    // A pod change that is not a deletion: keep waiting.
    let again = a.wake(raw::WakeEvent::PodChanged);
    assert_eq!(again, on);

    host.set_clock(1_714_564_805_000);
    host.exit(*h, 0);
    let on = a.wake(raw::WakeEvent::WorkloadExited(*h));
    assert!(on.is_empty(), "Completed rests");
    assert_eq!(a.state, "Completed");
    assert_eq!(a.status["phase"], "Succeeded");
    let t = &a.container(0)["state"]["terminated"];
    assert_eq!(
        (t["exitCode"].as_i64(), t["reason"].as_str()),
        (Some(0), Some("Completed"))
    );
    assert_eq!(t["finishedAt"], "2024-05-01T12:00:05Z");
    assert_eq!(a.container(0)["ready"], false);
    assert_eq!(a.condition("Ready"), "False");
    assert!(
        host.events()
            .iter()
            .any(|(_, reason, _)| reason == "Started")
    );
}

/// After a host restart the machine starts afresh from the pod's stored status:
/// the restart count goes on, the next run logs to a new attempt (the earlier one
/// is `--previous`), and the run the restart lost is the last state, as the
/// kubelet reports a container it can no longer find.
#[test]
fn a_restarted_host_goes_on_from_the_stored_restart_count() {
    let host = FakeHost::new();
    host.add_module(HELLO, "sha256:aa");
    let mut stored = pod(json!({ "containers": [{ "name": "crash", "image": HELLO }] }));
    stored["status"] = json!({
        "startTime": "2024-04-30T10:00:00Z",
        "containerStatuses": [{
            "name": "crash", "image": HELLO, "imageID": "sha256:aa", "ready": true,
            "restartCount": 3,
            "state": {"running": {"startedAt": "2024-04-30T11:00:00Z"}},
            "lastState": {"terminated": {"exitCode": 1, "reason": "Error"}},
        }],
    });
    let mut a = Agent::new(&host, stored);
    a.run(None);
    assert_eq!(a.state, "Running");
    assert_eq!(a.container(0)["restartCount"], 4);
    assert_eq!(host.spawned().last().unwrap().1.logs.attempt, 4);
    let last = &a.container(0)["lastState"]["terminated"];
    assert_eq!(last["reason"], "ContainerStatusUnknown", "{last}");
    assert_eq!(last["exitCode"], 137);
    assert_eq!(last["startedAt"], "2024-04-30T11:00:00Z");
    assert_eq!(a.status["startTime"], "2024-04-30T10:00:00Z");

    // A container that was waiting out its crash back-off keeps its last termination.
    let mut stored = pod(json!({ "containers": [{ "name": "crash", "image": HELLO }] }));
    stored["status"] = json!({"containerStatuses": [{
        "name": "crash", "image": HELLO, "imageID": "", "ready": false, "restartCount": 2,
        "state": {"waiting": {"reason": "CrashLoopBackOff"}},
        "lastState": {"terminated": {"exitCode": 3, "reason": "Error"}},
    }]});
    let mut a = Agent::new(&host, stored);
    a.run(None);
    assert_eq!(a.container(0)["restartCount"], 3);
    assert_eq!(a.container(0)["lastState"]["terminated"]["exitCode"], 3);
}

#[test]
fn exit_1_with_restart_always_crash_loops_with_growing_back_off() {
    let host = FakeHost::new();
    host.add_module(HELLO, "sha256:aa");
    let mut a = Agent::new(
        &host,
        pod(json!({ "containers": [{ "name": "crash", "image": HELLO }] })),
    );
    let mut on = a.run(None);
    assert_eq!(a.state, "Running");

    for (round, delay) in [(0u32, 10_000u64), (1, 20_000), (2, 40_000)] {
        let h = exited(&on)[0];
        host.exit(h, 1);
        let states_before = a.visited.len();
        on = a.wake(raw::WakeEvent::WorkloadExited(h));
        assert_eq!(&a.visited[states_before..], ["Error", "CrashLoopBackOff"]);
        // Error shows the termination, CrashLoopBackOff the back-off.
        let (_, error) = &a.history[a.history.len() - 2];
        assert_eq!(
            error["containerStatuses"][0]["state"]["terminated"]["reason"],
            "Error"
        );
        assert_eq!(
            error["containerStatuses"][0]["state"]["terminated"]["exitCode"],
            1
        );
        assert_eq!(timer(&on), Some(delay), "round {round}");
        assert_eq!(a.status["phase"], "Running");
        let w = &a.container(0)["state"]["waiting"];
        assert_eq!(w["reason"], "CrashLoopBackOff");
        assert!(w["message"].as_str().unwrap().starts_with(&format!(
            "back-off {}s restarting failed container=crash",
            delay / 1000
        )));
        assert_eq!(a.container(0)["lastState"]["terminated"]["exitCode"], 1);
        assert_eq!(a.container(0)["restartCount"], round);

        on = a.wake(raw::WakeEvent::TimerElapsed);
        assert_eq!(a.state, "Running");
        assert_eq!(a.container(0)["restartCount"], round + 1);
        assert_eq!(host.spawned().last().unwrap().1.logs.attempt, round + 1);
    }
    assert!(
        host.events()
            .iter()
            .any(|(t, reason, _)| t == "Warning" && reason == "BackOff")
    );

    // A run of 10 minutes resets the back-off.
    let h = exited(&on)[0];
    host.set_clock(600_000);
    host.exit(h, 1);
    let on = a.wake(raw::WakeEvent::WorkloadExited(h));
    assert_eq!(timer(&on), Some(10_000));
}

#[test]
fn restart_on_failure_stops_after_success() {
    let host = FakeHost::new();
    host.add_module(HELLO, "sha256:aa");
    let spec =
        json!({ "restartPolicy": "OnFailure", "containers": [{ "name": "c", "image": HELLO }] });
    let mut a = Agent::new(&host, pod(spec));
    let on = a.run(None);
    let h = exited(&on)[0];
    host.exit(h, 2);
    let on = a.wake(raw::WakeEvent::WorkloadExited(h));
    assert_eq!(a.state, "CrashLoopBackOff");
    let on = a.wake(if timer(&on).is_some() {
        raw::WakeEvent::TimerElapsed
    } else {
        unreachable!()
    });
    let h = exited(&on)[0];
    host.exit(h, 0);
    a.wake(raw::WakeEvent::WorkloadExited(h));
    assert_eq!(a.state, "Completed");
    assert_eq!(a.status["phase"], "Succeeded");
    assert_eq!(a.container(0)["restartCount"], 1);
}

#[test]
fn never_restarting_failure_fails_the_pod() {
    let host = FakeHost::new();
    host.add_module(HELLO, "sha256:aa");
    let mut a = Agent::new(
        &host,
        pod(json!({ "restartPolicy": "Never", "containers": [{ "name": "c", "image": HELLO }] })),
    );
    let h = exited(&a.run(None))[0];
    host.exit(h, 3);
    let on = a.wake(raw::WakeEvent::WorkloadExited(h));
    assert!(on.is_empty());
    assert_eq!(a.state, "Error");
    assert_eq!(a.status["phase"], "Failed");
    assert_eq!(a.container(0)["state"]["terminated"]["exitCode"], 3);
}

#[test]
fn init_containers_run_in_order_and_share_an_empty_dir() {
    let host = FakeHost::new();
    host.add_module(HELLO, "sha256:aa");
    host.add_module("file:///modules/init.wasm", "sha256:bb");
    let mount = json!([{ "name": "work", "mountPath": "/work" }]);
    let mut a = Agent::new(
        &host,
        pod(json!({
            "initContainers": [
                { "name": "first", "image": "file:///modules/init.wasm", "volumeMounts": mount },
                { "name": "second", "image": "file:///modules/init.wasm", "volumeMounts": mount },
            ],
            "containers": [{ "name": "main", "image": HELLO, "volumeMounts": mount }],
            "volumes": [{ "name": "work", "emptyDir": { "sizeLimit": "1Mi" } }],
        })),
    );
    assert_eq!(
        a.container(0)["state"]["waiting"]["reason"],
        "PodInitializing"
    );
    let on = a.run(None);
    let names = |h: &FakeHost| {
        h.spawned()
            .iter()
            .map(|(_, s)| s.logs.container.clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(names(&host), ["first"]);
    assert_eq!(a.state, "Initializing");
    assert_eq!(a.status["phase"], "Pending");
    assert!(a.status["initContainerStatuses"][0]["state"]["running"].is_object());
    assert_eq!(a.condition("Initialized"), "False");

    host.exit(exited(&on)[0], 0);
    let on = a.wake(raw::WakeEvent::WorkloadExited(exited(&on)[0]));
    assert_eq!(names(&host), ["first", "second"]);
    assert_eq!(
        a.status["initContainerStatuses"][0]["state"]["terminated"]["reason"],
        "Completed"
    );
    assert!(a.status["initContainerStatuses"][1]["state"]["running"].is_object());

    host.exit(exited(&on)[0], 0);
    a.wake(raw::WakeEvent::WorkloadExited(exited(&on)[0]));
    assert_eq!(names(&host), ["first", "second", "main"]);
    assert_eq!(a.state, "Running");
    assert_eq!(a.condition("Initialized"), "True");

    let volumes = host.volumes();
    assert_eq!(volumes.len(), 1);
    assert!(
        matches!(&volumes[0].1.source, VolumeSource::EmptyDir(e) if e.size_limit == Some(1 << 20))
    );
    let vid = volumes[0].0;
    for (_, spec) in host.spawned() {
        assert_eq!(spec.mounts.len(), 1);
        assert_eq!(
            (spec.mounts[0].volume, spec.mounts[0].guest_path.as_str()),
            (vid, "/work")
        );
    }
}

#[test]
fn failing_init_container_follows_restart_policy() {
    let host = FakeHost::new();
    host.add_module(HELLO, "sha256:aa");
    let spec = |policy: &str| {
        json!({
            "restartPolicy": policy,
            "initContainers": [{ "name": "init", "image": HELLO }],
            "containers": [{ "name": "main", "image": HELLO }],
        })
    };
    // Never: the pod fails, main never starts.
    let mut a = Agent::new(&host, pod(spec("Never")));
    let h = exited(&a.run(None))[0];
    host.exit(h, 1);
    assert!(a.wake(raw::WakeEvent::WorkloadExited(h)).is_empty());
    assert_eq!(a.state, "Error");
    assert_eq!(a.status["phase"], "Failed");
    assert_eq!(host.spawned().len(), 1);
    drop(a);

    // Always: the init container restarts after a back-off.
    let host = FakeHost::new();
    host.add_module(HELLO, "sha256:aa");
    let mut a = Agent::new(&host, pod(spec("Always")));
    let h = exited(&a.run(None))[0];
    host.exit(h, 1);
    let on = a.wake(raw::WakeEvent::WorkloadExited(h));
    assert_eq!(a.state, "CrashLoopBackOff");
    assert_eq!(timer(&on), Some(10_000));
    assert_eq!(a.status["phase"], "Pending");
    assert_eq!(
        a.status["initContainerStatuses"][0]["state"]["waiting"]["reason"],
        "CrashLoopBackOff"
    );
    let on = a.wake(raw::WakeEvent::TimerElapsed);
    assert_eq!(a.state, "Initializing");
    assert_eq!(host.spawned().len(), 2);
    assert_eq!(a.status["initContainerStatuses"][0]["restartCount"], 1);
    host.exit(exited(&on)[0], 0);
    a.wake(raw::WakeEvent::WorkloadExited(exited(&on)[0]));
    assert_eq!(a.state, "Running");
}

#[test]
fn missing_config_map_is_create_container_config_error_then_recovers() {
    let host = FakeHost::new();
    host.add_module(HELLO, "sha256:aa");
    host.insert(json!({
        "apiVersion": "v1", "kind": "Secret", "metadata": { "name": "creds", "namespace": "ns" },
        "data": { "token": "c2VjcmV0" },
    }));
    let mut a = Agent::new(
        &host,
        pod(json!({
            "containers": [{
                "name": "main", "image": HELLO,
                "volumeMounts": [{ "name": "cfg", "mountPath": "/etc/cfg", "readOnly": true },
                                 { "name": "sec", "mountPath": "/etc/sec" }],
                "envFrom": [{ "configMapRef": { "name": "settings" }, "prefix": "CFG_" }],
                "env": [{ "name": "TOKEN", "valueFrom": { "secretKeyRef": { "name": "creds", "key": "token" } } }],
            }],
            "volumes": [
                { "name": "cfg", "configMap": { "name": "settings", "items": [{ "key": "a", "path": "dir/a.txt", "mode": 256 }] } },
                { "name": "sec", "secret": { "secretName": "creds", "defaultMode": 384 } },
            ],
        })),
    );
    let on = a.run(None);
    assert_eq!(a.state, "ContainerConfigError");
    assert_eq!(timer(&on), Some(10_000));
    let w = &a.container(0)["state"]["waiting"];
    assert_eq!(w["reason"], "CreateContainerConfigError");
    assert_eq!(w["message"], "configmap \"settings\" not found");
    assert_eq!(a.status["phase"], "Pending");
    let events = host.events();
    assert!(events.iter().any(|(t, _, note)| t == "Warning" && note.contains("configmap \"settings\" not found")), "{events:?}");
    assert!(host.spawned().is_empty());

    // Still missing: retried.
    let on = a.wake(raw::WakeEvent::TimerElapsed);
    assert_eq!(a.state, "ContainerConfigError");
    assert_eq!(timer(&on), Some(10_000));

    host.insert(json!({
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": { "name": "settings", "namespace": "ns" },
        "data": { "a": "alpha", "b": "beta" },
    }));
    a.wake(raw::WakeEvent::TimerElapsed);
    assert_eq!(a.state, "Running");
    let volumes = host.volumes();
    let files = |name: &str| match &volumes
        .iter()
        .rev()
        .find(|(_, r)| r.name == name)
        .unwrap()
        .1
        .source
    {
        VolumeSource::Files(f) => f
            .iter()
            .map(|f| (f.path.clone(), f.contents.clone(), f.mode))
            .collect::<Vec<_>>(),
        _ => panic!("not files"),
    };
    assert_eq!(
        files("cfg"),
        [("dir/a.txt".to_owned(), b"alpha".to_vec(), 0o400)]
    );
    assert_eq!(
        files("sec"),
        [("token".to_owned(), b"secret".to_vec(), 0o600)]
    );
    let (_, spec) = &host.spawned()[0];
    let env: Vec<(&str, &str)> = spec
        .env
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    assert_eq!(
        env,
        [("CFG_a", "alpha"), ("CFG_b", "beta"), ("TOKEN", "secret")]
    );
    assert!(
        spec.mounts
            .iter()
            .any(|m| m.guest_path == "/etc/cfg" && m.read_only)
    );
}

#[test]
fn missing_env_secret_is_create_container_config_error() {
    let host = FakeHost::new();
    host.add_module(HELLO, "sha256:aa");
    let mut a = Agent::new(
        &host,
        pod(json!({ "containers": [{ "name": "main", "image": HELLO,
            "env": [{ "name": "T", "valueFrom": { "secretKeyRef": { "name": "nope", "key": "k" } } }] }] })),
    );
    a.run(None);
    assert_eq!(a.state, "ContainerConfigError");
    assert_eq!(
        a.container(0)["state"]["waiting"]["message"],
        "secret \"nope\" not found"
    );
}

#[test]
fn deletion_from_running_kills_with_grace_and_releases() {
    let host = FakeHost::new();
    host.add_module(HELLO, "sha256:aa");
    let mut a = Agent::new(
        &host,
        pod(json!({ "terminationGracePeriodSeconds": 30, "containers": [
            { "name": "a", "image": HELLO }, { "name": "b", "image": HELLO }] })),
    );
    let on = a.run(None);
    let handles = exited(&on);
    assert_eq!(handles.len(), 2);

    // The delete's grace (5 s) wins over the spec's (30 s).
    let on = a.delete(Some(5));
    assert_eq!(a.state, "Terminated");
    assert_eq!(a.container(0)["ready"], false);
    assert_eq!(a.condition("Ready"), "False");
    assert_eq!(host.kills(), vec![(handles[0], 5000), (handles[1], 5000)]);
    assert_eq!(timer(&on), Some(7000));
    assert_eq!(exited(&on), handles);
    assert!(host.released().is_empty());

    host.fail(handles[0], "killed");
    let on = a.wake(raw::WakeEvent::WorkloadExited(handles[0]));
    assert_eq!(exited(&on), vec![handles[1]]);
    assert!(host.released().is_empty());
    host.exit(handles[1], 0);
    let on = a.wake(raw::WakeEvent::WorkloadExited(handles[1]));
    assert!(on.is_empty());
    assert_eq!(host.released(), vec!["uid-1"]);
    // Nothing more happens however often the host asks.
    assert!(a.run(None).is_empty());
    assert_eq!(host.released().len(), 1);
}

#[test]
fn deletion_uses_the_spec_grace_and_releases_after_the_timer() {
    let host = FakeHost::new();
    host.add_module(HELLO, "sha256:aa");
    let mut a = Agent::new(
        &host,
        pod(
            json!({ "terminationGracePeriodSeconds": 3, "containers": [{ "name": "a", "image": HELLO }] }),
        ),
    );
    let h = exited(&a.run(None))[0];
    let on = a.delete(None);
    assert_eq!(host.kills(), vec![(h, 3000)]);
    assert_eq!(timer(&on), Some(5000));
    assert!(a.wake(raw::WakeEvent::TimerElapsed).is_empty());
    assert_eq!(host.released(), vec!["uid-1"]);
}

#[test]
fn deletion_before_anything_runs_just_releases() {
    let host = FakeHost::new();
    let mut a = Agent::new(
        &host,
        pod(json!({ "containers": [{ "name": "a", "image": "file:///missing.wasm" }] })),
    );
    a.run(None);
    assert_eq!(a.state, "ImagePullBackOff");
    assert!(a.delete(Some(0)).is_empty());
    assert!(host.kills().is_empty());
    assert_eq!(host.released(), vec!["uid-1"]);
}

#[test]
fn unsupported_fields_fail_the_pod() {
    for (spec, field) in [
        (
            json!({ "hostNetwork": true, "containers": [{ "name": "a", "image": HELLO }] }),
            "spec.hostNetwork",
        ),
        (
            json!({ "containers": [{ "name": "a", "image": HELLO, "securityContext": { "privileged": true } }] }),
            "spec.containers[0].securityContext.privileged",
        ),
        (
            json!({ "containers": [{ "name": "a", "image": HELLO, "ports": [{ "containerPort": 80, "hostPort": 8080 }] }] }),
            "spec.containers[0].ports[0].hostPort",
        ),
        (
            json!({ "containers": [{ "name": "a", "image": HELLO }],
                    "volumes": [{ "name": "v", "persistentVolumeClaim": { "claimName": "c" } }] }),
            "spec.volumes[0].persistentVolumeClaim",
        ),
    ] {
        let host = FakeHost::new();
        let mut a = Agent::new(&host, pod(spec));
        assert!(a.run(None).is_empty(), "never hangs: rests in Failed");
        assert_eq!(a.visited, ["Registered", "Error"]);
        assert_eq!(a.status["phase"], "Failed");
        assert_eq!(a.status["reason"], "Unsupported");
        assert!(
            a.status["message"].as_str().unwrap().starts_with(field),
            "{}",
            a.status["message"]
        );
        assert!(
            host.events()
                .iter()
                .any(|(t, r, n)| t == "Warning" && r == "Unsupported" && n.starts_with(field))
        );
        assert!(host.fetches().is_empty());
    }
}

#[test]
fn exec_probes_are_left_to_the_host_and_socket_probes_refused() {
    let host = FakeHost::new();
    host.add_module(HELLO, "sha256:aa");
    let mut a = Agent::new(
        &host,
        pod(
            json!({ "containers": [{ "name": "a", "image": HELLO, "readinessProbe": { "exec": { "command": ["true"] } } }] }),
        ),
    );
    a.run(None);
    assert_eq!(a.state, "Running");
    assert!(!host.events().iter().any(|(_, r, _)| r == "Ignored"));

    let host = FakeHost::new();
    host.add_module(HELLO, "sha256:aa");
    let mut a = Agent::new(
        &host,
        pod(
            json!({ "containers": [{ "name": "a", "image": HELLO, "livenessProbe": { "httpGet": { "port": 80 } } }] }),
        ),
    );
    a.run(None);
    assert!(host.events().iter().any(|(t, r, n)| t == "Warning"
        && r == "Unsupported"
        && n.starts_with("spec.containers[0].livenessProbe.httpGet")));
}

#[test]
fn failed_pull_shows_err_image_pull_then_back_off() {
    let host = FakeHost::new();
    let image = "registry.local/nope:1";
    host.fail_module(image, FetchError::NotFound("manifest unknown".into()));
    let mut a = Agent::new(
        &host,
        pod(json!({ "containers": [{ "name": "a", "image": image }] })),
    );
    let on = a.run(None);
    assert_eq!(
        a.visited,
        [
            "Registered",
            "ImagePull",
            "ImagePullBackOff",
            "ImagePullBackOff"
        ]
    );
    let (_, first) = &a.history[2];
    assert_eq!(
        first["containerStatuses"][0]["state"]["waiting"]["reason"],
        "ErrImagePull"
    );
    assert!(
        first["containerStatuses"][0]["state"]["waiting"]["message"]
            .as_str()
            .unwrap()
            .contains("manifest unknown")
    );
    assert_eq!(
        a.container(0)["state"]["waiting"]["reason"],
        "ImagePullBackOff"
    );
    assert_eq!(timer(&on), Some(10_000));
    assert_eq!(
        host.fetches()[0].pull_policy,
        wasmlet_sdk::workloads::PullPolicy::IfNotPresent
    );

    let on = a.wake(raw::WakeEvent::TimerElapsed);
    assert_eq!(a.state, "ImagePullBackOff");
    assert_eq!(timer(&on), Some(20_000));

    host.add_module(image, "sha256:cc");
    a.wake(raw::WakeEvent::TimerElapsed);
    assert_eq!(a.state, "Running");
    assert!(
        host.events()
            .iter()
            .any(|(t, r, _)| t == "Warning" && r == "Failed")
    );
}

#[test]
fn spawn_failure_is_a_start_error_that_restarts() {
    let host = FakeHost::new();
    host.add_module(HELLO, "sha256:aa");
    let mut a = Agent::new(
        &host,
        pod(json!({ "containers": [{ "name": "a", "image": HELLO }] })),
    );
    // The host forgets the module between pull and spawn: spawn is refused.
    let data: Value = serde_json::from_str(&a.data).unwrap();
    assert!(data["pod"]["main"].is_array());
    host.fail_module(HELLO, FetchError::Other("gone".into()));
    let mut d: Value = data;
    d["pod"]["modules"] = json!({ HELLO: "sha256:aa" });
    a.data = d.to_string();
    a.enter("Starting");
    let on = a.run(None);
    assert_eq!(a.state, "CrashLoopBackOff");
    let last = &a.container(0)["lastState"]["terminated"];
    assert_eq!(
        (last["exitCode"].as_i64(), last["reason"].as_str()),
        (Some(128), Some("StartError"))
    );
    assert_eq!(timer(&on), Some(10_000));
}

#[test]
fn handler_failure_data_reads_as_provider_error() {
    let host = FakeHost::new();
    host.add_module(HELLO, "sha256:aa");
    let mut a = Agent::new(
        &host,
        pod(json!({ "containers": [{ "name": "a", "image": HELLO }] })),
    );
    let h = exited(&a.run(None))[0];
    // The host moves the pod to the error state with Running's data (an undeclared edge).
    a.enter("Error");
    assert_eq!(a.status["phase"], "Failed");
    assert_eq!(a.status["reason"], "ProviderError");
    assert!(a.run(None).is_empty());
    assert_eq!(host.kills().len(), 1);
    assert_eq!(host.kills()[0].0, h);
}
