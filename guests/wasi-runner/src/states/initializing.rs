//! `Initializing`: runs the init containers in order, each to completion. One step per
//! container (a self-transition), so the pod status follows each of them. A failed init
//! container goes to `Error`, which restarts it (with back-off) or fails the pod, by
//! `restartPolicy`.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use wasmlet_sdk::provider::{Pod, State, StateError, Transition, WaitOn, WakeEvent};

use super::{ContainerConfigError, Error, ImagePull, Starting, VolumeMount, config_error};
use crate::pod::{CState, PodData, Render, event, render};
use crate::spawn::{self, SpawnError};

#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Initializing;

impl State<PodData> for Initializing {
    const NAME: &'static str = "Initializing";
    fn next(
        self,
        pod: &Pod,
        d: &mut PodData,
        _wake: Option<&WakeEvent>,
    ) -> Result<Transition<PodData>, StateError> {
        if d.refresh(pod, false) {
            return Ok(Transition::next(self, VolumeMount));
        }
        let Some(i) = d.pending_init() else {
            return Ok(Transition::next(self, Starting));
        };
        match (&d.init[i].state, d.init[i].handle) {
            (CState::Running { .. }, Some(h)) => {
                Ok(Transition::wait(self, [WaitOn::WorkloadExited(h)]))
            }
            (CState::Terminated { .. }, _) => Ok(Transition::next(self, Error::container_failed())),
            _ => match spawn::start(pod, d, true, i) {
                Ok(_) => {
                    event(
                        pod,
                        false,
                        "Started",
                        "Start",
                        format!("Started init container {}", d.init[i].name),
                    );
                    Ok(Transition::next(self, Initializing))
                }
                Err(SpawnError::Config(message)) => {
                    config_error(pod, d, "Failed", format!("Error: {message}"), &message);
                    Ok(Transition::next(self, ContainerConfigError))
                }
                Err(SpawnError::NoModule) => Ok(Transition::next(self, ImagePull)),
                Err(SpawnError::Start(message)) => {
                    event(pod, true, "Failed", "Start", format!("Error: {message}"));
                    Ok(Transition::next(self, Error::container_failed()))
                }
            },
        }
    }

    fn status(&self, pod: &Pod, d: &PodData) -> Value {
        render(pod, d, Render::default())
    }
}
