//! `kubectl get` columns for the workload, disruption, coordination, RBAC
//! and CRD kinds, as upstream's printers (`pkg/printers/internalversion`)
//! give them. The server always sends the wide (priority 1) columns; kubectl
//! shows them with `-o wide`.

use serde_json::{Value, json};
use wasmlet_apimachinery::selector::LabelSelector;

use crate::printers::table::{age, col};
use crate::registry::ResourceType;

pub(super) fn int(obj: &Value, ptr: &str) -> i64 {
    obj.pointer(ptr).and_then(Value::as_i64).unwrap_or(0)
}

/// `spec.replicas`, defaulted as the API server defaults it.
pub(super) fn desired(obj: &Value) -> i64 {
    obj.pointer("/spec/replicas")
        .and_then(Value::as_i64)
        .unwrap_or(1)
}

/// The template's containers' names and images, comma-separated.
fn containers(obj: &Value) -> (String, String) {
    containers_at(obj, "/spec/template/spec/containers")
}

/// The names and images of the containers listed at `ptr`, comma-separated.
pub(super) fn containers_at(obj: &Value, ptr: &str) -> (String, String) {
    let list = obj.pointer(ptr).and_then(Value::as_array);
    let field = |f: &str| {
        list.into_iter()
            .flatten()
            .map(|c| c[f].as_str().unwrap_or(""))
            .collect::<Vec<_>>()
            .join(",")
    };
    (field("name"), field("image"))
}

/// `metav1.FormatLabelSelector`: the selector's string form, `<none>` when
/// it selects everything, `<error>` when it does not parse.
fn selector(obj: &Value) -> String {
    match obj.pointer("/spec/selector") {
        None | Some(Value::Null) => "<none>".into(),
        Some(s) => match LabelSelector::from_label_selector(s) {
            Ok(sel) if sel.is_empty() => "<none>".into(),
            Ok(sel) => sel.to_string(),
            Err(_) => "<error>".into(),
        },
    }
}

/// An int-or-string field, `N/A` when unset (the PDB's).
fn int_or_string(v: Option<&Value>) -> Value {
    match v {
        Some(Value::Number(n)) => json!(n.to_string()),
        Some(Value::String(s)) => json!(s),
        _ => json!("N/A"),
    }
}

/// The columns `Containers`, `Images`, `Selector` that workload kinds add.
pub(super) fn template_columns(with_selector: bool) -> Vec<Value> {
    let mut c = vec![col("Containers", "string", 1), col("Images", "string", 1)];
    if with_selector {
        c.push(col("Selector", "string", 1));
    }
    c
}

pub(super) fn template_cells(obj: &Value, with_selector: bool) -> Vec<Value> {
    let (names, images) = containers(obj);
    let mut c = vec![json!(names), json!(images)];
    if with_selector {
        c.push(json!(selector(obj)));
    }
    c
}

/// `kind.group/name` of the object's controller (`kind/name` in the core
/// group), as upstream's `formatResourceName`.
fn controller(obj: &Value) -> String {
    let Some(owner) = obj
        .pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .and_then(|o| o.iter().find(|r| r["controller"] == true))
    else {
        return "<none>".into();
    };
    let kind = owner["kind"].as_str().unwrap_or("").to_lowercase();
    let group = owner["apiVersion"]
        .as_str()
        .and_then(|v| v.split_once('/'))
        .map(|(g, _)| g)
        .unwrap_or("");
    let name = owner["name"].as_str().unwrap_or("");
    if group.is_empty() {
        format!("{kind}/{name}")
    } else {
        format!("{kind}.{group}/{name}")
    }
}

/// A binding's subjects of `kind`, as upstream's `SubjectsStrings` prints
/// them (ServiceAccounts as `namespace:name`).
fn subjects(obj: &Value, kind: &str) -> String {
    obj.get("subjects")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|s| s["kind"] == kind)
        .map(|s| {
            let name = s["name"].as_str().unwrap_or("");
            match s["namespace"].as_str() {
                Some(ns) if kind == "ServiceAccount" => format!("{ns}:{name}"),
                _ => name.to_string(),
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// A ReplicaSet's or ReplicationController's table, up to its selector
/// cell (upstream prints the two alike but for the selector's format):
/// NAME, DESIRED, CURRENT, READY, AGE and the wide template columns.
pub(super) fn replica_counts(obj: &Value, name: Value) -> (Vec<Value>, Vec<Value>) {
    let mut defs = vec![
        col("Name", "string", 0),
        col("Desired", "integer", 0),
        col("Current", "integer", 0),
        col("Ready", "integer", 0),
        col("Age", "string", 0),
    ];
    defs.extend(template_columns(true));
    let row = vec![
        name,
        json!(desired(obj)),
        json!(int(obj, "/status/replicas")),
        json!(int(obj, "/status/readyReplicas")),
        json!(age(obj)),
    ];
    (defs, row)
}

/// Column definitions and cells, for the kinds this module prints.
pub(crate) fn cells(
    rt: &ResourceType,
    obj: &Value,
    name: Value,
) -> Option<(Vec<Value>, Vec<Value>)> {
    Some(match (rt.group.as_str(), rt.resource.as_str()) {
        ("apps", "deployments") => {
            let mut defs = vec![
                col("Name", "string", 0),
                col("Ready", "string", 0),
                col("Up-to-date", "string", 0),
                col("Available", "string", 0),
                col("Age", "string", 0),
            ];
            defs.extend(template_columns(true));
            let desired = desired(obj);
            let mut row = vec![
                name,
                json!(format!("{}/{desired}", int(obj, "/status/readyReplicas"))),
                json!(int(obj, "/status/updatedReplicas")),
                json!(int(obj, "/status/availableReplicas")),
                json!(age(obj)),
            ];
            row.extend(template_cells(obj, true));
            (defs, row)
        }
        ("apps", "replicasets") => {
            let (defs, mut row) = replica_counts(obj, name);
            row.extend(template_cells(obj, true));
            (defs, row)
        }
        ("apps", "statefulsets") => {
            let mut defs = vec![
                col("Name", "string", 0),
                col("Ready", "string", 0),
                col("Age", "string", 0),
            ];
            defs.extend(template_columns(false));
            let desired = desired(obj);
            let mut row = vec![
                name,
                json!(format!("{}/{desired}", int(obj, "/status/readyReplicas"))),
                json!(age(obj)),
            ];
            row.extend(template_cells(obj, false));
            (defs, row)
        }
        ("apps", "controllerrevisions") => (
            vec![
                col("Name", "string", 0),
                col("Controller", "string", 0),
                col("Revision", "string", 0),
                col("Age", "string", 0),
            ],
            vec![
                name,
                json!(controller(obj)),
                json!(int(obj, "/revision")),
                json!(age(obj)),
            ],
        ),
        ("policy", "poddisruptionbudgets") => (
            vec![
                col("Name", "string", 0),
                col("Min Available", "string", 0),
                col("Max Unavailable", "string", 0),
                col("Allowed Disruptions", "integer", 0),
                col("Age", "string", 0),
            ],
            vec![
                name,
                int_or_string(obj.pointer("/spec/minAvailable")),
                int_or_string(obj.pointer("/spec/maxUnavailable")),
                json!(int(obj, "/status/disruptionsAllowed")),
                json!(age(obj)),
            ],
        ),
        ("coordination.k8s.io", "leases") => (
            vec![
                col("Name", "string", 0),
                col("Holder", "string", 0),
                col("Age", "string", 0),
            ],
            vec![
                name,
                json!(
                    obj.pointer("/spec/holderIdentity")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                ),
                json!(age(obj)),
            ],
        ),
        ("rbac.authorization.k8s.io", "rolebindings" | "clusterrolebindings") => (
            vec![
                col("Name", "string", 0),
                col("Role", "string", 0),
                col("Age", "string", 0),
                col("Users", "string", 1),
                col("Groups", "string", 1),
                col("ServiceAccounts", "string", 1),
            ],
            vec![
                name,
                json!(format!(
                    "{}/{}",
                    obj.pointer("/roleRef/kind")
                        .and_then(Value::as_str)
                        .unwrap_or(""),
                    obj.pointer("/roleRef/name")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                )),
                json!(age(obj)),
                json!(subjects(obj, "User")),
                json!(subjects(obj, "Group")),
                json!(subjects(obj, "ServiceAccount")),
            ],
        ),
        // Upstream has no printer for these: its default table, the name and
        // the creation time as stored.
        ("rbac.authorization.k8s.io", "roles" | "clusterroles")
        | ("apiextensions.k8s.io", "customresourcedefinitions") => (
            vec![col("Name", "string", 0), col("Created At", "date", 0)],
            vec![
                name,
                json!(
                    obj.pointer("/metadata/creationTimestamp")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                ),
            ],
        ),
        _ => return None,
    })
}
