//! The high lane, fair between namespaces: one FIFO per namespace, handed
//! out in turn. A key's namespace is its part before the first `/` (keys are
//! `ns/name`; cluster-scoped keys and table rows without one share a turn).
//! So one namespace's backlog of 20,000 ready keys delays another
//! namespace's single key by one turn of each busy namespace, not by the
//! backlog: for one controller's keys, what kube-apiserver's priority and
//! fairness gives each flow of requests.

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;

/// What a key's fair share is counted by.
pub trait Tenant {
    /// The namespace (or other tenant) the key belongs to.
    fn tenant(&self) -> &str;
}

impl Tenant for String {
    fn tenant(&self) -> &str {
        self.split_once('/').map_or("", |(ns, _)| ns)
    }
}

impl Tenant for &'static str {
    fn tenant(&self) -> &str {
        self.split_once('/').map_or("", |(ns, _)| ns)
    }
}

/// Numbered keys (tests) share one tenant.
macro_rules! one_tenant {
    ($($t:ty),*) => {$(
        impl Tenant for $t {
            fn tenant(&self) -> &str {
                ""
            }
        }
    )*};
}
one_tenant!(u8, u32);

/// FIFOs of `(key, seq)` per tenant and the order of their turns.
pub(super) struct FairLane<K> {
    queues: HashMap<String, VecDeque<(K, u64)>>,
    /// Tenants with entries, the next to hand out first.
    turns: VecDeque<String>,
    len: usize,
}

impl<K> Default for FairLane<K> {
    fn default() -> Self {
        FairLane {
            queues: HashMap::new(),
            turns: VecDeque::new(),
            len: 0,
        }
    }
}

impl<K: Tenant + Clone + Eq + Hash> FairLane<K> {
    /// Entries, stale ones (lazy deletion) included.
    pub(super) fn len(&self) -> usize {
        self.len
    }

    pub(super) fn push_back(&mut self, key: K, seq: u64) {
        self.len += 1;
        match self.queues.get_mut(key.tenant()) {
            Some(q) => q.push_back((key, seq)),
            None => {
                let tenant = key.tenant().to_string();
                self.turns.push_back(tenant.clone());
                self.queues.insert(tenant, VecDeque::from([(key, seq)]));
            }
        }
    }

    /// The head of the tenant whose turn it is; that tenant goes to the back.
    pub(super) fn pop_front(&mut self) -> Option<(K, u64)> {
        let tenant = self.turns.pop_front()?;
        let queue = self.queues.get_mut(&tenant)?;
        let entry = queue.pop_front();
        if queue.is_empty() {
            self.queues.remove(&tenant);
        } else {
            self.turns.push_back(tenant);
        }
        self.len -= usize::from(entry.is_some());
        entry
    }

    /// Each tenant's entries, oldest first.
    pub(super) fn queues(&self) -> impl Iterator<Item = &VecDeque<(K, u64)>> {
        self.queues.values()
    }

    /// Keeps the entries `keep` says; a tenant left empty loses its turn.
    pub(super) fn retain(&mut self, mut keep: impl FnMut(&K, u64) -> bool) {
        for q in self.queues.values_mut() {
            q.retain(|(k, s)| keep(k, *s));
        }
        self.queues.retain(|_, q| !q.is_empty());
        let queues = &self.queues;
        self.turns.retain(|t| queues.contains_key(t));
        self.len = self.queues.values().map(VecDeque::len).sum();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_small_namespace_waits_one_turn_behind_a_flood() {
        let mut lane = FairLane::default();
        for i in 0..20_000u64 {
            lane.push_back(format!("flood/job-{i}"), i);
        }
        lane.push_back("small/job".to_string(), 20_000);
        assert_eq!(lane.pop_front().map(|e| e.0), Some("flood/job-0".into()));
        assert_eq!(lane.pop_front().map(|e| e.0), Some("small/job".into()));
        assert_eq!(lane.pop_front().map(|e| e.0), Some("flood/job-1".into()));
        assert_eq!(lane.len(), 19_998);
    }

    #[test]
    fn turns_rotate_and_keep_each_namespaces_order() {
        let mut lane = FairLane::default();
        for (i, k) in ["a/1", "a/2", "b/1", "node-1", "a/3", "b/2"]
            .iter()
            .enumerate()
        {
            lane.push_back(k.to_string(), i as u64);
        }
        let order: Vec<String> = std::iter::from_fn(|| lane.pop_front().map(|e| e.0)).collect();
        assert_eq!(order, ["a/1", "b/1", "node-1", "a/2", "b/2", "a/3"]);
        assert_eq!(lane.len(), 0);
    }

    #[test]
    fn retain_drops_emptied_namespaces_from_the_turns() {
        let mut lane = FairLane::default();
        for (i, k) in ["a/1", "b/1", "b/2"].iter().enumerate() {
            lane.push_back(k.to_string(), i as u64);
        }
        lane.retain(|k, _| k.tenant() != "a");
        assert_eq!(lane.len(), 2);
        assert_eq!(lane.pop_front().map(|e| e.0), Some("b/1".into()));
        assert_eq!(lane.pop_front().map(|e| e.0), Some("b/2".into()));
        assert_eq!(lane.pop_front(), None);
    }
}
