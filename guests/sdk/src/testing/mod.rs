//! A fake host for unit-testing guest logic natively (`cargo test`, not wasm).
//!
//! ```
//! use std::sync::Arc;
//! use k8s_openapi::api::core::v1::ConfigMap;
//! use wasmlet_sdk::client::ListParams;
//! use wasmlet_sdk::testing::FakeHost;
//!
//! let host = FakeHost::new();
//! host.insert(serde_json::json!({
//!     "apiVersion": "v1", "kind": "ConfigMap",
//!     "metadata": { "name": "a", "namespace": "ns", "labels": { "app": "x" } },
//!     "data": { "k": "v" }
//! }));
//! let _guard = host.install();
//! let cms: Vec<ConfigMap> = wasmlet_sdk::client::Client::new()
//!     .list(&ListParams::namespaced("ns").labels("app=x")).unwrap();
//! assert_eq!(cms.len(), 1);
//! ```
//!
//! What it models: an object store with get/list (label selectors with `=`, `==`,
//! `!=`, `key`, `!key`; field selectors on `metadata.name` / `metadata.namespace`),
//! create/update with resourceVersion conflicts, merge patches (apply and strategic
//! patches are applied as merge patches, an apply creating a missing object; JSON
//! patches are refused), delete and evict,
//! plus recorded events, logs and writes. Named clusters (`ctx.cluster(NAME)`) are
//! fakes of their own, made with [`FakeHost::cluster`]. Kinds marked with [`FakeHost::deny`] answer
//! `denied`, as a manifest that does not grant them would.
//!
//! For providers it also fakes `workloads`: modules are added with
//! [`FakeHost::add_module`] (ready), [`FakeHost::add_pending_module`] (pending until
//! [`FakeHost::finish_fetch`]) or [`FakeHost::fail_module`]; any other image is
//! `not-found`. `spawn` records the spec and starts a workload that runs until the test
//! ends it with [`FakeHost::exit`] or [`FakeHost::fail`]; `kill` is only recorded. Time is
//! a fake clock ([`FakeHost::set_clock`]) used for start and finish times.
//!
//! [`RecordedCall`] turns a call the host recorded (`wasmlet up --record NAME`) into
//! a fixture: its input object, a `FakeHost` holding what it read, and its outcome.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;

use serde::Serialize;
use serde_json::Value;

use crate::bindings::{client as raw, log as raw_log, types, workloads as wl};
use crate::host::{Cluster, Host, InstalledHost, install};

mod record;
mod selectors;
mod workloads;

pub use record::RecordedCall;

use selectors::fields_match;
pub use selectors::labels_match;
use workloads::FakeWorkloads;

type Key = (String, String, Option<String>, String);

/// An in-memory stand-in for the wasmlet host. Cheap to clone (shared state).
#[derive(Clone, Default)]
pub struct FakeHost {
    inner: Rc<Inner>,
}

#[derive(Default)]
struct Inner {
    objects: RefCell<BTreeMap<Key, Value>>,
    denied: RefCell<BTreeSet<String>>,
    events: RefCell<Vec<raw::Event>>,
    logs: RefCell<Vec<(String, String)>>,
    writes: RefCell<Vec<String>>,
    next_version: RefCell<u64>,
    wl: RefCell<FakeWorkloads>,
    /// The host's named clusters (`clusters` import), each a fake of its own.
    clusters: RefCell<BTreeMap<String, FakeHost>>,
}

impl FakeHost {
    /// An empty fake: no objects, no workloads, no named clusters.
    pub fn new() -> Self {
        Self::default()
    }

    /// Makes this the host of the current thread until the guard drops.
    pub fn install(&self) -> InstalledHost {
        install(Rc::new(self.clone()))
    }

    /// Puts an object (anything serialising with apiVersion, kind and metadata.name)
    /// into the store as it is.
    pub fn insert(&self, obj: impl Serialize) {
        let obj = serde_json::to_value(obj).expect("object serialises");
        let key = key_of(&obj).expect("object has apiVersion, kind and metadata.name");
        self.inner.objects.borrow_mut().insert(key, obj);
    }

    /// The stored object, if any.
    pub fn object(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Option<Value> {
        let key = (
            api_version.to_owned(),
            kind.to_owned(),
            namespace.map(str::to_owned),
            name.to_owned(),
        );
        self.inner.objects.borrow().get(&key).cloned()
    }

    /// The fake of the host's named cluster `name` (`ctx.cluster(name)`),
    /// configured on first use: insert objects into it and read what the code
    /// under test wrote there. Calls to a named cluster never configured this
    /// way answer `invalid`, naming the cluster, as a host without that
    /// `--cluster` does.
    pub fn cluster(&self, name: &str) -> FakeHost {
        self.inner
            .clusters
            .borrow_mut()
            .entry(name.to_owned())
            .or_default()
            .clone()
    }

    /// The fake `at` addresses: this one, or its named cluster's.
    fn at(&self, at: Cluster<'_>) -> Result<FakeHost, raw::ClientError> {
        let Cluster::Named(name) = at else {
            return Ok(self.clone());
        };
        self.inner
            .clusters
            .borrow()
            .get(name)
            .cloned()
            .ok_or_else(|| {
                raw::ClientError::Invalid(format!(
                    "cluster \"{name}\" is not configured on this host"
                ))
            })
    }

    /// Calls on `kind` (e.g. `"Secret"`) fail with `denied` from now on.
    pub fn deny(&self, kind: &str) {
        self.inner.denied.borrow_mut().insert(kind.to_owned());
    }

    /// Events recorded so far, as `(type, reason, note)`.
    pub fn events(&self) -> Vec<(String, String, String)> {
        self.inner
            .events
            .borrow()
            .iter()
            .map(|e| {
                let t = match e.type_ {
                    raw::EventType::Normal => "Normal",
                    raw::EventType::Warning => "Warning",
                };
                (t.to_owned(), e.reason.clone(), e.note.clone())
            })
            .collect()
    }

    /// Log records so far, as `(level, message)`.
    pub fn logs(&self) -> Vec<(String, String)> {
        self.inner.logs.borrow().clone()
    }

    /// Writes so far, as `"verb Kind namespace/name"`.
    pub fn writes(&self) -> Vec<String> {
        self.inner.writes.borrow().clone()
    }

    fn check(&self, kind: &str, verb: &str) -> Result<(), raw::ClientError> {
        if self.inner.denied.borrow().contains(kind) {
            return Err(raw::ClientError::Denied(format!("{verb} {kind}")));
        }
        Ok(())
    }

    fn record(&self, verb: &str, key: &Key) {
        let ns = key
            .2
            .as_deref()
            .map(|n| format!("{n}/"))
            .unwrap_or_default();
        self.inner
            .writes
            .borrow_mut()
            .push(format!("{verb} {} {ns}{}", key.1, key.3));
    }

    fn bump(&self, obj: &mut Value) {
        let mut v = self.inner.next_version.borrow_mut();
        *v += 1;
        if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.insert("resourceVersion".into(), Value::String(v.to_string()));
            meta.entry("uid")
                .or_insert_with(|| Value::String(format!("uid-{v}")));
        }
    }
}

fn key_of(obj: &Value) -> Option<Key> {
    Some((
        obj.get("apiVersion")?.as_str()?.to_owned(),
        obj.get("kind")?.as_str()?.to_owned(),
        obj.pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .map(str::to_owned),
        obj.pointer("/metadata/name")?.as_str()?.to_owned(),
    ))
}

fn raw_key(r: &types::ObjectRef) -> Key {
    (
        r.api_version.clone(),
        r.kind.clone(),
        r.namespace.clone(),
        r.name.clone(),
    )
}

fn parse(json: &str) -> Result<Value, raw::ClientError> {
    serde_json::from_str(json).map_err(|e| raw::ClientError::Invalid(e.to_string()))
}

/// RFC 7386 JSON merge patch.
fn merge(target: &mut Value, patch: &Value) {
    match patch {
        Value::Object(p) => {
            if !target.is_object() {
                *target = Value::Object(Default::default());
            }
            let t = target.as_object_mut().expect("object");
            for (k, v) in p {
                if v.is_null() {
                    t.remove(k);
                } else {
                    merge(t.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
        }
        other => *target = other.clone(),
    }
}

impl Host for FakeHost {
    fn get(&self, at: Cluster<'_>, target: &types::ObjectRef) -> Result<String, raw::ClientError> {
        let this = self.at(at)?;
        this.check(&target.kind, "get")?;
        let objects = this.inner.objects.borrow();
        objects
            .get(&raw_key(target))
            .map(Value::to_string)
            .ok_or(raw::ClientError::NotFound)
    }

    fn list(
        &self,
        at: Cluster<'_>,
        of: &types::TypeRef,
        params: &raw::ListParams,
    ) -> Result<Vec<String>, raw::ClientError> {
        let this = self.at(at)?;
        this.check(&of.kind, "list")?;
        let empty = serde_json::Map::new();
        let objects = this.inner.objects.borrow();
        Ok(objects
            .iter()
            .filter(|((av, kind, ns, _), _)| {
                *av == of.api_version
                    && *kind == of.kind
                    && (params.namespace.is_none() || *ns == params.namespace)
            })
            .filter(|(_, obj)| {
                let labels = obj
                    .pointer("/metadata/labels")
                    .and_then(Value::as_object)
                    .unwrap_or(&empty);
                labels_match(&params.label_selector, labels)
                    && params
                        .field_selector
                        .as_deref()
                        .is_none_or(|f| fields_match(f, obj))
            })
            .map(|(_, obj)| obj.to_string())
            .collect())
    }

    fn create(&self, at: Cluster<'_>, obj: &str) -> Result<String, raw::ClientError> {
        let this = self.at(at)?;
        let mut obj = parse(obj)?;
        let key = key_of(&obj)
            .ok_or_else(|| raw::ClientError::Invalid("missing apiVersion, kind or name".into()))?;
        this.check(&key.1, "create")?;
        if this.inner.objects.borrow().contains_key(&key) {
            return Err(raw::ClientError::Conflict(format!(
                "{} {} already exists",
                key.1, key.3
            )));
        }
        this.bump(&mut obj);
        this.record("create", &key);
        this.inner.objects.borrow_mut().insert(key, obj.clone());
        Ok(obj.to_string())
    }

    fn update(&self, at: Cluster<'_>, obj: &str) -> Result<String, raw::ClientError> {
        let this = self.at(at)?;
        let mut obj = parse(obj)?;
        let key = key_of(&obj)
            .ok_or_else(|| raw::ClientError::Invalid("missing apiVersion, kind or name".into()))?;
        this.check(&key.1, "update")?;
        let current = this
            .inner
            .objects
            .borrow()
            .get(&key)
            .cloned()
            .ok_or(raw::ClientError::NotFound)?;
        let rv = |o: &Value| o.pointer("/metadata/resourceVersion").cloned();
        if rv(&obj).is_some() && rv(&obj) != rv(&current) {
            return Err(raw::ClientError::Conflict(
                "resourceVersion is stale".into(),
            ));
        }
        this.bump(&mut obj);
        this.record("update", &key);
        this.inner.objects.borrow_mut().insert(key, obj.clone());
        Ok(obj.to_string())
    }

    fn patch(
        &self,
        at: Cluster<'_>,
        target: &types::ObjectRef,
        how: &raw::PatchType,
        body: &str,
        status: bool,
    ) -> Result<String, raw::ClientError> {
        let this = self.at(at)?;
        this.check(&target.kind, "patch")?;
        if matches!(how, raw::PatchType::Json) {
            return Err(raw::ClientError::Invalid(
                "the fake host does not apply JSON patches".into(),
            ));
        }
        let key = raw_key(target);
        let current = this.inner.objects.borrow().get(&key).cloned();
        // Server-side apply creates what is missing, as the API server does.
        let creates = current.is_none() && !status && matches!(how, raw::PatchType::Apply(_));
        let mut obj = match current {
            Some(o) => o,
            None if creates => serde_json::json!({
                "apiVersion": target.api_version, "kind": target.kind,
                "metadata": { "name": target.name, "namespace": target.namespace },
            }),
            None => return Err(raw::ClientError::NotFound),
        };
        let body = parse(body)?;
        if status {
            merge(
                &mut obj,
                &serde_json::json!({ "status": body.get("status").cloned().unwrap_or(Value::Null) }),
            );
        } else {
            merge(&mut obj, &body);
        }
        if obj.pointer("/metadata/namespace") == Some(&Value::Null)
            && let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut)
        {
            meta.remove("namespace");
        }
        this.bump(&mut obj);
        let verb = match (status, creates) {
            (true, _) => "patch-status",
            (false, true) => "apply-create",
            (false, false) => "patch",
        };
        this.record(verb, &key);
        this.inner.objects.borrow_mut().insert(key, obj.clone());
        Ok(obj.to_string())
    }

    fn delete(
        &self,
        at: Cluster<'_>,
        target: &types::ObjectRef,
        _options: &raw::DeleteOptions,
    ) -> Result<(), raw::ClientError> {
        let this = self.at(at)?;
        this.check(&target.kind, "delete")?;
        let key = raw_key(target);
        this.inner
            .objects
            .borrow_mut()
            .remove(&key)
            .ok_or(raw::ClientError::NotFound)?;
        this.record("delete", &key);
        Ok(())
    }

    fn evict(
        &self,
        namespace: &str,
        name: &str,
        _options: &raw::DeleteOptions,
    ) -> Result<(), raw::ClientError> {
        self.check("Pod", "evict")?;
        let key = (
            "v1".to_owned(),
            "Pod".to_owned(),
            Some(namespace.to_owned()),
            name.to_owned(),
        );
        self.inner
            .objects
            .borrow_mut()
            .remove(&key)
            .ok_or(raw::ClientError::NotFound)?;
        self.record("evict", &key);
        Ok(())
    }

    fn bind(&self, namespace: &str, name: &str, node: &str) -> Result<(), raw::ClientError> {
        self.check("Pod", "bind")?;
        let key = (
            "v1".to_owned(),
            "Pod".to_owned(),
            Some(namespace.to_owned()),
            name.to_owned(),
        );
        let mut objects = self.inner.objects.borrow_mut();
        let pod = objects.get_mut(&key).ok_or(raw::ClientError::NotFound)?;
        if let Some(n) = pod["spec"]["nodeName"].as_str().filter(|n| !n.is_empty()) {
            return Err(raw::ClientError::Conflict(format!(
                "pod {name} is already assigned to node \"{n}\""
            )));
        }
        pod["spec"]["nodeName"] = serde_json::json!(node);
        drop(objects);
        self.record("bind", &key);
        Ok(())
    }

    fn record_event(&self, event: &raw::Event) -> Result<(), raw::ClientError> {
        self.inner.events.borrow_mut().push(event.clone());
        Ok(())
    }

    fn log(&self, level: raw_log::Level, message: &str, _fields: &[(String, String)]) {
        let level = match level {
            raw_log::Level::Trace => "trace",
            raw_log::Level::Debug => "debug",
            raw_log::Level::Info => "info",
            raw_log::Level::Warn => "warn",
            raw_log::Level::Error => "error",
        };
        self.inner
            .logs
            .borrow_mut()
            .push((level.to_owned(), message.to_owned()));
    }

    fn fetch_module(&self, req: &wl::FetchRequest) -> Result<wl::FetchProgress, wl::FetchError> {
        self.inner.wl.borrow_mut().fetch_module(req)
    }

    fn prepare_volume(&self, req: &wl::VolumeRequest) -> Result<u64, wl::WorkloadError> {
        self.inner.wl.borrow_mut().prepare_volume(req)
    }

    fn spawn(&self, spec: &wl::SpawnSpec) -> Result<u64, wl::WorkloadError> {
        self.inner.wl.borrow_mut().spawn(spec)
    }

    fn workload_status(&self, handle: u64) -> Result<wl::WorkloadStatus, wl::WorkloadError> {
        self.inner.wl.borrow().workload_status(handle)
    }

    fn kill(&self, handle: u64, grace_ms: u32) -> Result<(), wl::WorkloadError> {
        self.inner.wl.borrow_mut().kill(handle, grace_ms)
    }

    fn read_logs(&self, handle: u64, max_bytes: u32) -> Result<Vec<u8>, wl::WorkloadError> {
        self.inner.wl.borrow().read_logs(handle, max_bytes)
    }

    fn release_pod(&self, pod_uid: &str) {
        self.inner.wl.borrow_mut().release_pod(pod_uid);
    }
}
