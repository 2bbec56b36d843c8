//! The strategies: upstream's `rolloutRolling` (scale the new set up within
//! maxSurge, old sets down within maxUnavailable), `rolloutRecreate` (old
//! sets to zero, wait for their pods to go, then the new set), and `scale`
//! (a replica change spread proportionally over the active sets).

use std::cmp::Ordering;

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::Pod;
use wasmlet_sdk::controllers::controller_of;
use wasmlet_sdk::prelude::*;

use crate::sets::{Run, by_age};
use crate::util::{
    desired_annotation, is_rolling, max_annotation, max_surge, max_unavailable, replicas,
    rs_replicas, rs_status,
};

/// `NewRSNewReplicas`: how big the new set may be now.
pub fn new_rs_new_replicas(d: &Deployment, all: &[&ReplicaSet], new_rs: &ReplicaSet) -> i32 {
    if !is_rolling(d) {
        return replicas(d);
    }
    let current: i32 = all.iter().map(|rs| rs_replicas(rs)).sum();
    let max_total = replicas(d) + max_surge(d);
    if current >= max_total {
        return rs_replicas(new_rs);
    }
    let up = (max_total - current).min(replicas(d) - rs_replicas(new_rs));
    rs_replicas(new_rs) + up
}

fn active(rs: &ReplicaSet) -> bool {
    rs_replicas(rs) > 0
}

impl Run<'_> {
    fn refs(&self, idx: &[usize]) -> Vec<&ReplicaSet> {
        idx.iter().map(|i| &self.sets[*i]).collect()
    }

    fn all_idx(&self, new: Option<usize>) -> Vec<usize> {
        let mut v = self.olds(new);
        v.extend(new);
        v
    }

    /// `rolloutRolling` (without the status write); whether anything scaled.
    pub fn rolling(&mut self) -> Result<Option<usize>, Error> {
        let new = self.new_set(true)?.expect("created when missing");
        let d = self.d;
        // reconcileNewReplicaSet
        let want = replicas(d);
        let have = rs_replicas(&self.sets[new]);
        if have > want {
            if self.scale(new, want)? {
                return Ok(Some(new));
            }
        } else if have < want {
            let all_idx = self.all_idx(Some(new));
            let n = new_rs_new_replicas(d, &self.refs(&all_idx), &self.sets[new]);
            if self.scale(new, n)? {
                return Ok(Some(new));
            }
        }
        // reconcileOldReplicaSets
        let mut olds: Vec<usize> = self
            .olds(Some(new))
            .into_iter()
            .filter(|i| active(&self.sets[*i]))
            .collect();
        let old_count: i32 = olds.iter().map(|i| rs_replicas(&self.sets[*i])).sum();
        if old_count == 0 {
            self.finish(Some(new))?;
            return Ok(Some(new));
        }
        let all_count: i32 = self
            .all_idx(Some(new))
            .iter()
            .map(|i| rs_replicas(&self.sets[*i]))
            .sum();
        let min_available = want - max_unavailable(d);
        let new_rs = &self.sets[new];
        let new_unavailable =
            rs_replicas(new_rs) - rs_status(new_rs).available_replicas.unwrap_or(0);
        let max_scaled_down = all_count - min_available - new_unavailable;
        if max_scaled_down <= 0 {
            self.finish(Some(new))?;
            return Ok(Some(new));
        }
        olds.sort_by(|a, b| by_age(&self.sets[*a], &self.sets[*b]));
        // cleanupUnhealthyReplicas
        let mut cleaned = 0;
        for &i in &olds {
            if cleaned >= max_scaled_down {
                break;
            }
            let rs = &self.sets[i];
            let (size, available) = (
                rs_replicas(rs),
                rs_status(rs).available_replicas.unwrap_or(0),
            );
            if size == 0 || size == available {
                continue;
            }
            let down = (max_scaled_down - cleaned).min(size - available);
            self.scale(i, size - down)?;
            cleaned += down;
        }
        // scaleDownOldReplicaSetsForRollingUpdate. A set's available count
        // is clamped to its size: right after a scale-down its status may
        // still count pods that are going away (upstream reads it as is).
        let available: i32 = self
            .all_idx(Some(new))
            .iter()
            .map(|i| {
                let rs = &self.sets[*i];
                rs_status(rs)
                    .available_replicas
                    .unwrap_or(0)
                    .min(rs_replicas(rs))
            })
            .sum();
        let mut scaled_down = 0;
        if available > min_available {
            let total = available - min_available;
            for &i in &olds {
                if scaled_down >= total {
                    break;
                }
                let size = rs_replicas(&self.sets[i]);
                if size == 0 {
                    continue;
                }
                let down = size.min(total - scaled_down);
                self.scale(i, size - down)?;
                scaled_down += down;
            }
        }
        if cleaned + scaled_down == 0 {
            self.finish(Some(new))?;
        }
        Ok(Some(new))
    }

    /// Cleanup of old revisions once the rollout is complete.
    fn finish(&mut self, new: Option<usize>) -> Result<(), Error> {
        let st = self.d.status.clone().unwrap_or_default();
        if crate::status::complete(self.d, &st) {
            self.cleanup(new)?;
        }
        Ok(())
    }

    /// `rolloutRecreate` (without the status write).
    pub fn recreate(&mut self, pods: &[Pod]) -> Result<Option<usize>, Error> {
        let mut new = self.new_set(false)?;
        let mut scaled = false;
        for i in self.olds(new) {
            if active(&self.sets[i]) {
                self.scale(i, 0)?;
                scaled = true;
            }
        }
        if scaled {
            return Ok(new);
        }
        if self.old_pods_running(new, pods) {
            return Ok(new);
        }
        if new.is_none() {
            new = self.new_set(true)?;
        }
        let i = new.expect("created when missing");
        self.scale(i, replicas(self.d))?;
        self.finish(new)?;
        Ok(new)
    }

    /// `oldPodsRunning`: old sets still count pods, or pods of theirs
    /// (terminating ones included) have not finished.
    fn old_pods_running(&self, new: Option<usize>, pods: &[Pod]) -> bool {
        if self
            .olds(new)
            .iter()
            .any(|i| rs_status(&self.sets[*i]).replicas > 0)
        {
            return true;
        }
        let new_uid = new.and_then(|i| self.sets[i].metadata.uid.clone());
        let old_uids: Vec<String> = self
            .olds(new)
            .into_iter()
            .filter_map(|i| self.sets[i].metadata.uid.clone())
            .collect();
        pods.iter().any(|p| {
            let Some(owner) = controller_of(&p.metadata) else {
                return false;
            };
            let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
            Some(&owner.uid) != new_uid.as_ref()
                && old_uids.contains(&owner.uid)
                && !matches!(phase, Some("Failed" | "Succeeded"))
        })
    }

    /// `isScalingEvent`: an active set was sized for another replica count.
    pub fn is_scaling_event(&self, new: Option<usize>) -> bool {
        self.all_idx(new).into_iter().any(|i| {
            let rs = &self.sets[i];
            active(rs) && desired_annotation(rs).is_some_and(|n| n != replicas(self.d))
        })
    }

    /// `scale`: the replica count changed (or the Deployment is paused).
    pub fn scale_all(&mut self, new: Option<usize>) -> Result<(), Error> {
        let d = self.d;
        let mut olds = self.olds(new);
        // FindActiveOrLatest
        olds.sort_by(|a, b| by_age(&self.sets[*b], &self.sets[*a]));
        let mut all = olds.clone();
        all.extend(new);
        let actives: Vec<usize> = all
            .iter()
            .copied()
            .filter(|i| active(&self.sets[*i]))
            .collect();
        let target = match actives.len() {
            0 => new.or_else(|| olds.first().copied()),
            1 => Some(actives[0]),
            _ => None,
        };
        if actives.len() <= 1 {
            if let Some(i) = target
                && rs_replicas(&self.sets[i]) != replicas(d)
            {
                self.scale(i, replicas(d))?;
            }
            return Ok(());
        }
        // IsSaturated: the new set holds everything; old sets go to zero.
        if let Some(n) = new {
            let rs = &self.sets[n];
            if rs_replicas(rs) == replicas(d)
                && desired_annotation(rs) == Some(replicas(d))
                && rs_status(rs).available_replicas.unwrap_or(0) == replicas(d)
            {
                for i in actives.into_iter().filter(|i| Some(*i) != new) {
                    self.scale(i, 0)?;
                }
                return Ok(());
            }
        }
        if !is_rolling(d) {
            return Ok(());
        }
        let total: i32 = actives.iter().map(|i| rs_replicas(&self.sets[*i])).sum();
        let allowed = if replicas(d) > 0 { self.max_total() } else { 0 };
        let to_add = allowed - total;
        let mut order = actives;
        let newer_first = to_add > 0;
        order.sort_by(|a, b| {
            let (x, y) = (&self.sets[*a], &self.sets[*b]);
            rs_replicas(y).cmp(&rs_replicas(x)).then_with(|| {
                if newer_first {
                    by_age(y, x)
                } else {
                    by_age(x, y)
                }
            })
        });
        let mut added = 0;
        let mut sizes: Vec<i32> = Vec::new();
        for &i in &order {
            let rs = &self.sets[i];
            if to_add != 0 {
                let p = self.proportion(rs, to_add, added);
                sizes.push(rs_replicas(rs) + p);
                added += p;
            } else {
                sizes.push(rs_replicas(rs));
            }
        }
        for (k, &i) in order.iter().enumerate() {
            if k == 0 && to_add != 0 {
                sizes[0] = (sizes[0] + to_add - added).max(0);
            }
            self.scale(i, sizes[k])?;
        }
        Ok(())
    }

    /// `GetReplicaSetProportion`.
    fn proportion(&self, rs: &ReplicaSet, to_add: i32, added: i32) -> i32 {
        if rs_replicas(rs) == 0 || to_add == 0 || to_add == added {
            return 0;
        }
        let fraction = if replicas(self.d) == 0 {
            -rs_replicas(rs)
        } else {
            let target = f64::from(self.max_total());
            let annotated = max_annotation(rs)
                .unwrap_or_else(|| self.d.status.as_ref().and_then(|s| s.replicas).unwrap_or(0));
            if annotated == 0 {
                0
            } else {
                let size = f64::from(rs_replicas(rs)) * target / f64::from(annotated);
                size.round() as i32 - rs_replicas(rs)
            }
        };
        let allowed = to_add - added;
        match to_add.cmp(&0) {
            Ordering::Greater => fraction.min(allowed),
            _ => fraction.max(allowed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_new_set_grows_within_max_surge() {
        let d: Deployment = serde_json::from_value(json!({"spec": {"replicas": 4, "selector": {}, "template": {},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}}}))
        .unwrap();
        let rs = |n: i32| -> ReplicaSet {
            serde_json::from_value(json!({"spec": {"replicas": n, "selector": {}}})).unwrap()
        };
        let (old, new) = (rs(4), rs(0));
        assert_eq!(new_rs_new_replicas(&d, &[&old, &new], &new), 1);
        let (old, new) = (rs(3), rs(1));
        assert_eq!(new_rs_new_replicas(&d, &[&old, &new], &new), 2);
        let (old, new) = (rs(4), rs(1));
        assert_eq!(new_rs_new_replicas(&d, &[&old, &new], &new), 1);
        let recreate: Deployment = serde_json::from_value(
            json!({"spec": {"replicas": 4, "selector": {}, "template": {},
            "strategy": {"type": "Recreate"}}}),
        )
        .unwrap();
        assert_eq!(new_rs_new_replicas(&recreate, &[&old], &new), 4);
    }
}
