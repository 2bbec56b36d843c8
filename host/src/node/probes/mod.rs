//! Container probes, the kubelet's prober on a wasmlet node: startup,
//! readiness and liveness probes of the `exec` kind, each run as another
//! instance of the container's module with its environment and volumes
//! ([`WorkloadManager::exec`]), exit 0 = success, with the probe's
//! `initialDelaySeconds`, `periodSeconds`, `timeoutSeconds`,
//! `successThreshold` and `failureThreshold`.
//!
//! As upstream's: the startup probe gates the other two (`started` stays
//! false until it passes); a container with a readiness probe is not ready
//! until the probe passes; a liveness or startup probe that fails its
//! threshold kills the container, which restarts per `restartPolicy`.
//! Probes are the host's, not the provider's (as the kubelet's prober is not
//! the container runtime's): the provider's status is written with the
//! probe results laid over it ([`Prober::overlay`]), and a changed result
//! re-writes it (`Wake::ProbeChanged`).
//!
//! `httpGet`, `tcpSocket` and `grpc` probes need the workload to listen on a
//! socket, and workloads have none (no network namespace to give them one
//! of their own): such a probe fails, with an Event saying why (wasi-runner
//! refuses such pods up front).

mod worker;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::Pod;
use kube::runtime::events::Recorder;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::pods::Wake;
use super::workloads::WorkloadManager;

/// A probe instance's memory, at most (below the container's own limit).
pub(crate) const PROBE_MAX_MEMORY: u64 = 64 << 20;
/// A probe's output kept for its Event (the kubelet's `maxProbeOutputLength`).
pub(crate) const PROBE_OUTPUT_MAX: usize = 10 << 10;

/// One container's probe results, for the workload it is now.
struct Results {
    handle: u64,
    started: bool,
    ready: bool,
    stop: Arc<AtomicBool>,
}

#[derive(Clone, Default)]
pub(crate) struct Shared(Arc<Mutex<HashMap<String, HashMap<String, Results>>>>);

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, HashMap<String, Results>>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Sets a result; `true` when it changed (the status is to be re-written).
    fn set(&self, uid: &str, container: &str, handle: u64, f: impl FnOnce(&mut Results)) -> bool {
        let mut all = self.lock();
        let Some(r) = all
            .get_mut(uid)
            .and_then(|c| c.get_mut(container))
            .filter(|r| r.handle == handle)
        else {
            return false;
        };
        let before = (r.started, r.ready);
        f(r);
        before != (r.started, r.ready)
    }
}

/// The node's probes, by pod uid and container.
pub(crate) struct Prober {
    workloads: Arc<WorkloadManager>,
    recorder: Recorder,
    results: Shared,
}

impl Prober {
    pub(crate) fn new(workloads: Arc<WorkloadManager>, recorder: Recorder) -> Prober {
        Prober {
            workloads,
            recorder,
            results: Shared::default(),
        }
    }

    /// Starts the probes of each running container of `pod` that has any
    /// (once per workload: a restarted container starts them afresh, not
    /// started and not ready), and stops those of containers that stopped.
    /// `wake` reaches the pod's machine when a result changes.
    pub(crate) fn sync(&self, pod: &Arc<Pod>, wake: Option<mpsc::UnboundedSender<Wake>>) {
        let Some(uid) = pod.metadata.uid.clone() else {
            return;
        };
        let Some(spec) = pod.spec.as_ref() else {
            return;
        };
        let mut all = self.results.lock();
        let pod_results = all.entry(uid.clone()).or_default();
        for c in &spec.containers {
            if c.startup_probe.is_none()
                && c.readiness_probe.is_none()
                && c.liveness_probe.is_none()
            {
                continue;
            }
            let handle = self.workloads.container_handle(&uid, &c.name);
            let current = pod_results.get(&c.name).map(|r| r.handle);
            if current.is_some() && current == handle {
                continue;
            }
            if let Some(old) = pod_results.remove(&c.name) {
                old.stop.store(true, Ordering::SeqCst);
            }
            let (Some(handle), Some(wake)) = (handle, wake.clone()) else {
                continue;
            };
            let stop = Arc::new(AtomicBool::new(false));
            pod_results.insert(
                c.name.clone(),
                Results {
                    handle,
                    started: c.startup_probe.is_none(),
                    ready: c.readiness_probe.is_none(),
                    stop: stop.clone(),
                },
            );
            tokio::spawn(
                worker::Worker {
                    workloads: self.workloads.clone(),
                    recorder: self.recorder.clone(),
                    results: self.results.clone(),
                    pod: pod.clone(),
                    uid: uid.clone(),
                    container: c.clone(),
                    handle,
                    stop,
                    wake,
                }
                .run(),
            );
        }
    }

    /// Stops the pod's probes (its machine ended).
    pub(crate) fn forget(&self, uid: &str) {
        if let Some(gone) = self.results.lock().remove(uid) {
            for r in gone.values() {
                r.stop.store(true, Ordering::SeqCst);
            }
        }
    }

    /// Lays the probe results over the provider's status: a probed
    /// container's `started` and `ready`, then the pod's `ContainersReady`
    /// and `Ready` conditions, which are False while any container is not ready.
    pub(crate) fn overlay(&self, pod: &Pod, status: &mut Value) {
        let Some(uid) = pod.metadata.uid.as_deref() else {
            return;
        };
        let all = self.results.lock();
        let Some(results) = all.get(uid) else {
            return;
        };
        let Some(statuses) = status
            .get_mut("containerStatuses")
            .and_then(Value::as_array_mut)
        else {
            return;
        };
        for s in statuses.iter_mut() {
            let Some(r) = s["name"].as_str().and_then(|n| results.get(n)) else {
                continue;
            };
            let running = s.pointer("/state/running").is_some();
            let ready = s["ready"].as_bool().unwrap_or(false) && r.started && r.ready;
            s["started"] = json!(running && r.started);
            s["ready"] = json!(ready);
        }
        let unready: Vec<String> = statuses
            .iter()
            .filter(|s| s["ready"] == false)
            .filter_map(|s| s["name"].as_str().map(str::to_string))
            .collect();
        drop(all);
        if unready.is_empty() {
            return;
        }
        let message = format!("containers with unready status: [{}]", unready.join(" "));
        for c in status
            .get_mut("conditions")
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
        {
            if matches!(c["type"].as_str(), Some("Ready" | "ContainersReady"))
                && c["status"] == "True"
            {
                *c = json!({
                    "type": c["type"],
                    "status": "False",
                    "reason": "ContainersNotReady",
                    "message": message,
                });
            }
        }
    }
}
