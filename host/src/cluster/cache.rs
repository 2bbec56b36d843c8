//! Shared watches and caches: one kube-runtime watcher + reflector per kind,
//! whoever needs it (any number of plugins, the `client` import's reads).
//! The watcher resumes after disconnects and relists after a 410; every
//! subscriber gets the events through a broadcast channel. Cached objects
//! carry no `metadata.managedFields`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::{Notify, broadcast};
use wasmlet_apimachinery::selector::{FieldSelector, LabelSelector};

use super::{ClientError, Resolved, Resolver};

/// What a cache saw.
#[derive(Debug, Clone)]
pub enum CacheEvent {
    /// Created or changed; `initial` during a (re)list.
    Applied {
        object: Arc<DynamicObject>,
        initial: bool,
    },
    Deleted(Arc<DynamicObject>),
    /// A (re)list finished: the cache is complete.
    Synced,
}

/// Events a slow subscriber may fall behind by before it must resync from
/// the store (it is told so by `RecvError::Lagged`).
const FANOUT: usize = 16 * 1024;

pub struct KindCache {
    pub resolved: Resolved,
    pub store: Store<DynamicObject>,
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

    pub fn get(&self, namespace: Option<&str>, name: &str) -> Option<Arc<DynamicObject>> {
        let mut r = ObjectRef::new_with(name, self.resolved.resource.clone());
        if self.resolved.namespaced
            && let Some(ns) = namespace
        {
            r = r.within(ns);
        }
        self.store.get(&r)
    }

    /// Objects matching a namespace and selectors, from memory.
    pub fn list(
        &self,
        namespace: Option<&str>,
        labels: &LabelSelector,
        fields: &FieldSelector,
    ) -> Vec<Arc<DynamicObject>> {
        self.store
            .state()
            .into_iter()
            .filter(|o| namespace.is_none() || o.metadata.namespace.as_deref() == namespace)
            .filter(|o| selects(labels, o))
            .filter(|o| {
                fields.matches(|f| match f {
                    "metadata.name" => o.metadata.name.clone(),
                    "metadata.namespace" => o.metadata.namespace.clone(),
                    other => {
                        let path: Vec<&str> = other.split('.').collect();
                        let mut cur = &o.data;
                        for p in path {
                            cur = cur.get(p)?;
                        }
                        cur.as_str().map(str::to_string)
                    }
                })
            })
            .collect()
    }
}

/// Whether `selector` matches `o`'s labels (checked in place: this runs for
/// every watch event and every cached object a list scans).
pub fn selects(selector: &LabelSelector, o: &DynamicObject) -> bool {
    static NONE: std::collections::BTreeMap<String, String> = std::collections::BTreeMap::new();
    selector.matches(o.metadata.labels.as_ref().unwrap_or(&NONE))
}

/// The set of caches, keyed by (apiVersion, kind).
pub struct Caches {
    resolver: Arc<Resolver>,
    kinds: Mutex<HashMap<(String, String), Arc<KindCache>>>,
    /// Debugging/testing only (`--debug-cache-delay-ms`): every watch event is
    /// held this long before the reflector stores it, so caches lag the API.
    debug_delay: std::time::Duration,
}

impl Caches {
    pub fn new(resolver: Arc<Resolver>) -> Arc<Caches> {
        Caches::with_debug_delay(resolver, std::time::Duration::ZERO)
    }

    /// As [`Caches::new`], with every watch event delayed by `delay` before it
    /// reaches the store (a lagging cache, for tests of expectations).
    pub fn with_debug_delay(resolver: Arc<Resolver>, delay: std::time::Duration) -> Arc<Caches> {
        Arc::new(Caches {
            resolver,
            kinds: Mutex::new(HashMap::new()),
            debug_delay: delay,
        })
    }

    pub fn client(&self) -> &kube::Client {
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

    /// The cache for a resolved kind, started now unless it runs already.
    pub fn start(&self, resolved: Resolved) -> Arc<KindCache> {
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
    let writer = reflector::store::Writer::<DynamicObject>::new(ar.clone());
    let store = writer.as_reader();
    let (events, _) = broadcast::channel(FANOUT);
    let tx = events.clone();
    let api: Api<DynamicObject> = Api::all_with(client, &ar);
    let synced = Arc::new(Synced::default());
    let flag = synced.clone();
    let kind = ar.kind.clone();
    let task = tokio::spawn(async move {
        // managedFields are half of a typical object and no reconcile reads
        // them (field ownership is the API server's business): the cache
        // drops them, as controller-runtime's common transform does.
        let stream = watcher(api, watcher::Config::default())
            .default_backoff()
            .modify(|o: &mut DynamicObject| o.metadata.managed_fields = None);
        let stream = if delay.is_zero() {
            stream.boxed()
        } else {
            // Before the reflector, so the store itself lags (not only the
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
        let mut stream = reflector::reflector(writer, stream).boxed();
        while let Some(ev) = stream.next().await {
            let ev = match ev {
                Ok(ev) => ev,
                Err(e) => {
                    tracing::warn!(%kind, error = %e, "watch failed; retrying with back-off");
                    continue;
                }
            };
            let out = match ev {
                watcher::Event::Init => continue,
                watcher::Event::InitApply(o) => CacheEvent::Applied {
                    object: Arc::new(o),
                    initial: true,
                },
                watcher::Event::InitDone => {
                    flag.done.store(true, Ordering::Release);
                    flag.notify.notify_waiters();
                    CacheEvent::Synced
                }
                watcher::Event::Apply(o) => CacheEvent::Applied {
                    object: Arc::new(o),
                    initial: false,
                },
                watcher::Event::Delete(o) => CacheEvent::Deleted(Arc::new(o)),
            };
            let _ = tx.send(out);
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
