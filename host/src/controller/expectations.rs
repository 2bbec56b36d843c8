//! Expectations (Kubernetes' controller_utils, ECK): the writes a reconcile
//! made are remembered per key, and the key is not reconciled again until the
//! caches have seen every one of them (or a timeout passes). Without this a
//! guest acting on a cache that lags its own writes creates 7 pods for 5, or
//! deletes 4 of 5 when asked for 3.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::plugin::sandbox::Write;

/// What the cache must show before the key may run again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Expect {
    /// The object exists with this uid.
    Created {
        api_version: String,
        kind: String,
        namespace: Option<String>,
        name: String,
        uid: String,
    },
    /// The object is at this resourceVersion or a later one (or gone).
    Updated {
        api_version: String,
        kind: String,
        namespace: Option<String>,
        name: String,
        resource_version: u64,
    },
    /// The object is gone or being deleted. With its `uid` known, an object
    /// of the same name with another uid counts as gone: a StatefulSet pod is
    /// made again under its name, often before this key is checked again.
    Deleted {
        api_version: String,
        kind: String,
        namespace: Option<String>,
        name: String,
        uid: Option<String>,
    },
}

/// What a cache knows of one object.
pub(crate) struct Seen {
    pub(crate) uid: String,
    pub(crate) resource_version: u64,
    pub(crate) deleting: bool,
}

struct Pending {
    items: Vec<Expect>,
    since: Instant,
}

pub(crate) struct Expectations {
    pending: Mutex<HashMap<String, Pending>>,
    timeout: Duration,
}

impl Expectations {
    pub(crate) fn new(timeout: Duration) -> Expectations {
        Expectations {
            pending: Mutex::new(HashMap::new()),
            timeout,
        }
    }

    /// Remembers `writes` for `key`, keeping only kinds `cached` says are watched
    /// (an unwatched kind could never be confirmed).
    pub(crate) fn record(&self, key: &str, writes: &[Write], cached: impl Fn(&str, &str) -> bool) {
        let items: Vec<Expect> = writes
            .iter()
            .filter_map(|w| match w {
                Write::Created {
                    api_version,
                    kind,
                    namespace,
                    name,
                    uid,
                } if cached(api_version, kind) => Some(Expect::Created {
                    api_version: api_version.clone(),
                    kind: kind.clone(),
                    namespace: namespace.clone(),
                    name: name.clone(),
                    uid: uid.clone(),
                }),
                Write::Updated {
                    api_version,
                    kind,
                    namespace,
                    name,
                    resource_version,
                } if cached(api_version, kind) => {
                    resource_version.parse().ok().map(|rv| Expect::Updated {
                        api_version: api_version.clone(),
                        kind: kind.clone(),
                        namespace: namespace.clone(),
                        name: name.clone(),
                        resource_version: rv,
                    })
                }
                Write::Deleted {
                    api_version,
                    kind,
                    namespace,
                    name,
                    uid,
                } if cached(api_version, kind) => Some(Expect::Deleted {
                    api_version: api_version.clone(),
                    kind: kind.clone(),
                    namespace: namespace.clone(),
                    name: name.clone(),
                    uid: uid.clone(),
                }),
                Write::Evicted {
                    namespace,
                    name,
                    uid,
                } if cached("v1", "Pod") => Some(Expect::Deleted {
                    api_version: "v1".into(),
                    kind: "Pod".into(),
                    namespace: Some(namespace.clone()),
                    name: name.clone(),
                    uid: uid.clone(),
                }),
                _ => None,
            })
            .collect();
        let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        if items.is_empty() {
            return;
        }
        let entry = pending.entry(key.to_string()).or_insert_with(|| Pending {
            items: Vec::new(),
            since: Instant::now(),
        });
        entry.items.extend(items);
        entry.since = Instant::now();
    }

    /// `Ok` when `key` may be reconciled; `Err(wait)` while writes are still
    /// unseen (at most `wait` more, then they are given up on).
    pub(crate) fn check(
        &self,
        key: &str,
        lookup: impl Fn(&str, &str, Option<&str>, &str) -> Option<Seen>,
    ) -> Result<(), Duration> {
        let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        let Some(p) = pending.get_mut(key) else {
            return Ok(());
        };
        p.items.retain(|e| !seen(e, &lookup));
        let age = p.since.elapsed();
        if p.items.is_empty() {
            pending.remove(key);
            return Ok(());
        }
        if age >= self.timeout {
            tracing::warn!(%key, unseen = p.items.len(), "expectations timed out; reconciling anyway");
            pending.remove(key);
            return Ok(());
        }
        Err(self.timeout - age)
    }

    pub(crate) fn forget(&self, key: &str) {
        self.pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(key);
    }
}

fn seen(e: &Expect, lookup: &impl Fn(&str, &str, Option<&str>, &str) -> Option<Seen>) -> bool {
    match e {
        Expect::Created {
            api_version,
            kind,
            namespace,
            name,
            uid,
        } => lookup(api_version, kind, namespace.as_deref(), name).is_some_and(|s| s.uid == *uid),
        Expect::Updated {
            api_version,
            kind,
            namespace,
            name,
            resource_version,
        } => {
            // Gone counts: a later delete superseded the update.
            lookup(api_version, kind, namespace.as_deref(), name)
                .is_none_or(|s| s.resource_version >= *resource_version)
        }
        Expect::Deleted {
            api_version,
            kind,
            namespace,
            name,
            uid,
        } => lookup(api_version, kind, namespace.as_deref(), name)
            .is_none_or(|s| s.deleting || uid.as_ref().is_some_and(|u| *u != s.uid)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    fn created(name: &str, uid: &str) -> Write {
        Write::Created {
            api_version: "v1".into(),
            kind: "Pod".into(),
            namespace: Some("ns".into()),
            name: name.into(),
            uid: uid.into(),
        }
    }

    #[test]
    fn waits_until_the_cache_shows_every_create() {
        let e = Expectations::new(Duration::from_secs(300));
        e.record(
            "ns/rs",
            &[created("p1", "u1"), created("p2", "u2")],
            |_, _| true,
        );
        let cache: RefCell<Vec<(String, String)>> = RefCell::new(vec![("p1".into(), "u1".into())]);
        let lookup = |_: &str, _: &str, _: Option<&str>, n: &str| {
            cache
                .borrow()
                .iter()
                .find(|(name, _)| name == n)
                .map(|(_, uid)| Seen {
                    uid: uid.clone(),
                    resource_version: 1,
                    deleting: false,
                })
        };
        assert!(e.check("ns/rs", lookup).is_err());
        cache.borrow_mut().push(("p2".into(), "u2".into()));
        assert!(e.check("ns/rs", lookup).is_ok());
        assert!(
            e.check("ns/rs", |_, _, _, _| None).is_ok(),
            "satisfied expectations are gone"
        );
    }

    #[test]
    fn deletes_count_when_gone_or_terminating_and_unwatched_kinds_are_ignored() {
        let e = Expectations::new(Duration::from_secs(300));
        let del = Write::Deleted {
            api_version: "v1".into(),
            kind: "Pod".into(),
            namespace: Some("ns".into()),
            name: "p".into(),
            uid: Some("u".into()),
        };
        let cm = Write::Deleted {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            namespace: Some("ns".into()),
            name: "c".into(),
            uid: None,
        };
        e.record("k", &[del, cm], |_, kind| kind == "Pod");
        assert!(
            e.check("k", |_, _, _, _| Some(Seen {
                uid: "u".into(),
                resource_version: 5,
                deleting: false
            }))
            .is_err()
        );
        assert!(
            e.check("k", |_, _, _, _| Some(Seen {
                uid: "u".into(),
                resource_version: 6,
                deleting: true
            }))
            .is_ok()
        );
    }

    #[test]
    fn an_evicted_pod_made_again_under_its_name_counts_as_gone() {
        // A StatefulSet pod evicted, deleted and made again before the key is
        // checked: the cache shows `p` again, but as another object.
        let e = Expectations::new(Duration::from_secs(300));
        let evicted = |uid: Option<&str>| Write::Evicted {
            namespace: "ns".into(),
            name: "p".into(),
            uid: uid.map(str::to_owned),
        };
        let successor = |_: &str, _: &str, _: Option<&str>, _: &str| {
            Some(Seen {
                uid: "u2".into(),
                resource_version: 9,
                deleting: false,
            })
        };
        e.record("k", &[evicted(Some("u1"))], |_, _| true);
        assert!(e.check("k", successor).is_ok());
        // The same object still there, not yet terminating: wait.
        e.record("k", &[evicted(Some("u2"))], |_, _| true);
        assert!(e.check("k", successor).is_err());
        // Unknown uid (the pod was not cached): only gone or terminating counts.
        e.forget("k");
        e.record("k", &[evicted(None)], |_, _| true);
        assert!(e.check("k", successor).is_err());
    }

    #[test]
    fn times_out() {
        let e = Expectations::new(Duration::from_millis(1));
        e.record("k", &[created("p", "u")], |_, _| true);
        std::thread::sleep(Duration::from_millis(5));
        assert!(e.check("k", |_, _, _, _| None).is_ok());
    }
}
