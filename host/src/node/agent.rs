//! The Node object and its heartbeat: registration with capacity, nodeInfo,
//! labels and taints; a Lease in `kube-node-lease` renewed every 10 s; the
//! conditions kept fresh (Ready from [`super::ready`], or False with
//! `WorkloadRuntimeUnavailable` while the workload data directory cannot
//! take a file (probed each tick, `super::workloads::probe`); the pressures
//! from [`super::pressure`]); NotReady on shutdown. A failed renewal is
//! logged and retried on the next tick, never a panic (a Krustlet gap).

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use wasmlet_apimachinery::time::now_rfc3339;

use super::pressure::Pressure;
use super::ready::{NotReady, Readiness};

/// How often the node lease is renewed (kubelet's default).
pub(crate) const LEASE_RENEW: Duration = Duration::from_secs(10);
/// How often the Ready condition's heartbeat is refreshed.
pub(crate) const STATUS_EVERY: Duration = Duration::from_secs(40);

#[derive(Clone, Debug)]
pub struct NodeConfig {
    pub(crate) name: String,
    pub(crate) address: IpAddr,
    pub kubelet_port: u16,
    pub(crate) cpu: String,
    pub(crate) memory: String,
    /// Memory offered to pods (`status.allocatable.memory`, bytes): the
    /// workloads' memory budget; `None`: all of `memory`.
    pub(crate) allocatable_memory: Option<u64>,
    /// The largest memory limit one container may have (`--workload-max-memory`):
    /// a pod with a larger one is refused at admission; `None`: no bound.
    pub(crate) max_container_memory: Option<u64>,
    pub(crate) pods: u32,
    /// The first back-off after a provider call faults (doubling to 300 s).
    pub(crate) provider_backoff_base: std::time::Duration,
    /// How long past a deleted pod's grace period a faulting or stuck
    /// teardown may run before the node removes the pod itself.
    pub(crate) teardown_bound: std::time::Duration,
}

impl NodeConfig {
    pub fn new(name: &str) -> NodeConfig {
        NodeConfig {
            name: name.into(),
            address: IpAddr::from([127, 0, 0, 1]),
            kubelet_port: 10250,
            cpu: std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1)
                .to_string(),
            memory: total_memory()
                .map(|b| format!("{}Ki", b >> 10))
                .unwrap_or_else(|| "1Gi".into()),
            allocatable_memory: None,
            max_container_memory: None,
            pods: 110,
            provider_backoff_base: std::time::Duration::from_secs(10),
            teardown_bound: std::time::Duration::from_secs(30),
        }
    }
}

/// The machine's memory in bytes (`MemTotal`).
pub(crate) fn total_memory() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kb: u64 = text
        .lines()
        .find(|l| l.starts_with("MemTotal:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()?;
    kb.checked_mul(1024)
}

pub(crate) fn kubelet_version() -> String {
    format!("v1.33.0-wasmlet.{}", env!("CARGO_PKG_VERSION"))
}

/// The Ready condition's state: ready, not ready for a reason, or shutting down.
#[derive(Clone, Debug, PartialEq, Eq)]
enum ReadyState {
    Ready,
    NotReady(NotReady),
    ShuttingDown,
}

/// One node condition as written, its times aside.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Cond {
    type_: &'static str,
    status: &'static str,
    reason: &'static str,
    message: String,
}

/// The node's conditions: the three pressures (kubelet's reasons) and Ready.
fn node_conditions(ready: &ReadyState, p: &Pressure) -> Vec<Cond> {
    let pressure =
        |type_, under: &Option<String>, on: (&'static str, &str), off: (&'static str, &str)| {
            match under {
                Some(why) => Cond {
                    type_,
                    status: "True",
                    reason: on.0,
                    message: format!("{}: {why}", on.1),
                },
                None => Cond {
                    type_,
                    status: "False",
                    reason: off.0,
                    message: off.1.to_string(),
                },
            }
        };
    let (status, reason, message) = match ready {
        ReadyState::Ready => (
            "True",
            "KubeletReady",
            "wasmlet is posting ready status".to_string(),
        ),
        ReadyState::NotReady(n) => ("False", n.reason, n.message.clone()),
        ReadyState::ShuttingDown => (
            "False",
            "KubeletNotReady",
            "wasmlet is shutting down".to_string(),
        ),
    };
    vec![
        pressure(
            "MemoryPressure",
            &p.memory,
            (
                "KubeletHasInsufficientMemory",
                "wasmlet has insufficient memory available",
            ),
            (
                "KubeletHasSufficientMemory",
                "wasmlet has sufficient memory available",
            ),
        ),
        pressure(
            "DiskPressure",
            &p.disk,
            ("KubeletHasDiskPressure", "wasmlet has disk pressure"),
            ("KubeletHasNoDiskPressure", "wasmlet has no disk pressure"),
        ),
        pressure(
            "PIDPressure",
            &p.pid,
            (
                "KubeletHasInsufficientPID",
                "wasmlet has insufficient PID available",
            ),
            (
                "KubeletHasSufficientPID",
                "wasmlet has sufficient PID available",
            ),
        ),
        Cond {
            type_: "Ready",
            status,
            reason,
            message,
        },
    ]
}

/// The conditions as JSON, each with its own transition time.
fn conditions_json(conds: &[Cond], since: &[String]) -> Value {
    let now = now_rfc3339();
    Value::Array(
        conds
            .iter()
            .zip(since)
            .map(|(c, since)| {
                json!({"type": c.type_, "status": c.status, "reason": c.reason, "message": c.message,
                       "lastHeartbeatTime": now, "lastTransitionTime": since})
            })
            .collect(),
    )
}

/// Every condition at once (registration, shutdown).
fn conditions(ready: &ReadyState, since: &str) -> Value {
    let conds = node_conditions(ready, &Pressure::default());
    let since = vec![since.to_string(); conds.len()];
    conditions_json(&conds, &since)
}

fn status(cfg: &NodeConfig, ready: &ReadyState, since: &str) -> Value {
    let capacity = json!({"cpu": cfg.cpu, "memory": cfg.memory, "pods": cfg.pods.to_string()});
    let mut allocatable = capacity.clone();
    if let Some(m) = cfg.allocatable_memory {
        // What the node admits pods against and the scheduler places by.
        allocatable["memory"] = json!(m.to_string());
    }
    json!({
        "capacity": capacity,
        "allocatable": allocatable,
        "conditions": conditions(ready, since),
        "addresses": [
            {"type": "InternalIP", "address": cfg.address.to_string()},
            {"type": "Hostname", "address": cfg.name},
        ],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": cfg.kubelet_port}},
        "nodeInfo": {
            "architecture": "wasm32-wasi",
            "operatingSystem": "wasi",
            "osImage": "wasmlet",
            "kernelVersion": std::env::consts::OS,
            "kubeletVersion": kubelet_version(),
            "kubeProxyVersion": "",
            "containerRuntimeVersion": "wasmtime://48.0.8",
            "machineID": "", "systemUUID": "", "bootID": "",
        },
    })
}

impl ReadyState {
    fn of(check: &Result<(), NotReady>) -> ReadyState {
        match check {
            Ok(()) => ReadyState::Ready,
            Err(n) => ReadyState::NotReady(n.clone()),
        }
    }
}

/// Creates the Node (or takes over an existing one of that name) with its
/// Ready condition as `ready` says (at start, the provider is loading:
/// `ProviderLoading`).
pub(crate) async fn register(
    client: &kube::Client,
    cfg: &NodeConfig,
    ready: &Result<(), NotReady>,
) -> anyhow::Result<()> {
    let ready = ReadyState::of(ready);
    let nodes: Api<Node> = Api::all(client.clone());
    let labels: BTreeMap<String, String> = [
        ("kubernetes.io/arch", "wasm32-wasi"),
        ("kubernetes.io/os", "wasi"),
        ("kubernetes.io/hostname", cfg.name.as_str()),
        ("type", "wasmlet"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let taints = json!([
        {"key": "kubernetes.io/arch", "value": "wasm32-wasi", "effect": "NoSchedule"},
        {"key": "kubernetes.io/arch", "value": "wasm32-wasi", "effect": "NoExecute"},
    ]);
    let since = now_rfc3339();
    if nodes.get_opt(&cfg.name).await?.is_none() {
        let node: Node = serde_json::from_value(json!({
            "metadata": {"name": cfg.name, "labels": labels},
            "spec": {"taints": taints},
            "status": status(cfg, &ready, &since),
        }))?;
        match nodes.create(&PostParams::default(), &node).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => return Err(e.into()),
        }
    } else {
        // Taints are the node's only at registration (as the kubelet's
        // --register-with-taints): later ones are the admin's, and
        // NodeRestriction forbids a node to change them.
        let patch = json!({"metadata": {"labels": labels}});
        nodes
            .patch(&cfg.name, &PatchParams::default(), &Patch::Merge(patch))
            .await?;
    }
    nodes
        .patch_status(
            &cfg.name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": status(cfg, &ready, &since)})),
        )
        .await?;
    tracing::info!(node = %cfg.name, "node registered");
    Ok(())
}

async fn renew_lease(client: &kube::Client, cfg: &NodeConfig) -> Result<(), kube::Error> {
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
    let spec = LeaseSpec {
        holder_identity: Some(cfg.name.clone()),
        lease_duration_seconds: Some(40),
        renew_time: Some(MicroTime(k8s_openapi::jiff::Timestamp::now())),
        ..Default::default()
    };
    match leases.get_opt(&cfg.name).await? {
        Some(mut lease) => {
            lease.spec = Some(spec);
            leases
                .replace(&cfg.name, &PostParams::default(), &lease)
                .await?;
        }
        None => {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(cfg.name.clone()),
                    ..Default::default()
                },
                spec: Some(spec),
            };
            leases.create(&PostParams::default(), &lease).await?;
        }
    }
    Ok(())
}

/// What the heartbeat reports for `/metrics`: consecutive failed lease
/// renewals (the node controller marks a node NotReady after 40 s without one).
#[derive(Debug, Default)]
pub(crate) struct NodeHealth {
    pub(crate) lease_failures: std::sync::atomic::AtomicU32,
    /// Why the workload runtime cannot start workloads, as the heartbeat's
    /// last probe found (`None`: it can).
    pub(crate) runtime: std::sync::Mutex<Option<String>>,
}

/// The Node's Ready reason while the workload runtime cannot start workloads.
pub(crate) const RUNTIME_UNAVAILABLE: &str = "WorkloadRuntimeUnavailable";

/// `wasmlet_node_lease_renewal_failures{node}`, read at each scrape.
#[derive(Debug)]
pub(crate) struct NodeCollector {
    pub(crate) node: String,
    pub(crate) health: std::sync::Arc<NodeHealth>,
}

impl prometheus_client::collector::Collector for NodeCollector {
    fn encode(
        &self,
        mut encoder: prometheus_client::encoding::DescriptorEncoder,
    ) -> Result<(), std::fmt::Error> {
        use prometheus_client::encoding::EncodeMetric;
        let mut family = encoder.encode_descriptor(
            "wasmlet_node_lease_renewal_failures",
            "Consecutive failed renewals of the node's Lease (renewed every 10 s)",
            None,
            prometheus_client::metrics::MetricType::Gauge,
        )?;
        let failures = self
            .health
            .lease_failures
            .load(std::sync::atomic::Ordering::Relaxed);
        prometheus_client::metrics::gauge::ConstGauge::new(i64::from(failures))
            .encode(family.encode_family(&[("node", self.node.as_str())])?)
    }
}

/// Renews the lease every 10 s and the conditions' heartbeat every 40 s,
/// forever; a condition is written at once when it changes (looked at each
/// tick and on each change of the plugin set).
pub(crate) async fn heartbeat(
    client: kube::Client,
    cfg: NodeConfig,
    registered: Result<(), NotReady>,
    health: std::sync::Arc<NodeHealth>,
    readiness: std::sync::Arc<Readiness>,
    mut plugin_events: tokio::sync::broadcast::Receiver<crate::plugin::set::PluginEvent>,
    workloads: std::sync::Arc<super::workloads::WorkloadManager>,
) {
    let nodes: Api<Node> = Api::all(client.clone());
    let mut tick = tokio::time::interval(LEASE_RENEW);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut last_status = std::time::Instant::now();
    // What registration wrote, and when each condition last changed.
    let mut written = node_conditions(&ReadyState::of(&registered), &Pressure::default());
    let mut since = vec![now_rfc3339(); written.len()];
    let mut failures = 0u32;
    loop {
        let ticked = tokio::select! {
            _ = tick.tick() => true,
            ev = plugin_events.recv() => {
                if matches!(ev, Err(tokio::sync::broadcast::error::RecvError::Closed)) {
                    // The set is gone: ticks only.
                    plugin_events = tokio::sync::broadcast::channel(1).1;
                }
                false
            }
        };
        // The workload runtime is probed on ticks only (it writes files).
        if ticked {
            let w = workloads.clone();
            let fault = tokio::task::spawn_blocking(move || w.probe().err())
                .await
                .unwrap_or_else(|e| Some(format!("the workload runtime probe failed: {e}")));
            *health.runtime.lock().unwrap_or_else(|p| p.into_inner()) = fault;
        }
        let runtime = health
            .runtime
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let state = match (readiness.check(), runtime) {
            (Err(n), _) => ReadyState::NotReady(n),
            (Ok(()), Some(why)) => ReadyState::NotReady(NotReady {
                reason: RUNTIME_UNAVAILABLE,
                message: why,
            }),
            (Ok(()), None) => ReadyState::Ready,
        };
        let conds = node_conditions(&state, &super::pressure::measure(&workloads));
        if conds != written {
            let mut changed = since.clone();
            for ((c, w), s) in conds.iter().zip(&written).zip(&mut changed) {
                if c != w {
                    tracing::info!(node = %cfg.name, condition = c.type_, status = c.status, reason = c.reason, "{}", c.message);
                }
                if c.status != w.status {
                    *s = now_rfc3339();
                }
            }
            let patch = json!({"status": {"conditions": conditions_json(&conds, &changed)}});
            match nodes
                .patch_status(&cfg.name, &PatchParams::default(), &Patch::Merge(patch))
                .await
            {
                Ok(_) => {
                    last_status = std::time::Instant::now();
                    written = conds;
                    since = changed;
                }
                Err(e) => {
                    tracing::warn!(node = %cfg.name, error = %e, "node status update failed; retrying")
                }
            }
        }
        if !ticked {
            continue;
        }
        match renew_lease(&client, &cfg).await {
            Ok(()) => {
                if failures > 0 {
                    tracing::info!(node = %cfg.name, after = failures, "node lease renewed again");
                }
                failures = 0;
                health
                    .lease_failures
                    .store(0, std::sync::atomic::Ordering::Relaxed);
            }
            Err(e) => {
                failures += 1;
                health
                    .lease_failures
                    .store(failures, std::sync::atomic::Ordering::Relaxed);
                tracing::warn!(node = %cfg.name, error = %e, failures, "node lease renewal failed; retrying");
            }
        }
        if last_status.elapsed() >= STATUS_EVERY {
            let patch = json!({"status": {"conditions": conditions_json(&written, &since)}});
            match nodes
                .patch_status(&cfg.name, &PatchParams::default(), &Patch::Merge(patch))
                .await
            {
                Ok(_) => last_status = std::time::Instant::now(),
                Err(e) => {
                    tracing::warn!(node = %cfg.name, error = %e, "node status heartbeat failed; retrying")
                }
            }
        }
    }
}

/// Reports the node NotReady (on shutdown).
pub(crate) async fn mark_not_ready(client: &kube::Client, cfg: &NodeConfig) {
    let nodes: Api<Node> = Api::all(client.clone());
    let patch =
        json!({"status": {"conditions": conditions(&ReadyState::ShuttingDown, &now_rfc3339())}});
    if let Err(e) = nodes
        .patch_status(&cfg.name, &PatchParams::default(), &Patch::Merge(patch))
        .await
    {
        tracing::warn!(node = %cfg.name, error = %e, "could not mark the node NotReady");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conditions_carry_the_kubelets_reasons_and_the_providers_fault() {
        let p = Pressure {
            memory: Some("the workload memory budget has 0 of 1 bytes left".into()),
            ..Default::default()
        };
        let not_ready = ReadyState::NotReady(NotReady {
            reason: "ProviderMissing",
            message: "provider plugin wasi-runner is not in the plugin directory".into(),
        });
        let c = node_conditions(&not_ready, &p);
        let row = |t: &str| {
            let c = c.iter().find(|c| c.type_ == t).unwrap();
            (c.status, c.reason, c.message.clone())
        };
        assert_eq!(
            row("MemoryPressure"),
            (
                "True",
                "KubeletHasInsufficientMemory",
                "wasmlet has insufficient memory available: the workload memory budget has 0 of 1 bytes left".into()
            )
        );
        assert_eq!(row("DiskPressure").1, "KubeletHasNoDiskPressure");
        assert_eq!(row("PIDPressure").1, "KubeletHasSufficientPID");
        assert_eq!(
            row("Ready"),
            (
                "False",
                "ProviderMissing",
                "provider plugin wasi-runner is not in the plugin directory".into()
            )
        );
        let json = conditions(&ReadyState::ShuttingDown, "2026-01-01T00:00:00Z");
        assert_eq!(json[3]["reason"], "KubeletNotReady");
        assert_eq!(json[3]["lastTransitionTime"], "2026-01-01T00:00:00Z");
    }
}
