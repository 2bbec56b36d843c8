//! What a controller remembers of each key between two reconciles, in one
//! map: the status it last wrote and whether the key waits for a
//! requeue-after. One [`Keys::forget`] drops both when the object goes or
//! leaves the controller's scope (before, each had its own map and each
//! place that forgot a key listed them: a deleted key stayed `waiting` and
//! was queued again by every later `waiting` event).
//!
//! An entry exists only while it holds something, so an object that is
//! reconciled and left alone costs nothing here.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

use prometheus_client::metrics::gauge::Gauge;
use serde_json::Value;

/// A status write: what the host sent and what the server stored. They differ
/// when the CRD's status schema prunes host-owned fields (`conditions`,
/// `observedGeneration`); comparing the next desired status with what was
/// *sent* then keeps an unchanged object at zero API calls.
pub(super) struct Written {
    pub(super) sent: Value,
    pub(super) kept: Value,
    /// The resourceVersion the write replaced: while the cache still shows
    /// it, the cache has not seen the write yet.
    pub(super) replaced: Option<String>,
    /// The resourceVersion the write was stored at.
    pub(super) stored: Option<String>,
    /// Whether the server kept less than was sent: then the entry stays (the
    /// next desired status is compared with `sent`); otherwise it is dropped
    /// once the cache has the write.
    pub(super) pruned: bool,
}

/// One key's state.
#[derive(Default)]
pub(super) struct KeyState {
    /// The host's last status write, while it still matters (see [`Written`]).
    pub(super) written: Option<Written>,
    /// The last reconcile asked to be called again later: a watch mapped
    /// `waiting` calls the key at once.
    pub(super) waiting: bool,
}

impl KeyState {
    fn is_empty(&self) -> bool {
        self.written.is_none() && !self.waiting
    }
}

/// Every key's [`KeyState`].
#[derive(Default)]
pub(super) struct Keys {
    inner: Mutex<HashMap<String, KeyState>>,
    /// How many keys wait (`wasmlet_controller_waiting_keys`): shared with
    /// the controller's series, which outlives this controller on a reload.
    waiting: Gauge,
}

impl Keys {
    pub(super) fn new(waiting: Gauge) -> Keys {
        Keys {
            inner: Default::default(),
            waiting,
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, KeyState>> {
        // Remembered state, not an invariant: a poisoned map is still usable.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs `f` on `key`'s state (an empty one if none is kept), then keeps
    /// the state only if it holds something.
    pub(super) fn with<R>(&self, key: &str, f: impl FnOnce(&mut KeyState) -> R) -> R {
        let mut map = self.lock();
        if let Some(state) = map.get_mut(key) {
            let was_waiting = state.waiting;
            let r = f(state);
            self.count(was_waiting, state.waiting);
            if state.is_empty() {
                map.remove(key);
            }
            return r;
        }
        let mut state = KeyState::default();
        let r = f(&mut state);
        self.count(false, state.waiting);
        if !state.is_empty() {
            map.insert(key.to_string(), state);
        }
        r
    }

    fn count(&self, was: bool, is: bool) {
        match (was, is) {
            (false, true) => self.waiting.inc(),
            (true, false) => self.waiting.dec(),
            _ => 0,
        };
    }

    /// The keys waiting for a requeue-after.
    pub(super) fn waiting(&self) -> Vec<String> {
        self.lock()
            .iter()
            .filter(|(_, s)| s.waiting)
            .map(|(k, _)| k.clone())
            .collect()
    }

    /// Drops everything kept of `key`.
    pub(super) fn forget(&self, key: &str) {
        if let Some(state) = self.lock().remove(key) {
            self.count(state.waiting, false);
        }
    }

    /// How many keys hold state (tests: nothing outlives its object).
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.lock().len()
    }
}

impl Drop for Keys {
    /// A reloaded plugin's new controller counts its own waiting keys.
    fn drop(&mut self) {
        let waiting = self.lock().values().filter(|s| s.waiting).count();
        self.waiting.dec_by(waiting as i64);
    }
}

#[cfg(test)]
mod tests {
    use super::{Keys, Written};
    use prometheus_client::metrics::gauge::Gauge;
    use serde_json::json;

    fn written() -> Written {
        Written {
            sent: json!({"a": 1}),
            kept: json!({}),
            replaced: None,
            stored: Some("2".into()),
            pruned: true,
        }
    }

    #[test]
    fn an_entry_lives_only_while_it_holds_something() {
        let keys = Keys::default();
        assert!(!keys.with("ns/a", |s| s.waiting), "nothing kept yet");
        assert_eq!(keys.len(), 0, "a read keeps nothing");
        keys.with("ns/a", |s| s.waiting = true);
        keys.with("ns/a", |s| s.written = Some(written()));
        assert_eq!(keys.waiting(), vec!["ns/a".to_string()]);
        keys.with("ns/a", |s| s.waiting = false);
        assert!(keys.waiting().is_empty());
        assert_eq!(keys.len(), 1, "the write is still kept");
        keys.with("ns/a", |s| s.written = None);
        assert_eq!(keys.len(), 0);
    }

    #[test]
    fn forget_drops_the_write_and_the_wait_together() {
        let gauge = Gauge::default();
        let keys = Keys::new(gauge.clone());
        keys.with("ns/a", |s| {
            s.waiting = true;
            s.written = Some(written());
        });
        keys.with("ns/b", |s| s.waiting = true);
        assert_eq!(gauge.get(), 2);
        keys.forget("ns/a");
        assert_eq!(keys.waiting(), vec!["ns/b".to_string()]);
        assert!(keys.with("ns/a", |s| s.written.is_none()));
        assert_eq!(keys.len(), 1);
        assert_eq!(gauge.get(), 1);
        drop(keys);
        assert_eq!(
            gauge.get(),
            0,
            "a dropped controller's keys no longer count"
        );
    }
}
