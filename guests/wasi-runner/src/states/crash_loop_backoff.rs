//! `CrashLoopBackOff`: containers exited and are to be restarted (`Always`, or
//! `OnFailure` after a failure). Each waits out kubelet's back-off (10 s doubling to
//! 300 s, reset after a run of 10 minutes), then `Starting` (or `Initializing` for an
//! init container) starts it again with `restartCount` + 1. Containers still running
//! are watched meanwhile.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use wasmlet_sdk::provider::{Pod, State, StateError, Transition, WaitOn, WakeEvent};

use super::{Initializing, Starting};
use crate::pod::{PodData, Render, event, now_ms, pod_key, render, restart_policy, should_restart};

#[derive(Debug, Serialize, Deserialize)]
pub struct CrashLoopBackOff {
    pub delay_ms: u64,
    #[serde(default)]
    pub until_ms: Option<u64>,
}

impl CrashLoopBackOff {
    /// Puts every container due for a restart into back-off (the failed init container,
    /// if one is pending) and returns the state, waiting the longest of their delays.
    pub fn enter(pod: &Pod, d: &mut PodData) -> Self {
        let key = pod_key(pod);
        let policy = restart_policy(pod);
        let mut delay = 0;
        let pending_init = d.pending_init();
        let due: Vec<&mut crate::pod::Ctr> = match pending_init {
            Some(i) => d.init[i..=i]
                .iter_mut()
                .filter(|c| c.exit_code().is_some())
                .collect(),
            None => d
                .main
                .iter_mut()
                .filter(|c| {
                    c.exit_code()
                        .is_some_and(|code| should_restart(policy, code))
                })
                .collect(),
        };
        let mut names = Vec::new();
        for c in due {
            delay = delay.max(c.back_off(&key));
            names.push(c.name.clone());
        }
        for name in names {
            event(
                pod,
                true,
                "BackOff",
                "Restart",
                format!("Back-off restarting failed container {name} in pod {key}"),
            );
        }
        CrashLoopBackOff {
            delay_ms: delay,
            until_ms: None,
        }
    }
}

impl State<PodData> for CrashLoopBackOff {
    const NAME: &'static str = "CrashLoopBackOff";
    fn next(
        self,
        pod: &Pod,
        d: &mut PodData,
        wake: Option<&WakeEvent>,
    ) -> Result<Transition<PodData>, StateError> {
        d.refresh(pod, false);
        let left = match (wake, self.until_ms) {
            (Some(WakeEvent::TimerElapsed), _) => 0,
            (None, _) | (_, None) => self.delay_ms,
            (Some(_), Some(until)) => until.saturating_sub(now_ms()),
        };
        if left == 0 {
            return Ok(if d.pending_init().is_some() {
                Transition::next(self, Initializing)
            } else {
                Transition::next(self, Starting)
            });
        }
        let until = self.until_ms.unwrap_or_else(|| now_ms() + self.delay_ms);
        let mut on = vec![WaitOn::Timer(Duration::from_millis(left))];
        on.extend(d.running_handles().into_iter().map(WaitOn::WorkloadExited));
        Ok(Transition::wait(
            CrashLoopBackOff {
                until_ms: Some(until),
                ..self
            },
            on,
        ))
    }

    fn status(&self, pod: &Pod, d: &PodData) -> Value {
        render(pod, d, Render::default())
    }
}
