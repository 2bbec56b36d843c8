//! `Starting`: spawns every container that is waiting (first start, or a restart after
//! its back-off): `command` + `args`, `env` / `envFrom` / downward API, mounts, memory
//! limit. Containers already running are left alone.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use wasmlet_sdk::provider::{Pod, State, StateError, Transition, WakeEvent};

use super::{ContainerConfigError, CrashLoopBackOff, Error, ImagePull, Running, config_error};
use crate::pod::{PodData, Render, Verdict, event, render, verdict};
use crate::spawn::{self, SpawnError};

#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Starting;

impl State<PodData> for Starting {
    const NAME: &'static str = "Starting";
    fn next(
        self,
        pod: &Pod,
        d: &mut PodData,
        _wake: Option<&WakeEvent>,
    ) -> Result<Transition<PodData>, StateError> {
        for i in 0..d.main.len() {
            if !d.main[i].is_waiting() {
                continue;
            }
            match spawn::start(pod, d, false, i) {
                Ok(_) => event(
                    pod,
                    false,
                    "Started",
                    "Start",
                    format!("Started container {}", d.main[i].name),
                ),
                Err(SpawnError::Config(message)) => {
                    config_error(pod, d, "Failed", format!("Error: {message}"), &message);
                    return Ok(Transition::next(self, ContainerConfigError));
                }
                Err(SpawnError::NoModule) => return Ok(Transition::next(self, ImagePull)),
                Err(SpawnError::Start(message)) => {
                    event(
                        pod,
                        true,
                        "Failed",
                        "Start",
                        format!("Error: container {}: {message}", d.main[i].name),
                    );
                }
            }
        }
        Ok(match verdict(pod, d) {
            Verdict::KeepRunning | Verdict::Done { succeeded: true } => {
                Transition::next(self, Running)
            }
            Verdict::Restart { failed: false } => {
                let backoff = CrashLoopBackOff::enter(pod, d);
                Transition::next(self, backoff)
            }
            Verdict::Restart { failed: true } | Verdict::Done { succeeded: false } => {
                Transition::next(self, Error::container_failed())
            }
        })
    }

    fn status(&self, pod: &Pod, d: &PodData) -> Value {
        render(pod, d, Render::default())
    }
}
