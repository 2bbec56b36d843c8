//! A kind cache's change journal: what changed since a cursor, so that a
//! guest that keeps what it read (a warm instance, `limits.reuse-instances`)
//! asks for the changes since its last call instead of listing everything
//! again (the `client.list-changes` import, issue 32). A read costs the
//! number of changes since the cursor, not the number of objects.
//!
//! Every change the cache stores takes the next number of one process-wide
//! sequence; the journal holds each live object under the number of its
//! last change and each deletion as a tombstone. Tombstones are bounded
//! ([`MAX_TOMBSTONES`]): dropping the oldest raises the journal's `floor`,
//! and a cursor below the floor (or 0, or from before a relist) gets the
//! whole selection again with `reset` set, as a watch gets 410 Gone.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::cluster::CachedObject;

/// Tombstones kept per kind. A guest further behind than this many
/// deletions starts over from a full list.
pub(super) const MAX_TOMBSTONES: usize = 16 * 1024;

/// The process-wide sequence: numbers from different caches never meet, so
/// a cursor of an older cache of the same kind is always below the floor of
/// a newer one.
static SEQ: AtomicU64 = AtomicU64::new(1);

/// The next sequence number.
pub(crate) fn next_seq() -> u64 {
    SEQ.fetch_add(1, Ordering::Relaxed)
}

pub(super) struct Journal {
    /// Cursors below this have lost changes: they are answered in full.
    floor: u64,
    /// The number of the latest change (what a caught-up cursor is).
    last: u64,
    /// Live objects by the number of their last change.
    live: BTreeMap<u64, Arc<CachedObject>>,
    /// Deleted objects (as last seen) by the number of their deletion.
    gone: BTreeMap<u64, Arc<CachedObject>>,
}

impl Default for Journal {
    fn default() -> Self {
        let now = next_seq();
        Journal {
            floor: now,
            last: now,
            live: BTreeMap::new(),
            gone: BTreeMap::new(),
        }
    }
}

/// What changed after a cursor, unfiltered: the caller applies namespace
/// and selectors (see `KindCache::changes`).
pub(super) struct Since {
    pub(crate) applied: Vec<Arc<CachedObject>>,
    pub(crate) removed: Vec<Arc<CachedObject>>,
    /// The cursor that is caught up with this answer.
    pub(crate) cursor: u64,
}

impl Journal {
    /// `object` (numbered by [`next_seq`]) replaced `old`, or is new.
    pub(super) fn applied(&mut self, object: Arc<CachedObject>, old: Option<&CachedObject>) {
        if let Some(old) = old {
            self.live.remove(&old.seq);
        }
        self.last = self.last.max(object.seq);
        self.live.insert(object.seq, object);
    }

    /// `old` (the stored object, if any) was deleted; `tombstone` is the
    /// deleted object as the watch reported it, numbered by [`next_seq`].
    pub(super) fn deleted(&mut self, tombstone: Arc<CachedObject>, old: Option<&CachedObject>) {
        if let Some(old) = old {
            self.live.remove(&old.seq);
        }
        self.last = self.last.max(tombstone.seq);
        self.gone.insert(tombstone.seq, tombstone);
        while self.gone.len() > MAX_TOMBSTONES {
            if let Some((seq, _)) = self.gone.pop_first() {
                self.floor = self.floor.max(seq);
            }
        }
    }

    /// A relist replaced every object: cursors from before it start over.
    pub(super) fn relisted<'a>(&mut self, objects: impl Iterator<Item = &'a Arc<CachedObject>>) {
        self.live = objects.map(|o| (o.seq, o.clone())).collect();
        self.gone.clear();
        // Above every number the relist gave out.
        let now = next_seq();
        self.floor = now;
        self.last = now;
    }

    /// The cursor a full answer read now is caught up with.
    pub(super) fn cursor(&self) -> u64 {
        self.last
    }

    /// The changes after `cursor`, or `None` when it is too old (or 0) and
    /// the caller must answer with everything.
    pub(super) fn since(&self, cursor: u64) -> Option<Since> {
        if cursor == 0 || cursor < self.floor || cursor > self.last {
            return None;
        }
        let after = cursor.saturating_add(1);
        Some(Since {
            removed: self.gone.range(after..).map(|(_, o)| o.clone()).collect(),
            applied: self.live.range(after..).map(|(_, o)| o.clone()).collect(),
            cursor: self.last,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(name: &str) -> Arc<CachedObject> {
        let mut o: CachedObject =
            serde_json::from_value(serde_json::json!({"metadata": {"name": name}})).unwrap();
        o.seq = next_seq();
        Arc::new(o)
    }

    fn names(v: &[Arc<CachedObject>]) -> Vec<String> {
        v.iter().map(|o| o.metadata.name.clone().unwrap()).collect()
    }

    #[test]
    fn a_cursor_gets_only_what_changed_after_it() {
        let mut j = Journal::default();
        let a = object("a");
        j.applied(a.clone(), None);
        let b = object("b");
        j.applied(b.clone(), None);
        let cursor = j.cursor();
        let a2 = object("a");
        j.applied(a2.clone(), Some(&a));
        j.deleted(object("b"), Some(&b));
        let s = j.since(cursor).unwrap();
        assert_eq!(names(&s.applied), ["a"]);
        assert_eq!(names(&s.removed), ["b"]);
        // Caught up: nothing more.
        let s2 = j.since(s.cursor).unwrap();
        assert!(s2.applied.is_empty() && s2.removed.is_empty());
        // An object changed twice is reported once, as it is now.
        assert_eq!(j.since(cursor).unwrap().applied[0].seq, a2.seq);
    }

    #[test]
    fn cursors_from_nowhere_or_before_a_relist_start_over() {
        let mut j = Journal::default();
        let a = object("a");
        j.applied(a.clone(), None);
        let cursor = j.cursor();
        assert!(j.since(0).is_none(), "0 is a first call");
        assert!(
            j.since(cursor + 1_000_000).is_none(),
            "a cursor of another cache"
        );
        j.relisted([a].iter());
        assert!(
            j.since(cursor).is_none(),
            "a relist may have missed deletions"
        );
        assert!(j.since(j.cursor()).is_some());
    }

    #[test]
    fn tombstones_are_bounded_and_a_cursor_behind_them_starts_over() {
        let mut j = Journal::default();
        let cursor = j.cursor();
        for i in 0..MAX_TOMBSTONES + 10 {
            let o = object(&format!("o{i}"));
            j.applied(o.clone(), None);
            j.deleted(object(&format!("o{i}")), Some(&o));
        }
        assert_eq!(j.gone.len(), MAX_TOMBSTONES);
        assert!(j.live.is_empty());
        assert!(j.since(cursor).is_none());
        let recent = j.cursor();
        let o = object("new");
        j.applied(o, None);
        assert_eq!(names(&j.since(recent).unwrap().applied), ["new"]);
    }
}
