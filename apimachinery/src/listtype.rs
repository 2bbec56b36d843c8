//! How a list field merges: the one question strategic merge patch, server-side
//! apply and CRD schemas all ask. Built-in kinds answer from a table
//! (`patchStrategy`/`patchMergeKey` upstream), CRDs from `x-kubernetes-list-type`.

/// The merge semantics of one list field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListType {
    /// Replaced whole (`x-kubernetes-list-type: atomic`, no patch strategy).
    Atomic,
    /// A set of scalars, merged by value (`set`, `patchStrategy: merge` on scalars).
    Set,
    /// A list of objects keyed by these fields (`map` + `x-kubernetes-list-map-keys`,
    /// `patchMergeKey`).
    Map(Vec<String>),
}

/// Answers [`ListType`] for a field path: the field names from the object's root,
/// list indices left out, e.g. `["spec", "template", "spec", "containers"]`.
pub trait ListTypes {
    /// How the list at `path` merges; [`ListType::Atomic`] for a path that is not a list or not known.
    fn list_type(&self, path: &[&str]) -> ListType;

    /// The value a key field of the map-list at `path` takes when an element omits
    /// it (`+default=` upstream, `default` in a CRD schema), or `None`.
    ///
    /// Server-side apply needs it so that an applied `{containerPort: 80}` names the
    /// same element as the stored, defaulted `{containerPort: 80, protocol: TCP}`.
    fn key_default(&self, _path: &[&str], _key: &str) -> Option<serde_json::Value> {
        None
    }
}

/// Every list atomic: what a schemaless object gets.
pub struct AllAtomic;

impl ListTypes for AllAtomic {
    fn list_type(&self, _path: &[&str]) -> ListType {
        ListType::Atomic
    }
}
