//! `Completed`: every container exited 0 and none restarts (`Never` / `OnFailure`):
//! the pod `Succeeded`. Nothing more to do until it is deleted (`Terminated` releases it;
//! logs stay readable until then).

use serde::{Deserialize, Serialize};
use serde_json::Value;
use wasmlet_sdk::provider::{Pod, State, StateError, Transition, WakeEvent};

use crate::pod::{PodData, Render, render};

#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Completed;

impl State<PodData> for Completed {
    const NAME: &'static str = "Completed";
    fn next(
        self,
        _pod: &Pod,
        _d: &mut PodData,
        _wake: Option<&WakeEvent>,
    ) -> Result<Transition<PodData>, StateError> {
        Ok(Transition::wait(self, []))
    }

    fn status(&self, pod: &Pod, d: &PodData) -> Value {
        render(
            pod,
            d,
            Render {
                phase: Some("Succeeded"),
                ..Render::default()
            },
        )
    }
}
