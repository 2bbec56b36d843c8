//! The per-pod data every state shares (Krustlet's `PodState`), kept in the host's
//! state data because each call runs in a fresh instance, and what the states need
//! around it: one module per idea, re-exported here so states import from `pod`.

mod clock;
mod container;
mod recovered;
mod spec;
mod status;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use wasmlet_sdk::client::{Client, Event, ObjectRef};
use wasmlet_sdk::provider::{Pod, PodState, StateError};
use wasmlet_sdk::workloads::{self, RunState, WorkloadHandle, WorkloadStatus};

use clock::rfc3339;

pub use clock::now_ms;
pub use container::{CState, Ctr, next_backoff};
pub use spec::{
    RestartPolicy, container, grace_period, name, namespace, pod_key, pod_uid, restart_policy,
    should_restart, spec,
};
pub use status::{Render, Verdict, render, verdict};

/// What the runner knows about one pod, across all states.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct PodData {
    /// The pod's uid (volumes, logs and `release-pod` are keyed by it).
    pub uid: String,
    /// RFC 3339; when the runner first saw the pod (`status.startTime`).
    pub start_time: String,
    /// Image reference -> module digest (`workloads.fetch-module`).
    #[serde(default)]
    pub modules: BTreeMap<String, String>,
    /// Pod volume name -> `prepare-volume` id.
    #[serde(default)]
    pub volumes: BTreeMap<String, u64>,
    #[serde(default)]
    pub init: Vec<Ctr>,
    #[serde(default)]
    pub main: Vec<Ctr>,
    /// The last image pull back-off delay (0: none yet).
    #[serde(default)]
    pub image_backoff_ms: u64,
    /// Failed pulls so far (the first shows `ErrImagePull`, later ones `ImagePullBackOff`).
    #[serde(default)]
    pub pull_failures: u32,
}

impl PodState for PodData {
    fn new(pod: &Pod) -> Result<Self, StateError> {
        let spec = spec(pod)?;
        let inits = spec.init_containers.as_deref().unwrap_or_default();
        let default_reason = if inits.is_empty() {
            "ContainerCreating"
        } else {
            "PodInitializing"
        };
        // A pod this node ran before a host restart: its stored status carries
        // the containers' earlier runs (see `recovered`).
        let now = now_ms();
        let stored = pod.status.as_ref();
        let ctrs = |cs: &[k8s_openapi::api::core::v1::Container], statuses: Option<&Vec<_>>| {
            cs.iter()
                .map(|c| {
                    let mut ctr = Ctr::new(c, default_reason);
                    let earlier = statuses
                        .into_iter()
                        .flatten()
                        .find(|s: &&k8s_openapi::api::core::v1::ContainerStatus| s.name == c.name);
                    if let Some(s) = earlier {
                        recovered::resume(&mut ctr, s, now);
                    }
                    ctr
                })
                .collect()
        };
        Ok(PodData {
            uid: pod_uid(pod),
            // The kubelet keeps the pod's startTime across its restarts too.
            start_time: rfc3339(
                Some(recovered::ms(stored.and_then(|s| s.start_time.as_ref())))
                    .filter(|ms| *ms > 0)
                    .unwrap_or(now),
            ),
            init: ctrs(
                inits,
                stored.and_then(|s| s.init_container_statuses.as_ref()),
            ),
            main: ctrs(
                &spec.containers,
                stored.and_then(|s| s.container_statuses.as_ref()),
            ),
            ..PodData::default()
        })
    }
}

impl PodData {
    /// Every container with a live workload (init ones first).
    pub fn running_handles(&self) -> Vec<WorkloadHandle> {
        self.init
            .iter()
            .chain(&self.main)
            .filter(|c| c.is_running())
            .filter_map(|c| c.handle)
            .collect()
    }

    /// The container (init or main) running `handle`.
    pub fn by_handle(&mut self, handle: WorkloadHandle) -> Option<&mut Ctr> {
        self.init
            .iter_mut()
            .chain(self.main.iter_mut())
            .find(|c| c.handle == Some(handle) && c.is_running())
    }

    /// Asks the host where each running workload stands and records exits. Returns
    /// whether any handle was unknown to the host (it restarted: start them again).
    pub fn refresh(&mut self, pod: &Pod, terminating: bool) -> bool {
        let mut lost = false;
        for c in self.init.iter_mut().chain(self.main.iter_mut()) {
            let Some(h) = c.handle.filter(|_| c.is_running()) else {
                continue;
            };
            match workloads::status(h) {
                Ok(st) if st.state == RunState::Running => {}
                Ok(st) => {
                    let tail = termination_log(pod, &c.name, h, &st);
                    c.finished(&st, terminating, tail);
                }
                Err(workloads::WorkloadError::UnknownHandle) => {
                    lost = true;
                    c.handle = None;
                    c.state = CState::waiting(
                        "ContainerCreating",
                        Some("the node agent restarted".into()),
                    );
                }
                Err(e) => {
                    wasmlet_sdk::log::log(
                        wasmlet_sdk::log::Level::Warn,
                        "workload status failed",
                        &[("container", &c.name), ("error", &format!("{e:?}"))],
                    );
                }
            }
        }
        lost
    }

    /// The first init container that has not completed, if any.
    pub fn pending_init(&self) -> Option<usize> {
        self.init.iter().position(|c| !c.succeeded())
    }
}

/// `FallbackToLogsOnError`: the last 2 KiB of a failed container's output.
fn termination_log(
    pod: &Pod,
    name: &str,
    handle: WorkloadHandle,
    st: &WorkloadStatus,
) -> Option<String> {
    if matches!(st.state, RunState::Exited(0)) {
        return None;
    }
    let c = container(pod, name)?;
    if c.termination_message_policy.as_deref() != Some("FallbackToLogsOnError") {
        return None;
    }
    let bytes = workloads::read_logs(handle, 2048).ok()?;
    let text = String::from_utf8_lossy(&bytes).trim_end().to_owned();
    (!text.is_empty()).then_some(text)
}

/// Records an Event about the pod (best effort: events never fail a handler).
pub fn event(pod: &Pod, warning: bool, reason: &str, action: &str, note: impl Into<String>) {
    let ev = if warning {
        Event::warning(reason, action)
    } else {
        Event::normal(reason, action)
    };
    let regarding = ObjectRef {
        api_version: "v1".to_owned(),
        kind: "Pod".to_owned(),
        namespace: Some(namespace(pod)),
        name: name(pod),
    };
    if let Err(e) = Client::new().event(&ev.note(note).regarding(regarding)) {
        wasmlet_sdk::log::log(
            wasmlet_sdk::log::Level::Debug,
            "event not recorded",
            &[("error", &e.to_string())],
        );
    }
}

/// A state value the host may hand over from another state (it moves a pod to the
/// on-delete or error state with the data it had): decodes `{ tag: T }` and anything
/// else as `None`.
pub fn tagged<T: serde::de::DeserializeOwned>(value: &Value, tag: &str) -> Option<T> {
    value
        .get(tag)
        .and_then(|v| serde_json::from_value(v.clone()).ok())
}
