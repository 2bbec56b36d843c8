//! Which resources the server serves: the built-in table and whatever the stored
//! CustomResourceDefinitions declare. Discovery, OpenAPI and request routing all
//! read from here, so a CRD is served the moment it is stored.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use wasmlet_apimachinery::schema::Structural;

/// Where the scale subresource finds replicas and the selector.
#[derive(Debug, Clone)]
pub(crate) struct ScaleSpec {
    pub(crate) spec_replicas: String,
    pub(crate) status_replicas: String,
    pub(crate) label_selector: Option<String>,
}

/// Extra subresources beyond status and scale, each with a handler of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Extra {
    Binding,
    Eviction,
    Log,
    Finalize,
    /// `serviceaccounts/token`: TokenRequest.
    Token,
    /// `certificatesigningrequests/approval`: the Approved or Denied condition.
    Approval,
    /// `pods/exec` and `pods/attach`: upgraded connections to the node's kubelet.
    Exec,
    Attach,
}

#[derive(Debug, Clone)]
pub(crate) struct PrinterColumn {
    pub(crate) name: String,
    pub(crate) type_: String,
    /// The column's Kubernetes JSONPath (`.status.conditions[?(@.type=="Ready")].status`),
    /// parsed once; `None` when it does not parse (the cell stays empty).
    pub(crate) json_path: Option<serde_json_path::JsonPath>,
    pub(crate) priority: i64,
}

impl PrinterColumn {
    /// Parses a column's Kubernetes JSONPath (`.status.x`, which the CRD's
    /// validation requires to start with `.`). Upstream's dialect has no
    /// leading `$`; what printer columns use (fields, indexes, wildcards,
    /// `?(@.type=="Ready")` filters) reads the same in RFC 9535 with one.
    pub(crate) fn parse_path(path: &str) -> Option<serde_json_path::JsonPath> {
        if Self::nesting(path) > Self::MAX_NESTING {
            return None;
        }
        serde_json_path::JsonPath::parse(&format!("${path}")).ok()
    }

    /// Brackets and parentheses a column path may nest. The parser recurses
    /// once per level: a path a thousand levels deep overflowed a worker's
    /// stack and aborted the whole plane. Real columns nest two or three.
    pub(crate) const MAX_NESTING: usize = 32;

    /// How deep `path`'s brackets and parentheses nest (counted inside
    /// quoted names too: that only overestimates).
    pub(crate) fn nesting(path: &str) -> usize {
        let (mut depth, mut max) = (0usize, 0usize);
        for c in path.chars() {
            match c {
                '(' | '[' => {
                    depth += 1;
                    max = max.max(depth);
                }
                ')' | ']' => depth = depth.saturating_sub(1),
                _ => {}
            }
        }
        max
    }

    /// The cell's value in `obj`: the path's first match, as upstream's table
    /// convertor takes it.
    pub(crate) fn value<'a>(&self, obj: &'a serde_json::Value) -> Option<&'a serde_json::Value> {
        self.json_path.as_ref()?.query(obj).first()
    }
}

#[derive(Debug, Clone)]
pub struct ResourceType {
    pub(crate) group: String,
    /// Served versions, preferred (storage) first.
    pub(crate) versions: Vec<String>,
    pub(crate) resource: String,
    pub(crate) singular: String,
    pub(crate) kind: String,
    pub(crate) namespaced: bool,
    pub(crate) short_names: Vec<String>,
    pub(crate) categories: Vec<String>,
    pub(crate) status: bool,
    pub(crate) scale: Option<ScaleSpec>,
    pub(crate) extras: Vec<Extra>,
    /// Built-in kinds accept strategic merge patch; custom resources do not.
    pub(crate) builtin: bool,
    /// Per served version, for custom resources.
    pub(crate) schemas: BTreeMap<String, Arc<Structural>>,
    /// The `openAPIV3Schema` per version as written, for OpenAPI documents.
    pub(crate) openapi: BTreeMap<String, serde_json::Value>,
    /// Per served version of a custom resource, its compiled
    /// `x-kubernetes-validations` (versions without rules are absent).
    pub(crate) cel: BTreeMap<String, Arc<crate::cel_rules::Rules>>,
    pub(crate) printer_columns: Vec<PrinterColumn>,
    /// Only `create` is served (TokenReview and the like).
    pub(crate) create_only: bool,
}

impl ResourceType {
    /// `pods`, or `statefulsets.apps`: how upstream names a resource in messages.
    pub(crate) fn qualified(&self) -> String {
        if self.group.is_empty() {
            self.resource.clone()
        } else {
            format!("{}.{}", self.resource, self.group)
        }
    }

    pub(crate) fn api_version(&self, version: &str) -> String {
        if self.group.is_empty() {
            version.to_string()
        } else {
            format!("{}/{version}", self.group)
        }
    }

    pub(crate) fn storage_version(&self) -> &str {
        &self.versions[0]
    }

    /// Key prefix for every object of this resource, or of one namespace of it.
    /// The group objects are stored under: events.k8s.io Events are core
    /// Events in another form (see [`crate::events`]).
    fn storage_group(&self) -> &str {
        if self.group.is_empty() || crate::events::is_view(&self.group, &self.resource) {
            "core"
        } else {
            &self.group
        }
    }

    pub(crate) fn prefix(&self, namespace: Option<&str>) -> String {
        let group = self.storage_group();
        match namespace {
            Some(ns) if self.namespaced => format!("/{group}/{}/{ns}/", self.resource),
            _ => format!("/{group}/{}/", self.resource),
        }
    }

    pub(crate) fn key(&self, namespace: &str, name: &str) -> String {
        let group = self.storage_group();
        format!("/{group}/{}/{namespace}/{name}", self.resource)
    }

    pub(crate) fn openapi_schema(&self, version: &str) -> Option<serde_json::Value> {
        self.openapi.get(version).cloned()
    }

    pub(crate) fn verbs(&self) -> Vec<&'static str> {
        if self.create_only {
            return vec!["create"];
        }
        vec![
            "create",
            "delete",
            "deletecollection",
            "get",
            "list",
            "patch",
            "update",
            "watch",
        ]
    }
}

struct Builtin {
    group: &'static str,
    version: &'static str,
    resource: &'static str,
    singular: &'static str,
    kind: &'static str,
    namespaced: bool,
    short: &'static [&'static str],
    status: bool,
    scale: bool,
    extras: &'static [Extra],
    create_only: bool,
}

// One row of the built-in table: positional on purpose, so the table reads as
// columns.
#[allow(clippy::too_many_arguments)]
const fn b(
    group: &'static str,
    version: &'static str,
    resource: &'static str,
    singular: &'static str,
    kind: &'static str,
    namespaced: bool,
    short: &'static [&'static str],
    status: bool,
) -> Builtin {
    Builtin {
        group,
        version,
        resource,
        singular,
        kind,
        namespaced,
        short,
        status,
        scale: false,
        extras: &[],
        create_only: false,
    }
}

const BUILTINS: &[Builtin] = &[
    Builtin {
        extras: &[Extra::Finalize],
        ..b(
            "",
            "v1",
            "namespaces",
            "namespace",
            "Namespace",
            false,
            &["ns"],
            true,
        )
    },
    Builtin {
        extras: &[
            Extra::Binding,
            Extra::Eviction,
            Extra::Log,
            Extra::Exec,
            Extra::Attach,
        ],
        ..b("", "v1", "pods", "pod", "Pod", true, &["po"], true)
    },
    b("", "v1", "nodes", "node", "Node", false, &["no"], true),
    b(
        "",
        "v1",
        "configmaps",
        "configmap",
        "ConfigMap",
        true,
        &["cm"],
        false,
    ),
    b("", "v1", "secrets", "secret", "Secret", true, &[], false),
    b("", "v1", "events", "event", "Event", true, &["ev"], false),
    Builtin {
        extras: &[Extra::Token],
        ..b(
            "",
            "v1",
            "serviceaccounts",
            "serviceaccount",
            "ServiceAccount",
            true,
            &["sa"],
            false,
        )
    },
    b(
        "",
        "v1",
        "services",
        "service",
        "Service",
        true,
        &["svc"],
        true,
    ),
    b(
        "",
        "v1",
        "endpoints",
        "endpoints",
        "Endpoints",
        true,
        &["ep"],
        false,
    ),
    b(
        "discovery.k8s.io",
        "v1",
        "endpointslices",
        "endpointslice",
        "EndpointSlice",
        true,
        &[],
        false,
    ),
    b(
        "events.k8s.io",
        "v1",
        "events",
        "event",
        "Event",
        true,
        &["ev"],
        false,
    ),
    b(
        "coordination.k8s.io",
        "v1",
        "leases",
        "lease",
        "Lease",
        true,
        &[],
        false,
    ),
    Builtin {
        scale: true,
        ..b(
            "apps",
            "v1",
            "statefulsets",
            "statefulset",
            "StatefulSet",
            true,
            &["sts"],
            true,
        )
    },
    Builtin {
        scale: true,
        ..b(
            "apps",
            "v1",
            "deployments",
            "deployment",
            "Deployment",
            true,
            &["deploy"],
            true,
        )
    },
    Builtin {
        scale: true,
        ..b(
            "apps",
            "v1",
            "replicasets",
            "replicaset",
            "ReplicaSet",
            true,
            &["rs"],
            true,
        )
    },
    b(
        "apps",
        "v1",
        "controllerrevisions",
        "controllerrevision",
        "ControllerRevision",
        true,
        &[],
        false,
    ),
    b(
        "policy",
        "v1",
        "poddisruptionbudgets",
        "poddisruptionbudget",
        "PodDisruptionBudget",
        true,
        &["pdb"],
        true,
    ),
    b(
        "apiextensions.k8s.io",
        "v1",
        "customresourcedefinitions",
        "customresourcedefinition",
        "CustomResourceDefinition",
        false,
        &["crd", "crds"],
        true,
    ),
    b(
        "rbac.authorization.k8s.io",
        "v1",
        "roles",
        "role",
        "Role",
        true,
        &[],
        false,
    ),
    b(
        "rbac.authorization.k8s.io",
        "v1",
        "rolebindings",
        "rolebinding",
        "RoleBinding",
        true,
        &[],
        false,
    ),
    b(
        "rbac.authorization.k8s.io",
        "v1",
        "clusterroles",
        "clusterrole",
        "ClusterRole",
        false,
        &[],
        false,
    ),
    b(
        "rbac.authorization.k8s.io",
        "v1",
        "clusterrolebindings",
        "clusterrolebinding",
        "ClusterRoleBinding",
        false,
        &[],
        false,
    ),
    Builtin {
        create_only: true,
        ..b(
            "authentication.k8s.io",
            "v1",
            "tokenreviews",
            "tokenreview",
            "TokenReview",
            false,
            &[],
            false,
        )
    },
    Builtin {
        create_only: true,
        ..b(
            "authorization.k8s.io",
            "v1",
            "subjectaccessreviews",
            "subjectaccessreview",
            "SubjectAccessReview",
            false,
            &[],
            false,
        )
    },
    Builtin {
        create_only: true,
        ..b(
            "authorization.k8s.io",
            "v1",
            "selfsubjectaccessreviews",
            "selfsubjectaccessreview",
            "SelfSubjectAccessReview",
            false,
            &[],
            false,
        )
    },
    // batch/v1 (issue 31 item 8).
    b("batch", "v1", "jobs", "job", "Job", true, &[], true),
    b(
        "batch",
        "v1",
        "cronjobs",
        "cronjob",
        "CronJob",
        true,
        &["cj"],
        true,
    ),
    // One pod per eligible node, run by guests/daemonset-controller.
    b(
        "apps",
        "v1",
        "daemonsets",
        "daemonset",
        "DaemonSet",
        true,
        &["ds"],
        true,
    ),
    // The ReplicaSet's predecessor (equality selector), which upstream's
    // ReplicaSet controller also runs: so does guests/replicaset-controller.
    Builtin {
        scale: true,
        ..b(
            "",
            "v1",
            "replicationcontrollers",
            "replicationcontroller",
            "ReplicationController",
            true,
            &["rc"],
            true,
        )
    },
    // Per-namespace bounds an administrator sets (`resourcequota`,
    // `limitranger`): enforced at admission, `status.used` kept by
    // `controllers::resourcequota`.
    b(
        "",
        "v1",
        "resourcequotas",
        "resourcequota",
        "ResourceQuota",
        true,
        &["quota"],
        true,
    ),
    b(
        "",
        "v1",
        "limitranges",
        "limitrange",
        "LimitRange",
        true,
        &["limits"],
        false,
    ),
    // Stored and shown as upstream; nothing here binds or provisions volumes
    // (no PersistentVolume controller, no provisioner): a claim stays
    // `Pending`. Served so that manifests and `kubectl apply --prune`'s
    // default list work.
    b(
        "",
        "v1",
        "persistentvolumes",
        "persistentvolume",
        "PersistentVolume",
        false,
        &["pv"],
        true,
    ),
    b(
        "",
        "v1",
        "persistentvolumeclaims",
        "persistentvolumeclaim",
        "PersistentVolumeClaim",
        true,
        &["pvc"],
        true,
    ),
    b(
        "",
        "v1",
        "podtemplates",
        "podtemplate",
        "PodTemplate",
        true,
        &[],
        false,
    ),
    // Stored only: no ingress controller runs here.
    b(
        "networking.k8s.io",
        "v1",
        "ingresses",
        "ingress",
        "Ingress",
        true,
        &["ing"],
        true,
    ),
    b(
        "networking.k8s.io",
        "v1",
        "ingressclasses",
        "ingressclass",
        "IngressClass",
        false,
        &[],
        false,
    ),
    // Resolved into pods' `priority` at admission (`priority`).
    b(
        "scheduling.k8s.io",
        "v1",
        "priorityclasses",
        "priorityclass",
        "PriorityClass",
        false,
        &["pc"],
        false,
    ),
    // Stored and shown; no controller scales from metrics (no metrics API).
    b(
        "autoscaling",
        "v2",
        "horizontalpodautoscalers",
        "horizontalpodautoscaler",
        "HorizontalPodAutoscaler",
        true,
        &["hpa"],
        true,
    ),
    // Approved or denied by a client with the signer's `approve` permission
    // (`rest::approval`), signed for the plane's client signers
    // (`controllers::csrsigning`).
    Builtin {
        extras: &[Extra::Approval],
        ..b(
            "certificates.k8s.io",
            "v1",
            "certificatesigningrequests",
            "certificatesigningrequest",
            "CertificateSigningRequest",
            false,
            &["csr"],
            true,
        )
    },
    // One per served group version (`controllers::apiservices`); others are
    // stored, and not available (no aggregation layer).
    b(
        "apiregistration.k8s.io",
        "v1",
        "apiservices",
        "apiservice",
        "APIService",
        false,
        &[],
        true,
    ),
    // `kubectl auth whoami`.
    Builtin {
        create_only: true,
        ..b(
            "authentication.k8s.io",
            "v1",
            "selfsubjectreviews",
            "selfsubjectreview",
            "SelfSubjectReview",
            false,
            &[],
            false,
        )
    },
    // `kubectl auth can-i --list`.
    Builtin {
        create_only: true,
        ..b(
            "authorization.k8s.io",
            "v1",
            "selfsubjectrulesreviews",
            "selfsubjectrulesreview",
            "SelfSubjectRulesReview",
            false,
            &[],
            false,
        )
    },
];

fn builtin(def: &Builtin) -> ResourceType {
    ResourceType {
        group: def.group.into(),
        versions: vec![def.version.into()],
        resource: def.resource.into(),
        singular: def.singular.into(),
        kind: def.kind.into(),
        namespaced: def.namespaced,
        short_names: def.short.iter().map(|s| s.to_string()).collect(),
        categories: if matches!(
            def.resource,
            "pods" | "statefulsets" | "services" | "deployments" | "replicasets"
        ) || matches!(def.resource, "daemonsets" | "replicationcontrollers")
            || (def.group == "batch" && matches!(def.resource, "jobs" | "cronjobs"))
            || def.resource == "horizontalpodautoscalers"
        {
            vec!["all".into()]
        } else {
            vec![]
        },
        status: def.status,
        scale: def.scale.then(|| ScaleSpec {
            spec_replicas: ".spec.replicas".into(),
            status_replicas: ".status.replicas".into(),
            label_selector: Some(".status.selector".into()),
        }),
        extras: def.extras.to_vec(),
        builtin: true,
        schemas: BTreeMap::new(),
        openapi: BTreeMap::new(),
        cel: BTreeMap::new(),
        printer_columns: vec![],
        create_only: def.create_only,
    }
}

/// Whether `group`/`resource` is a kind this server serves natively: no CRD
/// may declare it (it would replace the built-in type and its objects).
pub(crate) fn is_builtin(group: &str, resource: &str) -> bool {
    BUILTINS
        .iter()
        .any(|b| b.group == group && b.resource == resource)
}

/// A built-in type missing from the registry: it was built wrong (an
/// internal error naming the type, `status` turns it into a 500).
#[derive(Debug, thiserror::Error)]
#[error("built-in resource {0} is not registered")]
pub(crate) struct NotRegistered(pub(crate) String);

/// The set of served resources. Cheap to read on every request.
#[derive(Default)]
pub struct Registry {
    /// (group, resource) → type
    types: RwLock<BTreeMap<(String, String), Arc<ResourceType>>>,
    /// Counts changes to `types`: what is built from the whole set (the
    /// OpenAPI documents) is kept until it moves.
    generation: AtomicU64,
}

impl Registry {
    pub fn with_builtins() -> Registry {
        let r = Registry::default();
        for def in BUILTINS {
            r.insert(builtin(def));
        }
        r
    }

    /// Serves `rt`, unless it would replace a built-in type (a CRD stored
    /// before CRDs for built-ins were refused): then the built-in stays and
    /// this answers false.
    pub(crate) fn insert(&self, rt: ResourceType) -> bool {
        let mut types = self.types.write().unwrap_or_else(|p| p.into_inner());
        let key = (rt.group.clone(), rt.resource.clone());
        if !rt.builtin && types.get(&key).is_some_and(|t| t.builtin) {
            return false;
        }
        types.insert(key, Arc::new(rt));
        self.generation.fetch_add(1, Ordering::SeqCst);
        true
    }

    /// Moves whenever a type is added, changed or removed.
    pub(crate) fn generation(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }

    pub(crate) fn remove(&self, group: &str, resource: &str) {
        let mut types = self.types.write().unwrap_or_else(|p| p.into_inner());
        if types
            .get(&(group.to_string(), resource.to_string()))
            .is_some_and(|t| !t.builtin)
        {
            types.remove(&(group.to_string(), resource.to_string()));
            self.generation.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// The type behind `/apis/{group}/{version}/{resource}`, if that version is served.
    pub(crate) fn lookup(
        &self,
        group: &str,
        version: &str,
        resource: &str,
    ) -> Option<Arc<ResourceType>> {
        let types = self.types.read().unwrap_or_else(|p| p.into_inner());
        types
            .get(&(group.to_string(), resource.to_string()))
            .filter(|t| t.versions.iter().any(|v| v == version))
            .cloned()
    }

    /// A type this server always serves; missing only if the registry was built
    /// wrong, which is an internal error naming it rather than a panic.
    pub(crate) fn builtin(
        &self,
        group: &str,
        version: &str,
        resource: &str,
    ) -> Result<Arc<ResourceType>, NotRegistered> {
        self.lookup(group, version, resource)
            .ok_or_else(|| NotRegistered(format!("{resource}.{group}/{version}")))
    }

    /// The type stored as `group`/`resource`, whatever versions it serves.
    pub fn get(&self, group: &str, resource: &str) -> Option<Arc<ResourceType>> {
        let types = self.types.read().unwrap_or_else(|p| p.into_inner());
        types
            .get(&(group.to_string(), resource.to_string()))
            .cloned()
    }

    pub(crate) fn by_kind(&self, group: &str, kind: &str) -> Option<Arc<ResourceType>> {
        let types = self.types.read().unwrap_or_else(|p| p.into_inner());
        types
            .values()
            .find(|t| t.group == group && t.kind == kind)
            .cloned()
    }

    pub(crate) fn all(&self) -> Vec<Arc<ResourceType>> {
        let types = self.types.read().unwrap_or_else(|p| p.into_inner());
        types.values().cloned().collect()
    }

    /// Group → served versions (preferred first), in a stable order with the
    /// legacy core group left out.
    pub(crate) fn groups(&self) -> Vec<(String, Vec<String>)> {
        let mut groups: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for t in self.all() {
            if t.group.is_empty() {
                continue;
            }
            let vs = groups.entry(t.group.clone()).or_default();
            for v in &t.versions {
                if !vs.contains(v) {
                    vs.push(v.clone());
                }
            }
        }
        groups.into_iter().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::PrinterColumn;
    use serde_json::json;

    #[test]
    fn printer_column_paths_read_as_upstream_writes_them() {
        let obj = json!({"spec": {"size": 3, "ports": [{"port": 80}, {"port": 443}]},
            "status": {"conditions": [{"type": "Synced", "status": "True"}, {"type": "Ready", "status": "False"}]}});
        let cell = |path: &str| {
            let c = PrinterColumn {
                name: "c".into(),
                type_: "string".into(),
                json_path: PrinterColumn::parse_path(path),
                priority: 0,
            };
            c.value(&obj).cloned()
        };
        assert_eq!(cell(".spec.size"), Some(json!(3)));
        assert_eq!(cell(".spec.ports[1].port"), Some(json!(443)));
        assert_eq!(cell(".spec.ports[*].port"), Some(json!(80)));
        assert_eq!(
            cell(r#".status.conditions[?(@.type=="Ready")].status"#),
            Some(json!("False"))
        );
        assert_eq!(cell(".status.missing"), None);
        assert_eq!(
            cell(".spec[?("),
            None,
            "a path that does not parse leaves the cell empty"
        );
    }

    /// A stored CRD is read again at every start: however deep its column
    /// path nests, reading it must not take the plane down.
    #[test]
    fn a_deeply_nested_column_path_is_refused_not_parsed() {
        let deep = |n: usize| format!(".a[?{}@.b{}]", "(".repeat(n), ")".repeat(n));
        assert!(PrinterColumn::parse_path(&deep(8)).is_some());
        // On a thread with a worker's stack (2 MiB), as the plane parses it.
        let path = deep(100_000);
        let parsed = std::thread::Builder::new()
            .stack_size(2 << 20)
            .spawn(move || PrinterColumn::parse_path(&path).is_some())
            .unwrap()
            .join()
            .expect("parsing a deep path overflowed the stack");
        assert!(!parsed);
    }

    /// A CRD stored before CRDs for built-ins were refused is read at every
    /// start: it must never replace the built-in it names.
    #[test]
    fn a_custom_type_never_replaces_a_built_in() {
        let registry = super::Registry::with_builtins();
        let crd = json!({"metadata": {"name": "leases.coordination.k8s.io"},
            "spec": {"group": "coordination.k8s.io", "scope": "Namespaced",
                "names": {"plural": "leases", "singular": "lease", "kind": "Lease"},
                "versions": [{"name": "v1", "served": true, "storage": true,
                    "schema": {"openAPIV3Schema": {"type": "object"}}}]}});
        let rt = crate::crd::resource_type(&crd).expect("a valid CRD");
        assert!(!registry.insert(rt));
        assert!(
            registry
                .get("coordination.k8s.io", "leases")
                .unwrap()
                .builtin
        );
        registry.remove("coordination.k8s.io", "leases");
        assert!(registry.get("coordination.k8s.io", "leases").is_some());
    }

    /// `kubectl get` shows upstream's columns for every built-in kind the
    /// server serves (its own printer's, or upstream's default table of Name
    /// and Created At for kinds upstream has no printer for): none may fall
    /// back to the custom-resource default of Name and Age.
    #[test]
    fn every_served_kind_has_upstreams_columns() {
        let registry = super::Registry::with_builtins();
        let obj = json!({"metadata": {"name": "x", "creationTimestamp": "2026-01-01T00:00:00Z"}});
        let (mut fallback, mut no_wide, mut walked) = (vec![], vec![], vec![]);
        for b in super::BUILTINS.iter().filter(|b| !b.create_only) {
            walked.push(format!("{}.{}", b.resource, b.group));
            let rt = registry.get(b.group, b.resource).expect("served");
            let table = crate::printers::table::table(&rt, std::slice::from_ref(&obj), None, "1");
            let names: Vec<&str> = table["columnDefinitions"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| c["name"].as_str().unwrap())
                .collect();
            let cells = table["rows"][0]["cells"].as_array().unwrap().len();
            assert_eq!(
                cells,
                names.len(),
                "{}: cells and columns differ",
                b.resource
            );
            if names == ["Name", "Age"] {
                fallback.push(format!("{}.{}", b.resource, b.group));
            }
            // Every kind with a pod template has upstream's wide columns.
            let templated = matches!(
                b.kind,
                "Deployment"
                    | "ReplicaSet"
                    | "StatefulSet"
                    | "DaemonSet"
                    | "ReplicationController"
                    | "Job"
                    | "CronJob"
            );
            if templated && !(names.contains(&"Containers") && names.contains(&"Images")) {
                no_wide.push(b.kind);
            }
        }
        assert!(fallback.is_empty(), "no upstream columns for {fallback:?}");
        assert!(no_wide.is_empty(), "no wide columns for {no_wide:?}");
        // The batch/v1 kinds (issue 31 item 8) are among them.
        for kind in ["jobs.batch", "cronjobs.batch"] {
            assert!(walked.iter().any(|w| w == kind), "{kind} is not served");
        }
    }

    /// Strategic merge patch and server-side apply read each built-in kind's
    /// list keys from the generated table: a served kind missing from it
    /// would treat every list as atomic (a `kubectl apply` that changes one
    /// container of a Deployment replaced them all, or failed validation).
    #[test]
    fn every_served_kind_has_its_list_types() {
        use wasmlet_apimachinery::builtin::BuiltinListTypes;
        let missing: Vec<String> = super::BUILTINS
            .iter()
            .filter(|b| !BuiltinListTypes::for_kind(b.group, b.kind).is_known())
            .map(|b| format!("{}.{}", b.kind, b.group))
            .collect();
        assert!(
            missing.is_empty(),
            "not in apimachinery's table: {missing:?}"
        );
    }
}
