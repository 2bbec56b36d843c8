//! The RBAC a plugin needs on a real cluster, as a ClusterRole: what the
//! host does for it (read and watch the reconciled, owned and watched kinds;
//! patch the reconciled object's status; set its finalizer; record events)
//! plus the manifest's `[permissions] rules`. `wasmlet plugin check` prints
//! it so an operator can grant exactly that to the host's identity.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::manifest::{Manifest, Rule};

/// `group` and `version` of an `apiVersion`.
fn split(api_version: &str) -> (&str, &str) {
    api_version.split_once('/').unwrap_or(("", api_version))
}

/// The resource (plural) of `kind` in `group`: from the CRDs the plugin
/// ships, else upstream's guess from the kind (`meta.UnsafeGuessKindToResource`,
/// right for every built-in kind the host uses).
pub(crate) fn resource_of(group: &str, kind: &str, crds: &[Value]) -> String {
    for crd in crds {
        if crd["spec"]["group"] == group
            && crd["spec"]["names"]["kind"] == kind
            && let Some(p) = crd["spec"]["names"]["plural"].as_str()
        {
            return p.to_string();
        }
    }
    let lower = kind.to_lowercase();
    if lower.ends_with('s') {
        format!("{lower}es")
    } else if let Some(stem) = lower.strip_suffix('y')
        && !stem.ends_with(['a', 'e', 'i', 'o', 'u'])
    {
        format!("{stem}ies")
    } else {
        format!("{lower}s")
    }
}

/// Collects rules keyed by (group, resources) so each verb set prints once.
#[derive(Default)]
struct Rules(BTreeMap<(String, String), Vec<String>>);

impl Rules {
    fn add(&mut self, group: &str, resource: &str, verbs: &[&str]) {
        let v = self
            .0
            .entry((group.to_string(), resource.to_string()))
            .or_default();
        for verb in verbs {
            if !v.iter().any(|x| x == verb) {
                v.push(verb.to_string());
            }
        }
    }

    fn into_json(self) -> Vec<Value> {
        // Merge resources of one group that need the same verbs.
        let mut merged: BTreeMap<(String, Vec<String>), Vec<String>> = BTreeMap::new();
        for ((group, resource), mut verbs) in self.0 {
            verbs.sort();
            merged.entry((group, verbs)).or_default().push(resource);
        }
        merged
            .into_iter()
            .map(|((group, verbs), resources)| {
                json!({"apiGroups": [group], "resources": resources, "verbs": verbs})
            })
            .collect()
    }
}

/// The ClusterRole `name` granting what `manifest` needs; `crds` are the
/// CRDs it ships (for their plural names).
pub(crate) fn cluster_role(name: &str, manifest: &Manifest, crds: &[Value]) -> Value {
    let mut rules = Rules::default();
    let read = ["get", "list", "watch"];
    // A table reconciler's objects are rows: no Kubernetes rights for them.
    if let Some(r) = manifest.reconciles.as_ref().filter(|r| !r.is_table()) {
        let (group, _) = split(&r.api_version);
        let res = resource_of(group, &r.kind, crds);
        rules.add(group, &res, &read);
        rules.add(group, &format!("{res}/status"), &["get", "patch", "update"]);
        if manifest.finalizer.is_some() {
            // The host sets and removes its finalizer with a patch.
            rules.add(group, &res, &["patch", "update"]);
            rules.add(group, &format!("{res}/finalizers"), &["update"]);
        }
        if !manifest.owns.is_empty() {
            // Owned objects block their owner's deletion: upstream requires
            // update on the owner's finalizers to set blockOwnerDeletion.
            rules.add(group, &format!("{res}/finalizers"), &["update"]);
        }
    }
    for o in &manifest.owns {
        let (group, _) = split(&o.api_version);
        rules.add(group, &resource_of(group, &o.kind, crds), &read);
    }
    // Watches of a named cluster are granted there (`named_cluster_role`).
    for (w, _) in manifest.watches.iter().filter(|(w, _)| w.cluster.is_none()) {
        let (group, _) = split(&w.api_version);
        rules.add(group, &resource_of(group, &w.kind, crds), &read);
    }
    add_manifest_rules(&mut rules, &manifest.permissions.rules);
    // Events the host records for the plugin (kube's recorder creates and
    // then patches a series).
    rules.add("events.k8s.io", "events", &["create", "patch"]);
    json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/managed-by": "wasmlet"}},
        "rules": rules.into_json(),
    })
}

/// What the manifest's rules grant, as RBAC rules.
fn add_manifest_rules(rules: &mut Rules, granted: &[Rule]) {
    for r in granted {
        for group in &r.api_groups {
            for res in &r.resources {
                for verb in &r.verbs {
                    // The manifest's `evict` is the eviction subresource.
                    if verb == "evict" {
                        rules.add(group, &format!("{res}/eviction"), &["create"]);
                    } else {
                        rules.add(group, res, &[verb.as_str()]);
                    }
                }
            }
        }
    }
}

/// The ClusterRole `name` granting what `manifest` needs in its named
/// cluster `cluster` (`None` when the manifest reaches nothing there): the
/// `[clusters.NAME]` (else `[clusters."*"]`) rules, plus `list` and `watch`
/// wherever they read, as the host's caches there start a watch on a kind's
/// first read; reads of the kinds its `[[watches]]` watch there; and, when
/// that table ships `crds`, applying CRDs (the host does it at load). No
/// host-owned writes: the host reconciles nothing in a named cluster and
/// records events only in its own. `crds`: the documents of the table's CRD
/// files (for their plural names).
pub(crate) fn named_cluster_role(
    name: &str,
    manifest: &Manifest,
    cluster: &str,
    crds: &[Value],
) -> Option<Value> {
    let table = super::manifest::clusters::table_for(&manifest.clusters, cluster)?;
    let granted = &table.rules;
    let mut rules = Rules::default();
    add_manifest_rules(&mut rules, granted);
    for r in granted {
        if r.verbs
            .iter()
            .any(|v| v == "get" || v == "list" || v == "*")
        {
            for group in &r.api_groups {
                for res in r.resources.iter().filter(|res| !res.contains('/')) {
                    rules.add(group, res, &["list", "watch"]);
                }
            }
        }
    }
    let watched = manifest.watches.iter().filter(|(w, _)| {
        w.cluster
            .as_deref()
            .is_some_and(|c| super::manifest::clusters::covers(c, cluster))
    });
    for (w, _) in watched {
        let (group, _) = split(&w.api_version);
        rules.add(
            group,
            &resource_of(group, &w.kind, crds),
            &["get", "list", "watch"],
        );
    }
    if !table.crds.is_empty() {
        rules.add(
            "apiextensions.k8s.io",
            "customresourcedefinitions",
            &["create", "get", "patch"],
        );
    }
    Some(json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/managed-by": "wasmlet"}},
        "rules": rules.into_json(),
    }))
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    #[test]
    fn guesses_plurals_as_upstream() {
        assert_eq!(resource_of("", "ConfigMap", &[]), "configmaps");
        assert_eq!(resource_of("", "Ingress", &[]), "ingresses");
        assert_eq!(resource_of("x", "Policy", &[]), "policies");
        assert_eq!(resource_of("x", "Gateway", &[]), "gateways");
        let crd = json!({"spec": {"group": "x", "names": {"kind": "Mouse", "plural": "mice"}}});
        assert_eq!(resource_of("x", "Mouse", &[crd]), "mice");
    }

    #[test]
    fn grants_what_the_host_does_for_the_plugin() {
        let m = Manifest::parse(
            r#"
finalizer = "x.io/cleanup"
[plugin]
kind = "reconciler"
contract = "0.1.0"
[reconciles]
api-version = "x.io/v1"
kind = "Widget"
[[owns]]
api-version = "v1"
kind = "ConfigMap"
[permissions]
rules = [{ api-groups = [""], resources = ["configmaps"], verbs = ["create"] },
         { api-groups = [""], resources = ["pods"], verbs = ["evict"] }]
"#,
            Path::new("w.toml"),
        )
        .unwrap();
        let role = cluster_role("wasmlet-plugin-w", &m, &[]);
        let rules = role["rules"].as_array().unwrap();
        let verbs_of = |group: &str, res: &str| -> Vec<String> {
            let mut v: Vec<String> = rules
                .iter()
                .filter(|r| r["apiGroups"][0] == group)
                .filter(|r| r["resources"].as_array().unwrap().iter().any(|x| x == res))
                .flat_map(|r| r["verbs"].as_array().unwrap().clone())
                .map(|v| v.as_str().unwrap().to_string())
                .collect();
            v.sort();
            v
        };
        assert_eq!(
            verbs_of("x.io", "widgets"),
            ["get", "list", "patch", "update", "watch"]
        );
        assert_eq!(
            verbs_of("x.io", "widgets/status"),
            ["get", "patch", "update"]
        );
        assert_eq!(verbs_of("x.io", "widgets/finalizers"), ["update"]);
        assert_eq!(
            verbs_of("", "configmaps"),
            ["create", "get", "list", "watch"]
        );
        assert_eq!(verbs_of("", "pods/eviction"), ["create"]);
        assert_eq!(verbs_of("events.k8s.io", "events"), ["create", "patch"]);
    }

    #[test]
    fn a_named_cluster_role_grants_the_cluster_rules_and_the_watches_of_reads() {
        let m = Manifest::parse_detached(
            r#"
[plugin]
kind = "reconciler"
contract = "0.1.0"
[reconciles]
source = "postgres"
table = "projects"
[clusters.eu-west]
rules = [{ api-groups = ["x.io"], resources = ["things"], verbs = ["get", "patch"] }]
crds = ["things.yaml"]
[clusters."*"]
rules = []
[[watches]]
cluster = "*"
api-version = "y.io/v1"
kind = "Status"
map = "label:x.io/project"
"#,
            Path::new("p.toml"),
        )
        .unwrap();
        let role = named_cluster_role("wasmlet-plugin-p", &m, "eu-west", &[]).unwrap();
        assert_eq!(
            role["rules"],
            json!([
                {"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"], "verbs": ["create", "get", "patch"]},
                {"apiGroups": ["x.io"], "resources": ["things"], "verbs": ["get", "list", "patch", "watch"]},
                {"apiGroups": ["y.io"], "resources": ["statuses"], "verbs": ["get", "list", "watch"]},
            ])
        );
        // The host's own cluster is not granted the regional watch.
        let own = cluster_role("wasmlet-plugin-p", &m, &[]);
        assert!(!own.to_string().contains("statuses"), "{own}");
        // Another region: the `*` table (no rules), and the watch.
        let role = named_cluster_role("wasmlet-plugin-p", &m, "us-east", &[]).unwrap();
        assert_eq!(
            role["rules"],
            json!([{"apiGroups": ["y.io"], "resources": ["statuses"], "verbs": ["get", "list", "watch"]}])
        );
        let m = Manifest::parse(
            "[plugin]\nkind = \"reconciler\"\ncontract = \"0.1.0\"\n[reconciles]\nsource = \"postgres\"\ntable = \"t\"\n[clusters.eu-west]\n",
            Path::new("p.toml"),
        )
        .unwrap();
        assert!(named_cluster_role("r", &m, "us-east", &[]).is_none());
    }
}
