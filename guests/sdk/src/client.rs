//! The typed Kubernetes client: objects in and out as k8s-openapi / kube types.
//!
//! Every method works for any `K: kube::Resource<DynamicType = ()>` (all k8s-openapi
//! types and every `#[derive(CustomResource)]` type); the host checks each call against
//! the plugin manifest, so a call it does not grant returns [`ClientError::Denied`].
//!
//! ```no_run
//! use k8s_openapi::api::core::v1::{ConfigMap, Pod};
//! use wasmlet_sdk::client::{Client, DeleteParams, ListParams, Patch};
//!
//! # fn demo() -> Result<(), wasmlet_sdk::client::ClientError> {
//! let client = Client::new();
//! let pod: Pod = client.get("default", "web-0")?;
//! let maybe: Option<ConfigMap> = client.get_opt("default", "settings")?;
//! let pods: Vec<Pod> = client.list(&ListParams::namespaced("default").labels("app=web"))?;
//! client.patch::<Pod>("default", "web-0", &Patch::merge(serde_json::json!({
//!     "metadata": { "labels": { "seen": "yes" } }
//! })))?;
//! client.delete::<ConfigMap>("default", "old", &DeleteParams::background())?;
//! client.evict("default", "web-1")?;
//! # Ok(()) }
//! ```

use std::fmt;

use kube::Resource;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::bindings::{client as raw, types};
use crate::host::with_host;

/// Why a client call failed (the contract's `client-error`, plus [`ClientError::Decode`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientError {
    /// 404: no such object.
    NotFound,
    /// 409: stale resourceVersion, or the object already exists. Retry soon.
    Conflict(String),
    /// The plugin manifest does not grant this call.
    Denied(String),
    /// The request was rejected as invalid (400/422).
    Invalid(String),
    /// 429 (or an eviction blocked by a PodDisruptionBudget). Retry soon.
    TooManyRequests,
    /// The API server or the host's cache is unavailable.
    Unavailable(String),
    /// Anything else.
    Other(String),
    /// The SDK could not encode the request or decode the answer as the requested type.
    Decode(String),
}

impl ClientError {
    /// Whether retrying soon (not with exponential back-off) is the right response.
    pub fn is_retry_soon(&self) -> bool {
        matches!(
            self,
            ClientError::Conflict(_) | ClientError::TooManyRequests
        )
    }

    /// A short UpperCamelCase reason, as used in conditions and events.
    pub fn reason(&self) -> &'static str {
        match self {
            ClientError::NotFound => "NotFound",
            ClientError::Conflict(_) => "Conflict",
            ClientError::Denied(_) => "Forbidden",
            ClientError::Invalid(_) => "Invalid",
            ClientError::TooManyRequests => "TooManyRequests",
            ClientError::Unavailable(_) => "Unavailable",
            ClientError::Other(_) => "ClientError",
            ClientError::Decode(_) => "DecodeError",
        }
    }
}

impl fmt::Display for ClientError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClientError::NotFound => f.write_str("not found"),
            ClientError::Conflict(m) => write!(f, "conflict: {m}"),
            ClientError::Denied(m) => write!(f, "denied by the plugin manifest: {m}"),
            ClientError::Invalid(m) => write!(f, "invalid request: {m}"),
            ClientError::TooManyRequests => f.write_str("too many requests"),
            ClientError::Unavailable(m) => write!(f, "unavailable: {m}"),
            ClientError::Other(m) => f.write_str(m),
            ClientError::Decode(m) => write!(f, "decoding: {m}"),
        }
    }
}

impl std::error::Error for ClientError {}

impl From<raw::ClientError> for ClientError {
    fn from(e: raw::ClientError) -> Self {
        match e {
            raw::ClientError::NotFound => ClientError::NotFound,
            raw::ClientError::Conflict(m) => ClientError::Conflict(m),
            raw::ClientError::Denied(m) => ClientError::Denied(m),
            raw::ClientError::Invalid(m) => ClientError::Invalid(m),
            raw::ClientError::TooManyRequests => ClientError::TooManyRequests,
            raw::ClientError::Unavailable(m) => ClientError::Unavailable(m),
            raw::ClientError::Other(m) => ClientError::Other(m),
        }
    }
}

/// One object: its type and where it is.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ObjectRef {
    pub api_version: String,
    pub kind: String,
    /// `None` for cluster-scoped kinds.
    pub namespace: Option<String>,
    pub name: String,
}

impl ObjectRef {
    /// The object of type `K` called `name` in `namespace` (`None`: cluster-scoped).
    pub fn of<'a, K: Resource<DynamicType = ()>>(
        namespace: impl Into<Option<&'a str>>,
        name: &str,
    ) -> Self {
        ObjectRef {
            api_version: K::api_version(&()).into_owned(),
            kind: K::kind(&()).into_owned(),
            namespace: namespace.into().map(str::to_owned),
            name: name.to_owned(),
        }
    }

    /// The reference of an object in hand.
    pub fn from_obj<K: Resource<DynamicType = ()>>(obj: &K) -> Self {
        let meta = obj.meta();
        ObjectRef {
            api_version: K::api_version(&()).into_owned(),
            kind: K::kind(&()).into_owned(),
            namespace: meta.namespace.clone(),
            name: meta.name.clone().unwrap_or_default(),
        }
    }

    pub(crate) fn to_raw(&self) -> types::ObjectRef {
        types::ObjectRef {
            api_version: self.api_version.clone(),
            kind: self.kind.clone(),
            namespace: self.namespace.clone(),
            name: self.name.clone(),
        }
    }
}

impl fmt::Display for ObjectRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{}/{} {}/{}", self.api_version, self.kind, ns, self.name),
            None => write!(f, "{}/{} {}", self.api_version, self.kind, self.name),
        }
    }
}

/// Which objects [`Client::list`] returns (like kube's `ListParams`, plus the namespace).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListParams {
    /// `None`: all namespaces (or a cluster-scoped kind).
    pub namespace: Option<String>,
    /// A label selector; empty selects everything.
    pub label_selector: String,
    pub field_selector: Option<String>,
}

impl ListParams {
    /// Everything, in every namespace.
    pub fn all() -> Self {
        Self::default()
    }

    /// Everything in `namespace`.
    pub fn namespaced(namespace: &str) -> Self {
        Self {
            namespace: Some(namespace.to_owned()),
            ..Self::default()
        }
    }

    /// Restricts to `namespace`.
    pub fn namespace(mut self, namespace: &str) -> Self {
        self.namespace = Some(namespace.to_owned());
        self
    }

    /// Sets the label selector, e.g. `app=web,tier!=db`.
    pub fn labels(mut self, selector: &str) -> Self {
        self.label_selector = selector.to_owned();
        self
    }

    /// Sets the field selector, e.g. `spec.nodeName=node-1`.
    pub fn fields(mut self, selector: &str) -> Self {
        self.field_selector = Some(selector.to_owned());
        self
    }
}

/// A patch body and how the API server should read it.
#[derive(Debug, Clone, PartialEq)]
pub enum Patch {
    /// JSON merge patch (RFC 7386).
    Merge(serde_json::Value),
    /// JSON patch (RFC 6902): an array of operations.
    Json(serde_json::Value),
    /// Strategic merge patch (built-in kinds only).
    Strategic(serde_json::Value),
    /// Server-side apply as `field_manager`.
    Apply {
        body: serde_json::Value,
        field_manager: String,
        force: bool,
    },
}

impl Patch {
    /// A JSON merge patch of anything serialisable (a `json!` value or a typed object).
    pub fn merge(body: impl Serialize) -> Self {
        Patch::Merge(to_value(body))
    }

    /// A JSON patch: `json!([{"op": "replace", "path": "/spec/replicas", "value": 3}])`.
    pub fn json(ops: impl Serialize) -> Self {
        Patch::Json(to_value(ops))
    }

    /// A strategic merge patch.
    pub fn strategic(body: impl Serialize) -> Self {
        Patch::Strategic(to_value(body))
    }

    /// Server-side apply of `body` (a partial object with apiVersion and kind) as `field_manager`.
    pub fn apply(body: impl Serialize, field_manager: &str) -> Self {
        Patch::Apply {
            body: to_value(body),
            field_manager: field_manager.to_owned(),
            force: false,
        }
    }

    /// For [`Patch::apply`]: take over fields other managers own.
    pub fn force(mut self) -> Self {
        if let Patch::Apply { force, .. } = &mut self {
            *force = true;
        }
        self
    }

    fn split(&self) -> (raw::PatchType, &serde_json::Value) {
        match self {
            Patch::Merge(v) => (raw::PatchType::Merge, v),
            Patch::Json(v) => (raw::PatchType::Json, v),
            Patch::Strategic(v) => (raw::PatchType::Strategic, v),
            Patch::Apply {
                body,
                field_manager,
                force,
            } => (
                raw::PatchType::Apply(raw::ApplyOptions {
                    field_manager: field_manager.clone(),
                    force: *force,
                }),
                body,
            ),
        }
    }
}

/// A value that fails to serialise is a programming error in the guest (a map with
/// non-string keys, a failing `Serialize` impl): it is sent as `null`, which the API
/// server rejects with a message naming the request.
fn to_value(v: impl Serialize) -> serde_json::Value {
    serde_json::to_value(v).unwrap_or(serde_json::Value::Null)
}

/// `propagationPolicy` of a delete.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Propagation {
    Orphan,
    Background,
    Foreground,
}

/// Options of [`Client::delete`] and [`Client::evict`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeleteParams {
    pub propagation: Option<Propagation>,
    /// Delete only if the object still has this uid.
    pub precondition_uid: Option<String>,
    /// Delete only if the object still has this resourceVersion.
    pub precondition_resource_version: Option<String>,
    pub grace_period_seconds: Option<u32>,
}

impl DeleteParams {
    /// Dependents are deleted in the background.
    pub fn background() -> Self {
        Self {
            propagation: Some(Propagation::Background),
            ..Self::default()
        }
    }

    /// The object stays until its dependents are gone.
    pub fn foreground() -> Self {
        Self {
            propagation: Some(Propagation::Foreground),
            ..Self::default()
        }
    }

    /// Dependents are left behind.
    pub fn orphan() -> Self {
        Self {
            propagation: Some(Propagation::Orphan),
            ..Self::default()
        }
    }

    /// Deletes only the object with this uid (not a namesake created since).
    pub fn uid(mut self, uid: &str) -> Self {
        self.precondition_uid = Some(uid.to_owned());
        self
    }

    /// Deletes only at this resourceVersion.
    pub fn resource_version(mut self, rv: &str) -> Self {
        self.precondition_resource_version = Some(rv.to_owned());
        self
    }

    pub fn grace_period(mut self, seconds: u32) -> Self {
        self.grace_period_seconds = Some(seconds);
        self
    }

    fn to_raw(&self) -> raw::DeleteOptions {
        let preconditions =
            if self.precondition_uid.is_some() || self.precondition_resource_version.is_some() {
                Some(raw::Preconditions {
                    uid: self.precondition_uid.clone(),
                    resource_version: self.precondition_resource_version.clone(),
                })
            } else {
                None
            };
        raw::DeleteOptions {
            propagation: self.propagation.map(|p| match p {
                Propagation::Orphan => raw::Propagation::Orphan,
                Propagation::Background => raw::Propagation::Background,
                Propagation::Foreground => raw::Propagation::Foreground,
            }),
            preconditions,
            grace_period_seconds: self.grace_period_seconds,
        }
    }
}

/// `type` of an Event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    Normal,
    Warning,
}

/// A Kubernetes Event to record (see [`Client::event`], `Context::event`).
///
/// ```
/// use wasmlet_sdk::client::Event;
/// let ev = Event::warning("ListFailed", "Reconcile").note("the cache is not ready");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    pub type_: EventType,
    pub reason: String,
    pub action: String,
    pub note: String,
    /// `None`: the object being reconciled (or the pod being handled).
    pub regarding: Option<ObjectRef>,
    pub related: Option<ObjectRef>,
}

impl Event {
    pub fn normal(reason: &str, action: &str) -> Self {
        Self::new(EventType::Normal, reason, action)
    }

    pub fn warning(reason: &str, action: &str) -> Self {
        Self::new(EventType::Warning, reason, action)
    }

    pub fn new(type_: EventType, reason: &str, action: &str) -> Self {
        Event {
            type_,
            reason: reason.to_owned(),
            action: action.to_owned(),
            note: String::new(),
            regarding: None,
            related: None,
        }
    }

    pub fn note(mut self, note: impl Into<String>) -> Self {
        self.note = note.into();
        self
    }

    pub fn regarding(mut self, object: ObjectRef) -> Self {
        self.regarding = Some(object);
        self
    }

    pub fn related(mut self, object: ObjectRef) -> Self {
        self.related = Some(object);
        self
    }
}

/// The typed client. It holds nothing (the host keeps the connection, caches and
/// credentials), so make one wherever it is needed, or use `Context::client`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Client {
    _private: (),
}

impl Client {
    pub fn new() -> Self {
        Client { _private: () }
    }

    /// The object `name` of type `K` (from the host's cache). `namespace` is a `&str`
    /// for namespaced kinds and `None` for cluster-scoped ones.
    pub fn get<'a, K>(
        &self,
        namespace: impl Into<Option<&'a str>>,
        name: &str,
    ) -> Result<K, ClientError>
    where
        K: Resource<DynamicType = ()> + DeserializeOwned,
    {
        let target = ObjectRef::of::<K>(namespace, name).to_raw();
        let json = with_host(|h| h.get(&target))?;
        decode(&json)
    }

    /// As [`Client::get`], with `None` when the object does not exist.
    pub fn get_opt<'a, K>(
        &self,
        namespace: impl Into<Option<&'a str>>,
        name: &str,
    ) -> Result<Option<K>, ClientError>
    where
        K: Resource<DynamicType = ()> + DeserializeOwned,
    {
        match self.get(namespace, name) {
            Ok(obj) => Ok(Some(obj)),
            Err(ClientError::NotFound) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The objects of type `K` that `params` selects (from the host's cache).
    pub fn list<K>(&self, params: &ListParams) -> Result<Vec<K>, ClientError>
    where
        K: Resource<DynamicType = ()> + DeserializeOwned,
    {
        let of = types::TypeRef {
            api_version: K::api_version(&()).into_owned(),
            kind: K::kind(&()).into_owned(),
        };
        let params = raw::ListParams {
            namespace: params.namespace.clone(),
            label_selector: params.label_selector.clone(),
            field_selector: params.field_selector.clone(),
        };
        let items = with_host(|h| h.list(&of, &params))?;
        items.iter().map(|json| decode(json)).collect()
    }

    /// Creates `obj` (namespace from its metadata) and returns it as stored.
    pub fn create<K>(&self, obj: &K) -> Result<K, ClientError>
    where
        K: Resource<DynamicType = ()> + Serialize + DeserializeOwned,
    {
        let body = encode(obj)?;
        decode(&with_host(|h| h.create(&body))?)
    }

    /// Replaces `obj`; its resourceVersion makes this fail with `Conflict` when stale.
    pub fn update<K>(&self, obj: &K) -> Result<K, ClientError>
    where
        K: Resource<DynamicType = ()> + Serialize + DeserializeOwned,
    {
        let body = encode(obj)?;
        decode(&with_host(|h| h.update(&body))?)
    }

    /// Patches the object and returns it as stored.
    pub fn patch<'a, K>(
        &self,
        namespace: impl Into<Option<&'a str>>,
        name: &str,
        patch: &Patch,
    ) -> Result<K, ClientError>
    where
        K: Resource<DynamicType = ()> + DeserializeOwned,
    {
        self.patch_impl(ObjectRef::of::<K>(namespace, name), patch, false)
    }

    /// Patches the object's status subresource. (A reconciler returns the status of the
    /// object it reconciles in its `Action` instead: the host owns that write.)
    pub fn patch_status<'a, K>(
        &self,
        namespace: impl Into<Option<&'a str>>,
        name: &str,
        patch: &Patch,
    ) -> Result<K, ClientError>
    where
        K: Resource<DynamicType = ()> + DeserializeOwned,
    {
        self.patch_impl(ObjectRef::of::<K>(namespace, name), patch, true)
    }

    fn patch_impl<K: DeserializeOwned>(
        &self,
        target: ObjectRef,
        patch: &Patch,
        status: bool,
    ) -> Result<K, ClientError> {
        let (how, body) = patch.split();
        let body = serde_json::to_string(body).map_err(|e| ClientError::Decode(e.to_string()))?;
        decode(&with_host(|h| {
            h.patch(&target.to_raw(), &how, &body, status)
        })?)
    }

    /// Deletes the object.
    pub fn delete<'a, K>(
        &self,
        namespace: impl Into<Option<&'a str>>,
        name: &str,
        params: &DeleteParams,
    ) -> Result<(), ClientError>
    where
        K: Resource<DynamicType = ()>,
    {
        let target = ObjectRef::of::<K>(namespace, name).to_raw();
        Ok(with_host(|h| h.delete(&target, &params.to_raw()))?)
    }

    /// Evicts a pod (honours PodDisruptionBudgets: `TooManyRequests` when one blocks it).
    pub fn evict(&self, namespace: &str, name: &str) -> Result<(), ClientError> {
        self.evict_with(namespace, name, &DeleteParams::default())
    }

    /// [`Client::evict`] with delete options (grace period, preconditions).
    pub fn evict_with(
        &self,
        namespace: &str,
        name: &str,
        params: &DeleteParams,
    ) -> Result<(), ClientError> {
        Ok(with_host(|h| h.evict(namespace, name, &params.to_raw()))?)
    }

    /// Records `event`, which must name what it is about (`Event::regarding`);
    /// `Context::event` fills that in with the object being reconciled.
    pub fn event(&self, event: &Event) -> Result<(), ClientError> {
        let Some(regarding) = &event.regarding else {
            return Err(ClientError::Invalid("an event needs `regarding`".into()));
        };
        let raw_event = raw::Event {
            type_: match event.type_ {
                EventType::Normal => raw::EventType::Normal,
                EventType::Warning => raw::EventType::Warning,
            },
            reason: event.reason.clone(),
            action: event.action.clone(),
            note: event.note.clone(),
            regarding: regarding.to_raw(),
            related: event.related.as_ref().map(ObjectRef::to_raw),
        };
        Ok(with_host(|h| h.record_event(&raw_event))?)
    }
}

fn encode<K: Serialize>(obj: &K) -> Result<String, ClientError> {
    serde_json::to_string(obj).map_err(|e| ClientError::Decode(format!("encoding the object: {e}")))
}

fn decode<K: DeserializeOwned>(json: &str) -> Result<K, ClientError> {
    serde_json::from_str(json).map_err(|e| {
        ClientError::Decode(format!("{} from the host: {e}", std::any::type_name::<K>()))
    })
}
