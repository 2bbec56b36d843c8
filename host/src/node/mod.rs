//! The node agent: a kubelet whose pod runtime is a provider plugin.
//!
//! - [`agent`]: the Node object, its lease and heartbeat;
//! - [`admission`]: which bound pods fit the node (the kubelet's admission);
//! - [`pods`]: one state machine per pod, driven through the provider;
//! - [`probes`]: exec probes (startup, readiness, liveness) over the provider's status;
//! - [`ready`]: what the Node's Ready condition says (the provider's health);
//! - [`pressure`]: its memory, disk and PID pressure conditions;
//! - [`workloads`]: module store and WASI workloads (what `workloads` imports do);
//! - [`kubelet`]: the kubelet API subset behind `kubectl logs`, `exec` and `attach`;
//! - [`metrics`]: pods per state, transitions, time in state, handler faults.

pub(crate) mod admission;
pub(crate) mod agent;
pub(crate) mod kubelet;
pub(crate) mod metrics;
pub(crate) mod pods;
pub(crate) mod pressure;
pub(crate) mod probes;
pub(crate) mod ready;
pub(crate) mod workloads;

use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;

use crate::plugin::PluginSet;
use crate::plugin::provider::{self, wasmlet::plugin::workloads as w};

use self::agent::NodeConfig;
use self::pods::PodRunner;
use self::workloads::WorkloadManager;

/// The WIT `workloads` import on top of the [`WorkloadManager`].
impl provider::Workloads for WorkloadManager {
    fn fetch_module(
        &self,
        req: w::FetchRequest,
        docker_configs: Vec<Vec<u8>>,
    ) -> Result<w::FetchProgress, w::FetchError> {
        let pull_secrets = docker_configs
            .iter()
            .filter_map(|c| workloads::PullSecret::from_docker_config(c).ok())
            .flatten()
            .collect();
        let req = workloads::FetchRequest {
            image: req.image,
            pull_policy: match req.pull_policy {
                w::PullPolicy::Always => workloads::PullPolicy::Always,
                w::PullPolicy::IfNotPresent => workloads::PullPolicy::IfNotPresent,
                w::PullPolicy::Never => workloads::PullPolicy::Never,
            },
            namespace: req.namespace,
            pull_secrets,
        };
        match WorkloadManager::fetch_module(self, &req) {
            Ok(workloads::FetchProgress::Ready(m)) => Ok(w::FetchProgress::Ready(m)),
            Ok(workloads::FetchProgress::Pending(id)) => Ok(w::FetchProgress::Pending(id)),
            Err(e) => Err(match e {
                workloads::FetchError::InvalidReference(m) => w::FetchError::InvalidReference(m),
                workloads::FetchError::NotFound(m) => w::FetchError::NotFound(m),
                workloads::FetchError::Unauthorized(m) => w::FetchError::Unauthorized(m),
                workloads::FetchError::NotWasm(m) => w::FetchError::NotWasm(m),
                workloads::FetchError::NeverPull => w::FetchError::NeverPull,
                workloads::FetchError::Unavailable(m) => w::FetchError::Unavailable(m),
                workloads::FetchError::Other(m) => w::FetchError::Other(m),
            }),
        }
    }

    fn prepare_volume(&self, req: w::VolumeRequest) -> Result<u64, w::WorkloadError> {
        let source = match req.source {
            w::VolumeSource::EmptyDir(e) => {
                workloads::VolumeSource::EmptyDir(workloads::EmptyDir {
                    size_limit: e.size_limit,
                })
            }
            w::VolumeSource::Files(files) => workloads::VolumeSource::Files(
                files
                    .into_iter()
                    .map(|f| workloads::VolumeFile {
                        path: f.path,
                        contents: f.contents,
                        mode: f.mode,
                    })
                    .collect(),
            ),
            w::VolumeSource::HostPath(h) => {
                workloads::VolumeSource::HostPath(workloads::HostPath {
                    path: h.path,
                    create: h.create,
                })
            }
        };
        WorkloadManager::prepare_volume(
            self,
            &workloads::VolumeRequest {
                pod_uid: req.pod_uid,
                name: req.name,
                source,
            },
        )
        .map_err(err)
    }

    fn spawn(&self, spec: w::SpawnSpec) -> Result<u64, w::WorkloadError> {
        let spec = workloads::SpawnSpec {
            module: spec.module,
            args: spec.args,
            env: spec.env,
            mounts: spec
                .mounts
                .into_iter()
                .map(|m| workloads::Mount {
                    volume: m.volume,
                    guest_path: m.guest_path,
                    sub_path: m.sub_path,
                    read_only: m.read_only,
                })
                .collect(),
            memory_limit: spec.memory_limit,
            logs: workloads::LogTarget {
                pod_namespace: spec.logs.pod_namespace,
                pod_name: spec.logs.pod_name,
                pod_uid: spec.logs.pod_uid,
                container: spec.logs.container,
                attempt: spec.logs.attempt,
            },
        };
        WorkloadManager::spawn(self, spec).map_err(err)
    }

    fn status(&self, handle: u64) -> Result<w::WorkloadStatus, w::WorkloadError> {
        let s = WorkloadManager::status(self, handle).map_err(err)?;
        Ok(w::WorkloadStatus {
            state: match s.state {
                workloads::RunState::Running => w::RunState::Running,
                workloads::RunState::Exited(c) => w::RunState::Exited(c),
                workloads::RunState::Failed(m) => w::RunState::Failed(m),
            },
            started_at_ms: s.started_at_ms,
            finished_at_ms: s.finished_at_ms,
        })
    }

    fn kill(&self, handle: u64, grace_ms: u32) -> Result<(), w::WorkloadError> {
        WorkloadManager::kill(self, handle, grace_ms).map_err(err)
    }

    fn read_logs(&self, handle: u64, max_bytes: u32) -> Result<Vec<u8>, w::WorkloadError> {
        WorkloadManager::read_logs(self, handle, max_bytes).map_err(err)
    }

    fn release_pod(&self, pod_uid: &str) {
        // Cleanup finishes in the background; nothing waits for the directory to go.
        drop(WorkloadManager::release_pod(self, pod_uid));
    }
}

fn err(e: workloads::WorkloadError) -> w::WorkloadError {
    match e {
        workloads::WorkloadError::UnknownHandle => w::WorkloadError::UnknownHandle,
        workloads::WorkloadError::Invalid(m) => w::WorkloadError::Invalid(m),
        workloads::WorkloadError::Failed(m) => w::WorkloadError::Failed(m),
    }
}

/// A running node agent.
pub struct NodeAgent {
    pub(crate) config: NodeConfig,
    pub(crate) workloads: Arc<WorkloadManager>,
    pub(crate) runner: Arc<PodRunner>,
    pub(crate) health: Arc<agent::NodeHealth>,
    pub(crate) readiness: Arc<ready::Readiness>,
    client: kube::Client,
}

impl NodeAgent {
    /// Registers the node, starts its heartbeat, the pod machines (through
    /// `provider`, a plugin in `plugins`) and, with `tls`, the kubelet API.
    pub async fn start(
        client: kube::Client,
        config: NodeConfig,
        plugins: Arc<PluginSet>,
        provider: &str,
        workloads: Arc<WorkloadManager>,
        tls: Option<kubelet::KubeletTls>,
    ) -> anyhow::Result<NodeAgent> {
        plugins.set_workloads(workloads.clone());
        plugins.set_provider(provider);
        let mut config = config;
        if let Some(tls) = tls {
            let addr = std::net::SocketAddr::new(config.address, config.kubelet_port);
            let bound = kubelet::serve(
                addr,
                tls,
                client.clone(),
                config.name.clone(),
                workloads.clone(),
            )
            .await?;
            config.kubelet_port = bound.port();
        }
        let readiness = Arc::new(ready::Readiness::new(
            plugins.clone(),
            provider,
            config.provider_backoff_base,
        ));
        // Before the first scan the provider is loading: the Node registers
        // NotReady (`ProviderLoading`), so nothing is scheduled here yet.
        let first = readiness.check();
        agent::register(&client, &config, &first).await?;
        let health = Arc::new(agent::NodeHealth::default());
        tokio::spawn(agent::heartbeat(
            client.clone(),
            config.clone(),
            first,
            health.clone(),
            readiness.clone(),
            plugins.subscribe(),
            workloads.clone(),
        ));
        let runner = PodRunner::new(
            client.clone(),
            plugins,
            provider,
            config.clone(),
            workloads.clone(),
        );
        {
            let runner = runner.clone();
            let mut exits = workloads.subscribe_exits();
            tokio::spawn(async move {
                loop {
                    match exits.recv().await {
                        Ok(h) => runner.workload_exited(h),
                        Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                            tracing::warn!(missed = n, "workload exit notifications lagged");
                        }
                        Err(_) => return,
                    }
                }
            });
        }
        {
            let runner = runner.clone();
            let mut fetches = workloads.subscribe_fetches();
            tokio::spawn(async move {
                loop {
                    match fetches.recv().await {
                        Ok(id) => runner.fetch_done(id),
                        Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                            tracing::warn!(missed = n, "fetch notifications lagged");
                        }
                        Err(_) => return,
                    }
                }
            });
        }
        tokio::spawn(runner.clone().run());
        Ok(NodeAgent {
            config,
            workloads,
            runner,
            health,
            readiness,
            client,
        })
    }

    /// [`NodeAgent::check`] from its parts (the check outlives no agent).
    pub(crate) fn check_parts(
        readiness: &ready::Readiness,
        health: &agent::NodeHealth,
    ) -> Result<(), String> {
        readiness
            .check()
            .map_err(|n| format!("{}: {}", n.reason, n.message))?;
        if let Some(why) = health
            .runtime
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
        {
            return Err(format!("{}: {why}", agent::RUNTIME_UNAVAILABLE));
        }
        let failures = health
            .lease_failures
            .load(std::sync::atomic::Ordering::Relaxed);
        if u64::from(failures) * agent::LEASE_RENEW.as_secs() >= 40 {
            return Err(format!(
                "the node's Lease has not been renewed for {failures} attempts"
            ));
        }
        Ok(())
    }

    /// NotReady, then each workload gets its pod's
    /// `terminationGracePeriodSeconds` to finish, at most `bound` (the
    /// kubelet's graceful node shutdown: min(pod grace, shutdown grace)).
    pub(crate) async fn shutdown(&self, bound: std::time::Duration) {
        agent::mark_not_ready(&self.client, &self.config).await;
        let graces = self.pod_graces().await;
        self.workloads
            .shutdown(|uid| {
                let (pod, grace) = graces
                    .get(uid)
                    .map(|(pod, g)| (pod.as_str(), (*g).min(bound)))
                    .unwrap_or((uid, bound));
                tracing::info!(%pod, ?grace, "drain: stopping the pod's workloads within its grace");
                grace
            })
            .await;
    }

    /// Each of this node's pods (uid) with its name and grace period. The
    /// list is bounded in time: an API server that does not answer leaves
    /// every workload the shutdown bound.
    async fn pod_graces(&self) -> HashMap<String, (String, std::time::Duration)> {
        let pods: kube::Api<Pod> = kube::Api::all(self.client.clone());
        let lp =
            kube::api::ListParams::default().fields(&format!("spec.nodeName={}", self.config.name));
        let listed = tokio::time::timeout(std::time::Duration::from_secs(2), pods.list(&lp)).await;
        let Ok(Ok(list)) = listed else {
            tracing::warn!(
                "drain: cannot list the node's pods; each workload gets the shutdown bound"
            );
            return HashMap::new();
        };
        list.items
            .into_iter()
            .filter_map(|p| {
                let uid = p.metadata.uid.clone()?;
                let name = pods::key_of(&p);
                // The API's default when unset.
                let secs = p
                    .spec
                    .as_ref()
                    .and_then(|s| s.termination_grace_period_seconds)
                    .unwrap_or(30)
                    .max(0);
                Some((uid, (name, std::time::Duration::from_secs(secs as u64))))
            })
            .collect()
    }
}
