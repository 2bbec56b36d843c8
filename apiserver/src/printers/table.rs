//! Server-side printing (`Accept: ...;as=Table`), which `kubectl get` asks for:
//! the columns kubectl users know for built-in kinds, and a CRD's
//! `additionalPrinterColumns` for custom resources.

use serde_json::{Value, json};

use crate::meta;
use crate::registry::ResourceType;

pub(super) fn age(obj: &Value) -> String {
    meta::meta_str(obj, "creationTimestamp")
        .and_then(since)
        .unwrap_or_else(|| "<unknown>".into())
}

/// Upstream's `duration.HumanDuration`: 45s, 3m12s, 95m, 4h30m, 30h, 3d4h,
/// 20d, 2y30d, 9y.
pub(crate) fn human_duration(s: i64) -> String {
    let either = |a: i64, unit_a: &str, b: i64, unit_b: &str| {
        if b == 0 {
            format!("{a}{unit_a}")
        } else {
            format!("{a}{unit_a}{b}{unit_b}")
        }
    };
    let (m, h, d) = (s / 60, s / 3600, s / 86400);
    match s {
        s if s < 0 => "0s".into(),
        s if s < 120 => format!("{s}s"),
        _ if m < 10 => either(m, "m", s % 60, "s"),
        _ if m < 180 => format!("{m}m"),
        _ if h < 8 => either(h, "h", m % 60, "m"),
        _ if h < 48 => format!("{h}h"),
        _ if h < 24 * 8 => either(d, "d", h % 24, "h"),
        _ if h < 24 * 365 * 2 => format!("{d}d"),
        _ if h < 24 * 365 * 8 => either(d / 365, "y", d % 365, "d"),
        _ => format!("{}y", d / 365),
    }
}

/// The time since an RFC 3339 timestamp, as [`human_duration`].
fn since(ts: &str) -> Option<String> {
    let t = chrono::DateTime::parse_from_rfc3339(ts).ok()?;
    Some(human_duration(
        (chrono::Utc::now() - t.with_timezone(&chrono::Utc)).num_seconds(),
    ))
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

/// The pod's STATUS, READY and RESTARTS cells as upstream's `printPod`
/// reads them (init containers as plain ones: wasm pods have none that
/// restart).
fn pod_cells(pod: &Value) -> (String, String, String) {
    let phase = text(pod.pointer("/status/phase"));
    let mut reason = pod
        .pointer("/status/reason")
        .and_then(Value::as_str)
        .map_or_else(|| phase.clone(), str::to_string);
    let conditions = pod.pointer("/status/conditions").and_then(Value::as_array);
    if conditions
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "PodScheduled" && c["reason"] == "SchedulingGated")
    {
        reason = "SchedulingGated".into();
    }
    let list = |p: &str| {
        pod.pointer(p)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
    };
    let mut initializing = false;
    let inits = pod
        .pointer("/spec/initContainers")
        .and_then(Value::as_array)
        .map_or(0, Vec::len);
    for (i, c) in list("/status/initContainerStatuses").enumerate() {
        let term = c.pointer("/state/terminated");
        if term.is_some_and(|t| t["exitCode"] == 0) {
            continue;
        }
        reason = match (
            term,
            c.pointer("/state/waiting/reason").and_then(Value::as_str),
        ) {
            (Some(t), _) => match t["reason"].as_str() {
                Some(r) if !r.is_empty() => format!("Init:{r}"),
                _ => format!("Init:ExitCode:{}", t["exitCode"]),
            },
            (None, Some(w)) if !w.is_empty() && w != "PodInitializing" => format!("Init:{w}"),
            _ => format!("Init:{i}/{inits}"),
        };
        initializing = true;
        break;
    }
    let statuses: Vec<&Value> = list("/status/containerStatuses").collect();
    let mut restarts: i64 = 0;
    let mut last_restart: Option<&str> = None;
    let mut ready = 0;
    let initialized = conditions
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Initialized" && c["status"] == "True");
    if !initializing || initialized {
        let mut running = false;
        for c in statuses.iter().rev() {
            restarts += c["restartCount"].as_i64().unwrap_or(0);
            if let Some(at) = c
                .pointer("/lastState/terminated/finishedAt")
                .and_then(Value::as_str)
                && last_restart.is_none_or(|l| l < at)
            {
                last_restart = Some(at);
            }
            let waiting = c
                .pointer("/state/waiting/reason")
                .and_then(Value::as_str)
                .filter(|r| !r.is_empty());
            let term = c.pointer("/state/terminated");
            if let Some(w) = waiting {
                reason = w.into();
            } else if let Some(t) = term {
                reason = match t["reason"].as_str() {
                    Some(r) if !r.is_empty() => r.into(),
                    _ => format!("ExitCode:{}", t["exitCode"]),
                };
            } else if c["ready"] == true && c.pointer("/state/running").is_some() {
                running = true;
                ready += 1;
            }
        }
        if reason == "Completed" && running {
            let pod_ready = conditions
                .into_iter()
                .flatten()
                .any(|c| c["type"] == "Ready" && c["status"] == "True");
            reason = if pod_ready { "Running" } else { "NotReady" }.into();
        }
    }
    if meta::is_deleting(pod) && !matches!(phase.as_str(), "Succeeded" | "Failed") {
        reason = "Terminating".into();
    }
    let total = pod
        .pointer("/spec/containers")
        .and_then(Value::as_array)
        .map_or(0, Vec::len);
    let restarts = match last_restart.and_then(since) {
        Some(ago) if restarts != 0 => format!("{restarts} ({ago} ago)"),
        _ => restarts.to_string(),
    };
    (reason, format!("{ready}/{total}"), restarts)
}

/// A node's roles, from `node-role.kubernetes.io/ROLE` and
/// `kubernetes.io/role` labels (upstream's `findNodeRoles`).
fn node_roles(node: &Value) -> String {
    let mut roles: Vec<String> = node
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| {
            if let Some(role) = k.strip_prefix("node-role.kubernetes.io/") {
                Some(role.to_string())
            } else if k == "kubernetes.io/role" {
                v.as_str().map(str::to_string)
            } else {
                None
            }
        })
        .filter(|r| !r.is_empty())
        .collect();
    roles.sort();
    roles.dedup();
    if roles.is_empty() {
        "<none>".into()
    } else {
        roles.join(",")
    }
}

/// The node's first address of `kind`, `<none>` without one.
fn node_address(node: &Value, kind: &str) -> String {
    node.pointer("/status/addresses")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|a| a["type"] == kind)
        .and_then(|a| a["address"].as_str())
        .unwrap_or("<none>")
        .to_string()
}

fn cells(rt: &ResourceType, obj: &Value) -> (Vec<Value>, Vec<Value>) {
    let name = json!(meta::name(obj));
    if let Some(c) = crate::printers::table_core::cells(rt, obj, name.clone()) {
        return c;
    }
    if let Some(c) = crate::printers::table_apps::cells(rt, obj, name.clone()) {
        return c;
    }
    if let Some(c) = crate::printers::table_batch::cells(rt, obj, name.clone()) {
        return c;
    }
    if let Some(c) = crate::printers::table_workloads::cells(rt, obj, name.clone()) {
        return c;
    }
    if let Some(c) = crate::printers::table_stored::cells(rt, obj, name.clone()) {
        return c;
    }
    match (rt.group.as_str(), rt.resource.as_str()) {
        ("", "pods") => {
            let (status, ready, restarts) = pod_cells(obj);
            let gates = obj
                .pointer("/spec/readinessGates")
                .and_then(Value::as_array);
            let gates = match gates {
                Some(g) if !g.is_empty() => {
                    let conds = obj.pointer("/status/conditions").and_then(Value::as_array);
                    let met = g
                        .iter()
                        .filter(|gate| {
                            conds.into_iter().flatten().any(|c| {
                                c["type"] == gate["conditionType"] && c["status"] == "True"
                            })
                        })
                        .count();
                    format!("{met}/{}", g.len())
                }
                _ => "<none>".into(),
            };
            let ip = obj
                .pointer("/status/podIPs/0/ip")
                .or_else(|| obj.pointer("/status/podIP"))
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .unwrap_or("<none>");
            (
                vec![
                    col("Name", "string", 0),
                    col("Ready", "string", 0),
                    col("Status", "string", 0),
                    col("Restarts", "string", 0),
                    col("Age", "string", 0),
                    col("IP", "string", 1),
                    col("Node", "string", 1),
                    col("Nominated Node", "string", 1),
                    col("Readiness Gates", "string", 1),
                ],
                vec![
                    name,
                    json!(ready),
                    json!(status),
                    json!(restarts),
                    json!(age(obj)),
                    json!(ip),
                    json!(text(obj.pointer("/spec/nodeName"))),
                    json!(text(obj.pointer("/status/nominatedNodeName"))),
                    json!(gates),
                ],
            )
        }
        ("", "nodes") => {
            let mut status = obj
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
                .unwrap_or("Unknown")
                .to_string();
            if obj.pointer("/spec/unschedulable") == Some(&json!(true)) {
                status.push_str(",SchedulingDisabled");
            }
            let info = |f: &str| {
                obj.pointer(&format!("/status/nodeInfo/{f}"))
                    .and_then(Value::as_str)
                    .filter(|s| !s.is_empty())
                    .unwrap_or("<unknown>")
                    .to_string()
            };
            (
                vec![
                    col("Name", "string", 0),
                    col("Status", "string", 0),
                    col("Roles", "string", 0),
                    col("Age", "string", 0),
                    col("Version", "string", 0),
                    col("Internal-IP", "string", 1),
                    col("External-IP", "string", 1),
                    col("OS-Image", "string", 1),
                    col("Kernel-Version", "string", 1),
                    col("Container-Runtime", "string", 1),
                ],
                vec![
                    name,
                    json!(status),
                    json!(node_roles(obj)),
                    json!(age(obj)),
                    json!(text(obj.pointer("/status/nodeInfo/kubeletVersion"))),
                    json!(node_address(obj, "InternalIP")),
                    json!(node_address(obj, "ExternalIP")),
                    json!(info("osImage")),
                    json!(info("kernelVersion")),
                    json!(info("containerRuntimeVersion")),
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
            // core/v1 field names first, then events.k8s.io/v1's.
            let field = |core: &str, new: &str| obj.get(core).or_else(|| obj.get(new));
            let ts = |v: Option<&Value>| {
                v.and_then(Value::as_str)
                    .filter(|t| !t.is_empty())
                    .and_then(since)
            };
            let first = ts(field("firstTimestamp", "deprecatedFirstTimestamp"))
                .or_else(|| ts(obj.get("eventTime")))
                .unwrap_or_else(|| "<unknown>".into());
            let series = obj.get("series");
            let last = match series {
                Some(s) => ts(s.get("lastObservedTime")),
                None => ts(field("lastTimestamp", "deprecatedLastTimestamp")),
            }
            .unwrap_or_else(|| first.clone());
            let count = series
                .and_then(|s| s["count"].as_i64())
                .or_else(|| field("count", "deprecatedCount").and_then(Value::as_i64))
                .filter(|c| *c != 0)
                .unwrap_or(1);
            let inv = field("involvedObject", "regarding");
            let kind = inv
                .and_then(|i| i["kind"].as_str())
                .unwrap_or("")
                .to_lowercase();
            let target = match inv
                .and_then(|i| i["name"].as_str())
                .filter(|n| !n.is_empty())
            {
                Some(n) => format!("{kind}/{n}"),
                None => kind,
            };
            let source = field("source", "deprecatedSource");
            let part = |src: &str, reporting: &str| {
                source
                    .and_then(|s| s[src].as_str())
                    .filter(|s| !s.is_empty())
                    .or_else(|| {
                        obj.get(reporting)
                            .and_then(Value::as_str)
                            .filter(|s| !s.is_empty())
                    })
            };
            let source = [
                part("component", "reportingController"),
                part("host", "reportingInstance"),
            ]
            .into_iter()
            .flatten()
            .collect::<Vec<_>>()
            .join(", ");
            let message = field("message", "note")
                .and_then(Value::as_str)
                .unwrap_or("")
                .trim();
            (
                vec![
                    col("Last Seen", "string", 0),
                    col("Type", "string", 0),
                    col("Reason", "string", 0),
                    col("Object", "string", 0),
                    col("Subobject", "string", 1),
                    col("Source", "string", 1),
                    col("Message", "string", 0),
                    col("First Seen", "string", 1),
                    col("Count", "string", 1),
                    col("Name", "string", 1),
                ],
                vec![
                    json!(last),
                    json!(obj.get("type").and_then(Value::as_str).unwrap_or("")),
                    json!(obj.get("reason").and_then(Value::as_str).unwrap_or("")),
                    json!(target),
                    json!(inv.and_then(|i| i["fieldPath"].as_str()).unwrap_or("")),
                    json!(source),
                    json!(message),
                    json!(first),
                    json!(count),
                    name,
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
        _ if !rt.printer_columns.is_empty() => {
            let mut defs = vec![col("Name", "string", 0)];
            let mut row = vec![name];
            for c in &rt.printer_columns {
                defs.push(col(&c.name, &c.type_, c.priority));
                let v = c.value(obj);
                row.push(match (c.type_.as_str(), v) {
                    ("date", Some(Value::String(ts))) => {
                        json!(since(ts).unwrap_or_else(|| ts.clone()))
                    }
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

pub(crate) fn table(
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

#[cfg(test)]
mod tests {
    use super::{human_duration, pod_cells};
    use serde_json::json;

    #[test]
    fn durations_read_as_upstreams() {
        for (s, want) in [
            (45, "45s"),
            (192, "3m12s"),
            (300, "5m"),
            (95 * 60, "95m"),
            (4 * 3600 + 30 * 60, "4h30m"),
            (30 * 3600, "30h"),
            (3 * 86400 + 4 * 3600, "3d4h"),
            (20 * 86400, "20d"),
            (2 * 365 * 86400 + 30 * 86400, "2y30d"),
            (9 * 365 * 86400, "9y"),
        ] {
            assert_eq!(human_duration(s), want, "{s} s");
        }
    }

    /// A finished pod's STATUS is its container's reason (`Completed`), as
    /// kubectl shows it, not the phase.
    #[test]
    fn a_succeeded_pod_reads_completed_and_a_crash_looping_one_its_waiting_reason() {
        let pod = |phase: &str, state: serde_json::Value| {
            json!({"spec": {"containers": [{"name": "main"}]},
                "status": {"phase": phase, "containerStatuses": [{"name": "main", "ready": false, "restartCount": 0, "state": state}]}})
        };
        let done = pod(
            "Succeeded",
            json!({"terminated": {"exitCode": 0, "reason": "Completed"}}),
        );
        assert_eq!(
            pod_cells(&done),
            ("Completed".into(), "0/1".into(), "0".into())
        );
        let failed = pod("Failed", json!({"terminated": {"exitCode": 3}}));
        assert_eq!(pod_cells(&failed).0, "ExitCode:3");
        let looping = pod(
            "Running",
            json!({"waiting": {"reason": "CrashLoopBackOff"}}),
        );
        assert_eq!(pod_cells(&looping).0, "CrashLoopBackOff");
        let mut running = pod("Running", json!({"running": {}}));
        running["status"]["containerStatuses"][0]["ready"] = json!(true);
        running["status"]["containerStatuses"][0]["restartCount"] = json!(2);
        assert_eq!(
            pod_cells(&running),
            ("Running".into(), "1/1".into(), "2".into())
        );
    }
}
