//! Where each key is: its [`KeyState`], the high and low lanes, the
//! schedule, and the processing set; placing and merging adds, draining the
//! low lane into the high one, and handing items out.

use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::fmt::Debug;
use std::hash::Hash;
use std::sync::{Mutex, MutexGuard};

use tokio::time::Instant;

use super::fair::{FairLane, Tenant};
use super::{Depth, Inner, Item, Priority, TokenBucket};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Lane {
    High,
    Low,
    Scheduled,
    /// Re-added while processing; placed at `done`.
    Dirty,
}

#[derive(Clone, Copy, Debug)]
pub(super) struct Queued {
    pub(super) priority: Priority,
    pub(super) ready_at: Instant,
    pub(super) lane: Lane,
    /// Identifies the live entry in `high`/`low`/`scheduled`; entries there
    /// with another seq are stale and skipped (lazy deletion).
    pub(super) seq: u64,
}

pub(super) struct KeyState {
    /// Priority the key was last queued or handed out with.
    pub(super) priority: Priority,
    pub(super) queued: Option<Queued>,
    /// Failures since the last `forget`.
    pub(super) failures: u32,
}

pub(super) struct Sched<K> {
    pub(super) at: Instant,
    pub(super) seq: u64,
    pub(super) key: K,
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

pub(super) struct State<K> {
    pub(super) keys: HashMap<K, KeyState>,
    pub(super) high: FairLane<K>,
    pub(super) low: VecDeque<(K, u64)>,
    pub(super) scheduled: BinaryHeap<Sched<K>>,
    /// Processing keys and when they were handed out.
    pub(super) processing: HashMap<K, Instant>,
    pub(super) n_high: usize,
    pub(super) n_low: usize,
    pub(super) n_scheduled: usize,
    pub(super) seq: u64,
    pub(super) bucket: TokenBucket,
    pub(super) low_bucket: TokenBucket,
    pub(super) shutdown: bool,
}

pub(super) fn lock<K>(m: &Mutex<State<K>>) -> MutexGuard<'_, State<K>> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl<K: Tenant + Clone + Eq + Hash> State<K> {
    pub(super) fn depth(&self) -> Depth {
        Depth {
            high: self.n_high,
            low: self.n_low,
            scheduled: self.n_scheduled,
            processing: self.processing.len(),
        }
    }

    /// How long the oldest live entry of the high (or low) lane has been
    /// ready: what a status page shows as a lane's age.
    pub(super) fn oldest_ready(&self, high: bool, now: Instant) -> Option<std::time::Duration> {
        let (lane, queues): (Lane, Vec<&VecDeque<(K, u64)>>) = if high {
            (Lane::High, self.high.queues().collect())
        } else {
            (Lane::Low, vec![&self.low])
        };
        // Each FIFO's first live entry is its oldest; the lane's is the oldest of those.
        queues
            .into_iter()
            .filter_map(|entries| {
                entries
                    .iter()
                    .find(|(k, seq)| self.is_live(k, *seq, lane))
                    .and_then(|(k, _)| self.keys.get(k)?.queued)
            })
            .map(|q| now.saturating_duration_since(q.ready_at))
            .max()
    }

    fn next_seq(&mut self) -> u64 {
        self.seq += 1;
        self.seq
    }

    pub(super) fn current_priority(&self, key: &K) -> Priority {
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
    pub(super) fn place(&mut self, key: K, priority: Priority, ready_at: Instant, now: Instant) {
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
                    self.high.push_back(key.clone(), seq);
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
    pub(super) fn pump(&mut self, now: Instant) -> bool {
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
            self.high.push_back(key.clone(), seq);
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
    pub(super) fn next_deadline(&mut self, now: Instant) -> Option<Instant> {
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
            self.high.retain(|k, s| matches!(keys.get(k), Some(KeyState { queued: Some(q), .. }) if q.seq == s && q.lane == Lane::High));
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
    pub(super) fn gc(&mut self, key: &K) {
        if let Some(ks) = self.keys.get(key)
            && ks.queued.is_none()
            && ks.failures == 0
            && !self.processing.contains_key(key)
        {
            self.keys.remove(key);
        }
    }
}

impl<K: Tenant + Clone + Eq + Hash + Debug + Send + Sync + 'static> Inner<K> {
    /// The single merge point of every add. `priority == None` keeps the
    /// key's current priority.
    pub(super) fn enqueue(
        &self,
        key: K,
        priority: Option<Priority>,
        now: Instant,
        ready_at: Instant,
    ) {
        let mut st = lock(&self.state);
        if st.shutdown {
            return;
        }
        let priority = priority.unwrap_or_else(|| st.current_priority(&key));
        let existing = st.keys.get(&key).and_then(|k| k.queued);
        match existing {
            None => {
                self.metrics.added(priority);
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
    pub(super) fn take(&self, st: &mut State<K>, now: Instant) -> Option<Item<K>> {
        let moved = st.pump(now);
        let item = loop {
            let (key, seq, lane) = match st.high.pop_front() {
                Some((k, s)) => (k, s, Lane::High),
                None if st.n_low > 0 && st.processing.len() < self.config.idle_low => {
                    let (k, s) = st.low.pop_front().expect("n_low > 0 implies an entry");
                    (k, s, Lane::Low)
                }
                None => return None,
            };
            if !st.is_live(&key, seq, lane) {
                continue;
            }
            let ks = st.keys.get_mut(&key).expect("live");
            let q = ks.queued.take().expect("live");
            ks.priority = q.priority;
            st.release(lane);
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

    pub(super) fn sync_depth(&self, st: &State<K>) {
        self.metrics.depth_high.set(st.n_high as i64);
        self.metrics.depth_low.set(st.n_low as i64);
        self.metrics.depth_scheduled.set(st.n_scheduled as i64);
    }

    pub(super) fn sync_processing(&self, st: &State<K>, now: Instant) {
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
