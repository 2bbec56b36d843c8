//! The set's ControllerRevisions: finding or making the update revision
//! (upstream's `getStatefulSetRevisions`, with `CreateControllerRevision`'s
//! collision loop) and trimming history to `revisionHistoryLimit`
//! (`truncateHistory`).

use std::collections::BTreeSet;

use k8s_openapi::api::apps::v1::{ControllerRevision, StatefulSet};
use k8s_openapi::api::core::v1::Pod;
use wasmlet_sdk::prelude::*;

use crate::pod::revision_of;
use crate::revision::{equal, new_revision};

/// How many hash collisions in a row are tried before giving up for now.
const MAX_COLLISIONS: i32 = 64;

/// Oldest first, as upstream's `SortControllerRevisions` (number, then name).
pub fn sort(revisions: &mut [ControllerRevision]) {
    revisions.sort_by(|a, b| (a.revision, &a.metadata.name).cmp(&(b.revision, &b.metadata.name)));
}

/// The current and update revisions of `set` among its `revisions` (sorted),
/// creating or renumbering the update revision as needed. `collisions` is the
/// set's collision count, raised when a name is taken by different data.
pub fn current_and_update(
    client: &Client,
    set: &StatefulSet,
    revisions: &[ControllerRevision],
    collisions: &mut i32,
) -> Result<(ControllerRevision, ControllerRevision), Error> {
    let next = revisions.last().map_or(1, |r| r.revision + 1);
    let candidate = new_revision(set, next, *collisions);
    let last_equal = revisions.iter().rev().find(|r| equal(r, &candidate));
    let update = match last_equal {
        Some(r) if revisions.last().map(|l| &l.metadata.name) == Some(&r.metadata.name) => {
            r.clone()
        }
        // A rollback to an older template: that revision becomes the newest.
        Some(r) => {
            let ns = r.metadata.namespace.clone().unwrap_or_default();
            let name = r.metadata.name.clone().unwrap_or_default();
            client
                .patch::<ControllerRevision>(
                    ns.as_str(),
                    &name,
                    &Patch::merge(serde_json::json!({"revision": next})),
                )
                .map_err(|e| Error::transient("UpdateRevisionFailed", format!("{name}: {e}")))?
        }
        None => create(client, set, next, collisions)?,
    };
    let current_name = set.status.as_ref().and_then(|s| s.current_revision.clone());
    let current = revisions
        .iter()
        .find(|r| r.metadata.name.is_some() && r.metadata.name == current_name)
        .cloned()
        .unwrap_or_else(|| update.clone());
    Ok((current, update))
}

fn create(
    client: &Client,
    set: &StatefulSet,
    number: i64,
    collisions: &mut i32,
) -> Result<ControllerRevision, Error> {
    for _ in 0..MAX_COLLISIONS {
        let rev = new_revision(set, number, *collisions);
        let name = rev.metadata.name.clone().unwrap_or_default();
        match client.create(&rev) {
            Ok(created) => return Ok(created),
            Err(ClientError::Conflict(_)) => {
                let ns = rev.metadata.namespace.clone().unwrap_or_default();
                match client.get_opt::<ControllerRevision>(ns.as_str(), &name)? {
                    Some(existing) if equal(&existing, &rev) => return Ok(existing),
                    Some(_) => *collisions += 1,
                    // Taken, but not yet in the cache: try again when it is.
                    None => {
                        return Err(Error::transient(
                            "RevisionNotCached",
                            format!("ControllerRevision {ns}/{name} exists but is not cached yet"),
                        ));
                    }
                }
            }
            Err(e) => {
                return Err(Error::transient(
                    "CreateRevisionFailed",
                    format!("ControllerRevision {name}: {e}"),
                ));
            }
        }
    }
    Err(Error::transient(
        "HashCollision",
        format!("{MAX_COLLISIONS} ControllerRevision names in a row were taken"),
    ))
}

/// The revisions beyond `limit` that no pod, nor the current or update
/// revision, uses: oldest first (upstream's `truncateHistory`).
pub fn to_delete<'a>(
    revisions: &'a [ControllerRevision],
    pods: &[&Pod],
    current: &str,
    update: &str,
    limit: i32,
) -> Vec<&'a ControllerRevision> {
    let mut live: BTreeSet<&str> = pods.iter().filter_map(|p| revision_of(p)).collect();
    live.insert(current);
    live.insert(update);
    let history: Vec<&ControllerRevision> = revisions
        .iter()
        .filter(|r| !live.contains(r.metadata.name.as_deref().unwrap_or_default()))
        .collect();
    let limit = usize::try_from(limit.max(0)).unwrap_or(0);
    let excess = history.len().saturating_sub(limit);
    history.into_iter().take(excess).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pod::tests::pod_at;
    use serde_json::json;
    use wasmlet_sdk::testing::FakeHost;

    fn set(image: &str, current: Option<&str>, collisions: i32) -> StatefulSet {
        serde_json::from_value(json!({
            "apiVersion": "apps/v1", "kind": "StatefulSet",
            "metadata": {"name": "web", "namespace": "default", "uid": "u1"},
            "spec": {"selector": {}, "template": {"spec": {"containers": [{"name": "c", "image": image}]}}},
            "status": {"replicas": 0, "currentRevision": current, "collisionCount": collisions},
        }))
        .unwrap()
    }

    fn rev(name: &str, n: i64) -> ControllerRevision {
        serde_json::from_value(json!({"metadata": {"name": name}, "revision": n})).unwrap()
    }

    fn stored(host: &FakeHost, ns: &str) -> Vec<ControllerRevision> {
        let _g = host.install();
        let mut v: Vec<ControllerRevision> =
            Client::new().list(&ListParams::namespaced(ns)).unwrap();
        sort(&mut v);
        v
    }

    #[test]
    fn the_first_sync_creates_revision_1_which_is_current_and_update() {
        let host = FakeHost::new();
        let s = set("a", None, 0);
        let (c, u) = {
            let _g = host.install();
            current_and_update(&Client::new(), &s, &[], &mut 0).unwrap()
        };
        assert_eq!(c.metadata.name, u.metadata.name);
        assert_eq!(u.revision, 1);
        assert_eq!(stored(&host, "default").len(), 1);
    }

    #[test]
    fn a_new_template_makes_revision_2_and_the_old_one_stays_current() {
        let host = FakeHost::new();
        let a = set("a", None, 0);
        let _g = host.install();
        let (_, r1) = current_and_update(&Client::new(), &a, &[], &mut 0).unwrap();
        let b = set("b", r1.metadata.name.as_deref(), 0);
        let (c, u) =
            current_and_update(&Client::new(), &b, std::slice::from_ref(&r1), &mut 0).unwrap();
        assert_eq!(c.metadata.name, r1.metadata.name);
        assert_eq!(u.revision, 2);
        assert_ne!(u.metadata.name, r1.metadata.name);
        // Back to the first template: the old revision is renumbered, not copied.
        let (_, back) =
            current_and_update(&Client::new(), &a, &[r1.clone(), u.clone()], &mut 0).unwrap();
        assert_eq!(back.metadata.name, r1.metadata.name);
        assert_eq!(back.revision, 3);
    }

    #[test]
    fn a_name_taken_by_other_data_raises_the_collision_count() {
        let host = FakeHost::new();
        let s = set("a", None, 0);
        // Another revision already holds the name this template hashes to.
        let mut squatter = new_revision(&set("other", None, 0), 1, 0);
        squatter.metadata.name = new_revision(&s, 1, 0).metadata.name;
        let mut v = serde_json::to_value(&squatter).unwrap();
        v["apiVersion"] = json!("apps/v1");
        v["kind"] = json!("ControllerRevision");
        host.insert(v);
        let _g = host.install();
        let mut collisions = 0;
        let (_, u) = current_and_update(&Client::new(), &s, &[], &mut collisions).unwrap();
        assert_eq!(collisions, 1);
        assert_eq!(u.metadata.name, new_revision(&s, 1, 1).metadata.name);
    }

    #[test]
    fn history_keeps_live_revisions_and_the_newest_beyond_the_limit() {
        let revs: Vec<_> = (1..=5).map(|n| rev(&format!("web-r{n}"), n)).collect();
        let pod = pod_at("web-0", "web-r2", "Running", true);
        let pods = [&pod];
        let gone: Vec<_> = to_delete(&revs, &pods, "web-r4", "web-r5", 1)
            .iter()
            .map(|r| r.metadata.name.clone().unwrap())
            .collect();
        // Not live: r1, r3; keep 1 (the newest, r3).
        assert_eq!(gone, ["web-r1"]);
        assert!(to_delete(&revs, &pods, "web-r4", "web-r5", 10).is_empty());
    }
}
