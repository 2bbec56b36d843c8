//! The built-in scheduler, a reconciler of Pods (kube-scheduler's default
//! profile reduced to the filters and scores of `fit` and `score`).
//!
//! Each call places one pod: it brings its view of the nodes and of what is
//! bound to each up to date, filters and scores, and binds through
//! `pods/binding`. The view is kube-scheduler's node-info cache: kept by the
//! warm instance between calls (`reuse-instances`) and fed only the changes
//! since the last call (`list-changes`), so a placement costs the number of
//! nodes and of changes, not of pods (a fresh instance lists once). A pod
//! bound by this instance counts on its node at once, before the cache shows
//! the binding (kube-scheduler's assumed pods), so the next decision need not
//! wait for the watch: one call at a time (the manifest's concurrency) keeps
//! every decision on one view. A pod that fits nowhere gets
//! `PodScheduled=False` (reason `Unschedulable`, the FitError message) and a
//! `FailedScheduling` event when the message changes, and is tried again as
//! soon as a Node changes (the manifest's `waiting` watch), or after [`RETRY`]
//! when nothing changed.
//!
//! Deviations from upstream: no preemption, no priority order (pods go in the
//! host's queue order), no inter-pod affinity, topology spread, ports or volume
//! filters, ties go to the first node by name, and a pod that stops running frees
//! its resources for waiting pods only at their next timed retry (any Node change
//! retries them at once). A new instance (after a trap or a new version)
//! starts without the assumed pods of the old one: a binding made in the
//! last moments before that, and not yet in the cache, is not counted by the
//! first decisions of the new one (kube-scheduler loses its assumed pods on a
//! restart too); the node agent's admission refuses a pod that does not fit.

pub mod fit;
pub mod quantity;
pub mod schedule;
pub mod score;

use std::borrow::Cow;
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

/// What the scheduler keeps of each pod.
struct PodView {
    /// `spec.nodeName` is set: a binding is in the cache.
    bound: bool,
    /// The node the pod counts against and what it requests there.
    counts: Option<(String, Usage)>,
}

/// The scheduler's view of the cluster, kept while the instance is warm.
struct View {
    nodes: Mirror<Node>,
    pods: Mirror<PodView>,
    /// What is bound to each node, summed from `pods` as it changes.
    usage: HashMap<String, Usage>,
    /// Pods this instance bound whose binding the cache does not show yet
    /// (kube-scheduler's assumed pods), by key: their node and requests.
    assumed: HashMap<String, (String, Usage)>,
}

impl View {
    fn new() -> View {
        View {
            nodes: Mirror::new(ListParams::all()),
            pods: Mirror::new(ListParams::all()),
            usage: HashMap::new(),
            assumed: HashMap::new(),
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
                |p| PodView {
                    bound: p
                        .spec
                        .as_ref()
                        .and_then(|s| s.node_name.as_deref())
                        .is_some_and(|n| !n.is_empty()),
                    counts: Usage::of(&p),
                },
                |_, old, new| {
                    if let Some((node, u)) = old.and_then(|v| v.counts.as_ref()) {
                        usage.entry(node.clone()).or_default().sub(u);
                    }
                    if let Some((node, u)) = new.and_then(|v| v.counts.as_ref()) {
                        usage.entry(node.clone()).or_default().add(u);
                    }
                },
            )
            .map_err(|e| Error::transient("ListPods", e.to_string()))?;
        // An assumed pod is done with once the cache shows it bound (its
        // usage is then counted from the mirror) or gone.
        let pods = &self.pods;
        self.assumed
            .retain(|key, _| pods.get(key).is_some_and(|v| !v.bound));
        Ok(())
    }

    /// What each node has bound, the assumed pods included.
    fn usage(&self) -> Cow<'_, HashMap<String, Usage>> {
        if self.assumed.is_empty() {
            return Cow::Borrowed(&self.usage);
        }
        let mut all = self.usage.clone();
        for (node, u) in self.assumed.values() {
            all.entry(node.clone()).or_default().add(u);
        }
        Cow::Owned(all)
    }

    /// Counts `pod`, just bound to `node`, there until the cache shows it.
    fn assume(&mut self, key: String, node: &str, pod: &Pod) {
        self.assumed
            .insert(key, (node.to_string(), Usage::requested_by(pod)));
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
        Ok::<_, Error>(decide(&pod, view.nodes.values(), &view.usage()))
    })?;
    match decision {
        Decision::Bind(node) => match client.bind(&ns, &name, &node) {
            Ok(()) => {
                VIEW.with_borrow_mut(|view| view.assume(format!("{ns}/{name}"), &node, &pod));
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fit::tests::{node, pod};
    use serde_json::json;
    use wasmlet_sdk::testing::FakeHost;

    fn needs(name: &str, memory: &str) -> Pod {
        pod(json!({"metadata": {"name": name}, "spec": {"containers": [
            {"name": "c", "resources": {"requests": {"memory": memory}}}]}}))
    }

    /// The cache lags the binding: the assumed pod fills the node until the
    /// cache shows it bound, and is counted once from then on.
    #[test]
    fn a_bound_pod_counts_before_the_cache_shows_it_and_once_after() {
        let host = FakeHost::new();
        let _g = host.install();
        host.insert(node(json!({})));
        let a = needs("a", "600Mi");
        host.insert(&a);
        let client = Client::new();
        let mut view = View::new();
        view.sync(&client).unwrap();
        assert_eq!(
            decide(&a, view.nodes.values(), &view.usage()),
            Decision::Bind("n1".into())
        );
        view.assume("default/a".into(), "n1", &a);

        // Still unbound in the cache: b does not fit beside the assumed a.
        view.sync(&client).unwrap();
        let b = needs("b", "600Mi");
        assert!(matches!(
            decide(&b, view.nodes.values(), &view.usage()),
            Decision::Unschedulable(m) if m.contains("Insufficient memory")
        ));

        // The binding reaches the cache: a counts once, from the mirror.
        let mut bound = a.clone();
        bound.spec.as_mut().unwrap().node_name = Some("n1".into());
        host.insert(&bound);
        view.sync(&client).unwrap();
        assert!(view.assumed.is_empty());
        assert_eq!(view.usage()["n1"].requested.memory, 600 << 20);

        // A pod deleted before its binding shows is forgotten too.
        view.assume("default/gone".into(), "n1", &needs("gone", "1Mi"));
        view.sync(&client).unwrap();
        assert!(view.assumed.is_empty());
    }
}
