//! One sync of a set, as upstream's `updateStatefulSet` decides it: given the
//! set, its pods and its current and update revisions, the writes to make (in
//! order) and the replica counts of its status. Pure, so every rule is
//! unit-tested natively; `lib.rs` carries the writes out.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Pod, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::pod::{
    identity_matches, is_failed, is_healthy, is_running_and_available, is_running_and_ready,
    is_succeeded, is_terminating, new_pod, ordinal, revision_of,
};

/// A revision by name with the template it holds.
#[derive(Debug, Clone)]
pub struct Revision {
    pub name: String,
    pub template: PodTemplateSpec,
}

/// Why a pod is deleted (for logs and events).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Why {
    /// It finished (Failed or Succeeded): it is made again once it is gone.
    Finished,
    /// Its ordinal is beyond `replicas` (scale down).
    Condemned,
    /// It is not at the update revision (RollingUpdate).
    Update,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Op {
    Create(Box<Pod>),
    Delete {
        name: String,
        uid: String,
        why: Why,
    },
    /// Restore the identity labels of an existing pod.
    Relabel {
        name: String,
        ordinal: i32,
    },
}

/// The replica counts of the status (upstream's `computeReplicaStatus`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    pub replicas: i32,
    pub ready: i32,
    pub available: i32,
    pub current: i32,
    pub updated: i32,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Plan {
    pub ops: Vec<Op>,
    pub counts: Counts,
}

/// What of the spec a sync reads (defaults as the API server applies them).
struct Spec {
    replicas: i32,
    start: i32,
    monotonic: bool,
    on_delete: bool,
    rolling: bool,
    partition: Option<i32>,
    max_unavailable: Option<IntOrString>,
    min_ready: i32,
    status_current_replicas: i32,
}

fn spec_of(set: &StatefulSet) -> Spec {
    let spec = set.spec.clone().unwrap_or_default();
    let strategy = spec.update_strategy.clone().unwrap_or_default();
    let kind = strategy.type_.as_deref().unwrap_or("RollingUpdate");
    let ru = strategy.rolling_update;
    Spec {
        replicas: spec.replicas.unwrap_or(1).max(0),
        start: spec.ordinals.and_then(|o| o.start).unwrap_or(0).max(0),
        monotonic: spec.pod_management_policy.as_deref() != Some("Parallel"),
        on_delete: kind == "OnDelete",
        rolling: kind == "RollingUpdate",
        partition: ru.as_ref().map(|r| r.partition.unwrap_or(0)),
        max_unavailable: ru.and_then(|r| r.max_unavailable),
        min_ready: spec.min_ready_seconds.unwrap_or(0),
        status_current_replicas: set
            .status
            .as_ref()
            .and_then(|s| s.current_replicas)
            .unwrap_or(0),
    }
}

/// `maxUnavailable` against `replicas` (percentages round down), at least 1.
fn max_unavailable(v: &IntOrString, replicas: i32) -> i32 {
    let n = match v {
        IntOrString::Int(i) => *i,
        IntOrString::String(s) => s
            .strip_suffix('%')
            .and_then(|p| p.trim().parse::<i64>().ok())
            .map(|p| (p * i64::from(replicas) / 100) as i32)
            .unwrap_or(1),
    };
    n.max(1)
}

/// Upstream's `computeReplicaStatus` over the pods that exist.
pub fn counts(
    pods: &[&Pod],
    min_ready: i32,
    current: &str,
    update: &str,
    now: jiff::Timestamp,
) -> Counts {
    let mut c = Counts::default();
    for p in pods {
        c.replicas += 1;
        if is_running_and_ready(p) {
            c.ready += 1;
            if is_running_and_available(p, min_ready, now) {
                c.available += 1;
            }
        }
        if !is_terminating(p) {
            let r = revision_of(p);
            if r == Some(current) {
                c.current += 1;
            }
            if r == Some(update) {
                c.updated += 1;
            }
        }
    }
    c
}

/// A slot of the ordinal range: the pod there, or none (one to create).
#[derive(Clone, Copy)]
enum Slot<'a> {
    Live(&'a Pod),
    Missing,
}

/// Creates one plan carries at most (upstream's `burstReplicas`); the rest
/// come in the next sync, which the created pods' events bring.
pub const MAX_CREATES: usize = 500;

/// The sync of `set` over `pods` (its own: the caller filtered them by
/// controller reference). Its memory and time follow the pods and
/// [`MAX_CREATES`], never `replicas` (a set of a million replicas is
/// walked by its live pods and the first missing ordinals only).
pub fn plan(
    set: &StatefulSet,
    pods: &[&Pod],
    current: &Revision,
    update: &Revision,
    now: jiff::Timestamp,
) -> Plan {
    let s = spec_of(set);
    let set_name = set.metadata.name.clone().unwrap_or_default();
    let end = s.start.saturating_add(s.replicas); // exclusive
    let mut live_in: BTreeMap<i32, &Pod> = BTreeMap::new();
    let mut condemned: Vec<(i32, &Pod)> = vec![];
    let mut live: Vec<&Pod> = vec![];
    for &p in pods {
        let Some(ord) = ordinal(&set_name, p.metadata.name.as_deref().unwrap_or_default()) else {
            continue; // upstream ignores pods whose ordinal does not parse
        };
        live.push(p);
        if (s.start..end).contains(&ord) {
            live_in.insert(ord, p);
        } else {
            condemned.push((ord, p));
        }
    }
    // Highest ordinal first.
    condemned.sort_by_key(|(o, _)| std::cmp::Reverse(*o));
    let mut plan = Plan {
        ops: vec![],
        counts: counts(&live, s.min_ready, &current.name, &update.name, now),
    };
    if set.metadata.deletion_timestamp.is_some() {
        return plan;
    }
    let slot = |ord: i32| live_in.get(&ord).map_or(Slot::Missing, |p| Slot::Live(p));

    // newVersionedStatefulSetPod: below the partition (or, without a
    // rollingUpdate, below status.currentReplicas) a pod is made at the
    // current revision, else at the update revision.
    let at_current = |ord: i32| {
        s.rolling
            && match s.partition {
                None => ord < s.status_current_replicas,
                Some(p) => ord < p,
            }
    };
    // The first unhealthy pod: replicas in ordinal order (a missing one
    // counts, and then no condemned pod is it), then condemned lowest first.
    let first_missing = (s.start..end).find(|o| !live_in.contains_key(o));
    let first_unhealthy: Option<&Pod> = match live_in
        .iter()
        .find(|(o, p)| first_missing.is_none_or(|m| **o < m) && !is_healthy(p))
    {
        Some((_, p)) => Some(*p),
        None if first_missing.is_some() => None,
        None => condemned
            .iter()
            .rev()
            .find(|(_, p)| !is_healthy(p))
            .map(|(_, p)| *p),
    };

    // 1. Each replica in ordinal order (processReplica): the live ones and
    // the missing ones up to MAX_CREATES.
    let mut creates = 0;
    for ord in s.start..end {
        let blocked = match slot(ord) {
            Slot::Missing => {
                let r = if at_current(ord) { current } else { update };
                plan.ops.push(Op::Create(Box::new(new_pod(
                    set,
                    &r.template,
                    &r.name,
                    ord,
                ))));
                creates += 1;
                if creates >= MAX_CREATES {
                    return plan;
                }
                s.monotonic
            }
            Slot::Live(p) if is_failed(p) || is_succeeded(p) => {
                if !is_terminating(p) {
                    plan.ops.push(delete(p, Why::Finished));
                }
                // It is made again once it is gone (a later sync).
                s.monotonic
            }
            Slot::Live(p) => {
                if s.monotonic
                    && (is_terminating(p)
                        || !is_running_and_ready(p)
                        || !is_running_and_available(p, s.min_ready, now))
                {
                    true
                } else {
                    if !is_terminating(p) && !identity_matches(set, p, ord) {
                        plan.ops.push(Op::Relabel {
                            name: name(p),
                            ordinal: ord,
                        });
                    }
                    false
                }
            }
        };
        if blocked {
            return plan;
        }
    }

    // 2. Scale down, highest ordinal first (processCondemned).
    for (_, p) in &condemned {
        if is_terminating(p) {
            if s.monotonic {
                return plan;
            }
            continue;
        }
        let first = first_unhealthy.is_some_and(|f| std::ptr::eq(f, *p));
        if s.monotonic
            && !first
            && (!is_running_and_ready(p) || !is_running_and_available(p, s.min_ready, now))
        {
            return plan;
        }
        plan.ops.push(delete(p, Why::Condemned));
        if s.monotonic {
            return plan;
        }
    }

    // 3. Updates: OnDelete never replaces a pod by itself.
    if s.on_delete {
        return plan;
    }
    let update_min = s.partition.unwrap_or(0);
    let outdated = |p: &Pod| revision_of(p) != Some(update.name.as_str()) && !is_terminating(p);
    match &s.max_unavailable {
        None => {
            // Delete the highest-ordinal outdated pod, waiting for unhealthy ones.
            for ord in (update_min.max(s.start)..end).rev() {
                let Slot::Live(p) = slot(ord) else {
                    return plan;
                };
                if outdated(p) {
                    plan.ops.push(delete(p, Why::Update));
                    plan.counts.current -= 1;
                    return plan;
                }
                if !is_healthy(p) {
                    return plan;
                }
            }
        }
        Some(mu) => {
            // updateStatefulSetAfterInvariantEstablished: up to maxUnavailable
            // pods unavailable at once, highest ordinal first.
            let allowed = max_unavailable(mu, s.replicas);
            let missing = i64::from(s.replicas) - live_in.len() as i64;
            let unhealthy = live_in
                .values()
                .filter(|p| !is_healthy(p) || !is_running_and_available(p, s.min_ready, now))
                .count() as i64;
            let mut budget = i64::from(allowed) - missing - unhealthy;
            for (ord, p) in live_in.iter().rev() {
                if budget <= 0 || *ord < update_min {
                    break;
                }
                if outdated(p) {
                    plan.ops.push(delete(p, Why::Update));
                    plan.counts.current -= 1;
                    budget -= 1;
                }
            }
        }
    }
    plan
}

fn name(p: &Pod) -> String {
    p.metadata.name.clone().unwrap_or_default()
}

fn delete(p: &Pod, why: Why) -> Op {
    Op::Delete {
        name: name(p),
        uid: p.metadata.uid.clone().unwrap_or_default(),
        why,
    }
}

#[cfg(test)]
mod tests;
