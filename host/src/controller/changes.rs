//! [`ChangeGate`]: which events of an owned or watched kind requeue anything,
//! as the manifest's `changes` says (`all`, `generation`, `none`).

use std::collections::HashMap;

use crate::cluster::cache::CacheEvent;
use crate::plugin::manifest::Changes;

/// Remembers each object's last generation (for `generation`) and lets
/// through only the events that count.
pub(super) struct ChangeGate {
    changes: Changes,
    /// `namespace/name` (with the uid, so a recreated object counts as new)
    /// → the generation last let through.
    seen: HashMap<(String, String), Option<i64>>,
}

impl ChangeGate {
    pub(super) fn new(changes: Changes) -> ChangeGate {
        ChangeGate {
            changes,
            seen: HashMap::new(),
        }
    }

    /// Whether `event` should requeue the key its map names.
    pub(super) fn passes(&mut self, event: &CacheEvent) -> bool {
        match (self.changes, event) {
            (Changes::All, _) | (_, CacheEvent::Synced) => true,
            (Changes::None, _) => false,
            (Changes::Generation, CacheEvent::Deleted(o)) => {
                self.seen.remove(&key(&o.metadata));
                true
            }
            (Changes::Generation, CacheEvent::Applied { object, .. }) => {
                let generation = object.metadata.generation;
                let before = self.seen.insert(key(&object.metadata), generation);
                // New to us, without a generation, or a new one.
                before.is_none() || generation.is_none() || before != Some(generation)
            }
        }
    }
}

fn key(m: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> (String, String) {
    let name = format!(
        "{}/{}",
        m.namespace.as_deref().unwrap_or_default(),
        m.name.as_deref().unwrap_or_default()
    );
    (name, m.uid.clone().unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;

    use super::*;
    use crate::cluster::CachedObject;

    fn applied(name: &str, uid: &str, generation: Option<i64>, rv: &str) -> CacheEvent {
        let o: kube::api::DynamicObject = serde_json::from_value(json!({
            "apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": name, "namespace": "ns", "uid": uid,
                "generation": generation, "resourceVersion": rv},
        }))
        .unwrap();
        CacheEvent::Applied {
            object: Arc::new(CachedObject::from_dynamic(&o)),
            initial: false,
        }
    }

    #[test]
    fn generation_lets_through_new_objects_spec_edits_and_deletions_only() {
        let mut g = ChangeGate::new(Changes::Generation);
        assert!(g.passes(&applied("a", "u1", Some(1), "1")), "created");
        assert!(!g.passes(&applied("a", "u1", Some(1), "2")), "status churn");
        assert!(g.passes(&applied("a", "u1", Some(2), "3")), "a spec edit");
        assert!(g.passes(&applied("a", "u2", Some(2), "4")), "recreated");
        assert!(g.passes(&applied("b", "u3", None, "5")), "no generation");
        assert!(g.passes(&applied("b", "u3", None, "6")), "no generation");
        let CacheEvent::Applied { object, .. } = applied("a", "u2", Some(2), "7") else {
            unreachable!()
        };
        assert!(g.passes(&CacheEvent::Deleted(object)), "deleted");
    }

    #[test]
    fn none_lets_nothing_through_and_all_everything() {
        let mut none = ChangeGate::new(Changes::None);
        let mut all = ChangeGate::new(Changes::All);
        for rv in ["1", "2"] {
            assert!(!none.passes(&applied("a", "u1", Some(1), rv)));
            assert!(all.passes(&applied("a", "u1", Some(1), rv)));
        }
    }
}
