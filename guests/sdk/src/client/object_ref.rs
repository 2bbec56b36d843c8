//! [`ObjectRef`]: one object by type and place, as calls and events name it.

use std::fmt;

use kube::Resource;

use crate::bindings::types;

/// One object: its type and where it is.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ObjectRef {
    /// `v1`, `apps/v1`: group and version, as in the object's `apiVersion`.
    pub api_version: String,
    /// The kind, e.g. `Pod`.
    pub kind: String,
    /// `None` for cluster-scoped kinds.
    pub namespace: Option<String>,
    /// The object's name.
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
