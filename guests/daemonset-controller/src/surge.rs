//! RollingUpdate with `maxSurge` (upstream's `rollingUpdate` surge branch and
//! the two-pods-per-node rule of `podsShouldBeOnNode`): a node's new pod is
//! created beside its old one, the old one deleted once the new one is
//! available, so a surging update never takes a node's daemon down; at most
//! `maxSurge` nodes wait on a new pod at once. Kept apart from `plan` so the
//! in-place path stays as it was.

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use wasmlet_sdk::controllers::{pod_ready, scaled_value};

use crate::plan::{available, updated};

fn max_surge_value(ds: &DaemonSet) -> Option<IntOrString> {
    let spec = ds.spec.as_ref()?;
    let strategy = spec.update_strategy.as_ref()?;
    if strategy
        .type_
        .as_deref()
        .is_some_and(|t| t != "RollingUpdate")
    {
        return None;
    }
    strategy.rolling_update.as_ref()?.max_surge.clone()
}

/// `SurgeCount`: `maxSurge` scaled to `desired` (rounded up), 0 when unset
/// or not a RollingUpdate.
pub fn max_surge(ds: &DaemonSet, desired: i32) -> i32 {
    max_surge_value(ds)
        .and_then(|v| scaled_value(&v, desired, true).ok())
        .unwrap_or(0)
        .max(0)
}

/// `AllowsSurge`: the update surges (any non-zero `maxSurge`).
pub fn allows_surge(ds: &DaemonSet) -> bool {
    max_surge(ds, 1) > 0
}

/// Manage while surging: of a node's running pods (oldest first) the oldest
/// new and the oldest old may stay together, the old one only while it is
/// Ready and the new one is not (or `minReadySeconds` is pending); returns
/// the pods to delete.
pub fn extra_on_node<'a>(
    ds: &DaemonSet,
    hash: &str,
    running: &[&'a Pod],
    min_ready: i32,
) -> Vec<&'a Pod> {
    let (mut new, mut old, mut extra) = (None, None, vec![]);
    for p in running {
        let slot = if updated(ds, p, hash) {
            &mut new
        } else {
            &mut old
        };
        if slot.is_none() {
            *slot = Some(*p);
        } else {
            extra.push(*p);
        }
    }
    if let (Some(n), Some(o)) = (new, old)
        && (!pod_ready(o) || (pod_ready(n) && min_ready == 0))
    {
        extra.push(o);
    }
    extra
}

/// What the surge pass does.
#[derive(Debug, Default)]
pub struct Roll<'a> {
    /// Nodes that get their new pod beside the old one.
    pub create: Vec<String>,
    /// Old pods whose node's new pod is available.
    pub delete: Vec<&'a Pod>,
    /// A new pod is Ready but not yet available (`minReadySeconds`).
    pub waiting: bool,
}

/// The surge pass over `(node, live running pods)` of the nodes that should
/// run the set: an unavailable old pod is replaced at once, an available one
/// only while fewer than `max_surge` nodes wait on a new pod.
pub fn roll<'a>(
    ds: &DaemonSet,
    hash: &str,
    nodes: &[(&str, Vec<&'a Pod>)],
    max_surge: i32,
    min_ready: i32,
    now: Timestamp,
) -> Roll<'a> {
    let mut out = Roll::default();
    let (mut surging, mut candidates) = (0i32, vec![]);
    for (node, pods) in nodes {
        let (new, old): (Vec<&Pod>, Vec<&Pod>) = pods.iter().partition(|p| updated(ds, p, hash));
        match (new.as_slice(), old.as_slice()) {
            // Nothing old here: manage handles the node.
            (_, []) if new.len() <= 1 => {}
            ([], [o]) if !available(o, min_ready, now) => out.create.push(node.to_string()),
            ([], [_]) => candidates.push(node.to_string()),
            ([n], [o]) if available(n, min_ready, now) => out.delete.push(*o),
            ([n], [_]) => {
                out.waiting |= pod_ready(n);
                surging += 1;
            }
            // More than one of a kind: manage cleans up; it counts as surging.
            _ => surging += 1,
        }
    }
    let room = usize::try_from((max_surge - surging).max(0)).unwrap_or(0);
    out.create.extend(candidates.into_iter().take(room));
    out
}
