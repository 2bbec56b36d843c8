//! Interim workqueue with the agreed API (dedup, priorities, delays); the
//! full implementation replaces this file.

use std::collections::{HashMap, HashSet, VecDeque};
use std::hash::Hash;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Priority {
    Low,
    High,
}

#[derive(Debug, Clone)]
pub struct QueueConfig {
    pub base_backoff: Duration,
    pub max_backoff: Duration,
    pub rate_per_sec: f64,
    pub burst: u32,
    pub low_per_minute: u32,
}

impl Default for QueueConfig {
    fn default() -> Self {
        QueueConfig { base_backoff: Duration::from_millis(5), max_backoff: Duration::from_secs(1000), rate_per_sec: 10.0, burst: 100, low_per_minute: 300 }
    }
}

#[derive(Clone, Default)]
pub struct QueueMetrics;

impl QueueMetrics {
    pub fn new(_registry: &mut prometheus_client::registry::Registry) -> QueueMetrics {
        QueueMetrics
    }
    pub fn refresh_gauges(&self) {}
}

pub struct Item<K> {
    pub key: K,
    pub priority: Priority,
    pub queued_for: Duration,
}

#[derive(Debug, Clone, Copy, Default)]
pub struct Depth {
    pub high: usize,
    pub low: usize,
    pub scheduled: usize,
    pub processing: usize,
}

struct Inner<K> {
    high: VecDeque<K>,
    low: VecDeque<K>,
    queued: HashMap<K, (Priority, Instant)>,
    scheduled: HashMap<K, Instant>,
    processing: HashSet<K>,
    dirty: HashMap<K, Priority>,
    failures: HashMap<K, u32>,
    shutdown: bool,
}

pub struct WorkQueue<K> {
    inner: Arc<Mutex<Inner<K>>>,
    notify: Arc<Notify>,
    config: QueueConfig,
}

impl<K> Clone for WorkQueue<K> {
    fn clone(&self) -> Self {
        WorkQueue { inner: self.inner.clone(), notify: self.notify.clone(), config: self.config.clone() }
    }
}

impl<K: Clone + Eq + Hash + std::fmt::Debug + Send + Sync + 'static> WorkQueue<K> {
    pub fn new(_name: &str, config: QueueConfig, _metrics: Option<&QueueMetrics>) -> Self {
        WorkQueue {
            inner: Arc::new(Mutex::new(Inner {
                high: VecDeque::new(),
                low: VecDeque::new(),
                queued: HashMap::new(),
                scheduled: HashMap::new(),
                processing: HashSet::new(),
                dirty: HashMap::new(),
                failures: HashMap::new(),
                shutdown: false,
            })),
            notify: Arc::new(Notify::new()),
            config,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner<K>> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn add(&self, key: K, priority: Priority) {
        let mut i = self.lock();
        i.scheduled.remove(&key);
        if i.processing.contains(&key) {
            let p = i.dirty.get(&key).copied().unwrap_or(Priority::Low).max(priority);
            i.dirty.insert(key, p);
            return;
        }
        match i.queued.get(&key).copied() {
            Some((p, _)) if p >= priority => return,
            Some((_, t)) => {
                i.low.retain(|k| *k != key);
                i.queued.insert(key.clone(), (priority, t));
            }
            None => {
                i.queued.insert(key.clone(), (priority, Instant::now()));
            }
        }
        match priority {
            Priority::High => i.high.push_back(key),
            Priority::Low => i.low.push_back(key),
        }
        drop(i);
        self.notify.notify_one();
    }

    pub fn add_after(&self, key: K, delay: Duration) {
        {
            let mut i = self.lock();
            if i.queued.contains_key(&key) {
                return;
            }
            let at = Instant::now() + delay;
            let e = i.scheduled.entry(key.clone()).or_insert(at);
            if at < *e {
                *e = at;
            }
        }
        let me = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            let due = me.lock().scheduled.get(&key).is_some_and(|t| *t <= Instant::now());
            if due {
                me.add(key, Priority::High);
            }
        });
    }

    pub fn add_rate_limited(&self, key: K) {
        let n = {
            let mut i = self.lock();
            let n = i.failures.entry(key.clone()).or_insert(0);
            *n += 1;
            *n
        };
        let d = self.config.base_backoff.saturating_mul(1u32 << (n - 1).min(30)).min(self.config.max_backoff);
        self.add_after(key, d);
    }

    pub fn add_soon(&self, key: K) {
        self.add_after(key, Duration::from_millis(100));
    }

    pub fn forget(&self, key: &K) {
        self.lock().failures.remove(key);
    }

    pub fn retries(&self, key: &K) -> u32 {
        self.lock().failures.get(key).copied().unwrap_or(0)
    }

    pub async fn next(&self) -> Option<Item<K>> {
        loop {
            let notified = self.notify.notified();
            {
                let mut i = self.lock();
                if i.shutdown {
                    return None;
                }
                let k = i.high.pop_front().or_else(|| i.low.pop_front());
                if let Some(key) = k {
                    let (priority, since) = i.queued.remove(&key).unwrap_or((Priority::High, Instant::now()));
                    i.processing.insert(key.clone());
                    return Some(Item { key, priority, queued_for: since.elapsed() });
                }
            }
            notified.await;
        }
    }

    pub fn done(&self, key: &K) {
        let again = {
            let mut i = self.lock();
            i.processing.remove(key);
            i.dirty.remove(key)
        };
        if let Some(p) = again {
            self.add(key.clone(), p);
        }
    }

    pub fn shutdown(&self) {
        self.lock().shutdown = true;
        self.notify.notify_waiters();
    }

    pub fn depth(&self) -> Depth {
        let i = self.lock();
        Depth { high: i.high.len(), low: i.low.len(), scheduled: i.scheduled.len(), processing: i.processing.len() }
    }
}
