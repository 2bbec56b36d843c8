//! The decision: observed state in, at most ONE action and the new status out.
//! Pure (time is an input), so every rule is unit-tested natively.
//!
//! Order of the checks, first match wins: bad spec; final phase of this
//! generation; StatefulSet missing, foreign, or carrying another spec; the
//! set's status not yet for its spec; no budget selecting the pods, or ours
//! not following `maxUnavailable`; a pod on the new revision failing; target
//! reached (done); progress deadline; pause; replaced pods not yet
//! Running+Ready; the eviction interval; service discovery; the budget. Only
//! then one batch of evictions.
//!
//! Service discovery is an external call, so it is asked for only where a
//! decision needs it (judging the last batch done, or the next batch due):
//! a plan without [`Observed::health`] that needs it says so
//! ([`Plan::needs_health`]) and the caller reads Consul and plans again.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use wasmlet_sdk::controllers::{controller_of, pod_ready, scaled_value, selector_matches};

use crate::api::{BuildMetadata, PodInfo, StatefulsetRollout, StatefulsetRolloutStatus};
use crate::spec::{self, BadSpec, SPEC_HASH};

pub const REVISION_LABEL: &str = "controller-revision-hash";
/// How soon to look again while change is expected.
pub const POLL: Duration = Duration::from_secs(2);

pub mod phase {
    pub const INVALID_SPEC: &str = "InvalidSpec";
    pub const CONFLICT: &str = "Conflict";
    pub const CREATING: &str = "CreatingStatefulSet";
    pub const UPDATING: &str = "UpdatingStatefulSet";
    pub const WAITING_FOR_SET: &str = "WaitingForStatefulSet";
    pub const CREATING_BUDGET: &str = "CreatingBudget";
    pub const UPDATING_BUDGET: &str = "UpdatingBudget";
    pub const PAUSED: &str = "Paused";
    pub const WAITING_FOR_PODS: &str = "WaitingForPods";
    pub const WAITING_FOR_SD: &str = "WaitingForServiceDiscovery";
    pub const WAITING_FOR_INTERVAL: &str = "WaitingForInterval";
    pub const WAITING_FOR_BUDGET: &str = "WaitingForBudget";
    pub const ROLLING: &str = "RollingOut";
    pub const DONE: &str = "RolloutDone";
    pub const FAILED: &str = "RolloutFailed";
}

/// Service discovery as last seen (absent when not configured).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Health {
    /// Services with at least one passing instance.
    pub services: Vec<String>,
    /// The fewest passing instances of any configured service.
    pub passing: i32,
    /// Names and IPs seen passing (pod names, node names, addresses).
    pub members: Vec<String>,
    /// Why it could not be read, if so (holds the rollout).
    pub error: Option<String>,
}

/// Everything a pass looks at.
pub struct Observed<'a> {
    pub sroll: &'a StatefulsetRollout,
    pub set: Option<&'a StatefulSet>,
    /// Pods matching the set's selector (the plan keeps those the set controls).
    pub pods: &'a [Arc<Pod>],
    pub pdbs: &'a [PodDisruptionBudget],
    /// Consul's answer, when read for this pass (see the module docs).
    pub health: Option<&'a Health>,
    pub now: Timestamp,
}

/// The one thing this pass does.
#[derive(Debug, Clone, PartialEq)]
pub enum Act {
    Nothing,
    CreateSet(Box<StatefulSet>),
    /// Replace the set (the current object with the desired spec, owner, hash).
    UpdateSet(Box<StatefulSet>),
    CreateBudget(Box<PodDisruptionBudget>),
    /// Replace our budget (its `maxUnavailable` follows the spec's).
    UpdateBudget(Box<PodDisruptionBudget>),
    /// Evict these pods (one batch), in order; stop at the first refusal.
    Evict(Vec<String>),
}

/// How the `Progressing` condition should read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Progress {
    /// `Some(true)` True, `Some(false)` False, `None` Unknown.
    pub status: Option<bool>,
    pub reason: String,
    pub message: String,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    pub act: Act,
    pub status: StatefulsetRolloutStatus,
    pub progress: Progress,
    /// A Warning Event to record: (reason, note).
    pub warning: Option<(String, String)>,
    pub requeue: Option<Duration>,
    /// The decision needs service discovery's answer, which this pass did
    /// not read: read it and plan again (nothing else in this plan counts).
    pub needs_health: bool,
}

impl Plan {
    fn new(status: StatefulsetRolloutStatus) -> Self {
        Plan {
            act: Act::Nothing,
            status,
            progress: Progress {
                status: Some(true),
                reason: String::new(),
                message: String::new(),
            },
            warning: None,
            requeue: None,
            needs_health: false,
        }
    }

    /// A plan that only asks for service discovery's answer.
    fn needs_health(status: StatefulsetRolloutStatus) -> Self {
        let mut p = Plan::new(status);
        p.needs_health = true;
        p
    }

    /// Sets the phase, its reason and the condition reading; `Progressing` is
    /// True while moving or done, False when failed, Unknown when paused.
    fn at(mut self, phase: &str, reason: impl Into<String>) -> Self {
        let reason = reason.into();
        self.status.phase = phase.to_owned();
        self.status.reason = reason.clone();
        let status = match phase {
            phase::FAILED | phase::INVALID_SPEC | phase::CONFLICT => Some(false),
            phase::PAUSED => None,
            _ => Some(true),
        };
        self.progress = Progress {
            status,
            reason: phase.to_owned(),
            message: reason,
        };
        self
    }

    fn act(mut self, act: Act) -> Self {
        self.act = act;
        self
    }

    fn requeue(mut self, after: Duration) -> Self {
        self.requeue = Some(after);
        self
    }
}

fn ts(t: Timestamp) -> String {
    t.to_string()
}

fn parse_ts(s: Option<&str>) -> Option<Timestamp> {
    s?.parse().ok()
}

/// Whether `phase` ends a rollout until the spec changes.
pub fn is_final(phase: &str) -> bool {
    phase == phase::DONE || phase == phase::FAILED
}

/// The decision for one pass.
pub fn plan(obs: &Observed) -> Plan {
    let sroll = obs.sroll;
    let generation = sroll.metadata.generation.unwrap_or(0);
    let prev = sroll.status.clone().unwrap_or_default();
    let mut status = prev.clone();
    status.rollout_identity = sroll.spec.rollout_identity.clone();
    status.last_updated = Some(ts(obs.now));
    status.reconcile_after = None;
    let new_generation = prev.observed_generation != Some(generation);
    if new_generation || status.last_progress_time.is_none() {
        status.last_progress_time = Some(ts(obs.now));
    }
    if new_generation {
        // A new spec (or rolloutIdentity) is a new rollout.
        status.final_generation = None;
        status.callback_attempts = 0;
        status.next_callback_time = None;
    }
    let want = match spec::desired(sroll) {
        Ok(w) => w,
        Err(BadSpec { field, message }) => {
            let why = format!("{field}: {message}");
            let mut p = Plan::new(status).at(phase::INVALID_SPEC, why.clone());
            p.warning = Some(("InvalidSpec".into(), why));
            return p;
        }
    };
    let set_name = want.set.metadata.name.clone().unwrap_or_default();
    let template = want
        .set
        .spec
        .as_ref()
        .and_then(|s| s.template.metadata.as_ref());
    status.build_metadata = build_metadata(
        want.set.metadata.annotations.as_ref(),
        template.and_then(|m| m.annotations.as_ref()),
    );
    status.replicas = want.replicas;
    if is_final(&prev.phase) && prev.final_generation == Some(generation) && !new_generation {
        // Final until the spec or rolloutIdentity changes: report, touch nothing.
        if let Some(set) = obs.set {
            observe_pods(&mut status, set, obs);
        }
        let mut p = Plan::new(status);
        p.progress = Progress {
            status: Some(prev.phase == phase::DONE),
            reason: prev.phase.clone(),
            message: prev.reason.clone(),
        };
        return p;
    }

    // --- the StatefulSet --------------------------------------------------------
    let Some(set) = obs.set else {
        status.deleted = status.deleted || prev.statefulset_name.as_deref() == Some(&set_name);
        status.statefulset_name = Some(set_name.clone());
        status.statefulset_spec_current = false;
        let why = if status.deleted {
            format!("StatefulSet {set_name} was deleted; recreating it")
        } else {
            format!("creating StatefulSet {set_name}")
        };
        return Plan::new(status)
            .at(phase::CREATING, why)
            .act(Act::CreateSet(Box::new(want.set.clone())))
            .requeue(POLL);
    };
    status.statefulset_name = Some(set_name.clone());
    let sroll_uid = sroll.metadata.uid.clone().unwrap_or_default();
    if let Some(c) = controller_of(&set.metadata)
        && c.uid != sroll_uid
    {
        let why = format!(
            "StatefulSet {set_name} is controlled by {} {}; refusing to touch it",
            c.kind, c.name
        );
        let mut p = Plan::new(status).at(phase::CONFLICT, why.clone());
        p.warning = Some(("StatefulSetNotOwned".into(), why));
        return p;
    }
    let current_hash = set
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(SPEC_HASH));
    if current_hash != Some(&want.hash) || controller_of(&set.metadata).is_none() {
        status.statefulset_spec_current = false;
        let mut updated = set.clone();
        updated.spec = want.set.spec.clone();
        let meta = &mut updated.metadata;
        meta.labels = want.set.metadata.labels.clone().or(meta.labels.take());
        let annotations = meta.annotations.get_or_insert_with(Default::default);
        annotations.extend(want.set.metadata.annotations.clone().unwrap_or_default());
        meta.owner_references = want.set.metadata.owner_references.clone();
        updated.status = None;
        return Plan::new(status)
            .at(
                phase::UPDATING,
                format!("applying the new spec to StatefulSet {set_name}"),
            )
            .act(Act::UpdateSet(Box::new(updated)))
            .requeue(POLL);
    }
    status.statefulset_spec_current = true;
    let set_status = set.status.as_ref();
    let observed = set_status.and_then(|s| s.observed_generation) >= set.metadata.generation;
    let update_revision = set_status.and_then(|s| s.update_revision.clone());
    let Some(update_revision) = update_revision.filter(|_| observed) else {
        return Plan::new(status)
            .at(
                phase::WAITING_FOR_SET,
                format!("waiting for StatefulSet {set_name} to observe its spec"),
            )
            .requeue(POLL);
    };

    // --- the budget -------------------------------------------------------------
    let labels = want
        .set
        .spec
        .as_ref()
        .and_then(|s| s.template.metadata.as_ref())
        .and_then(|m| m.labels.clone());
    let pdb = obs.pdbs.iter().find(|b| {
        b.metadata.deletion_timestamp.is_none()
            && selector_matches(
                b.spec.as_ref().and_then(|s| s.selector.as_ref()),
                labels.as_ref(),
            )
    });
    let Some(pdb) = pdb else {
        let budget = spec::budget(sroll, &want);
        let name = budget.metadata.name.clone().unwrap_or_default();
        return Plan::new(status)
            .at(
                phase::CREATING_BUDGET,
                format!("no PodDisruptionBudget selects the pods; creating {name}"),
            )
            .act(Act::CreateBudget(Box::new(budget)))
            .requeue(POLL);
    };
    // Ours follows `maxUnavailable`; a user's own budget is used as it is.
    if let Some(updated) = spec::budget_update(sroll, &want, pdb) {
        let name = pdb.metadata.name.clone().unwrap_or_default();
        return Plan::new(status)
            .at(
                phase::UPDATING_BUDGET,
                format!(
                    "setting maxUnavailable of PodDisruptionBudget {name} to {}",
                    int_or_string(&want.max_unavailable)
                ),
            )
            .act(Act::UpdateBudget(Box::new(updated)))
            .requeue(POLL);
    }

    // --- the pods ---------------------------------------------------------------
    let pods = observe_pods(&mut status, set, obs);
    let updated: Vec<&&Pod> = pods
        .iter()
        .filter(|p| !deleting(p) && revision(p) == update_revision)
        .collect();
    let updated_ready = updated.iter().filter(|p| running_ready(p)).count() as i32;
    let prev_progress = (prev.updated_replicas, prev.ready_replicas);
    if (status.updated_replicas, status.ready_replicas) != prev_progress
        && status.updated_replicas >= prev.updated_replicas
    {
        status.last_progress_time = Some(ts(obs.now));
    }
    if let Some((pod, why)) = updated.iter().find_map(|p| failing(p).map(|w| (p, w))) {
        let name = pod.metadata.name.clone().unwrap_or_default();
        return finish(
            status,
            generation,
            phase::FAILED,
            format!("pod {name} on the new revision is failing: {why}"),
        );
    }
    let settled = pods.iter().all(|p| !deleting(p)) && pods.len() as i32 >= want.replicas;
    let gated = sroll.spec.service_discovery.is_some();
    let health_ok = health_passes(obs.health, status.ready_replicas);
    let target_reached =
        updated.len() as i32 >= want.target && updated_ready == updated.len() as i32 && settled;
    if target_reached && gated && obs.health.is_none() {
        return Plan::needs_health(status);
    }
    if target_reached && health_ok.is_ok() {
        let why = format!(
            "{} of {} pods run the new revision ({}% asked)",
            updated.len(),
            want.replicas,
            want.percent
        );
        return finish(status, generation, phase::DONE, why);
    }
    if let (Some(deadline), Some(since)) = (
        sroll.spec.progress_deadline_seconds,
        parse_ts(status.last_progress_time.as_deref()),
    ) && !sroll.spec.pause_requested
        && obs.now.duration_since(since) > SignedDuration::from_secs(deadline)
    {
        let mut why = format!("no progress for {deadline}s (progressDeadlineSeconds)");
        if let Err(sd) = &health_ok {
            why.push_str(&format!("; {sd}"));
        } else if obs.health.is_none() && prev.phase == phase::WAITING_FOR_SD {
            why.push_str(&format!("; {}", prev.reason));
        }
        return finish(status, generation, phase::FAILED, why);
    }
    if sroll.spec.pause_requested {
        status.paused = true;
        // The deadline does not run while paused (the clock restarts on resume);
        // no timestamp here, so a paused pass writes nothing new.
        status.last_progress_time = None;
        let plan = Plan::new(status).at(
            phase::PAUSED,
            format!(
                "paused at {} of {} pods on the new revision",
                updated.len(),
                want.replicas
            ),
        );
        // The batch in flight is followed until it settles (no pod event
        // wakes the operator); then nothing until the spec changes.
        return if updated_ready < updated.len() as i32 || !settled {
            plan.requeue(POLL)
        } else {
            plan
        };
    }
    status.paused = false;
    if updated_ready < updated.len() as i32 || !settled {
        return Plan::new(status)
            .at(
                phase::WAITING_FOR_PODS,
                "waiting for replaced pods to be Running and Ready",
            )
            .requeue(POLL);
    }
    let interval = sroll.spec.min_pod_eviction_interval_seconds.unwrap_or(0);
    if let Some(last) = parse_ts(prev.last_eviction_time.as_deref()) {
        let next = last + SignedDuration::from_secs(interval);
        if obs.now < next {
            let wait = next.duration_since(obs.now).unsigned_abs();
            status.reconcile_after = Some(wait.as_secs() as i64 + 1);
            return Plan::new(status)
                .at(
                    phase::WAITING_FOR_INTERVAL,
                    format!("next batch after minPodEvictionIntervalSeconds ({interval}s)"),
                )
                .requeue(wait + Duration::from_millis(200));
        }
    }
    // The next batch is due: now service discovery is worth asking.
    if gated && obs.health.is_none() {
        return Plan::needs_health(status);
    }
    if let Err(why) = health_ok {
        return Plan::new(status)
            .at(phase::WAITING_FOR_SD, why)
            .requeue(Duration::from_secs(5));
    }
    let mut old: Vec<&&Pod> = pods
        .iter()
        .filter(|p| !deleting(p) && revision(p) != update_revision)
        .collect();
    // From the top ordinal down, as the StatefulSet controller would.
    old.sort_by_key(|p| std::cmp::Reverse(ordinal(p)));
    let (unready, ready): (Vec<&&Pod>, Vec<&&Pod>) =
        old.into_iter().partition(|p| !running_ready(p));
    // Unready old pods cost no availability: replaced first, while the budget
    // is healthy (the Eviction API's default unhealthyPodEvictionPolicy).
    let (free, allowed) = budget_allows(pdb, want.replicas, status.ready_replicas);
    let names: Vec<String> = unready
        .iter()
        .take(if free { usize::MAX } else { 0 })
        .chain(ready.iter().take(allowed.max(0) as usize))
        .take((want.target - updated.len() as i32).max(0) as usize)
        .filter_map(|p| p.metadata.name.clone())
        .collect();
    if names.is_empty() {
        let name = pdb.metadata.name.clone().unwrap_or_default();
        return Plan::new(status)
            .at(
                phase::WAITING_FOR_BUDGET,
                format!("PodDisruptionBudget {name} allows no disruption now"),
            )
            .requeue(POLL);
    }
    let why = format!(
        "evicting {} ({} of {} on the new revision, target {})",
        names.join(", "),
        updated.len(),
        want.replicas,
        want.target
    );
    Plan::new(status)
        .at(phase::ROLLING, why)
        .act(Act::Evict(names))
        .requeue(POLL)
}

fn finish(mut status: StatefulsetRolloutStatus, generation: i64, phase: &str, why: String) -> Plan {
    status.final_generation = Some(generation);
    status.paused = false;
    Plan::new(status).at(phase, why)
}

/// Whether unready pods may go (the budget is healthy), and how many ready
/// pods may go now: what the budget's status allows, and never more than its
/// own limit minus the pods already unavailable in our view (a stale budget
/// status cannot make us overshoot).
fn budget_allows(pdb: &PodDisruptionBudget, replicas: i32, ready: i32) -> (bool, i32) {
    let Some(st) = pdb.status.as_ref() else {
        return (false, 0);
    };
    if st.observed_generation < pdb.metadata.generation {
        return (false, 0);
    }
    let spec = pdb.spec.as_ref();
    let limit = if let Some(mu) = spec.and_then(|s| s.max_unavailable.as_ref()) {
        scaled_value(mu, replicas, true).unwrap_or(0)
    } else if let Some(ma) = spec.and_then(|s| s.min_available.as_ref()) {
        replicas - scaled_value(ma, replicas, true).unwrap_or(replicas)
    } else {
        0
    };
    let unavailable = (replicas - ready).max(0);
    (
        st.current_healthy >= st.desired_healthy,
        st.disruptions_allowed.min(limit - unavailable),
    )
}

fn health_passes(health: Option<&Health>, ready: i32) -> Result<(), String> {
    let Some(h) = health else { return Ok(()) };
    if let Some(e) = &h.error {
        return Err(format!("service discovery: {e}"));
    }
    if h.passing < ready {
        return Err(format!(
            "service discovery: {} of {ready} ready pods pass their health checks",
            h.passing
        ));
    }
    Ok(())
}

/// Fills the pod fields of `status` from the pods `set` controls; returns them.
fn observe_pods<'a>(
    status: &mut StatefulsetRolloutStatus,
    set: &StatefulSet,
    obs: &Observed<'a>,
) -> Vec<&'a Pod> {
    let uid = set.metadata.uid.clone().unwrap_or_default();
    let mut pods: Vec<&Pod> = obs
        .pods
        .iter()
        .map(|p| &**p)
        .filter(|p| controller_of(&p.metadata).is_some_and(|c| c.uid == uid))
        .collect();
    pods.sort_by_key(|p| ordinal(p));
    let update_revision = set
        .status
        .as_ref()
        .and_then(|s| s.update_revision.clone())
        .unwrap_or_default();
    let replicas = status.replicas.max(1);
    let live = pods.iter().filter(|p| !deleting(p));
    let updated = live
        .clone()
        .filter(|p| revision(p) == update_revision)
        .count() as i32;
    status.updated_replicas = updated;
    status.ready_replicas = live.filter(|p| running_ready(p)).count() as i32;
    status.percent_deployed = if status.replicas == 0 {
        100
    } else {
        updated * 100 / replicas
    };
    // Service discovery not read this pass: what it said last still stands.
    let before: std::collections::BTreeMap<String, Option<bool>> = status
        .pods
        .iter()
        .map(|p| (p.name.clone(), p.in_service_discovery))
        .collect();
    if let Some(h) = obs.health {
        status.ready_replicas_service_discovery = Some(h.passing);
        status.consul_services = h.services.clone();
    } else if obs.sroll.spec.service_discovery.is_none() {
        status.ready_replicas_service_discovery = None;
        status.consul_services = Vec::new();
    }
    status.pods = pods
        .iter()
        .map(|p| {
            let name = p.metadata.name.clone().unwrap_or_default();
            let ip = p.status.as_ref().and_then(|s| s.pod_ip.clone());
            let seen = match obs.health {
                Some(h) => Some(
                    h.members
                        .iter()
                        .any(|m| *m == name || Some(m) == ip.as_ref()),
                ),
                None => before.get(&name).copied().flatten(),
            };
            PodInfo {
                in_service_discovery: seen,
                name,
                revision: revision(p).to_owned(),
                ready: running_ready(p),
            }
        })
        .collect();
    pods
}

pub fn revision(p: &Pod) -> &str {
    p.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(REVISION_LABEL))
        .map_or("", String::as_str)
}

fn deleting(p: &Pod) -> bool {
    p.metadata.deletion_timestamp.is_some()
}

/// Running, Ready and not being deleted.
pub fn running_ready(p: &Pod) -> bool {
    !deleting(p)
        && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
        && pod_ready(p)
}

fn ordinal(p: &Pod) -> i64 {
    p.metadata
        .name
        .as_deref()
        .and_then(|n| n.rsplit_once('-'))
        .and_then(|(_, o)| o.parse().ok())
        .unwrap_or(-1)
}

/// Why a pod is failing (crash-looping, failed, restarting), if it is.
fn failing(p: &Pod) -> Option<String> {
    let st = p.status.as_ref()?;
    if st.phase.as_deref() == Some("Failed") {
        return Some("phase Failed".into());
    }
    for c in st.container_statuses.iter().flatten() {
        if let Some(w) = c.state.as_ref().and_then(|s| s.waiting.as_ref())
            && w.reason.as_deref() == Some("CrashLoopBackOff")
        {
            return Some(format!("container {} in CrashLoopBackOff", c.name));
        }
        if c.restart_count >= 3 {
            return Some(format!(
                "container {} restarted {} times",
                c.name, c.restart_count
            ));
        }
    }
    None
}

/// The build a rollout ships, from the first annotation (the set's, then
/// its template's) whose key ends in `git-branch` / `git-commit`
/// (`example.com/git-branch`, `deploy.example.com/app-git-commit`), as the
/// README promises.
fn build_metadata(
    set: Option<&std::collections::BTreeMap<String, String>>,
    template: Option<&std::collections::BTreeMap<String, String>>,
) -> Option<BuildMetadata> {
    let find = |suffix: &str| {
        [set, template]
            .into_iter()
            .flatten()
            .flat_map(|m| m.iter())
            .find(|(k, _)| k.ends_with(suffix))
            .map(|(_, v)| v.clone())
    };
    let b = BuildMetadata {
        branch: find("git-branch"),
        commit: find("git-commit"),
    };
    (b.branch.is_some() || b.commit.is_some()).then_some(b)
}

fn int_or_string(v: &k8s_openapi::apimachinery::pkg::util::intstr::IntOrString) -> String {
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    match v {
        IntOrString::Int(n) => n.to_string(),
        IntOrString::String(s) => s.clone(),
    }
}
