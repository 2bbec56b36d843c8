//! Pod state machines: one per pod bound to this node, driven by the host
//! through the provider plugin's handlers (Krustlet v0.5's model, with the
//! machine in a wasm component).
//!
//! The host owns the loop: it calls `handle` for the current state, checks a
//! transition against the declared edges (an undeclared one sends the pod to
//! the error state with an Event naming the edge), patches the status the
//! provider returns for the state the pod comes to rest in (states passed
//! straight through are not written), and does every wait itself
//! (workload exits, timers, module fetches, pod changes) — no guest call
//! blocks. A deletionTimestamp moves the pod to the on-delete state; when that
//! state's handler waits on nothing, the pod is deleted with grace 0. A
//! faulting provider call is retried with back-off (`fault`), never final.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tracing::Instrument;

use super::admission::{self, Admission, Allocatable};
use super::agent::NodeConfig;
use crate::plugin::PluginSet;
use crate::plugin::loaded::ProviderReply;
use crate::plugin::provider::{HandlerOutcome, WaitOn, WakeEvent};

mod backoff;
mod fault;

use fault::AfterFault;

/// A delay as Events and messages show it (`10s`, `200ms`).
pub(crate) use backoff::show as show_delay;

/// What wakes a pod's machine.
#[derive(Debug, Clone)]
pub(crate) enum Wake {
    PodChanged(Arc<Pod>),
    /// The pod object is gone from the API.
    PodGone,
    WorkloadExited(u64),
    FetchDone(u64),
    /// A probe result changed: the status is written again.
    ProbeChanged,
}

/// Routes workload exits and fetch completions to the machine waiting on them.
#[derive(Default)]
struct Routes {
    machines: HashMap<String, mpsc::UnboundedSender<Wake>>,
    handles: HashMap<u64, String>,
    /// Fetch id -> the pods waiting on it (pods with the same image share a fetch).
    fetches: HashMap<u64, std::collections::HashSet<String>>,
    /// Fetches that finished lately: a pod that registers its wait after the
    /// notification went out (a failed local fetch ends within microseconds) still wakes.
    done_fetches: std::collections::VecDeque<u64>,
}

pub(crate) struct PodRunner {
    client: kube::Client,
    plugins: Arc<PluginSet>,
    provider: String,
    node: NodeConfig,
    routes: Mutex<Routes>,
    recorder: Recorder,
    /// Each pod's state and since when (the status page).
    states: Mutex<std::collections::BTreeMap<String, (String, std::time::SystemTime)>>,
    /// The requests of the pods admitted to run here.
    admission: Mutex<Admission>,
    /// Pods this node rejected (uid): they never get a machine.
    rejected: Mutex<std::collections::HashSet<String>>,
    /// Pods per state, transitions, time in state, handler faults.
    pub(crate) metrics: super::metrics::PodMetrics,
    /// The containers' probes, laid over the provider's status.
    prober: super::probes::Prober,
}

/// `namespace/name`: how the node names a pod (logs, the status page).
pub(super) fn key_of(pod: &Pod) -> String {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or(""),
        pod.metadata.name.as_deref().unwrap_or("")
    )
}

impl PodRunner {
    pub(crate) fn new(
        client: kube::Client,
        plugins: Arc<PluginSet>,
        provider: &str,
        node: NodeConfig,
        workloads: Arc<super::workloads::WorkloadManager>,
    ) -> Arc<PodRunner> {
        let recorder = Recorder::new(
            client.clone(),
            Reporter {
                controller: "wasmlet-node".into(),
                instance: Some(node.name.clone()),
            },
        );
        Arc::new(PodRunner {
            prober: super::probes::Prober::new(workloads, recorder.clone()),
            client,
            plugins,
            provider: provider.into(),
            routes: Mutex::new(Routes::default()),
            recorder,
            states: Mutex::default(),
            admission: Mutex::new(Admission::new(Allocatable::of(&node))),
            rejected: Mutex::default(),
            metrics: super::metrics::PodMetrics::new(provider),
            node,
        })
    }

    /// The provider plugin whose state machines run the pods.
    pub(crate) fn provider(&self) -> &str {
        &self.provider
    }

    /// The node's pods (`namespace/name`), each with its state and since when.
    pub(crate) fn pod_states(&self) -> Vec<(String, String, std::time::SystemTime)> {
        let states = self.states.lock().unwrap_or_else(|p| p.into_inner());
        states
            .iter()
            .map(|(k, (state, since))| (k.clone(), state.clone(), *since))
            .collect()
    }

    fn set_state(&self, key: &str, state: Option<&str>) {
        let mut states = self.states.lock().unwrap_or_else(|p| p.into_inner());
        let was = states.get(key).cloned();
        let stayed = |since: std::time::SystemTime| since.elapsed().unwrap_or_default();
        match state {
            Some(s) if states.get(key).is_some_and(|(cur, _)| cur == s) => {}
            Some(s) => {
                states.insert(
                    key.to_string(),
                    (s.to_string(), std::time::SystemTime::now()),
                );
                let stay = was.as_ref().map_or(Duration::ZERO, |(_, t)| stayed(*t));
                let from = was.as_ref().map(|(f, _)| f.as_str());
                self.metrics.moved(from, Some(s), stay);
            }
            None => {
                states.remove(key);
                if let Some((f, t)) = &was {
                    self.metrics.moved(Some(f), None, stayed(*t));
                }
            }
        }
    }

    fn routes(&self) -> std::sync::MutexGuard<'_, Routes> {
        self.routes.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Delivers a workload exit to the machine waiting on it.
    pub(crate) fn workload_exited(&self, handle: u64) {
        let r = self.routes();
        if let Some(tx) = r.handles.get(&handle).and_then(|uid| r.machines.get(uid)) {
            let _ = tx.send(Wake::WorkloadExited(handle));
        }
    }

    pub(crate) fn fetch_done(&self, id: u64) {
        let mut r = self.routes();
        if r.done_fetches.len() >= 4096 {
            r.done_fetches.pop_front();
        }
        r.done_fetches.push_back(id);
        for uid in r.fetches.get(&id).into_iter().flatten() {
            if let Some(tx) = r.machines.get(uid) {
                let _ = tx.send(Wake::FetchDone(id));
            }
        }
    }

    /// Watches this node's pods and runs a machine for each, forever.
    pub(crate) async fn run(self: Arc<Self>) {
        let pods: Api<Pod> = Api::all(self.client.clone());
        let config =
            watcher::Config::default().fields(&format!("spec.nodeName={}", self.node.name));
        let mut stream = watcher(pods, config).default_backoff().boxed();
        while let Some(ev) = stream.next().await {
            match ev {
                Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p)) => self.deliver(p),
                Ok(watcher::Event::Delete(p)) => {
                    let uid = p.metadata.uid.clone().unwrap_or_default();
                    self.admission().release(&uid);
                    self.rejected().remove(&uid);
                    if let Some(tx) = self.routes().machines.get(&uid) {
                        let _ = tx.send(Wake::PodGone);
                    }
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(node = %self.node.name, error = %e, "pod watch failed; retrying")
                }
            }
        }
    }

    fn admission(&self) -> std::sync::MutexGuard<'_, Admission> {
        self.admission.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn rejected(&self) -> std::sync::MutexGuard<'_, std::collections::HashSet<String>> {
        self.rejected.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Admission, before a pod gets its machine: `false` when the pod must
    /// not run here (rejected now or before; a deleted rejected pod is
    /// removed, as the kubelet removes a terminated one).
    fn admit(self: &Arc<Self>, uid: &str, pod: &Arc<Pod>) -> bool {
        if self.rejected().contains(uid) || admission::rejected(pod) {
            if deleting(pod) {
                let me = self.clone();
                let (key, uid) = (key_of(pod), uid.to_string());
                tokio::spawn(async move { me.remove_rejected(&key, &uid).await });
            }
            return false;
        }
        // A finished pod requests nothing; its machine still reports it.
        if admission::terminal(pod) {
            self.admission().release(uid);
            return true;
        }
        let rejection = match self.admission().admit(uid, pod) {
            Ok(()) => return true,
            Err(r) => r,
        };
        self.rejected().insert(uid.to_string());
        tracing::info!(pod = %key_of(pod), reason = %rejection.reason, "{}", rejection.message);
        let (me, pod) = (self.clone(), pod.clone());
        tokio::spawn(async move { me.reject(&pod, rejection).await });
        false
    }

    /// Writes the rejection as the kubelet does: phase Failed with its reason
    /// and message, and a Warning event of the same reason.
    async fn reject(&self, pod: &Pod, r: admission::Rejection) {
        let key = key_of(pod);
        let (ns, name) = key.split_once('/').unwrap_or(("", &key));
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), ns);
        let body = json!({"status": {
            "phase": "Failed",
            "reason": r.reason,
            "message": r.message,
        }});
        if let Err(e) = pods
            .patch_status(name, &PatchParams::default(), &Patch::Merge(&body))
            .await
        {
            tracing::warn!(pod = %key, error = %e, "writing the pod's rejection failed");
        }
        self.event(pod, EventType::Warning, &r.reason, r.message)
            .await;
    }

    /// A rejected pod being deleted: nothing runs, so it goes at once.
    async fn remove_rejected(&self, key: &str, uid: &str) {
        let (ns, name) = key.split_once('/').unwrap_or(("", key));
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), ns);
        let dp = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions {
                uid: Some(uid.to_string()),
                resource_version: None,
            }),
            ..Default::default()
        };
        match pods.delete(name, &dp).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {}
            Err(e) => tracing::warn!(pod = %key, error = %e, "removing a rejected pod failed"),
        }
    }

    fn deliver(self: &Arc<Self>, pod: Pod) {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let pod = Arc::new(pod);
        // A pod that has finished no longer holds what it requested.
        if admission::terminal(&pod) {
            self.admission().release(&uid);
        }
        let routes = self.routes();
        if let Some(tx) = routes.machines.get(&uid)
            && tx.send(Wake::PodChanged(pod.clone())).is_ok()
        {
            return;
        }
        drop(routes);
        if !self.admit(&uid, &pod) {
            return;
        }
        let mut routes = self.routes();
        let (tx, rx) = mpsc::unbounded_channel();
        routes.machines.insert(uid.clone(), tx);
        drop(routes);
        let me = self.clone();
        tokio::spawn(async move {
            let key = key_of(&pod);
            Machine {
                backoff: backoff::Backoff::new(me.node.provider_backoff_base),
                runner: me.clone(),
                uid: uid.clone(),
                key: key.clone(),
                pod,
                rx,
                faulted: false,
            }
            .run()
            .await;
            me.set_state(&key, None);
            me.prober.forget(&uid);
            me.admission().release(&uid);
            let mut r = me.routes();
            r.machines.remove(&uid);
            r.handles.retain(|_, u| *u != uid);
            r.fetches.retain(|_, waiting| {
                waiting.remove(&uid);
                !waiting.is_empty()
            });
        });
    }

    async fn event(&self, pod: &Pod, type_: EventType, reason: &str, note: String) {
        let reference = k8s_openapi::api::core::v1::ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
            namespace: pod.metadata.namespace.clone(),
            name: pod.metadata.name.clone(),
            uid: pod.metadata.uid.clone(),
            ..Default::default()
        };
        let ev = Event {
            type_,
            reason: reason.into(),
            note: Some(note),
            action: "Run".into(),
            secondary: None,
        };
        if let Err(e) = self.recorder.publish(&ev, &reference).await {
            tracing::warn!(error = %e, "could not record a pod event");
        }
    }
}

struct Machine {
    runner: Arc<PodRunner>,
    uid: String,
    key: String,
    pod: Arc<Pod>,
    rx: mpsc::UnboundedReceiver<Wake>,
    /// Back-off between retries of a faulting provider call.
    backoff: backoff::Backoff,
    /// The pod's status shows a fault: the next status written clears it.
    faulted: bool,
}

/// Gives each condition the provider left without one a
/// `lastTransitionTime`, as the kubelet does: the stored condition's while
/// its status stays, `now` when it changes.
fn stamp_transitions(conds: &mut [Value], pod: &Pod, now: &str) {
    let stored = pod.status.as_ref().and_then(|s| s.conditions.as_ref());
    for c in conds.iter_mut() {
        if c.get("lastTransitionTime").is_some_and(|t| !t.is_null()) {
            continue;
        }
        let kept = stored
            .into_iter()
            .flatten()
            .find(|s| c["type"] == s.type_.as_str() && c["status"] == s.status.as_str())
            .and_then(|s| s.last_transition_time.as_ref())
            .map(|t| t.0.strftime("%Y-%m-%dT%H:%M:%SZ").to_string());
        c["lastTransitionTime"] = json!(kept.unwrap_or_else(|| now.to_string()));
    }
}

fn deleting(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_some()
}

impl Machine {
    fn pod_json(&self) -> String {
        serde_json::to_string(self.pod.as_ref()).unwrap_or_default()
    }

    /// Patches the provider's status for `state`, merged with what the host owns.
    async fn enter(&mut self, state: &str, data: &str) {
        self.runner.set_state(&self.key, Some(state));
        let Some(provider) = self.runner.plugins.get(&self.runner.provider) else {
            return;
        };
        // Recording, the call's record is written when `reply` drops, with the patch below.
        let reply = provider
            .provider_status(&self.key, state, &self.pod_json(), data)
            .await;
        let fragment = match &reply.result {
            Ok(s) => serde_json::from_str::<Value>(s).unwrap_or_else(|_| json!({})),
            Err(e) => {
                tracing::warn!(pod = %self.key, %state, error = %e, "provider status call failed");
                json!({})
            }
        };
        let mut status = if fragment.is_object() {
            fragment
        } else {
            json!({})
        };
        // A fault written while backing off is over once the provider reports again.
        if std::mem::take(&mut self.faulted) {
            for k in ["reason", "message"] {
                if status.get(k).is_none() {
                    status[k] = Value::Null;
                }
            }
        }
        let host = self.runner.node.address.to_string();
        status["hostIP"] = json!(host);
        status["hostIPs"] = json!([{"ip": host}]);
        if self
            .pod
            .status
            .as_ref()
            .and_then(|s| s.start_time.as_ref())
            .is_none()
            && status.get("startTime").is_none()
        {
            status["startTime"] =
                json!(chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string());
        }
        let wake = self.runner.routes().machines.get(&self.uid).cloned();
        self.runner.prober.sync(&self.pod, wake);
        self.runner.prober.overlay(&self.pod, &mut status);
        let mut conds: Vec<Value> = status
            .get("conditions")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let now = chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string();
        if !conds.iter().any(|c| c["type"] == "PodScheduled") {
            conds.push(json!({"type": "PodScheduled", "status": "True"}));
        }
        stamp_transitions(&mut conds, self.pod.as_ref(), &now);
        status["conditions"] = Value::Array(conds);
        let (ns, name) = self.key.split_once('/').unwrap_or(("", &self.key));
        let pods: Api<Pod> = Api::namespaced(self.runner.client.clone(), ns);
        let body = json!({"status": status});
        match pods
            .patch_status(name, &PatchParams::default(), &Patch::Merge(&body))
            .await
        {
            Ok(p) => reply.host_write(
                "patch-status",
                &self.key,
                &body,
                Ok(p.metadata.resource_version.as_deref()),
            ),
            Err(e) => {
                tracing::warn!(pod = %self.key, %state, error = %e, "pod status patch failed");
                reply.host_write("patch-status", &self.key, &body, Err(e.to_string()));
            }
        }
    }

    async fn run(self) {
        let _ = self.drive().await;
    }

    /// The machine's loop; `None` when it ends (the pod is gone).
    async fn drive(mut self) -> Option<()> {
        // The provider may still be loading (or being fixed): wait for it.
        let provider = loop {
            if let Some(p) = self.runner.plugins.get(&self.runner.provider) {
                break p;
            }
            tracing::debug!(pod = %self.key, provider = %self.runner.provider, "waiting for the provider plugin");
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(500)) => {}
                w = self.rx.recv() => match w {
                    None | Some(Wake::PodGone) => return None,
                    Some(Wake::PodChanged(p)) => self.pod = p,
                    Some(_) => {}
                },
            }
        };
        let graph = provider.graph.clone()?;
        // `init` is retried with back-off until it succeeds: no handler runs
        // without its state data.
        let mut data = loop {
            let provider = self.runner.plugins.get(&self.runner.provider)?;
            let msg = match provider.provider_init(&self.key, &self.pod_json()).await {
                Ok(Ok(d)) => break d,
                Ok(Err(msg)) => msg,
                Err(e) => e.to_string(),
            };
            match self.fail("init", msg).await {
                AfterFault::Retry | AfterFault::Deleted => {}
                AfterFault::Gone => return None,
            }
        };
        let mut state = if deleting(&self.pod) {
            graph.on_delete.clone()
        } else {
            graph.initial.clone()
        };
        // Status is patched where the machine comes to rest: states it passes
        // straight through would be overwritten within milliseconds anyway.
        let mut unpatched = true;
        let mut event: Option<WakeEvent> = None;
        loop {
            let provider = self.runner.plugins.get(&self.runner.provider)?;
            // One span per state handler call (exported over OTLP when configured).
            let span = tracing::info_span!("pod_state", pod = %self.key, provider = %self.runner.provider, state = %state);
            let reply = provider
                .provider_handle(&self.key, &state, &self.pod_json(), &data, event.take())
                .instrument(span)
                .await;
            let (on, new_data) = match reply.result.clone() {
                Ok(Ok(HandlerOutcome::Transition(t))) => {
                    // A self-edge is how a provider publishes an intermediate
                    // status (ErrImagePull before ImagePullBackOff): write it.
                    if t.to == state && unpatched && graph.allows(&state, &t.to) {
                        self.enter(&state, &data).await;
                    }
                    data = t.state_data;
                    if graph.allows(&state, &t.to) {
                        state = t.to;
                    } else {
                        let note = format!(
                            "provider {} took the undeclared edge {state} -> {}",
                            self.runner.provider, t.to
                        );
                        tracing::warn!(pod = %self.key, "{note}");
                        self.runner
                            .event(&self.pod, EventType::Warning, "IllegalTransition", note)
                            .await;
                        state = graph.error_state.clone();
                    }
                    unpatched = true;
                    continue;
                }
                Ok(Ok(HandlerOutcome::Wait(w))) => (w.on, w.state_data),
                Ok(Err(msg)) => {
                    drop(reply);
                    self.retry(&graph, &mut state, msg).await?;
                    unpatched = true;
                    continue;
                }
                Err(e) => {
                    drop(reply);
                    self.retry(&graph, &mut state, e.to_string()).await?;
                    unpatched = true;
                    continue;
                }
            };
            data = new_data;
            if on.is_empty() && state == graph.on_delete {
                self.finish(&reply).await;
                return None;
            }
            // Recording: the handler's record is written (no host write follows from a wait).
            drop(reply);
            if std::mem::take(&mut unpatched) {
                self.enter(&state, &data).await;
            }
            // Wait for what the handler asked for (and always for deletion).
            let mut timer: Option<Instant> = None;
            let mut fetched = None;
            {
                let mut r = self.runner.routes();
                for w in &on {
                    match w {
                        WaitOn::WorkloadExited(h) => {
                            r.handles.insert(*h, self.uid.clone());
                        }
                        WaitOn::FetchDone(f) => {
                            if r.done_fetches.contains(f) {
                                fetched = Some(*f);
                            }
                            r.fetches.entry(*f).or_default().insert(self.uid.clone());
                        }
                        WaitOn::Timer(ms) => {
                            let at = Instant::now() + Duration::from_millis(*ms);
                            timer = Some(timer.map_or(at, |t| t.min(at)));
                        }
                        WaitOn::PodChanged => {}
                    }
                }
            }
            // Exits that happened before we registered still count.
            if let Some(ev) = self.already_done(&on).or(fetched.map(WakeEvent::FetchDone)) {
                event = Some(ev);
                continue;
            }
            let wants_pod = on.iter().any(|w| matches!(w, WaitOn::PodChanged));
            // A teardown that waits past grace plus the bound is the host's.
            let forced = (state == graph.on_delete)
                .then(|| self.forced_at())
                .flatten();
            loop {
                let wake = tokio::select! {
                    w = self.rx.recv() => w,
                    _ = sleep_until(timer) => { event = Some(WakeEvent::TimerElapsed); break; }
                    _ = sleep_until(forced) => {
                        self.force_remove(&format!("the {state} handler"), "still waiting").await;
                        return None;
                    }
                };
                match wake {
                    None | Some(Wake::PodGone) => {
                        self.release().await;
                        return None;
                    }
                    Some(Wake::PodChanged(p)) => {
                        let was_deleting = deleting(&self.pod);
                        self.pod = p;
                        if deleting(&self.pod) && !was_deleting && state != graph.on_delete {
                            state = graph.on_delete.clone();
                            unpatched = true;
                            event = Some(WakeEvent::PodChanged);
                            break;
                        }
                        if wants_pod {
                            event = Some(WakeEvent::PodChanged);
                            break;
                        }
                    }
                    Some(Wake::WorkloadExited(h))
                        if on
                            .iter()
                            .any(|w| matches!(w, WaitOn::WorkloadExited(x) if *x == h)) =>
                    {
                        event = Some(WakeEvent::WorkloadExited(h));
                        break;
                    }
                    Some(Wake::FetchDone(f))
                        if on
                            .iter()
                            .any(|w| matches!(w, WaitOn::FetchDone(x) if *x == f)) =>
                    {
                        event = Some(WakeEvent::FetchDone(f));
                        break;
                    }
                    // The provider's status again, with the new result over it.
                    Some(Wake::ProbeChanged) => self.enter(&state, &data).await,
                    Some(_) => {}
                }
            }
        }
    }

    /// A wait whose event already happened (a workload that exited between
    /// `spawn` and the wait).
    fn already_done(&self, on: &[WaitOn]) -> Option<WakeEvent> {
        let w = self
            .runner
            .plugins
            .get(&self.runner.provider)?
            .ctx
            .workloads
            .clone()?;
        for o in on {
            if let WaitOn::WorkloadExited(h) = o
                && let Ok(s) = w.status(*h)
                && !matches!(
                    s.state,
                    crate::plugin::provider::wasmlet::plugin::workloads::RunState::Running
                )
            {
                return Some(WakeEvent::WorkloadExited(*h));
            }
        }
        None
    }

    /// A provider call faulted (`what`: `init` or the handler of a state):
    /// back off, then retry it.
    async fn fail(&mut self, what: &str, msg: String) -> AfterFault {
        self.runner
            .metrics
            .fault(super::metrics::FaultKind::of(&msg));
        self.back_off(what, &msg).await
    }

    /// A handler faulted in `state`: after the back-off (in the host's
    /// `ProviderBackOff` state) the pod is back in `state` and its handler
    /// runs again, or in the on-delete state when the pod was deleted
    /// meanwhile. `None` when the pod is gone. (An `init` fault has no
    /// state to return to: the pod stays in `ProviderBackOff` until `init`
    /// succeeds and the machine rests in its first state.)
    async fn retry(
        &mut self,
        graph: &crate::plugin::provider::StateGraph,
        state: &mut String,
        msg: String,
    ) -> Option<()> {
        let after = self.fail(&format!("the {state} handler"), msg).await;
        match after {
            AfterFault::Retry => {}
            AfterFault::Deleted => *state = graph.on_delete.clone(),
            AfterFault::Gone => return None,
        }
        // Out of the back-off state: the retry runs in the state it names.
        self.runner.set_state(&self.key, Some(state.as_str()));
        Some(())
    }

    async fn release(&self) {
        if let Some(w) = self
            .runner
            .plugins
            .get(&self.runner.provider)
            .and_then(|p| p.ctx.workloads.clone())
        {
            w.release_pod(&self.uid);
        }
    }

    /// Deletes the pod object at once (grace 0), only while it is still this
    /// pod (uid precondition): what a kubelet does when teardown is done.
    pub(super) async fn delete_now(&self) -> kube::Result<()> {
        let (ns, name) = self.key.split_once('/').unwrap_or(("", &self.key));
        let pods: Api<Pod> = Api::namespaced(self.runner.client.clone(), ns);
        let dp = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions {
                uid: Some(self.uid.clone()),
                resource_version: None,
            }),
            ..Default::default()
        };
        pods.delete(name, &dp).await.map(|_| ())
    }

    /// Teardown done: the pod object goes (grace 0), as a kubelet does; the
    /// deletion is added to the last handler call's record (`handled`).
    async fn finish<T>(&self, handled: &ProviderReply<T>) {
        self.release().await;
        let body = json!({"gracePeriodSeconds": 0, "preconditions": {"uid": &self.uid}});
        let result = match self.delete_now().await {
            Ok(_) => {
                tracing::info!(pod = %self.key, "pod terminated and removed");
                Ok(None)
            }
            Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => Err(e.to_string()),
            Err(e) => {
                tracing::warn!(pod = %self.key, error = %e, "removing the pod failed");
                Err(e.to_string())
            }
        };
        handled.host_write("delete", &self.key, &body, result);
    }
}

/// Sleeps until `at`, or forever when there is none.
async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::stamp_transitions;
    use serde_json::json;

    #[test]
    fn a_condition_keeps_its_transition_time_until_its_status_changes() {
        let pod = serde_json::from_value(json!({"status": {"conditions": [
            {"type": "Ready", "status": "False", "lastTransitionTime": "2026-01-01T00:00:00Z"},
            {"type": "Initialized", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"},
        ]}}))
        .unwrap();
        let mut conds = vec![
            json!({"type": "Ready", "status": "True"}),
            json!({"type": "Initialized", "status": "True"}),
            json!({"type": "PodScheduled", "status": "True", "lastTransitionTime": "2025-05-05T00:00:00Z"}),
        ];
        stamp_transitions(&mut conds, &pod, "2026-02-02T00:00:00Z");
        assert_eq!(
            conds[0]["lastTransitionTime"], "2026-02-02T00:00:00Z",
            "changed: now"
        );
        assert_eq!(
            conds[1]["lastTransitionTime"], "2026-01-01T00:00:00Z",
            "unchanged: kept"
        );
        assert_eq!(
            conds[2]["lastTransitionTime"], "2025-05-05T00:00:00Z",
            "the provider's own"
        );
    }
}
