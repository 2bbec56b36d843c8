//! The host's own status writes, so that the watch event each one causes does
//! not reconcile the object a second time (issue 16: one reconcile per change).
//!
//! The host's status PATCH carries the reconciled object's resourceVersion as a
//! precondition, so the object at the resourceVersion the PATCH returns is
//! exactly what was reconciled plus the host's status: an event at that
//! resourceVersion holds nothing the reconciler has not seen. Any other
//! change, the status included, has another resourceVersion and reconciles.
//! This holds on any Kubernetes API server, not only the embedded plane.
//!
//! The event may arrive before the PATCH's response; events of a key with a
//! write in flight are held and decided when the response is in.

use std::collections::HashMap;
use std::sync::Mutex;

#[derive(Default)]
pub(super) struct OwnWrites {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    /// Keys with a status write in flight: the resourceVersions of the events
    /// held meanwhile.
    in_flight: HashMap<String, Vec<Option<String>>>,
    /// Per key, the resourceVersion the host's last status write produced.
    last: HashMap<String, String>,
}

impl OwnWrites {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A cache of recent writes: a poisoned one is still usable.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A status write of `key` is about to be sent.
    pub(super) fn begin(&self, key: &str) {
        self.lock().in_flight.insert(key.to_string(), Vec::new());
    }

    /// The write of `key` returned the object at `rv` (`None`: it failed).
    /// Returns whether an event held meanwhile was someone else's change, so
    /// the key must be reconciled again.
    pub(super) fn finish(&self, key: &str, rv: Option<&str>) -> bool {
        let mut inner = self.lock();
        let held = inner.in_flight.remove(key).unwrap_or_default();
        match rv {
            // Its event came already: nothing left to skip.
            Some(rv) if held.iter().any(|h| h.as_deref() == Some(rv)) => {
                inner.last.remove(key);
            }
            Some(rv) => {
                inner.last.insert(key.to_string(), rv.to_string());
            }
            None => {
                inner.last.remove(key);
            }
        }
        held.iter().any(|h| rv.is_none() || h.as_deref() != rv)
    }

    /// Whether a watch event of `key` at `rv` needs a reconcile: not when it
    /// is the host's own last status write; held (decided by [`Self::finish`])
    /// while a write is in flight.
    pub(super) fn needs_reconcile(&self, key: &str, rv: Option<&str>) -> bool {
        let mut inner = self.lock();
        if let Some(held) = inner.in_flight.get_mut(key) {
            held.push(rv.map(str::to_string));
            return false;
        }
        if rv.is_some() && inner.last.get(key).map(String::as_str) == rv {
            // Each resourceVersion comes once: the entry has done its work
            // (one per object would otherwise stay for the process's life).
            inner.last.remove(key);
            return false;
        }
        true
    }

    /// Keys remembered (for tests: entries must not outlive their event).
    #[cfg(test)]
    fn remembered(&self) -> usize {
        let inner = self.lock();
        inner.last.len() + inner.in_flight.len()
    }

    /// `key`'s object is gone.
    pub(super) fn forget(&self, key: &str) {
        let mut inner = self.lock();
        inner.last.remove(key);
        inner.in_flight.remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::OwnWrites;

    #[test]
    fn the_event_of_the_hosts_own_write_is_skipped_others_are_not() {
        let w = OwnWrites::default();
        assert!(w.needs_reconcile("ns/a", Some("5")), "nothing written yet");
        w.begin("ns/a");
        assert!(!w.finish("ns/a", Some("6")));
        assert!(w.needs_reconcile("ns/b", Some("6")), "another key");
        assert!(!w.needs_reconcile("ns/a", Some("6")), "our own write");
        assert!(
            w.needs_reconcile("ns/a", Some("7")),
            "someone else's change"
        );
        w.begin("ns/a");
        assert!(!w.finish("ns/a", Some("8")));
        w.forget("ns/a");
        assert!(w.needs_reconcile("ns/a", Some("8")));
    }

    #[test]
    fn nothing_is_remembered_once_each_write_is_seen() {
        let w = OwnWrites::default();
        for (i, key) in ["a", "b", "c"].iter().enumerate() {
            let rv = (10 + i).to_string();
            w.begin(key);
            if i == 0 {
                // The event before the response.
                assert!(!w.needs_reconcile(key, Some(&rv)));
                assert!(!w.finish(key, Some(&rv)));
            } else {
                assert!(!w.finish(key, Some(&rv)));
                assert!(!w.needs_reconcile(key, Some(&rv)));
            }
        }
        assert_eq!(w.remembered(), 0);
    }

    #[test]
    fn events_arriving_before_the_response_are_decided_by_it() {
        let w = OwnWrites::default();
        w.begin("k");
        assert!(!w.needs_reconcile("k", Some("6")), "held");
        assert!(!w.finish("k", Some("6")), "the held event was our write");

        w.begin("k");
        assert!(!w.needs_reconcile("k", Some("7")), "held");
        assert!(!w.needs_reconcile("k", Some("8")), "held");
        assert!(w.finish("k", Some("8")), "7 was someone else's change");

        w.begin("k");
        assert!(!w.needs_reconcile("k", Some("9")), "held");
        assert!(w.finish("k", None), "the write failed: reconcile what came");
        assert!(w.needs_reconcile("k", Some("8")), "no write of ours stands");
    }
}
