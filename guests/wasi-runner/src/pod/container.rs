//! One container's record across calls: its workload, its state as
//! `containerStatuses[].state` shows it, restarts and kubelet's crash back-off.

use k8s_openapi::api::core::v1::Container;
use serde::{Deserialize, Serialize};
use wasmlet_sdk::workloads::{RunState, WorkloadHandle, WorkloadStatus};

use super::clock::now_ms;

/// kubelet's container restart and image pull back-off: 10 s, doubling, at most 300 s.
pub const BACKOFF_INITIAL_MS: u64 = 10_000;
pub const BACKOFF_MAX_MS: u64 = 300_000;
/// A container that ran this long before exiting restarts with the initial back-off.
pub const BACKOFF_RESET_AFTER_MS: u64 = 600_000;

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
}

impl Ctr {
    pub(super) fn new(c: &Container, default_reason: &str) -> Self {
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
                // The host's contract (`run-state.failed`): out of memory and
                // start failures are told by their prefixes; a trap's message
                // may name anything (`_start`, `memory`) in its backtrace.
                let (code, reason) = if msg.starts_with("OOMKilled:") {
                    (137, "OOMKilled")
                } else if msg.starts_with("failed to start:") {
                    (128, "StartError")
                } else if terminating || lower.contains("kill") || lower.contains("interrupt") {
                    (137, "Error")
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

#[cfg(test)]
mod tests {
    use super::*;

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
