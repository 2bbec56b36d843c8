//! Per-kind rules, as upstream's registry strategies: what a create resets,
//! what each kind must contain, and how it is deleted.

use serde_json::{Value, json};
use wasmlet_apimachinery::names;

use crate::meta;
use crate::registry::ResourceType;
use crate::status::Cause;

fn cause(reason: &str, field: &str, message: impl Into<String>) -> Cause {
    Cause {
        reason: reason.into(),
        message: message.into(),
        field: field.into(),
    }
}

fn required(field: &str) -> Cause {
    cause("FieldValueRequired", field, "Required value")
}

/// Resets what a client may not set on create.
pub(crate) fn prepare_for_create(rt: &ResourceType, obj: &mut Value) {
    crate::defaults::apply(rt, obj, true);
    match (rt.group.as_str(), rt.resource.as_str()) {
        ("", "pods") => {
            let qos = obj
                .get("spec")
                .map_or("BestEffort", crate::defaults::qos_class);
            let mut status = json!({"phase": "Pending", "qosClass": qos});
            if obj
                .pointer("/spec/nodeName")
                .and_then(Value::as_str)
                .is_some_and(|n| !n.is_empty())
            {
                status["conditions"] = json!([{"type": "PodScheduled", "status": "True", "lastTransitionTime": meta::now_rfc3339()}]);
            }
            obj["status"] = status;
        }
        ("", "namespaces") => {
            obj["status"] = json!({"phase": "Active"});
            if obj.pointer("/spec/finalizers").is_none() {
                obj["spec"] = json!({"finalizers": ["kubernetes"]});
            }
        }
        // Nodes report their own status on registration, as kubelets do.
        ("", "nodes") => {}
        // Nothing here binds them (no volume controller or provisioner).
        ("", "persistentvolumes" | "persistentvolumeclaims") => {
            obj["status"] = json!({"phase": "Pending"});
        }
        // The empty status Go's encoder writes (fields without omitempty).
        ("autoscaling", "horizontalpodautoscalers") => {
            obj["status"] = json!({"desiredReplicas": 0});
        }
        ("networking.k8s.io", "ingresses") => obj["status"] = json!({"loadBalancer": {}}),
        // Upstream's PrepareForCreate: an empty status with the storage
        // version stored (clients such as kube-rs read `status` off the
        // create's answer, before the names are accepted).
        ("apiextensions.k8s.io", "customresourcedefinitions") => {
            obj["status"] = json!({
                "acceptedNames": {"plural": "", "kind": ""},
                "storedVersions": crate::crd::storage_versions(obj),
            });
        }
        _ if rt.status => {
            if let Some(o) = obj.as_object_mut() {
                o.remove("status");
            }
        }
        _ => {}
    }
}

/// Validation of built-in kinds: the fields whose absence would break the
/// controllers and agents that read them. (Upstream validates far more.)
pub(crate) fn validate(rt: &ResourceType, obj: &Value, old: Option<&Value>) -> Vec<Cause> {
    let mut causes = Vec::new();
    let name = meta::name(obj);
    if !name.is_empty() {
        let errs = match rt.resource.as_str() {
            "namespaces" => names::is_dns1123_label(name),
            // Event names carry object names plus a suffix; upstream only
            // checks them as path segments.
            "events" => path_segment_errors(name),
            // RBAC names such as `system:discovery` are path segments too.
            _ if rt.group == crate::validation::rbac::GROUP => path_segment_errors(name),
            // `<version>.<group>`, the core group's `v1.` included.
            "apiservices" if rt.group == "apiregistration.k8s.io" => match name.split_once('.') {
                None => vec!["must be in the form: <version>.<group>".to_string()],
                Some((version, "")) => names::is_dns1123_label(version),
                Some((version, group)) => {
                    let mut errs = names::is_dns1123_label(version);
                    errs.extend(names::is_dns1123_subdomain(group));
                    errs
                }
            },
            // Custom resources too: upstream requires a DNS-1123 subdomain.
            _ => names::is_dns1123_subdomain(name),
        };
        for e in errs {
            causes.push(cause(
                "FieldValueInvalid",
                "metadata.name",
                format!("Invalid value: \"{name}\": {e}"),
            ));
        }
    }
    if let Some(labels) = meta::meta(obj)
        .and_then(|m| m.get("labels"))
        .and_then(Value::as_object)
    {
        for (k, v) in labels {
            for e in names::is_qualified_name(k) {
                causes.push(cause(
                    "FieldValueInvalid",
                    "metadata.labels",
                    format!("Invalid value: \"{k}\": {e}"),
                ));
            }
            let value = v.as_str().unwrap_or_default();
            if !v.is_string() {
                causes.push(cause(
                    "FieldValueTypeInvalid",
                    &format!("metadata.labels.{k}"),
                    "must be a string",
                ));
            }
            for e in names::is_valid_label_value(value) {
                causes.push(cause(
                    "FieldValueInvalid",
                    &format!("metadata.labels.{k}"),
                    format!("Invalid value: \"{value}\": {e}"),
                ));
            }
        }
    }
    match (rt.group.as_str(), rt.resource.as_str()) {
        ("", "pods") => {
            let containers = obj.pointer("/spec/containers").and_then(Value::as_array);
            match containers {
                None => causes.push(required("spec.containers")),
                Some(list) if list.is_empty() => causes.push(required("spec.containers")),
                Some(list) => {
                    for (i, c) in list.iter().enumerate() {
                        if c.get("name")
                            .and_then(Value::as_str)
                            .unwrap_or("")
                            .is_empty()
                        {
                            causes.push(required(&format!("spec.containers[{i}].name")));
                        }
                        if c.get("image")
                            .and_then(Value::as_str)
                            .unwrap_or("")
                            .is_empty()
                        {
                            causes.push(required(&format!("spec.containers[{i}].image")));
                        }
                    }
                }
            }
        }
        ("apiextensions.k8s.io", "customresourcedefinitions") => {
            if let Err(more) = crate::crd::resource_type(obj) {
                causes.extend(more);
            }
            causes.extend(crate::crd::printer_column_causes(obj));
            causes.extend(crate::cel_rules::crd_causes(old, obj));
            causes.extend(crate::crd::protection_causes(old, obj));
        }
        (crate::validation::rbac::GROUP, "rolebindings" | "clusterrolebindings") => {
            causes.extend(crate::validation::rbac::validate_binding(&rt.resource, obj));
        }
        (crate::validation::rbac::GROUP, "roles" | "clusterroles") => {
            causes.extend(crate::validation::rbac::validate_role(obj));
        }
        ("apps", "statefulsets") => {
            if obj.pointer("/spec/selector").is_none() {
                causes.push(required("spec.selector"));
            }
            if obj.pointer("/spec/template").is_none() {
                causes.push(required("spec.template"));
            }
        }
        ("", "configmaps") | ("", "secrets") => {
            for field in ["data", "binaryData", "stringData"] {
                if let Some(data) = obj.get(field).and_then(Value::as_object) {
                    for k in data.keys() {
                        if k.is_empty()
                            || k.len() > 253
                            || !k
                                .chars()
                                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
                        {
                            causes.push(cause(
                                "FieldValueInvalid",
                                &format!("{field}[{k}]"),
                                format!("Invalid value: \"{k}\": a valid config key must consist of alphanumeric characters, '-', '_' or '.'"),
                            ));
                        }
                    }
                }
            }
        }
        _ => {}
    }
    causes
}

/// Checks of an update that compare the new object with the old one.
pub(crate) fn validate_update(rt: &ResourceType, old: &Value, new: &Value) -> Vec<Cause> {
    match (rt.group.as_str(), rt.resource.as_str()) {
        (crate::validation::rbac::GROUP, "rolebindings" | "clusterrolebindings") => {
            crate::validation::rbac::validate_binding_update(old, new)
        }
        _ => vec![],
    }
}

fn path_segment_errors(name: &str) -> Vec<String> {
    if name == "." || name == ".." {
        return vec![format!("may not be '{name}'")];
    }
    if name.contains('/') || name.contains('%') {
        return vec!["may not contain '/' or '%'".into()];
    }
    vec![]
}

/// The grace period a DELETE gets when it names none; `None` deletes at once.
pub(crate) fn default_grace(rt: &ResourceType, obj: &Value) -> Option<i64> {
    if rt.group.is_empty() && rt.resource == "pods" {
        return Some(
            obj.pointer("/spec/terminationGracePeriodSeconds")
                .and_then(Value::as_i64)
                .unwrap_or(30),
        );
    }
    None
}

/// Whether a pod's deletion must wait for its node agent: upstream deletes
/// unscheduled and finished pods at once.
pub(crate) fn needs_graceful_delete(rt: &ResourceType, obj: &Value) -> bool {
    if !(rt.group.is_empty() && rt.resource == "pods") {
        return false;
    }
    let bound = obj
        .pointer("/spec/nodeName")
        .and_then(Value::as_str)
        .is_some_and(|n| !n.is_empty());
    let phase = obj
        .pointer("/status/phase")
        .and_then(Value::as_str)
        .unwrap_or("");
    bound && phase != "Succeeded" && phase != "Failed"
}

/// PUT without a resourceVersion: built-in kinds allow it, custom resources
/// require the precondition (as upstream).
pub(crate) fn allow_unconditional_update(rt: &ResourceType) -> bool {
    rt.builtin
}

/// PUT of a missing object creates it for these kinds (as upstream).
pub(crate) fn allow_create_on_update(rt: &ResourceType) -> bool {
    matches!(rt.resource.as_str(), "leases" | "events")
}

/// Whether a DELETE that removed the object answers with it (upstream's
/// `ReturnDeletedObject: true`: custom resources, pods, services, service
/// accounts, namespaces, volumes, storage classes) rather than with a
/// `Status` naming it. An object left waiting (grace period, finalizers) is
/// always returned.
pub(crate) fn returns_deleted_object(rt: &ResourceType) -> bool {
    !rt.builtin
        || (rt.group.is_empty()
            && matches!(
                rt.resource.as_str(),
                "pods"
                    | "services"
                    | "serviceaccounts"
                    | "namespaces"
                    | "persistentvolumes"
                    | "persistentvolumeclaims"
            ))
        || (rt.group == "storage.k8s.io" && rt.resource == "storageclasses")
}

/// Besides `metadata.finalizers`, namespaces wait for `spec.finalizers`.
pub(crate) fn has_pending_finalizers(rt: &ResourceType, obj: &Value) -> bool {
    if !meta::finalizers(obj).is_empty() {
        return true;
    }
    rt.group.is_empty()
        && rt.resource == "namespaces"
        && obj
            .pointer("/spec/finalizers")
            .and_then(Value::as_array)
            .is_some_and(|a| !a.is_empty())
}
