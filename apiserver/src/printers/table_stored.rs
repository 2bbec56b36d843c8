//! `kubectl get` columns for the kinds served as records only (nothing here
//! acts on them but admission): PersistentVolumes and their claims,
//! PodTemplates, Ingresses and IngressClasses, PriorityClasses,
//! HorizontalPodAutoscalers, APIServices and CertificateSigningRequests, as
//! upstream's printers give them.

use serde_json::{Value, json};

use crate::printers::table::{age, col};
use crate::printers::table_apps::containers_at;
use crate::printers::table_workloads::format_labels;
use crate::registry::ResourceType;

fn text<'a>(obj: &'a Value, ptr: &str) -> &'a str {
    obj.pointer(ptr).and_then(Value::as_str).unwrap_or("")
}

fn list<'a>(obj: &'a Value, ptr: &str) -> impl Iterator<Item = &'a Value> {
    obj.pointer(ptr)
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
}

/// `helper.GetAccessModesAsString`: the short forms, in upstream's order.
fn access_modes(obj: &Value, ptr: &str) -> String {
    let modes: Vec<&str> = list(obj, ptr).filter_map(Value::as_str).collect();
    [
        ("ReadWriteOnce", "RWO"),
        ("ReadOnlyMany", "ROX"),
        ("ReadWriteMany", "RWX"),
        ("ReadWriteOncePod", "RWOP"),
    ]
    .iter()
    .filter(|(long, _)| modes.contains(long))
    .map(|(_, short)| *short)
    .collect::<Vec<_>>()
    .join(",")
}

fn or(s: &str, none: &str) -> String {
    if s.is_empty() { none.into() } else { s.into() }
}

/// Column definitions and cells, for the kinds this module prints.
pub(crate) fn cells(
    rt: &ResourceType,
    obj: &Value,
    name: Value,
) -> Option<(Vec<Value>, Vec<Value>)> {
    Some(match (rt.group.as_str(), rt.resource.as_str()) {
        ("", "persistentvolumes") => {
            let claim = match obj.pointer("/spec/claimRef") {
                Some(c) if c.is_object() => {
                    format!("{}/{}", text(c, "/namespace"), text(c, "/name"))
                }
                _ => String::new(),
            };
            (
                vec![
                    col("Name", "string", 0),
                    col("Capacity", "string", 0),
                    col("Access Modes", "string", 0),
                    col("Reclaim Policy", "string", 0),
                    col("Status", "string", 0),
                    col("Claim", "string", 0),
                    col("StorageClass", "string", 0),
                    col("VolumeAttributesClass", "string", 0),
                    col("Reason", "string", 0),
                    col("Age", "string", 0),
                    col("VolumeMode", "string", 1),
                ],
                vec![
                    name,
                    json!(text(obj, "/spec/capacity/storage")),
                    json!(access_modes(obj, "/spec/accessModes")),
                    json!(text(obj, "/spec/persistentVolumeReclaimPolicy")),
                    json!(text(obj, "/status/phase")),
                    json!(claim),
                    json!(text(obj, "/spec/storageClassName")),
                    json!(or(text(obj, "/spec/volumeAttributesClassName"), "<unset>")),
                    json!(text(obj, "/status/reason")),
                    json!(age(obj)),
                    json!(text(obj, "/spec/volumeMode")),
                ],
            )
        }
        ("", "persistentvolumeclaims") => {
            let phase = text(obj, "/status/phase");
            // Capacity and access modes are the bound volume's: none until bound.
            let bound = phase == "Bound";
            (
                vec![
                    col("Name", "string", 0),
                    col("Status", "string", 0),
                    col("Volume", "string", 0),
                    col("Capacity", "string", 0),
                    col("Access Modes", "string", 0),
                    col("StorageClass", "string", 0),
                    col("VolumeAttributesClass", "string", 0),
                    col("Age", "string", 0),
                    col("VolumeMode", "string", 1),
                ],
                vec![
                    name,
                    json!(phase),
                    json!(text(obj, "/spec/volumeName")),
                    json!(if bound {
                        text(obj, "/status/capacity/storage")
                    } else {
                        ""
                    }),
                    json!(if bound {
                        access_modes(obj, "/status/accessModes")
                    } else {
                        String::new()
                    }),
                    json!(text(obj, "/spec/storageClassName")),
                    json!(or(text(obj, "/spec/volumeAttributesClassName"), "<unset>")),
                    json!(age(obj)),
                    json!(text(obj, "/spec/volumeMode")),
                ],
            )
        }
        ("", "podtemplates") => {
            let (names, images) = containers_at(obj, "/template/spec/containers");
            let labels = obj
                .pointer("/template/metadata/labels")
                .and_then(Value::as_object);
            (
                vec![
                    col("Name", "string", 0),
                    col("Containers", "string", 0),
                    col("Images", "string", 0),
                    col("Pod Labels", "string", 0),
                ],
                vec![
                    name,
                    json!(names),
                    json!(images),
                    json!(format_labels(labels)),
                ],
            )
        }
        ("networking.k8s.io", "ingresses") => {
            let hosts: Vec<&str> = list(obj, "/spec/rules")
                .filter_map(|r| r.get("host").and_then(Value::as_str))
                .filter(|h| !h.is_empty())
                .collect();
            let address: Vec<&str> = list(obj, "/status/loadBalancer/ingress")
                .filter_map(|i| i.get("ip").or_else(|| i.get("hostname")))
                .filter_map(Value::as_str)
                .collect();
            let tls = list(obj, "/spec/tls").next().is_some();
            (
                vec![
                    col("Name", "string", 0),
                    col("Class", "string", 0),
                    col("Hosts", "string", 0),
                    col("Address", "string", 0),
                    col("Ports", "string", 0),
                    col("Age", "string", 0),
                ],
                vec![
                    name,
                    json!(or(text(obj, "/spec/ingressClassName"), "<none>")),
                    json!(or(&hosts.join(","), "*")),
                    json!(address.join(",")),
                    json!(if tls { "80, 443" } else { "80" }),
                    json!(age(obj)),
                ],
            )
        }
        ("networking.k8s.io", "ingressclasses") => {
            let parameters = match obj.pointer("/spec/parameters") {
                Some(p) if p.is_object() => {
                    let group = text(p, "/apiGroup");
                    let kind = match group {
                        "" => text(p, "/kind").to_string(),
                        g => format!("{}.{g}", text(p, "/kind")),
                    };
                    format!("{kind}/{}", text(p, "/name"))
                }
                _ => "<none>".into(),
            };
            (
                vec![
                    col("Name", "string", 0),
                    col("Controller", "string", 0),
                    col("Parameters", "string", 0),
                    col("Age", "string", 0),
                ],
                vec![
                    name,
                    json!(text(obj, "/spec/controller")),
                    json!(parameters),
                    json!(age(obj)),
                ],
            )
        }
        ("scheduling.k8s.io", "priorityclasses") => (
            vec![
                col("Name", "string", 0),
                col("Value", "integer", 0),
                col("Global-Default", "boolean", 0),
                col("Age", "string", 0),
                col("PreemptionPolicy", "string", 0),
            ],
            vec![
                name,
                json!(obj.get("value").and_then(Value::as_i64).unwrap_or(0)),
                json!(
                    obj.get("globalDefault")
                        .and_then(Value::as_bool)
                        .unwrap_or(false)
                ),
                json!(age(obj)),
                json!(text(obj, "/preemptionPolicy")),
            ],
        ),
        ("autoscaling", "horizontalpodautoscalers") => (
            vec![
                col("Name", "string", 0),
                col("Reference", "string", 0),
                col("Targets", "string", 0),
                col("MinPods", "string", 0),
                col("MaxPods", "integer", 0),
                col("Replicas", "integer", 0),
                col("Age", "string", 0),
            ],
            vec![
                name,
                json!(format!(
                    "{}/{}",
                    text(obj, "/spec/scaleTargetRef/kind"),
                    text(obj, "/spec/scaleTargetRef/name")
                )),
                json!(hpa_targets(obj)),
                json!(
                    match obj.pointer("/spec/minReplicas").and_then(Value::as_i64) {
                        Some(n) => n.to_string(),
                        None => "<unset>".into(),
                    }
                ),
                json!(
                    obj.pointer("/spec/maxReplicas")
                        .and_then(Value::as_i64)
                        .unwrap_or(0)
                ),
                json!(
                    obj.pointer("/status/currentReplicas")
                        .and_then(Value::as_i64)
                        .unwrap_or(0)
                ),
                json!(age(obj)),
            ],
        ),
        ("apiregistration.k8s.io", "apiservices") => {
            let service = match obj.pointer("/spec/service") {
                Some(s) if s.is_object() => {
                    format!("{}/{}", text(s, "/namespace"), text(s, "/name"))
                }
                _ => "Local".into(),
            };
            let available = list(obj, "/status/conditions")
                .find(|c| c["type"] == "Available")
                .map_or("Unknown".to_string(), |c| match text(c, "/status") {
                    "True" => "True".into(),
                    s => format!("{s} ({})", text(c, "/reason")),
                });
            (
                vec![
                    col("Name", "string", 0),
                    col("Service", "string", 0),
                    col("Available", "string", 0),
                    col("Age", "string", 0),
                ],
                vec![name, json!(service), json!(available), json!(age(obj))],
            )
        }
        ("certificates.k8s.io", "certificatesigningrequests") => {
            let duration = match obj
                .pointer("/spec/expirationSeconds")
                .and_then(Value::as_i64)
            {
                Some(s) => crate::printers::table::human_duration(s),
                None => "<none>".into(),
            };
            (
                vec![
                    col("Name", "string", 0),
                    col("Age", "string", 0),
                    col("SignerName", "string", 0),
                    col("Requestor", "string", 0),
                    col("RequestedDuration", "string", 0),
                    col("Condition", "string", 0),
                ],
                vec![
                    name,
                    json!(age(obj)),
                    json!(text(obj, "/spec/signerName")),
                    json!(text(obj, "/spec/username")),
                    json!(duration),
                    json!(csr_condition(obj)),
                ],
            )
        }
        _ => return None,
    })
}

/// Upstream's CSR condition cell: `Pending`, or the conditions set
/// (`Approved`, `Denied`, `Failed`), then `Issued` once signed.
fn csr_condition(obj: &Value) -> String {
    let mut parts: Vec<&str> = list(obj, "/status/conditions")
        .filter(|c| c["status"] == "True")
        .filter_map(|c| c["type"].as_str())
        .collect();
    if parts.is_empty() {
        parts.push("Pending");
    }
    if obj
        .pointer("/status/certificate")
        .is_some_and(|c| c.as_str().is_some_and(|s| !s.is_empty()))
    {
        parts.push("Issued");
    }
    parts.join(",")
}

/// Upstream's `formatHPAMetrics` for what nothing here measures: each
/// metric's target with `<unknown>` current values (`cpu: <unknown>/80%`),
/// at most three, then `+ N more...`.
fn hpa_targets(obj: &Value) -> String {
    let metrics: Vec<&Value> = list(obj, "/spec/metrics").collect();
    if metrics.is_empty() {
        return "<none>".into();
    }
    let target = |t: &Value| match (
        t.get("averageUtilization").and_then(Value::as_i64),
        t.get("averageValue")
            .or_else(|| t.get("value"))
            .and_then(Value::as_str),
    ) {
        (Some(u), _) => format!("<unknown>/{u}%"),
        (None, Some(v)) => format!("<unknown>/{v}"),
        _ => "<unknown>/<unknown>".into(),
    };
    let mut parts: Vec<String> = metrics
        .iter()
        .take(3)
        .map(|m| {
            let ty = text(m, "/type");
            let key = match ty {
                "Resource" => "resource",
                "ContainerResource" => "containerResource",
                "Pods" => "pods",
                "Object" => "object",
                _ => "external",
            };
            let spec = m.get(key).cloned().unwrap_or_default();
            let t = spec.get("target").cloned().unwrap_or_default();
            match ty {
                "Resource" | "ContainerResource" => {
                    format!("{}: {}", text(&spec, "/name"), target(&t))
                }
                _ => target(&t),
            }
        })
        .collect();
    if metrics.len() > 3 {
        parts.push(format!("+ {} more...", metrics.len() - 3));
    }
    parts.join(", ")
}
