//! Server-side printing (`Accept: ...;as=Table`), which `kubectl get` asks for:
//! the columns kubectl users know for built-in kinds, and a CRD's
//! `additionalPrinterColumns` for custom resources.

use serde_json::{Value, json};

use super::meta;
use super::registry::ResourceType;

pub(super) fn age(obj: &Value) -> String {
    let Some(ts) = meta::meta_str(obj, "creationTimestamp") else {
        return "<unknown>".into();
    };
    let Ok(t) = chrono::DateTime::parse_from_rfc3339(ts) else {
        return "<unknown>".into();
    };
    human_duration(
        (chrono::Utc::now() - t.with_timezone(&chrono::Utc))
            .num_seconds()
            .max(0),
    )
}

/// kubectl's short durations: 45s, 3m12s, 5h, 2d.
pub fn human_duration(s: i64) -> String {
    match s {
        s if s < 120 => format!("{s}s"),
        s if s < 600 => format!("{}m{}s", s / 60, s % 60),
        s if s < 3 * 3600 => format!("{}m", s / 60),
        s if s < 48 * 3600 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86400),
    }
}

pub(super) fn col(name: &str, ty: &str, priority: i64) -> Value {
    let format = if name == "Name" { "name" } else { "" };
    json!({"name": name, "type": ty, "format": format, "description": "", "priority": priority})
}

fn text(v: Option<&Value>) -> String {
    match v {
        None | Some(Value::Null) => "<none>".into(),
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    }
}

fn pod_status(pod: &Value) -> String {
    if meta::is_deleting(pod) {
        return "Terminating".into();
    }
    let mut reason = text(pod.pointer("/status/phase"));
    if let Some(r) = pod.pointer("/status/reason").and_then(Value::as_str) {
        reason = r.into();
    }
    for list in ["/status/initContainerStatuses", "/status/containerStatuses"] {
        for cs in pod
            .pointer(list)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if let Some(r) = cs.pointer("/state/waiting/reason").and_then(Value::as_str) {
                return r.into();
            }
            if let Some(r) = cs
                .pointer("/state/terminated/reason")
                .and_then(Value::as_str)
                && list.ends_with("/containerStatuses")
                && reason == "Running"
            {
                return r.into();
            }
        }
    }
    reason
}

fn cells(rt: &ResourceType, obj: &Value) -> (Vec<Value>, Vec<Value>) {
    let name = json!(meta::name(obj));
    if let Some(c) = super::table_core::cells(rt, obj, name.clone()) {
        return c;
    }
    match (rt.group.as_str(), rt.resource.as_str()) {
        ("", "pods") => {
            let statuses = obj
                .pointer("/status/containerStatuses")
                .and_then(Value::as_array);
            let total = obj
                .pointer("/spec/containers")
                .and_then(Value::as_array)
                .map_or(0, Vec::len);
            let ready = statuses.map_or(0, |s| s.iter().filter(|c| c["ready"] == true).count());
            let restarts: i64 = statuses.map_or(0, |s| {
                s.iter().filter_map(|c| c["restartCount"].as_i64()).sum()
            });
            (
                vec![
                    col("Name", "string", 0),
                    col("Ready", "string", 0),
                    col("Status", "string", 0),
                    col("Restarts", "string", 0),
                    col("Age", "string", 0),
                    col("IP", "string", 1),
                    col("Node", "string", 1),
                ],
                vec![
                    name,
                    json!(format!("{ready}/{total}")),
                    json!(pod_status(obj)),
                    json!(restarts.to_string()),
                    json!(age(obj)),
                    json!(text(obj.pointer("/status/podIP"))),
                    json!(text(obj.pointer("/spec/nodeName"))),
                ],
            )
        }
        ("", "nodes") => {
            let ready = obj
                .pointer("/status/conditions")
                .and_then(Value::as_array)
                .and_then(|c| c.iter().find(|c| c["type"] == "Ready"))
                .map(|c| {
                    if c["status"] == "True" {
                        "Ready"
                    } else {
                        "NotReady"
                    }
                })
                .unwrap_or("Unknown");
            (
                vec![
                    col("Name", "string", 0),
                    col("Status", "string", 0),
                    col("Roles", "string", 0),
                    col("Age", "string", 0),
                    col("Version", "string", 0),
                ],
                vec![
                    name,
                    json!(ready),
                    json!("<none>"),
                    json!(age(obj)),
                    json!(text(obj.pointer("/status/nodeInfo/kubeletVersion"))),
                ],
            )
        }
        ("", "configmaps") => {
            let n = ["data", "binaryData"]
                .iter()
                .filter_map(|f| obj.get(*f).and_then(Value::as_object))
                .map(|m| m.len())
                .sum::<usize>();
            (
                vec![
                    col("Name", "string", 0),
                    col("Data", "string", 0),
                    col("Age", "string", 0),
                ],
                vec![name, json!(n.to_string()), json!(age(obj))],
            )
        }
        ("", "secrets") => {
            let n = obj
                .get("data")
                .and_then(Value::as_object)
                .map_or(0, |m| m.len());
            (
                vec![
                    col("Name", "string", 0),
                    col("Type", "string", 0),
                    col("Data", "string", 0),
                    col("Age", "string", 0),
                ],
                vec![
                    name,
                    json!(text(obj.get("type"))),
                    json!(n.to_string()),
                    json!(age(obj)),
                ],
            )
        }
        ("", "events") | ("events.k8s.io", "events") => {
            let last = obj
                .get("lastTimestamp")
                .or_else(|| obj.get("eventTime"))
                .and_then(Value::as_str)
                .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
                .map(|t| {
                    human_duration(
                        (chrono::Utc::now() - t.with_timezone(&chrono::Utc))
                            .num_seconds()
                            .max(0),
                    )
                })
                .unwrap_or_else(|| age(obj));
            let inv = obj.get("involvedObject").or_else(|| obj.get("regarding"));
            let object = inv
                .map(|i| {
                    format!(
                        "{}/{}",
                        i["kind"].as_str().unwrap_or("").to_lowercase(),
                        i["name"].as_str().unwrap_or("")
                    )
                })
                .unwrap_or_default();
            let message = obj.get("message").or_else(|| obj.get("note"));
            (
                vec![
                    col("Last Seen", "string", 0),
                    col("Type", "string", 0),
                    col("Reason", "string", 0),
                    col("Object", "string", 0),
                    col("Message", "string", 0),
                ],
                vec![
                    json!(last),
                    json!(text(obj.get("type"))),
                    json!(text(obj.get("reason"))),
                    json!(object),
                    json!(text(message)),
                ],
            )
        }
        ("", "namespaces") => (
            vec![
                col("Name", "string", 0),
                col("Status", "string", 0),
                col("Age", "string", 0),
            ],
            vec![
                name,
                json!(text(obj.pointer("/status/phase"))),
                json!(age(obj)),
            ],
        ),
        ("apps", "statefulsets") => {
            let ready = obj
                .pointer("/status/readyReplicas")
                .and_then(Value::as_i64)
                .unwrap_or(0);
            let want = obj
                .pointer("/spec/replicas")
                .and_then(Value::as_i64)
                .unwrap_or(1);
            (
                vec![
                    col("Name", "string", 0),
                    col("Ready", "string", 0),
                    col("Age", "string", 0),
                ],
                vec![name, json!(format!("{ready}/{want}")), json!(age(obj))],
            )
        }
        _ if !rt.printer_columns.is_empty() => {
            let mut defs = vec![col("Name", "string", 0)];
            let mut row = vec![name];
            for c in &rt.printer_columns {
                defs.push(col(&c.name, &c.type_, c.priority));
                let v = c.value(obj);
                row.push(match (c.type_.as_str(), v) {
                    ("date", Some(Value::String(ts))) => json!(
                        chrono::DateTime::parse_from_rfc3339(ts)
                            .map(|t| human_duration(
                                (chrono::Utc::now() - t.with_timezone(&chrono::Utc))
                                    .num_seconds()
                                    .max(0)
                            ))
                            .unwrap_or_else(|_| ts.clone())
                    ),
                    (_, v) => json!(text(v)),
                });
            }
            if !rt.printer_columns.iter().any(|c| c.name == "Age") {
                defs.push(col("Age", "string", 0));
                row.push(json!(age(obj)));
            }
            (defs, row)
        }
        _ => (
            vec![col("Name", "string", 0), col("Age", "string", 0)],
            vec![name, json!(age(obj))],
        ),
    }
}

pub fn table(
    rt: &ResourceType,
    objects: &[Value],
    continue_token: Option<&str>,
    rv: &str,
) -> Value {
    let mut defs = None;
    let mut rows = Vec::new();
    for obj in objects {
        let (d, c) = cells(rt, obj);
        defs.get_or_insert(d);
        rows.push(json!({"cells": c, "object": obj}));
    }
    let defs = defs.unwrap_or_else(|| cells(rt, &json!({"metadata": {}})).0);
    let mut metadata = json!({"resourceVersion": rv});
    if let Some(c) = continue_token {
        metadata["continue"] = json!(c);
    }
    json!({"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": metadata, "columnDefinitions": defs, "rows": rows})
}
