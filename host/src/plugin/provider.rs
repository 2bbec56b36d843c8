//! The provider world's host side: the `workloads` import, which
//! delegates to the node agent's [`Workloads`] backend. Every `workloads`
//! call is non-blocking by contract, so the backend is synchronous.

use std::sync::Arc;

use super::sandbox::State;

pub(crate) use super::bindings::provider::exports::wasmlet::plugin::provider::{
    HandlerOutcome, StateGraph, WaitOn, WakeEvent,
};
// The node agent's workload API still speaks the provider world's types.
use self::wasmlet::plugin::workloads::{
    FetchError, FetchProgress, FetchRequest, SpawnSpec, VolumeRequest, WorkloadError,
    WorkloadStatus,
};
pub(crate) use super::bindings::provider::wasmlet;

/// What runs a provider's workloads: the node agent's workload manager.
/// `pod_uid` scopes every handle to the pod the calling machine runs.
pub trait Workloads: Send + Sync {
    /// `docker_configs`: the `.dockerconfigjson` of each of the request's pull
    /// secrets that exists (looked up by the host with its own credentials).
    fn fetch_module(
        &self,
        req: FetchRequest,
        docker_configs: Vec<Vec<u8>>,
    ) -> Result<FetchProgress, FetchError>;
    fn prepare_volume(&self, req: VolumeRequest) -> Result<u64, WorkloadError>;
    fn spawn(&self, spec: SpawnSpec) -> Result<u64, WorkloadError>;
    fn status(&self, handle: u64) -> Result<WorkloadStatus, WorkloadError>;
    fn kill(&self, handle: u64, grace_ms: u32) -> Result<(), WorkloadError>;
    fn read_logs(&self, handle: u64, max_bytes: u32) -> Result<Vec<u8>, WorkloadError>;
    fn release_pod(&self, pod_uid: &str);
}

/// The `.dockerconfigjson` of a pull secret as read through the cluster.
fn docker_config(
    namespace: &str,
    name: &str,
    got: Result<String, crate::cluster::ClientError>,
) -> Option<Vec<u8>> {
    use base64::Engine;
    match got {
        Ok(json) => {
            let secret: serde_json::Value = serde_json::from_str(&json).ok()?;
            let data = secret.pointer("/data/.dockerconfigjson")?.as_str()?;
            base64::engine::general_purpose::STANDARD.decode(data).ok()
        }
        // Like kubelet: a missing pull secret is skipped (and the pull may then fail).
        Err(crate::cluster::ClientError::NotFound) => {
            tracing::warn!(%namespace, secret = %name, "image pull secret not found");
            None
        }
        Err(e) => {
            tracing::warn!(%namespace, secret = %name, error = %e, "image pull secret unreadable");
            None
        }
    }
}

fn backend(state: &State) -> Result<Arc<dyn Workloads>, WorkloadError> {
    state.plugin.workloads.clone().ok_or_else(|| {
        WorkloadError::Failed("this host runs no workloads (not a node agent)".into())
    })
}

/// The live `workloads` imports: what the host does when nothing is replayed
/// (the contract's `workloads::Host`, through the call's tape, is in
/// `imports::taped::workloads`).
impl State {
    pub(crate) async fn fetch_module_live(
        &mut self,
        req: FetchRequest,
    ) -> Result<FetchProgress, FetchError> {
        let b = backend(self).map_err(|e| FetchError::Other(format!("{e:?}")))?;
        let mut configs = Vec::new();
        if let Some(api) = self.plugin.api.clone()
            && !req.pull_secrets.is_empty()
        {
            match api.resolve("v1", "Secret").await {
                Ok(secrets) => {
                    for name in &req.pull_secrets {
                        let got = api.get(&secrets, Some(&req.namespace), name).await;
                        if let Some(config) = docker_config(&req.namespace, name, got) {
                            configs.push(config);
                        }
                    }
                }
                Err(e) => tracing::warn!(error = %e, "image pull secrets unreadable"),
            }
        }
        b.fetch_module(req, configs)
    }

    pub(crate) fn prepare_volume_live(&self, req: VolumeRequest) -> Result<u64, WorkloadError> {
        backend(self)?.prepare_volume(req)
    }

    pub(crate) fn spawn_live(&self, spec: SpawnSpec) -> Result<u64, WorkloadError> {
        backend(self)?.spawn(spec)
    }

    pub(crate) fn status_live(&self, handle: u64) -> Result<WorkloadStatus, WorkloadError> {
        backend(self)?.status(handle)
    }

    pub(crate) fn kill_live(&self, handle: u64, grace_ms: u32) -> Result<(), WorkloadError> {
        backend(self)?.kill(handle, grace_ms)
    }

    pub(crate) fn read_logs_live(
        &self,
        handle: u64,
        max_bytes: u32,
    ) -> Result<Vec<u8>, WorkloadError> {
        backend(self)?.read_logs(handle, max_bytes)
    }

    pub(crate) fn release_pod_live(&self, pod_uid: &str) {
        if let Ok(b) = backend(self) {
            b.release_pod(pod_uid);
        }
    }
}

/// The host-owned state a pod is in while a faulting provider call backs
/// off (`node::pods::fault`); no graph may declare it.
pub(crate) const BACKOFF_STATE: &str = "ProviderBackOff";

/// Checks a graph the provider declares: every named state exists, and
/// none is the host's own [`BACKOFF_STATE`].
pub(crate) fn validate_graph(g: &StateGraph) -> Result<(), String> {
    if g.states.iter().any(|s| s == BACKOFF_STATE) {
        return Err(format!(
            "state \"{BACKOFF_STATE}\" is the host's own (a pod waiting out a provider fault); name the provider's state otherwise"
        ));
    }
    let known = |s: &str| g.states.iter().any(|x| x == s);
    for (what, s) in [
        ("initial", &g.initial),
        ("on-delete", &g.on_delete),
        ("error-state", &g.error_state),
    ] {
        if !known(s) {
            return Err(format!(
                "{what} state \"{s}\" is not among the declared states"
            ));
        }
    }
    for (from, to) in &g.edges {
        if !known(from) || !known(to) {
            return Err(format!("edge {from} -> {to} names an undeclared state"));
        }
    }
    for b in &g.backoff_states {
        if !known(b) {
            return Err(format!(
                "back-off state \"{b}\" is not among the declared states"
            ));
        }
    }
    Ok(())
}

impl StateGraph {
    /// Whether the guest may move `from` → `to` (the host's own moves to
    /// on-delete and error states need no edge).
    pub(crate) fn allows(&self, from: &str, to: &str) -> bool {
        self.edges.iter().any(|(f, t)| f == from && t == to)
    }

    /// The graph in Graphviz DOT (`wasmlet plugin graph`, the status page):
    /// the initial state doubled, the error and on-delete states marked, the
    /// host's own moves (any state to on-delete or error) dashed once.
    pub(crate) fn to_dot(&self, name: &str) -> String {
        let q = |s: &str| format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""));
        let mut out = format!(
            "digraph {} {{\n  rankdir=LR;\n  node [shape=box, style=rounded];\n",
            q(name)
        );
        for state in &self.states {
            let mut attrs = Vec::new();
            if *state == self.initial {
                attrs.push("peripheries=2");
            }
            if *state == self.error_state {
                attrs.push("color=red");
            }
            if *state == self.on_delete {
                attrs.push("color=gray40");
            }
            if self.backoff_states.contains(state) {
                attrs.push("style=\"rounded,dashed\"");
            }
            out.push_str(&format!("  {} [{}];\n", q(state), attrs.join(", ")));
        }
        for (from, to) in &self.edges {
            out.push_str(&format!("  {} -> {};\n", q(from), q(to)));
        }
        out.push_str(&format!(
            "  \"*\" [shape=point];\n  \"*\" -> {} [style=dashed, label=\"deleted\"];\n  \"*\" -> {} [style=dashed, label=\"error\"];\n}}\n",
            q(&self.on_delete),
            q(&self.error_state)
        ));
        out
    }
}

#[cfg(test)]
mod dot_tests {
    use super::*;

    #[test]
    fn dot_names_every_state_and_edge() {
        let g = StateGraph {
            states: vec![
                "Start".into(),
                "Run\"ning".into(),
                "Error".into(),
                "Gone".into(),
            ],
            edges: vec![("Start".into(), "Run\"ning".into())],
            initial: "Start".into(),
            on_delete: "Gone".into(),
            error_state: "Error".into(),
            backoff_states: vec![],
        };
        let dot = g.to_dot("p");
        assert!(dot.starts_with("digraph \"p\" {"), "{dot}");
        assert!(dot.contains("\"Start\" [peripheries=2];"), "{dot}");
        assert!(dot.contains("\"Start\" -> \"Run\\\"ning\";"), "{dot}");
        assert!(
            dot.contains("\"*\" -> \"Error\" [style=dashed, label=\"error\"];"),
            "{dot}"
        );
        assert!(dot.trim_end().ends_with('}'));
    }

    #[test]
    fn a_graph_may_not_declare_the_hosts_back_off_state() {
        let s = |x: &str| x.to_string();
        let mut g = StateGraph {
            states: vec![s("Start"), s("Error"), s("Gone")],
            edges: vec![],
            initial: s("Start"),
            on_delete: s("Gone"),
            error_state: s("Error"),
            backoff_states: vec![],
        };
        assert_eq!(validate_graph(&g), Ok(()));
        g.states.push(s(BACKOFF_STATE));
        let e = validate_graph(&g).unwrap_err();
        assert!(e.contains("\"ProviderBackOff\" is the host's own"), "{e}");
    }
}
