//! A selection kept between calls and brought up to date with only what
//! changed (the contract's `client.list-changes`), for guests whose every
//! call would otherwise list the whole cluster: a scheduler's node usage, a
//! controller's pods. Each call then costs the changes since the last one.
//!
//! A mirror lives as long as the instance does, so keep it in a
//! `thread_local!` and ask the host for warm instances
//! (`[limits] reuse-instances = true` in the manifest). On a fresh instance
//! (the first call, after a trap, after a hot swap) the first `sync` gets
//! the whole selection; a warm one gets the changes. Either way the mirror
//! holds what `list` would answer now.
//!
//! Keep small views, not whole objects: the mirror holds one `V` per
//! object, made by a function of the decoded object, and tells a callback
//! of every change (old view, new view), so that sums kept beside it (a
//! node's requested CPU) follow without a scan.
//!
//! ```no_run
//! use std::cell::RefCell;
//! use k8s_openapi::api::core::v1::Pod;
//! use wasmlet_sdk::client::{Client, ListParams, Mirror};
//!
//! thread_local! {
//!     // Pod name -> its node, kept while the instance is warm.
//!     static PODS: RefCell<Mirror<Option<String>>> = RefCell::new(Mirror::new(ListParams::all()));
//! }
//!
//! fn bound_pods() -> Result<usize, wasmlet_sdk::client::ClientError> {
//!     PODS.with_borrow_mut(|pods| {
//!         pods.sync::<Pod, _, _>(
//!             &Client::new(),
//!             |p| p.spec.and_then(|s| s.node_name),
//!             |_key, _old, _new| {},
//!         )?;
//!         Ok(pods.values().filter(|node| node.is_some()).count())
//!     })
//! }
//! ```

use std::any::{Any, TypeId};
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;

use kube::Resource;
use serde::de::DeserializeOwned;

use super::{Client, ClientError, ListParams};

/// What one `list-changes` call brought (see [`Mirror::sync`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Synced {
    /// Objects stored or replaced.
    pub applied: usize,
    /// Objects dropped.
    pub removed: usize,
    /// The host answered with the whole selection (first call, or the
    /// host's journal no longer reached back to the cursor).
    pub reset: bool,
}

/// The objects a [`ListParams`] selects, as views `V`, by key (`namespace/name`,
/// or `name` for a cluster-scoped kind).
#[derive(Debug, Clone)]
pub struct Mirror<V> {
    params: ListParams,
    cursor: u64,
    items: HashMap<String, V>,
}

impl<V> Mirror<V> {
    /// An empty mirror of what `params` selects; the first [`Mirror::sync`] fills it.
    pub fn new(params: ListParams) -> Self {
        Mirror {
            params,
            cursor: 0,
            items: HashMap::new(),
        }
    }

    /// Brings the mirror up to date: one `list-changes` call for kind `K`,
    /// each changed object decoded and turned into its view by `view`, and
    /// `on_change(key, old, new)` told of every view stored or dropped
    /// (`old` is `None` for a new key, `new` is `None` for a dropped one;
    /// on a reset every kept view is dropped first).
    ///
    /// On an error (the call's, or an object that does not decode as `K`)
    /// the mirror is left as it was.
    pub fn sync<K, F, C>(
        &mut self,
        client: &Client,
        mut view: F,
        mut on_change: C,
    ) -> Result<Synced, ClientError>
    where
        K: Resource<DynamicType = ()> + DeserializeOwned,
        F: FnMut(K) -> V,
        C: FnMut(&str, Option<&V>, Option<&V>),
    {
        // Each object viewed as it is decoded (a reset of 30,000 pods is
        // never 30,000 decoded pods at once), and all of them before anything
        // is applied, so a bad object leaves the mirror whole.
        let changes = client.list_changes_viewed::<K, V>(&self.params, self.cursor, &mut view)?;
        let applied = changes.applied;
        if changes.reset {
            for (key, old) in self.items.drain() {
                on_change(&key, Some(&old), None);
            }
        }
        let mut removed = 0;
        for key in &changes.removed {
            if let Some(old) = self.items.remove(key) {
                on_change(key, Some(&old), None);
                removed += 1;
            }
        }
        let n = applied.len();
        for (key, new) in applied {
            let old = self.items.remove(&key);
            on_change(&key, old.as_ref(), Some(&new));
            self.items.insert(key, new);
        }
        self.cursor = changes.cursor;
        Ok(Synced {
            applied: n,
            removed,
            reset: changes.reset,
        })
    }

    /// The view of the object under `key` (`namespace/name`, or `name`).
    pub fn get(&self, key: &str) -> Option<&V> {
        self.items.get(key)
    }

    /// Every view, in no particular order.
    pub fn values(&self) -> impl Iterator<Item = &V> {
        self.items.values()
    }

    /// Every key and view, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &V)> {
        self.items.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// How many objects the mirror holds.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether the mirror holds no object.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }
}

/// Mirrors an instance keeps for [`Client::list_kept`], most recently used last.
const KEPT: usize = 32;

thread_local! {
    static MIRRORS: RefCell<Vec<(KeptKey, Box<dyn Any>)>> = const { RefCell::new(Vec::new()) };
}

/// The kind, the selection, and the cut each object is kept as (0: whole).
type KeptKey = (TypeId, ListParams, usize);

impl Client {
    /// [`Client::list`] served from a [`Mirror`] the instance keeps between
    /// calls (one per kind and `params`, the 32 most recently used): only
    /// the objects that changed since the last call are decoded. The same
    /// objects as `list`, shared. Worth it with `reuse-instances = true`;
    /// on a fresh instance it costs what `list` does.
    pub fn list_kept<K>(&self, params: &ListParams) -> Result<Vec<Arc<K>>, ClientError>
    where
        K: Resource<DynamicType = ()> + DeserializeOwned + 'static,
    {
        self.kept(params, 0, |o: K| o)
    }

    /// [`Client::list_kept`] keeping each object as `cut` makes it: a
    /// controller's copy of only the fields it reads, so that what it keeps
    /// follows the number of objects times a few hundred bytes, not their
    /// whole size (a decoded pod is kilobytes). The objects returned are the
    /// cut ones. One mirror per kind, `params` and `cut`.
    pub fn list_kept_as<K>(
        &self,
        params: &ListParams,
        cut: fn(K) -> K,
    ) -> Result<Vec<Arc<K>>, ClientError>
    where
        K: Resource<DynamicType = ()> + DeserializeOwned + 'static,
    {
        self.kept(params, cut as usize, cut)
    }

    fn kept<K>(
        &self,
        params: &ListParams,
        cut_id: usize,
        cut: impl Fn(K) -> K,
    ) -> Result<Vec<Arc<K>>, ClientError>
    where
        K: Resource<DynamicType = ()> + DeserializeOwned + 'static,
    {
        let key: KeptKey = (TypeId::of::<K>(), params.clone(), cut_id);
        let mut mirror: Box<dyn Any> = MIRRORS
            .with_borrow_mut(|all| {
                let at = all.iter().position(|(k, _)| *k == key)?;
                Some(all.remove(at).1)
            })
            .unwrap_or_else(|| Box::new(Mirror::<Arc<K>>::new(params.clone())));
        let synced = match mirror.downcast_mut::<Mirror<Arc<K>>>() {
            Some(m) => m
                .sync::<K, _, _>(self, |o| Arc::new(cut(o)), |_, _, _| {})
                .map(|_| m.values().cloned().collect()),
            None => unreachable_kind(),
        };
        MIRRORS.with_borrow_mut(|all| {
            if all.len() >= KEPT {
                all.remove(0);
            }
            all.push((key, mirror));
        });
        synced
    }
}

/// The registry is keyed by the type, so a mirror is always of its key's type.
fn unreachable_kind<T>() -> Result<T, ClientError> {
    Err(ClientError::Decode(
        "list_kept: a kept mirror of another type".into(),
    ))
}

/// The key the host uses for an object: `namespace/name`, or `name`.
pub fn key_of(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> String {
    let name = meta.name.as_deref().unwrap_or_default();
    match meta.namespace.as_deref() {
        Some(ns) => format!("{ns}/{name}"),
        None => name.to_string(),
    }
}

#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    use std::cell::RefCell;
    use std::rc::Rc;

    use k8s_openapi::api::core::v1::Pod;
    use serde_json::json;

    use super::*;
    use crate::bindings::{client as raw, types};
    use crate::host::{Host, install};

    /// Answers each `list-changes` with the next scripted answer, and
    /// remembers the cursors it was asked from.
    struct Scripted {
        answers: RefCell<Vec<raw::Changes>>,
        asked: RefCell<Vec<u64>>,
    }

    impl Host for Scripted {
        fn list_changes(
            &self,
            _: &types::TypeRef,
            _: &raw::ListParams,
            since: u64,
        ) -> Result<raw::Changes, raw::ClientError> {
            self.asked.borrow_mut().push(since);
            Ok(self.answers.borrow_mut().remove(0))
        }
    }

    fn pod(name: &str, node: &str) -> String {
        json!({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": name, "namespace": "ns"},
               "spec": {"nodeName": node, "containers": []}})
        .to_string()
    }

    fn answer(applied: Vec<String>, removed: &[&str], cursor: u64, reset: bool) -> raw::Changes {
        raw::Changes {
            applied,
            removed: removed.iter().map(|s| s.to_string()).collect(),
            cursor,
            reset,
        }
    }

    fn no_spec(p: Pod) -> Pod {
        Pod { spec: None, ..p }
    }

    #[test]
    fn kept_as_a_cut_keeps_and_returns_the_cut_objects_apart_from_whole_ones() {
        let host = Rc::new(Scripted {
            answers: RefCell::new(vec![
                answer(vec![pod("a", "n1")], &[], 10, true),
                answer(vec![pod("a", "n1")], &[], 10, true),
                answer(vec![pod("b", "n2")], &[], 11, false),
            ]),
            asked: RefCell::default(),
        });
        let _installed = install(host.clone());
        let params = ListParams::namespaced("ns");
        let cut: Vec<Arc<Pod>> = Client::new().list_kept_as(&params, no_spec).unwrap();
        assert!(cut[0].spec.is_none());
        // The whole objects are another mirror (a fresh read from 0).
        let whole: Vec<Arc<Pod>> = Client::new().list_kept(&params).unwrap();
        assert!(whole[0].spec.is_some());
        let cut: Vec<Arc<Pod>> = Client::new().list_kept_as(&params, no_spec).unwrap();
        assert_eq!(cut.len(), 2);
        assert!(cut.iter().all(|p| p.spec.is_none()));
        assert_eq!(*host.asked.borrow(), [0, 0, 10]);
    }

    #[test]
    fn changes_are_applied_in_order_and_a_reset_drops_everything_kept() {
        let host = Rc::new(Scripted {
            answers: RefCell::new(vec![
                answer(vec![pod("a", "n1"), pod("b", "n1")], &[], 10, true),
                // b deleted and created again on n2; a moved.
                answer(
                    vec![pod("a", "n2"), pod("b", "n2")],
                    &["ns/b", "ns/gone"],
                    12,
                    false,
                ),
                answer(vec![pod("c", "n3")], &[], 20, true),
            ]),
            asked: RefCell::default(),
        });
        let _installed = install(host.clone());
        let mut m: Mirror<String> = Mirror::new(ListParams::all());
        // Per-node counts kept beside the mirror through the callback.
        let mut per_node: HashMap<String, i32> = HashMap::new();
        let mut sync = |m: &mut Mirror<String>| {
            m.sync::<Pod, _, _>(
                &Client::new(),
                |p| p.spec.and_then(|s| s.node_name).unwrap_or_default(),
                |_, old, new| {
                    if let Some(o) = old {
                        *per_node.entry(o.clone()).or_default() -= 1;
                    }
                    if let Some(n) = new {
                        *per_node.entry(n.clone()).or_default() += 1;
                    }
                },
            )
            .unwrap()
        };
        assert!(sync(&mut m).reset);
        assert_eq!(m.len(), 2);
        let s = sync(&mut m);
        assert_eq!((s.applied, s.removed, s.reset), (2, 1, false));
        assert_eq!(m.get("ns/a").map(String::as_str), Some("n2"));
        assert_eq!(m.get("ns/b").map(String::as_str), Some("n2"));
        sync(&mut m);
        assert_eq!(m.len(), 1);
        assert_eq!(m.get("ns/c").map(String::as_str), Some("n3"));
        assert_eq!(*host.asked.borrow(), [0, 10, 12]);
        per_node.retain(|_, n| *n != 0);
        assert_eq!(per_node, HashMap::from([("n3".to_string(), 1)]));
    }

    #[test]
    fn an_object_that_does_not_decode_leaves_the_mirror_as_it_was() {
        let host = Rc::new(Scripted {
            answers: RefCell::new(vec![
                answer(vec![pod("a", "n1")], &[], 5, true),
                answer(vec!["{\"metadata\": 7}".into()], &["ns/a"], 6, false),
            ]),
            asked: RefCell::default(),
        });
        let _installed = install(host.clone());
        let mut m: Mirror<()> = Mirror::new(ListParams::all());
        m.sync::<Pod, _, _>(&Client::new(), |_| (), |_, _, _| {})
            .unwrap();
        let e = m.sync::<Pod, _, _>(&Client::new(), |_| (), |_, _, _| {});
        assert!(matches!(e, Err(ClientError::Decode(_))), "{e:?}");
        assert_eq!(m.len(), 1);
        assert_eq!(m.cursor, 5, "the same changes are asked for again");
    }
}
