//! What a call takes besides the object: list selectors, patch bodies and their
//! types, delete options.

use serde::Serialize;

use crate::bindings::client as raw;

/// Which objects [`Client::list`](super::Client::list) returns (like kube's `ListParams`, plus the namespace).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct ListParams {
    /// `None`: all namespaces (or a cluster-scoped kind).
    pub namespace: Option<String>,
    /// A label selector; empty selects everything.
    pub label_selector: String,
    /// A field selector (`spec.nodeName=n1`); the host serves only the fields upstream indexes for the kind.
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

    pub(super) fn to_raw(&self) -> raw::ListParams {
        raw::ListParams {
            namespace: self.namespace.clone(),
            label_selector: self.label_selector.clone(),
            field_selector: self.field_selector.clone(),
        }
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
        /// The object to apply: the fields this manager wants to own.
        body: serde_json::Value,
        /// The manager recorded in `managedFields`; conflicts are reported against other managers.
        field_manager: String,
        /// Take fields other managers own instead of failing with a conflict (`?force=true`).
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

    pub(super) fn split(&self) -> (raw::PatchType, &serde_json::Value) {
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
    /// Dependents stay, with their owner reference removed.
    Orphan,
    /// The object goes at once; the garbage collector deletes dependents afterwards.
    Background,
    /// The object stays (with a `foregroundDeletion` finalizer) until its dependents are gone.
    Foreground,
}

/// Options of [`Client::delete`](super::Client::delete) and [`Client::evict`](super::Client::evict).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeleteParams {
    /// `None`: the server's default for the kind (background for most).
    pub propagation: Option<Propagation>,
    /// Delete only if the object still has this uid.
    pub precondition_uid: Option<String>,
    /// Delete only if the object still has this resourceVersion.
    pub precondition_resource_version: Option<String>,
    /// Seconds a pod gets to stop before it is killed; `None` keeps the pod's own `terminationGracePeriodSeconds`.
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

    /// Sets the grace period, in seconds (0: kill at once).
    pub fn grace_period(mut self, seconds: u32) -> Self {
        self.grace_period_seconds = Some(seconds);
        self
    }

    pub(super) fn to_raw(&self) -> raw::DeleteOptions {
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
