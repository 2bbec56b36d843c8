//! The plugin manifest, `NAME.toml` beside `NAME.wasm` (schema in
//! `guests/README.md`). Every error names the file and the field.

use std::path::{Path, PathBuf};

use serde::Deserialize;
use wasmlet_apimachinery::selector::{FieldSelector, LabelSelector};

pub(crate) mod clusters;

/// The contract version this host implements.
pub(crate) const CONTRACT_VERSION: &str = "0.1.0";

/// A manifest that cannot be used: the file, the field (empty when the
/// whole file is at fault) and why.
#[derive(Debug, thiserror::Error)]
pub struct ManifestError {
    pub(crate) file: String,
    pub(crate) field: String,
    pub(crate) message: String,
}

impl std::fmt::Display for ManifestError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.field.as_str() {
            "" => write!(f, "{}: {}", self.file, self.message),
            field => write!(f, "{}: {field}: {}", self.file, self.message),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PluginKind {
    Reconciler,
    Provider,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct PluginSection {
    pub(crate) kind: PluginKind,
    pub(crate) contract: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Reconciles {
    /// Where the objects come from: a Kubernetes kind (the default) or the
    /// rows of a PostgreSQL table (`postgres`, with `table`).
    #[serde(default)]
    pub(crate) source: ObjectSource,
    /// `source = "postgres"`: the table (a plain identifier, see
    /// [`crate::datastore::Table`]); the connection is the host's, never the
    /// plugin's.
    pub(crate) table: Option<String>,
    /// The kind; with `source = "postgres"` optional, and then only what the
    /// guest's documents say in `apiVersion` and `kind`.
    #[serde(default)]
    pub api_version: String,
    #[serde(default)]
    pub kind: String,
    pub(crate) namespace: Option<String>,
    pub(crate) label_selector: Option<String>,
    /// Only objects whose fields match (`spec.nodeName=`, `status.phase!=Failed`),
    /// applied by the host to its cache, so it works the same on any cluster:
    /// an object that leaves the selection is as good as deleted to the plugin
    /// (kube-scheduler's informer of unassigned pods).
    pub(crate) field_selector: Option<String>,
    /// `false`: the host never writes the reconciled object's status (no
    /// conditions, no `Ready`): for kinds whose status others own, such as a
    /// scheduler's Pods, which the guest changes through its own calls.
    #[serde(default = "default_true")]
    pub(crate) host_status: bool,
    /// Whose writes hold a key back until the caches have seen them.
    #[serde(default)]
    pub(crate) expectations: ExpectationScope,
}

/// Where a reconciler's objects come from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum ObjectSource {
    #[default]
    Kubernetes,
    Postgres,
}

impl Reconciles {
    /// Whether the objects are rows of a datastore table.
    pub(crate) fn is_table(&self) -> bool {
        self.source == ObjectSource::Postgres
    }
}

fn default_true() -> bool {
    true
}

/// `object`: a reconcile's writes hold back only its own key (a controller of
/// independent objects). `plugin`: they hold back every key of the plugin, as
/// kube-scheduler's assumed pods do: a decision that reads what earlier
/// decisions wrote (a node's free memory) never runs on a cache without them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum ExpectationScope {
    #[default]
    Object,
    Plugin,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(crate) struct TypeRef {
    pub(crate) api_version: String,
    pub(crate) kind: String,
    /// Which of its changes requeue the owner.
    #[serde(default)]
    pub(crate) changes: Changes,
}

/// Which changes of an owned or watched object requeue a key. A controller
/// that requeues itself (the StatefulsetRollout operator's passes) still
/// needs the kind cached for its reads, without every status change of every
/// object waking it (event-driven load it was designed to avoid).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Changes {
    /// Every change (the default).
    #[default]
    All,
    /// Creation, deletion and a new `metadata.generation` (spec edits), not
    /// status or metadata churn; objects without a generation: every change
    /// (kube-runtime's `predicates::generation`).
    Generation,
    /// None: the host only keeps the kind cached for the plugin's reads.
    None,
}

/// How a watched object names the key it requeues.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum MapFn {
    Label(String),
    Annotation(String),
    Field(String),
    /// `selector:PATH`: every reconciled object in the watched object's
    /// namespace whose `metav1.LabelSelector` at the dotted PATH (e.g.
    /// `spec.selector`) matches the watched object's labels, as upstream
    /// controllers find a pod's PodDisruptionBudgets or an orphan's ReplicaSets.
    Selector(String),
    /// `waiting`: every reconciled object whose last reconcile asked to be
    /// called again later (`requeue-after`) is called now, as kube-scheduler
    /// moves its unschedulable pods back to the active queue when a node
    /// changes: the wait stays as a backstop, the change ends it early.
    Waiting,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(crate) struct Watch {
    pub(crate) api_version: String,
    pub(crate) kind: String,
    pub(crate) map: String,
    /// A named cluster (`--cluster NAME=KUBECONFIG`) whose objects of the
    /// kind are watched instead of the host's own; `*`: every named cluster
    /// the manifest reaches. As the regional objects a global reconciler
    /// writes change, the object the map names is reconciled.
    #[serde(default)]
    pub(crate) cluster: Option<String>,
    /// Which of its changes requeue the key the map names.
    #[serde(default)]
    pub(crate) changes: Changes,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(crate) struct Rule {
    pub(crate) api_groups: Vec<String>,
    pub(crate) resources: Vec<String>,
    pub(crate) verbs: Vec<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Permissions {
    #[serde(default)]
    pub(crate) rules: Vec<Rule>,
    #[serde(default)]
    pub(crate) http_hosts: Vec<String>,
    /// Let `http-hosts` names resolve to loopback, private or link-local
    /// addresses (refused by default; a literal IP in `http-hosts` is allowed as named).
    #[serde(default)]
    pub http_private_addresses: bool,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Limits {
    #[serde(default = "one")]
    pub concurrency: u32,
    #[serde(default = "default_memory")]
    pub memory_mib: u32,
    #[serde(default = "default_deadline")]
    pub(crate) deadline_ms: u64,
    /// Keep instances between calls instead of a fresh one each time: much
    /// cheaper calls, but whatever a guest keeps in memory (statics, caches)
    /// survives into later calls — opt in only for guests written for it.
    #[serde(default)]
    pub reuse_instances: bool,
    /// Rate (per minute) at which up-to-date objects found by a list or a
    /// resync are re-verified at least; `None`: the host's (300).
    #[serde(default)]
    pub(crate) low_per_minute: Option<u32>,
    /// Whether idle workers re-verify up-to-date objects faster than
    /// `low-per-minute`; `false` makes that rate a cap, for plugins whose
    /// downstream must be protected. `None`: the source's default (see
    /// [`Limits::low_when_idle`]).
    #[serde(default)]
    pub(crate) low_when_idle: Option<bool>,
    /// Reconcilers: bindings (`bind`) of one call that may still be in
    /// flight after it returned (see [`super::in_flight`]); more wait, as
    /// all do with 0, the default.
    #[serde(default)]
    pub(crate) bindings_in_flight: u32,
}

/// The most `limits.bindings-in-flight`: each holds a worker and its key.
pub(crate) const MAX_BINDINGS_IN_FLIGHT: u32 = 64;

impl Limits {
    /// Whether idle workers take low-lane objects beyond `low-per-minute`:
    /// the manifest's `low-when-idle`, else yes for a Kubernetes kind (an
    /// up-to-date object's pass is a guest call on the host's cache, no API
    /// call) and no for a datastore table (each pass of a row is an advisory
    /// lock, a read and a guest call on the shared database: re-verifying
    /// 200,000 rows at full speed after every start and resync is the load
    /// the fixed rate exists to prevent).
    pub(crate) fn low_when_idle(&self, table: bool) -> bool {
        self.low_when_idle.unwrap_or(!table)
    }

    /// The controller's workers: one per call in flight, and one per binding
    /// still in flight after its call (its worker holds the key until the
    /// answer comes).
    pub(crate) fn workers(&self) -> u32 {
        self.concurrency + self.bindings_in_flight
    }
}

fn one() -> u32 {
    1
}
fn default_memory() -> u32 {
    64
}
fn default_deadline() -> u64 {
    1000
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            concurrency: 1,
            memory_mib: default_memory(),
            deadline_ms: default_deadline(),
            reuse_instances: false,
            low_per_minute: None,
            low_when_idle: None,
            bindings_in_flight: 0,
        }
    }
}

/// `[record]`: record this plugin's calls (see `plugin::record`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(crate) struct Record {
    /// `false`: the section is kept but nothing is recorded (the host's
    /// `--record NAME` still turns recording on).
    #[serde(default = "default_true")]
    pub(crate) enabled: bool,
    /// A record file is rotated before it would pass this size.
    #[serde(default = "default_record_mib")]
    pub(crate) max_file_mib: u32,
    /// Rotated files kept besides the current one.
    #[serde(default = "default_record_files")]
    pub(crate) max_files: u32,
    /// Record Secret values, credentials and sensitive bodies as they are.
    #[serde(default)]
    pub(crate) keep_secrets: bool,
    /// Hosts (as in `http-hosts`, `*.` allowed) whose HTTP bodies are redacted.
    #[serde(default)]
    pub(crate) sensitive_http_hosts: Vec<String>,
}

fn default_record_mib() -> u32 {
    16
}
fn default_record_files() -> u32 {
    3
}

impl Default for Record {
    fn default() -> Self {
        Record {
            enabled: true,
            max_file_mib: default_record_mib(),
            max_files: default_record_files(),
            keep_secrets: false,
            sensitive_http_hosts: Vec::new(),
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    finalizer: Option<String>,
    #[serde(default)]
    crds: Vec<String>,
    plugin: PluginSection,
    reconciles: Option<Reconciles>,
    #[serde(default)]
    owns: Vec<TypeRef>,
    #[serde(default)]
    watches: Vec<Watch>,
    #[serde(default)]
    permissions: Permissions,
    #[serde(default)]
    clusters: clusters::Clusters,
    #[serde(default)]
    limits: Limits,
    record: Option<Record>,
}

/// A validated manifest.
#[derive(Debug, Clone)]
pub struct Manifest {
    pub(crate) path: PathBuf,
    pub(crate) finalizer: Option<String>,
    pub(crate) crds: Vec<PathBuf>,
    pub(crate) plugin: PluginSection,
    pub reconciles: Option<Reconciles>,
    pub(crate) owns: Vec<TypeRef>,
    pub(crate) watches: Vec<(Watch, MapFn)>,
    pub permissions: Permissions,
    /// `[clusters.NAME]`: rules in the host's named clusters (`*`: any of them).
    pub(crate) clusters: clusters::Clusters,
    pub limits: Limits,
    pub(crate) record: Option<Record>,
}

/// CRD files named in `field` (`crds`, `clusters.NAME.crds`), beside the
/// manifest in `dir`: no absolute paths, no `..`; with `with_files`, each must exist.
fn crd_paths<P: AsRef<Path>>(
    field: &str,
    named: &[P],
    dir: &Path,
    with_files: bool,
) -> Result<Vec<PathBuf>, (String, String)> {
    let mut out = Vec::new();
    for (i, c) in named.iter().enumerate() {
        let c = c.as_ref();
        let relative = c.components().all(|part| {
            matches!(
                part,
                std::path::Component::Normal(_) | std::path::Component::CurDir
            )
        });
        if c.as_os_str().is_empty() || !relative {
            return Err((
                format!("{field}[{i}]"),
                format!(
                    "\"{}\" must be a path inside the plugin directory (relative, without \"..\")",
                    c.display()
                ),
            ));
        }
        let p = dir.join(c);
        if with_files && !p.exists() {
            return Err((
                format!("{field}[{i}]"),
                format!("{} does not exist", p.display()),
            ));
        }
        out.push(p);
    }
    Ok(out)
}

const VERBS: &[&str] = &[
    "get", "list", "watch", "create", "update", "patch", "delete", "evict", "*",
];

impl Manifest {
    pub fn load(path: &Path) -> Result<Manifest, ManifestError> {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| ManifestError {
            file: file.clone(),
            field: String::new(),
            message: match e.kind() {
                std::io::ErrorKind::NotFound => format!(
                    "no such manifest: a plugin is NAME.wasm with its manifest NAME.toml beside it ({e})"
                ),
                _ => format!("cannot read the manifest: {e}"),
            },
        })?;
        Manifest::parse(&text, path)
    }

    pub fn parse(text: &str, path: &Path) -> Result<Manifest, ManifestError> {
        Manifest::parse_with(text, path, true)
    }

    /// A manifest read from elsewhere than its plugin directory (a record's
    /// header): its CRD files are not looked for.
    pub(crate) fn parse_detached(text: &str, path: &Path) -> Result<Manifest, ManifestError> {
        Manifest::parse_with(text, path, false)
    }

    fn parse_with(text: &str, path: &Path, with_files: bool) -> Result<Manifest, ManifestError> {
        let file = path.display().to_string();
        let err = |field: &str, message: String| ManifestError {
            file: file.clone(),
            field: field.into(),
            message,
        };
        let raw: Raw = toml::from_str(text).map_err(|e| {
            // toml names the key path in its message; keep it on one line.
            let msg = e.message().to_string();
            let field = e
                .span()
                .map(|s| text[..s.start.min(text.len())].lines().count().to_string())
                .map(|line| format!("line {line}"))
                .unwrap_or_default();
            err(&field, msg)
        })?;
        if raw.plugin.contract != CONTRACT_VERSION {
            return Err(err(
                "plugin.contract",
                format!(
                    "the plugin wants wasmlet:plugin@{}, this host provides wasmlet:plugin@{CONTRACT_VERSION}",
                    raw.plugin.contract
                ),
            ));
        }
        match (raw.plugin.kind, &raw.reconciles) {
            (PluginKind::Reconciler, None) => {
                return Err(err(
                    "reconciles",
                    "a reconciler must say what it reconciles ([reconciles] api-version, kind)"
                        .into(),
                ));
            }
            (PluginKind::Provider, Some(_)) => {
                return Err(err(
                    "reconciles",
                    "providers run pods; [reconciles] does not apply".into(),
                ));
            }
            (PluginKind::Provider, None) if raw.finalizer.is_some() => {
                return Err(err("finalizer", "providers have no finalizer".into()));
            }
            _ => {}
        }
        if let Some(r) = raw.reconciles.as_ref().filter(|r| r.is_table()) {
            let table = r.table.as_deref().ok_or_else(|| {
                err(
                    "reconciles.table",
                    "source = \"postgres\" needs the table to reconcile".into(),
                )
            })?;
            crate::datastore::Table::new(table)
                .map_err(|e| err("reconciles.table", e.to_string()))?;
            // What a table controller does not do: refused rather than
            // silently ignored. A `finalizer` is supported (the row's
            // `finalizers` column, datastore::schema), and so are `watches`
            // whose map names a row id.
            let unsupported = [
                ("reconciles.namespace", r.namespace.is_some()),
                ("reconciles.label-selector", r.label_selector.is_some()),
                ("reconciles.field-selector", r.field_selector.is_some()),
                ("owns", !raw.owns.is_empty()),
            ];
            if let Some((field, _)) = unsupported.iter().find(|(_, set)| *set) {
                return Err(err(
                    field,
                    "not supported for source = \"postgres\" (rows have no namespaces, labels or owner references)".into(),
                ));
            }
        } else if let Some(r) = &raw.reconciles {
            if r.table.is_some() {
                return Err(err(
                    "reconciles.table",
                    "only with source = \"postgres\"".into(),
                ));
            }
            if r.api_version.is_empty() {
                return Err(err("reconciles.api-version", "must not be empty".into()));
            }
            if r.kind.is_empty() {
                return Err(err("reconciles.kind", "must not be empty".into()));
            }
            if let Some(sel) = &r.label_selector {
                LabelSelector::parse(sel)
                    .map_err(|e| err("reconciles.label-selector", e.to_string()))?;
            }
            if let Some(sel) = &r.field_selector {
                FieldSelector::parse(sel)
                    .map_err(|e| err("reconciles.field-selector", e.to_string()))?;
            }
        }
        if let Some(f) = &raw.finalizer
            && (f.is_empty() || !f.contains('/'))
        {
            return Err(err(
                "finalizer",
                format!("\"{f}\" should be a qualified name like example.com/cleanup"),
            ));
        }
        let mut watches = Vec::new();
        for (i, w) in raw.watches.iter().enumerate() {
            let map = match w.map.split_once(':') {
                None if w.map == "waiting" => MapFn::Waiting,
                Some(("label", k)) if !k.is_empty() => MapFn::Label(k.into()),
                Some(("annotation", k)) if !k.is_empty() => MapFn::Annotation(k.into()),
                Some(("field", p)) if !p.is_empty() => MapFn::Field(p.into()),
                Some(("selector", p)) if !p.is_empty() => MapFn::Selector(p.into()),
                _ => {
                    return Err(err(
                        &format!("watches[{i}].map"),
                        format!(
                            "\"{}\": expected \"label:KEY\", \"annotation:KEY\", \"field:PATH\", \"selector:PATH\" or \"waiting\"",
                            w.map
                        ),
                    ));
                }
            };
            if matches!(map, MapFn::Selector(_))
                && raw.reconciles.as_ref().is_some_and(|r| r.is_table())
            {
                return Err(err(
                    &format!("watches[{i}].map"),
                    "\"selector:\" is not supported for source = \"postgres\" (rows have no labels to select): name the row with \"label:KEY\", \"annotation:KEY\" or \"field:PATH\"".into(),
                ));
            }
            if let Some(c) = &w.cluster {
                clusters::check_name(c)
                    .map_err(|(_, m)| err(&format!("watches[{i}].cluster"), m))?;
                let reached = if c == clusters::ANY {
                    !raw.clusters.is_empty()
                } else {
                    clusters::rules_for(&raw.clusters, c).is_some()
                };
                if !reached {
                    return Err(err(
                        &format!("watches[{i}].cluster"),
                        format!(
                            "the manifest grants nothing in cluster \"{c}\" (add [{}] with its rules)",
                            clusters::table_name(c)
                        ),
                    ));
                }
            }
            watches.push((w.clone(), map));
        }
        check_rules("permissions", &raw.permissions.rules).map_err(|(f, m)| err(&f, m))?;
        for (i, h) in raw.permissions.http_hosts.iter().enumerate() {
            parse_http_host(h).map_err(|m| {
                err(
                    &format!("permissions.http-hosts[{i}]"),
                    format!("\"{h}\": {m}"),
                )
            })?;
        }
        for (name, c) in &raw.clusters {
            clusters::check_name(name).map_err(|(f, m)| err(&f, m))?;
            check_rules(&clusters::table_name(name), &c.rules).map_err(|(f, m)| err(&f, m))?;
        }
        if raw.limits.concurrency == 0 {
            return Err(err("limits.concurrency", "must be at least 1".into()));
        }
        if raw.limits.bindings_in_flight > MAX_BINDINGS_IN_FLIGHT {
            return Err(err(
                "limits.bindings-in-flight",
                format!(
                    "{} is over the most, {MAX_BINDINGS_IN_FLIGHT}",
                    raw.limits.bindings_in_flight
                ),
            ));
        }
        if raw.limits.bindings_in_flight > 0 && raw.plugin.kind != PluginKind::Reconciler {
            return Err(err(
                "limits.bindings-in-flight",
                "only a reconciler's calls can leave bindings in flight".into(),
            ));
        }
        if raw.limits.bindings_in_flight > 0
            && raw
                .reconciles
                .as_ref()
                .is_some_and(|r| r.expectations == ExpectationScope::Plugin)
        {
            // Plugin-wide expectations hold every call until the caches show
            // the last one's writes; a binding in flight is not known yet.
            return Err(err(
                "limits.bindings-in-flight",
                "not with reconciles.expectations = \"plugin\": the next call would not wait for the bindings in flight".into(),
            ));
        }
        if raw.limits.memory_mib == 0 || raw.limits.memory_mib > 4096 {
            return Err(err(
                "limits.memory-mib",
                format!("{} is outside 1..=4096", raw.limits.memory_mib),
            ));
        }
        if raw.limits.deadline_ms == 0 {
            return Err(err("limits.deadline-ms", "must be at least 1".into()));
        }
        if let Some(r) = &raw.record
            && r.max_file_mib == 0
        {
            return Err(err("record.max-file-mib", "must be at least 1".into()));
        }
        let dir = path.parent().unwrap_or(Path::new("."));
        let crds = crd_paths("crds", &raw.crds, dir, with_files).map_err(|(f, m)| err(&f, m))?;
        let mut clusters = raw.clusters;
        for (name, c) in clusters.iter_mut() {
            let field = format!("{}.crds", clusters::table_name(name));
            c.crds = crd_paths(&field, &c.crds, dir, with_files).map_err(|(f, m)| err(&f, m))?;
        }
        Ok(Manifest {
            path: path.to_path_buf(),
            finalizer: raw.finalizer,
            crds,
            plugin: raw.plugin,
            reconciles: raw.reconciles,
            owns: raw.owns,
            watches,
            permissions: raw.permissions,
            clusters,
            limits: raw.limits,
            record: raw.record,
        })
    }

    /// Whether the manifest grants `verb` on `group`/`resource` (RBAC-style;
    /// `resource` may be a subresource like `pods/status`) in the host's own cluster.
    pub fn allows(&self, group: &str, resource: &str, verb: &str) -> bool {
        rules_allow(&self.permissions.rules, group, resource, verb)
    }

    /// Whether some rule could grant `verb` in `group` before the kind is
    /// resolved to its resource: on the main resource (`sub` none) or on
    /// subresource `sub` of some resource.
    pub fn may_allow(&self, group: &str, sub: Option<&str>, verb: &str) -> bool {
        rules_may_allow(&self.permissions.rules, group, sub, verb)
    }

    /// The rules that apply in the named cluster `cluster` (`[clusters.NAME]`,
    /// else `[clusters."*"]`); `None`: the manifest does not reach it.
    pub(crate) fn cluster_rules(&self, cluster: &str) -> Option<&[Rule]> {
        clusters::rules_for(&self.clusters, cluster)
    }

    /// Whether the `http` import may reach `host` (with optional `:port`).
    pub fn allows_http_host(&self, host: &str, port: Option<u16>) -> bool {
        self.permissions.http_hosts.iter().any(|h| {
            // Entries were checked at parse time; one that does not parse
            // allows nothing (it once allowed every port).
            let Ok((pat, pport)) = parse_http_host(h) else {
                return false;
            };
            let host_ok = match pat.strip_prefix("*.") {
                Some(suffix) => host.ends_with(&format!(".{suffix}")),
                None => host == pat,
            };
            host_ok && (pport.is_none() || pport == port)
        })
    }
}

/// One `http-hosts` entry: a host name (`*.` in front: any subdomain), an
/// IPv4 address or a bracketed IPv6 address, then optionally `:PORT` (1 to
/// 65535; without it, any port). The error says what is wrong with it.
pub(crate) fn parse_http_host(entry: &str) -> Result<(&str, Option<u16>), String> {
    let (host, port) = if entry.starts_with('[') {
        let end = entry
            .find(']')
            .ok_or("an IPv6 address needs its closing \"]\"")?;
        let (host, rest) = entry.split_at(end + 1);
        if host.len() == 2 {
            return Err("the host is empty".into());
        }
        if !host[1..end]
            .chars()
            .all(|c| c.is_ascii_hexdigit() || c == ':' || c == '.')
        {
            return Err(format!("{host} is not an IPv6 address"));
        }
        match rest {
            "" => (host, None),
            _ => (
                host,
                Some(
                    rest.strip_prefix(':')
                        .ok_or("expected \":PORT\" after the \"]\"")?,
                ),
            ),
        }
    } else {
        match entry.rsplit_once(':') {
            Some((h, _)) if h.contains(':') => {
                return Err("an IPv6 address goes in brackets, e.g. \"[2001:db8::1]:8443\"".into());
            }
            Some((h, p)) => (h, Some(p)),
            None => (entry, None),
        }
    };
    if !host.starts_with('[') {
        let name = host.strip_prefix("*.").unwrap_or(host);
        if name.is_empty() {
            return Err("the host is empty".into());
        }
        if !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_'))
        {
            return Err(format!(
                "\"{host}\" is not a host name or IP address (\"*.\" only in front)"
            ));
        }
    }
    let port = match port {
        None => None,
        Some(p) => match p.parse::<u16>() {
            Ok(n) if n > 0 => Some(n),
            _ => {
                return Err(format!(
                    "port \"{p}\" is not a number from 1 to 65535 (leave \":PORT\" out to allow any port)"
                ));
            }
        },
    };
    Ok((host, port))
}

/// Checks the verbs and resources of `rules` under `table` (e.g. `permissions`);
/// the error is `(field, message)`.
fn check_rules(table: &str, rules: &[Rule]) -> Result<(), (String, String)> {
    for (i, rule) in rules.iter().enumerate() {
        for (j, v) in rule.verbs.iter().enumerate() {
            if !VERBS.contains(&v.as_str()) {
                return Err((
                    format!("{table}.rules[{i}].verbs[{j}]"),
                    format!("unknown verb \"{v}\" (one of {})", VERBS.join(", ")),
                ));
            }
        }
        if rule.resources.is_empty() {
            return Err((
                format!("{table}.rules[{i}].resources"),
                "must name at least one resource".into(),
            ));
        }
    }
    Ok(())
}

/// Whether `rules` grant `verb` on `group`/`resource`, as RBAC matches them.
pub(crate) fn rules_allow(rules: &[Rule], group: &str, resource: &str, verb: &str) -> bool {
    rules.iter().any(|r| {
        r.api_groups.iter().any(|g| g == group || g == "*")
            && r.resources.iter().any(|x| x == resource || x == "*")
            && r.verbs.iter().any(|v| v == verb || v == "*")
    })
}

/// Whether some rule could grant `verb` in `group` before the kind is
/// resolved (see [`Manifest::may_allow`]).
pub(crate) fn rules_may_allow(rules: &[Rule], group: &str, sub: Option<&str>, verb: &str) -> bool {
    rules.iter().any(|r| {
        r.api_groups.iter().any(|g| g == group || g == "*")
            && r.verbs.iter().any(|v| v == verb || v == "*")
            && r.resources.iter().any(|x| {
                x == "*"
                    || match (sub, x.split_once('/')) {
                        (None, None) => true,
                        (Some(s), Some((_, xs))) => xs == s || xs == "*",
                        _ => false,
                    }
            })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Manifest, ManifestError> {
        Manifest::parse(text, Path::new("/plugins/x.toml"))
    }

    const BASE: &str = "[plugin]\nkind = \"reconciler\"\ncontract = \"0.1.0\"\n[reconciles]\napi-version = \"v1\"\nkind = \"ConfigMap\"\n";

    #[test]
    fn a_field_selector_is_parsed_and_a_bad_one_names_the_field() {
        let m = parse(&format!(
            "{BASE}field-selector = \"spec.nodeName=,status.phase!=Failed\"\n"
        ))
        .unwrap();
        let r = m.reconciles.unwrap();
        assert_eq!(
            r.field_selector.as_deref(),
            Some("spec.nodeName=,status.phase!=Failed")
        );
        let e = parse(&format!("{BASE}field-selector = \"spec.nodeName\"\n")).unwrap_err();
        assert_eq!(e.field, "reconciles.field-selector", "{e}");
    }

    #[test]
    fn bindings_in_flight_add_workers_and_are_bounded() {
        let m = parse(&format!("{BASE}[limits]\nbindings-in-flight = 8\n")).unwrap();
        assert_eq!(m.limits.workers(), 9);
        let e = parse(&format!("{BASE}[limits]\nbindings-in-flight = 65\n")).unwrap_err();
        assert_eq!(e.field, "limits.bindings-in-flight", "{e}");
        let e = parse(&format!(
            "{BASE}expectations = \"plugin\"\n[limits]\nbindings-in-flight = 1\n"
        ))
        .unwrap_err();
        assert!(e.to_string().contains("expectations"), "{e}");
    }

    #[test]
    fn crd_paths_stay_inside_the_plugin_directory() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("ok.yaml"), "").unwrap();
        let path = dir.path().join("x.toml");
        for bad in ["/etc/passwd", "../x.yaml", "sub/../../x.yaml", ""] {
            let e = Manifest::parse(&format!("crds = [\"ok.yaml\", {bad:?}]\n{BASE}"), &path)
                .unwrap_err();
            assert_eq!(e.field, "crds[1]", "{bad}: {e}");
            assert!(e.to_string().contains(&format!("\"{bad}\"")), "{e}");
        }
        let m = Manifest::parse(
            &format!("crds = [\"ok.yaml\", \"./ok.yaml\"]\n{BASE}"),
            &path,
        )
        .unwrap();
        assert_eq!(m.crds.len(), 2);
    }

    #[test]
    fn a_record_section_has_defaults_and_checked_fields() {
        assert_eq!(parse(BASE).unwrap().record, None);
        let m = parse(&format!("{BASE}[record]\n")).unwrap();
        assert_eq!(m.record, Some(Record::default()));
        let m = parse(&format!(
            "{BASE}[record]\nmax-file-mib = 2\nsensitive-http-hosts = [\"vault.example.com\"]\n"
        ))
        .unwrap();
        let r = m.record.unwrap();
        assert_eq!((r.max_file_mib, r.max_files), (2, 3));
        assert_eq!(r.sensitive_http_hosts, ["vault.example.com"]);
        let e = parse(&format!("{BASE}[record]\nmax-file-mib = 0\n")).unwrap_err();
        assert_eq!(e.field, "record.max-file-mib");
        let e = parse(&format!("{BASE}[record]\nsecrets = true\n")).unwrap_err();
        assert!(e.to_string().contains("unknown field `secrets`"), "{e}");
    }

    #[test]
    fn minimal_reconciler_gets_defaults() {
        let m = parse(BASE).unwrap();
        assert_eq!(m.limits.concurrency, 1);
        assert_eq!(m.plugin.kind, PluginKind::Reconciler);
        assert!(!m.allows("", "secrets", "list"));
    }

    #[test]
    fn a_selector_map_names_the_selector_path() {
        let m = parse(&format!(
            "{BASE}[[watches]]\napi-version = \"v1\"\nkind = \"Pod\"\nmap = \"selector:spec.selector\"\n"
        ))
        .unwrap();
        assert_eq!(m.watches[0].1, MapFn::Selector("spec.selector".into()));
        assert!(
            parse(&format!(
                "{BASE}[[watches]]\napi-version = \"v1\"\nkind = \"Pod\"\nmap = \"selector:\"\n"
            ))
            .is_err()
        );
    }

    #[test]
    fn a_waiting_map_takes_no_argument() {
        let m = parse(&format!(
            "{BASE}[[watches]]\napi-version = \"v1\"\nkind = \"Node\"\nmap = \"waiting\"\n"
        ))
        .unwrap();
        assert_eq!(m.watches[0].1, MapFn::Waiting);
        assert!(
            parse(&format!(
                "{BASE}[[watches]]\napi-version = \"v1\"\nkind = \"Node\"\nmap = \"waiting:x\"\n"
            ))
            .is_err()
        );
    }

    #[test]
    fn errors_name_file_and_field() {
        let e = parse(&format!(
            "{BASE}[[watches]]\napi-version = \"v1\"\nkind = \"Pod\"\nmap = \"nope\"\n"
        ))
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "/plugins/x.toml: watches[0].map: \"nope\": expected \"label:KEY\", \"annotation:KEY\", \"field:PATH\", \"selector:PATH\" or \"waiting\""
        );
        let e = parse(&BASE.replace("0.1.0", "0.2.0")).unwrap_err();
        assert!(
            e.to_string()
                .contains("plugin.contract: the plugin wants wasmlet:plugin@0.2.0"),
            "{e}"
        );
        let e = parse(&format!("{BASE}[limits]\nmemory-mb = 3\n")).unwrap_err();
        assert!(e.to_string().contains("unknown field `memory-mb`"), "{e}");
        let e = parse(&format!("{BASE}[permissions]\nrules = [{{ api-groups = [\"\"], resources = [\"pods\"], verbs = [\"read\"] }}]\n")).unwrap_err();
        assert!(
            e.to_string()
                .contains("permissions.rules[0].verbs[0]: unknown verb \"read\""),
            "{e}"
        );
    }

    #[test]
    fn permissions_match_like_rbac() {
        let m = parse(&format!(
            "{BASE}[permissions]\nrules = [{{ api-groups = [\"\"], resources = [\"configmaps\", \"pods/status\"], verbs = [\"get\", \"patch\"] }}]\nhttp-hosts = [\"*.example.com\", \"api.test:8443\"]\n"
        ))
        .unwrap();
        assert!(m.allows("", "configmaps", "get"));
        assert!(m.allows("", "pods/status", "patch"));
        assert!(!m.allows("", "pods", "patch"));
        assert!(!m.allows("apps", "configmaps", "get"));
        assert!(m.allows_http_host("a.example.com", Some(443)));
        assert!(!m.allows_http_host("example.com", Some(443)));
        assert!(m.allows_http_host("api.test", Some(8443)));
        assert!(!m.allows_http_host("api.test", Some(443)));
    }

    #[test]
    fn an_http_host_whose_port_or_host_does_not_parse_is_refused() {
        let with = |hosts: &str| parse(&format!("{BASE}[permissions]\nhttp-hosts = {hosts}\n"));
        for (bad, says) in [
            ("name:abc", "port \"abc\""),
            ("name:0", "port \"0\""),
            ("name:65536", "port \"65536\""),
            ("name:", "port \"\""),
            (":8443", "the host is empty"),
            ("*.:443", "the host is empty"),
            ("", "the host is empty"),
            ("a/b", "is not a host name"),
            ("a.*.com", "is not a host name"),
            ("::1", "in brackets"),
            ("[::1", "closing"),
            ("[]:80", "the host is empty"),
            ("[::1]8080", "after the"),
        ] {
            let e = with(&format!("[\"ok.example.com\", {bad:?}]")).unwrap_err();
            assert_eq!(e.field, "permissions.http-hosts[1]", "{bad}: {e}");
            assert!(e.message.contains(says), "{bad}: {e}");
            assert!(e.message.contains(&format!("\"{bad}\"")), "{bad}: {e}");
        }
        let m =
            with("[\"api.test:8443\", \"[::1]:9000\", \"[2001:db8::1]\", \"10.0.0.1\"]").unwrap();
        assert!(m.allows_http_host("api.test", Some(8443)));
        assert!(!m.allows_http_host("api.test", Some(80)));
        assert!(m.allows_http_host("[::1]", Some(9000)));
        assert!(!m.allows_http_host("[::1]", Some(9001)));
        assert!(m.allows_http_host("[2001:db8::1]", Some(443)));
        assert!(m.allows_http_host("10.0.0.1", Some(443)));
    }

    #[test]
    fn an_unparsed_http_host_entry_allows_no_port() {
        // A manifest built without `parse` (as the old parser let through).
        let mut m = parse(BASE).unwrap();
        m.permissions.http_hosts = vec!["name:abc".into()];
        assert!(!m.allows_http_host("name", Some(443)));
        assert!(!m.allows_http_host("name", Some(1)));
    }

    const TABLE: &str = "[plugin]\nkind = \"reconciler\"\ncontract = \"0.1.0\"\n[reconciles]\nsource = \"postgres\"\n";

    #[test]
    fn a_table_reconciler_names_a_checked_table() {
        let m = parse(&format!("{TABLE}table = \"projects\"\n")).unwrap();
        let r = m.reconciles.unwrap();
        assert!(r.is_table());
        assert_eq!(r.table.as_deref(), Some("projects"));
        let e = parse(TABLE).unwrap_err();
        assert_eq!(e.field, "reconciles.table", "{e}");
        // An abusive name never reaches SQL: the manifest is refused.
        for bad in ["x; DROP TABLE users", "x\\\" --", "Projects", "pg_authid"] {
            let e = parse(&format!("{TABLE}table = \"{bad}\"\n")).unwrap_err();
            assert_eq!(e.field, "reconciles.table", "{bad}: {e}");
            assert!(e.message.starts_with("table name "), "{e}");
        }
        let e = parse(&format!("{BASE}table = \"projects\"\n")).unwrap_err();
        assert_eq!(e.field, "reconciles.table", "{e}");
        let e = parse(&format!("{TABLE}table = \"t\"\nlabel-selector = \"a=b\"\n")).unwrap_err();
        assert_eq!(e.field, "reconciles.label-selector", "{e}");
        let e = parse(&format!("{TABLE}table = \"t\"\nfield-selector = \"a=b\"\n")).unwrap_err();
        assert_eq!(e.field, "reconciles.field-selector", "{e}");
        let e = parse(&format!(
            "{TABLE}table = \"t\"\n[[owns]]\napi-version = \"v1\"\nkind = \"Pod\"\n"
        ))
        .unwrap_err();
        assert_eq!(e.field, "owns", "{e}");
        assert!(e.message.contains("source = \"postgres\""), "{e}");
    }

    #[test]
    fn a_table_reconciler_may_name_a_finalizer() {
        // Kept in the row's `finalizers` column, as on a custom resource.
        let m = parse(&format!("finalizer = \"x.io/f\"\n{TABLE}table = \"t\"\n")).unwrap();
        assert_eq!(m.finalizer.as_deref(), Some("x.io/f"));
        // Checked as for a kind: a qualified name.
        let e = parse(&format!("finalizer = \"cleanup\"\n{TABLE}table = \"t\"\n")).unwrap_err();
        assert_eq!(e.field, "finalizer", "{e}");
    }

    #[test]
    fn cluster_tables_grant_rules_per_named_cluster() {
        let m = parse(&format!(
            "{BASE}[clusters.eu-west]\nrules = [{{ api-groups = [\"x.io\"], resources = [\"things\"], verbs = [\"get\"] }}]\n\
             [clusters.\"*\"]\nrules = [{{ api-groups = [\"x.io\"], resources = [\"things\"], verbs = [\"patch\"] }}]\n"
        ))
        .unwrap();
        let eu = m.cluster_rules("eu-west").unwrap();
        assert!(rules_allow(eu, "x.io", "things", "get"));
        // A cluster's own table replaces `*`, it does not add to it.
        assert!(!rules_allow(eu, "x.io", "things", "patch"));
        let other = m.cluster_rules("us-east").unwrap();
        assert!(rules_allow(other, "x.io", "things", "patch"));
        // The host's own cluster keeps `[permissions]` only.
        assert!(!m.allows("x.io", "things", "get"));
        assert!(parse(BASE).unwrap().cluster_rules("eu-west").is_none());

        let e = parse(&format!(
            "{BASE}[clusters.eu-west]\nrules = [{{ api-groups = [\"\"], resources = [\"pods\"], verbs = [\"read\"] }}]\n"
        ))
        .unwrap_err();
        assert_eq!(e.field, "clusters.eu-west.rules[0].verbs[0]", "{e}");
        let e = parse(&format!("{BASE}[clusters.EU]\nrules = []\n")).unwrap_err();
        assert_eq!(e.field, "clusters.EU", "{e}");
        let e = parse(&format!("{BASE}[clusters.eu]\npermissions = []\n")).unwrap_err();
        assert!(e.to_string().contains("unknown field `permissions`"), "{e}");
    }

    #[test]
    fn owns_and_watches_say_which_changes_requeue() {
        let m = parse(&format!(
            "{BASE}[[owns]]\napi-version = \"apps/v1\"\nkind = \"StatefulSet\"\nchanges = \"generation\"\n\
             [[owns]]\napi-version = \"v1\"\nkind = \"Service\"\n\
             [[watches]]\napi-version = \"v1\"\nkind = \"Pod\"\nmap = \"label:x.io/a\"\nchanges = \"none\"\n"
        ))
        .unwrap();
        assert_eq!(m.owns[0].changes, Changes::Generation);
        assert_eq!(m.owns[1].changes, Changes::All, "the default");
        assert_eq!(m.watches[0].0.changes, Changes::None);
        let e = parse(&format!(
            "{BASE}[[owns]]\napi-version = \"v1\"\nkind = \"Pod\"\nchanges = \"status\"\n"
        ))
        .unwrap_err();
        assert!(
            e.to_string()
                .contains("unknown variant `status`, expected one of `all`, `generation`, `none`"),
            "{e}"
        );
    }

    #[test]
    fn watches_may_name_a_cluster_the_manifest_reaches() {
        let w =
            "[[watches]]\napi-version = \"x.io/v1\"\nkind = \"Thing\"\nmap = \"label:x.io/row\"\n";
        let grants = "[clusters.\"*\"]\nrules = []\n";
        let m = parse(&format!(
            "{TABLE}table = \"t\"\n{w}cluster = \"*\"\n{grants}"
        ))
        .unwrap();
        assert_eq!(m.watches[0].0.cluster.as_deref(), Some("*"));
        assert_eq!(m.watches[0].1, MapFn::Label("x.io/row".into()));
        // Kubernetes-sourced reconcilers too.
        let m = parse(&format!("{BASE}{w}cluster = \"eu-west\"\n{grants}")).unwrap();
        assert_eq!(m.watches[0].0.cluster.as_deref(), Some("eu-west"));
        // A cluster the manifest grants nothing in is named in the error.
        let e = parse(&format!("{TABLE}table = \"t\"\n{w}cluster = \"eu-west\"\n")).unwrap_err();
        assert_eq!(e.field, "watches[0].cluster", "{e}");
        assert!(e.message.contains("cluster \"eu-west\""), "{e}");
        let e = parse(&format!(
            "{TABLE}table = \"t\"\n{w}cluster = \"EU\"\n{grants}"
        ))
        .unwrap_err();
        assert_eq!(e.field, "watches[0].cluster", "{e}");
        // Rows have no labels for a selector to match.
        let e = parse(&format!(
            "{TABLE}table = \"t\"\n[[watches]]\napi-version = \"v1\"\nkind = \"Pod\"\nmap = \"selector:spec.selector\"\n"
        ))
        .unwrap_err();
        assert_eq!(e.field, "watches[0].map", "{e}");
    }

    #[test]
    fn cluster_tables_may_ship_crds_beside_the_manifest() {
        let m = Manifest::parse_detached(
            &format!("{TABLE}table = \"t\"\n[clusters.\"*\"]\nrules = []\ncrds = [\"regional.crd.yaml\"]\n"),
            Path::new("/plugins/p.toml"),
        )
        .unwrap();
        assert_eq!(
            m.clusters["*"].crds,
            [Path::new("/plugins/regional.crd.yaml")]
        );
        let e = parse(&format!(
            "{TABLE}table = \"t\"\n[clusters.eu-west]\ncrds = [\"../x.yaml\"]\n"
        ))
        .unwrap_err();
        assert_eq!(e.field, "clusters.eu-west.crds[0]", "{e}");
    }
}
