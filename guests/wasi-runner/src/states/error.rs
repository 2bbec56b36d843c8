//! `Error`: the machine's error state. Entered for a failed container (which restarts
//! through `CrashLoopBackOff` by `restartPolicy`, else the pod `Failed`), for a pod the
//! runner cannot run (`Unsupported`, ...: `Failed` with that reason), and by the host on
//! an undeclared (illegal) edge (then the state data is another state's, read as
//! `ProviderError`). A handler error never leads here: the host retries the same state
//! after its `ProviderBackOff`.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;
use wasmlet_sdk::provider::{Pod, State, StateError, Transition, WakeEvent};
use wasmlet_sdk::workloads;

use super::{CrashLoopBackOff, Running};
use crate::pod::{self, PodData, Render, RestartPolicy, Verdict, render, restart_policy, verdict};

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Error {
    /// `None`: a container failed (the restart policy decides). `Some`: the pod fails.
    pub fatal: Option<Fatal>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Fatal {
    pub reason: String,
    pub message: String,
}

impl Error {
    pub fn container_failed() -> Self {
        Error { fatal: None }
    }

    pub fn fatal(reason: &str, message: impl Into<String>) -> Self {
        Error {
            fatal: Some(Fatal {
                reason: reason.to_owned(),
                message: message.into(),
            }),
        }
    }
}

#[derive(Serialize, Deserialize)]
struct Tagged {
    error: Option<Fatal>,
}

impl Serialize for Error {
    fn serialize<Ser: Serializer>(&self, s: Ser) -> Result<Ser::Ok, Ser::Error> {
        Tagged {
            error: self.fatal.clone(),
        }
        .serialize(s)
    }
}

impl<'de> Deserialize<'de> for Error {
    /// Anything but this state's own `{"error": ...}` is data the host carried over from
    /// the state whose handler failed.
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = Value::deserialize(d)?;
        Ok(
            match v
                .as_object()
                .filter(|o| o.len() == 1 && o.contains_key("error"))
            {
                Some(_) => Error {
                    fatal: pod::tagged::<Option<Fatal>>(&v, "error").flatten(),
                },
                None => Error::fatal(
                    "ProviderError",
                    "the provider failed to handle the pod; see its events",
                ),
            },
        )
    }
}

impl State<PodData> for Error {
    const NAME: &'static str = "Error";
    fn next(
        self,
        pod: &Pod,
        d: &mut PodData,
        _wake: Option<&WakeEvent>,
    ) -> Result<Transition<PodData>, StateError> {
        if self.fatal.is_some() {
            // The pod is Failed: nothing of it may run on.
            let grace = pod::grace_period(pod);
            for h in d.running_handles() {
                let _ = workloads::kill(h, grace);
            }
            return Ok(Transition::wait(self, []));
        }
        let policy = restart_policy(pod);
        if let Some(i) = d.pending_init()
            && d.init[i].exit_code().is_some()
        {
            return Ok(if policy == RestartPolicy::Never {
                Transition::wait(self, [])
            } else {
                let backoff = CrashLoopBackOff::enter(pod, d);
                Transition::next(self, backoff)
            });
        }
        Ok(match verdict(pod, d) {
            Verdict::Restart { .. } => {
                let backoff = CrashLoopBackOff::enter(pod, d);
                Transition::next(self, backoff)
            }
            Verdict::KeepRunning => Transition::next(self, Running),
            Verdict::Done { .. } => Transition::wait(self, []),
        })
    }

    fn status(&self, pod: &Pod, d: &PodData) -> Value {
        match &self.fatal {
            Some(f) => render(
                pod,
                d,
                Render {
                    phase: Some("Failed"),
                    reason: Some(f.reason.clone()),
                    message: Some(f.message.clone()),
                    ..Render::default()
                },
            ),
            None => render(pod, d, Render::default()),
        }
    }
}
