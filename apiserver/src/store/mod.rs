//! Storage for the embedded API server, shaped like etcd as kube-apiserver uses it:
//! a key/value space with one revision counter, compare-and-swap writes and a
//! watchable history.
//!
//! - **Reads** come from an in-memory persistent map ([`im::OrdMap`]); a LIST takes
//!   a snapshot in O(1) and never blocks writers.
//! - **Writes** go to one writer thread that batches whatever is queued into a
//!   single SQLite transaction (group commit), fsyncs it (`synchronous=FULL`, WAL),
//!   and only then publishes the new snapshot, feeds watchers and acknowledges.
//!   So nothing a client was told about can be lost by `kill -9`, and no reader
//!   or watcher ever sees a write that is not on disk.
//! - **History**: the last `history` revisions, at most `max_bytes` of objects
//!   and `max_age` old, stay in memory (and in the `log` table, so a restart
//!   keeps them) for WATCH from a resourceVersion and for LIST
//!   at an exact older revision; older ones are compacted away (410 Gone).
//!
//! Why SQLite and not redb: a WAL-mode SQLite database is the most exercised
//! crash-safe single file there is, k3s' kine runs clusters on the same layout,
//! and operators can inspect it with the `sqlite3` shell.

mod db;
mod hub;
mod writer;

use std::path::Path;
use std::sync::Arc;

use arc_swap::ArcSwap;
use bytes::Bytes;
use serde_json::Value;

pub(crate) use hub::{Live, Subscription, WatchError};

/// One object as stored: its serialized JSON (with `metadata.resourceVersion`
/// already set) plus what selectors need, parsed once at write time.
#[derive(Debug)]
pub(crate) struct Stored {
    pub(crate) key: Arc<str>,
    pub(crate) rv: u64,
    pub(crate) json: Bytes,
    pub(crate) labels: std::collections::BTreeMap<String, String>,
    /// `spec.nodeName` and `status.phase`, the non-metadata fields that field
    /// selectors may name (for pods).
    pub(crate) node_name: Option<String>,
    pub(crate) phase: Option<String>,
    /// `apiVersion` as stored, so serving it at another version needs no parse.
    pub(crate) api_version: String,
}

impl Stored {
    /// The object parsed. Every `Stored` is made from a parsed value
    /// (`make_stored`), so this fails only on a store corrupted under us; the
    /// error names the key rather than taking the server down.
    pub(crate) fn value(&self) -> Result<Value, StoreError> {
        serde_json::from_slice(&self.json).map_err(|e| {
            StoreError::Internal(format!("stored object {} is not JSON: {e}", self.key))
        })
    }

    /// Namespace and name, read back from the key (`/group/resource/ns/name`).
    pub(crate) fn namespace_name(&self) -> (&str, &str) {
        let mut parts = self.key.rsplitn(3, '/');
        let name = parts.next().unwrap_or("");
        let ns = parts.next().unwrap_or("");
        (ns, name)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EventType {
    Added,
    Modified,
    Deleted,
}

impl EventType {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// One revision of the history. `object` is the new state (for a deletion: the
/// last state, re-stamped with the deletion's revision, as upstream sends it).
#[derive(Debug)]
pub(crate) struct Event {
    pub(crate) rv: u64,
    pub(crate) kind: EventType,
    pub(crate) object: Arc<Stored>,
    pub(crate) prev: Option<Arc<Stored>>,
}

/// A consistent view of every object at one revision.
#[derive(Clone)]
pub(crate) struct Snapshot {
    pub(crate) rv: u64,
    pub(crate) objects: im::OrdMap<Arc<str>, Arc<Stored>>,
}

impl Snapshot {
    /// Objects whose key starts with `prefix`, in key order, starting after `after`.
    pub(crate) fn range<'a>(
        &'a self,
        prefix: &'a str,
        after: Option<&str>,
    ) -> impl Iterator<Item = &'a Arc<Stored>> + 'a {
        let start: Arc<str> = match after {
            Some(a) => Arc::from(format!("{a}\u{0}")),
            None => Arc::from(prefix),
        };
        self.objects
            .range(start..)
            .take_while(move |(k, _)| k.starts_with(prefix))
            .map(|(_, v)| v)
    }

    pub(crate) fn get(&self, key: &str) -> Option<&Arc<Stored>> {
        self.objects.get(key)
    }
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum StoreError {
    #[error("already exists")]
    AlreadyExists,
    #[error("not found")]
    NotFound,
    /// The compare-and-swap precondition failed: someone wrote first.
    #[error("resourceVersion {expected} is not current ({current})")]
    Conflict { expected: u64, current: u64 },
    #[error("storage: {0}")]
    Internal(String),
}

/// What a write expects to find, checked atomically in the writer.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Expect {
    Absent,
    Rv(u64),
}

pub(crate) enum Op {
    Put {
        key: Arc<str>,
        expect: Expect,
        object: Value,
    },
    Delete {
        key: Arc<str>,
        expect: Expect,
    },
}

pub(crate) struct StoreConfig {
    /// Revisions of history kept for WATCH; older watch requests get 410 Gone.
    pub(crate) history: usize,
    /// How long an event stays in the history at most.
    pub(crate) max_age: std::time::Duration,
    /// How many bytes of objects the history holds at most (older watch
    /// requests get 410 Gone, as from a full kube-apiserver watch cache).
    pub(crate) max_bytes: usize,
}

/// Upstream's watch cache keeps events fresh for 75 s; clients that watch
/// with bookmarks (sent every few seconds) never fall behind it.
pub(crate) const DEFAULT_HISTORY_MAX_AGE: std::time::Duration = std::time::Duration::from_secs(75);

/// 10,000 events of a typical 1-3 KiB object fit; a burst of large objects
/// is let go as soon as it passes this, not after 75 s, so memory comes back.
pub(crate) const DEFAULT_HISTORY_MAX_BYTES: usize = 32 << 20;

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            history: 10_000,
            max_age: DEFAULT_HISTORY_MAX_AGE,
            max_bytes: DEFAULT_HISTORY_MAX_BYTES,
        }
    }
}

/// Handle to the store; cheap to clone.
#[derive(Clone)]
pub(crate) struct Store {
    shared: Arc<Shared>,
}

pub(crate) struct Shared {
    snapshot: ArcSwap<Snapshot>,
    /// The last rewound snapshot: consecutive pages of one LIST read the same
    /// revision, and rewinding once per page would make paging quadratic.
    rewound: std::sync::Mutex<Option<Snapshot>>,
    hub: hub::Hub,
    ops: std::sync::mpsc::Sender<(Op, writer::Reply)>,
    /// Why the store cannot take writes (the writer stopped, or its last
    /// commit failed): what `/readyz/etcd` reports.
    fault: std::sync::Mutex<Option<String>>,
}

impl Store {
    /// Opens (or creates) the database at `path`, loads every object and the
    /// retained history, and starts the writer thread.
    pub(crate) fn open(path: &Path, config: StoreConfig) -> Result<Store, StoreError> {
        let mut db = db::Db::open(path)?;
        let loaded = db.load()?;
        let snapshot = Snapshot {
            rv: loaded.rv,
            objects: loaded.objects,
        };
        let hub = hub::Hub::new(
            config.history,
            config.max_age,
            config.max_bytes,
            loaded.history,
            loaded.compacted,
            loaded.rv,
        );
        let (tx, rx) = std::sync::mpsc::channel();
        let shared = Arc::new(Shared {
            snapshot: ArcSwap::from_pointee(snapshot),
            rewound: Default::default(),
            hub,
            ops: tx,
            fault: Default::default(),
        });
        let weak = Arc::downgrade(&shared);
        std::thread::Builder::new()
            .name("store-writer".into())
            .spawn(move || writer::run(db, rx, weak, config.history))
            .map_err(|e| StoreError::Internal(e.to_string()))?;
        Ok(Store { shared })
    }

    /// Whether the store takes writes: `Err` names why not (the storage
    /// health check, as kube-apiserver's `etcd` check).
    pub(crate) fn health(&self) -> Result<(), String> {
        match &*self.shared.fault.lock().unwrap_or_else(|p| p.into_inner()) {
            Some(why) => Err(why.clone()),
            None => Ok(()),
        }
    }

    /// The current committed state.
    pub(crate) fn snapshot(&self) -> Arc<Snapshot> {
        self.shared.snapshot.load_full()
    }

    /// The state as it was at `rv`, rebuilt from the retained history.
    pub(crate) fn snapshot_at(&self, rv: u64) -> Result<Snapshot, WatchError> {
        let now = self.snapshot();
        if rv >= now.rv {
            return Ok((*now).clone());
        }
        let mut cached = self
            .shared
            .rewound
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if let Some(s) = cached.as_ref().filter(|s| s.rv == rv) {
            return Ok(s.clone());
        }
        let s = self.shared.hub.rewind(&now, rv)?;
        *cached = Some(s.clone());
        Ok(s)
    }

    pub(crate) fn get(&self, key: &str) -> Option<Arc<Stored>> {
        self.snapshot().get(key).cloned()
    }

    /// Creates, or replaces when `expect` allows. The writer stamps
    /// `metadata.resourceVersion` with the new revision.
    pub(crate) async fn put(
        &self,
        key: &str,
        expect: Expect,
        object: Value,
    ) -> Result<Arc<Event>, StoreError> {
        self.submit(Op::Put {
            key: Arc::from(key),
            expect,
            object,
        })
        .await
    }

    pub(crate) async fn delete(&self, key: &str, expect: Expect) -> Result<Arc<Event>, StoreError> {
        self.submit(Op::Delete {
            key: Arc::from(key),
            expect,
        })
        .await
    }

    async fn submit(&self, op: Op) -> Result<Arc<Event>, StoreError> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.shared
            .ops
            .send((op, tx))
            .map_err(|_| StoreError::Internal("the store writer has stopped".into()))?;
        rx.await
            .map_err(|_| StoreError::Internal("the store writer has stopped".into()))?
    }

    /// Events under `prefix` after revision `from`, then live ones, for the
    /// server's own controllers (which read as they go; their queue is bounded
    /// by count only).
    pub(crate) fn watch(&self, prefix: &str, from: u64) -> Result<Subscription, WatchError> {
        self.shared.hub.subscribe(prefix, from, usize::MAX)
    }

    /// [`Store::watch`] for a client: its queue is also bounded by bytes
    /// ([`hub::WATCHER_BYTES`]), past which the watch is cut off as too slow.
    pub(crate) fn watch_client(&self, prefix: &str, from: u64) -> Result<Subscription, WatchError> {
        self.shared.hub.subscribe(prefix, from, hub::WATCHER_BYTES)
    }

    /// Highest revision whose events have all been handed to watchers.
    pub(crate) fn published_rv(&self) -> u64 {
        self.shared.hub.published_rv()
    }
}

/// Builds the stored form of an object (used by the writer and at load).
pub(crate) fn make_stored(key: Arc<str>, rv: u64, json: Bytes, value: &Value) -> Stored {
    let labels = value
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                .collect()
        })
        .unwrap_or_default();
    let text = |p: &str| value.pointer(p).and_then(Value::as_str).map(str::to_string);
    Stored {
        key,
        rv,
        json,
        labels,
        node_name: text("/spec/nodeName"),
        phase: text("/status/phase"),
        api_version: text("/apiVersion").unwrap_or_default(),
    }
}
