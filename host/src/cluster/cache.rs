//! Shared watches and caches: one kube-runtime watcher per kind and a store
//! of its objects, whoever needs it (any number of plugins, the `client`
//! import's reads). The watcher resumes after disconnects and relists after
//! a 410; every subscriber gets the events through a broadcast channel.
//! Cached objects are [`CachedObject`]s (their bodies kept as text) and carry
//! no `metadata.managedFields`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use futures::StreamExt;
use kube::api::{Api, ApiResource};
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::{Notify, broadcast};
use wasmlet_apimachinery::selector::{FieldSelector, LabelSelector};

use super::{CachedObject, ClientError, Resolved, Resolver};

mod by_namespace;
mod journal;
use by_namespace::ByNamespace;
use journal::{Journal, next_seq};

/// What a cache saw. The object is the one the store holds (one copy).
#[derive(Debug, Clone)]
pub enum CacheEvent {
    /// Created or changed; `initial` during a (re)list.
    Applied {
        object: Arc<CachedObject>,
        initial: bool,
    },
    Deleted(Arc<CachedObject>),
    /// A (re)list finished: the cache is complete.
    Synced,
}

/// Events a slow subscriber may fall behind by before it must resync from
/// the store (it is told so by `RecvError::Lagged`).
const FANOUT: usize = 16 * 1024;

/// A kind's cached objects by namespace and name, found by their key
/// (`namespace/name`, or `name` when cluster-scoped). Written by the cache's
/// watch task only; a (re)list is gathered apart and swapped in whole when
/// complete, as kube-runtime's reflector does.
#[derive(Clone, Default)]
pub struct Store {
    objects: Arc<RwLock<Objects>>,
}

#[derive(Default)]
struct Objects {
    complete: ByNamespace,
    /// A (re)list in progress.
    relist: Option<ByNamespace>,
    /// What changed in `complete`, for `list-changes`.
    journal: Journal,
}

impl Store {
    fn read(&self) -> std::sync::RwLockReadGuard<'_, Objects> {
        // Plain data: a poisoned lock still holds a usable map.
        self.objects.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Objects> {
        self.objects.write().unwrap_or_else(|p| p.into_inner())
    }

    /// The object under `key` (`namespace/name`, or `name`).
    pub(crate) fn get(&self, key: &str) -> Option<Arc<CachedObject>> {
        self.read().complete.get_key(key).cloned()
    }

    /// The object `name` in `namespace` (`""` for a cluster-scoped kind).
    pub(crate) fn get_in(&self, namespace: &str, name: &str) -> Option<Arc<CachedObject>> {
        self.read().complete.get(namespace, name).cloned()
    }

    /// Every cached object.
    pub fn state(&self) -> Vec<Arc<CachedObject>> {
        self.read().complete.values().cloned().collect()
    }

    /// The cached objects of one namespace (`""`: the cluster-scoped ones),
    /// found without looking at the others.
    pub(crate) fn in_namespace(&self, namespace: &str) -> Vec<Arc<CachedObject>> {
        self.read()
            .complete
            .in_namespace(namespace)
            .cloned()
            .collect()
    }
}

pub struct KindCache {
    pub(crate) resolved: Resolved,
    pub store: Store,
    events: broadcast::Sender<CacheEvent>,
    synced: Arc<Synced>,
    task: tokio::task::JoinHandle<()>,
}

/// Set once the first list has completed.
#[derive(Default)]
struct Synced {
    done: AtomicBool,
    notify: Notify,
}

impl Drop for KindCache {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl KindCache {
    pub fn subscribe(&self) -> broadcast::Receiver<CacheEvent> {
        self.events.subscribe()
    }

    /// A subscription and every object its events will not bring: the
    /// store's, and those a (re)list in progress has delivered so far (they
    /// reach the store only when it completes). Taken under the store's lock,
    /// which the watch task holds while it stores and sends an event, so no
    /// object falls between the two (a watch started by another plugin, or
    /// by the host ahead of its controllers, may be halfway through a list).
    pub(crate) fn subscribe_with_objects(
        &self,
    ) -> (broadcast::Receiver<CacheEvent>, Vec<Arc<CachedObject>>) {
        let objects = self.store.read();
        let rx = self.events.subscribe();
        let all = match &objects.relist {
            None => objects.complete.values().cloned().collect(),
            // The relist's version of an object, else the store's.
            Some(relist) => relist
                .values()
                .chain(objects.complete.values().filter(|o| !relist.contains(o)))
                .cloned()
                .collect(),
        };
        (rx, all)
    }

    pub fn is_synced(&self) -> bool {
        self.synced.done.load(Ordering::Acquire)
    }

    pub async fn wait_synced(&self) {
        while !self.is_synced() {
            let notified = self.synced.notify.notified();
            if self.is_synced() {
                break;
            }
            notified.await;
        }
    }

    /// The object under a controller's key (`namespace/name`, or `name`), as
    /// [`KindCache::get`] finds it: for a namespaced kind that is the store's
    /// own key, so nothing is formatted per lookup.
    pub(crate) fn get_key(&self, key: &str) -> Option<Arc<CachedObject>> {
        if self.resolved.namespaced {
            return self.store.get(key);
        }
        // A cluster-scoped kind's key may carry the namespace of whatever
        // named it (an owner reference): `get` ignores it too.
        self.store
            .get(key.rsplit_once('/').map_or(key, |(_, name)| name))
    }

    pub(crate) fn get(&self, namespace: Option<&str>, name: &str) -> Option<Arc<CachedObject>> {
        let ns = namespace.filter(|_| self.resolved.namespaced);
        self.store.get_in(ns.unwrap_or_default(), name)
    }

    /// Objects matching a namespace and selectors, from memory. A
    /// cluster-scoped kind has no namespaces: `namespace` is ignored, as the
    /// API's own list does for it.
    pub fn list(
        &self,
        namespace: Option<&str>,
        labels: &LabelSelector,
        fields: &FieldSelector,
    ) -> Vec<Arc<CachedObject>> {
        let objects = self.in_scope(&self.store.read().complete, namespace);
        filtered(objects, labels, fields)
    }

    /// Every object of `namespace` (of all, when none or cluster-scoped),
    /// copied out so that selectors run outside the store's lock.
    fn in_scope(&self, objects: &ByNamespace, namespace: Option<&str>) -> Vec<Arc<CachedObject>> {
        match namespace.filter(|_| self.resolved.namespaced) {
            Some(ns) => objects.in_namespace(ns).cloned().collect(),
            None => objects.values().cloned().collect(),
        }
    }

    /// What changed in a selection since `cursor` (a number this returned
    /// before): the selected objects created or changed since, the objects
    /// of `namespace` deleted or changed out of the selection since, and
    /// the cursor to pass next. A cursor of 0, from another cache, or older
    /// than the journal keeps, gets every selected object with `reset` set
    /// (drop what was kept). Costs the changes since `cursor`, not the size
    /// of the kind.
    pub(crate) fn changes(
        &self,
        cursor: u64,
        namespace: Option<&str>,
        labels: &LabelSelector,
        fields: &FieldSelector,
    ) -> Changes {
        let objects = self.store.read();
        let Some(since) = objects.journal.since(cursor) else {
            // The snapshot and its cursor under one lock.
            let (all, cursor) = (
                self.in_scope(&objects.complete, namespace),
                objects.journal.cursor(),
            );
            drop(objects);
            return Changes {
                applied: filtered(all, labels, fields),
                removed: vec![],
                cursor,
                reset: true,
            };
        };
        drop(objects);
        let namespace = namespace.filter(|_| self.resolved.namespaced);
        let within = |o: &CachedObject| {
            namespace.is_none_or(|ns| o.metadata.namespace.as_deref() == Some(ns))
        };
        let (applied, left): (Vec<_>, Vec<_>) = since
            .applied
            .into_iter()
            .filter(|o| within(o))
            .partition(|o| matches(o, labels, fields));
        let mut removed: Vec<Arc<CachedObject>> =
            since.removed.into_iter().filter(|o| within(o)).collect();
        removed.extend(left);
        Changes {
            applied,
            removed,
            cursor: since.cursor,
            reset: false,
        }
    }
}

/// An answer of [`KindCache::changes`].
#[derive(Debug, Default)]
pub(crate) struct Changes {
    pub(crate) applied: Vec<Arc<CachedObject>>,
    /// Deleted, or changed so that the selection no longer holds them.
    pub(crate) removed: Vec<Arc<CachedObject>>,
    pub(crate) cursor: u64,
    /// `applied` is the whole selection: whatever was kept is stale.
    pub(crate) reset: bool,
}

fn filtered(
    objects: Vec<Arc<CachedObject>>,
    labels: &LabelSelector,
    fields: &FieldSelector,
) -> Vec<Arc<CachedObject>> {
    objects
        .into_iter()
        .filter(|o| matches(o, labels, fields))
        .collect()
}

/// Whether `o` matches both selectors (fields read from its text).
fn matches(o: &CachedObject, labels: &LabelSelector, fields: &FieldSelector) -> bool {
    selects(labels, o) && fields_select(fields, o)
}

/// Whether `fields` matches `o`'s fields (a dotted path to a string; a
/// missing one reads as empty, as upstream).
pub(crate) fn fields_select(fields: &FieldSelector, o: &CachedObject) -> bool {
    fields.matches(|f| match f {
        "metadata.name" => o.metadata.name.clone(),
        "metadata.namespace" => o.metadata.namespace.clone(),
        other => o
            .at_path(other)
            .and_then(|v| v.as_str().map(str::to_string)),
    })
}

/// Whether `selector` matches `o`'s labels (checked in place: this runs for
/// every watch event and every cached object a list scans).
pub fn selects(selector: &LabelSelector, o: &CachedObject) -> bool {
    static NONE: std::collections::BTreeMap<String, String> = std::collections::BTreeMap::new();
    selector.matches(o.metadata.labels.as_ref().unwrap_or(&NONE))
}

/// The set of caches, keyed by (apiVersion, kind).
pub struct Caches {
    resolver: Arc<Resolver>,
    kinds: Mutex<HashMap<(String, String), Arc<KindCache>>>,
    /// Debugging/testing only (`--debug-cache-delay-ms`): every watch event is
    /// held this long before the store has it, so caches lag the API.
    debug_delay: std::time::Duration,
}

impl Caches {
    pub fn new(resolver: Arc<Resolver>) -> Arc<Caches> {
        Caches::with_debug_delay(resolver, std::time::Duration::ZERO)
    }

    /// As [`Caches::new`], with every watch event delayed by `delay` before it
    /// reaches the store (a lagging cache, for tests of expectations).
    pub(crate) fn with_debug_delay(
        resolver: Arc<Resolver>,
        delay: std::time::Duration,
    ) -> Arc<Caches> {
        Arc::new(Caches {
            resolver,
            kinds: Mutex::new(HashMap::new()),
            debug_delay: delay,
        })
    }

    pub(crate) fn client(&self) -> &kube::Client {
        self.resolver.client()
    }

    pub fn resolver(&self) -> &Arc<Resolver> {
        &self.resolver
    }

    /// The cache for a kind if one is running.
    pub fn existing(&self, api_version: &str, kind: &str) -> Option<Arc<KindCache>> {
        self.kinds
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&(api_version.to_string(), kind.to_string()))
            .cloned()
    }

    /// The kinds (`apiVersion/Kind`) whose cache has not completed its first list.
    pub(crate) fn unsynced(&self) -> Vec<String> {
        let kinds = self.kinds.lock().unwrap_or_else(|p| p.into_inner());
        let mut out: Vec<String> = kinds
            .iter()
            .filter(|(_, c)| !c.is_synced())
            .map(|((v, k), _)| format!("{v}/{k}"))
            .collect();
        out.sort();
        out
    }

    /// The cache for a kind, started on first use.
    pub async fn cache(
        &self,
        api_version: &str,
        kind: &str,
    ) -> Result<Arc<KindCache>, ClientError> {
        if let Some(c) = self.existing(api_version, kind) {
            return Ok(c);
        }
        let resolved = self.resolver.resolve(api_version, kind).await?;
        Ok(self.start(resolved))
    }

    /// The cache of `resource` in API `group` (a manifest rule's names),
    /// started now unless it runs already.
    pub(crate) async fn cache_resource(
        &self,
        group: &str,
        resource: &str,
    ) -> Result<Arc<KindCache>, ClientError> {
        let resolved = self.resolver.resolve_resource(group, resource).await?;
        Ok(self.start(resolved))
    }

    /// The cache for a resolved kind, started now unless it runs already.
    pub(crate) fn start(&self, resolved: Resolved) -> Arc<KindCache> {
        let mut kinds = self.kinds.lock().unwrap_or_else(|p| p.into_inner());
        let key = (
            resolved.resource.api_version.clone(),
            resolved.resource.kind.clone(),
        );
        if let Some(c) = kinds.get(&key) {
            return c.clone();
        }
        let cache = Arc::new(start(self.client().clone(), resolved, self.debug_delay));
        kinds.insert(key, cache.clone());
        cache
    }
}

fn start(client: kube::Client, resolved: Resolved, delay: std::time::Duration) -> KindCache {
    let ar: ApiResource = resolved.resource.clone();
    let store = Store::default();
    let (events, _) = broadcast::channel(FANOUT);
    let tx = events.clone();
    let api: Api<CachedObject> = Api::all_with(client, &ar);
    let synced = Arc::new(Synced::default());
    let flag = synced.clone();
    let kind = ar.kind.clone();
    let writer = store.clone();
    let task = tokio::spawn(async move {
        // managedFields are half of a typical object and no reconcile reads
        // them: `CachedObject`'s reader skips them as it reads (as
        // controller-runtime's common transform drops them, but never built).
        let stream = watcher(api, watcher::Config::default()).default_backoff();
        let mut stream = if delay.is_zero() {
            stream.boxed()
        } else {
            // Before the store, so the store itself lags (not only the
            // fan-out); only live changes, so (re)lists stay quick.
            stream
                .then(move |ev| async move {
                    if matches!(ev, Ok(watcher::Event::Apply(_) | watcher::Event::Delete(_))) {
                        tokio::time::sleep(delay).await;
                    }
                    ev
                })
                .boxed()
        };
        while let Some(ev) = stream.next().await {
            let ev = match ev {
                Ok(ev) => ev,
                Err(e) => {
                    tracing::warn!(%kind, error = %e, "watch failed; retrying with back-off");
                    continue;
                }
            };
            // Stored and sent under the lock: see `subscribe_with_objects`.
            let mut objects = writer.write();
            let out = match ev {
                watcher::Event::Init => {
                    objects.relist = Some(ByNamespace::default());
                    continue;
                }
                watcher::Event::InitApply(mut o) => {
                    o.seq = next_seq();
                    let object = Arc::new(o);
                    objects
                        .relist
                        .get_or_insert_default()
                        .insert(object.clone());
                    CacheEvent::Applied {
                        object,
                        initial: true,
                    }
                }
                watcher::Event::InitDone => {
                    objects.complete = objects.relist.take().unwrap_or_default();
                    let Objects {
                        complete, journal, ..
                    } = &mut *objects;
                    journal.relisted(complete.values());
                    flag.done.store(true, Ordering::Release);
                    flag.notify.notify_waiters();
                    CacheEvent::Synced
                }
                watcher::Event::Apply(mut o) => {
                    o.seq = next_seq();
                    let object = Arc::new(o);
                    let old = objects.complete.insert(object.clone());
                    objects.journal.applied(object.clone(), old.as_deref());
                    CacheEvent::Applied {
                        object,
                        initial: false,
                    }
                }
                watcher::Event::Delete(mut o) => {
                    let old = objects.complete.remove(&o);
                    o.seq = next_seq();
                    let o = Arc::new(o);
                    objects.journal.deleted(o.clone(), old.as_deref());
                    CacheEvent::Deleted(o)
                }
            };
            let _ = tx.send(out);
            drop(objects);
        }
    });
    KindCache {
        resolved,
        store,
        events,
        synced,
        task,
    }
}
