//! A Deployment's ReplicaSets during one call, and the writes that change
//! them: claim (adopt / release), find or create the new set, scale, and
//! clean up old revisions. Scales are merge patches carrying the set's
//! resourceVersion, as upstream's `Update`: a stale set conflicts instead of
//! being overwritten.

use std::cmp::Ordering;

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::{Deployment, DeploymentStatus, ReplicaSet};
use serde_json::{Value, json};
use wasmlet_sdk::controllers::{controller_of, selector_matches};
use wasmlet_sdk::prelude::*;

use crate::status::{PROGRESSING, condition, get, set};
use crate::util::{
    self, HASH_LABEL, REVISION, created, max_revision, max_surge, new_rs_annotations, replicas,
    rs_replicas, same_template,
};

pub struct Run<'a> {
    pub d: &'a Deployment,
    pub ctx: &'a Context,
    pub ns: String,
    pub now: Timestamp,
    /// The status being built (conditions set along the way, as upstream
    /// mutates `d.Status`); written once at the end.
    pub status: DeploymentStatus,
    /// The Deployment's revision annotation to write, if it changes.
    pub revision: Option<String>,
    pub sets: Vec<ReplicaSet>,
}

fn transient(reason: &str, e: impl std::fmt::Display) -> Error {
    Error::transient(reason, e.to_string())
}

/// `ReplicaSetsByCreationTimestamp`.
pub fn by_age(a: &ReplicaSet, b: &ReplicaSet) -> Ordering {
    created(a).cmp(&created(b))
}

impl Run<'_> {
    fn name(&self) -> &str {
        self.d.metadata.name.as_deref().unwrap_or_default()
    }

    fn controller_ref(&self) -> Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "name": self.d.metadata.name,
            "uid": self.d.metadata.uid, "controller": true, "blockOwnerDeletion": true})
    }

    pub fn event(&self, reason: &str, note: String) {
        let _ = self.ctx.event(Event::normal(reason, "Sync").note(note));
    }

    /// `getReplicaSetsForDeployment`: the sets this Deployment owns, adopting
    /// orphans its selector picks and releasing owned ones it no longer does.
    pub fn claim(&mut self) -> Result<(), Error> {
        let client = self.ctx.client();
        let all: Vec<ReplicaSet> = client
            .list(&ListParams::namespaced(&self.ns))
            .map_err(|e| transient("ListReplicaSets", e))?;
        let selector = self.d.spec.as_ref().map(|s| &s.selector);
        let uid = self.d.metadata.uid.clone().unwrap_or_default();
        let deleting = self.d.metadata.deletion_timestamp.is_some();
        for rs in all {
            let name = rs.metadata.name.clone().unwrap_or_default();
            let matches = selector_matches(selector, rs.metadata.labels.as_ref());
            match controller_of(&rs.metadata).map(|r| r.uid.clone()) {
                Some(owner) if owner == uid => {
                    if matches {
                        self.sets.push(rs);
                    } else if !deleting && rs.metadata.deletion_timestamp.is_none() {
                        let patch = json!({"metadata": {"ownerReferences": [{"$patch": "delete", "uid": uid}],
                            "uid": rs.metadata.uid}});
                        match client.patch::<ReplicaSet>(
                            self.ns.as_str(),
                            &name,
                            &Patch::strategic(patch),
                        ) {
                            Ok(_) | Err(ClientError::NotFound) => {}
                            Err(e) => return Err(transient("ReleaseFailed", e)),
                        }
                    }
                }
                Some(_) => {}
                None if matches && !deleting && rs.metadata.deletion_timestamp.is_none() => {
                    let patch = json!({"metadata": {"ownerReferences": [self.controller_ref()],
                        "uid": rs.metadata.uid}});
                    match client.patch::<ReplicaSet>(
                        self.ns.as_str(),
                        &name,
                        &Patch::strategic(patch),
                    ) {
                        Ok(adopted) => self.sets.push(adopted),
                        Err(ClientError::NotFound) => {}
                        Err(e) => return Err(transient("AdoptFailed", e)),
                    }
                }
                None => {}
            }
        }
        Ok(())
    }

    /// `FindNewReplicaSet`: the oldest set whose template is the Deployment's.
    pub fn find_new(&self) -> Option<usize> {
        let mut idx: Vec<usize> = (0..self.sets.len()).collect();
        idx.sort_by(|a, b| by_age(&self.sets[*a], &self.sets[*b]));
        idx.into_iter()
            .find(|i| same_template(self.d, &self.sets[*i]))
    }

    /// Indices of every set but `new`.
    pub fn olds(&self, new: Option<usize>) -> Vec<usize> {
        (0..self.sets.len()).filter(|i| Some(*i) != new).collect()
    }

    /// `getNewReplicaSet`: the new set with its annotations synced, created
    /// when `create` and missing. Updates the revision to write.
    pub fn new_set(&mut self, create: bool) -> Result<Option<usize>, Error> {
        let existing = self.find_new();
        let old: Vec<ReplicaSet> = self
            .olds(existing)
            .into_iter()
            .map(|i| self.sets[i].clone())
            .collect();
        let new_revision = max_revision(&old) + 1;
        if let Some(i) = existing {
            let rs = &self.sets[i];
            let annotations = new_rs_annotations(self.d, rs, new_revision, true);
            let min_ready = self.d.spec.as_ref().and_then(|s| s.min_ready_seconds);
            let rs_min_ready = rs.spec.as_ref().and_then(|s| s.min_ready_seconds);
            if annotations.is_some() || min_ready.unwrap_or(0) != rs_min_ready.unwrap_or(0) {
                let mut patch = json!({"metadata": {"resourceVersion": rs.metadata.resource_version},
                    "spec": {"minReadySeconds": min_ready.unwrap_or(0)}});
                if let Some(a) = annotations {
                    patch["metadata"]["annotations"] = json!(a);
                }
                let name = rs.metadata.name.clone().unwrap_or_default();
                let updated = self
                    .ctx
                    .client()
                    .patch::<ReplicaSet>(self.ns.as_str(), &name, &Patch::merge(patch))
                    .map_err(|e| transient("UpdateReplicaSet", e))?;
                self.sets[i] = updated;
                // Upstream returns here; the next call syncs the revision.
                return Ok(Some(i));
            }
            let rev = util::revision(&self.sets[i]).to_string();
            self.set_revision(rev);
            if util::progress_deadline(self.d).is_some() && get(&self.status, PROGRESSING).is_none()
            {
                let msg = format!(
                    "Found new replica set \"{}\"",
                    self.sets[i].metadata.name.as_deref().unwrap_or_default()
                );
                set(
                    &mut self.status,
                    condition(PROGRESSING, "True", "FoundNewReplicaSet", &msg, self.now),
                );
            }
            return Ok(Some(i));
        }
        if !create {
            return Ok(None);
        }
        let spec = self
            .d
            .spec
            .as_ref()
            .ok_or_else(|| Error::terminal("NoSpec", "the Deployment has no spec"))?;
        let hash = util::template_hash(self.d);
        let mut template = spec.template.clone();
        let mut meta = template.metadata.take().unwrap_or_default();
        meta.labels
            .get_or_insert_with(Default::default)
            .insert(HASH_LABEL.into(), hash.clone());
        template.metadata = Some(meta.clone());
        let mut selector = spec.selector.clone();
        selector
            .match_labels
            .get_or_insert_with(Default::default)
            .insert(HASH_LABEL.into(), hash.clone());
        let name = format!("{}-{hash}", self.name());
        let mut rs: ReplicaSet = serde_json::from_value(json!({
            "apiVersion": "apps/v1", "kind": "ReplicaSet",
            "metadata": {"name": name, "namespace": self.ns, "labels": meta.labels,
                "ownerReferences": [self.controller_ref()]},
            "spec": {"replicas": 0, "minReadySeconds": spec.min_ready_seconds.unwrap_or(0),
                "selector": selector, "template": template},
        }))
        .map_err(|e| Error::terminal("InvalidTemplate", e.to_string()))?;
        let mut all: Vec<&ReplicaSet> = old.iter().collect();
        all.push(&rs);
        let count = crate::rollout::new_rs_new_replicas(self.d, &all, &rs);
        rs.spec.as_mut().expect("set above").replicas = Some(count);
        rs.metadata.annotations = new_rs_annotations(self.d, &rs, new_revision, false);
        let client = self.ctx.client();
        let created = match client.create(&rs) {
            Ok(c) => {
                if count > 0 {
                    self.event(
                        "ScalingReplicaSet",
                        format!("Scaled up replica set {name} from 0 to {count}"),
                    );
                }
                if util::progress_deadline(self.d).is_some() {
                    let msg = format!("Created new replica set \"{name}\"");
                    set(
                        &mut self.status,
                        condition(PROGRESSING, "True", "NewReplicaSetCreated", &msg, self.now),
                    );
                }
                c
            }
            Err(ClientError::Conflict(_)) => {
                // Created by an earlier call whose result the cache lacked, or a collision.
                let found: Option<ReplicaSet> = client
                    .get_opt(self.ns.as_str(), &name)
                    .map_err(|e| transient("GetReplicaSet", e))?;
                match found {
                    Some(f)
                        if controller_of(&f.metadata).map(|r| &r.uid)
                            == self.d.metadata.uid.as_ref()
                            && same_template(self.d, &f) =>
                    {
                        f
                    }
                    _ => {
                        let n = self.status.collision_count.unwrap_or(0) + 1;
                        self.status.collision_count = Some(n);
                        return Err(Error::transient(
                            "HashCollision",
                            format!(
                                "replica set {name} exists with another template; collisionCount is now {n}"
                            ),
                        ));
                    }
                }
            }
            Err(e) => {
                let msg = format!("Failed to create new replica set \"{name}\": {e}");
                if util::progress_deadline(self.d).is_some() {
                    set(
                        &mut self.status,
                        condition(
                            PROGRESSING,
                            "False",
                            "ReplicaSetCreateError",
                            &msg,
                            self.now,
                        ),
                    );
                }
                let _ = self
                    .ctx
                    .event(Event::warning("ReplicaSetCreateError", "Sync").note(msg.clone()));
                return Err(Error::transient("ReplicaSetCreateError", msg));
            }
        };
        self.set_revision(new_revision.to_string());
        self.sets.push(created);
        Ok(Some(self.sets.len() - 1))
    }

    fn set_revision(&mut self, rev: String) {
        let current = self
            .d
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(REVISION));
        if current != Some(&rev) {
            self.revision = Some(rev);
        }
    }

    /// `scaleReplicaSetAndRecordEvent` / `scaleReplicaSet`: whether the size changed.
    pub fn scale(&mut self, i: usize, to: i32) -> Result<bool, Error> {
        let rs = &self.sets[i];
        let from = rs_replicas(rs);
        let mut annotations = rs.metadata.annotations.clone().unwrap_or_default();
        let annotations_changed = util::set_replicas_annotations(&mut annotations, self.d);
        if from == to && !annotations_changed {
            return Ok(false);
        }
        let name = rs.metadata.name.clone().unwrap_or_default();
        let patch = json!({"metadata": {"resourceVersion": rs.metadata.resource_version, "annotations": annotations},
            "spec": {"replicas": to}});
        let updated = self
            .ctx
            .client()
            .patch::<ReplicaSet>(self.ns.as_str(), &name, &Patch::merge(patch))
            .map_err(|e| transient("ScaleReplicaSet", e))?;
        self.sets[i] = updated;
        if from != to {
            let op = if from < to { "up" } else { "down" };
            self.event(
                "ScalingReplicaSet",
                format!("Scaled {op} replica set {name} from {from} to {to}"),
            );
        }
        Ok(from != to)
    }

    /// `cleanupDeployment`: old sets beyond `revisionHistoryLimit`, oldest
    /// revision first, only those fully scaled down.
    pub fn cleanup(&mut self, new: Option<usize>) -> Result<(), Error> {
        let Some(limit) = self.d.spec.as_ref().and_then(|s| s.revision_history_limit) else {
            return Ok(());
        };
        let mut old: Vec<&ReplicaSet> = self
            .olds(new)
            .into_iter()
            .map(|i| &self.sets[i])
            .filter(|rs| rs.metadata.deletion_timestamp.is_none())
            .collect();
        let diff = i32::try_from(old.len()).unwrap_or(i32::MAX) - limit;
        if diff <= 0 {
            return Ok(());
        }
        old.sort_by(|a, b| {
            util::revision(a)
                .cmp(&util::revision(b))
                .then_with(|| by_age(a, b))
        });
        let doomed: Vec<String> = old
            .into_iter()
            .take(usize::try_from(diff).unwrap_or(0))
            .filter(|rs| {
                let st = util::rs_status(rs);
                st.replicas == 0
                    && rs_replicas(rs) == 0
                    && rs.metadata.generation.unwrap_or(0) <= st.observed_generation.unwrap_or(0)
            })
            .filter_map(|rs| rs.metadata.name.clone())
            .collect();
        for name in doomed {
            match self.ctx.client().delete::<ReplicaSet>(
                self.ns.as_str(),
                &name,
                &DeleteParams::default(),
            ) {
                Ok(()) | Err(ClientError::NotFound) => {}
                Err(e) => return Err(transient("DeleteReplicaSet", e)),
            }
        }
        Ok(())
    }

    pub fn max_total(&self) -> i32 {
        replicas(self.d) + max_surge(self.d)
    }
}
