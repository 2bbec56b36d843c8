//! The generic object semantics every resource shares, as upstream's generic
//! registry store: create, update, patch and delete with optimistic concurrency,
//! `generation`, the status subresource, finalizers, graceful deletion, managed
//! fields and CRD schemas. The HTTP layer, the garbage collector and the
//! built-in controllers all write through here, so the rules hold for everyone.
//!
//! One file per verb (`create`, `update`, `patch`, `delete`), with `admission`
//! holding what every write passes through (normalising, defaulting,
//! validation, the update rules for server-owned fields).

mod admission;
mod create;
mod delete;
mod patch;
mod rules;
mod update;

pub(crate) use admission::Admit;
pub(crate) use delete::immortal;

use std::sync::Arc;

use bytes::Bytes;
use serde_json::Value;
use wasmlet_apimachinery::builtin::BuiltinListTypes;
use wasmlet_apimachinery::listtype::{AllAtomic, ListTypes};
use wasmlet_apimachinery::managedfields::Scope;

use crate::meta;
use crate::registry::{Registry, ResourceType};
use crate::status::{ApiError, ApiResult};
use crate::store::{Store, StoreError, Stored};

/// How long a write that did not pin a resourceVersion keeps retrying after
/// losing a compare-and-swap race, as upstream's GuaranteedUpdate does (a
/// fixed count of 16 made 8 concurrent patches of one object fail with 409).
const RETRY_FOR: std::time::Duration = std::time::Duration::from_secs(30);

/// True while a lost race may still be retried.
fn retrying(deadline: std::time::Instant) -> bool {
    std::time::Instant::now() < deadline
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Sub {
    Main,
    Status,
}

#[derive(Debug, Clone)]
pub(crate) struct WriteOptions {
    pub(crate) field_manager: String,
    pub(crate) dry_run: bool,
    pub(crate) force: bool,
    /// The checks that depend on who makes a client's write (the
    /// requester's); `None` for the server's own writes.
    pub(crate) admission: Option<Arc<dyn Admit>>,
    /// `fieldValidation`, duplicate fields and the warnings collected.
    pub(crate) fields: crate::validation::FieldChecks,
    /// The subresource a write through [`Resources::modify`] is recorded
    /// under in `managedFields` (`scale`, `binding`), as upstream records it.
    pub(crate) subresource: Option<&'static str>,
}

impl WriteOptions {
    /// The server's own write as `manager`: each of its components writes
    /// under its own name, as kube-controller-manager's controllers do.
    pub(crate) fn by(manager: &str) -> WriteOptions {
        WriteOptions {
            field_manager: manager.into(),
            ..Default::default()
        }
    }

    /// What this write may own and which subresource its entry names.
    fn scope(&self, rt: &ResourceType, sub: Sub) -> Scope {
        match self.subresource {
            Some(s) => Scope {
                subresource: Some(s.into()),
                ignored: vec![],
            },
            None => scope(rt, sub),
        }
    }
}

impl Default for WriteOptions {
    fn default() -> Self {
        WriteOptions {
            field_manager: "wasmlet".into(),
            dry_run: false,
            force: false,
            admission: None,
            fields: Default::default(),
            subresource: None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Propagation {
    Orphan,
    Background,
    Foreground,
}

#[derive(Debug, Clone, Default)]
pub(crate) struct DeleteOptions {
    pub(crate) grace_period_seconds: Option<i64>,
    pub(crate) propagation: Option<Propagation>,
    pub(crate) precondition_uid: Option<String>,
    pub(crate) precondition_rv: Option<String>,
    pub(crate) dry_run: bool,
}

pub(crate) enum PatchBody {
    Merge(Value),
    Json(Value),
    Strategic(Value),
    Apply(Value),
}

/// Result of a write: the stored object, and whether it was created.
pub(crate) struct Written {
    pub(crate) object: Arc<Stored>,
    pub(crate) created: bool,
}

/// Result of a delete: the last state, and whether it is gone already (or
/// waits for finalizers / a graceful shutdown).
pub(crate) struct Deleted {
    pub(crate) object: Arc<Stored>,
    pub(crate) gone: bool,
}

/// The object a write addresses: its type, the API version the request used,
/// where it lives and which part of it is written.
#[derive(Clone, Copy)]
pub(crate) struct Address<'a> {
    pub(crate) rt: &'a ResourceType,
    pub(crate) version: &'a str,
    pub(crate) ns: &'a str,
    pub(crate) name: &'a str,
    pub(crate) sub: Sub,
}

impl Address<'_> {
    fn key(&self) -> String {
        self.rt.key(self.ns, self.name)
    }
}

#[derive(Clone)]
pub(crate) struct Resources {
    pub(crate) store: Store,
    pub(crate) registry: Arc<Registry>,
    /// Each namespace's ResourceQuota gate, shared by creates and the
    /// quota controller's recounts (see `resourcequota`).
    pub(crate) quota_gate: Arc<crate::resourcequota::Gate>,
}

fn store_error(rt: &ResourceType, name: &str, e: StoreError) -> ApiError {
    match e {
        StoreError::AlreadyExists => ApiError::already_exists(rt, name),
        StoreError::NotFound => ApiError::not_found(rt, name),
        StoreError::Conflict { .. } => ApiError::conflict(rt, name),
        StoreError::Internal(m) => ApiError::internal(m),
    }
}

/// For a [`Stored::value`] that failed: the key is in the message.
impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> ApiError {
        ApiError::internal(e.to_string())
    }
}

impl Resources {
    pub(crate) fn new(store: Store, registry: Arc<Registry>) -> Resources {
        Resources {
            store,
            registry,
            quota_gate: Arc::default(),
        }
    }

    /// How lists merge: for strategic merge patch (`apply == false`) or for
    /// managed fields and server-side apply (which use `listType` keys).
    fn list_types(
        &self,
        rt: &ResourceType,
        version: &str,
        apply: bool,
    ) -> Box<dyn ListTypes + Send + Sync> {
        if rt.builtin {
            Box::new(if apply {
                BuiltinListTypes::for_apply(&rt.group, &rt.kind)
            } else {
                BuiltinListTypes::for_kind(&rt.group, &rt.kind)
            })
        } else if let Some(s) = rt.schemas.get(version) {
            Box::new(s.as_ref().clone())
        } else {
            Box::new(AllAtomic)
        }
    }

    /// Serves (or stops serving) what a stored CRD declares, the moment it is
    /// written, so custom resources can be created right after their CRD.
    fn after_write(&self, rt: &ResourceType, stored: &Stored, gone: bool) {
        if rt.group != "apiextensions.k8s.io" || rt.resource != "customresourcedefinitions" {
            return;
        }
        let v = match stored.value() {
            Ok(v) => v,
            Err(e) => return tracing::error!(error = %e, "stored CRD cannot be read"),
        };
        match crate::crd::resource_type(&v) {
            Ok(t) if gone => self.registry.remove(&t.group, &t.resource),
            Ok(t) => {
                let (group, resource) = (t.group.clone(), t.resource.clone());
                if !self.registry.insert(t) {
                    tracing::warn!(
                        crd = meta::name(&v),
                        "stored CRD names {resource}.{group}, a built-in type: not served"
                    );
                }
            }
            Err(causes) => {
                tracing::warn!(crd = meta::name(&v), ?causes, "stored CRD cannot be served")
            }
        }
    }

    /// Serves every stored CRD (at start).
    pub(crate) fn load_crds(&self) {
        let Some(rt) =
            self.registry
                .lookup("apiextensions.k8s.io", "v1", "customresourcedefinitions")
        else {
            return;
        };
        let snap = self.store.snapshot();
        for s in snap.range(&rt.prefix(None), None) {
            self.after_write(&rt, s, false);
        }
    }

    pub(crate) fn get(&self, rt: &ResourceType, ns: &str, name: &str) -> ApiResult<Arc<Stored>> {
        self.store
            .get(&rt.key(ns, name))
            .ok_or_else(|| ApiError::not_found(rt, name))
    }

    /// The object's JSON as the client asked for it (`apiVersion` of the
    /// requested version; custom resources convert with strategy `None`).
    pub(crate) fn render(
        &self,
        rt: &ResourceType,
        version: &str,
        stored: &Stored,
    ) -> ApiResult<Bytes> {
        if crate::events::is_view(&rt.group, &rt.resource) {
            return Ok(Bytes::from(
                serde_json::to_vec(&crate::events::to_events_v1(&stored.value()?))
                    .unwrap_or_default(),
            ));
        }
        let want = rt.api_version(version);
        // The hot path (every LIST item, every watch event for every watcher):
        // served as stored, no parse.
        if stored.api_version == want {
            return Ok(stored.json.clone());
        }
        let mut v = stored.value()?;
        v["apiVersion"] = Value::String(want);
        Ok(Bytes::from(serde_json::to_vec(&v).unwrap_or_default()))
    }
}

/// Which fields a write may own: status writes own status, main-resource
/// writes of kinds with a status subresource own everything but status.
fn scope(rt: &ResourceType, sub: Sub) -> Scope {
    match sub {
        Sub::Status => Scope {
            subresource: Some("status".into()),
            ignored: vec![vec!["spec".into()]],
        },
        Sub::Main if rt.status => Scope {
            subresource: None,
            ignored: vec![vec!["status".into()]],
        },
        Sub::Main => Scope {
            subresource: None,
            ignored: vec![],
        },
    }
}
