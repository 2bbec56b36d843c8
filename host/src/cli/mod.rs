//! The `wasmlet` command line.
//!
//! - `wasmlet up`: embedded control plane + host (the main command);
//! - `wasmlet run --kubeconfig PATH`: the host against any cluster;
//! - `wasmlet apiserver`: only the embedded API server;
//! - `wasmlet plugin check PATH` / `wasmlet plugin crds PATH` / `wasmlet plugin rbac PATH...`;
//! - `wasmlet plugin push PATH REF` / `wasmlet plugin pull REF DIR`;
//! - `wasmlet module push FILE.wasm REF`: a workload module as a pod's image;
//! - `wasmlet status` / `wasmlet plugin list`: a running host's plugins and node;
//! - `wasmlet replay RECORDS...`: recorded calls run again, without a cluster;
//! - `wasmlet datastore init --table NAME`: a table for `source = "postgres"` reconcilers.

mod args;
mod check;
mod clusters_dir;
mod datastore;
mod host;
mod precompile;
mod registry;
mod replay;
mod scaffold;
mod shadow;
mod signals;
mod status;

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand, ValueEnum};

use crate::node::kubelet::KubeletTls;
use args::{HostArgs, NodeArgs, ServerArgs};
use check::{plugin_check, plugin_crds, plugin_graph, plugin_rbac};
use host::{config_from, node_name, pem_certificate, run_host, start_server};
use signals::Signals;

/// How long the API server's open connections get at shutdown.
const API_DRAIN: std::time::Duration = std::time::Duration::from_secs(5);

/// Makes `dir` private and locks it for this process (one host per data
/// directory), before anything in it is written.
fn lock_data_dir(dir: &std::path::Path) -> Result<crate::data_lock::DataDirLock> {
    wasmlet_apiserver::private_dir::private_dir(dir)
        .with_context(|| format!("data directory {}", dir.display()))?;
    Ok(crate::data_lock::DataDirLock::acquire(dir)?)
}

#[derive(Parser)]
#[command(
    name = "wasmlet",
    version,
    about = "Kubernetes controllers and node agents as WebAssembly components"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// Which log records are written, as `tracing` filter directives: a level
    /// (`debug`) or per target (`info,wasmlet::controller=debug`).
    #[arg(
        long,
        global = true,
        help_heading = "Logging",
        env = "WASMLET_LOG",
        default_value = crate::telemetry::DEFAULT_LOG_FILTER
    )]
    log_level: String,
    /// How log records are written to stderr: `text` (coloured only on a
    /// terminal, and never with `NO_COLOR` set) or `json` (one object a line,
    /// for log collectors).
    #[arg(
        long,
        global = true,
        help_heading = "Logging",
        env = "WASMLET_LOG_FORMAT",
        value_enum,
        default_value = "text"
    )]
    log_format: crate::telemetry::LogFormat,
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
        /// Do not load the built-in plugins (scheduler, wasi-runner, ...).
        #[arg(long, help_heading = "Host")]
        no_builtins: bool,
    },
    /// Run the host against a cluster given by a kubeconfig (in a pod, without
    /// one: the pod's ServiceAccount).
    Run {
        /// The cluster's kubeconfig (unset, in a pod: the pod's ServiceAccount).
        #[arg(long, env = "KUBECONFIG")]
        kubeconfig: Option<PathBuf>,
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
        /// Load the built-in plugins too (off by default: a real cluster has
        /// its own scheduler and controllers).
        #[arg(long, help_heading = "Host")]
        builtins: bool,
        /// CA whose client certificates may call the kubelet API (default:
        /// the cluster CA of the kubeconfig).
        #[arg(long)]
        kubelet_client_ca: Option<PathBuf>,
    },
    /// Run only the embedded API server.
    Apiserver(ServerArgs),
    /// Show a running host's plugins (version, state, queue) and node's pods,
    /// from its metrics address (`--host`, the host's --metrics-addr).
    Status(status::StatusArgs),
    /// Inspect plugins.
    #[command(subcommand)]
    Plugin(PluginCommand),
    /// Workload modules: the WASI programs pods run.
    #[command(subcommand)]
    Module(ModuleCommand),
    /// Run recorded calls (`--record`, manifest `[record]`) again on a plugin
    /// build, with no cluster: each import is answered from the record. Says per
    /// call: same, different (with the differences) or diverged; fails unless all are the same.
    Replay(replay::ReplayArgs),
    /// Prepare the PostgreSQL tables `source = "postgres"` reconcilers read.
    #[command(subcommand)]
    Datastore(datastore::DatastoreCommand),
    /// Print a shell completion script: `source <(wasmlet completions bash)`,
    /// or save it where the shell loads completions from.
    Completions {
        /// The shell to complete for.
        shell: clap_complete::Shell,
    },
}

#[derive(Subcommand)]
enum ModuleCommand {
    /// Push a WASI module or component (FILE.wasm) to an OCI registry as
    /// REGISTRY/REPO:TAG, in the layout the node pulls: a pod's `image` can
    /// then name it (`kubectl run NAME --image=REGISTRY/REPO:TAG`, with a
    /// toleration of the wasm node's taint `kubernetes.io/arch=wasm32-wasi`;
    /// a plain-HTTP registry needs the node's `--insecure-registry HOST:PORT`).
    Push {
        /// The module: a core module (WASI preview 1) or a component (WASI 0.2).
        path: PathBuf,
        /// Where to push it: REGISTRY/REPO:TAG (e.g. 127.0.0.1:5000/hello:v1).
        reference: String,
        #[command(flatten)]
        registry: registry::RegistryArgs,
    },
}

#[derive(Subcommand)]
enum PluginCommand {
    /// List a running host's plugins: version, state, queue, faults (from its
    /// metrics address, `--host`, the host's --metrics-addr).
    List(status::StatusArgs),
    /// Validate a plugin (NAME.wasm or NAME.toml) and print what it will do.
    Check {
        /// The plugin: NAME.wasm or NAME.toml (its pair beside it).
        path: PathBuf,
    },
    /// Compile every component in DIR ahead of time into DIR/.precompiled, the
    /// seed cache a host reads on a fresh data directory: `wasmlet up` finds
    /// the built-ins' seed beside them, `--precompiled DIR` names others.
    /// `scripts/build-guests`' and `scripts/install`'s plugin directories are
    /// precompiled so.
    Precompile {
        /// The plugin directory (its `*.wasm` components).
        dir: PathBuf,
        /// Only these plugins (NAME for NAME.wasm); all of DIR's when none.
        plugins: Vec<String>,
    },
    /// Print the CRDs a plugin ships, as YAML (for GitOps).
    Crds {
        /// The plugin: NAME.wasm or NAME.toml.
        path: PathBuf,
    },
    /// Start a plugin: a standalone crate with its manifest, a CRD from its
    /// types, a unit test and a README with the commands to build and load it.
    New {
        /// The plugin's name (its crate, component and manifest are named so).
        name: String,
        /// What the plugin is: a reconciler (a controller) or a provider (a
        /// node's pod state machine).
        #[arg(long, value_enum, default_value = "reconciler")]
        kind: scaffold::ScaffoldKind,
        /// The plugin's language (python, typescript: reconcilers, built with
        /// componentize-py, componentize-js).
        #[arg(long, value_enum, default_value = "rust")]
        lang: scaffold::Lang,
        /// The custom resource a reconciler reconciles, GROUP/VERSION/KIND.
        #[arg(long)]
        crd: Option<String>,
        /// Where to write it (default: ./NAME).
        #[arg(long)]
        dir: Option<PathBuf>,
        /// The SDK to depend on by path: the wasmlet-sdk crate, or with
        /// `--lang python|typescript` the Python or TypeScript SDK's directory
        /// (default: the copy `scripts/install` put beside this binary, else
        /// this build's checkout; a crate's is pinned to this binary's version).
        #[arg(long)]
        sdk_path: Option<PathBuf>,
    },
    /// Print a provider's state graph as Graphviz DOT.
    Graph {
        /// The provider plugin: NAME.wasm or NAME.toml.
        path: PathBuf,
    },
    /// Print each plugin's ClusterRole and its binding to the host's
    /// ServiceAccount (PATH: a plugin, or a directory of plugins), as YAML.
    Rbac {
        /// Plugins (NAME.wasm or NAME.toml) or directories of plugins.
        #[arg(required = true)]
        paths: Vec<PathBuf>,
        /// The host's ServiceAccount, NAMESPACE/NAME.
        #[arg(long, default_value = "wasmlet-system/wasmlet-controller")]
        service_account: String,
        /// The roles for named cluster NAME instead (the manifests'
        /// `[clusters.NAME]` or `[clusters."*"]` rules), to apply there and
        /// bind to the identity the host's `--cluster NAME=KUBECONFIG` uses.
        #[arg(long, value_name = "NAME")]
        cluster: Option<String>,
    },
    /// Push a plugin (DIR/NAME: its component, manifest and CRDs) to an OCI
    /// registry as REGISTRY/REPO:TAG.
    Push {
        /// The plugin: NAME.wasm or NAME.toml (its pair and CRDs beside it).
        path: PathBuf,
        /// Where to push it: REGISTRY/REPO:TAG.
        reference: String,
        #[command(flatten)]
        registry: registry::RegistryArgs,
    },
    /// Pull a plugin pushed with `plugin push` into DIR (as REPO.wasm, REPO.toml
    /// and its CRDs).
    Pull {
        /// What to pull: REGISTRY/REPO:TAG or REGISTRY/REPO@sha256:DIGEST.
        reference: String,
        /// The plugin directory to write it into.
        dir: PathBuf,
        #[command(flatten)]
        registry: registry::RegistryArgs,
    },
    /// Run CANDIDATE beside the live reconciler NAME on every live call, its
    /// writes held back and its decisions compared (as DIR/NAME.shadow.wasm).
    Shadow {
        /// The live reconciler.
        name: String,
        /// The candidate build: a component (.wasm).
        candidate: PathBuf,
        #[command(flatten)]
        dir: shadow::PluginsDir,
    },
    /// Print how NAME's shadow candidate decided compared with the live
    /// version, from a running host's endpoints.
    ShadowReport {
        /// The live reconciler whose candidate is reported.
        name: String,
        /// The host's --metrics-addr.
        #[arg(long, default_value = "127.0.0.1:8080")]
        host: String,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
        /// A bearer token allowed to get /shadow/NAME (needed unless the
        /// host is reached on 127.0.0.1 or ::1).
        #[arg(long, env = "WASMLET_TOKEN", hide_env_values = true)]
        token: Option<String>,
    },
    /// Make NAME's shadow candidate the live version (the normal hot swap).
    Promote {
        /// The live reconciler whose candidate replaces it.
        name: String,
        #[command(flatten)]
        dir: shadow::PluginsDir,
    },
    /// Stop NAME's shadow candidate and remove it.
    Abandon {
        /// The live reconciler whose candidate is stopped.
        name: String,
        #[command(flatten)]
        dir: shadow::PluginsDir,
    },
}

async fn main_async(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Completions { shell } => {
            use clap::CommandFactory;
            clap_complete::generate(
                shell,
                &mut Cli::command(),
                "wasmlet",
                &mut std::io::stdout(),
            );
        }
        Command::Apiserver(args) => {
            let signals = Signals::install()?;
            let _lock = lock_data_dir(&args.data_dir)?;
            let server = start_server(&args).await?;
            signals.wait().await;
            signals::bounded(server.drain(API_DRAIN)).await?;
        }
        Command::Up {
            server,
            mut host,
            node,
            no_node,
            no_builtins,
        } => {
            host.builtin.on_by_default = true;
            host.builtin.no_builtins = no_builtins;
            let signals = Signals::install()?;
            let _lock = lock_data_dir(&server.data_dir)?;
            let s = start_server(&server).await?;
            // The host and the node agent each get an identity of their own
            // (client certificates of the plane's CA), as on a real cluster.
            let pki = s.pki();
            let controller_kc = pki.write_identity_kubeconfig(
                &server.data_dir.join("kubeconfig-controller"),
                s.addr,
                wasmlet_apiserver::CONTROLLER_USER,
                None,
            )?;
            let client = kube::Client::try_from(config_from(Some(&controller_kc)).await?)?;
            let node_client = if no_node {
                client.clone()
            } else {
                let node_kc = pki.write_identity_kubeconfig(
                    &server.data_dir.join("kubeconfig-node"),
                    s.addr,
                    &format!("system:node:{}", node_name(&node)),
                    Some("system:nodes"),
                )?;
                let config = config_from(Some(&node_kc)).await?;
                kube::Client::try_from(host::with_user_agent(config, "wasmlet-node"))?
            };
            let tls = if no_node {
                None
            } else {
                let (cert_pem, key_pem) = s.pki().node_serving_cert(&node_name(&node))?;
                Some(KubeletTls {
                    cert_pem,
                    key_pem,
                    client_ca_pem: s.pki().ca_pem.clone(),
                    client_ca_source: "this API server's CA".into(),
                })
            };
            let running = run_host(
                client,
                node_client,
                &server.data_dir,
                &host,
                tls.map(|t| (&node, Some(t))),
                Some(std::sync::Arc::new(s.store_health())),
            )
            .await?;
            signals.wait().await;
            // The host first, while the plane still answers its writes.
            signals::bounded(async {
                running.drain().await;
                s.drain(API_DRAIN).await;
            })
            .await?;
        }
        Command::Run {
            kubeconfig,
            mode,
            data_dir,
            mut host,
            node,
            builtins,
            kubelet_client_ca,
        } => {
            host.builtin.builtins = builtins;
            let signals = Signals::install()?;
            // Secret volumes, pulled modules, the compiled-plugin cache.
            let _lock = lock_data_dir(&data_dir)?;
            let config = config_from(kubeconfig.as_deref()).await?;
            let cluster_ca = config.root_cert.clone();
            let client = kube::Client::try_from(config)?;
            let node_part = if mode == Mode::Cluster {
                None
            } else {
                // The kubelet endpoint's own certificate. Client certificates
                // are checked against --kubelet-client-ca, by default the
                // cluster CA of the kubeconfig: kubeadm signs the API server's
                // kubelet client certificate with it.
                let own = wasmlet_apiserver::Pki::load_or_create(&data_dir)?;
                let (cert_pem, key_pem) = own.node_serving_cert(&node_name(&node))?;
                let (client_ca_pem, client_ca_source) = match (&kubelet_client_ca, cluster_ca) {
                    (Some(p), _) => (
                        std::fs::read_to_string(p)
                            .with_context(|| format!("reading {}", p.display()))?,
                        format!("--kubelet-client-ca {}", p.display()),
                    ),
                    (None, Some(ders)) if !ders.is_empty() => (
                        ders.iter().map(|d| pem_certificate(d)).collect(),
                        match &kubeconfig {
                            Some(k) => format!("the cluster CA of {}", k.display()),
                            None => "the cluster CA of the pod's service account".into(),
                        },
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
            // The provider comes from --plugins, or is a built-in the image
            // ships beside the binary (deploy/node-agent: `--builtins
            // --builtin-plugins=wasi-runner`).
            let builtin_provider = host.builtin.enabled()
                && crate::builtins::selected(&host.builtin.builtin_plugins)
                    .is_ok_and(|s| s.contains(&node.provider.as_str()));
            if mode == Mode::Node && host.plugins.is_none() && !builtin_provider {
                anyhow::bail!(
                    "--mode node needs the provider plugin ({0}): --plugins DIR holding it, or --builtins --builtin-plugins={0} for the built-in one",
                    node.provider
                );
            }
            if mode == Mode::Node {
                // A node-only host reconciles nothing.
                host.leader_elect = false;
            }
            let running =
                run_host(client.clone(), client, &data_dir, &host, node_part, None).await?;
            signals.wait().await;
            signals::bounded(running.drain()).await?;
        }
        Command::Status(args) => status::status(&args).await?,
        Command::Plugin(PluginCommand::List(args)) => status::plugin_list(&args).await?,
        Command::Replay(args) => replay::replay(args).await?,
        Command::Datastore(command) => datastore::run(command).await?,
        Command::Plugin(PluginCommand::Check { path }) => plugin_check(&path).await?,
        Command::Plugin(PluginCommand::Crds { path }) => plugin_crds(&path)?,
        Command::Plugin(PluginCommand::Precompile { dir, plugins }) => {
            precompile::precompile(&dir, &plugins)?
        }
        Command::Plugin(PluginCommand::Graph { path }) => plugin_graph(&path).await?,
        Command::Plugin(PluginCommand::New {
            name,
            kind,
            lang,
            crd,
            dir,
            sdk_path,
        }) => {
            let root = scaffold::plugin_new(
                &name,
                kind,
                lang,
                crd.as_deref(),
                dir.as_deref(),
                sdk_path.as_deref(),
            )?;
            println!("wrote {}: see its README.md", root.display());
        }
        Command::Plugin(PluginCommand::Rbac {
            paths,
            service_account,
            cluster,
        }) => plugin_rbac(&paths, &service_account, cluster.as_deref())?,
        Command::Plugin(PluginCommand::Push {
            path,
            reference,
            registry,
        }) => registry::plugin_push(&path, &reference, &registry).await?,
        Command::Plugin(PluginCommand::Pull {
            reference,
            dir,
            registry,
        }) => registry::plugin_pull(&reference, &dir, &registry).await?,
        Command::Module(ModuleCommand::Push {
            path,
            reference,
            registry,
        }) => registry::module_push(&path, &reference, &registry).await?,
        Command::Plugin(PluginCommand::Shadow {
            name,
            candidate,
            dir,
        }) => shadow::start(&name, &candidate, &dir)?,
        Command::Plugin(PluginCommand::ShadowReport {
            name,
            host,
            json,
            token,
        }) => shadow::report(&name, &host, token.as_deref(), json).await?,
        Command::Plugin(PluginCommand::Promote { name, dir }) => shadow::promote(&name, &dir)?,
        Command::Plugin(PluginCommand::Abandon { name, dir }) => shadow::abandon(&name, &dir)?,
    }
    Ok(())
}

// The host's compile child (`wasmlet compile-component`, run by the plugin
// engine): a component read on stdin compiled, the artifact on stdout. Parsed
// apart from `Cli`, so that no help, completion or suggestion offers it.
#[derive(Parser)]
#[command(
    name = "wasmlet compile-component",
    about = "Internal: the plugin engine's compile child"
)]
struct CompileChild {
    #[arg(long, action = clap::ArgAction::Set)]
    pooling: bool,
    /// A core module (a pod's WASI preview 1 workload), not a component.
    #[arg(long)]
    module: bool,
}

pub fn main() -> ExitCode {
    // A compile child: no logging, no runtime, nothing but the compile.
    if std::env::args_os()
        .nth(1)
        .is_some_and(|a| a == "compile-component")
    {
        let child = CompileChild::parse_from(std::env::args_os().skip(1));
        return crate::plugin::engine::compile_component_child(child.pooling, child.module);
    }
    let cli = Cli::parse();
    let logs = crate::telemetry::Logs {
        filter: &cli.log_level,
        format: cli.log_format,
    };
    let otlp_endpoint = match &cli.command {
        Command::Up { host, .. } | Command::Run { host, .. } => host.otlp_endpoint.as_deref(),
        _ => None,
    };
    let telemetry = match crate::telemetry::init(logs, otlp_endpoint) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("wasmlet: {e}");
            return ExitCode::FAILURE;
        }
    };
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("wasmlet: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let code = match runtime.block_on(main_async(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("wasmlet: {}", crate::causes::of_chain(e.chain()));
            ExitCode::FAILURE
        }
    };
    telemetry.shutdown();
    code
}
