//! `ContainerConfigError`: a ConfigMap, Secret or key a volume or the environment needs
//! is missing (containers wait with `CreateContainerConfigError`). Retries every 10 s,
//! as kubelet's pod sync does, from `VolumeMount` (which is idempotent); containers
//! already running are watched meanwhile.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use wasmlet_sdk::provider::{Pod, State, StateError, Transition, WaitOn, WakeEvent};

use super::VolumeMount;
use crate::pod::{PodData, Render, render};

/// How often a missing ConfigMap or Secret is looked up again.
pub const CONFIG_RETRY: Duration = Duration::from_secs(10);

#[derive(Debug, Default, Serialize, Deserialize)]
pub struct ContainerConfigError;

impl State<PodData> for ContainerConfigError {
    const NAME: &'static str = "ContainerConfigError";
    fn next(
        self,
        pod: &Pod,
        d: &mut PodData,
        wake: Option<&WakeEvent>,
    ) -> Result<Transition<PodData>, StateError> {
        if wake == Some(&WakeEvent::TimerElapsed) {
            return Ok(Transition::next(self, VolumeMount));
        }
        d.refresh(pod, false);
        let mut on = vec![WaitOn::Timer(CONFIG_RETRY)];
        on.extend(d.running_handles().into_iter().map(WaitOn::WorkloadExited));
        Ok(Transition::wait(self, on))
    }

    fn status(&self, pod: &Pod, d: &PodData) -> Value {
        render(pod, d, Render::default())
    }
}
