//! The built-in scheduler, a reconciler of Pods (kube-scheduler's default
//! profile reduced to the filters and scores of `fit` and `score`).
//!
//! Each call places one pod: it brings its view of the nodes and of what is
//! bound to each up to date, filters and scores, and binds through
//! `pods/binding`. The view is kube-scheduler's node-info cache: kept by the
//! warm instance between calls (`reuse-instances`) and fed only the changes
//! since the last call (`list-changes`), so a placement costs the number of
//! nodes and of changes, not of pods (a fresh instance lists once). The
//! manifest asks for plugin-wide expectations and one call at a time, so a
//! decision never reads a cache that lacks an earlier binding
//! (kube-scheduler's assumed pods). A pod
//! that fits nowhere gets `PodScheduled=False` (reason `Unschedulable`, the
//! FitError message) and a `FailedScheduling` event when the message changes,
//! and is tried again as soon as a Node changes (the manifest's `waiting`
//! watch), or after [`RETRY`] when nothing changed.
//!
//! Deviations from upstream: no preemption, no priority order (pods go in the
//! host's queue order), no inter-pod affinity, topology spread, ports or volume
//! filters, ties go to the first node by name, and a pod that stops running frees
//! its resources for waiting pods only at their next timed retry (any Node change
//! retries them at once).

pub mod fit;
pub mod quantity;
pub mod schedule;
pub mod score;

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use wasmlet_sdk::client::{Client, Mirror};
use wasmlet_sdk::prelude::*;

use fit::Usage;
use schedule::{Decision, decide, wants_scheduling};

/// How soon an unschedulable pod is tried again when no Node changes first.
pub const RETRY: Duration = Duration::from_secs(5);

/// The scheduler's view of the cluster, kept while the instance is warm.
struct View {
    nodes: Mirror<Node>,
    /// Each pod's node and what it requests there (`None`: counts nowhere).
    pods: Mirror<Option<(String, Usage)>>,
    /// What is bound to each node, summed from `pods` as it changes.
    usage: HashMap<String, Usage>,
}

impl View {
    fn new() -> View {
        View {
            nodes: Mirror::new(ListParams::all()),
            pods: Mirror::new(ListParams::all()),
            usage: HashMap::new(),
        }
    }

    fn sync(&mut self, client: &Client) -> Result<(), Error> {
        self.nodes
            .sync::<Node, _, _>(client, |n| n, |_, _, _| {})
            .map_err(|e| Error::transient("ListNodes", e.to_string()))?;
        let usage = &mut self.usage;
        self.pods
            .sync::<Pod, _, _>(
                client,
                |p| Usage::of(&p),
                |_, old, new| {
                    if let Some(Some((node, u))) = old {
                        usage.entry(node.clone()).or_default().sub(u);
                    }
                    if let Some(Some((node, u))) = new {
                        usage.entry(node.clone()).or_default().add(u);
                    }
                },
            )
            .map_err(|e| Error::transient("ListPods", e.to_string()))?;
        Ok(())
    }
}

thread_local! {
    static VIEW: RefCell<View> = RefCell::new(View::new());
}

fn reconcile(pod: Arc<Pod>, ctx: &Context) -> Result<Action, Error> {
    if !wants_scheduling(&pod) {
        return Ok(Action::done());
    }
    let ns = pod.metadata.namespace.clone().unwrap_or_default();
    let name = pod.metadata.name.clone().unwrap_or_default();
    let client = ctx.client();
    let decision = VIEW.with_borrow_mut(|view| {
        view.sync(client)?;
        Ok::<_, Error>(decide(&pod, view.nodes.values(), &view.usage))
    })?;
    match decision {
        Decision::Bind(node) => match client.bind(&ns, &name, &node) {
            Ok(()) => {
                let _ = ctx.event(
                    Event::normal("Scheduled", "Binding")
                        .note(format!("Successfully assigned {ns}/{name} to {node}")),
                );
                Ok(Action::done())
            }
            // Bound meanwhile (by another scheduler) or being deleted: nothing to do.
            Err(ClientError::Conflict(_)) | Err(ClientError::NotFound) => Ok(Action::done()),
            Err(e) => Err(Error::transient("BindFailed", e.to_string())),
        },
        Decision::Unschedulable(message) => {
            let current = pod
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .and_then(|cs| cs.iter().find(|c| c.type_ == "PodScheduled"))
                .filter(|c| c.status == "False");
            let known = current.is_some_and(|c| {
                c.reason.as_deref() == Some("Unschedulable")
                    && c.message.as_deref() == Some(message.as_str())
            });
            if !known {
                // The transition time moves only when the status does.
                let now = current
                    .and_then(|c| c.last_transition_time.as_ref())
                    .map(|t| t.0)
                    .unwrap_or_else(jiff::Timestamp::now)
                    .to_string();
                let patch = serde_json::json!({"status": {"conditions": [{
                    "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                    "message": message, "lastProbeTime": null, "lastTransitionTime": now,
                }]}});
                match client.patch_status::<Pod>(ns.as_str(), &name, &Patch::strategic(patch)) {
                    Ok(_) | Err(ClientError::NotFound) => {}
                    Err(e) => return Err(Error::transient("StatusFailed", e.to_string())),
                }
                let _ = ctx.event(Event::warning("FailedScheduling", "Scheduling").note(message));
            }
            Ok(Action::requeue(RETRY))
        }
    }
}

wasmlet_sdk::reconciler!(Pod, reconcile);
