//! `Registered`: the pod was just bound to this node. Refuses what the runner cannot
//! honour, notes what it ignores, then pulls.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use wasmlet_sdk::provider::{Pod, State, StateError, Transition, WakeEvent};

use super::{Error, ImagePull};
use crate::pod::{PodData, Render, event, render};
use crate::unsupported;

#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Registered;

impl State<PodData> for Registered {
    const NAME: &'static str = "Registered";
    fn next(
        self,
        pod: &Pod,
        _d: &mut PodData,
        _wake: Option<&WakeEvent>,
    ) -> Result<Transition<PodData>, StateError> {
        if let Some(message) = unsupported::check(pod) {
            event(pod, true, "Unsupported", "Admit", message.clone());
            return Ok(Transition::next(self, Error::fatal("Unsupported", message)));
        }
        let ignored = unsupported::ignored(pod);
        if !ignored.is_empty() {
            event(
                pod,
                false,
                "Ignored",
                "Admit",
                format!("wasi-runner accepts but ignores: {}", ignored.join(", ")),
            );
        }
        Ok(Transition::next(self, ImagePull))
    }

    fn status(&self, pod: &Pod, d: &PodData) -> Value {
        render(pod, d, Render::default())
    }
}
