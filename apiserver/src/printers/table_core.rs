//! `kubectl get` columns for Services, Endpoints, EndpointSlices,
//! ServiceAccounts, ResourceQuotas and LimitRanges, as upstream's printers give them.

use serde_json::{Value, json};

use crate::printers::table::{age, col};
use crate::registry::ResourceType;

fn list(v: Option<&Value>) -> impl Iterator<Item = &Value> {
    v.and_then(Value::as_array).into_iter().flatten()
}

fn or_none(parts: Vec<String>, none: &str) -> String {
    if parts.is_empty() {
        none.to_string()
    } else {
        parts.join(",")
    }
}

/// Column definitions and cells, for the kinds this module prints.
pub(crate) fn cells(
    rt: &ResourceType,
    obj: &Value,
    name: Value,
) -> Option<(Vec<Value>, Vec<Value>)> {
    Some(match (rt.group.as_str(), rt.resource.as_str()) {
        ("", "services") => {
            let spec = obj.get("spec").cloned().unwrap_or_default();
            let ty = spec["type"].as_str().unwrap_or("ClusterIP");
            let ports: Vec<String> = list(spec.get("ports"))
                .map(|p| {
                    let proto = p["protocol"].as_str().unwrap_or("TCP");
                    match p.get("nodePort").and_then(Value::as_i64) {
                        Some(n) => format!("{}:{n}/{proto}", p["port"]),
                        None => format!("{}/{proto}", p["port"]),
                    }
                })
                .collect();
            let mut external: Vec<String> = list(spec.get("externalIPs"))
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect();
            match ty {
                "ExternalName" => {
                    external.push(spec["externalName"].as_str().unwrap_or("").to_string())
                }
                "LoadBalancer" => {
                    external.extend(
                        list(obj.pointer("/status/loadBalancer/ingress"))
                            .filter_map(|i| i.get("ip").or_else(|| i.get("hostname")))
                            .filter_map(Value::as_str)
                            .map(str::to_string),
                    );
                    if external.is_empty() {
                        external.push("<pending>".into());
                    }
                }
                _ => {}
            }
            let selector: Vec<String> = spec
                .get("selector")
                .and_then(Value::as_object)
                .into_iter()
                .flatten()
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
                .collect();
            (
                vec![
                    col("Name", "string", 0),
                    col("Type", "string", 0),
                    col("Cluster-IP", "string", 0),
                    col("External-IP", "string", 0),
                    col("Port(s)", "string", 0),
                    col("Age", "string", 0),
                    col("Selector", "string", 1),
                ],
                vec![
                    name,
                    json!(ty),
                    json!(spec["clusterIP"].as_str().unwrap_or("<none>")),
                    json!(or_none(external, "<none>")),
                    json!(or_none(ports, "<none>")),
                    json!(age(obj)),
                    json!(or_none(selector, "<none>")),
                ],
            )
        }
        ("", "endpoints") => {
            let mut eps = Vec::new();
            for s in list(obj.get("subsets")) {
                for a in list(s.get("addresses")) {
                    let ip = a["ip"].as_str().unwrap_or("");
                    let ports: Vec<&Value> = list(s.get("ports")).collect();
                    if ports.is_empty() {
                        eps.push(ip.to_string());
                    }
                    for p in ports {
                        eps.push(format!("{ip}:{}", p["port"]));
                    }
                }
            }
            (
                vec![
                    col("Name", "string", 0),
                    col("Endpoints", "string", 0),
                    col("Age", "string", 0),
                ],
                vec![name, json!(or_none(eps, "<none>")), json!(age(obj))],
            )
        }
        ("discovery.k8s.io", "endpointslices") => {
            let ports: Vec<String> = list(obj.get("ports"))
                .filter_map(|p| p.get("port"))
                .map(Value::to_string)
                .collect();
            let addrs: Vec<String> = list(obj.get("endpoints"))
                .flat_map(|e| list(e.get("addresses")))
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect();
            (
                vec![
                    col("Name", "string", 0),
                    col("AddressType", "string", 0),
                    col("Ports", "string", 0),
                    col("Endpoints", "string", 0),
                    col("Age", "string", 0),
                ],
                vec![
                    name,
                    json!(obj["addressType"].as_str().unwrap_or("")),
                    json!(or_none(ports, "<unset>")),
                    json!(or_none(addrs, "<unset>")),
                    json!(age(obj)),
                ],
            )
        }
        ("", "serviceaccounts") => (
            vec![
                col("Name", "string", 0),
                col("Secrets", "string", 0),
                col("Age", "string", 0),
            ],
            vec![
                name,
                json!(list(obj.get("secrets")).count().to_string()),
                json!(age(obj)),
            ],
        ),
        // Upstream's printResourceQuota: `used/hard` per resource, sorted,
        // the `limits.*` ones in a column of their own.
        ("", "resourcequotas") => {
            let (mut request, mut limit) = (Vec::new(), Vec::new());
            if let Some(hard) = obj.pointer("/spec/hard").and_then(Value::as_object) {
                let mut names: Vec<&String> = hard.keys().collect();
                names.sort();
                for r in names {
                    let cell = |part: &str| {
                        obj.pointer(&format!("/status/{part}"))
                            .and_then(|m| m.get(r.as_str()))
                            .and_then(Value::as_str)
                            .unwrap_or("0")
                            .to_string()
                    };
                    let text = format!("{r}: {}/{}", cell("used"), cell("hard"));
                    match r.split_once('.') {
                        Some(("limits", _)) => limit.push(text),
                        _ => request.push(text),
                    }
                }
            }
            (
                vec![
                    col("Name", "string", 0),
                    col("Age", "string", 0),
                    col("Request", "string", 0),
                    col("Limit", "string", 0),
                ],
                vec![
                    name,
                    json!(age(obj)),
                    json!(request.join(", ")),
                    json!(limit.join(", ")),
                ],
            )
        }
        // Upstream's printLimitRange: the name and the creation time.
        ("", "limitranges") => (
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
