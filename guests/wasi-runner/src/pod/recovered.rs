//! A container's earlier runs as the pod's stored status tells them: after a host
//! restart the machine starts afresh, and the kubelet's bookkeeping (restartCount,
//! lastState) would go back to zero. As the kubelet takes it from its runtime's
//! records, the runner takes it from the status it wrote before the restart: the
//! count goes on, the next run's log is a new attempt (so the earlier one is
//! `kubectl logs --previous`), and a container that was running when the host
//! died is recorded as lost, as the kubelet reports one.

use k8s_openapi::api::core::v1::{ContainerState, ContainerStateTerminated, ContainerStatus};

use super::container::{CState, Ctr};

/// The kubelet's reason, exit code and message for a container it can no longer find.
const LOST_REASON: &str = "ContainerStatusUnknown";
const LOST_EXIT_CODE: i32 = 137;
const LOST_MESSAGE: &str =
    "The container could not be located when the host restarted. The container used to be Running";

/// A stored time in milliseconds since the epoch (0: none).
pub(super) fn ms(t: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>) -> u64 {
    t.map_or(0, |t| u64::try_from(t.0.as_millisecond()).unwrap_or(0))
}

fn terminated(t: &ContainerStateTerminated) -> CState {
    CState::Terminated {
        exit_code: t.exit_code,
        reason: t.reason.clone().unwrap_or_else(|| "Error".to_owned()),
        message: t.message.clone(),
        started_ms: ms(t.started_at.as_ref()),
        finished_ms: ms(t.finished_at.as_ref()),
    }
}

/// `ctr` (new) with what `stored` (its entry in the stored status) says of the
/// runs before; `now_ms` ends a run the restart lost.
pub fn resume(ctr: &mut Ctr, stored: &ContainerStatus, now_ms: u64) {
    let state = stored.state.as_ref();
    let last = |s: Option<&ContainerState>| s.and_then(|s| s.terminated.as_ref()).map(terminated);
    let lost = state
        .and_then(|s| s.running.as_ref())
        .map(|r| CState::Terminated {
            exit_code: LOST_EXIT_CODE,
            reason: LOST_REASON.to_owned(),
            message: Some(LOST_MESSAGE.to_owned()),
            started_ms: ms(r.started_at.as_ref()),
            finished_ms: now_ms,
        });
    let previous = lost
        .or_else(|| last(state))
        .or_else(|| last(stored.last_state.as_ref()));
    ctr.restarts = u32::try_from(stored.restart_count).unwrap_or(0);
    // Ran before: the next start is a restart (a new log attempt, one more in the count).
    ctr.started_once = previous.is_some() || ctr.restarts > 0;
    ctr.last = previous;
}
