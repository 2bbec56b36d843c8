//! What one call's `Store` holds: an empty WASI context (no files, no
//! environment, no sockets), the memory limiter, and the plugin's context for
//! its imports. A fresh one per call, so nothing leaks between reconciles.

use std::sync::Arc;

use wasmtime::component::ResourceTable;
use wasmtime::{ResourceLimiter, StoreLimits, StoreLimitsBuilder};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use super::in_flight::InFlight;
use super::manifest::Manifest;
use super::metrics::PluginMetrics;
use super::observe::{PendingRecord, Watcher};
use super::tape::Tape;
use crate::cluster::ClusterAccess;

/// A write a guest made through `client`, for the controller's expectations.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Write {
    Created {
        api_version: String,
        kind: String,
        namespace: Option<String>,
        name: String,
        uid: String,
    },
    Updated {
        api_version: String,
        kind: String,
        namespace: Option<String>,
        name: String,
        resource_version: String,
    },
    /// `uid`: the object's as the cache showed it just before the request
    /// (`None` if it did not), so that a same-named successor (a StatefulSet
    /// pod made again) is not mistaken for the deleted object.
    Deleted {
        api_version: String,
        kind: String,
        namespace: Option<String>,
        name: String,
        uid: Option<String>,
    },
    Evicted {
        namespace: String,
        name: String,
        uid: Option<String>,
    },
}

/// Everything a plugin version's imports need, shared by its calls.
pub(crate) struct PluginCtx {
    pub(crate) name: String,
    pub(crate) manifest: Arc<Manifest>,
    pub(crate) api: Option<Arc<dyn ClusterAccess>>,
    /// The host's named clusters (the `clusters` import); empty when it has none.
    pub(crate) clusters: crate::cluster::NamedClusters,
    pub(crate) metrics: Arc<PluginMetrics>,
    /// Where `record-event` publishes (rate-limited); `None`: no cluster.
    pub(crate) events: Option<super::events::EventSink>,
    /// Providers only: the node agent's workload runner.
    pub(crate) workloads: Option<Arc<dyn super::provider::Workloads>>,
    /// The `http` import's outbound client (one per process); `None`: no outbound HTTP.
    pub(crate) http: Option<Arc<super::http::HttpClient>>,
    /// Where this version's calls are recorded (`record::Recording`);
    /// `None`: not recorded.
    pub(crate) recording: Option<Arc<dyn Watcher>>,
    /// `wasmlet replay` or a shadow candidate: every import is answered from
    /// a record (a candidate's cluster reads beyond it excepted).
    pub(crate) replay: bool,
    /// Live reconciler versions: where a shadow candidate may run beside
    /// them (`shadow::ShadowSlot`).
    pub(crate) shadow: Option<Arc<dyn Watcher>>,
}

impl PluginCtx {
    /// Whether calls need a tape (recording or replaying).
    pub(crate) fn taped(&self) -> bool {
        self.recording.is_some() || self.replay
    }
}

/// The most table elements one store may hold, across all its tables.
pub(crate) const MAX_TABLE_ELEMENTS: usize = 1 << 17;

/// Denies memory growth past a cap and remembers that it did, so the trap that
/// follows (a Rust guest aborts on allocation failure) is reported as
/// out-of-memory rather than a plain trap. Shared by plugin calls and workloads.
///
/// The caps are totals over every memory (and every table) of the store: a
/// per-memory cap would let a component with 16 memories take 16 times as much.
pub(crate) struct Limiter {
    limits: StoreLimits,
    memory_cap: Option<usize>,
    memory_total: usize,
    table_total: usize,
    /// Memory shared with other stores (the node's workloads): each grow
    /// takes from it too, and the store's drop gives its memory back.
    pool: Option<Arc<MemoryPool>>,
    pub(crate) hit: bool,
}

impl Limiter {
    pub(crate) fn new(memory_bytes: Option<usize>) -> Limiter {
        let limits = StoreLimitsBuilder::new()
            .instances(64)
            .tables(64)
            .memories(16)
            .build();
        Limiter {
            limits,
            memory_cap: memory_bytes,
            memory_total: 0,
            table_total: 0,
            pool: None,
            hit: false,
        }
    }

    /// This store's memory also counts against `pool`.
    pub(crate) fn in_pool(mut self, pool: Arc<MemoryPool>) -> Limiter {
        self.pool = Some(pool);
        self
    }
}

impl Drop for Limiter {
    fn drop(&mut self) {
        if let Some(pool) = &self.pool {
            pool.give(self.memory_total);
        }
    }
}

/// Memory many stores share, as the kubelet's `kubepods` cgroup caps what
/// all pods together use: a grow that would pass `cap` is denied (the
/// workload is out of memory, as one the kernel kills in that cgroup).
/// It counts what the stores have grown to, not their caps: a cap is a
/// bound on one store, not a reservation.
#[derive(Debug)]
pub(crate) struct MemoryPool {
    cap: usize,
    used: std::sync::atomic::AtomicUsize,
}

impl MemoryPool {
    pub(crate) fn new(cap: usize) -> MemoryPool {
        MemoryPool {
            cap,
            used: std::sync::atomic::AtomicUsize::new(0),
        }
    }

    /// Bytes the stores in the pool hold now.
    pub(crate) fn used(&self) -> usize {
        self.used.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Takes `n` bytes if they fit under the cap.
    fn take(&self, n: usize) -> bool {
        use std::sync::atomic::Ordering;
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |u| {
                u.checked_add(n).filter(|t| *t <= self.cap)
            })
            .is_ok()
    }

    fn give(&self, n: usize) {
        use std::sync::atomic::Ordering;
        let _ = self
            .used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |u| {
                Some(u.saturating_sub(n))
            });
    }
}

/// Grows `total` by `desired - current` when the result stays within `cap`.
fn grow_within(total: &mut usize, current: usize, desired: usize, cap: Option<usize>) -> bool {
    let next = total.saturating_add(desired.saturating_sub(current));
    if cap.is_some_and(|c| next > c) {
        return false;
    }
    *total = next;
    true
}

impl ResourceLimiter for Limiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let before = self.memory_total;
        let mut ok = self.limits.memory_growing(current, desired, maximum)?
            && grow_within(&mut self.memory_total, current, desired, self.memory_cap);
        if ok
            && let Some(pool) = &self.pool
            && !pool.take(self.memory_total - before)
        {
            self.memory_total = before;
            ok = false;
        }
        self.hit |= !ok;
        Ok(ok)
    }

    fn table_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let ok = self.limits.table_growing(current, desired, maximum)?
            && grow_within(
                &mut self.table_total,
                current,
                desired,
                Some(MAX_TABLE_ELEMENTS),
            );
        self.hit |= !ok;
        Ok(ok)
    }

    fn instances(&self) -> usize {
        self.limits.instances()
    }

    fn tables(&self) -> usize {
        self.limits.tables()
    }

    fn memories(&self) -> usize {
        self.limits.memories()
    }
}

pub struct State {
    wasi: WasiCtx,
    table: ResourceTable,
    pub(crate) limiter: Limiter,
    pub(crate) plugin: Arc<PluginCtx>,
    /// The object the call is about, for logs.
    pub(crate) key: String,
    pub(crate) writes: Vec<Write>,
    /// Bindings sent and not waited for (`limits.bindings-in-flight`).
    pub(crate) in_flight: Vec<InFlight<Write>>,
    /// A client call met 409 or 429: the controller retries soon, not with back-off.
    pub(crate) retry_soon: bool,
    /// When the call began (its deadline runs from here), for the `http` import's timeout.
    pub(crate) started: std::time::Instant,
    /// Recording or replaying: the imports' (and WASI clocks' and random's) tape.
    pub(crate) tape: Option<Arc<Tape>>,
    /// The message of a guest panic, handed over by the SDK's panic hook just
    /// before the trap (see [`PANIC_FIELD`]).
    pub(crate) panic: Option<String>,
}

/// The log field by which a guest's panic hook marks its last record as the
/// panic's message (`wasmlet-sdk` sets it): the host reports that text as the
/// call's failure instead of a bare `unreachable` trap and its backtrace.
pub(crate) const PANIC_FIELD: &str = "wasmlet.panic";

/// The most bytes of a panic message kept.
pub(crate) const MAX_PANIC_BYTES: usize = 4096;

/// What a call did besides its result.
#[derive(Debug, Default)]
pub struct CallReport {
    pub(crate) writes: Vec<Write>,
    /// Bindings still in flight when the call returned; the caller lands
    /// them ([`super::in_flight::land`]) before the key is done.
    pub(crate) in_flight: Vec<InFlight<Write>>,
    pub(crate) retry_soon: bool,
    /// Recording: the call's record, written once the host's writes for it are added.
    pub(crate) record: Option<Arc<PendingRecord>>,
}

impl State {
    #[cfg(test)]
    pub(crate) fn new(plugin: Arc<PluginCtx>, key: String) -> State {
        State::with_tape(plugin, key, None)
    }

    /// A store's state whose WASI clocks and random go through `tape`.
    pub(crate) fn with_tape(plugin: Arc<PluginCtx>, key: String, tape: Option<Arc<Tape>>) -> State {
        let mut wasi = WasiCtx::builder();
        wasi.allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false);
        if let Some(t) = &tape {
            super::tape::install(&mut wasi, t);
        }
        let memory = plugin.manifest.limits.memory_mib as usize * 1024 * 1024;
        State {
            wasi: wasi.build(),
            table: ResourceTable::new(),
            limiter: Limiter::new(Some(memory)),
            plugin,
            key,
            writes: Vec::new(),
            in_flight: Vec::new(),
            retry_soon: false,
            started: std::time::Instant::now(),
            tape,
            panic: None,
        }
    }
}

impl WasiView for State {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Instantiates a core module under a limiter capped at `pages` of memory.
    fn instantiate(wat: &str, pages: usize) -> Result<(), String> {
        let engine = wasmtime::Engine::default();
        let module = wasmtime::Module::new(&engine, wat::parse_str(wat).unwrap()).unwrap();
        let mut store = wasmtime::Store::new(&engine, Limiter::new(Some(pages * 65536)));
        store.limiter(|l| l);
        wasmtime::Instance::new(&mut store, &module, &[])
            .map(|_| ())
            .map_err(|e| format!("{e:#}"))
    }

    #[test]
    fn the_memory_cap_is_a_total_over_all_memories() {
        assert!(instantiate("(module (memory 3))", 3).is_ok());
        // Two memories of 2 pages each under a 3-page cap.
        assert!(instantiate("(module (memory 2) (memory 2))", 3).is_err());
        // Sixteen memories of one page under a 4-page cap.
        let sixteen = format!("(module {})", "(memory 1) ".repeat(16));
        assert!(instantiate(&sixteen, 4).is_err());
        assert!(instantiate(&sixteen, 16).is_ok());
    }

    #[test]
    fn a_pool_caps_what_stores_hold_together_and_gets_it_back_on_drop() {
        let engine = wasmtime::Engine::default();
        let module = |pages: u32| {
            wasmtime::Module::new(
                &engine,
                wat::parse_str(format!("(module (memory {pages}))")).unwrap(),
            )
            .unwrap()
        };
        let pool = Arc::new(MemoryPool::new(5 * 65536));
        let store = |pages| {
            // Each store's own cap is larger than the pool: the pool decides.
            let mut s = wasmtime::Store::new(
                &engine,
                Limiter::new(Some(100 * 65536)).in_pool(pool.clone()),
            );
            s.limiter(|l| l);
            let ok = wasmtime::Instance::new(&mut s, &module(pages), &[]).is_ok();
            (s, ok)
        };
        let (a, ok) = store(3);
        assert!(ok);
        assert_eq!(pool.used(), 3 * 65536);
        let (b, ok) = store(3);
        assert!(!ok, "3 + 3 pages do not fit a 5-page pool");
        assert!(b.data().hit, "reported as out of memory");
        drop(b);
        assert_eq!(pool.used(), 3 * 65536, "a denied grow takes nothing");
        let (_c, ok) = store(2);
        assert!(ok);
        drop(a);
        assert_eq!(
            pool.used(),
            2 * 65536,
            "a dropped store gives its memory back"
        );
    }

    #[test]
    fn table_elements_are_capped() {
        assert!(instantiate("(module (table 1000 funcref))", 1).is_ok());
        let huge = format!("(module (table {} funcref))", MAX_TABLE_ELEMENTS + 1);
        assert!(instantiate(&huge, 1).is_err());
        let split = format!(
            "(module (table {n} funcref) (table {n} funcref))",
            n = MAX_TABLE_ELEMENTS / 2 + 1
        );
        assert!(instantiate(&split, 1).is_err());
    }
}
