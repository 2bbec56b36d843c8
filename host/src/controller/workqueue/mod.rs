//! The controller workqueue: a deduplicating, priority-aware, rate-limited
//! queue of object keys, written for wasmlet (no crate provides the queue).
//!
//! # Model
//!
//! Every key the queue knows is in at most one of these places:
//!
//! * **high** — ready, handed out first: FIFO within a namespace, the
//!   namespaces in turn (`fair`);
//! * **low** — ready, but only *drained into high* at a fixed rate
//!   ([`QueueConfig::low_per_minute`], token bucket of [`QueueConfig::low_burst`]);
//!   a drained item joins the tail of the high lane (it keeps `Priority::Low`
//!   as its priority, which is what a requeue of it keeps). That rate is a
//!   floor: a worker that finds the high lane empty takes the oldest low item
//!   directly while fewer than [`QueueConfig::idle_low`] keys are processing,
//!   so idle workers re-verify the low backlog at full speed;
//! * **scheduled** — waiting for a time (requeue-after, back-off, retry-soon);
//!   when the time comes it joins the lane of its priority (high → high lane,
//!   low → low lane);
//! * **processing** — handed out by [`WorkQueue::next`] and not yet
//!   [`WorkQueue::done`]. A processing key that is added again is remembered
//!   ("dirty", merged like any other add) but *not* handed out until `done`;
//!   it is then placed once, in the lane or schedule its merged state says.
//!   Such a key counts only under `processing` in [`Depth`].
//!
//! So a ready High item never waits behind Low items: the low lane only ever
//! feeds the high lane at `low_per_minute`, whatever the size of its backlog,
//! and idle workers take low items only when no high item is ready. With
//! `idle_low` below the number of workers, one worker is always free when a
//! high item arrives; with a single worker (`idle_low == 1`) a high item waits
//! at most for the one low item being processed.
//! `low_per_minute == 0` disables that limit (low items drain immediately,
//! which with everything added High-or-Low behaves as one FIFO).
//!
//! # Dedup and merging
//!
//! Adding a key that is already queued (in any place above, including the
//! dirty mark of a processing key) merges: the result has the **higher**
//! priority and the **earlier** ready time. A scheduled key re-added as
//! ready-now becomes ready now; a ready key that is `add_after`ed stays
//! ready; a low key re-added as high moves to the high lane at once.
//! `add_after`, `add_rate_limited` and `add_soon` use the key's current
//! priority: the queued priority if it is queued, else the priority it was
//! last handed out with while the queue still tracks it (processing, or with
//! back-off history), else `High`. Call them *before* `done` to be sure the
//! priority is kept.
//!
//! # Back-off
//!
//! * `add_rate_limited` (error): per-key exponential `base_backoff * 2^n`
//!   capped at `max_backoff`, where `n` is the number of earlier failures
//!   since the last `forget`, combined with an overall token bucket
//!   (`rate_per_sec`, `burst`; reservations as `golang.org/x/time/rate`)
//!   by taking the later of the two — client-go's `MaxOfRateLimiter` of
//!   `ItemExponentialFailureRateLimiter` and `BucketRateLimiter`. Counts a
//!   retry (`retries()` grows, `workqueue_retries_total` grows).
//! * `add_soon` (409 Conflict / 429 Too Many Requests): a fixed short delay,
//!   `retry_soon` (100 ms) plus a uniform jitter in `[0, retry_soon / 2]`;
//!   not exponential, does not use the token bucket, does not grow
//!   `retries()`. It does count in `workqueue_retries_total` (it is a retry
//!   for whoever watches the dashboard).
//! * `forget` resets the key's failure count (do it on success and on
//!   requeue-after).
//!
//! # Shutdown
//!
//! [`WorkQueue::shutdown`] wakes every waiter; from then on `next()` returns
//! `None` at once, **without draining** what is still queued (unlike
//! client-go's `Get`, which hands out the remaining items first): wasmlet shuts
//! a queue down when it loses its lease, and then no further reconcile may
//! start. Adds after shutdown are ignored; `done` still works.
//!
//! # Fairness
//!
//! Fairness between plugins is achieved by giving each plugin its own queue
//! and its own workers (concurrency from the plugin's manifest); one plugin's
//! backlog therefore never delays another's. Within one queue, the high lane
//! takes the namespaces in turn ([`fair`]): a namespace's flood of ready keys
//! (20,000 Jobs) delays another namespace's one key by a turn of each busy
//! namespace, not by the flood (issue 49).
//!
//! # Time
//!
//! All times are `tokio::time::Instant`, so tests can pause and advance the
//! clock. A waiting `next()` sleeps on a tokio timer until the earliest
//! scheduled item or low-lane token, or until an add/shutdown notifies it —
//! it never polls.
//!
//! # Layout
//!
//! This file holds the public types and [`WorkQueue`]'s methods; `lanes`
//! the per-key state, the lanes and the schedule (placing, merging, pumping
//! the low lane, handing out); `bucket` the token bucket both rate limits
//! use; `metrics` the Prometheus metrics.

use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::fmt::Debug;
use std::hash::Hash;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use bucket::{TokenBucket, secs};
pub(crate) use fair::Tenant;
use lanes::{KeyState, Lane, State, lock};
use metrics::{QueueHandles, Refresh};

pub(crate) use metrics::QueueMetrics;

mod bucket;
pub(crate) mod fair;
mod lanes;
mod metrics;
#[cfg(test)]
mod tests;

/// Priority of a queued key (see the module docs). Ordered `Low < High`,
/// so `a.max(b)` is the higher one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub(crate) enum Priority {
    /// Initial list / resync of already-reconciled objects: drained into
    /// high at `low_per_minute`.
    Low,
    /// Changed and not yet reconciled at its generation: handed out first.
    #[default]
    High,
}

/// Stands for "never" where a time is needed (what tokio uses too).
const FAR_FUTURE: Duration = Duration::from_secs(86400 * 365 * 30);

/// Queue tuning. `Default` gives the documented values.
#[derive(Clone, Debug, PartialEq)]
pub struct QueueConfig {
    /// First error back-off (5 ms); doubles per failure.
    pub(crate) base_backoff: Duration,
    /// Cap of the per-key error back-off (1000 s).
    pub(crate) max_backoff: Duration,
    /// Overall token bucket for `add_rate_limited`, tokens per second (10).
    /// `<= 0` or non-finite disables the bucket.
    pub(crate) rate_per_sec: f64,
    /// Size of that bucket (100).
    pub(crate) burst: u32,
    /// Rate at which low items are drained into the high lane (300/min).
    /// `0` means unlimited.
    pub(crate) low_per_minute: u32,
    /// Burst of the low-drain bucket (1).
    pub(crate) low_burst: u32,
    /// Idle workers take low items beyond `low_per_minute`: a `next()` that
    /// finds no high item ready hands out the oldest low item while fewer
    /// than this many keys are processing. `0` (the default) never does, so
    /// `low_per_minute` is also a cap. Controllers set it to their
    /// concurrency − 1 (at least 1): one worker stays free for high work.
    pub(crate) idle_low: usize,
    /// Fixed delay of `add_soon` (100 ms), plus jitter up to half of it.
    pub(crate) retry_soon: Duration,
}

impl Default for QueueConfig {
    fn default() -> Self {
        QueueConfig {
            base_backoff: Duration::from_millis(5),
            max_backoff: Duration::from_secs(1000),
            rate_per_sec: 10.0,
            burst: 100,
            low_per_minute: 300,
            low_burst: 1,
            idle_low: 0,
            retry_soon: Duration::from_millis(100),
        }
    }
}

/// A key handed out by [`WorkQueue::next`]. Call [`WorkQueue::done`] with
/// its key when processing has finished.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Item<K> {
    pub(crate) key: K,
    /// The priority the key was queued with (kept by requeues).
    pub(crate) priority: Priority,
    /// How long the key was ready (in the high or low lane, or dirty behind
    /// its own processing) before being handed out; time spent scheduled is
    /// not counted.
    pub(crate) queued_for: Duration,
}

/// Number of keys in each place (see the module docs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Depth {
    /// Ready in the high lane (includes low items already drained into it).
    pub(crate) high: usize,
    /// Ready in the low lane, waiting to be drained.
    pub(crate) low: usize,
    /// Waiting for their time.
    pub(crate) scheduled: usize,
    /// Handed out and not done (a processing key re-added is counted here
    /// only).
    pub(crate) processing: usize,
}

/// A cheap, cloneable handle to one queue (`Arc` inside).
pub struct WorkQueue<K> {
    inner: Arc<Inner<K>>,
}

impl<K> Clone for WorkQueue<K> {
    fn clone(&self) -> Self {
        WorkQueue {
            inner: self.inner.clone(),
        }
    }
}

impl<K> Debug for WorkQueue<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkQueue")
            .field("name", &self.inner.name)
            .finish_non_exhaustive()
    }
}

struct Inner<K> {
    name: String,
    config: QueueConfig,
    state: Mutex<State<K>>,
    notify: Notify,
    metrics: QueueHandles,
    #[cfg(test)]
    wakeups: std::sync::atomic::AtomicUsize,
}

impl<K: Tenant + Clone + Eq + Hash + Debug + Send + Sync + 'static> WorkQueue<K> {
    /// A new queue. `name` labels its metrics (use one name per queue);
    /// with `metrics == None` nothing is exported.
    pub(crate) fn new(name: &str, config: QueueConfig, metrics: Option<&QueueMetrics>) -> Self {
        let now = Instant::now();
        let state = State {
            keys: HashMap::new(),
            high: Default::default(),
            low: VecDeque::new(),
            scheduled: BinaryHeap::new(),
            processing: HashMap::new(),
            n_high: 0,
            n_low: 0,
            n_scheduled: 0,
            seq: 0,
            bucket: TokenBucket::new(config.rate_per_sec, config.burst, now),
            low_bucket: TokenBucket::new(
                f64::from(config.low_per_minute) / 60.0,
                config.low_burst,
                now,
            ),
            shutdown: false,
        };
        let handles = match metrics {
            Some(m) => m.handles(name),
            None => QueueHandles::detached(),
        };
        let inner = Arc::new(Inner {
            name: name.to_string(),
            config,
            state: Mutex::new(state),
            notify: Notify::new(),
            metrics: handles,
            #[cfg(test)]
            wakeups: Default::default(),
        });
        if let Some(m) = metrics {
            let weak: Weak<dyn Refresh> = Arc::downgrade(&inner) as Weak<dyn Refresh>;
            m.queues
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(weak);
        }
        inner.sync_depth(&lock(&inner.state));
        WorkQueue { inner }
    }

    /// Queues `key` as ready now with `priority` (merging with any queued
    /// state: higher priority, earlier time).
    pub(crate) fn add(&self, key: K, priority: Priority) {
        let now = Instant::now();
        self.inner.enqueue(key, Some(priority), now, now);
    }

    /// Queues `key` to become ready after `delay` (requeue-after), keeping
    /// its priority (`High` if unknown). A key already ready stays ready.
    /// The delay comes from guests (any `u64` of milliseconds): one too far
    /// for the clock means "not in this process's lifetime", never a panic.
    pub(crate) fn add_after(&self, key: K, delay: Duration) {
        let now = Instant::now();
        let at = now.checked_add(delay).unwrap_or_else(|| now + FAR_FUTURE);
        self.inner.enqueue(key, None, now, at);
    }

    /// Error back-off: delay = max(per-key `base * 2^failures` capped at
    /// `max_backoff`, overall token-bucket delay); counts a retry; keeps the
    /// key's priority. Returns the delay it scheduled (zero after shutdown).
    pub(crate) fn add_rate_limited(&self, key: K) -> Duration {
        let now = Instant::now();
        let delay = {
            let mut st = lock(&self.inner.state);
            if st.shutdown {
                return Duration::ZERO;
            }
            let failures = st.keys.get(&key).map_or(0, |k| k.failures);
            let c = &self.inner.config;
            let exp = c.base_backoff.as_secs_f64() * 2f64.powi(failures.min(1023) as i32);
            let per_key = secs(exp).min(c.max_backoff);
            let bucket = st.bucket.reserve(now);
            // Record the failure (creates the key's state if needed).
            let priority = st.current_priority(&key);
            st.keys
                .entry(key.clone())
                .or_insert(KeyState {
                    priority,
                    queued: None,
                    failures: 0,
                })
                .failures = failures.saturating_add(1);
            per_key.max(bucket)
        };
        self.inner.metrics.retries.inc();
        self.inner.enqueue(key, None, now, now + delay);
        delay
    }

    /// "Retry soon" (409 Conflict, 429 Too Many Requests): a fixed
    /// `retry_soon` delay plus jitter in `[0, retry_soon/2]`; not
    /// exponential, not bucket-limited, does not grow `retries()`; keeps the
    /// key's priority. Counts in `workqueue_retries_total`.
    pub(crate) fn add_soon(&self, key: K) {
        let now = Instant::now();
        let base = self.inner.config.retry_soon;
        let half = (base / 2).as_nanos().min(u128::from(u64::MAX)) as u64;
        let jitter = if half == 0 {
            0
        } else {
            rand::random_range(0..=half)
        };
        if !lock(&self.inner.state).shutdown {
            self.inner.metrics.retries.inc();
        }
        self.inner
            .enqueue(key, None, now, now + base + Duration::from_nanos(jitter));
    }

    /// Resets the back-off of `key` (its failure count).
    pub(crate) fn forget(&self, key: &K) {
        let mut st = lock(&self.inner.state);
        if let Some(ks) = st.keys.get_mut(key) {
            ks.failures = 0;
        }
        st.gc(key);
    }

    #[cfg(test)]
    /// Failures of `key` since the last `forget`.
    pub(crate) fn retries(&self, key: &K) -> u32 {
        lock(&self.inner.state)
            .keys
            .get(key)
            .map_or(0, |k| k.failures)
    }

    /// Waits for a ready item and marks it processing. Returns `None` once
    /// the queue is shut down (at once; queued items are not drained).
    ///
    /// Cancel-safe: an item is only taken in the same poll that returns it.
    pub(crate) async fn next(&self) -> Option<Item<K>> {
        loop {
            #[cfg(test)]
            self.inner
                .wakeups
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let notified = self.inner.notify.notified();
            tokio::pin!(notified);
            // Register before looking, so an add between the look and the
            // wait is not lost.
            notified.as_mut().enable();
            let deadline = {
                let mut st = lock(&self.inner.state);
                if st.shutdown {
                    return None;
                }
                let now = Instant::now();
                if let Some(item) = self.inner.take(&mut st, now) {
                    return Some(item);
                }
                st.next_deadline(now)
            };
            match deadline {
                Some(at) => {
                    tokio::select! {
                        _ = &mut notified => {}
                        _ = tokio::time::sleep_until(at) => {}
                    }
                }
                None => notified.await,
            }
        }
    }

    #[cfg(test)]
    /// Like [`next`](Self::next) but does not wait: `None` if nothing is
    /// ready now or the queue is shut down.
    pub(crate) fn try_next(&self) -> Option<Item<K>> {
        let mut st = lock(&self.inner.state);
        if st.shutdown {
            return None;
        }
        self.inner.take(&mut st, Instant::now())
    }

    /// Processing of `key` has finished. If it was re-added meanwhile it is
    /// now queued (once). Unknown keys are ignored.
    pub(crate) fn done(&self, key: &K) {
        let now = Instant::now();
        let mut st = lock(&self.inner.state);
        let Some(started) = st.processing.remove(key) else {
            return;
        };
        self.inner
            .metrics
            .work_duration
            .observe(now.saturating_duration_since(started).as_secs_f64());
        let placed = match st.keys.get(key).and_then(|k| k.queued) {
            Some(q) if q.lane == Lane::Dirty && !st.shutdown => {
                st.place(key.clone(), q.priority, q.ready_at, now);
                true
            }
            _ => false,
        };
        st.gc(key);
        self.inner.sync_depth(&st);
        self.inner.sync_processing(&st, now);
        // A waiter held back by `idle_low` may take a low item now.
        let idle_slot = st.n_low > 0 && st.processing.len() < self.inner.config.idle_low;
        drop(st);
        if placed || idle_slot {
            self.inner.notify.notify_waiters();
        }
    }

    /// Shuts the queue down: every waiting and future `next()` returns
    /// `None`; further adds are ignored.
    pub fn shutdown(&self) {
        lock(&self.inner.state).shutdown = true;
        self.inner.notify.notify_waiters();
    }

    #[cfg(test)]
    /// Whether [`shutdown`](Self::shutdown) was called.
    pub(crate) fn is_shutdown(&self) -> bool {
        lock(&self.inner.state).shutdown
    }

    /// Current counts (due scheduled items and drainable low items are
    /// moved first, so the figures are up to date).
    pub(crate) fn depth(&self) -> Depth {
        let now = Instant::now();
        let mut st = lock(&self.inner.state);
        if st.pump(now) {
            self.inner.notify.notify_waiters();
        }
        self.inner.sync_depth(&st);
        st.depth()
    }

    /// How long the oldest ready item of each lane has waited: (high, low).
    pub(crate) fn oldest(&self) -> (Option<Duration>, Option<Duration>) {
        let now = Instant::now();
        let st = lock(&self.inner.state);
        (st.oldest_ready(true, now), st.oldest_ready(false, now))
    }
}
