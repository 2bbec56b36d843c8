//! The per-pod data every state shares (Krustlet's `PodState`), kept in the host's
//! state data because each call runs in a fresh instance, and the PodStatus it renders.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use k8s_openapi::api::core::v1::{Container, PodSpec};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use wasmlet_sdk::client::{Client, Event, ObjectRef};
use wasmlet_sdk::provider::{Pod, PodState, StateError};
use wasmlet_sdk::workloads::{self, RunState, WorkloadHandle, WorkloadStatus};

/// kubelet's container restart and image pull back-off: 10 s, doubling, at most 300 s.
pub const BACKOFF_INITIAL_MS: u64 = 10_000;
pub const BACKOFF_MAX_MS: u64 = 300_000;
/// A container that ran this long before exiting restarts with the initial back-off.
pub const BACKOFF_RESET_AFTER_MS: u64 = 600_000;

/// What the runner knows about one pod, across all states.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct PodData {
    /// The pod's uid (volumes, logs and `release-pod` are keyed by it).
    pub uid: String,
    /// RFC 3339; when the runner first saw the pod (`status.startTime`).
    pub start_time: String,
    /// Image reference -> module digest (`workloads.fetch-module`).
    #[serde(default)]
    pub modules: BTreeMap<String, String>,
    /// Pod volume name -> `prepare-volume` id.
    #[serde(default)]
    pub volumes: BTreeMap<String, u64>,
    #[serde(default)]
    pub init: Vec<Ctr>,
    #[serde(default)]
    pub main: Vec<Ctr>,
    /// The last image pull back-off delay (0: none yet).
    #[serde(default)]
    pub image_backoff_ms: u64,
    /// Failed pulls so far (the first shows `ErrImagePull`, later ones `ImagePullBackOff`).
    #[serde(default)]
    pub pull_failures: u32,
}

/// One container (or init container) of the pod.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Ctr {
    pub name: String,
    pub image: String,
    /// The running (or last, until it is restarted) workload.
    #[serde(default)]
    pub handle: Option<WorkloadHandle>,
    /// `wasmlet://<handle>` of the current or last run.
    #[serde(default)]
    pub container_id: Option<String>,
    pub state: CState,
    #[serde(default)]
    pub last: Option<CState>,
    #[serde(default)]
    pub restarts: u32,
    #[serde(default)]
    pub started_once: bool,
    /// The last crash back-off delay (0: none yet).
    #[serde(default)]
    pub backoff_ms: u64,
}

/// A container's state, as `containerStatuses[].state` shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum CState {
    Waiting {
        reason: String,
        message: Option<String>,
    },
    Running {
        started_ms: u64,
    },
    Terminated {
        exit_code: i32,
        reason: String,
        message: Option<String>,
        started_ms: u64,
        finished_ms: u64,
    },
}

impl CState {
    pub fn waiting(reason: &str, message: Option<String>) -> Self {
        CState::Waiting {
            reason: reason.to_owned(),
            message,
        }
    }

    fn to_json(&self) -> Value {
        match self {
            CState::Waiting { reason, message } => {
                let mut w = json!({ "reason": reason });
                if let Some(m) = message {
                    w["message"] = json!(m);
                }
                json!({ "waiting": w })
            }
            CState::Running { started_ms } => {
                json!({ "running": { "startedAt": rfc3339(*started_ms) } })
            }
            CState::Terminated {
                exit_code,
                reason,
                message,
                started_ms,
                finished_ms,
            } => {
                let mut t = json!({
                    "exitCode": exit_code,
                    "reason": reason,
                    "startedAt": rfc3339(*started_ms),
                    "finishedAt": rfc3339(*finished_ms),
                });
                if let Some(m) = message {
                    t["message"] = json!(m);
                }
                json!({ "terminated": t })
            }
        }
    }
}

impl Ctr {
    fn new(c: &Container, default_reason: &str) -> Self {
        Ctr {
            name: c.name.clone(),
            image: c.image.clone().unwrap_or_default(),
            handle: None,
            container_id: None,
            state: CState::waiting(default_reason, None),
            last: None,
            restarts: 0,
            started_once: false,
            backoff_ms: 0,
        }
    }

    pub fn is_running(&self) -> bool {
        matches!(self.state, CState::Running { .. })
    }

    pub fn is_waiting(&self) -> bool {
        matches!(self.state, CState::Waiting { .. })
    }

    /// The exit code, when terminated.
    pub fn exit_code(&self) -> Option<i32> {
        match self.state {
            CState::Terminated { exit_code, .. } => Some(exit_code),
            _ => None,
        }
    }

    pub fn succeeded(&self) -> bool {
        self.exit_code() == Some(0)
    }

    /// Records a spawned workload.
    pub fn started(&mut self, handle: WorkloadHandle, started_ms: u64) {
        if self.started_once {
            self.restarts += 1;
        }
        self.started_once = true;
        self.handle = Some(handle);
        self.container_id = Some(format!("wasmlet://{handle}"));
        self.state = CState::Running { started_ms };
    }

    /// Records a finished workload (`status` is the host's).
    pub fn finished(
        &mut self,
        status: &WorkloadStatus,
        terminating: bool,
        log_tail: Option<String>,
    ) {
        let started_ms = status.started_at_ms;
        let finished_ms = status.finished_at_ms.unwrap_or_else(now_ms);
        let (exit_code, reason, message) = match &status.state {
            RunState::Exited(0) => (0, "Completed".to_owned(), None),
            RunState::Exited(code) => (*code, "Error".to_owned(), log_tail),
            RunState::Failed(msg) => {
                let lower = msg.to_ascii_lowercase();
                let (code, reason) = if lower.contains("memory") {
                    (137, "OOMKilled")
                } else if terminating || lower.contains("kill") || lower.contains("interrupt") {
                    (137, "Error")
                } else if lower.contains("start") || lower.contains("instantiat") {
                    (128, "StartError")
                } else {
                    (1, "Error")
                };
                let message = match log_tail {
                    Some(tail) => format!("{msg}\n{tail}"),
                    None => msg.clone(),
                };
                (code, reason.to_owned(), Some(message))
            }
            RunState::Running => return,
        };
        self.handle = None;
        self.state = CState::Terminated {
            exit_code,
            reason,
            message,
            started_ms,
            finished_ms,
        };
    }

    /// Records a spawn the host refused.
    pub fn failed_to_start(&mut self, message: String) {
        let now = now_ms();
        if self.started_once {
            self.restarts += 1;
        }
        self.started_once = true;
        self.handle = None;
        self.state = CState::Terminated {
            exit_code: 128,
            reason: "StartError".to_owned(),
            message: Some(message),
            started_ms: now,
            finished_ms: now,
        };
    }

    /// How long the last run lasted, if it has ended.
    fn ran_ms(&self) -> Option<u64> {
        match self.state {
            CState::Terminated {
                started_ms,
                finished_ms,
                ..
            } => Some(finished_ms.saturating_sub(started_ms)),
            _ => None,
        }
    }

    /// Puts a terminated container into crash back-off: its termination becomes
    /// `lastState`, it waits with `CrashLoopBackOff`. Returns the delay.
    pub fn back_off(&mut self, pod_key: &str) -> u64 {
        let long_run = self.ran_ms().is_some_and(|ms| ms >= BACKOFF_RESET_AFTER_MS);
        self.backoff_ms = next_backoff(self.backoff_ms, long_run);
        let message = format!(
            "back-off {}s restarting failed container={} pod={pod_key}",
            self.backoff_ms / 1000,
            self.name
        );
        self.last = Some(self.state.clone());
        self.state = CState::waiting("CrashLoopBackOff", Some(message));
        self.backoff_ms
    }

    fn to_json(&self, module: Option<&String>, terminating: bool) -> Value {
        let running = self.is_running();
        let mut s = json!({
            "name": self.name,
            "image": self.image,
            "imageID": module.cloned().unwrap_or_default(),
            "ready": running && !terminating,
            "started": running,
            "restartCount": self.restarts,
            "state": self.state.to_json(),
            "lastState": self.last.as_ref().map_or_else(|| json!({}), CState::to_json),
        });
        if let Some(id) = &self.container_id {
            s["containerID"] = json!(id);
        }
        s
    }
}

/// kubelet's back-off step: the first delay, or double the last (at most 300 s);
/// back to the first after a long run.
pub fn next_backoff(last_ms: u64, reset: bool) -> u64 {
    if last_ms == 0 || reset {
        BACKOFF_INITIAL_MS
    } else {
        (last_ms * 2).min(BACKOFF_MAX_MS)
    }
}

impl PodState for PodData {
    fn new(pod: &Pod) -> Result<Self, StateError> {
        let spec = spec(pod)?;
        let inits = spec.init_containers.as_deref().unwrap_or_default();
        let default_reason = if inits.is_empty() {
            "ContainerCreating"
        } else {
            "PodInitializing"
        };
        Ok(PodData {
            uid: pod_uid(pod),
            start_time: rfc3339(now_ms()),
            init: inits.iter().map(|c| Ctr::new(c, default_reason)).collect(),
            main: spec
                .containers
                .iter()
                .map(|c| Ctr::new(c, default_reason))
                .collect(),
            ..PodData::default()
        })
    }
}

impl PodData {
    /// Every container with a live workload (init ones first).
    pub fn running_handles(&self) -> Vec<WorkloadHandle> {
        self.init
            .iter()
            .chain(&self.main)
            .filter(|c| c.is_running())
            .filter_map(|c| c.handle)
            .collect()
    }

    /// The container (init or main) running `handle`.
    pub fn by_handle(&mut self, handle: WorkloadHandle) -> Option<&mut Ctr> {
        self.init
            .iter_mut()
            .chain(self.main.iter_mut())
            .find(|c| c.handle == Some(handle) && c.is_running())
    }

    /// Asks the host where each running workload stands and records exits. Returns
    /// whether any handle was unknown to the host (it restarted: start them again).
    pub fn refresh(&mut self, pod: &Pod, terminating: bool) -> bool {
        let mut lost = false;
        for c in self.init.iter_mut().chain(self.main.iter_mut()) {
            let Some(h) = c.handle.filter(|_| c.is_running()) else {
                continue;
            };
            match workloads::status(h) {
                Ok(st) if st.state == RunState::Running => {}
                Ok(st) => {
                    let tail = termination_log(pod, &c.name, h, &st);
                    c.finished(&st, terminating, tail);
                }
                Err(workloads::WorkloadError::UnknownHandle) => {
                    lost = true;
                    c.handle = None;
                    c.state = CState::waiting(
                        "ContainerCreating",
                        Some("the node agent restarted".into()),
                    );
                }
                Err(e) => {
                    wasmlet_sdk::log::log(
                        wasmlet_sdk::log::Level::Warn,
                        "workload status failed",
                        &[("container", &c.name), ("error", &format!("{e:?}"))],
                    );
                }
            }
        }
        lost
    }

    /// The first init container that has not completed, if any.
    pub fn pending_init(&self) -> Option<usize> {
        self.init.iter().position(|c| !c.succeeded())
    }
}

/// `FallbackToLogsOnError`: the last 2 KiB of a failed container's output.
fn termination_log(
    pod: &Pod,
    name: &str,
    handle: WorkloadHandle,
    st: &WorkloadStatus,
) -> Option<String> {
    if matches!(st.state, RunState::Exited(0)) {
        return None;
    }
    let c = container(pod, name)?;
    if c.termination_message_policy.as_deref() != Some("FallbackToLogsOnError") {
        return None;
    }
    let bytes = workloads::read_logs(handle, 2048).ok()?;
    let text = String::from_utf8_lossy(&bytes).trim_end().to_owned();
    (!text.is_empty()).then_some(text)
}

/// The pod's spec (every pod has one; a missing one is a handler error).
pub fn spec(pod: &Pod) -> Result<&PodSpec, StateError> {
    pod.spec
        .as_ref()
        .ok_or_else(|| StateError::new("the pod has no spec"))
}

/// A container or init container of the pod, by name.
pub fn container<'a>(pod: &'a Pod, name: &str) -> Option<&'a Container> {
    let spec = pod.spec.as_ref()?;
    spec.init_containers
        .iter()
        .flatten()
        .chain(&spec.containers)
        .find(|c| c.name == name)
}

pub fn pod_uid(pod: &Pod) -> String {
    pod.metadata
        .uid
        .clone()
        .unwrap_or_else(|| format!("{}/{}", namespace(pod), name(pod)))
}

pub fn namespace(pod: &Pod) -> String {
    pod.metadata
        .namespace
        .clone()
        .unwrap_or_else(|| "default".to_owned())
}

pub fn name(pod: &Pod) -> String {
    pod.metadata.name.clone().unwrap_or_default()
}

/// `name_namespace(uid)`, as kubelet names a pod in messages.
pub fn pod_key(pod: &Pod) -> String {
    format!("{}_{}({})", name(pod), namespace(pod), pod_uid(pod))
}

/// `spec.restartPolicy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RestartPolicy {
    Always,
    OnFailure,
    Never,
}

pub fn restart_policy(pod: &Pod) -> RestartPolicy {
    match pod.spec.as_ref().and_then(|s| s.restart_policy.as_deref()) {
        Some("Never") => RestartPolicy::Never,
        Some("OnFailure") => RestartPolicy::OnFailure,
        _ => RestartPolicy::Always,
    }
}

/// Whether a main container that exited with `code` is started again.
pub fn should_restart(policy: RestartPolicy, code: i32) -> bool {
    match policy {
        RestartPolicy::Always => true,
        RestartPolicy::OnFailure => code != 0,
        RestartPolicy::Never => false,
    }
}

/// The grace period of a deleted pod: the delete's, else the spec's, else 30 s.
pub fn grace_period(pod: &Pod) -> Duration {
    let secs = pod
        .metadata
        .deletion_grace_period_seconds
        .or_else(|| {
            pod.spec
                .as_ref()
                .and_then(|s| s.termination_grace_period_seconds)
        })
        .unwrap_or(30);
    Duration::from_secs(u64::try_from(secs).unwrap_or(0))
}

/// Where the pod stands after its main containers changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Containers are running and none waits for a restart.
    KeepRunning,
    /// Some terminated containers are to be restarted; `failed`: one exited non-zero.
    Restart { failed: bool },
    /// All containers ended for good.
    Done { succeeded: bool },
}

pub fn verdict(pod: &Pod, d: &PodData) -> Verdict {
    let policy = restart_policy(pod);
    let restart: Vec<i32> = d
        .main
        .iter()
        .filter_map(Ctr::exit_code)
        .filter(|code| should_restart(policy, *code))
        .collect();
    if !restart.is_empty() {
        return Verdict::Restart {
            failed: restart.iter().any(|c| *c != 0),
        };
    }
    if d.main.iter().any(|c| c.is_running() || c.is_waiting()) {
        return Verdict::KeepRunning;
    }
    Verdict::Done {
        succeeded: d.main.iter().all(Ctr::succeeded),
    }
}

/// kubelet's `getPhase`, from the containers' states.
pub fn phase(pod: &Pod, d: &PodData) -> &'static str {
    let policy = restart_policy(pod);
    if d.pending_init().is_some() {
        let failed = d
            .init
            .iter()
            .any(|c| c.exit_code().is_some_and(|code| code != 0));
        return if failed && policy == RestartPolicy::Never {
            "Failed"
        } else {
            "Pending"
        };
    }
    let (mut running, mut waiting, mut stopped, mut succeeded) = (0, 0, 0, 0);
    for c in &d.main {
        match &c.state {
            CState::Running { .. } => running += 1,
            CState::Terminated { exit_code, .. } => {
                stopped += 1;
                if *exit_code == 0 {
                    succeeded += 1;
                }
            }
            CState::Waiting { .. } if c.last.is_some() => stopped += 1,
            CState::Waiting { .. } => waiting += 1,
        }
    }
    if waiting > 0 {
        "Pending"
    } else if running > 0 {
        "Running"
    } else if stopped > 0 {
        match policy {
            RestartPolicy::Always => "Running",
            _ if stopped == succeeded => "Succeeded",
            RestartPolicy::Never => "Failed",
            RestartPolicy::OnFailure => "Running",
        }
    } else {
        "Pending"
    }
}

/// How a state adjusts the rendered status.
#[derive(Debug, Clone, Default)]
pub struct Render {
    pub phase: Option<&'static str>,
    pub reason: Option<String>,
    pub message: Option<String>,
    /// The pod is being deleted: nothing is ready.
    pub terminating: bool,
}

/// The PodStatus fragment for `d`: phase, conditions, container statuses, startTime.
pub fn render(pod: &Pod, d: &PodData, r: Render) -> Value {
    let phase = r.phase.unwrap_or_else(|| phase(pod, d));
    let terminal = matches!(phase, "Succeeded" | "Failed");
    let module = |c: &Ctr| d.modules.get(&c.image);
    let condition = |type_: &str, ok: bool, reason: &str, message: String| {
        if ok {
            json!({ "type": type_, "status": "True" })
        } else {
            json!({ "type": type_, "status": "False", "reason": reason, "message": message })
        }
    };
    let names = |cs: Vec<&Ctr>| {
        cs.iter()
            .map(|c| c.name.as_str())
            .collect::<Vec<_>>()
            .join(" ")
    };

    let incomplete: Vec<&Ctr> = d.init.iter().filter(|c| !c.succeeded()).collect();
    let unready: Vec<&Ctr> = d
        .main
        .iter()
        .filter(|c| !c.is_running() || r.terminating)
        .collect();
    let ready_reason = if terminal {
        "PodCompleted"
    } else {
        "ContainersNotReady"
    };
    let unready_msg = format!(
        "containers with unready status: [{}]",
        names(unready.clone())
    );
    let mut status = json!({
        "phase": phase,
        "startTime": d.start_time,
        "conditions": [
            { "type": "PodScheduled", "status": "True" },
            condition("Initialized", incomplete.is_empty(), "ContainersNotInitialized",
                format!("containers with incomplete status: [{}]", names(incomplete.clone()))),
            condition("ContainersReady", unready.is_empty(), ready_reason, unready_msg.clone()),
            condition("Ready", unready.is_empty(), ready_reason, unready_msg),
        ],
        "containerStatuses": d.main.iter().map(|c| c.to_json(module(c), r.terminating)).collect::<Vec<_>>(),
    });
    if !d.init.is_empty() {
        status["initContainerStatuses"] = json!(
            d.init
                .iter()
                .map(|c| c.to_json(module(c), r.terminating))
                .collect::<Vec<_>>()
        );
    }
    if let Some(reason) = r.reason {
        status["reason"] = json!(reason);
    }
    if let Some(message) = r.message {
        status["message"] = json!(message);
    }
    status
}

/// Records an Event about the pod (best effort: events never fail a handler).
pub fn event(pod: &Pod, warning: bool, reason: &str, action: &str, note: impl Into<String>) {
    let ev = if warning {
        Event::warning(reason, action)
    } else {
        Event::normal(reason, action)
    };
    let regarding = ObjectRef {
        api_version: "v1".to_owned(),
        kind: "Pod".to_owned(),
        namespace: Some(namespace(pod)),
        name: name(pod),
    };
    if let Err(e) = Client::new().event(&ev.note(note).regarding(regarding)) {
        wasmlet_sdk::log::log(
            wasmlet_sdk::log::Level::Debug,
            "event not recorded",
            &[("error", &e.to_string())],
        );
    }
}

pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// `ms` since the epoch as RFC 3339 in UTC, second precision (`2024-05-01T12:00:00Z`).
pub fn rfc3339(ms: u64) -> String {
    let secs = ms / 1000;
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Howard Hinnant's civil_from_days.
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// A state value the host may hand over from another state (it moves a pod to the
/// on-delete or error state with the data it had): decodes `{ tag: T }` and anything
/// else as `None`.
pub fn tagged<T: serde::de::DeserializeOwned>(value: &Value, tag: &str) -> Option<T> {
    value
        .get(tag)
        .and_then(|v| serde_json::from_value(v.clone()).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_formats_utc() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(1_714_564_800_000), "2024-05-01T12:00:00Z");
        assert_eq!(rfc3339(951_782_400_000), "2000-02-29T00:00:00Z");
    }

    #[test]
    fn backoff_doubles_to_five_minutes_and_resets() {
        let mut d = 0;
        let mut seen = vec![];
        for _ in 0..7 {
            d = next_backoff(d, false);
            seen.push(d / 1000);
        }
        assert_eq!(seen, vec![10, 20, 40, 80, 160, 300, 300]);
        assert_eq!(next_backoff(300_000, true), 10_000);
    }
}
