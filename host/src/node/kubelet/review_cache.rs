//! The kubelet API's cache of TokenReview and SubjectAccessReview answers:
//! bounded in entries (least recently used goes first) and expiring per
//! entry when read, so neither a flood of random tokens grows it nor does an
//! insert sweep it (it once kept every token for 2 minutes and scanned them
//! all on each insert: 3,400 -> 550 requests/s under random tokens).

use std::hash::Hash;
use std::time::{Duration, Instant};

use hashlink::LruCache;

/// Answers by key, each kept for the TTL its value asks for.
pub(crate) struct ReviewCache<K: Hash + Eq, V> {
    entries: LruCache<K, (V, Instant)>,
}

impl<K: Hash + Eq, V: Clone> ReviewCache<K, V> {
    /// At most `capacity` entries (at least one).
    pub(crate) fn new(capacity: usize) -> ReviewCache<K, V> {
        ReviewCache {
            entries: LruCache::new(capacity.max(1)),
        }
    }

    /// The answer stored for `key` if younger than `ttl(answer)` at `now`;
    /// an older one is dropped.
    pub(crate) fn get(&mut self, key: &K, now: Instant, ttl: impl Fn(&V) -> Duration) -> Option<V> {
        let (value, at) = self.entries.get(key)?;
        if now.saturating_duration_since(*at) < ttl(value) {
            return Some(value.clone());
        }
        self.entries.remove(key);
        None
    }

    /// Stores `value` as of `now`, evicting the least recently used entry when full.
    pub(crate) fn insert(&mut self, key: K, value: V, now: Instant) {
        self.entries.insert(key, (value, now));
    }

    /// Entries held now: what the kubelet gate's tests check the bound on.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cache_never_holds_more_than_its_capacity() {
        let mut c = ReviewCache::new(64);
        let now = Instant::now();
        c.insert(u64::MAX, "kept", now);
        for i in 0..100_000u64 {
            c.insert(i, "x", now);
            // Used all along: never the least recently used.
            if i % 32 == 0 {
                assert!(c.get(&u64::MAX, now, |_| Duration::from_secs(1)).is_some());
            }
        }
        assert_eq!(c.entries.len(), 64);
        assert_eq!(c.entries.capacity(), 64);
        assert_eq!(
            c.get(&u64::MAX, now, |_| Duration::from_secs(1)),
            Some("kept")
        );
        assert_eq!(c.get(&0, now, |_| Duration::from_secs(1)), None);
    }

    #[test]
    fn an_entry_expires_after_the_ttl_its_value_asks_for() {
        let mut c = ReviewCache::new(8);
        let t0 = Instant::now();
        c.insert("ok", true, t0);
        c.insert("denied", false, t0);
        let ttl = |v: &bool| Duration::from_secs(if *v { 300 } else { 30 });
        let t = t0 + Duration::from_secs(31);
        assert_eq!(c.get(&"ok", t, ttl), Some(true));
        assert_eq!(c.get(&"denied", t, ttl), None);
        assert_eq!(c.entries.len(), 1, "an expired entry is dropped when read");
        assert_eq!(c.get(&"ok", t0 + Duration::from_secs(300), ttl), None);
        assert!(c.entries.is_empty());
    }
}
