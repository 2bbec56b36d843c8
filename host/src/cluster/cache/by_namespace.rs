//! A kind's cached objects grouped by namespace, so that what reads one
//! namespace (a guest's `list` in its namespace, a `selector:` map walking
//! the owners beside a changed object) touches that namespace's objects
//! only, not every object of the kind: kube-controller-manager's listers
//! read through a namespace index for the same reason.

use std::collections::HashMap;
use std::sync::Arc;

use crate::cluster::CachedObject;

/// Objects by namespace, then name. A cluster-scoped object's namespace is
/// `""`.
#[derive(Default)]
pub(super) struct ByNamespace {
    namespaces: HashMap<Box<str>, HashMap<Box<str>, Arc<CachedObject>>>,
}

/// `o`'s namespace and name (`""` for what it lacks).
fn place(o: &CachedObject) -> (&str, &str) {
    (
        o.metadata.namespace.as_deref().unwrap_or_default(),
        o.metadata.name.as_deref().unwrap_or_default(),
    )
}

impl ByNamespace {
    /// Stores `o`; returns the object it replaced.
    pub(super) fn insert(&mut self, o: Arc<CachedObject>) -> Option<Arc<CachedObject>> {
        let (ns, name) = place(&o);
        let name: Box<str> = name.into();
        // The namespace is allocated once, when its first object comes.
        match self.namespaces.get_mut(ns) {
            Some(names) => names.insert(name, o),
            None => {
                let ns: Box<str> = ns.into();
                self.namespaces.entry(ns).or_default().insert(name, o)
            }
        }
    }

    /// Removes the object stored under `o`'s namespace and name, returned.
    pub(super) fn remove(&mut self, o: &CachedObject) -> Option<Arc<CachedObject>> {
        let (ns, name) = place(o);
        let names = self.namespaces.get_mut(ns)?;
        let old = names.remove(name);
        // A deleted namespace leaves nothing behind.
        if names.is_empty() {
            self.namespaces.remove(ns);
        }
        old
    }

    pub(super) fn get(&self, namespace: &str, name: &str) -> Option<&Arc<CachedObject>> {
        self.namespaces.get(namespace)?.get(name)
    }

    /// The object under a store key: `namespace/name`, or `name`.
    pub(super) fn get_key(&self, key: &str) -> Option<&Arc<CachedObject>> {
        let (ns, name) = key.split_once('/').unwrap_or(("", key));
        self.get(ns, name)
    }

    pub(super) fn contains(&self, o: &CachedObject) -> bool {
        let (ns, name) = place(o);
        self.get(ns, name).is_some()
    }

    pub(super) fn values(&self) -> impl Iterator<Item = &Arc<CachedObject>> {
        self.namespaces.values().flat_map(|names| names.values())
    }

    pub(super) fn in_namespace(&self, namespace: &str) -> impl Iterator<Item = &Arc<CachedObject>> {
        self.namespaces
            .get(namespace)
            .into_iter()
            .flat_map(|names| names.values())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(ns: Option<&str>, name: &str) -> Arc<CachedObject> {
        let mut meta = serde_json::json!({"name": name});
        if let Some(ns) = ns {
            meta["namespace"] = ns.into();
        }
        Arc::new(serde_json::from_value(serde_json::json!({"metadata": meta})).unwrap())
    }

    fn names<'a>(it: impl Iterator<Item = &'a Arc<CachedObject>>) -> Vec<String> {
        let mut v: Vec<String> = it.map(|o| o.metadata.name.clone().unwrap()).collect();
        v.sort();
        v
    }

    #[test]
    fn a_namespace_lists_its_own_objects_only() {
        let mut s = ByNamespace::default();
        for (ns, name) in [("a", "x"), ("a", "y"), ("b", "x")] {
            s.insert(object(Some(ns), name));
        }
        s.insert(object(None, "node-1"));
        assert_eq!(names(s.in_namespace("a")), ["x", "y"]);
        assert_eq!(names(s.in_namespace("b")), ["x"]);
        assert_eq!(names(s.in_namespace("")), ["node-1"]);
        assert!(names(s.in_namespace("c")).is_empty());
        assert_eq!(names(s.values()), ["node-1", "x", "x", "y"]);
    }

    #[test]
    fn keys_find_namespaced_and_cluster_scoped_objects() {
        let mut s = ByNamespace::default();
        s.insert(object(Some("a"), "x"));
        s.insert(object(None, "node-1"));
        assert!(s.get_key("a/x").is_some());
        assert!(s.get_key("node-1").is_some());
        // A namespaced object is not found without its namespace.
        assert!(s.get_key("x").is_none());
        assert!(s.get_key("b/x").is_none());
    }

    #[test]
    fn an_update_replaces_and_the_last_removal_drops_the_namespace() {
        let mut s = ByNamespace::default();
        s.insert(object(Some("a"), "x"));
        s.insert(object(Some("a"), "x"));
        assert_eq!(names(s.in_namespace("a")), ["x"]);
        assert!(s.contains(&object(Some("a"), "x")));
        s.remove(&object(Some("a"), "x"));
        assert!(!s.contains(&object(Some("a"), "x")));
        assert!(s.namespaces.is_empty());
        // Removing what is not there is harmless.
        s.remove(&object(Some("a"), "x"));
    }
}
