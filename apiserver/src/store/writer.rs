//! The single writer: takes every queued operation, checks its precondition
//! against the state including earlier operations of the same batch, commits the
//! batch in one fsynced transaction, then publishes and acknowledges.

use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use bytes::Bytes;
use serde_json::Value;
use tokio::sync::oneshot;

use super::db::Db;
use super::{Event, EventType, Expect, Op, Shared, Snapshot, StoreError, Stored, make_stored};

pub(super) type Reply = oneshot::Sender<Result<Arc<Event>, StoreError>>;

/// Most operations one transaction takes; bounds the latency of the first one.
const MAX_BATCH: usize = 2048;

/// Marks the store unhealthy when the writer stops, however it stops.
struct Stopped(Weak<Shared>);

impl Drop for Stopped {
    fn drop(&mut self) {
        if let Some(shared) = self.0.upgrade() {
            shared.set_fault(Some("the store writer has stopped".into()));
        }
    }
}

impl Shared {
    fn set_fault(&self, fault: Option<String>) {
        *self.fault.lock().unwrap_or_else(|p| p.into_inner()) = fault;
    }
}

/// How often the writer, when idle, expires old history and gives memory
/// and disk back.
const MAINTENANCE_EVERY: Duration = Duration::from_secs(5);

pub(crate) fn run(mut db: Db, rx: Receiver<(Op, Reply)>, shared: Weak<Shared>, history: usize) {
    let _stopped = Stopped(shared.clone());
    let mut next_maintenance = Instant::now() + MAINTENANCE_EVERY;
    // Writes since the heap was last trimmed / since the last maintenance.
    let (mut heap_dirty, mut wrote) = (false, false);
    loop {
        let wait = next_maintenance.saturating_duration_since(Instant::now());
        let first = match rx.recv_timeout(wait) {
            Ok(first) => Some(first),
            Err(RecvTimeoutError::Timeout) => None,
            Err(RecvTimeoutError::Disconnected) => return,
        };
        let Some(shared) = shared.upgrade() else {
            return;
        };
        if Instant::now() >= next_maintenance {
            // A quiet interval after writes: what requests and the history
            // freed meanwhile goes back to the system, not only once the
            // history expires (a LIST or DELETE of a collection is transient).
            let settled = heap_dirty && !wrote;
            if maintain(&mut db, &shared) || settled {
                release_heap();
                heap_dirty = false;
            }
            wrote = false;
            next_maintenance = Instant::now() + MAINTENANCE_EVERY;
        }
        let Some(first) = first else {
            continue;
        };
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(op) => batch.push(op),
                Err(_) => break,
            }
        }
        let base = shared.snapshot.load_full();
        let mut objects = base.objects.clone();
        let mut rv = base.rv;
        let mut events = Vec::with_capacity(batch.len());
        let mut outcomes = Vec::with_capacity(batch.len());
        for (op, reply) in batch {
            match apply(&mut objects, rv + 1, op) {
                Ok(event) => {
                    rv += 1;
                    events.push(event.clone());
                    outcomes.push((reply, Ok(event)));
                }
                Err(e) => outcomes.push((reply, Err(e))),
            }
        }
        if events.is_empty() {
            for (reply, result) in outcomes {
                let _ = reply.send(result);
            }
            continue;
        }
        let compact_to = shared.hub.compaction_point(rv, history, events.len());
        if let Err(e) = db.commit(&events, rv, compact_to) {
            // Nothing was published: the batch is as if it never happened.
            tracing::error!(error = %e, "store commit failed");
            shared.set_fault(Some(format!("the last commit failed: {e}")));
            for (reply, _) in outcomes {
                let _ = reply.send(Err(StoreError::Internal(e.to_string())));
            }
            continue;
        }
        shared.set_fault(None);
        (heap_dirty, wrote) = (true, true);
        let snapshot = Arc::new(Snapshot { rv, objects });
        shared
            .hub
            .publish_with(&events, history, || shared.snapshot.store(snapshot));
        for (reply, result) in outcomes {
            let _ = reply.send(result);
        }
    }
}

/// Drops history past its age, cuts the log to match and hands freed pages
/// back (after a burst of writes the database file shrinks again); true when
/// the history let go of something, so the heap should be trimmed too.
fn maintain(db: &mut Db, shared: &Shared) -> bool {
    let Some(compacted) = shared.hub.expire() else {
        return false;
    };
    if let Err(e) = db.compact(compacted).and_then(|()| db.give_back()) {
        tracing::warn!(error = %e, "store compaction failed");
    }
    // A rewound snapshot for paging may hold every object of a revision the
    // history no longer has.
    *shared.rewound.lock().unwrap_or_else(|p| p.into_inner()) = None;
    true
}

/// glibc keeps freed heap pages mapped; after the history let go of many
/// objects, ask it to return them. (The `wasmlet` binary runs on jemalloc,
/// which returns them itself within a second: this is then a no-op.)
fn release_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks the allocator's own free lists.
    unsafe {
        libc::malloc_trim(0);
    }
}

fn current_rv(objects: &im::OrdMap<Arc<str>, Arc<Stored>>, key: &str) -> Option<u64> {
    objects.get(key).map(|s| s.rv)
}

fn check(expect: Expect, current: Option<u64>) -> Result<(), StoreError> {
    match (expect, current) {
        (Expect::Absent, Some(_)) => Err(StoreError::AlreadyExists),
        (Expect::Rv(_), None) => Err(StoreError::NotFound),
        (Expect::Rv(expected), Some(current)) if expected != current => {
            Err(StoreError::Conflict { expected, current })
        }
        _ => Ok(()),
    }
}

fn stamp(key: Arc<str>, rv: u64, mut object: Value) -> Result<Stored, StoreError> {
    if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.insert("resourceVersion".into(), Value::String(rv.to_string()));
    } else {
        return Err(StoreError::Internal(format!(
            "object {key} has no metadata"
        )));
    }
    let json = serde_json::to_vec(&object).map_err(|e| StoreError::Internal(e.to_string()))?;
    Ok(make_stored(key, rv, Bytes::from(json), &object))
}

impl Stored {
    /// This state stamped with revision `rv`: how upstream reports an object
    /// at an event that no longer shows it (deleted, or out of a selector).
    pub(crate) fn restamped(&self, rv: u64) -> Result<Stored, StoreError> {
        stamp(self.key.clone(), rv, self.value()?)
    }
}

fn apply(
    objects: &mut im::OrdMap<Arc<str>, Arc<Stored>>,
    rv: u64,
    op: Op,
) -> Result<Arc<Event>, StoreError> {
    match op {
        Op::Put {
            key,
            expect,
            object,
        } => {
            let prev = objects.get(&key).cloned();
            check(expect, current_rv(objects, &key))?;
            let stored = Arc::new(stamp(key.clone(), rv, object)?);
            objects.insert(key, stored.clone());
            let kind = if prev.is_some() {
                EventType::Modified
            } else {
                EventType::Added
            };
            Ok(Arc::new(Event {
                rv,
                kind,
                object: stored,
                prev,
            }))
        }
        Op::Delete { key, expect } => {
            let prev = objects.get(&key).cloned().ok_or(StoreError::NotFound)?;
            check(expect, Some(prev.rv))?;
            objects.remove(&key);
            // Upstream sends the last stored state stamped with the
            // deletion's revision (after an update that removed the last
            // finalizer, still with that finalizer: the update is never stored).
            let last = Arc::new(prev.restamped(rv)?);
            Ok(Arc::new(Event {
                rv,
                kind: EventType::Deleted,
                object: last,
                prev: Some(prev),
            }))
        }
    }
}
