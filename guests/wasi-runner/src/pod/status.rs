//! The PodStatus the runner renders from [`PodData`]: kubelet's phase, the pod's
//! conditions and the container statuses, and the verdict on the main containers.

use serde_json::{Value, json};
use wasmlet_sdk::provider::Pod;

use super::PodData;
use super::clock::rfc3339;
use super::container::{CState, Ctr};
use super::spec::{RestartPolicy, restart_policy, should_restart};

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

impl CState {
    /// `containerStatuses[].state` (or `lastState`).
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
    /// One entry of `containerStatuses` (or `initContainerStatuses`).
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
