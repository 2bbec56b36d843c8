//! ResourceQuota admission, as kube-apiserver's `ResourceQuota` plugin: a
//! create in a namespace is refused when it would take a quota's
//! `status.used` past `status.hard` (403 `exceeded quota: NAME, requested:
//! ..., used: ..., limited: ...`), and charged to the quota when it is
//! stored. (Not to be confused with `watch_quota`, the per-user bound on
//! open watches.)
//!
//! Why a gate: upstream charges by an optimistic update of the quota before
//! the object is stored, so a create that then fails leaves an overcount
//! until the quota controller recounts. Here the plane is one process, so
//! each namespace has a read-write gate instead: a create that no quota of
//! its namespace measures holds it shared (and runs in parallel with the
//! others); one that a quota measures holds it exclusively across the
//! check, the store write and the charge; and a recount (`status::sync`)
//! holds it exclusively too. `status.used` is then exact for creates, never
//! an overcount, and a delete or a pod that ends is subtracted by the
//! recount `controllers::resourcequota` runs after it.

pub(crate) mod quantity;
pub(crate) mod status;
pub(crate) mod usage;

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use serde_json::Value;
use tokio::sync::{OwnedRwLockReadGuard, OwnedRwLockWriteGuard, RwLock};

use self::quantity::Quantity;
use self::usage::Usage;
use crate::meta;
use crate::registry::{Registry, ResourceType};
use crate::status::ApiError;
use crate::store::{Store, StoreError};

/// The per-namespace gates (see the module docs).
#[derive(Default)]
pub(crate) struct Gate {
    locks: Mutex<HashMap<String, Arc<RwLock<()>>>>,
}

impl Gate {
    fn of(&self, ns: &str) -> Arc<RwLock<()>> {
        let mut locks = self.locks.lock().unwrap_or_else(|p| p.into_inner());
        // Gates nobody holds are dropped now and then, so a stream of
        // namespaces does not grow the map for ever.
        if locks.len() > 4096 {
            locks.retain(|_, l| Arc::strong_count(l) > 1);
        }
        locks.entry(ns.to_string()).or_default().clone()
    }

    /// The namespace's gate, held exclusively: for a recount.
    pub(crate) async fn exclusive(&self, ns: &str) -> OwnedRwLockWriteGuard<()> {
        self.of(ns).write_owned().await
    }
}

/// A quota a create is charged to, and by how much.
pub(crate) struct Charge {
    key: String,
    delta: Usage,
}

/// What a create holds from its quota check until it is stored.
pub(crate) enum Admission {
    /// Cluster-scoped, or no quota measures the object: nothing to charge.
    Free {
        _gate: Option<OwnedRwLockReadGuard<()>>,
    },
    /// Quotas to charge once the object is stored.
    Charged {
        _gate: OwnedRwLockWriteGuard<()>,
        charges: Vec<Charge>,
    },
}

/// The forbidden error upstream's `admission.NewForbidden` gives.
fn forbidden(rt: &ResourceType, obj: &Value, message: String) -> ApiError {
    let name = meta::name(obj);
    ApiError::forbidden(format!(
        "{} \"{name}\" is forbidden: {message}",
        rt.qualified()
    ))
}

/// The quotas of `ns` that measure `obj`, with the names of theirs it charges.
fn measuring(
    store: &Store,
    registry: &Registry,
    rt: &ResourceType,
    ns: &str,
    obj: &Value,
) -> Vec<(String, Value, BTreeSet<String>)> {
    let Ok(qrt) = registry.builtin("", "v1", "resourcequotas") else {
        return vec![];
    };
    let snap = store.snapshot();
    snap.range(&qrt.prefix(Some(ns)), None)
        .filter_map(|s| {
            let q = s.value().ok()?;
            let names: BTreeSet<String> = q
                .pointer("/spec/hard")
                .and_then(Value::as_object)?
                .keys()
                .filter(|k| usage::tracks(rt, k))
                .cloned()
                .collect();
            (!names.is_empty() && usage::in_scope(rt, &q, obj))
                .then(|| (s.key.to_string(), q, names))
        })
        .collect()
}

/// Checks a create of `obj` against the quotas of `ns`; the answer is held
/// until the object is stored, then [`Admission::charge`]d.
pub(crate) async fn admit(
    store: &Store,
    registry: &Registry,
    gate: &Gate,
    rt: &ResourceType,
    ns: &str,
    obj: &Value,
) -> Result<Admission, ApiError> {
    if !rt.namespaced || ns.is_empty() {
        return Ok(Admission::Free { _gate: None });
    }
    let lock = gate.of(ns);
    {
        let shared = lock.clone().read_owned().await;
        if measuring(store, registry, rt, ns, obj).is_empty() {
            return Ok(Admission::Free {
                _gate: Some(shared),
            });
        }
    }
    let exclusive = lock.write_owned().await;
    let delta = usage::usage(rt, obj);
    let mut charges = Vec::new();
    for (key, mut quota, names) in measuring(store, registry, rt, ns, obj) {
        let quota_name = meta::name(&quota).to_string();
        if rt.group.is_empty() && rt.resource == "pods" {
            let tracked = names.iter().map(String::as_str).collect();
            if let Some(m) = usage::missing_compute(obj, &tracked) {
                return Err(forbidden(
                    rt,
                    obj,
                    format!("failed quota: {quota_name}: {m}"),
                ));
            }
        }
        if !status::in_sync(&quota) {
            match status::sync(store, registry, &key).await {
                Ok(Some(q)) => quota = q,
                Ok(None) => continue,
                Err(e) => return Err(ApiError::internal(format!("quota {quota_name}: {e}"))),
            }
        }
        let requested: Usage = delta
            .iter()
            .filter(|(k, _)| names.contains(*k))
            .map(|(k, v)| (k.clone(), *v))
            .collect();
        if requested.values().all(|q| q.milli == 0) {
            continue;
        }
        let (hard, used) = (
            status::parsed(&quota, "/status/hard"),
            status::parsed(&quota, "/status/used"),
        );
        let exceeded: Vec<&String> = requested
            .iter()
            .filter(|(k, q)| {
                let now = used.get(*k).copied().unwrap_or_default();
                hard.get(*k).is_some_and(|h| now.add(**q) > *h)
            })
            .map(|(k, _)| k)
            .collect();
        if !exceeded.is_empty() {
            let show = |m: &Usage| {
                exceeded
                    .iter()
                    .map(|k| format!("{k}={}", m.get(*k).copied().unwrap_or_default()))
                    .collect::<Vec<_>>()
                    .join(",")
            };
            return Err(forbidden(
                rt,
                obj,
                format!(
                    "exceeded quota: {quota_name}, requested: {}, used: {}, limited: {}",
                    show(&requested),
                    show(&used),
                    show(&hard)
                ),
            ));
        }
        charges.push(Charge {
            key,
            delta: requested,
        });
    }
    Ok(Admission::Charged {
        _gate: exclusive,
        charges,
    })
}

impl Admission {
    /// Adds the stored object's usage to the quotas it was checked against.
    /// A failure leaves the quota to the next recount (logged, never
    /// refused: the object is stored already).
    pub(crate) async fn charge(self, store: &Store, registry: &Registry) {
        let Admission::Charged { charges, .. } = self else {
            return;
        };
        for c in charges {
            if let Err(e) = charge_one(store, registry, &c).await {
                tracing::warn!(quota = %c.key, error = %e, "charging the quota failed; the next recount fixes it");
            }
        }
    }
}

async fn charge_one(store: &Store, registry: &Registry, c: &Charge) -> Result<(), StoreError> {
    for _ in 0..16 {
        let Some(stored) = store.get(&c.key) else {
            return Ok(());
        };
        let quota = stored.value()?;
        if !status::in_sync(&quota) {
            // Its spec changed meanwhile: count afresh (the object is stored).
            return status::sync(store, registry, &c.key).await.map(|_| ());
        }
        let mut used = status::parsed(&quota, "/status/used");
        for (k, q) in &c.delta {
            let now = used.get(k).copied().unwrap_or(Quantity::ZERO);
            used.insert(k.clone(), now.add(*q));
        }
        match status::write(store, &stored, &quota, &used).await {
            Err(StoreError::Conflict { .. }) => continue,
            other => return other.map(|_| ()),
        }
    }
    Err(StoreError::Internal("lost 16 write races in a row".into()))
}
