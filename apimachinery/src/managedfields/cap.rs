//! Upstream's cap on `Update` entries (`capManagersManager`): past
//! [`MAX_UPDATERS`], the oldest are merged, per API version, into one
//! `ancient-changes` entry, so that an object many clients write keeps a
//! bounded `managedFields` (each entry is a whole field set).
//!
//! Planned first, then done in one pass: a client may send any number of
//! entries, and merging them one by one would cost their number squared.

use std::collections::{HashMap, HashSet};

use super::entry::{Entry, identifier};
use super::fieldpath::Set;

/// Upstream `DefaultMaxUpdateManagers`.
pub(super) const MAX_UPDATERS: usize = 10;

/// The manager of the merged entries.
pub(super) const ANCIENT: &str = "ancient-changes";

/// What merging does to the entries, by identity.
#[derive(Default)]
struct Plan {
    /// Entries merged away, and the bucket each goes into.
    into: HashMap<String, String>,
    /// The first entry of a version that becomes its bucket (none existed).
    renamed: HashSet<String>,
    /// Each bucket's time: that of the newest entry merged into it.
    time: HashMap<String, Option<String>>,
}

/// Merges the oldest `Update` entries of `managers` (by time, then identity)
/// into per-version `ancient-changes` entries until at most `max` remain.
pub(super) fn cap_updaters(managers: &mut Vec<Entry>, max: usize) {
    let mut updaters: Vec<(i64, String, usize)> = managers
        .iter()
        .enumerate()
        .filter(|(_, e)| e.operation == "Update")
        .map(|(i, e)| (e.sort_key().1, e.id(), i))
        .collect();
    if updaters.len() <= max {
        return;
    }
    updaters.sort();
    let plan = plan(managers, &updaters, max);
    let mut merged: HashMap<String, Set> = HashMap::new();
    let mut kept = Vec::with_capacity(managers.len());
    for mut e in managers.drain(..) {
        let id = e.id();
        if let Some(bucket) = plan.into.get(&id) {
            merged.entry(bucket.clone()).or_default().union_with(&e.set);
            continue;
        }
        if plan.renamed.contains(&id) {
            e.manager = ANCIENT.into();
            e.subresource.clear();
        }
        kept.push(e);
    }
    for e in kept.iter_mut() {
        let id = e.id();
        if let Some(set) = merged.remove(&id) {
            e.set.union_with(&set);
            e.time = plan.time.get(&id).cloned().flatten();
        }
    }
    *managers = kept;
}

fn plan(managers: &[Entry], updaters: &[(i64, String, usize)], max: usize) -> Plan {
    let mut buckets: HashSet<String> = managers.iter().map(Entry::id).collect();
    let mut first_of_version: HashMap<&str, &str> = HashMap::new();
    let mut plan = Plan::default();
    let mut length = updaters.len();
    for (_, id, i) in updaters {
        if length <= max {
            break;
        }
        let version = managers[*i].api_version.as_str();
        let bucket = identifier(ANCIENT, "Update", version, "");
        let Some(first) = first_of_version.get(version).copied() else {
            first_of_version.insert(version, id);
            continue;
        };
        if *id == bucket {
            // The bucket itself: nothing to merge it into (upstream would drop it).
            continue;
        }
        if buckets.insert(bucket.clone()) {
            plan.renamed.insert(first.to_string());
        }
        plan.into.insert(id.clone(), bucket.clone());
        plan.time.insert(bucket, managers[*i].time.clone());
        length -= 1;
    }
    plan
}
