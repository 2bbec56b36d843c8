//! The flags `up`, `run` and `apiserver` share.

use std::net::SocketAddr;
use std::path::PathBuf;

#[derive(clap::Args, Clone)]
#[command(next_help_heading = "API server")]
pub(super) struct ServerArgs {
    /// Directory for the database, certificates and kubeconfig.
    #[arg(long, default_value = ".data", env = "WASMLET_DATA_DIR")]
    pub(crate) data_dir: PathBuf,
    /// Address of the API server.
    #[arg(long, default_value = "127.0.0.1")]
    pub(crate) address: std::net::IpAddr,
    /// Port of the API server (0 picks a free port; the kubeconfig names it).
    #[arg(long, default_value_t = 6443)]
    pub(crate) port: u16,
    /// Revisions of watch history kept; older resourceVersions get 410 Gone.
    #[arg(long, default_value_t = 10_000)]
    pub(crate) watch_history: usize,
    /// Seconds an event stays in the watch history at most, however few there
    /// are (memory comes back after a burst of writes).
    #[arg(long, default_value_t = 75)]
    pub(crate) watch_history_seconds: u64,
    /// MiB of objects the watch history holds at most, however recent (a burst
    /// of large objects is let go at once; older watches get 410 Gone).
    #[arg(long, default_value_t = 32)]
    pub(crate) watch_history_mib: usize,
    /// Watches one user may hold open at once (past it: 429 Too Many Requests).
    #[arg(long, default_value_t = 1_000)]
    pub(crate) max_watches_per_user: usize,
}

#[derive(clap::Args, Clone)]
#[command(next_help_heading = "Host")]
pub(super) struct HostArgs {
    /// The plugin directory (NAME.wasm + NAME.toml), watched for changes; its
    /// `plugins.toml` may list plugins to pull from OCI registries.
    #[arg(long)]
    pub(crate) plugins: Option<PathBuf>,
    /// How often the references in `plugins.toml` are checked for a new digest.
    #[arg(long, default_value_t = 60)]
    pub(crate) plugin_poll_seconds: u64,
    /// Where /metrics, /healthz and /readyz are served.
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub(crate) metrics_addr: SocketAddr,
    /// Elect a leader through a coordination.k8s.io Lease before reconciling.
    #[arg(long)]
    pub(crate) leader_elect: bool,
    /// This host's identity in leader election (default: hostname + pid).
    #[arg(long)]
    pub(crate) identity: Option<String>,
    /// How often every cached object is re-enqueued at low priority.
    #[arg(long, default_value_t = 600)]
    pub(crate) resync_seconds: u64,
    /// The PostgreSQL database of `source = "postgres"` reconcilers
    /// (`postgres://USER@HOST:PORT/DB`); plugins never see it. TLS,
    /// verify-full, with the CA from `?sslrootcert=FILE` (else the system's);
    /// plain only with `?sslmode=disable`.
    #[arg(long, env = "WASMLET_DATASTORE_URL", hide_env_values = true)]
    pub(crate) datastore_url: Option<String>,
    /// Connections the host opens to the datastore at most (plus one LISTEN
    /// connection per table reconciler).
    #[arg(long, default_value_t = 8)]
    pub(crate) datastore_max_connections: usize,
    /// A cluster reconcilers may address by NAME besides the host's own (the
    /// contract's `clusters` import, manifest `[clusters.NAME]`), given by a
    /// kubeconfig; repeatable. Each gets its own client and caches.
    #[arg(long = "cluster", value_name = "NAME=KUBECONFIG")]
    pub(crate) clusters: Vec<String>,
    /// A directory of named clusters that may change while the host runs:
    /// each file named for a cluster (a DNS label) is its kubeconfig (a
    /// Secret with a key per cluster, mounted, is such a directory). Read
    /// every 2 s: a new file adds its cluster, a changed one reconnects it,
    /// a removed one removes it. A `--cluster` of the same name wins.
    #[arg(long, value_name = "DIR")]
    pub(crate) clusters_dir: Option<std::path::PathBuf>,
    /// An OpenTelemetry collector (OTLP/HTTP, e.g. http://collector:4318): the
    /// host's reconcile and pod-state spans are sent there. Off when unset.
    #[arg(long, env = "OTEL_EXPORTER_OTLP_ENDPOINT")]
    pub(crate) otlp_endpoint: Option<String>,
    /// A seed cache of precompiled components (`wasmlet plugin precompile
    /// DIR` writes DIR/.precompiled), read when this host's own cache misses;
    /// repeatable. The built-ins' seed beside them is read without it.
    #[arg(
        long,
        value_name = "DIR",
        env = "WASMLET_PRECOMPILED",
        value_delimiter = ':'
    )]
    pub(crate) precompiled: Vec<PathBuf>,
    /// Debugging/testing only: hold every watch event this long before it reaches the caches.
    #[arg(long, default_value_t = 0, hide = true)]
    pub(crate) debug_cache_delay_ms: u64,
    #[command(flatten)]
    pub(crate) builtin: crate::builtins::BuiltinArgs,
    /// Record every call of reconciler NAME to DATA_DIR/records/NAME.jsonl
    /// (repeatable; `*`: all), as a manifest's `[record]` does; `wasmlet replay` reads them.
    #[arg(long = "record", value_name = "NAME")]
    pub(crate) record: Vec<String>,
}

#[derive(clap::Args, Clone)]
#[command(next_help_heading = "Node agent")]
pub(super) struct NodeArgs {
    /// This node's name (default: the hostname).
    #[arg(long)]
    pub(crate) node_name: Option<String>,
    /// The provider plugin that runs this node's pods.
    #[arg(long, default_value = "wasi-runner")]
    pub(crate) provider: String,
    /// Port of the kubelet API (0 picks a free one; the Node object names it).
    #[arg(long, default_value_t = 10250)]
    pub(crate) kubelet_port: u16,
    /// Pods this node takes (advertised as its `pods` capacity, as the
    /// kubelet's `--max-pods`); it runs up to four containers per pod.
    #[arg(long, default_value_t = 110)]
    pub(crate) max_pods: u32,
    /// The address this node reports and serves the kubelet API on.
    #[arg(long, default_value = "127.0.0.1")]
    pub(crate) node_address: std::net::IpAddr,
    /// Host directories pods may mount as hostPath volumes.
    #[arg(long = "host-path-allow")]
    pub(crate) host_path_allow: Vec<PathBuf>,
    /// Registries pulled from over plain HTTP (host:port).
    #[arg(long = "insecure-registry")]
    pub(crate) insecure_registries: Vec<String>,
    /// Directories `file://` images may be read from (repeatable; none by default,
    /// so pods cannot run or probe the node's files).
    #[arg(long = "allow-file-images")]
    pub(crate) allow_file_images: Vec<PathBuf>,
    /// Memory limit of a container that sets no `resources.limits.memory` (bytes, or
    /// with a Ki/Mi/Gi or k/M/G suffix).
    #[arg(long, default_value = "256Mi", value_parser = parse_bytes)]
    pub(crate) workload_memory_limit: u64,
    /// The largest `resources.limits.memory` a container may set (larger: the
    /// container fails to start).
    #[arg(long, default_value = "2Gi", value_parser = parse_bytes)]
    pub(crate) workload_max_memory: u64,
    /// The memory limits of all running workloads together stay under this
    /// (every workload's memory is the host process's); a container that
    /// would pass it fails to start. Advertised as the node's allocatable
    /// memory, which pods' requests are admitted against. Default: three
    /// quarters of the machine's memory (the rest for the host itself).
    #[arg(long, value_parser = parse_bytes)]
    pub(crate) workload_memory_budget: Option<u64>,
    /// Descriptors (files, directories, mounts) a WASI 0.2 workload may hold
    /// open; an open past it fails in the workload. Lowered at start so that
    /// the node's most workloads together stay within the open-file limit
    /// (raised to its hard limit) minus a quarter kept for the host.
    #[arg(long, default_value_t = crate::node::workloads::files::DEFAULT_MAX_OPEN_FILES)]
    pub(crate) workload_max_open_files: usize,
    /// The first back-off (ms) when a provider call (init, a state handler)
    /// errors, traps or runs past its deadline; it doubles to 300 s, as the
    /// kubelet's crash-loop back-off (tests shorten it). The Node reports
    /// the provider crash-looping after 3 faults within 30 times this.
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) provider_backoff_base_ms: u64,
    /// How long (ms) past a deleted pod's grace period its teardown may keep
    /// faulting or waiting before the node releases its workloads and
    /// volumes and removes it.
    #[arg(long, default_value_t = 30_000)]
    pub(crate) teardown_bound_ms: u64,
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
