//! The `wasmlet` command line.
//!
//! - `wasmlet up`: embedded control plane + host (the main command);
//! - `wasmlet run --kubeconfig PATH`: the host against any cluster;
//! - `wasmlet apiserver`: only the embedded API server;
//! - `wasmlet plugin check PATH` / `wasmlet plugin crds PATH`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand, ValueEnum};

use crate::apiserver::{ApiServer, Config};
use crate::cluster::cache::Caches;
use crate::cluster::{Cluster, Resolver};
use crate::controller::Manager;
use crate::controller::controller::ControllerConfig;
use crate::controller::leader::{self, LeaderConfig, Leadership};
use crate::controller::metrics::ControllerMetrics;
use crate::node::NodeAgent;
use crate::node::agent::NodeConfig;
use crate::node::kubelet::KubeletTls;
use crate::node::workloads::{WorkloadConfig, WorkloadEngine, WorkloadManager};
use crate::plugin::engine::PluginEngine;
use crate::plugin::manifest::PluginKind;
use crate::plugin::metrics::PluginCollector;
use crate::plugin::{Manifest, PluginSet};

#[derive(Parser)]
#[command(
    name = "wasmlet",
    version,
    about = "Kubernetes controllers and node agents as WebAssembly components"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::Args, Clone)]
struct ServerArgs {
    /// Directory for the database, certificates and kubeconfig.
    #[arg(long, default_value = ".data", env = "WASMLET_DATA_DIR")]
    data_dir: PathBuf,
    /// Address of the API server.
    #[arg(long, default_value = "127.0.0.1")]
    address: std::net::IpAddr,
    /// Port of the API server (0 picks a free port; the kubeconfig names it).
    #[arg(long, default_value_t = 6443)]
    port: u16,
    /// Revisions of watch history kept; older resourceVersions get 410 Gone.
    #[arg(long, default_value_t = 10_000)]
    watch_history: usize,
    /// Watches one user may hold open at once (past it: 429 Too Many Requests).
    #[arg(long, default_value_t = 1_000)]
    max_watches_per_user: usize,
}

#[derive(clap::Args, Clone)]
struct HostArgs {
    /// The plugin directory (NAME.wasm + NAME.toml), watched for changes.
    #[arg(long)]
    plugins: Option<PathBuf>,
    /// Where /metrics, /healthz and /readyz are served.
    #[arg(long, default_value = "127.0.0.1:8080")]
    metrics_addr: SocketAddr,
    /// Elect a leader through a coordination.k8s.io Lease before reconciling.
    #[arg(long)]
    leader_elect: bool,
    /// This host's identity in leader election (default: hostname + pid).
    #[arg(long)]
    identity: Option<String>,
    /// How often every cached object is re-enqueued at low priority.
    #[arg(long, default_value_t = 600)]
    resync_seconds: u64,
    /// Debugging/testing only: hold every watch event this long before it reaches the caches.
    #[arg(long, default_value_t = 0, hide = true)]
    debug_cache_delay_ms: u64,
    #[command(flatten)]
    builtin: crate::builtins::BuiltinArgs,
}

#[derive(clap::Args, Clone)]
struct NodeArgs {
    /// This node's name (default: the hostname).
    #[arg(long)]
    node_name: Option<String>,
    /// The provider plugin that runs this node's pods.
    #[arg(long, default_value = "wasi-runner")]
    provider: String,
    /// Port of the kubelet API (0 picks a free one; the Node object names it).
    #[arg(long, default_value_t = 10250)]
    kubelet_port: u16,
    /// The address this node reports and serves the kubelet API on.
    #[arg(long, default_value = "127.0.0.1")]
    node_address: std::net::IpAddr,
    /// Host directories pods may mount as hostPath volumes.
    #[arg(long = "host-path-allow")]
    host_path_allow: Vec<PathBuf>,
    /// Registries pulled from over plain HTTP (host:port).
    #[arg(long = "insecure-registry")]
    insecure_registries: Vec<String>,
    /// Directories `file://` images may be read from (repeatable; none by default,
    /// so pods cannot run or probe the node's files).
    #[arg(long = "allow-file-images")]
    allow_file_images: Vec<PathBuf>,
    /// Memory limit of a container that sets no `resources.limits.memory` (bytes, or
    /// with a Ki/Mi/Gi or k/M/G suffix).
    #[arg(long, default_value = "256Mi", value_parser = parse_bytes)]
    workload_memory_limit: u64,
    /// The largest `resources.limits.memory` a container may set (larger: the
    /// container fails to start).
    #[arg(long, default_value = "2Gi", value_parser = parse_bytes)]
    workload_max_memory: u64,
    /// CA whose client certificates may call the kubelet API (`run` only;
    /// default: the cluster CA of the kubeconfig; `up` uses its own CA).
    #[arg(long)]
    kubelet_client_ca: Option<PathBuf>,
}

#[derive(Clone, Copy, ValueEnum, PartialEq, Eq)]
enum Mode {
    Cluster,
    Node,
    All,
}

#[derive(Subcommand)]
enum Command {
    /// Run the embedded control plane with the host and its plugins (the main command).
    Up {
        #[command(flatten)]
        server: ServerArgs,
        #[command(flatten)]
        host: HostArgs,
        #[command(flatten)]
        node: NodeArgs,
        /// Run no node agent (controllers only).
        #[arg(long)]
        no_node: bool,
    },
    /// Run the host against a cluster given by a kubeconfig.
    Run {
        #[arg(long, env = "KUBECONFIG")]
        kubeconfig: PathBuf,
        /// `cluster`: reconcilers; `node`: the node agent; `all`: both.
        #[arg(long, value_enum, default_value = "cluster")]
        mode: Mode,
        /// Caches, module store and logs.
        #[arg(long, default_value = ".data")]
        data_dir: PathBuf,
        #[command(flatten)]
        host: HostArgs,
        #[command(flatten)]
        node: NodeArgs,
    },
    /// Run only the embedded API server.
    Apiserver(ServerArgs),
    /// Inspect plugins.
    #[command(subcommand)]
    Plugin(PluginCommand),
}

#[derive(Subcommand)]
enum PluginCommand {
    /// Validate a plugin (NAME.wasm or NAME.toml) and print what it will do.
    Check { path: PathBuf },
    /// Print the CRDs a plugin ships, as YAML (for GitOps).
    Crds { path: PathBuf },
}

async fn start_server(args: &ServerArgs) -> Result<ApiServer> {
    let server = ApiServer::start(Config {
        data_dir: args.data_dir.clone(),
        listen: SocketAddr::new(args.address, args.port),
        history: args.watch_history,
        max_watches_per_user: args.max_watches_per_user,
    })
    .await?;
    println!("wasmlet: API server listening on https://{}", server.addr);
    println!("wasmlet: export KUBECONFIG={}", server.kubeconfig.display());
    Ok(server)
}

async fn config_from(kubeconfig: &Path) -> Result<kube::Config> {
    let kc = kube::config::Kubeconfig::read_from(kubeconfig)
        .with_context(|| format!("reading {}", kubeconfig.display()))?;
    Ok(kube::Config::from_custom_kubeconfig(kc, &Default::default()).await?)
}

/// `512`, `256Mi`, `2Gi`, `100M`: a byte count for the memory flags.
fn parse_bytes(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (n, unit) = s.split_at(split);
    let n: u64 = n
        .parse()
        .map_err(|_| format!("{s:?}: expected a number of bytes"))?;
    let scale: u64 = match unit {
        "" => 1,
        "k" => 1000,
        "M" => 1000 * 1000,
        "G" => 1000 * 1000 * 1000,
        "Ki" => 1 << 10,
        "Mi" => 1 << 20,
        "Gi" => 1 << 30,
        _ => {
            return Err(format!(
                "{s:?}: unknown unit {unit:?} (use Ki, Mi, Gi, k, M or G)"
            ));
        }
    };
    n.checked_mul(scale)
        .ok_or_else(|| format!("{s:?} is too large"))
}

/// A DER certificate as PEM.
fn pem_certificate(der: &[u8]) -> String {
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
async fn run_host(
    client: kube::Client,
    node_client: kube::Client,
    data_dir: &Path,
    host: &HostArgs,
    node: Option<(&NodeArgs, Option<KubeletTls>)>,
) -> Result<Option<NodeAgent>> {
    // Cluster access, built once: the caches serve the controllers and the
    // plugins' reads alike.
    let resolver = Arc::new(Resolver::new(client.clone()));
    let caches = Caches::with_debug_delay(
        resolver.clone(),
        std::time::Duration::from_millis(host.debug_cache_delay_ms),
    );
    let cluster = Arc::new(Cluster::new(resolver, Some(caches.clone())));
    let metrics = ControllerMetrics::new();
    let ready = Arc::new(AtomicBool::new(false));
    let leading = Leadership::new(!host.leader_elect);
    let engine = PluginEngine::new(&data_dir.join("cache").join("components"))?;
    let (dir, builtin_dir) =
        crate::builtins::plugin_dirs(&host.builtin, data_dir, host.plugins.as_deref())?;
    let plugins = match dir {
        Some(dir) => {
            std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
            tracing::info!(pooling = engine.pooling, dir = %dir.display(), "plugin runtime ready");
            let set = PluginSet::new(engine.clone(), &dir, Some(cluster.clone()));
            if let Some(b) = builtin_dir {
                set.set_builtin_dir(&b);
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
        wc.default_memory_limit = n.workload_memory_limit;
        wc.max_memory_limit = n.workload_max_memory;
        // Workloads get their own engine: pods must not exhaust the plugins' pool.
        let wengine = WorkloadEngine::new(&data_dir.join("cache").join("components"))?;
        let workloads = Arc::new(WorkloadManager::new(wc, wengine)?);
        let mut config = NodeConfig::new(&node_name(n));
        config.address = n.node_address;
        config.kubelet_port = n.kubelet_port;
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
    }
    let bound = crate::endpoints::serve(host.metrics_addr, metrics.clone(), ready.clone()).await?;
    println!("wasmlet: metrics on http://{bound}/metrics");
    if host.leader_elect {
        tokio::spawn(leader::run(
            client.clone(),
            LeaderConfig::new(&identity(host)),
            leading.clone(),
        ));
    }
    if let Some(plugins) = plugins {
        let config = ControllerConfig {
            resync: std::time::Duration::from_secs(host.resync_seconds.max(1)),
            ..Default::default()
        };
        let manager = Manager::new(plugins.clone(), caches, config, metrics, leading);
        plugins.scan().await;
        tokio::spawn(manager.run());
        let watcher = plugins.clone();
        tokio::spawn(async move {
            if let Err(e) = watcher.watch().await {
                tracing::error!(error = %e, "cannot watch the plugin directory");
            }
        });
    }
    ready.store(true, std::sync::atomic::Ordering::Release);
    Ok(agent)
}

fn node_name(n: &NodeArgs) -> String {
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

/// Stops the node agent gracefully (NotReady, workloads given their grace).
async fn stop(agent: Option<NodeAgent>) {
    if let Some(a) = agent {
        a.shutdown(std::time::Duration::from_secs(10)).await;
    }
}

/// Validates a plugin and prints what it will do as YAML comments, then the
/// ClusterRole it needs on a real cluster, so the output pipes into
/// `kubectl apply -f -`.
async fn plugin_check(path: &Path) -> Result<()> {
    macro_rules! say {
        ($($t:tt)*) => { println!("# {}", format!($($t)*)) };
    }
    let (wasm, toml) = plugin_paths(path);
    let manifest = Manifest::load(&toml)?;
    // A fresh private directory (never a predictable /tmp name another user
    // could have made first), removed when the check ends.
    let tmp = tempfile::Builder::new()
        .prefix("wasmlet-check-")
        .tempdir()?;
    let engine = PluginEngine::new(tmp.path())?;
    let name = wasm
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or("plugin")
        .to_string();
    let dir = wasm.parent().unwrap_or(Path::new("."));
    let set = PluginSet::new(engine, dir, None);
    let loaded = set.load_version(&name, &wasm, &toml).await?;
    say!(
        "plugin {name}: OK (wasmlet:plugin@{}, sha256 {})",
        manifest.plugin.contract,
        loaded.digest
    );
    say!("  kind: {:?}", manifest.plugin.kind);
    if let Some(r) = &manifest.reconciles {
        let scope = r
            .namespace
            .as_deref()
            .map(|n| format!(" in namespace {n}"))
            .unwrap_or_default();
        let sel = r
            .label_selector
            .as_deref()
            .map(|s| format!(" matching {s}"))
            .unwrap_or_default();
        say!("  reconciles: {} {}{scope}{sel}", r.api_version, r.kind);
    }
    say!(
        "  conditions: {}",
        if loaded.declared_conditions.is_empty() {
            "(none)".into()
        } else {
            loaded.declared_conditions.join(", ")
        }
    );
    for o in &manifest.owns {
        say!(
            "  owns: {} {} (changes requeue the owner)",
            o.api_version,
            o.kind
        );
    }
    for (w, _) in &manifest.watches {
        say!("  watches: {} {} -> {}", w.api_version, w.kind, w.map);
    }
    if let Some(f) = &manifest.finalizer {
        say!("  finalizer: {f}");
    }
    if manifest.permissions.rules.is_empty() {
        say!("  may call: nothing beyond its own object's status");
    }
    for r in &manifest.permissions.rules {
        let groups: Vec<&str> = r
            .api_groups
            .iter()
            .map(|g| if g.is_empty() { "core" } else { g.as_str() })
            .collect();
        say!(
            "  may call: {} on {} ({})",
            r.verbs.join(","),
            r.resources.join(","),
            groups.join(",")
        );
    }
    for h in &manifest.permissions.http_hosts {
        say!("  may reach: https://{h}");
    }
    for c in &manifest.crds {
        say!("  ships CRD file: {}", c.display());
        let Some(r) = &manifest.reconciles else {
            continue;
        };
        let (group, version) = r
            .api_version
            .split_once('/')
            .unwrap_or(("", &r.api_version));
        for doc in crate::plugin::set::read_yaml_documents(c)? {
            if doc["spec"]["group"] != group || doc["spec"]["names"]["kind"] != r.kind.as_str() {
                continue;
            }
            let pruned = crate::controller::status::pruned_host_fields(&doc, version);
            if !pruned.is_empty() {
                say!(
                    "  warning: CRD {} ({version}) has no status.{} in its schema: the API server prunes what the host writes there; declare them (or x-kubernetes-preserve-unknown-fields: true)",
                    doc["metadata"]["name"].as_str().unwrap_or("?"),
                    pruned.join(", status.")
                );
            }
        }
    }
    say!(
        "  limits: concurrency {}, memory {} MiB, deadline {} ms",
        manifest.limits.concurrency,
        manifest.limits.memory_mib,
        manifest.limits.deadline_ms
    );
    if manifest.plugin.kind == PluginKind::Provider {
        say!("  (providers run in the node agent)");
    }
    let _ = std::fs::remove_dir_all(&tmp);
    let mut crds = vec![];
    for c in &manifest.crds {
        crds.extend(crate::plugin::set::read_yaml_documents(c)?);
    }
    let role = crate::plugin::clusterrole::cluster_role(
        &format!("wasmlet-plugin-{name}"),
        &manifest,
        &crds,
    );
    say!("the RBAC it needs on a cluster (bind it to the host's identity):");
    print!("---\n{}", serde_yaml::to_string(&role)?);
    Ok(())
}

fn plugin_crds(path: &Path) -> Result<()> {
    let (_, toml) = plugin_paths(path);
    let manifest = Manifest::load(&toml)?;
    for c in &manifest.crds {
        for doc in crate::plugin::set::read_yaml_documents(c)? {
            print!("---\n{}", serde_yaml::to_string(&doc)?);
        }
    }
    Ok(())
}

/// `x.wasm`, `x.toml` or `x` → (`x.wasm`, `x.toml`).
fn plugin_paths(path: &Path) -> (PathBuf, PathBuf) {
    let base = path.with_extension("");
    (base.with_extension("wasm"), base.with_extension("toml"))
}

async fn main_async(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Apiserver(args) => {
            let server = start_server(&args).await?;
            tokio::signal::ctrl_c().await?;
            server.shutdown();
        }
        Command::Up {
            server,
            mut host,
            node,
            no_node,
        } => {
            host.builtin.on_by_default = true;
            let s = start_server(&server).await?;
            // The host and the node agent each get an identity of their own
            // (client certificates of the plane's CA), as on a real cluster.
            let pki = &s.state.pki;
            let controller_kc = pki.write_identity_kubeconfig(
                &server.data_dir.join("kubeconfig-controller"),
                s.addr,
                crate::apiserver::authz::CONTROLLER_USER,
                None,
            )?;
            let client = kube::Client::try_from(config_from(&controller_kc).await?)?;
            let node_client = if no_node {
                client.clone()
            } else {
                let node_kc = pki.write_identity_kubeconfig(
                    &server.data_dir.join("kubeconfig-node"),
                    s.addr,
                    &format!("system:node:{}", node_name(&node)),
                    Some("system:nodes"),
                )?;
                kube::Client::try_from(config_from(&node_kc).await?)?
            };
            let tls = if no_node {
                None
            } else {
                let (cert_pem, key_pem) = s.state.pki.node_serving_cert(&node_name(&node))?;
                Some(KubeletTls {
                    cert_pem,
                    key_pem,
                    client_ca_pem: s.state.pki.ca_pem.clone(),
                    client_ca_source: "this API server's CA".into(),
                })
            };
            let agent = run_host(
                client,
                node_client,
                &server.data_dir,
                &host,
                tls.map(|t| (&node, Some(t))),
            )
            .await?;
            tokio::signal::ctrl_c().await?;
            stop(agent).await;
            s.shutdown();
        }
        Command::Run {
            kubeconfig,
            mode,
            data_dir,
            host,
            node,
        } => {
            // Secret volumes, pulled modules, the compiled-plugin cache.
            crate::private_dir::private_dir(&data_dir)
                .with_context(|| format!("data directory {}", data_dir.display()))?;
            let config = config_from(&kubeconfig).await?;
            let cluster_ca = config.root_cert.clone();
            let client = kube::Client::try_from(config)?;
            let node_part = if mode == Mode::Cluster {
                None
            } else {
                // The kubelet endpoint's own certificate. Client certificates
                // are checked against --kubelet-client-ca, by default the
                // cluster CA of the kubeconfig: kubeadm signs the API server's
                // kubelet client certificate with it.
                let own = crate::apiserver::pki::Pki::load_or_create(&data_dir)?;
                let (cert_pem, key_pem) = own.node_serving_cert(&node_name(&node))?;
                let (client_ca_pem, client_ca_source) = match (&node.kubelet_client_ca, cluster_ca)
                {
                    (Some(p), _) => (
                        std::fs::read_to_string(p)
                            .with_context(|| format!("reading {}", p.display()))?,
                        format!("--kubelet-client-ca {}", p.display()),
                    ),
                    (None, Some(ders)) if !ders.is_empty() => (
                        ders.iter().map(|d| pem_certificate(d)).collect(),
                        format!("the cluster CA of {}", kubeconfig.display()),
                    ),
                    (None, _) => (
                        own.ca_pem.clone(),
                        format!(
                            "this node's own CA in {} (the kubeconfig names no cluster CA)",
                            data_dir.display()
                        ),
                    ),
                };
                Some((
                    &node,
                    Some(KubeletTls {
                        cert_pem,
                        key_pem,
                        client_ca_pem,
                        client_ca_source,
                    }),
                ))
            };
            let mut host = host.clone();
            if mode == Mode::Node && host.plugins.is_none() {
                anyhow::bail!(
                    "--mode node needs --plugins DIR holding the provider plugin ({})",
                    node.provider
                );
            }
            if mode == Mode::Node {
                // A node-only host reconciles nothing.
                host.leader_elect = false;
            }
            let agent = run_host(client.clone(), client, &data_dir, &host, node_part).await?;
            tokio::signal::ctrl_c().await?;
            stop(agent).await;
        }
        Command::Plugin(PluginCommand::Check { path }) => plugin_check(&path).await?,
        Command::Plugin(PluginCommand::Crds { path }) => plugin_crds(&path)?,
    }
    Ok(())
}

pub fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("WASMLET_LOG").unwrap_or_else(|_| {
                // kube-client warns "Server cert bypassed" on every connection the
                // logs proxy makes to a kubelet (whose serving certificate is not
                // verified, as with kube-apiserver without
                // --kubelet-certificate-authority): said once at start instead.
                "info,kube_client::client::tls=error".into()
            }),
        )
        .with_writer(std::io::stderr)
        .init();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("wasmlet: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(main_async(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("wasmlet: {e:#}");
            ExitCode::FAILURE
        }
    }
}
