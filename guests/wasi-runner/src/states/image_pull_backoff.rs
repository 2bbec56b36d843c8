//! `ImagePullBackOff`: a pull failed. Shows the pull error (`ErrImagePull`), then
//! `ImagePullBackOff` until kubelet's image back-off (10 s doubling to 300 s) elapses,
//! then pulls again.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use wasmlet_sdk::provider::{Pod, State, StateError, Transition, WaitOn, WakeEvent};

use super::ImagePull;
use crate::pod::{CState, PodData, Render, event, now_ms, render};

#[derive(Debug, Serialize, Deserialize)]
pub struct ImagePullBackOff {
    pub delay_ms: u64,
    /// Whether the back-off is showing (after the pull error was patched once).
    #[serde(default)]
    pub showing: bool,
    #[serde(default)]
    pub until_ms: Option<u64>,
}

impl ImagePullBackOff {
    pub fn new(delay_ms: u64) -> Self {
        ImagePullBackOff {
            delay_ms,
            showing: false,
            until_ms: None,
        }
    }
}

impl State<PodData> for ImagePullBackOff {
    const NAME: &'static str = "ImagePullBackOff";
    fn next(
        self,
        pod: &Pod,
        d: &mut PodData,
        wake: Option<&WakeEvent>,
    ) -> Result<Transition<PodData>, StateError> {
        if !self.showing {
            // As kubelet: ErrImagePull for the failed attempt, then ImagePullBackOff.
            for c in d.init.iter_mut().chain(d.main.iter_mut()) {
                if matches!(&c.state, CState::Waiting { reason, .. } if reason == "ErrImagePull") {
                    let message = format!("Back-off pulling image \"{}\"", c.image);
                    c.state = CState::waiting("ImagePullBackOff", Some(message));
                }
            }
            event(
                pod,
                false,
                "BackOff",
                "Pull",
                format!(
                    "Back-off pulling image; retrying in {}s",
                    self.delay_ms / 1000
                ),
            );
            let shown = ImagePullBackOff {
                showing: true,
                ..ImagePullBackOff::new(self.delay_ms)
            };
            return Ok(Transition::next(self, shown));
        }
        match (wake, self.until_ms) {
            (Some(WakeEvent::TimerElapsed), _) => Ok(Transition::next(self, ImagePull)),
            (None, _) | (_, None) => {
                let delay = self.delay_ms;
                let this = ImagePullBackOff {
                    until_ms: Some(now_ms() + delay),
                    ..self
                };
                Ok(Transition::wait(
                    this,
                    [WaitOn::Timer(Duration::from_millis(delay))],
                ))
            }
            (Some(_), Some(until)) => match until.checked_sub(now_ms()).filter(|ms| *ms > 0) {
                None => Ok(Transition::next(self, ImagePull)),
                Some(left) => Ok(Transition::wait(
                    self,
                    [WaitOn::Timer(Duration::from_millis(left))],
                )),
            },
        }
    }

    fn status(&self, pod: &Pod, d: &PodData) -> Value {
        render(pod, d, Render::default())
    }
}
