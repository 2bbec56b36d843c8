//! Starting the pieces a command runs: the API server, the host (plugins,
//! caches, controllers, metrics, leader election) and the node agent.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, Result};

use super::args::{HostArgs, NodeArgs, ServerArgs};
use crate::cluster::cache::Caches;
use crate::cluster::named::ClusterFlag;
use crate::cluster::{Cluster, NamedClusters, Resolver};
use crate::controller::Manager;
use crate::controller::controller::ControllerConfig;
use crate::controller::leader::{self, LeaderConfig, Leadership};
use crate::controller::metrics::ControllerMetrics;
use crate::node::NodeAgent;
use crate::node::agent::NodeConfig;
use crate::node::kubelet::KubeletTls;
use crate::node::workloads::{WorkloadConfig, WorkloadEngine, WorkloadManager};
use crate::plugin::PluginSet;
use crate::plugin::engine::PluginEngine;
use crate::plugin::metrics::PluginCollector;
use crate::plugin::remote::RemotePlugins;
use wasmlet_apiserver::{ApiServer, Config};

pub(super) async fn start_server(args: &ServerArgs) -> Result<ApiServer> {
    // Connections are bounded by a share of the open-files limit: the hard one,
    // as Go's runtime sets for kube-apiserver, not the soft 1,024 of a shell.
    let fds = wasmlet_apiserver::raise_fd_limit();
    tracing::debug!(fds, "open-files limit");
    let server = ApiServer::start(Config {
        data_dir: args.data_dir.clone(),
        listen: SocketAddr::new(args.address, args.port),
        history: args.watch_history,
        history_max_age: std::time::Duration::from_secs(args.watch_history_seconds),
        history_max_bytes: args.watch_history_mib << 20,
        max_watches_per_user: args.max_watches_per_user,
        connections: None,
    })
    .await?;
    println!("wasmlet: API server listening on https://{}", server.addr);
    println!("wasmlet: export KUBECONFIG={}", server.kubeconfig.display());
    Ok(server)
}

/// The kubeconfig's cluster, or without one the pod's own (its
/// ServiceAccount token and the cluster CA mounted into every pod).
pub(super) async fn config_from(kubeconfig: Option<&Path>) -> Result<kube::Config> {
    let Some(kubeconfig) = kubeconfig else {
        let config = kube::Config::incluster().context(
            "no --kubeconfig (or KUBECONFIG), and not in a pod (no in-cluster service account)",
        )?;
        return Ok(with_user_agent(config, "wasmlet"));
    };
    let kc = kube::config::Kubeconfig::read_from(kubeconfig)
        .with_context(|| format!("reading {}", kubeconfig.display()))?;
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await?;
    Ok(with_user_agent(config, "wasmlet"))
}

/// `config` sending `User-Agent: PROGRAM/VERSION`: an API server records the
/// writes that name no field manager under the agent's program name
/// (kube-apiserver's default `fieldManager`), as it records kubelet's as
/// `kubelet`. Without one they were recorded under no name at all.
pub(super) fn with_user_agent(mut config: kube::Config, program: &str) -> kube::Config {
    let agent = format!("{program}/{}", env!("CARGO_PKG_VERSION"));
    if let Ok(v) = http::HeaderValue::from_str(&agent) {
        config
            .headers
            .retain(|(k, _)| k != http::header::USER_AGENT);
        config.headers.push((http::header::USER_AGENT, v));
    }
    config
}

/// A DER certificate as PEM.
pub(super) fn pem_certificate(der: &[u8]) -> String {
    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut pem = String::from("-----BEGIN CERTIFICATE-----\n");
    for line in b64.as_bytes().chunks(64) {
        pem.push_str(std::str::from_utf8(line).unwrap_or_default());
        pem.push('\n');
    }
    pem.push_str("-----END CERTIFICATE-----\n");
    pem
}

fn identity(host: &HostArgs) -> String {
    host.identity.clone().unwrap_or_else(|| {
        let h = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
        format!("{}-{}", h.trim(), std::process::id())
    })
}

/// The host: plugins, caches, controllers, metrics, leader election; and,
/// with `node`, the node agent running pods through a provider plugin.
pub(super) async fn run_host(
    client: kube::Client,
    node_client: kube::Client,
    data_dir: &Path,
    host: &HostArgs,
    node: Option<(&NodeArgs, Option<KubeletTls>)>,
    store: Option<crate::health::host::Probe>,
) -> Result<RunningHost> {
    let metrics = ControllerMetrics::new();
    // Named clusters first: a bad --cluster fails the start before anything runs.
    let (named, counted) = named_clusters(&host.clusters).await?;
    let mut clusters_dir = host
        .clusters_dir
        .as_ref()
        .map(|d| super::clusters_dir::ClustersDir::new(d.clone(), &named, counted.clone()));
    if let Some(d) = &mut clusters_dir {
        d.load(&named).await;
    }
    if !named.names().is_empty() || clusters_dir.is_some() {
        metrics.register(|r| counted.register(r));
    }
    // Cluster access, built once: the caches serve the controllers and the
    // plugins' reads alike.
    let resolver = Arc::new(Resolver::new(client.clone()));
    let caches = Caches::with_debug_delay(
        resolver.clone(),
        std::time::Duration::from_millis(host.debug_cache_delay_ms),
    );
    let cluster = Arc::new(Cluster::new(resolver, Some(caches.clone())));
    let checks = crate::health::host::HostChecks::start();
    if let Some(store) = store {
        let _ = checks.store.set(store);
    }
    let _ = checks.caches.set(caches.clone());
    let leading = Leadership::new(!host.leader_elect);
    let mut engine = PluginEngine::new(&data_dir.join("cache").join("components"))?;
    let exe = std::env::current_exe()
        .inspect_err(|e| {
            tracing::warn!(error = %e, "cannot find this executable; components compile in the host")
        })
        .ok();
    if let Some(exe) = &exe {
        engine = engine.compile_in_child(exe.clone());
    }
    let (dir, builtin_dir) = crate::builtins::plugin_dirs(
        &host.builtin,
        data_dir,
        host.plugins.as_deref(),
        node.as_ref().map(|(n, _)| n.provider.as_str()),
    )?;
    // A fresh data directory has nothing cached: the seeds (the built-ins'
    // own, written when they were built or installed) spare the compiles.
    let mut seeds = host.precompiled.clone();
    if let Some(seed) = crate::builtins::seed_cache(&host.builtin)
        && !seeds.contains(&seed)
    {
        seeds.push(seed);
    }
    engine = engine.with_seeds(&seeds);
    let plugins = match dir {
        Some(dir) => {
            std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
            tracing::info!(pooling = engine.pooling, dir = %dir.display(), "plugin runtime ready");
            let set = PluginSet::new(engine.clone(), &dir, Some(cluster.clone()));
            set.set_clusters(named.clone());
            set.supervise_clusters();
            if let Some(d) = clusters_dir.take() {
                tokio::spawn(d.follow(Arc::downgrade(&set)));
            }
            set.set_recording(crate::plugin::set::RecordConfig {
                dir: data_dir.join("records"),
                plugins: host.record.clone(),
            });
            if let Some(user_dir) = &host.plugins {
                // Pulled plugins: behind the user's files, before the built-ins.
                let pulled = data_dir.join("plugins").join("oci");
                set.add_dir_behind(&pulled);
                let remote = RemotePlugins {
                    list: user_dir.join(crate::plugin::remote::LIST),
                    dest: pulled,
                    set: set.clone(),
                    interval: std::time::Duration::from_secs(host.plugin_poll_seconds.max(1)),
                };
                // The first pass before the first scan: listed plugins start
                // with the others.
                remote.sync().await;
                tokio::spawn(remote.run());
            }
            if let Some(b) = builtin_dir {
                set.add_dir_behind(&b);
            }
            Some(set)
        }
        None => None,
    };
    let mut agent = None;
    if let (Some((n, tls)), Some(plugins)) = (node, &plugins) {
        let mut wc = WorkloadConfig::new(data_dir.join("node"));
        wc.host_path_allow = n.host_path_allow.clone();
        wc.insecure_registries = n.insecure_registries.clone();
        wc.file_image_dirs = n
            .allow_file_images
            .iter()
            .map(|d| std::path::absolute(d).unwrap_or_else(|_| d.clone()))
            .collect();
        if n.workload_memory_limit > n.workload_max_memory {
            anyhow::bail!(
                "--workload-memory-limit ({}) is above --workload-max-memory ({})",
                n.workload_memory_limit,
                n.workload_max_memory
            );
        }
        // Never refuse a container the advertised capacity let the scheduler
        // place here (the default cap stays for nodes of the default size).
        wc.max_workloads = wc.max_workloads.max(4 * n.max_pods as usize);
        wc.default_memory_limit = n.workload_memory_limit;
        wc.max_memory_limit = n.workload_max_memory;
        wc.memory_budget = n
            .workload_memory_budget
            .unwrap_or_else(|| crate::node::agent::total_memory().map_or(1 << 30, |m| m / 4 * 3));
        // Workloads get their own engine: pods must not exhaust the plugins' pool.
        let mut wengine = WorkloadEngine::new(&data_dir.join("cache").join("components"))?;
        // Pods' modules are compiled in the child too, as plugins are.
        if let Some(exe) = &exe {
            wengine = wengine.compile_in_child(exe.clone());
        }
        // Open files: the limit raised, the host's share kept, the rest split
        // so that every workload the node may run can hold its cap at once.
        let nofile = crate::node::workloads::files::raise_nofile_limit();
        wc.max_open_files = crate::node::workloads::files::per_workload_cap(
            n.workload_max_open_files,
            nofile,
            wc.max_workloads,
        );
        if wc.max_open_files < n.workload_max_open_files {
            tracing::warn!(
                wanted = n.workload_max_open_files,
                cap = wc.max_open_files,
                open_file_limit = nofile,
                max_workloads = wc.max_workloads,
                "--workload-max-open-files lowered: the open-file limit does not cover every workload at the cap beside the host's reserve"
            );
        }
        let memory_budget = wc.memory_budget;
        let workloads = Arc::new(WorkloadManager::new(wc, wengine)?);
        let mut config = NodeConfig::new(&node_name(n));
        config.address = n.node_address;
        config.kubelet_port = n.kubelet_port;
        config.pods = n.max_pods;
        config.provider_backoff_base = std::time::Duration::from_millis(n.provider_backoff_base_ms);
        config.teardown_bound = std::time::Duration::from_millis(n.teardown_bound_ms);
        // Pods are admitted (and scheduled) against the budget, not all memory.
        config.allocatable_memory = Some(memory_budget);
        config.max_container_memory = Some(n.workload_max_memory);
        // Providers must be able to load before the first scan.
        plugins.set_workloads(workloads.clone());
        let a = NodeAgent::start(
            node_client,
            config,
            plugins.clone(),
            &n.provider,
            workloads,
            tls,
        )
        .await?;
        println!(
            "wasmlet: node {} (kubelet API on {}:{})",
            a.config.name, a.config.address, a.config.kubelet_port
        );
        agent = Some(a);
    }
    if let Some(plugins) = &plugins {
        metrics.register_collector(Box::new(PluginCollector(plugins.clone())));
        let _ = checks.plugins.set(plugins.clone());
    }
    metrics.register_collector(Box::new(crate::process_metrics::ProcessCollector));
    if let Some(a) = &agent {
        metrics.register(|r| a.runner.metrics.register(r));
        metrics.register_collector(Box::new(crate::node::agent::NodeCollector {
            node: a.config.name.clone(),
            health: a.health.clone(),
        }));
        let readiness = a.readiness.clone();
        let health = a.health.clone();
        let _ = checks.node.set(Arc::new(move || {
            crate::node::NodeAgent::check_parts(&readiness, &health)
        }));
    }
    let page = Arc::new(crate::status_page::StatusPage::default());
    // The charts' history: a fixed ring per controller, sampled every 5 s.
    tokio::spawn(page.clone().sample());
    if let Some(p) = &plugins {
        let _ = page.plugins.set(p.clone());
    }
    if let Some(a) = &agent {
        let _ = page.pods.set((a.config.name.clone(), a.runner.clone()));
    }
    // The status page's remote callers are reviewed by the cluster the host serves.
    let gate = Arc::new(crate::node::kubelet::auth::Gate::new(
        client.clone(),
        String::new(),
    ));
    let bound = crate::endpoints::serve(
        host.metrics_addr,
        metrics.clone(),
        checks.clone(),
        page.clone(),
        gate,
    )
    .await?;
    println!("wasmlet: metrics on http://{bound}/metrics");
    let mut lease = None;
    if host.leader_elect {
        metrics.register_collector(Box::new(leader::LeaderCollector {
            name: LeaderConfig::new("").name,
            leading: leading.clone(),
        }));
        let config = LeaderConfig::new(&identity(host));
        let alive = Arc::new(std::sync::atomic::AtomicBool::new(true));
        let _ = checks.leader.set(alive.clone());
        let election = leader::run(client.clone(), config.clone(), leading.clone());
        let task = tokio::spawn(async move {
            let _alive = crate::health::host::AliveGuard(alive);
            election.await
        });
        lease = Some(Lease {
            task,
            client: client.clone(),
            config,
            leading: leading.clone(),
        });
    }
    let mut manager_handle = None;
    if let Some(plugins) = plugins {
        let datastore = match &host.datastore_url {
            Some(url) => Some(crate::datastore::Datastore::new(
                url,
                host.datastore_max_connections,
            )?),
            None => None,
        };
        let config = ControllerConfig {
            resync: std::time::Duration::from_secs(host.resync_seconds.max(1)),
            datastore,
            clusters: named,
            ..Default::default()
        };
        // The reconciled kinds' watches list while the plugins compile (both
        // take a fraction of a second; in a row they delayed the first status).
        for (api_version, kind) in plugins.reconciled_kinds() {
            let caches = caches.clone();
            tokio::spawn(async move {
                // Not served yet (a CRD the plugin ships): its controller
                // starts the watch once it is.
                let _ = caches.cache(&api_version, &kind).await;
            });
        }
        let manager = Manager::new(plugins.clone(), caches, config, metrics, leading);
        let _ = page.manager.set(manager.clone());
        manager_handle = Some(manager.clone());
        // Following the set before the first scan starts each controller as
        // its plugin loads: on a fresh data directory the plugins after it
        // compile for seconds.
        tokio::spawn(manager.run());
        plugins.scan().await;
        let watcher = plugins.clone();
        tokio::spawn(async move {
            if let Err(e) = watcher.watch().await {
                tracing::error!(error = %e, "cannot watch the plugin directory");
            }
        });
    }
    checks.set_started();
    Ok(RunningHost {
        agent,
        manager: manager_handle,
        lease,
        checks,
    })
}

/// The leader-election task and what releasing the lease needs.
struct Lease {
    task: tokio::task::JoinHandle<()>,
    client: kube::Client,
    config: LeaderConfig,
    leading: Leadership,
}

/// A started host, for [`RunningHost::drain`].
pub(super) struct RunningHost {
    agent: Option<NodeAgent>,
    manager: Option<Arc<Manager>>,
    lease: Option<Lease>,
    checks: Arc<crate::health::host::HostChecks>,
}

/// How long in-flight reconciles get to finish at shutdown.
const CALLS_GRACE: std::time::Duration = std::time::Duration::from_secs(10);
/// The most any workload gets to stop at shutdown (each gets its pod's
/// terminationGracePeriodSeconds up to this).
const WORKLOAD_GRACE: std::time::Duration = std::time::Duration::from_secs(10);

impl RunningHost {
    /// The graceful stop (SIGTERM or SIGINT): not ready (load balancers and
    /// rollouts stop sending work), no new reconciles and the ones in flight
    /// finish, the leader lease is given up so another replica takes over at
    /// once, then the node goes NotReady and its workloads stop within their grace.
    pub(super) async fn drain(self) {
        self.checks.set_draining();
        if let Some(m) = &self.manager {
            let left = m.shutdown(CALLS_GRACE).await;
            if left == 0 {
                tracing::info!("drain: reconciles stopped, none in flight");
            } else {
                tracing::warn!(
                    in_flight = left,
                    "drain: reconciles still running after {CALLS_GRACE:?}; they are cut off"
                );
            }
        }
        if let Some(l) = self.lease {
            l.task.abort();
            l.leading.set(false);
            match tokio::time::timeout(
                std::time::Duration::from_secs(5),
                leader::release(l.client, &l.config),
            )
            .await
            {
                Ok(Ok(true)) => {
                    tracing::info!(lease = %l.config.name, "drain: leader lease released")
                }
                Ok(Ok(false)) => {}
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "drain: cannot release the leader lease; it expires")
                }
                Err(_) => {
                    tracing::warn!("drain: releasing the leader lease timed out; it expires")
                }
            }
        }
        if let Some(a) = self.agent {
            a.shutdown(WORKLOAD_GRACE).await;
            tracing::info!("drain: node NotReady, workloads stopped");
        }
    }
}

/// `--cluster NAME=KUBECONFIG`: a client per named cluster. Each kubeconfig
/// is read now; the clusters themselves are reached on first use, so a
/// region that is down does not keep the host from starting.
/// Each client counts its requests in the metrics returned (`cluster::metrics`).
async fn named_clusters(
    flags: &[String],
) -> Result<(NamedClusters, crate::cluster::metrics::ClusterMetrics)> {
    let counted = crate::cluster::metrics::ClusterMetrics::default();
    let mut clients = Vec::new();
    for f in ClusterFlag::parse_all(flags)? {
        let config = config_from(Some(&f.kubeconfig))
            .await
            .with_context(|| format!("--cluster {}", f.name))?;
        let client = kube::client::ClientBuilder::try_from(config)
            .with_context(|| {
                format!(
                    "--cluster {}: a client for {}",
                    f.name,
                    f.kubeconfig.display()
                )
            })?
            .with_layer(&counted.layer(&f.name))
            .build();
        println!(
            "wasmlet: cluster {} from {}",
            f.name,
            f.kubeconfig.display()
        );
        clients.push((f.name, client));
    }
    Ok((NamedClusters::new(clients), counted))
}

pub(super) fn node_name(n: &NodeArgs) -> String {
    n.node_name.clone().unwrap_or_else(|| {
        let h = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
        let h = h.trim().to_lowercase();
        if h.is_empty() {
            "wasmlet-node".into()
        } else {
            h
        }
    })
}
