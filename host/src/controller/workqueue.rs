//! The controller workqueue: a deduplicating, priority-aware, rate-limited
//! queue of object keys, written for wasmlet (no crate provides the queue).
//!
//! # Model
//!
//! Every key the queue knows is in at most one of these places:
//!
//! * **high** — ready, handed out first, FIFO;
//! * **low** — ready, but only *drained into high* at a fixed rate
//!   ([`QueueConfig::low_per_minute`], token bucket of [`QueueConfig::low_burst`]);
//!   a drained item joins the tail of the high lane (it keeps `Priority::Low`
//!   as its priority, which is what a requeue of it keeps);
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
//! feeds the high lane at `low_per_minute`, whatever the size of its backlog.
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
//! backlog therefore never delays another's. Nothing inside the queue is
//! needed for it.
//!
//! # Time
//!
//! All times are `tokio::time::Instant`, so tests can pause and advance the
//! clock. A waiting `next()` sleeps on a tokio timer until the earliest
//! scheduled item or low-lane token, or until an add/shutdown notifies it —
//! it never polls.

use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::fmt::Debug;
use std::hash::Hash;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use tokio::sync::Notify;
use tokio::time::Instant;

#[cfg(test)]
mod tests;

/// Priority of a queued key (see the module docs). Ordered `Low < High`,
/// so `a.max(b)` is the higher one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub enum Priority {
    /// Initial list / resync of already-reconciled objects: drained into
    /// high at `low_per_minute`.
    Low,
    /// Changed and not yet reconciled at its generation: handed out first.
    #[default]
    High,
}

impl Priority {
    /// The label value used in `workqueue_depth{priority}`.
    pub fn as_str(self) -> &'static str {
        match self {
            Priority::High => "high",
            Priority::Low => "low",
        }
    }
}

/// Queue tuning. `Default` gives the documented values.
#[derive(Clone, Debug, PartialEq)]
pub struct QueueConfig {
    /// First error back-off (5 ms); doubles per failure.
    pub base_backoff: Duration,
    /// Cap of the per-key error back-off (1000 s).
    pub max_backoff: Duration,
    /// Overall token bucket for `add_rate_limited`, tokens per second (10).
    /// `<= 0` or non-finite disables the bucket.
    pub rate_per_sec: f64,
    /// Size of that bucket (100).
    pub burst: u32,
    /// Rate at which low items are drained into the high lane (300/min).
    /// `0` means unlimited.
    pub low_per_minute: u32,
    /// Burst of the low-drain bucket (1).
    pub low_burst: u32,
    /// Fixed delay of `add_soon` (100 ms), plus jitter up to half of it.
    pub retry_soon: Duration,
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
            retry_soon: Duration::from_millis(100),
        }
    }
}

/// A key handed out by [`WorkQueue::next`]. Call [`WorkQueue::done`] with
/// its key when processing has finished.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Item<K> {
    pub key: K,
    /// The priority the key was queued with (kept by requeues).
    pub priority: Priority,
    /// How long the key was ready (in the high or low lane, or dirty behind
    /// its own processing) before being handed out; time spent scheduled is
    /// not counted.
    pub queued_for: Duration,
}

/// Number of keys in each place (see the module docs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Depth {
    /// Ready in the high lane (includes low items already drained into it).
    pub high: usize,
    /// Ready in the low lane, waiting to be drained.
    pub low: usize,
    /// Waiting for their time.
    pub scheduled: usize,
    /// Handed out and not done (a processing key re-added is counted here
    /// only).
    pub processing: usize,
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

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Lane {
    High,
    Low,
    Scheduled,
    /// Re-added while processing; placed at `done`.
    Dirty,
}

#[derive(Clone, Copy, Debug)]
struct Queued {
    priority: Priority,
    ready_at: Instant,
    lane: Lane,
    /// Identifies the live entry in `high`/`low`/`scheduled`; entries there
    /// with another seq are stale and skipped (lazy deletion).
    seq: u64,
}

struct KeyState {
    /// Priority the key was last queued or handed out with.
    priority: Priority,
    queued: Option<Queued>,
    /// Failures since the last `forget`.
    failures: u32,
}

struct Sched<K> {
    at: Instant,
    seq: u64,
    key: K,
}
impl<K> PartialEq for Sched<K> {
    fn eq(&self, o: &Self) -> bool {
        self.at == o.at && self.seq == o.seq
    }
}
impl<K> Eq for Sched<K> {}
impl<K> PartialOrd for Sched<K> {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl<K> Ord for Sched<K> {
    // Reversed: BinaryHeap is a max-heap, we want the earliest first.
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        o.at.cmp(&self.at).then(o.seq.cmp(&self.seq))
    }
}

struct State<K> {
    keys: HashMap<K, KeyState>,
    high: VecDeque<(K, u64)>,
    low: VecDeque<(K, u64)>,
    scheduled: BinaryHeap<Sched<K>>,
    /// Processing keys and when they were handed out.
    processing: HashMap<K, Instant>,
    n_high: usize,
    n_low: usize,
    n_scheduled: usize,
    seq: u64,
    bucket: TokenBucket,
    low_bucket: TokenBucket,
    shutdown: bool,
}

/// A lazily refilled token bucket (`golang.org/x/time/rate` semantics for
/// `reserve`: the balance may go negative, the caller waits it off).
struct TokenBucket {
    /// Tokens per second; `None` = unlimited.
    rate: Option<f64>,
    burst: f64,
    tokens: f64,
    last: Instant,
}

const EPS: f64 = 1e-9;

impl TokenBucket {
    fn new(rate: f64, burst: u32, now: Instant) -> Self {
        let rate = (rate.is_finite() && rate > 0.0).then_some(rate);
        let burst = f64::from(burst.max(1));
        TokenBucket {
            rate,
            burst,
            tokens: burst,
            last: now,
        }
    }

    fn refill(&mut self, now: Instant) {
        if let Some(rate) = self.rate {
            let dt = now.saturating_duration_since(self.last).as_secs_f64();
            self.tokens = (self.tokens + dt * rate).min(self.burst);
        }
        if now > self.last {
            self.last = now;
        }
    }

    /// Takes a token, returning how long to wait for it.
    fn reserve(&mut self, now: Instant) -> Duration {
        let Some(rate) = self.rate else {
            return Duration::ZERO;
        };
        self.refill(now);
        self.tokens -= 1.0;
        if self.tokens >= -EPS {
            Duration::ZERO
        } else {
            secs(-self.tokens / rate)
        }
    }

    /// Takes a token if one is available now.
    fn try_take(&mut self, now: Instant) -> bool {
        if self.rate.is_none() {
            return true;
        }
        self.refill(now);
        if self.tokens >= 1.0 - EPS {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }

    /// When the next whole token is available (after `refill(now)`).
    fn next_token_at(&self, now: Instant) -> Instant {
        match self.rate {
            None => now,
            Some(rate) => now + secs(((1.0 - self.tokens) / rate).max(0.0)),
        }
    }
}

/// Seconds to a Duration, saturating (and never panicking) on huge values.
fn secs(s: f64) -> Duration {
    if s.is_nan() || s <= 0.0 {
        Duration::ZERO
    } else if s >= 1e12 {
        Duration::from_secs(1_000_000_000_000)
    } else {
        Duration::from_secs_f64(s)
    }
}

fn lock<K>(m: &Mutex<State<K>>) -> MutexGuard<'_, State<K>> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl<K: Clone + Eq + Hash + Debug + Send + Sync + 'static> WorkQueue<K> {
    /// A new queue. `name` labels its metrics (use one name per queue);
    /// with `metrics == None` nothing is exported.
    pub fn new(name: &str, config: QueueConfig, metrics: Option<&QueueMetrics>) -> Self {
        let now = Instant::now();
        let state = State {
            keys: HashMap::new(),
            high: VecDeque::new(),
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

    /// The queue's name (its metrics label).
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The configuration the queue was built with.
    pub fn config(&self) -> &QueueConfig {
        &self.inner.config
    }

    /// Queues `key` as ready now with `priority` (merging with any queued
    /// state: higher priority, earlier time).
    pub fn add(&self, key: K, priority: Priority) {
        let now = Instant::now();
        self.inner.enqueue(key, Some(priority), now, now);
    }

    /// Queues `key` to become ready after `delay` (requeue-after), keeping
    /// its priority (`High` if unknown). A key already ready stays ready.
    pub fn add_after(&self, key: K, delay: Duration) {
        let now = Instant::now();
        self.inner.enqueue(key, None, now, now + delay);
    }

    /// Error back-off: delay = max(per-key `base * 2^failures` capped at
    /// `max_backoff`, overall token-bucket delay); counts a retry; keeps the
    /// key's priority.
    pub fn add_rate_limited(&self, key: K) {
        let now = Instant::now();
        let delay = {
            let mut st = lock(&self.inner.state);
            if st.shutdown {
                return;
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
    }

    /// "Retry soon" (409 Conflict, 429 Too Many Requests): a fixed
    /// `retry_soon` delay plus jitter in `[0, retry_soon/2]`; not
    /// exponential, not bucket-limited, does not grow `retries()`; keeps the
    /// key's priority. Counts in `workqueue_retries_total`.
    pub fn add_soon(&self, key: K) {
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
    pub fn forget(&self, key: &K) {
        let mut st = lock(&self.inner.state);
        if let Some(ks) = st.keys.get_mut(key) {
            ks.failures = 0;
        }
        st.gc(key);
    }

    /// Failures of `key` since the last `forget`.
    pub fn retries(&self, key: &K) -> u32 {
        lock(&self.inner.state)
            .keys
            .get(key)
            .map_or(0, |k| k.failures)
    }

    /// Waits for a ready item and marks it processing. Returns `None` once
    /// the queue is shut down (at once; queued items are not drained).
    ///
    /// Cancel-safe: an item is only taken in the same poll that returns it.
    pub async fn next(&self) -> Option<Item<K>> {
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

    /// Like [`next`](Self::next) but does not wait: `None` if nothing is
    /// ready now or the queue is shut down.
    pub fn try_next(&self) -> Option<Item<K>> {
        let mut st = lock(&self.inner.state);
        if st.shutdown {
            return None;
        }
        self.inner.take(&mut st, Instant::now())
    }

    /// Processing of `key` has finished. If it was re-added meanwhile it is
    /// now queued (once). Unknown keys are ignored.
    pub fn done(&self, key: &K) {
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
        drop(st);
        if placed {
            self.inner.notify.notify_waiters();
        }
    }

    /// Shuts the queue down: every waiting and future `next()` returns
    /// `None`; further adds are ignored.
    pub fn shutdown(&self) {
        lock(&self.inner.state).shutdown = true;
        self.inner.notify.notify_waiters();
    }

    /// Whether [`shutdown`](Self::shutdown) was called.
    pub fn is_shutdown(&self) -> bool {
        lock(&self.inner.state).shutdown
    }

    /// Current counts (due scheduled items and drainable low items are
    /// moved first, so the figures are up to date).
    pub fn depth(&self) -> Depth {
        let now = Instant::now();
        let mut st = lock(&self.inner.state);
        if st.pump(now) {
            self.inner.notify.notify_waiters();
        }
        self.inner.sync_depth(&st);
        st.depth()
    }
}

impl<K: Clone + Eq + Hash> State<K> {
    fn depth(&self) -> Depth {
        Depth {
            high: self.n_high,
            low: self.n_low,
            scheduled: self.n_scheduled,
            processing: self.processing.len(),
        }
    }

    fn next_seq(&mut self) -> u64 {
        self.seq += 1;
        self.seq
    }

    fn current_priority(&self, key: &K) -> Priority {
        match self.keys.get(key) {
            Some(KeyState {
                queued: Some(q), ..
            }) => q.priority,
            Some(k) => k.priority,
            None => Priority::High,
        }
    }

    fn is_live(&self, key: &K, seq: u64, lane: Lane) -> bool {
        matches!(self.keys.get(key), Some(KeyState { queued: Some(q), .. }) if q.seq == seq && q.lane == lane)
    }

    /// Puts a key (whose `queued` is absent or about to be replaced, and
    /// whose old lane count has been released) where its state says.
    fn place(&mut self, key: K, priority: Priority, ready_at: Instant, now: Instant) {
        let seq = self.next_seq();
        let lane = if self.processing.contains_key(&key) {
            Lane::Dirty
        } else if ready_at > now {
            self.n_scheduled += 1;
            self.scheduled.push(Sched {
                at: ready_at,
                seq,
                key: key.clone(),
            });
            Lane::Scheduled
        } else {
            match priority {
                Priority::High => {
                    self.n_high += 1;
                    self.high.push_back((key.clone(), seq));
                    Lane::High
                }
                Priority::Low => {
                    self.n_low += 1;
                    self.low.push_back((key.clone(), seq));
                    Lane::Low
                }
            }
        };
        let ks = self.keys.entry(key).or_insert(KeyState {
            priority,
            queued: None,
            failures: 0,
        });
        ks.priority = priority;
        ks.queued = Some(Queued {
            priority,
            ready_at,
            lane,
            seq,
        });
    }

    /// Releases the count of the lane a queued key leaves.
    fn release(&mut self, lane: Lane) {
        match lane {
            Lane::High => self.n_high -= 1,
            Lane::Low => self.n_low -= 1,
            Lane::Scheduled => self.n_scheduled -= 1,
            Lane::Dirty => {}
        }
    }

    /// Moves due scheduled items to their lanes and drains low into high as
    /// the low bucket allows. Returns whether anything moved.
    fn pump(&mut self, now: Instant) -> bool {
        let mut moved = false;
        while let Some(top) = self.scheduled.peek() {
            let live = self.is_live(&top.key, top.seq, Lane::Scheduled);
            if live && top.at > now {
                break;
            }
            let Sched { key, seq, at } = self.scheduled.pop().expect("peeked");
            if !live {
                continue;
            }
            let _ = seq;
            let priority = self.keys[&key].queued.expect("live").priority;
            self.release(Lane::Scheduled);
            self.place(key, priority, at, now);
            moved = true;
        }
        while self.n_low > 0 {
            // Skip stale heads without spending a token.
            while let Some((k, s)) = self.low.front() {
                if self.is_live(k, *s, Lane::Low) {
                    break;
                }
                self.low.pop_front();
            }
            if !self.low_bucket.try_take(now) {
                break;
            }
            let (key, _) = self
                .low
                .pop_front()
                .expect("n_low > 0 implies a live entry");
            let q = self.keys[&key].queued.expect("live");
            self.release(Lane::Low);
            let seq = self.next_seq();
            self.n_high += 1;
            self.high.push_back((key.clone(), seq));
            self.keys.get_mut(&key).expect("live").queued = Some(Queued {
                lane: Lane::High,
                seq,
                ..q
            });
            moved = true;
        }
        self.compact();
        moved
    }

    /// When a waiter must look again even if not notified.
    fn next_deadline(&mut self, now: Instant) -> Option<Instant> {
        let sched = self.scheduled.peek().map(|s| s.at);
        let low = (self.n_low > 0).then(|| {
            self.low_bucket.refill(now);
            self.low_bucket.next_token_at(now)
        });
        match (sched, low) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Drops stale lazy-deletion entries once they dominate.
    fn compact(&mut self) {
        const SLACK: usize = 1024;
        if self.high.len() > 2 * self.n_high + SLACK {
            let keys = &self.keys;
            self.high.retain(|(k, s)| matches!(keys.get(k), Some(KeyState { queued: Some(q), .. }) if q.seq == *s && q.lane == Lane::High));
        }
        if self.low.len() > 2 * self.n_low + SLACK {
            let keys = &self.keys;
            self.low.retain(|(k, s)| matches!(keys.get(k), Some(KeyState { queued: Some(q), .. }) if q.seq == *s && q.lane == Lane::Low));
        }
        if self.scheduled.len() > 2 * self.n_scheduled + SLACK {
            let keys = &self.keys;
            self.scheduled.retain(|e| matches!(keys.get(&e.key), Some(KeyState { queued: Some(q), .. }) if q.seq == e.seq && q.lane == Lane::Scheduled));
        }
    }

    /// Forgets a key the queue no longer needs to track.
    fn gc(&mut self, key: &K) {
        if let Some(ks) = self.keys.get(key)
            && ks.queued.is_none()
            && ks.failures == 0
            && !self.processing.contains_key(key)
        {
            self.keys.remove(key);
        }
    }
}

impl<K: Clone + Eq + Hash + Debug + Send + Sync + 'static> Inner<K> {
    /// The single merge point of every add. `priority == None` keeps the
    /// key's current priority.
    fn enqueue(&self, key: K, priority: Option<Priority>, now: Instant, ready_at: Instant) {
        let mut st = lock(&self.state);
        if st.shutdown {
            return;
        }
        let priority = priority.unwrap_or_else(|| st.current_priority(&key));
        let existing = st.keys.get(&key).and_then(|k| k.queued);
        match existing {
            None => {
                self.metrics.adds.inc();
                st.place(key, priority, ready_at, now);
            }
            Some(q) => {
                let priority = q.priority.max(priority);
                let ready_at = q.ready_at.min(ready_at);
                if priority == q.priority && ready_at == q.ready_at {
                    return; // nothing changes
                }
                let ks = st.keys.get_mut(&key).expect("queued");
                ks.priority = priority;
                let mut set = |lane, seq| {
                    ks.queued = Some(Queued {
                        priority,
                        ready_at,
                        lane,
                        seq,
                    })
                };
                match q.lane {
                    // Fields only; position in the FIFO is kept.
                    Lane::Dirty | Lane::High => set(q.lane, q.seq),
                    Lane::Low if priority == Priority::Low => set(q.lane, q.seq),
                    // Low promoted to High, or scheduled that moved: re-place.
                    Lane::Low | Lane::Scheduled => {
                        if q.lane == Lane::Scheduled && ready_at == q.ready_at {
                            set(q.lane, q.seq); // priority change only
                        } else {
                            st.release(q.lane);
                            st.place(key, priority, ready_at, now);
                            st.compact();
                        }
                    }
                }
            }
        }
        self.sync_depth(&st);
        drop(st);
        self.notify.notify_waiters();
    }

    /// Pumps and pops the next ready high item, marking it processing.
    fn take(&self, st: &mut State<K>, now: Instant) -> Option<Item<K>> {
        let moved = st.pump(now);
        let item = loop {
            let (key, seq) = st.high.pop_front()?;
            if !st.is_live(&key, seq, Lane::High) {
                continue;
            }
            let ks = st.keys.get_mut(&key).expect("live");
            let q = ks.queued.take().expect("live");
            ks.priority = q.priority;
            st.n_high -= 1;
            st.processing.insert(key.clone(), now);
            break Item {
                key,
                priority: q.priority,
                queued_for: now.saturating_duration_since(q.ready_at),
            };
        };
        self.metrics
            .queue_duration
            .observe(item.queued_for.as_secs_f64());
        if moved && st.n_high > 0 {
            // Items this pump made ready may be for other waiters.
            self.notify.notify_waiters();
        }
        self.sync_depth(st);
        self.sync_processing(st, now);
        Some(item)
    }

    fn sync_depth(&self, st: &State<K>) {
        self.metrics.depth_high.set(st.n_high as i64);
        self.metrics.depth_low.set(st.n_low as i64);
        self.metrics.depth_scheduled.set(st.n_scheduled as i64);
    }

    fn sync_processing(&self, st: &State<K>, now: Instant) {
        let mut sum = 0.0;
        let mut longest = 0.0f64;
        for started in st.processing.values() {
            let s = now.saturating_duration_since(*started).as_secs_f64();
            sum += s;
            longest = longest.max(s);
        }
        self.metrics.unfinished.set(sum);
        self.metrics.longest.set(longest);
    }
}

// ---------------------------------------------------------------------------
// Metrics

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct NameLabels {
    name: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DepthLabels {
    name: String,
    priority: String,
}

type FloatGauge = Gauge<f64, std::sync::atomic::AtomicU64>;
type HistogramFamily = Family<NameLabels, Histogram, fn() -> Histogram>;

/// controller-runtime's latency buckets: 10 ns … 1000 s, ×10.
fn duration_histogram() -> Histogram {
    Histogram::new(exponential_buckets(10e-9, 10.0, 12))
}

/// Workqueue metrics, shared by every queue (label `name` = queue name).
/// Clone is cheap; the families are `Arc`'d.
///
/// Registered names (Prometheus text):
/// `workqueue_depth{name,priority}` (priority = `high`|`low`|`scheduled`),
/// `workqueue_adds_total{name}`, `workqueue_queue_duration_seconds{name}`,
/// `workqueue_work_duration_seconds{name}`,
/// `workqueue_unfinished_work_seconds{name}`,
/// `workqueue_longest_running_processor_seconds{name}`,
/// `workqueue_retries_total{name}`.
#[derive(Clone)]
pub struct QueueMetrics {
    depth: Family<DepthLabels, Gauge>,
    adds: Family<NameLabels, Counter>,
    queue_duration: HistogramFamily,
    work_duration: HistogramFamily,
    unfinished: Family<NameLabels, FloatGauge>,
    longest: Family<NameLabels, FloatGauge>,
    retries: Family<NameLabels, Counter>,
    queues: Arc<Mutex<Vec<Weak<dyn Refresh>>>>,
}

impl Debug for QueueMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueueMetrics").finish_non_exhaustive()
    }
}

impl QueueMetrics {
    /// Creates the families and registers them in `registry`.
    pub fn new(registry: &mut Registry) -> QueueMetrics {
        let m = QueueMetrics {
            depth: Family::default(),
            adds: Family::default(),
            queue_duration: Family::new_with_constructor(duration_histogram),
            work_duration: Family::new_with_constructor(duration_histogram),
            unfinished: Family::default(),
            longest: Family::default(),
            retries: Family::default(),
            queues: Arc::new(Mutex::new(Vec::new())),
        };
        registry.register(
            "workqueue_depth",
            "Current depth of workqueue",
            m.depth.clone(),
        );
        // Counters get their `_total` suffix from the encoder.
        registry.register(
            "workqueue_adds",
            "Total number of adds handled by workqueue",
            m.adds.clone(),
        );
        registry.register(
            "workqueue_queue_duration_seconds",
            "How long in seconds an item stays in workqueue before being requested",
            m.queue_duration.clone(),
        );
        registry.register(
            "workqueue_work_duration_seconds",
            "How long in seconds processing an item from workqueue takes",
            m.work_duration.clone(),
        );
        registry.register(
            "workqueue_unfinished_work_seconds",
            "How many seconds of work has been done that is in progress and hasn't been observed by work_duration. Large values indicate stuck threads. One can deduce the number of stuck threads by observing the rate at which this increases",
            m.unfinished.clone(),
        );
        registry.register(
            "workqueue_longest_running_processor_seconds",
            "How many seconds has the longest running processor for workqueue been running",
            m.longest.clone(),
        );
        registry.register(
            "workqueue_retries",
            "Total number of retries handled by workqueue",
            m.retries.clone(),
        );
        m
    }

    /// Brings the time-dependent gauges (depth after due items moved,
    /// unfinished work, longest running processor) of every live queue up
    /// to date. Cheap: call it before encoding `/metrics`.
    pub fn refresh_gauges(&self) {
        let mut queues = self.queues.lock().unwrap_or_else(|e| e.into_inner());
        queues.retain(|q| match q.upgrade() {
            Some(q) => {
                q.refresh();
                true
            }
            None => false,
        });
    }

    fn handles(&self, name: &str) -> QueueHandles {
        let n = NameLabels {
            name: name.to_string(),
        };
        let d = |p: &str| {
            self.depth.get_or_create_owned(&DepthLabels {
                name: name.to_string(),
                priority: p.to_string(),
            })
        };
        QueueHandles {
            depth_high: d("high"),
            depth_low: d("low"),
            depth_scheduled: d("scheduled"),
            adds: self.adds.get_or_create_owned(&n),
            queue_duration: self.queue_duration.get_or_create_owned(&n),
            work_duration: self.work_duration.get_or_create_owned(&n),
            unfinished: self.unfinished.get_or_create_owned(&n),
            longest: self.longest.get_or_create_owned(&n),
            retries: self.retries.get_or_create_owned(&n),
        }
    }
}

/// One queue's metric handles (registered, or detached when the queue has
/// no metrics — updating those is harmless).
struct QueueHandles {
    depth_high: Gauge,
    depth_low: Gauge,
    depth_scheduled: Gauge,
    adds: Counter,
    queue_duration: Histogram,
    work_duration: Histogram,
    unfinished: FloatGauge,
    longest: FloatGauge,
    retries: Counter,
}

impl QueueHandles {
    fn detached() -> Self {
        QueueHandles {
            depth_high: Gauge::default(),
            depth_low: Gauge::default(),
            depth_scheduled: Gauge::default(),
            adds: Counter::default(),
            queue_duration: duration_histogram(),
            work_duration: duration_histogram(),
            unfinished: FloatGauge::default(),
            longest: FloatGauge::default(),
            retries: Counter::default(),
        }
    }
}

trait Refresh: Send + Sync {
    fn refresh(&self);
}

impl<K: Clone + Eq + Hash + Debug + Send + Sync + 'static> Refresh for Inner<K> {
    fn refresh(&self) {
        let now = Instant::now();
        let mut st = lock(&self.state);
        let moved = st.pump(now);
        self.sync_depth(&st);
        self.sync_processing(&st, now);
        drop(st);
        if moved {
            self.notify.notify_waiters();
        }
    }
}
