//! `Terminated`: the on-delete state, entered by the host (whatever the state before)
//! when the pod gets a deletionTimestamp. Asks every workload to stop within the grace
//! period (`metadata.deletionGracePeriodSeconds`, else `terminationGracePeriodSeconds`,
//! else 30 s; the host interrupts it after that), waits for the exits (or the grace
//! period and a margin), then releases the pod (`release-pod`) and rests.

use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;
use wasmlet_sdk::provider::{Pod, State, StateError, Transition, WaitOn, WakeEvent};
use wasmlet_sdk::workloads;

use crate::pod::{self, PodData, Render, event, now_ms, render};

/// Waited beyond the grace period for the host's interruption to be reported.
const KILL_MARGIN: Duration = Duration::from_secs(2);

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Teardown {
    /// When the wait for exits ends (ms since the epoch); `None`: nothing asked yet.
    pub deadline_ms: Option<u64>,
    pub released: bool,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Terminated(pub Teardown);

#[derive(Serialize, Deserialize)]
struct Tagged {
    terminated: Teardown,
}

impl Serialize for Terminated {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        Tagged {
            terminated: self.0.clone(),
        }
        .serialize(s)
    }
}

impl<'de> Deserialize<'de> for Terminated {
    /// The host moves a pod here with the previous state's data: that reads as a
    /// teardown not yet begun.
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = Value::deserialize(d)?;
        Ok(Terminated(
            pod::tagged(&v, "terminated").unwrap_or_default(),
        ))
    }
}

impl State<PodData> for Terminated {
    const NAME: &'static str = "Terminated";
    fn next(
        self,
        pod: &Pod,
        d: &mut PodData,
        wake: Option<&WakeEvent>,
    ) -> Result<Transition<PodData>, StateError> {
        let mut t = self.0.clone();
        if t.released {
            return Ok(Transition::wait(self, []));
        }
        d.refresh(pod, true);
        let grace = pod::grace_period(pod);
        let first = t.deadline_ms.is_none();
        if first {
            for c in d.init.iter().chain(&d.main).filter(|c| c.is_running()) {
                let Some(h) = c.handle else { continue };
                if workloads::kill(h, grace).is_ok() {
                    event(
                        pod,
                        false,
                        "Killing",
                        "Kill",
                        format!("Stopping container {}", c.name),
                    );
                }
            }
            t.deadline_ms = Some(now_ms() + (grace + KILL_MARGIN).as_millis() as u64);
        }
        let running = d.running_handles();
        if running.is_empty() || wake == Some(&WakeEvent::TimerElapsed) {
            workloads::release_pod(&d.uid);
            t.released = true;
            return Ok(Transition::wait(Terminated(t), []));
        }
        let left = if first {
            grace + KILL_MARGIN
        } else {
            Duration::from_millis(t.deadline_ms.unwrap_or(0).saturating_sub(now_ms()).max(1))
        };
        let mut on = vec![WaitOn::Timer(left)];
        on.extend(running.into_iter().map(WaitOn::WorkloadExited));
        Ok(Transition::wait(Terminated(t), on))
    }

    fn status(&self, pod: &Pod, d: &PodData) -> Value {
        render(
            pod,
            d,
            Render {
                terminating: true,
                ..Render::default()
            },
        )
    }
}
