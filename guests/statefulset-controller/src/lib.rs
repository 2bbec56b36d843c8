//! The built-in StatefulSet controller (kube-controller-manager's
//! `statefulset` controller), a reconciler of `apps/v1` StatefulSets.
//!
//! Each sync, as upstream's `syncStatefulSet`:
//! 1. finds or makes the update ControllerRevision (`SET-HASH`, see
//!    [`revision`]) and the current one (`status.currentRevision`);
//! 2. plans the pod writes (see [`plan`]): pods `SET-0..N-1` from the right
//!    revision's template (labels `controller-revision-hash`,
//!    `statefulset.kubernetes.io/pod-name`, `apps.kubernetes.io/pod-index`;
//!    hostname = pod name, subdomain = `serviceName`), OrderedReady (one at a
//!    time, each Running, Ready and `minReadySeconds` available before the
//!    next; scale down from the highest ordinal) or Parallel, finished pods
//!    deleted and made again, OnDelete or RollingUpdate (`partition`,
//!    `maxUnavailable`) updates; and carries them out in order;
//! 3. writes the status (`replicas`, `readyReplicas`, `availableReplicas`,
//!    `currentReplicas`, `updatedReplicas`, `currentRevision`,
//!    `updateRevision`, `observedGeneration`, `collisionCount`), completing a
//!    rolling update once every pod is updated and ready;
//! 4. deletes revisions beyond `revisionHistoryLimit` that no pod uses.
//!
//! The host's expectations (manifest: `owns` Pods and ControllerRevisions)
//! hold the next sync of a set until the caches show every pod it created or
//! deleted, so a lagging cache never makes an ordinal twice.
//!
//! Deviations from upstream:
//! - `volumeClaimTemplates` are not supported: such a set gets the condition
//!   `ReplicaFailure=True` (reason `VolumeClaimTemplatesUnsupported`), a
//!   Warning event, and no pods. `persistentVolumeClaimRetentionPolicy` is
//!   ignored for the same reason.
//! - Pods and revisions are the set's when their controller ownerReference
//!   names it: orphans matching the selector are not adopted, nor are pods
//!   released when their labels stop matching.
//! - `maxUnavailable` is honoured whenever it is set (upstream: only with the
//!   `MaxUnavailableStatefulSet` feature gate); unset, updates go one pod at a
//!   time as upstream's default.
//! - The revision hash follows upstream's algorithm over the stored template;
//!   see [`revision`] for where its bytes may differ.
//! - Conditions other than the one above are not written (upstream writes none).

pub mod history;
pub mod plan;
pub mod pod;
pub mod revision;
mod sync;

use std::sync::Arc;

use k8s_openapi::api::apps::v1::StatefulSet;
use wasmlet_sdk::prelude::*;

fn reconcile(set: Arc<StatefulSet>, ctx: &Context) -> Result<Action, Error> {
    sync::sync(&set, ctx, jiff::Timestamp::now())
}

wasmlet_sdk::reconciler!(StatefulSet, reconcile);
