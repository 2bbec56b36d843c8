//! What the host does when a provider call faults (returns an error, traps
//! or runs past its deadline): the pod backs off and the same call is
//! retried, the kubelet's way, never failed for good (issue 33: Krustlet's
//! lesson). The pod's status says why (`reason`/`message` and a
//! `Ready=False` condition, as `kubectl get`/`describe` show them) with a
//! Warning Event. While it waits, the pod is in the host-owned state
//! [`REASON`] (`ProviderBackOff`: the pods-per-state gauge and the
//! transitions counter show it, as the status page does); the retry
//! returns it to the state whose handler faulted. A deleted pod whose
//! teardown keeps faulting is removed by the host past its grace period
//! plus a bound, its workloads and volumes released.

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::events::EventType;
use serde_json::{Value, json};
use tokio::time::Instant;

use super::backoff::show;
use super::{Machine, Wake, deleting};

/// The pod status reason while a provider call is backing off, and the
/// host-owned state the pod is counted in meanwhile. Always the host's,
/// even when the graph declares back-off states: those are states the
/// provider's own handlers run in (waiting out an image pull or a
/// crash-looping container), with their own meaning and `status`; a
/// provider fault is the provider's code failing, so no handler of it
/// runs, and a declared `ImagePullBackOff` would tell the user the wrong
/// cause. A graph may not declare a state of this name.
pub(super) const REASON: &str = crate::plugin::provider::BACKOFF_STATE;

/// How a back-off ended.
pub(super) enum AfterFault {
    /// Retry the call that faulted.
    Retry,
    /// The pod was deleted while backing off: go to the on-delete state.
    Deleted,
    /// The pod is gone (or was removed by the host): the machine ends.
    Gone,
}

impl Machine {
    /// Backs off after a fault of `what` (`init`, or the handler of a
    /// state) and waits for the retry, a deletion, or the pod's end; the
    /// pod is in state [`REASON`] meanwhile.
    pub(super) async fn back_off(&mut self, what: &str, msg: &str) -> AfterFault {
        let now = Instant::now();
        let mut delay = self.backoff.next(now);
        let forced_at = self.forced_at();
        if let Some(at) = forced_at {
            if at <= now {
                self.force_remove(what, msg).await;
                return AfterFault::Gone;
            }
            delay = delay.min(at - now);
        }
        let message = format!(
            "provider {} failed in {what}: {}; back-off {}",
            self.runner.provider,
            summary(msg),
            show(delay)
        );
        tracing::warn!(pod = %self.key, "{message}");
        self.runner
            .event(&self.pod, EventType::Warning, REASON, message.clone())
            .await;
        self.runner.set_state(&self.key, Some(REASON));
        self.write_fault(&message).await;
        let was_deleting = deleting(&self.pod);
        let until = now + delay;
        loop {
            tokio::select! {
                _ = tokio::time::sleep_until(until) => break,
                w = self.rx.recv() => match w {
                    None | Some(Wake::PodGone) => {
                        self.release().await;
                        return AfterFault::Gone;
                    }
                    Some(Wake::PodChanged(p)) => {
                        self.pod = p;
                        if deleting(&self.pod) && !was_deleting {
                            return AfterFault::Deleted;
                        }
                    }
                    Some(_) => {}
                },
            }
        }
        // The bound passed during this back-off (it was the shorter wait).
        if self.forced_at().is_some_and(|at| at <= Instant::now()) {
            self.force_remove(what, msg).await;
            return AfterFault::Gone;
        }
        AfterFault::Retry
    }

    /// When the host removes a deleted pod itself: its deletionTimestamp
    /// (the request's time plus the grace period) plus the node's bound.
    /// `None` while the pod is not being deleted.
    pub(super) fn forced_at(&self) -> Option<Instant> {
        let at = self.pod.metadata.deletion_timestamp.as_ref()?;
        let bound_ms =
            i64::try_from(self.runner.node.teardown_bound.as_millis()).unwrap_or(i64::MAX);
        let now = k8s_openapi::jiff::Timestamp::now().as_millisecond();
        let left_ms =
            at.0.as_millisecond()
                .saturating_add(bound_ms)
                .saturating_sub(now);
        // Past it already: now.
        let left = std::time::Duration::from_millis(u64::try_from(left_ms).unwrap_or(0));
        Some(Instant::now() + left)
    }

    /// Writes the fault where `kubectl get`/`describe` show it: the pod's
    /// reason and message and a `Ready=False` condition. The next status
    /// the provider gives replaces it.
    async fn write_fault(&mut self, message: &str) {
        self.faulted = true;
        let now = chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string();
        let mut conds: Vec<Value> = self
            .pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .map(|cs| {
                cs.iter()
                    .filter(|c| c.type_ != "Ready")
                    .filter_map(|c| serde_json::to_value(c).ok())
                    .collect()
            })
            .unwrap_or_default();
        conds.push(json!({"type": "Ready", "status": "False", "reason": REASON,
            "message": message, "lastTransitionTime": now}));
        let body = json!({"status": {"reason": REASON, "message": message, "conditions": conds}});
        let (ns, name) = self.key.split_once('/').unwrap_or(("", &self.key));
        let pods: Api<Pod> = Api::namespaced(self.runner.client.clone(), ns);
        if let Err(e) = pods
            .patch_status(name, &PatchParams::default(), &Patch::Merge(&body))
            .await
        {
            tracing::warn!(pod = %self.key, error = %e, "writing the provider fault failed");
        }
    }

    /// Past grace plus the bound, the teardown is the host's: the pod's
    /// workloads and volumes are released and the pod removed (grace 0,
    /// uid precondition), with a Warning Event saying so.
    pub(super) async fn force_remove(&self, what: &str, msg: &str) {
        let grace = self
            .pod
            .metadata
            .deletion_grace_period_seconds
            .unwrap_or_default();
        let note = format!(
            "provider {} did not finish the teardown within the grace period ({grace}s) plus {} (last fault in {what}: {}); the node released the pod's workloads and volumes and removed it",
            self.runner.provider,
            show(self.runner.node.teardown_bound),
            summary(msg)
        );
        tracing::warn!(pod = %self.key, "{note}");
        self.runner
            .event(&self.pod, EventType::Warning, "TeardownForced", note)
            .await;
        self.release().await;
        match self.delete_now().await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {}
            Err(e) => tracing::warn!(pod = %self.key, error = %e, "removing the pod failed"),
        }
    }
}

/// The longest fault text put in a pod's status or an Event (the guest
/// chooses its error strings; a trap's carries a wasm backtrace).
const SUMMARY_MAX: usize = 512;

/// A fault's text on one line (a trap's backtrace frames run together),
/// at most [`SUMMARY_MAX`] bytes.
fn summary(msg: &str) -> String {
    let mut out = String::new();
    for word in msg.split_whitespace() {
        if out.len() + word.len() + 1 > SUMMARY_MAX {
            out.push_str(" …");
            break;
        }
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(word);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fault_is_summed_up_on_one_bounded_line() {
        let trap = "the guest trapped: error while executing at wasm backtrace:\n    0:   0x110e - f\n    1:   0x1b8b - init: wasm trap: wasm `unreachable` instruction executed";
        assert_eq!(
            summary(trap),
            "the guest trapped: error while executing at wasm backtrace: 0: 0x110e - f 1: 0x1b8b - init: wasm trap: wasm `unreachable` instruction executed"
        );
        let huge = "x ".repeat(1 << 20);
        let s = summary(&huge);
        assert!(s.len() <= SUMMARY_MAX + " …".len(), "{}", s.len());
        assert!(s.ends_with('…'));
    }
}
