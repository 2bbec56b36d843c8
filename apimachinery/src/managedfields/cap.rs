//! Upstream's cap on `Update` entries (`capManagersManager`): past
//! [`MAX_UPDATERS`], the oldest are merged, per API version, into one
//! `ancient-changes` entry, so that an object many clients write keeps a
//! bounded `managedFields` (each entry is a whole field set).

use std::collections::HashMap;

use super::entry::{Entry, identifier};

/// Upstream `DefaultMaxUpdateManagers`.
pub(super) const MAX_UPDATERS: usize = 10;

/// The manager of the merged entries.
pub(super) const ANCIENT: &str = "ancient-changes";

fn secs(e: &Entry) -> i64 {
    e.sort_key().1
}

/// Merges the oldest `Update` entries of `managers` (by time, then identity)
/// into per-version `ancient-changes` entries until at most `max` remain.
pub(super) fn cap_updaters(managers: &mut Vec<Entry>, max: usize) {
    let mut updaters: Vec<(i64, String)> = managers
        .iter()
        .filter(|e| e.operation == "Update")
        .map(|e| (secs(e), e.id()))
        .collect();
    if updaters.len() <= max {
        return;
    }
    updaters.sort();
    let mut first_of_version: HashMap<String, String> = HashMap::new();
    let mut length = updaters.len();
    for (_, id) in updaters {
        if length <= max {
            break;
        }
        let Some(pos) = managers.iter().position(|e| e.id() == id) else {
            continue;
        };
        let version = managers[pos].api_version.clone();
        let bucket = identifier(ANCIENT, "Update", &version, "");
        let Some(first) = first_of_version.get(&version).cloned() else {
            first_of_version.insert(version, id);
            continue;
        };
        if id == bucket {
            // The bucket itself: nothing to merge it into (upstream would drop it).
            continue;
        }
        if !managers.iter().any(|e| e.id() == bucket)
            && let Some(f) = managers.iter_mut().find(|e| e.id() == first)
        {
            f.manager = ANCIENT.into();
            f.subresource.clear();
        }
        let merged = managers.remove(pos);
        if let Some(b) = managers.iter_mut().find(|e| e.id() == bucket) {
            b.set = b.set.union(&merged.set);
            b.time = merged.time;
        }
        length -= 1;
    }
}
