//! What puts keys in a controller's queue: its primary kind's events (with
//! seed 002's priorities), owned and watched objects (mapped to their
//! owner's or target's key) and the periodic resync. Scope is checked again
//! when a key is dequeued (`reconcile.rs`).

use std::sync::Arc;

use tokio::sync::broadcast::error::RecvError;

use super::changes::ChangeGate;
use super::controller::{Controller, key_of};
use super::priority::Listed;
use super::workqueue::Priority;
use crate::cluster::CachedObject;
use crate::cluster::cache::CacheEvent;
use crate::plugin::manifest::{Changes, MapFn};
use wasmlet_apimachinery::selector::LabelSelector;

/// The selector at a `selector:PATH` watch: a `metav1.LabelSelector`, or a
/// plain label map (a ReplicationController's or a Service's selector), which
/// selects by equality on each label.
fn selector_of(v: &serde_json::Value) -> Option<LabelSelector> {
    let is_map = v.as_object().is_some_and(|m| {
        !m.is_empty()
            && !m.contains_key("matchLabels")
            && !m.contains_key("matchExpressions")
            && m.values().all(serde_json::Value::is_string)
    });
    let v = if is_map {
        &serde_json::json!({"matchLabels": v})
    } else {
        v
    };
    LabelSelector::from_label_selector(v).ok()
}

impl Controller {
    pub(super) fn selected(&self, o: &CachedObject) -> bool {
        let rec = self.manifest.reconciles.as_ref().expect("checked at start");
        if rec
            .namespace
            .as_ref()
            .is_some_and(|ns| o.metadata.namespace.as_ref() != Some(ns))
        {
            return false;
        }
        crate::cluster::cache::selects(&self.selector, o)
            && crate::cluster::cache::fields_select(&self.fields, o)
    }

    /// Whether the cached object under `key` is one this reconciler may act on
    /// (a key whose object is gone is: reconcile then forgets it).
    pub(super) fn in_scope(&self, key: &str) -> bool {
        self.primary.get_key(key).is_none_or(|o| self.selected(&o))
    }

    /// Seed 002's rule: an object a list finds (this controller's first
    /// list after a host start, a failover or a plugin load, or a relist)
    /// goes to the lane [`Listed`] says: high when the host is not done with
    /// it, low when it is only to be re-verified. Any other event is a
    /// change made while the controller runs: high.
    pub(super) fn enqueue_primary(&self, o: &CachedObject, initial: bool) {
        let Some(name) = o.metadata.name.as_deref() else {
            return;
        };
        let key = key_of(o.metadata.namespace.as_deref(), name);
        if !self.selected(o) {
            // Out of the selection (or moved out of it, as a pod the
            // scheduler bound): as good as deleted to this controller.
            self.forget(&key);
            return;
        }
        self.cache_caught_up(&key, o.metadata.resource_version.as_deref());
        if !initial
            && !self
                .own_writes
                .needs_reconcile(&key, o.metadata.resource_version.as_deref())
        {
            return;
        }
        let priority = if self.config.priorities && initial {
            Listed::object(o, self.host_status(), self.manifest.finalizer.as_deref()).priority()
        } else {
            Priority::High
        };
        self.queue.add(key, priority);
    }

    pub(super) async fn pump_primary(
        self: Arc<Self>,
        mut rx: tokio::sync::broadcast::Receiver<CacheEvent>,
    ) {
        // Events missed while a (re)list was arriving name objects the store
        // only holds once the list completes (the reflector swaps it in then).
        let mut missed = false;
        loop {
            match rx.recv().await {
                Ok(CacheEvent::Applied { object, initial }) => {
                    self.enqueue_primary(&object, initial)
                }
                Ok(CacheEvent::Deleted(o)) => {
                    if let Some(n) = o.metadata.name.as_deref() {
                        self.forget(&key_of(o.metadata.namespace.as_deref(), n));
                    }
                }
                Ok(CacheEvent::Synced) => {
                    if std::mem::take(&mut missed) {
                        for o in self.primary.store.state() {
                            self.enqueue_primary(&o, true);
                        }
                    }
                }
                Err(RecvError::Lagged(_)) => {
                    // Missed events: everything cached is a candidate again.
                    missed = true;
                    for o in self.primary.store.state() {
                        self.enqueue_primary(&o, false);
                    }
                }
                Err(RecvError::Closed) => return,
            }
        }
    }

    /// Owned (`map == None`: requeue the owner named in ownerReferences) or
    /// watched objects (requeue the key the map function names).
    pub(super) async fn pump_related(
        self: Arc<Self>,
        mut rx: tokio::sync::broadcast::Receiver<CacheEvent>,
        map: Option<MapFn>,
        changes: Changes,
    ) {
        let mut gate = ChangeGate::new(changes);
        let rec = self.manifest.reconciles.clone().expect("checked at start");
        let owner_group = rec
            .api_version
            .split_once('/')
            .map(|(g, _)| g)
            .unwrap_or("");
        loop {
            let event = rx.recv().await;
            if let Ok(e) = &event
                && !gate.passes(e)
            {
                continue;
            }
            let o = match event {
                Ok(CacheEvent::Applied { object, .. }) | Ok(CacheEvent::Deleted(object)) => object,
                Ok(CacheEvent::Synced) => continue,
                Err(RecvError::Lagged(_)) if changes == Changes::None => continue,
                Err(RecvError::Lagged(_)) => {
                    for o in self.primary.store.state() {
                        self.enqueue_primary(&o, false);
                    }
                    continue;
                }
                Err(RecvError::Closed) => return,
            };
            let ns = o.metadata.namespace.as_deref();
            match &map {
                None => {
                    for r in o.metadata.owner_references.iter().flatten() {
                        let group = r.api_version.split_once('/').map(|(g, _)| g).unwrap_or("");
                        if r.kind == rec.kind && group == owner_group {
                            self.queue.add(key_of(ns, &r.name), Priority::High);
                        }
                    }
                }
                Some(MapFn::Selector(path)) => self.enqueue_selecting(&o, path),
                Some(MapFn::Waiting) => {
                    for key in self.keys.waiting() {
                        self.queue.add(key, Priority::High);
                    }
                }
                Some(m) => {
                    if let Some(t) = named_by(&o, m) {
                        let key = if t.contains('/') { t } else { key_of(ns, &t) };
                        self.queue.add(key, Priority::High);
                    }
                }
            }
        }
    }

    /// Requeues every reconciled object in `o`'s namespace whose label selector
    /// at `path` selects `o` (an unparsable or missing selector selects nothing).
    fn enqueue_selecting(&self, o: &CachedObject, path: &str) {
        let no_labels = std::collections::BTreeMap::new();
        let labels = o.metadata.labels.as_ref().unwrap_or(&no_labels);
        let ns = o.metadata.namespace.as_deref().unwrap_or_default();
        for owner in self.primary.store.in_namespace(ns) {
            if !self.selected(&owner) {
                continue;
            }
            let Some(sel) = owner.at_path(path).and_then(|v| selector_of(&v)) else {
                continue;
            };
            if sel.matches(labels)
                && let Some(n) = owner.metadata.name.as_deref()
            {
                self.queue.add(
                    key_of(owner.metadata.namespace.as_deref(), n),
                    Priority::High,
                );
            }
        }
    }

    pub(super) async fn resync_loop(self: Arc<Self>) {
        let mut tick = tokio::time::interval(self.config.resync);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        tick.tick().await;
        loop {
            tick.tick().await;
            self.requeue_all();
        }
    }

    /// Queues every selected cached object in the low lane (new work still
    /// goes first). A key waiting out its back-off or a requeue-after
    /// becomes ready now: queued state merges to the earlier time. Used by
    /// the periodic resync and when a new version of the plugin loads, so a
    /// fixed build runs on every object at once, not at their next change.
    pub(crate) fn requeue_all(&self) -> usize {
        let mut queued = 0;
        for o in self.primary.store.state() {
            if self.selected(&o)
                && let Some(n) = o.metadata.name.as_deref()
            {
                self.queue
                    .add(key_of(o.metadata.namespace.as_deref(), n), Priority::Low);
                queued += 1;
            }
        }
        queued
    }
}

/// The name a `label:`, `annotation:` or `field:` map reads off a watched
/// object (`None` for the other maps, or when it is missing or empty).
pub(super) fn named_by(o: &CachedObject, map: &MapFn) -> Option<String> {
    let target = match map {
        MapFn::Label(k) => o.metadata.labels.as_ref().and_then(|l| l.get(k)).cloned(),
        MapFn::Annotation(k) => o
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(k))
            .cloned(),
        MapFn::Field(p) => o.at_path(p).and_then(|v| v.as_str().map(str::to_string)),
        MapFn::Selector(_) | MapFn::Waiting => None,
    };
    target.filter(|t| !t.is_empty())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    #[test]
    fn a_label_map_selects_by_equality() {
        let labels = |l: serde_json::Value| l.as_object().unwrap().clone();
        let sel = super::selector_of(&json!({"app": "web"})).unwrap();
        assert!(sel.matches(&labels(json!({"app": "web", "x": "y"}))));
        assert!(!sel.matches(&labels(json!({"app": "db"}))));
        // A LabelSelector reads as before, `{}` selecting everything.
        let sel = super::selector_of(&json!({"matchLabels": {"app": "web"}})).unwrap();
        assert!(!sel.matches(&labels(json!({"app": "db"}))));
        assert!(
            super::selector_of(&json!({}))
                .unwrap()
                .matches(&labels(json!({})))
        );
    }
}
