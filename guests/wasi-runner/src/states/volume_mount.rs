//! `VolumeMount`: prepares every pod volume (`workloads.prepare-volume`). ConfigMap and
//! Secret volumes are read here with the client and handed over as files with modes; a
//! missing one (not `optional`) is `CreateContainerConfigError`, retried.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use wasmlet_sdk::provider::{Pod, State, StateError, Transition, WakeEvent};
use wasmlet_sdk::workloads::{self, VolumeRequest, WorkloadError};

use super::{ContainerConfigError, Error, Initializing, clear_waiting, config_error};
use crate::pod::{self, PodData, Render, render};
use crate::volumes;

#[derive(Debug, Default, Serialize, Deserialize)]
pub struct VolumeMount;

impl State<PodData> for VolumeMount {
    const NAME: &'static str = "VolumeMount";
    fn next(
        self,
        pod: &Pod,
        d: &mut PodData,
        _wake: Option<&WakeEvent>,
    ) -> Result<Transition<PodData>, StateError> {
        let spec = pod::spec(pod)?;
        for v in spec.volumes.iter().flatten() {
            let source = match volumes::source(pod, v) {
                Ok(source) => source,
                Err(message) => {
                    let note = format!(
                        "MountVolume.SetUp failed for volume \"{}\" : {message}",
                        v.name
                    );
                    config_error(pod, d, "FailedMount", note, &message);
                    return Ok(Transition::next(self, ContainerConfigError));
                }
            };
            let req = VolumeRequest {
                pod_uid: d.uid.clone(),
                name: v.name.clone(),
                source,
            };
            match workloads::prepare_volume(&req) {
                Ok(id) => {
                    d.volumes.insert(v.name.clone(), id);
                }
                Err(WorkloadError::Invalid(m)) => {
                    let message = format!("volume \"{}\": {m}", v.name);
                    crate::pod::event(pod, true, "FailedMount", "Mount", message.clone());
                    return Ok(Transition::next(self, Error::fatal("FailedMount", message)));
                }
                Err(WorkloadError::Failed(m)) => {
                    return Err(StateError::new(format!(
                        "preparing volume \"{}\": {m}",
                        v.name
                    )));
                }
                Err(WorkloadError::UnknownHandle) => {
                    return Err(StateError::new(format!(
                        "preparing volume \"{}\": unknown to the host",
                        v.name
                    )));
                }
            }
        }
        clear_waiting(d, &["CreateContainerConfigError"]);
        Ok(Transition::next(self, Initializing))
    }

    fn status(&self, pod: &Pod, d: &PodData) -> Value {
        render(pod, d, Render::default())
    }
}
