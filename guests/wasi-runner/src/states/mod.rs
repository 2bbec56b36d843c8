//! The states, one per file (Krustlet v0.5's layout).

mod completed;
mod container_config_error;
mod crash_loop_backoff;
mod error;
mod image_pull;
mod image_pull_backoff;
mod initializing;
mod registered;
mod running;
mod starting;
mod terminated;
mod volume_mount;

pub use completed::Completed;
pub use container_config_error::ContainerConfigError;
pub use crash_loop_backoff::CrashLoopBackOff;
pub use error::Error;
pub use image_pull::ImagePull;
pub use image_pull_backoff::ImagePullBackOff;
pub use initializing::Initializing;
pub use registered::Registered;
pub use running::Running;
pub use starting::Starting;
pub use terminated::Terminated;
pub use volume_mount::VolumeMount;

use wasmlet_sdk::provider::Pod;

use crate::pod::{CState, PodData, event};

/// The waiting reason of containers not yet created.
pub(crate) fn default_reason(d: &PodData) -> &'static str {
    if d.init.is_empty() {
        "ContainerCreating"
    } else {
        "PodInitializing"
    }
}

/// A ConfigMap, Secret or key the pod needs is missing: every container not yet
/// running waits with `CreateContainerConfigError` and `message`; an Event says so.
pub(crate) fn config_error(
    pod: &Pod,
    d: &mut PodData,
    event_reason: &str,
    note: String,
    message: &str,
) {
    for c in d.init.iter_mut().chain(d.main.iter_mut()) {
        if c.is_waiting() {
            c.state = CState::waiting("CreateContainerConfigError", Some(message.to_owned()));
        }
    }
    event(pod, true, event_reason, "Start", note);
}

/// Waiting containers whose reason came from an earlier problem go back to the default.
pub(crate) fn clear_waiting(d: &mut PodData, reasons: &[&str]) {
    let default = default_reason(d);
    for c in d.init.iter_mut().chain(d.main.iter_mut()) {
        if let CState::Waiting { reason, .. } = &c.state
            && reasons.contains(&reason.as_str())
        {
            c.state = CState::waiting(default, None);
        }
    }
}
