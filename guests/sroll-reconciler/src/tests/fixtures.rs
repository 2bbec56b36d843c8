//! A small world for the unit tests: the SDK's fake host wrapped to answer
//! HTTP (chat, Consul, callback) and to refuse evictions with 429 on demand,
//! plus a stand-in for the StatefulSet and disruption controllers' status.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};
use wasmlet_sdk::bindings::{client as raw, http as raw_http, log as raw_log, types};
use wasmlet_sdk::host::{Cluster, Host, InstalledHost, install};
use wasmlet_sdk::reconciler::{ConditionStatus, Context};
use wasmlet_sdk::testing::FakeHost;

use crate::api::StatefulsetRollout;

/// Every HTTP request: (method, url, headers, body).
type Requests = Rc<RefCell<Vec<(String, String, Vec<(String, String)>, Vec<u8>)>>>;

/// What one pass returned.
pub struct Out {
    pub status: Value,
    pub progressing: (String, String),
    pub requeue: Option<Duration>,
}

pub struct World {
    pub host: FakeHost,
    sroll: RefCell<Value>,
    pub refuse_evictions: Rc<Cell<bool>>,
    pub consul_passing: Rc<Cell<usize>>,
    pub callback_failures: Rc<Cell<u32>>,
    /// GETs of Secrets the guest made (the chat token's).
    pub secret_gets: Rc<Cell<usize>>,
    /// The chat API answers `ok: false` this many more times.
    pub chat_failures: Rc<Cell<u32>>,
    requests: Requests,
    _guard: InstalledHost,
}

struct Wrap {
    fake: FakeHost,
    refuse_evictions: Rc<Cell<bool>>,
    consul_passing: Rc<Cell<usize>>,
    callback_failures: Rc<Cell<u32>>,
    secret_gets: Rc<Cell<usize>>,
    chat_failures: Rc<Cell<u32>>,
    requests: Requests,
}

impl Host for Wrap {
    fn get(&self, at: Cluster<'_>, t: &types::ObjectRef) -> Result<String, raw::ClientError> {
        if t.kind == "Secret" {
            self.secret_gets.set(self.secret_gets.get() + 1);
        }
        self.fake.get(at, t)
    }
    fn list(
        &self,
        at: Cluster<'_>,
        of: &types::TypeRef,
        p: &raw::ListParams,
    ) -> Result<Vec<String>, raw::ClientError> {
        self.fake.list(at, of, p)
    }
    fn create(&self, at: Cluster<'_>, obj: &str) -> Result<String, raw::ClientError> {
        self.fake.create(at, obj)
    }
    fn update(&self, at: Cluster<'_>, obj: &str) -> Result<String, raw::ClientError> {
        self.fake.update(at, obj)
    }
    fn patch(
        &self,
        at: Cluster<'_>,
        t: &types::ObjectRef,
        how: &raw::PatchType,
        body: &str,
        status: bool,
    ) -> Result<String, raw::ClientError> {
        self.fake.patch(at, t, how, body, status)
    }
    fn evict(&self, ns: &str, name: &str, o: &raw::DeleteOptions) -> Result<(), raw::ClientError> {
        if self.refuse_evictions.get() {
            return Err(raw::ClientError::TooManyRequests);
        }
        self.fake.evict(ns, name, o)
    }
    fn record_event(&self, e: &raw::Event) -> Result<(), raw::ClientError> {
        self.fake.record_event(e)
    }
    fn log(&self, level: raw_log::Level, message: &str, fields: &[(String, String)]) {
        self.fake.log(level, message, fields)
    }
    fn http_fetch(
        &self,
        req: &raw_http::Request,
    ) -> Result<raw_http::Response, raw_http::HttpError> {
        self.requests.borrow_mut().push((
            req.method.clone(),
            req.url.clone(),
            req.headers.clone(),
            req.body.clone(),
        ));
        let ok = |body: Value| {
            Ok(raw_http::Response {
                status: 200,
                headers: vec![],
                body: body.to_string().into_bytes(),
            })
        };
        if req.url.contains("/v1/health/service/") {
            let entries: Vec<Value> = (0..self.consul_passing.get())
                .map(|i| json!({"Node": {"Node": "n"}, "Service": {"ID": format!("web-{i}"), "Service": "web"}}))
                .collect();
            return ok(json!(entries));
        }
        if req.url.ends_with("/cb") {
            if self.callback_failures.get() > 0 {
                self.callback_failures.set(self.callback_failures.get() - 1);
                return Ok(raw_http::Response {
                    status: 503,
                    headers: vec![],
                    body: vec![],
                });
            }
            return ok(json!({}));
        }
        if self.chat_failures.get() > 0 {
            self.chat_failures.set(self.chat_failures.get() - 1);
            return ok(json!({"ok": false, "error": "ratelimited"}));
        }
        let posts = self
            .requests
            .borrow()
            .iter()
            .filter(|r| r.1.ends_with("chat.postMessage"))
            .count();
        ok(json!({"ok": true, "channel": "C1", "ts": format!("ts-{posts}")}))
    }
}

pub fn calls_ts(i: usize) -> Value {
    json!(format!("ts-{}", i + 1))
}

/// Deep-merges `patch` into `v` (null deletes).
pub fn merge(v: &mut Value, patch: &Value) {
    match (v.as_object_mut(), patch.as_object()) {
        (Some(t), Some(p)) => {
            for (k, pv) in p {
                if pv.is_null() {
                    t.remove(k);
                } else {
                    merge(t.entry(k.clone()).or_insert(Value::Null), pv);
                }
            }
        }
        _ => *v = patch.clone(),
    }
}

impl World {
    /// A rollout `web` of `replicas` sleepers at `percent`, with `patch` merged into its spec.
    pub fn new(replicas: i32, percent: i32, patch: Value) -> World {
        let host = FakeHost::new();
        let refuse_evictions = Rc::new(Cell::new(false));
        let consul_passing = Rc::new(Cell::new(0));
        let callback_failures = Rc::new(Cell::new(0));
        let secret_gets = Rc::new(Cell::new(0));
        let chat_failures = Rc::new(Cell::new(0));
        let requests = Rc::new(RefCell::new(Vec::new()));
        let guard = install(Rc::new(Wrap {
            fake: host.clone(),
            refuse_evictions: refuse_evictions.clone(),
            consul_passing: consul_passing.clone(),
            callback_failures: callback_failures.clone(),
            secret_gets: secret_gets.clone(),
            chat_failures: chat_failures.clone(),
            requests: requests.clone(),
        }));
        host.insert(json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "chat", "namespace": "ns"}, "data": {"token": "czNjcmV0"}}));
        let mut spec = json!({
            "percent": percent,
            "statefulset": {"spec": {
                "replicas": replicas,
                "serviceName": "web",
                "updateStrategy": {"type": "OnDelete"},
                "selector": {"matchLabels": {"app": "web"}},
                "template": {"metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [{"name": "main", "image": "v1"}]}},
            }},
        });
        merge(&mut spec, &patch);
        let sroll = json!({
            "apiVersion": "rollouts.wasmlet.dev/v1", "kind": "StatefulsetRollout",
            "metadata": {"name": "web", "namespace": "ns", "uid": "sroll-uid", "generation": 1},
            "spec": spec,
        });
        World {
            host,
            sroll: RefCell::new(sroll),
            refuse_evictions,
            consul_passing,
            callback_failures,
            secret_gets,
            chat_failures,
            requests,
            _guard: guard,
        }
    }

    /// [`World::new`] after the set, its pods (all old, ready) and a budget
    /// allowing `allowed` disruptions exist.
    pub fn ready(replicas: i32, percent: i32, patch: Value, allowed: i32) -> World {
        let w = World::new(replicas, percent, patch);
        let _ = w.pass("2026-11-23T11:00:00Z".parse().unwrap());
        w.set_controller("new", "old");
        w.pods_n(replicas as usize, 0, true);
        w.host.insert(json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": "web", "namespace": "ns", "generation": 1},
            "spec": {"maxUnavailable": allowed.max(1), "selector": {"matchLabels": {"app": "web"}}},
            "status": {"disruptionsAllowed": allowed, "observedGeneration": 1,
                "currentHealthy": replicas, "desiredHealthy": replicas - allowed, "expectedPods": replicas}}));
        w
    }

    /// One reconcile pass at `now`; the returned status is merged as the host would.
    pub fn pass(&self, now: Timestamp) -> Out {
        let sroll: StatefulsetRollout =
            serde_json::from_value(self.sroll.borrow().clone()).unwrap();
        let ctx = Context::for_object(&sroll);
        let action = crate::reconcile_at(&sroll, &ctx, now).expect("reconcile succeeds");
        let status = action.status_json().cloned().unwrap_or(Value::Null);
        let c = &action.conditions()[0];
        let st = match c.status {
            ConditionStatus::True => "True",
            ConditionStatus::False => "False",
            ConditionStatus::Unknown => "Unknown",
        };
        let mut obj = self.sroll.borrow_mut();
        let generation = obj["metadata"]["generation"].clone();
        let mut merged = obj.get("status").cloned().unwrap_or(json!({}));
        merge(&mut merged, &status);
        merged["observedGeneration"] = generation;
        obj["status"] = merged.clone();
        Out {
            status: merged,
            progressing: (st.into(), c.reason.clone()),
            requeue: action.requeue_after(),
        }
    }

    /// Merges `patch` into the stored status (a status an older build wrote).
    pub fn set_status(&self, patch: Value) {
        let mut obj = self.sroll.borrow_mut();
        let mut st = obj.get("status").cloned().unwrap_or(json!({}));
        merge(&mut st, &patch);
        obj["status"] = st;
    }

    pub fn status(&self) -> Value {
        self.sroll.borrow()["status"].clone()
    }

    /// Merges `patch` into the spec and bumps the generation, as an edit would.
    pub fn edit(&self, patch: Value) {
        let mut obj = self.sroll.borrow_mut();
        merge(&mut obj["spec"], &patch);
        let g = obj["metadata"]["generation"].as_i64().unwrap();
        obj["metadata"]["generation"] = json!(g + 1);
    }

    /// The set controller's part: status for its generation, with these revisions.
    pub fn set_controller(&self, update: &str, current: &str) {
        let mut set = self
            .host
            .object("apps/v1", "StatefulSet", Some("ns"), "web")
            .unwrap();
        set["metadata"]["uid"] = json!("set-uid");
        set["metadata"]["generation"] = json!(1);
        set["status"] = json!({"observedGeneration": 1, "replicas": 0,
            "updateRevision": update, "currentRevision": current});
        self.host.insert(set);
    }

    /// Pods web-0.. with these revisions and readiness (replacing all pods).
    pub fn pods(&self, revisions: &[&str], ready: &[bool]) {
        for i in 0..1000 {
            self.host_remove("v1", "Pod", &format!("web-{i}"));
        }
        for (i, (rev, ready)) in revisions.iter().zip(ready).enumerate() {
            self.host.insert(pod(i, rev, *ready));
        }
    }

    /// `n` pods, the top `new` of them on the new revision (ready = `new_ready`).
    pub fn pods_n(&self, n: usize, new: usize, new_ready: bool) {
        let revs: Vec<&str> = (0..n)
            .map(|i| if i >= n - new { "new" } else { "old" })
            .collect();
        let ready: Vec<bool> = (0..n).map(|i| i < n - new || new_ready).collect();
        self.pods(&revs, &ready);
    }

    pub fn crash(&self, name: &str) {
        let mut p = self.host.object("v1", "Pod", Some("ns"), name).unwrap();
        p["status"]["containerStatuses"] = json!([{"name": "main", "image": "v2", "imageID": "",
            "ready": false, "restartCount": 3,
            "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]);
        self.host.insert(p);
    }

    pub fn host_remove(&self, api_version: &str, kind: &str, name: &str) {
        use wasmlet_sdk::host::Host as _;
        let _ = self.host.delete(
            Cluster::Own,
            &types::ObjectRef {
                api_version: api_version.into(),
                kind: kind.into(),
                namespace: Some("ns".into()),
                name: name.into(),
            },
            &raw::DeleteOptions {
                propagation: None,
                preconditions: None,
                grace_period_seconds: None,
            },
        );
    }

    /// Pods evicted so far, in order.
    pub fn evictions(&self) -> Vec<String> {
        self.host
            .writes()
            .iter()
            .filter_map(|w| w.strip_prefix("evict Pod ns/").map(str::to_owned))
            .collect()
    }

    pub fn requests(&self) -> Vec<(String, String)> {
        self.requests
            .borrow()
            .iter()
            .map(|r| (r.0.clone(), r.1.clone()))
            .collect()
    }

    /// Chat calls as (method, body, authorization).
    pub fn chat_calls(&self) -> Vec<(String, Value, String)> {
        self.requests
            .borrow()
            .iter()
            .filter(|r| r.1.contains("/api/chat."))
            .map(|r| {
                let auth =
                    r.2.iter()
                        .find(|h| h.0 == "authorization")
                        .map(|h| h.1.clone());
                (
                    r.1.rsplit('/').next().unwrap().to_owned(),
                    serde_json::from_slice(&r.3).unwrap(),
                    auth.unwrap_or_default(),
                )
            })
            .collect()
    }

    /// Every call that left the guest for an outside system: HTTP requests
    /// (chat, Consul, callback) and Secret reads.
    pub fn external_calls(&self) -> usize {
        self.requests.borrow().len() + self.secret_gets.get()
    }

    pub fn callbacks(&self) -> usize {
        self.callback_bodies().len()
    }

    pub fn callback_bodies(&self) -> Vec<Value> {
        self.requests
            .borrow()
            .iter()
            .filter(|r| r.1.ends_with("/cb"))
            .map(|r| serde_json::from_slice(&r.3).unwrap())
            .collect()
    }
}

fn pod(i: usize, rev: &str, ready: bool) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": format!("web-{i}"), "namespace": "ns",
            "labels": {"app": "web", "controller-revision-hash": rev},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "web",
                "uid": "set-uid", "controller": true}]},
        "spec": {"containers": [{"name": "main", "image": rev}]},
        "status": {"phase": "Running", "podIP": format!("10.0.0.{i}"),
            "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]},
    })
}
