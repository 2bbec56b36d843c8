//! `Running`: waits on every running container's exit (and on pod changes). An exit
//! is recorded; then, by `restartPolicy`: all done → `Completed` (all exited 0) or
//! `Error`; a restart due → `CrashLoopBackOff` (via `Error` for a failure); otherwise
//! the status is re-patched (self-edge) and the wait goes on.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use wasmlet_sdk::provider::{Pod, State, StateError, Transition, WaitOn, WakeEvent};

use super::{Completed, CrashLoopBackOff, Error, VolumeMount};
use crate::pod::{PodData, Render, Verdict, render, verdict};

#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Running;

impl State<PodData> for Running {
    const NAME: &'static str = "Running";
    fn next(
        self,
        pod: &Pod,
        d: &mut PodData,
        _wake: Option<&WakeEvent>,
    ) -> Result<Transition<PodData>, StateError> {
        let before = d.main.clone();
        if d.refresh(pod, false) {
            // The host lost the workloads (it restarted): prepare and start again.
            return Ok(Transition::next(self, VolumeMount));
        }
        Ok(match verdict(pod, d) {
            Verdict::KeepRunning => {
                let handles = d.running_handles();
                if handles.is_empty() {
                    // Containers wait to be started: through the (idempotent) set-up again.
                    Transition::next(self, VolumeMount)
                } else if d.main != before {
                    Transition::next(self, Running)
                } else {
                    let mut on: Vec<WaitOn> =
                        handles.into_iter().map(WaitOn::WorkloadExited).collect();
                    on.push(WaitOn::PodChanged);
                    Transition::wait(self, on)
                }
            }
            Verdict::Restart { failed: false } => {
                let backoff = CrashLoopBackOff::enter(pod, d);
                Transition::next(self, backoff)
            }
            Verdict::Restart { failed: true } | Verdict::Done { succeeded: false } => {
                Transition::next(self, Error::container_failed())
            }
            Verdict::Done { succeeded: true } => Transition::next(self, Completed),
        })
    }

    fn status(&self, pod: &Pod, d: &PodData) -> Value {
        render(pod, d, Render::default())
    }
}
