//! `wasmlet plugin check` and `wasmlet plugin crds`.

use std::path::{Path, PathBuf};

use anyhow::Result;

use crate::plugin::engine::PluginEngine;
use crate::plugin::manifest::PluginKind;
use crate::plugin::{Manifest, PluginSet};

/// Validates a plugin and prints what it will do as YAML comments, then the
/// ClusterRole it needs on a real cluster, so the output pipes into
/// `kubectl apply -f -`.
pub(super) async fn plugin_check(path: &Path) -> Result<()> {
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
        let fields = r
            .field_selector
            .as_deref()
            .map(|s| format!(" with fields {s}"))
            .unwrap_or_default();
        match &r.table {
            Some(table) if r.is_table() => {
                say!("  reconciles: rows of PostgreSQL table {table} (the host's --datastore-url)")
            }
            _ => say!(
                "  reconciles: {} {}{scope}{sel}{fields}",
                r.api_version,
                r.kind
            ),
        }
    }
    say!(
        "  conditions: {}",
        if loaded.declared_conditions.is_empty() {
            "(none)".into()
        } else {
            loaded.declared_conditions.join(", ")
        }
    );
    use crate::plugin::manifest::Changes;
    let requeues = |c: Changes| match c {
        Changes::All => "",
        Changes::Generation => " (creation, deletion, new generations only)",
        Changes::None => " (cached for reads, requeues nothing)",
    };
    for o in &manifest.owns {
        let why = match o.changes {
            Changes::All => " (changes requeue the owner)",
            c => requeues(c),
        };
        say!("  owns: {} {}{why}", o.api_version, o.kind);
    }
    for (w, _) in &manifest.watches {
        let in_cluster = match w.cluster.as_deref() {
            Some(crate::plugin::manifest::clusters::ANY) => " in every named cluster".to_string(),
            Some(c) => format!(" in cluster {c}"),
            None => String::new(),
        };
        say!(
            "  watches: {} {}{in_cluster} -> {}{}",
            w.api_version,
            w.kind,
            w.map,
            requeues(w.changes)
        );
    }
    if let Some(f) = &manifest.finalizer {
        say!("  finalizer: {f}");
    }
    if manifest.permissions.rules.is_empty() {
        say!("  may call: nothing beyond its own object's status");
    }
    for r in &manifest.permissions.rules {
        say!("  may call: {}", rule_text(r));
    }
    for (cluster, c) in &manifest.clusters {
        let which = if cluster == crate::plugin::manifest::clusters::ANY {
            "any named cluster not listed here".to_string()
        } else {
            format!("cluster {cluster}")
        };
        if c.rules.is_empty() {
            say!("  in {which} (--cluster): nothing");
        }
        for r in &c.rules {
            say!("  in {which} (--cluster): may call {}", rule_text(r));
        }
        for f in &c.crds {
            say!("  in {which} (--cluster): applies CRD file {}", f.display());
        }
    }
    for h in &manifest.permissions.http_hosts {
        say!("  may reach: https://{h}");
    }
    for c in &manifest.crds {
        say!("  ships CRD file: {}", c.display());
        let Some(r) = manifest.reconciles.as_ref().filter(|r| !r.is_table()) else {
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

pub(super) fn plugin_crds(path: &Path) -> Result<()> {
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

/// `wasmlet plugin rbac PATH...`: for each plugin (a plugin file, or every
/// plugin of a directory) its ClusterRole and a ClusterRoleBinding of it to
/// the host's ServiceAccount, as YAML for `kubectl apply -f -` or a kustomize
/// base. Stable output (sorted by name), so a checked-in copy can be compared.
/// With `cluster`: the roles for that named cluster instead (plugins granted
/// nothing there are left out).
pub(super) fn plugin_rbac(
    paths: &[PathBuf],
    service_account: &str,
    cluster: Option<&str>,
) -> Result<()> {
    let (namespace, account) = service_account.split_once('/').ok_or_else(|| {
        anyhow::anyhow!("--service-account {service_account:?}: expected NAMESPACE/NAME")
    })?;
    let mut manifests = std::collections::BTreeMap::new();
    for path in paths {
        if path.is_dir() {
            let mut entries: Vec<PathBuf> = std::fs::read_dir(path)?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "wasm"))
                .collect();
            entries.sort();
            for wasm in entries {
                let (_, toml) = plugin_paths(&wasm);
                if toml.exists() {
                    manifests.insert(plugin_name(&wasm), toml);
                }
            }
        } else {
            let (wasm, toml) = plugin_paths(path);
            manifests.insert(plugin_name(&wasm), toml);
        }
    }
    for (name, toml) in manifests {
        let manifest = Manifest::load(&toml)?;
        let mut crds = vec![];
        for c in &manifest.crds {
            crds.extend(crate::plugin::set::read_yaml_documents(c)?);
        }
        let role_name = format!("wasmlet-plugin-{name}");
        let role = match cluster {
            None => crate::plugin::clusterrole::cluster_role(&role_name, &manifest, &crds),
            Some(c) => {
                let mut crds = vec![];
                let table = crate::plugin::manifest::clusters::table_for(&manifest.clusters, c);
                for f in table.map(|t| t.crds.as_slice()).unwrap_or_default() {
                    crds.extend(crate::plugin::set::read_yaml_documents(f)?);
                }
                match crate::plugin::clusterrole::named_cluster_role(
                    &role_name, &manifest, c, &crds,
                ) {
                    Some(role) => role,
                    None => continue,
                }
            }
        };
        let binding = serde_json::json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": role_name, "labels": {"app.kubernetes.io/managed-by": "wasmlet"}},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role_name},
            "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": namespace}],
        });
        print!(
            "---\n{}---\n{}",
            serde_yaml::to_string(&role)?,
            serde_yaml::to_string(&binding)?
        );
    }
    Ok(())
}

fn plugin_name(wasm: &Path) -> String {
    wasm.file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or("plugin")
        .to_string()
}

/// `wasmlet plugin graph PATH`: a provider's declared state graph as
/// Graphviz DOT (`| dot -Tsvg > graph.svg`).
pub(super) async fn plugin_graph(path: &Path) -> Result<()> {
    let (wasm, toml) = plugin_paths(path);
    let manifest = Manifest::load(&toml)?;
    if manifest.plugin.kind != PluginKind::Provider {
        anyhow::bail!(
            "{}: a {:?}, not a provider: only providers declare a state graph",
            toml.display(),
            manifest.plugin.kind
        );
    }
    let tmp = tempfile::Builder::new()
        .prefix("wasmlet-graph-")
        .tempdir()?;
    let engine = PluginEngine::new(tmp.path())?;
    let name = plugin_name(&wasm);
    let dir = wasm.parent().unwrap_or(Path::new("."));
    let loaded = PluginSet::new(engine, dir, None)
        .load_version(&name, &wasm, &toml)
        .await?;
    let graph = loaded
        .graph
        .as_ref()
        .ok_or_else(|| anyhow::anyhow!("{name}: the provider declared no graph"))?;
    print!("{}", graph.to_dot(&name));
    Ok(())
}

/// `VERBS on RESOURCES (GROUPS)`, as `plugin check` prints a rule.
fn rule_text(r: &crate::plugin::manifest::Rule) -> String {
    let groups: Vec<&str> = r
        .api_groups
        .iter()
        .map(|g| if g.is_empty() { "core" } else { g.as_str() })
        .collect();
    format!(
        "{} on {} ({})",
        r.verbs.join(","),
        r.resources.join(","),
        groups.join(",")
    )
}
