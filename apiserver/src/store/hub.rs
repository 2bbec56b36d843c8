//! Fan-out of committed events to watchers, and the bounded history they replay.
//!
//! Each watcher has its own queue, bounded by count and, for clients' watches,
//! by bytes. A watcher that falls that far behind is cut off: its queue is
//! dropped at once and its stream ends, instead of slowing the writer or other
//! watchers or holding events the history has already let go. Clients re-watch
//! from their last resourceVersion (410 Gone if the history no longer holds it,
//! then they re-list). kube-apiserver's watch cache closes an unresponsive
//! watcher the same way, without an ERROR event.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use super::{Event, Snapshot};

/// Events a watcher may have queued before it is cut off as too slow.
const WATCHER_QUEUE: usize = 8192;
/// Bytes of objects a client's watch may have queued before it is cut off as
/// too slow: without it, 8,192 large objects (one watch held 3.5 GB) stayed
/// alive in an unread watch's queue long after the history let them go. Twice
/// the largest object a request may write, so one always fits.
pub(crate) const WATCHER_BYTES: usize = 8 << 20;

#[derive(Debug, thiserror::Error)]
pub(crate) enum WatchError {
    /// The requested revision is older than the retained history.
    #[error("too old resource version: {requested} ({oldest})")]
    Gone { requested: u64, oldest: u64 },
}

pub(crate) struct Subscription {
    /// Retained events after the requested revision, oldest first.
    pub(crate) backlog: Vec<Arc<Event>>,
    /// Live events; closes if this watcher falls too far behind.
    pub(crate) live: Live,
}

/// The receiving end of a watcher's queue.
pub(crate) struct Live {
    queue: Arc<Queue>,
}

struct Queue {
    state: Mutex<QueueState>,
    ready: Notify,
    /// The most bytes ([`held`]) the queue may hold.
    max_bytes: usize,
}

#[derive(Default)]
struct QueueState {
    events: VecDeque<Arc<Event>>,
    bytes: usize,
    /// No more events will come: the receiver was dropped, or the hub let go
    /// of this watcher (too slow, or its sender is gone).
    closed: bool,
    /// Cut off as too slow.
    too_slow: bool,
}

impl Queue {
    fn new(max_bytes: usize) -> Arc<Queue> {
        Arc::new(Queue {
            state: Mutex::default(),
            ready: Notify::new(),
            max_bytes,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, QueueState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues `event`; false once the watcher is gone or was cut off (its
    /// queued events are dropped then, so their memory comes back at once).
    fn push(&self, event: &Arc<Event>) -> bool {
        let mut q = self.lock();
        if q.closed {
            return false;
        }
        let size = held(event);
        if q.events.len() >= WATCHER_QUEUE || q.bytes + size > self.max_bytes && q.bytes > 0 {
            q.events = VecDeque::new();
            q.bytes = 0;
            q.closed = true;
            q.too_slow = true;
            drop(q);
            self.ready.notify_one();
            return false;
        }
        q.events.push_back(event.clone());
        q.bytes += size;
        drop(q);
        self.ready.notify_one();
        true
    }

    fn close(&self) {
        self.lock().closed = true;
        self.ready.notify_one();
    }

    fn is_closed(&self) -> bool {
        self.lock().closed
    }
}

impl Live {
    /// The next event; `None` once the watch is over (see [`Live::too_slow`]).
    pub(crate) async fn recv(&mut self) -> Option<Arc<Event>> {
        let queue = self.queue.clone();
        loop {
            // Registered before looking, so a push in between still wakes it.
            let ready = queue.ready.notified();
            if let Some(e) = self.try_recv() {
                return Some(e);
            }
            if queue.is_closed() {
                return None;
            }
            ready.await;
        }
    }

    pub(crate) fn try_recv(&mut self) -> Option<Arc<Event>> {
        let mut q = self.queue.lock();
        let e = q.events.pop_front()?;
        q.bytes -= held(&e);
        Some(e)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.queue.lock().events.is_empty()
    }

    /// Whether the watch ended because it fell too far behind.
    #[cfg(test)]
    pub(crate) fn too_slow(&self) -> bool {
        self.queue.lock().too_slow
    }

    /// A watch that is already over (for a watch refused before it started).
    pub(crate) fn ended() -> Live {
        let queue = Queue::new(0);
        queue.close();
        Live { queue }
    }

    /// Bytes queued now.
    #[cfg(test)]
    pub(crate) fn queued_bytes(&self) -> usize {
        self.queue.lock().bytes
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        self.queue.close();
    }
}

struct Subscriber {
    prefix: Arc<str>,
    queue: Arc<Queue>,
}

impl Drop for Subscriber {
    /// The hub let go of this watcher (cut off, or the hub itself is gone):
    /// its stream ends once it has what is queued.
    fn drop(&mut self) {
        self.queue.close();
    }
}

struct Inner {
    ring: VecDeque<Arc<Event>>,
    /// What the ring's events hold ([`held`]), against the byte limit.
    bytes: usize,
    /// When each published batch came in, by its last revision: events older
    /// than the history's age limit are dropped even when few, so memory
    /// comes back after a burst.
    stamps: VecDeque<(u64, Instant)>,
    /// Every revision ≤ this one is gone from the history.
    compacted: u64,
    published: u64,
    /// Compaction point already written to the database.
    db_compacted: u64,
    subscribers: Vec<Subscriber>,
}

pub(crate) struct Hub {
    inner: Mutex<Inner>,
    /// How long an event stays in the history at most.
    max_age: Duration,
    /// How many bytes of objects the history holds at most: a burst of large
    /// objects (or of their deletions) is let go at once, not after `max_age`.
    max_bytes: usize,
}

impl Hub {
    pub(crate) fn new(
        history: usize,
        max_age: Duration,
        max_bytes: usize,
        ring: VecDeque<Arc<Event>>,
        compacted: u64,
        rv: u64,
    ) -> Hub {
        // The history loaded from disk counts as new: its age is unknown.
        let stamps = ring
            .back()
            .map(|e| (e.rv, Instant::now()))
            .into_iter()
            .collect();
        let bytes = ring.iter().map(|e| held(e)).sum();
        let mut inner = Inner {
            ring,
            bytes,
            stamps,
            compacted,
            published: rv,
            db_compacted: compacted,
            subscribers: Vec::new(),
        };
        trim(&mut inner, history, max_bytes);
        Hub {
            inner: Mutex::new(inner),
            max_age,
            max_bytes,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic while holding this lock cannot leave the ring half-updated in a
        // way readers could misread, so a poisoned lock is still usable.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn published_rv(&self) -> u64 {
        self.lock().published
    }

    /// Where the database log may be cut after a batch that ends at `rv`;
    /// done in steps so the DELETE runs rarely.
    pub(crate) fn compaction_point(&self, rv: u64, history: usize, _batch: usize) -> Option<u64> {
        let mut inner = self.lock();
        let keep_from = rv.saturating_sub(history as u64);
        let step = (history as u64 / 4).max(1);
        if keep_from >= inner.db_compacted + step {
            inner.db_compacted = keep_from;
            Some(keep_from)
        } else {
            None
        }
    }

    /// Drops the events older than the age limit; returns the revision the
    /// database log may now be cut at, if it moved.
    pub(crate) fn expire(&self) -> Option<u64> {
        let mut inner = self.lock();
        let cutoff = Instant::now().checked_sub(self.max_age)?;
        while let Some(&(rv, at)) = inner.stamps.front() {
            if at > cutoff {
                break;
            }
            inner.stamps.pop_front();
            while inner.ring.front().is_some_and(|e| e.rv <= rv) {
                pop(&mut inner);
            }
        }
        // The ring is a VecDeque: give its buffer back once mostly empty.
        if inner.ring.capacity() > 4 * inner.ring.len().max(64) {
            inner.ring.shrink_to_fit();
        }
        (inner.compacted > inner.db_compacted).then(|| {
            inner.db_compacted = inner.compacted;
            inner.compacted
        })
    }

    /// Publishes a committed batch; `make_visible` swaps in the new snapshot
    /// under the same lock, so a snapshot's revision always equals what the
    /// history holds.
    pub(crate) fn publish_with(
        &self,
        events: &[Arc<Event>],
        history: usize,
        make_visible: impl FnOnce(),
    ) {
        let mut inner = self.lock();
        make_visible();
        for event in events {
            inner.ring.push_back(event.clone());
            inner.bytes += held(event);
            inner.subscribers.retain(|s| {
                if !event.object.key.starts_with(&*s.prefix) {
                    return !s.queue.is_closed();
                }
                let kept = s.queue.push(event);
                if !kept && s.queue.lock().too_slow {
                    tracing::warn!(prefix = %s.prefix, "watcher too slow, disconnecting it");
                }
                kept
            });
            inner.published = event.rv;
        }
        if let Some(last) = events.last() {
            inner.stamps.push_back((last.rv, Instant::now()));
        }
        trim(&mut inner, history, self.max_bytes);
    }

    /// Events under `prefix` after `from`, then live ones; the live queue
    /// holds at most `max_bytes` of objects before the watcher is cut off.
    pub(crate) fn subscribe(
        &self,
        prefix: &str,
        from: u64,
        max_bytes: usize,
    ) -> Result<Subscription, WatchError> {
        let mut inner = self.lock();
        if from < inner.compacted {
            return Err(WatchError::Gone {
                requested: from,
                oldest: inner.compacted + 1,
            });
        }
        let start = inner.ring.partition_point(|e| e.rv <= from);
        let backlog = inner
            .ring
            .range(start..)
            .filter(|e| e.object.key.starts_with(prefix))
            .cloned()
            .collect();
        let queue = Queue::new(max_bytes);
        inner.subscribers.push(Subscriber {
            prefix: Arc::from(prefix),
            queue: queue.clone(),
        });
        Ok(Subscription {
            backlog,
            live: Live { queue },
        })
    }

    /// The state at `rv`: `now` with every later event undone.
    pub(crate) fn rewind(&self, now: &Snapshot, rv: u64) -> Result<Snapshot, WatchError> {
        let inner = self.lock();
        if rv < inner.compacted {
            return Err(WatchError::Gone {
                requested: rv,
                oldest: inner.compacted + 1,
            });
        }
        let mut objects = now.objects.clone();
        for e in inner.ring.iter().rev().take_while(|e| e.rv > rv) {
            if e.rv > now.rv {
                continue;
            }
            match &e.prev {
                Some(prev) => {
                    objects.insert(e.object.key.clone(), prev.clone());
                }
                None => {
                    objects.remove(&e.object.key);
                }
            }
        }
        Ok(Snapshot { rv, objects })
    }
}

/// The bytes `event` keeps alive while the history holds it: its object, and
/// for a deletion also the last state (which nothing else holds any more).
/// A modification's previous state is counted with the event that made it.
fn held(event: &Event) -> usize {
    let prev = match (&event.kind, &event.prev) {
        (super::EventType::Deleted, Some(p)) => p.json.len(),
        _ => 0,
    };
    event.object.json.len() + prev
}

/// Drops the oldest event; every revision up to it is then compacted.
fn pop(inner: &mut Inner) {
    if let Some(e) = inner.ring.pop_front() {
        inner.bytes -= held(&e);
        inner.compacted = e.rv;
    }
}

fn trim(inner: &mut Inner, history: usize, max_bytes: usize) {
    while inner.ring.len() > history || inner.bytes > max_bytes && inner.ring.len() > 1 {
        pop(inner);
    }
    // A batch's stamp goes once its last event has.
    let oldest = inner.ring.front().map_or(u64::MAX, |e| e.rv);
    while inner.stamps.front().is_some_and(|&(rv, _)| rv < oldest) {
        inner.stamps.pop_front();
    }
}

#[cfg(test)]
mod tests {
    use super::super::{EventType, make_stored};
    use super::*;

    fn event(rv: u64, kind: EventType, pad: usize) -> Arc<Event> {
        let value = serde_json::json!({"metadata": {"name": "x"}, "data": "y".repeat(pad)});
        let json = bytes::Bytes::from(serde_json::to_vec(&value).unwrap());
        let stored = Arc::new(make_stored(Arc::from("/r/ns/x"), rv, json, &value));
        let prev = (kind == EventType::Deleted).then(|| stored.clone());
        Arc::new(Event {
            rv,
            kind,
            object: stored,
            prev,
        })
    }

    #[test]
    fn a_burst_past_the_byte_limit_is_let_go_at_once_and_old_watches_are_gone() {
        let hub = Hub::new(
            10_000,
            Duration::from_secs(75),
            100 << 10,
            VecDeque::new(),
            0,
            0,
        );
        // 20 events of ~16 KiB: only the last ones within 100 KiB stay.
        let burst: Vec<_> = (1..=20)
            .map(|rv| event(rv, EventType::Added, 16 << 10))
            .collect();
        hub.publish_with(&burst, 10_000, || ());
        assert!(matches!(
            hub.subscribe("/r/", 1, usize::MAX),
            Err(WatchError::Gone { .. })
        ));
        let kept = hub.subscribe("/r/", 14, usize::MAX).unwrap().backlog;
        assert_eq!(
            kept.iter().map(|e| e.rv).collect::<Vec<_>>(),
            [15, 16, 17, 18, 19, 20]
        );
        // A deletion holds its last state as well: three count as six.
        let deletes: Vec<_> = (21..=23)
            .map(|rv| event(rv, EventType::Deleted, 16 << 10))
            .collect();
        hub.publish_with(&deletes, 10_000, || ());
        let kept = hub.subscribe("/r/", 20, usize::MAX).unwrap().backlog;
        assert_eq!(kept.iter().map(|e| e.rv).collect::<Vec<_>>(), [21, 22, 23]);
        assert!(matches!(
            hub.subscribe("/r/", 19, usize::MAX),
            Err(WatchError::Gone { .. })
        ));
        // The database log may be cut where the history now starts.
        assert_eq!(hub.expire(), Some(20));
    }

    /// An unread watch's queue never holds more than its byte bound: the
    /// event that would pass it cuts the watch off, drops what it queued
    /// (the history let most of it go already) and ends its stream.
    #[tokio::test]
    async fn an_unread_watch_past_its_byte_bound_is_cut_off_and_let_go() {
        let hub = Hub::new(
            10,
            Duration::from_secs(75),
            100 << 10,
            VecDeque::new(),
            0,
            0,
        );
        let mut sub = hub.subscribe("/r/", 0, 100 << 10).unwrap();
        let mut reader = hub.subscribe("/r/", 0, 100 << 10).unwrap();
        let mut last = None;
        for rv in 1..=20 {
            let e = event(rv, EventType::Added, 16 << 10);
            hub.publish_with(std::slice::from_ref(&e), 10, || ());
            assert!(sub.live.queued_bytes() <= 100 << 10);
            // A watch that reads along is never cut off.
            assert_eq!(reader.live.recv().await.unwrap().rv, rv);
            last = Some(e);
        }
        assert!(sub.live.too_slow());
        assert_eq!(sub.live.queued_bytes(), 0);
        assert!(sub.live.recv().await.is_none(), "the stream ends");
        assert!(!reader.live.too_slow());
        // Nothing but the history holds the newest event; the oldest are gone.
        assert_eq!(Arc::strong_count(last.as_ref().unwrap()), 2);
        assert_eq!(hub.lock().subscribers.len(), 1);
    }

    /// The count bound still holds for watches without a byte bound (the
    /// server's own controllers).
    #[tokio::test]
    async fn a_watch_past_its_count_bound_is_cut_off() {
        let hub = Hub::new(10, Duration::from_secs(75), 1 << 20, VecDeque::new(), 0, 0);
        let mut sub = hub.subscribe("/r/", 0, usize::MAX).unwrap();
        let events: Vec<_> = (1..=WATCHER_QUEUE as u64)
            .map(|rv| event(rv, EventType::Added, 0))
            .collect();
        hub.publish_with(&events, 10, || ());
        assert!(!sub.live.too_slow());
        hub.publish_with(
            &[event(WATCHER_QUEUE as u64 + 1, EventType::Added, 0)],
            10,
            || (),
        );
        assert!(sub.live.too_slow());
        assert!(sub.live.recv().await.is_none());
        // A hub that goes away ends its watches.
        let mut other = hub
            .subscribe("/r/", WATCHER_QUEUE as u64 + 1, usize::MAX)
            .unwrap();
        drop(hub);
        assert!(other.live.recv().await.is_none());
    }
}
