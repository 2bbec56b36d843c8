//! CustomResourceDefinitions: turning one into a served [`ResourceType`],
//! checking it first, and the status upstream's establishing controller sets.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Value, json};
use wasmlet_apimachinery::names;
use wasmlet_apimachinery::schema::Structural;

use crate::meta;
use crate::registry::{PrinterColumn, ResourceType, ScaleSpec};
use crate::status::Cause;

/// The finalizer that holds a deleted CRD until its custom resources are gone.
pub(crate) const CLEANUP_FINALIZER: &str = "customresourcecleanup.apiextensions.k8s.io";

fn invalid(field: &str, message: impl Into<String>) -> Cause {
    Cause {
        reason: "FieldValueInvalid".into(),
        message: message.into(),
        field: field.into(),
    }
}

fn required(field: &str) -> Cause {
    Cause {
        reason: "FieldValueRequired".into(),
        message: "Required value".into(),
        field: field.into(),
    }
}

/// The annotation upstream requires on CRDs in the Kubernetes project's own
/// groups (`*.k8s.io`, `*.kubernetes.io`).
pub(crate) const API_APPROVED: &str = "api-approved.kubernetes.io";

/// Whether `group` is reserved for the Kubernetes project, as upstream's
/// `IsProtectedCommunityGroup`.
fn is_protected_group(group: &str) -> bool {
    ["k8s.io", "kubernetes.io"]
        .iter()
        .any(|d| group == *d || group.strip_suffix(d).is_some_and(|g| g.ends_with('.')))
}

/// How a CRD's [`API_APPROVED`] annotation reads (upstream's
/// `GetAPIApprovalState`): `Ok` approved (a URL) or bypassed (a reason
/// starting with `unapproved`), else why not.
fn api_approval(crd: &Value) -> Result<(), (&'static str, String)> {
    let see = "see https://github.com/kubernetes/enhancements/pull/1111";
    let Some(value) = crd
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(API_APPROVED))
        .and_then(Value::as_str)
    else {
        return Err((
            "FieldValueRequired",
            format!(
                "Required value: protected groups must have approval annotation \"{API_APPROVED}\", {see}"
            ),
        ));
    };
    // Go's `url.ParseRequestURI`: an absolute URL or an absolute path.
    let is_url = value.starts_with('/')
        || value
            .split_once("://")
            .is_some_and(|(scheme, rest)| !scheme.is_empty() && !rest.is_empty());
    if value.starts_with("unapproved") || is_url {
        return Ok(());
    }
    Err((
        "FieldValueInvalid",
        format!(
            "Invalid value: \"{value}\": protected groups must have approval annotation \"{API_APPROVED}\" \
             with either a URL or a reason starting with \"unapproved\", {see}"
        ),
    ))
}

/// What keeps a CRD from taking a name that is not its to take, checked on
/// create and update (`old`): a group/resource this server serves natively
/// is refused (upstream lets such a CRD be created and keeps serving the
/// built-in; here it would replace the built-in, so it is refused outright),
/// and a group of the Kubernetes project needs upstream's approval
/// annotation (checked, as upstream, only when its state changes).
pub(crate) fn protection_causes(old: Option<&Value>, crd: &Value) -> Vec<Cause> {
    let s = |p: &str| crd.pointer(p).and_then(Value::as_str).unwrap_or("");
    let (group, plural) = (s("/spec/group"), s("/spec/names/plural"));
    let mut causes = Vec::new();
    if crate::registry::is_builtin(group, plural) {
        causes.push(invalid(
            "spec.names.plural",
            format!(
                "Invalid value: \"{plural}\": {plural}.{group} is served by this API server \
                 natively; a CustomResourceDefinition may not replace it"
            ),
        ));
    }
    if is_protected_group(group) {
        let unchanged = old.is_some_and(|o| {
            let state = |v: &Value| api_approval(v).map_err(|(reason, _)| reason);
            state(o) == state(crd)
        });
        if let (false, Err((reason, message))) = (unchanged, api_approval(crd)) {
            causes.push(Cause {
                reason: reason.into(),
                message,
                field: format!("metadata.annotations[{API_APPROVED}]"),
            });
        }
    }
    causes
}

/// Upstream's check of a CRD's printer columns on create and update: a
/// `jsonPath` is required and starts with `.` (what follows is JSONPath, read
/// when printing). Not part of [`resource_type`], so that a CRD stored before
/// the check is still served.
pub(crate) fn printer_column_causes(crd: &Value) -> Vec<Cause> {
    let versions = crd.pointer("/spec/versions").and_then(Value::as_array);
    let mut causes = Vec::new();
    for (i, v) in versions.into_iter().flatten().enumerate() {
        let columns = v["additionalPrinterColumns"].as_array();
        for (j, c) in columns.into_iter().flatten().enumerate() {
            let field = format!("spec.versions[{i}].additionalPrinterColumns[{j}].jsonPath");
            match c["jsonPath"].as_str() {
                None | Some("") => causes.push(required(&field)),
                Some(p) if !p.starts_with('.') => causes.push(invalid(
                    &field,
                    format!("Invalid value: {p:?}: must be a simple json path starting with ."),
                )),
                Some(p) if PrinterColumn::nesting(p) > PrinterColumn::MAX_NESTING => {
                    causes.push(invalid(
                        &field,
                        format!(
                            "Invalid value: brackets and parentheses nest deeper than {}",
                            PrinterColumn::MAX_NESTING
                        ),
                    ))
                }
                Some(_) => {}
            }
        }
    }
    causes
}

/// The served type a CRD declares, or every reason it cannot be served.
pub(crate) fn resource_type(crd: &Value) -> Result<ResourceType, Vec<Cause>> {
    let mut causes = Vec::new();
    let s = |p: &str| {
        crd.pointer(p)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    let group = s("/spec/group");
    let plural = s("/spec/names/plural");
    let kind = s("/spec/names/kind");
    let mut singular = s("/spec/names/singular");
    if singular.is_empty() {
        singular = kind.to_lowercase();
    }
    if group.is_empty() {
        causes.push(required("spec.group"));
    } else if !group.contains('.') {
        causes.push(invalid(
            "spec.group",
            format!("Invalid value: \"{group}\": should be a domain with at least one dot"),
        ));
    }
    if plural.is_empty() {
        causes.push(required("spec.names.plural"));
    } else {
        for e in names::is_dns1123_label(&plural) {
            causes.push(invalid(
                "spec.names.plural",
                format!("Invalid value: \"{plural}\": {e}"),
            ));
        }
    }
    if kind.is_empty() {
        causes.push(required("spec.names.kind"));
    }
    let name = meta::name(crd);
    if !plural.is_empty() && !group.is_empty() && name != format!("{plural}.{group}") {
        causes.push(invalid(
            "metadata.name",
            format!("Invalid value: \"{name}\": must be spec.names.plural+\".\"+spec.group"),
        ));
    }
    let namespaced = match s("/spec/scope").as_str() {
        "Namespaced" => true,
        "Cluster" => false,
        "" => {
            causes.push(required("spec.scope"));
            true
        }
        other => {
            causes.push(Cause {
                reason: "FieldValueNotSupported".into(),
                message: format!(
                    "Unsupported value: \"{other}\": supported values: \"Cluster\", \"Namespaced\""
                ),
                field: "spec.scope".into(),
            });
            true
        }
    };
    let versions = crd
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if versions.is_empty() {
        causes.push(required("spec.versions"));
    }
    let storage: Vec<&Value> = versions.iter().filter(|v| v["storage"] == true).collect();
    if !versions.is_empty() && storage.len() != 1 {
        causes.push(invalid(
            "spec.versions",
            "Invalid value: must have exactly one version marked as storage version",
        ));
    }
    let mut served = Vec::new();
    let mut schemas = BTreeMap::new();
    let mut openapi = BTreeMap::new();
    let mut cel = BTreeMap::new();
    let mut status = false;
    let mut scale = None;
    let mut printer_columns = Vec::new();
    for (i, v) in versions.iter().enumerate() {
        let vname = v["name"].as_str().unwrap_or("").to_string();
        if vname.is_empty() {
            causes.push(required(&format!("spec.versions[{i}].name")));
            continue;
        }
        match v.pointer("/schema/openAPIV3Schema") {
            Some(schema) => match Structural::new(schema) {
                Ok(st) => {
                    schemas.insert(vname.clone(), Arc::new(st));
                    openapi.insert(vname.clone(), schema.clone());
                    // Writes of the CRD are refused with these causes
                    // (strategy); a stored CRD whose rules no longer
                    // compile is served without them.
                    let at = format!("spec.versions[{i}].schema.openAPIV3Schema");
                    match crate::cel_rules::Rules::compile(schema, &at) {
                        Ok(Some(rules)) => {
                            cel.insert(vname.clone(), Arc::new(rules));
                        }
                        Ok(None) => {}
                        Err(c) => tracing::warn!(
                            crd = meta::name(crd),
                            version = vname,
                            "validation rules not enforced: {}",
                            c.iter()
                                .map(|c| format!("{}: {}", c.field, c.message))
                                .collect::<Vec<_>>()
                                .join("; ")
                        ),
                    }
                }
                Err(e) => causes.push(invalid(
                    &format!("spec.versions[{i}].schema.openAPIV3Schema"),
                    format!("Invalid value: {e}"),
                )),
            },
            None => causes.push(required(&format!(
                "spec.versions[{i}].schema.openAPIV3Schema"
            ))),
        }
        let is_storage = v["storage"] == true;
        if v["served"] == true {
            if is_storage {
                served.insert(0, vname.clone())
            } else {
                served.push(vname.clone())
            }
        }
        // Subresources and columns follow the storage version (upstream allows
        // them per version; kubectl reads the preferred one).
        if is_storage {
            status = v.pointer("/subresources/status").is_some();
            scale = v.pointer("/subresources/scale").map(|sc| ScaleSpec {
                spec_replicas: sc["specReplicasPath"]
                    .as_str()
                    .unwrap_or(".spec.replicas")
                    .into(),
                status_replicas: sc["statusReplicasPath"]
                    .as_str()
                    .unwrap_or(".status.replicas")
                    .into(),
                label_selector: sc["labelSelectorPath"].as_str().map(str::to_string),
            });
            for c in v["additionalPrinterColumns"]
                .as_array()
                .into_iter()
                .flatten()
            {
                printer_columns.push(PrinterColumn {
                    name: c["name"].as_str().unwrap_or("").into(),
                    type_: c["type"].as_str().unwrap_or("string").into(),
                    json_path: PrinterColumn::parse_path(c["jsonPath"].as_str().unwrap_or("")),
                    priority: c["priority"].as_i64().unwrap_or(0),
                });
            }
        }
    }
    if served.is_empty() && !versions.is_empty() {
        causes.push(invalid(
            "spec.versions",
            "Invalid value: must have at least one served version",
        ));
    }
    if !causes.is_empty() {
        return Err(causes);
    }
    let strs = |p: &str| -> Vec<String> {
        crd.pointer(p)
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|x| x.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    };
    Ok(ResourceType {
        group,
        versions: served,
        resource: plural,
        singular,
        kind,
        namespaced,
        short_names: strs("/spec/names/shortNames"),
        categories: strs("/spec/names/categories"),
        status,
        scale,
        extras: vec![],
        builtin: false,
        schemas,
        openapi,
        cel,
        printer_columns,
        create_only: false,
    })
}

/// The names of the versions a CRD stores objects in (validation lets
/// exactly one through).
pub(crate) fn storage_versions(crd: &Value) -> Vec<Value> {
    crd.pointer("/spec/versions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|v| v["storage"] == true)
        .map(|v| v["name"].clone())
        .collect()
}

/// The CRD with upstream's accepted-names status and cleanup finalizer, or
/// `None` when it already has both.
pub(crate) fn established(crd: &Value) -> Option<Value> {
    let mut new = crd.clone();
    let mut finalizers = meta::finalizers(crd);
    if !finalizers.iter().any(|f| f == CLEANUP_FINALIZER) {
        finalizers.push(CLEANUP_FINALIZER.into());
        meta::set_finalizers(&mut new, finalizers);
    }
    let now = meta::now_rfc3339();
    let storage = storage_versions(crd);
    let mut stored = crd
        .pointer("/status/storedVersions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    for v in storage {
        if !stored.contains(&v) {
            stored.push(v);
        }
    }
    let keep_time = |t: &str| {
        crd.pointer("/status/conditions")
            .and_then(Value::as_array)
            .and_then(|cs| cs.iter().find(|c| c["type"] == t && c["status"] == "True"))
            .and_then(|c| c["lastTransitionTime"].as_str().map(str::to_string))
            .unwrap_or_else(|| now.clone())
    };
    new["status"] = json!({
        "conditions": [
            {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts", "message": "no conflicts found",
             "lastTransitionTime": keep_time("NamesAccepted")},
            {"type": "Established", "status": "True", "reason": "InitialNamesAccepted",
             "message": "the initial names have been accepted", "lastTransitionTime": keep_time("Established")},
        ],
        "acceptedNames": crd.pointer("/spec/names").cloned().unwrap_or(json!({})),
        "storedVersions": stored,
    });
    if new == *crd { None } else { Some(new) }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::{printer_column_causes, protection_causes, resource_type};

    fn crd(columns: serde_json::Value) -> serde_json::Value {
        json!({"metadata": {"name": "things.x.dev"}, "spec": {"group": "x.dev", "scope": "Namespaced",
            "names": {"plural": "things", "singular": "thing", "kind": "Thing"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object"}},
                "additionalPrinterColumns": columns}]}})
    }

    #[test]
    fn a_printer_column_path_must_start_with_a_dot() {
        // A stored CRD is served whatever its columns say; the check is on writes.
        let ok = crd(json!([{"name": "Ready", "type": "string",
            "jsonPath": ".status.conditions[?(@.type==\"Ready\")].status"}]));
        let rt = resource_type(&ok).unwrap();
        assert!(rt.printer_columns[0].json_path.is_some());
        let deep = format!(".a[?{}@.b{}]", "(".repeat(1000), ")".repeat(1000));
        let bad = crd(json!([
            {"name": "Size", "type": "integer", "jsonPath": "spec.size"},
            {"name": "None", "type": "string"},
            {"name": "Deep", "type": "string", "jsonPath": deep},
        ]));
        assert!(printer_column_causes(&ok).is_empty());
        assert!(resource_type(&bad).is_ok());
        let causes = printer_column_causes(&bad);
        let fields: Vec<(&str, &str)> = causes
            .iter()
            .map(|c| (c.field.as_str(), c.message.as_str()))
            .collect();
        assert_eq!(
            fields,
            [
                (
                    "spec.versions[0].additionalPrinterColumns[0].jsonPath",
                    "Invalid value: \"spec.size\": must be a simple json path starting with ."
                ),
                (
                    "spec.versions[0].additionalPrinterColumns[1].jsonPath",
                    "Required value"
                ),
                (
                    "spec.versions[0].additionalPrinterColumns[2].jsonPath",
                    "Invalid value: brackets and parentheses nest deeper than 32"
                ),
            ]
        );
    }

    fn named(group: &str, plural: &str, annotation: Option<&str>) -> serde_json::Value {
        let mut v = crd(json!([]));
        v["spec"]["group"] = json!(group);
        v["spec"]["names"]["plural"] = json!(plural);
        if let Some(a) = annotation {
            v["metadata"]["annotations"] = json!({"api-approved.kubernetes.io": a});
        }
        v
    }

    fn fields(old: Option<&serde_json::Value>, new: &serde_json::Value) -> Vec<String> {
        protection_causes(old, new)
            .into_iter()
            .map(|c| c.field)
            .collect()
    }

    #[test]
    fn built_in_types_and_kubernetes_groups_are_protected() {
        let approval = "metadata.annotations[api-approved.kubernetes.io]";
        assert!(fields(None, &named("x.dev", "things", None)).is_empty());
        // Not a Kubernetes group by suffix alone: `notk8s.io` is anyone's.
        assert!(fields(None, &named("notk8s.io", "things", None)).is_empty());
        for group in ["k8s.io", "a.k8s.io", "kubernetes.io", "x.kubernetes.io"] {
            assert_eq!(
                fields(None, &named(group, "things", None)),
                [approval],
                "{group}"
            );
            for ok in [
                "unapproved, testing",
                "https://github.com/kubernetes/enhancements/pull/1",
            ] {
                assert!(
                    fields(None, &named(group, "things", Some(ok))).is_empty(),
                    "{ok}"
                );
            }
            assert_eq!(
                fields(None, &named(group, "things", Some("yes"))),
                [approval]
            );
        }
        // Served natively: refused whatever the annotation says.
        let leases = named("coordination.k8s.io", "leases", Some("unapproved"));
        assert_eq!(fields(None, &leases), ["spec.names.plural"]);
        // An update that leaves a missing approval as it was is let through,
        // as upstream (a CRD stored before the rule stays writable).
        let old = named("a.k8s.io", "things", None);
        assert!(fields(Some(&old), &old).is_empty());
        assert_eq!(
            fields(Some(&old), &named("a.k8s.io", "things", Some("no"))),
            [approval]
        );
    }
}
