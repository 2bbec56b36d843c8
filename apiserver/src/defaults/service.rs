//! Services: `SetDefaults_Service` (core/v1). The cluster IP is allocated at
//! create by [`crate::services`], which also sets the IP families.

use serde_json::{Value, json};

use super::{default, each, object};

pub(crate) fn apply(obj: &mut Value) {
    let Some(o) = obj.as_object_mut() else { return };
    let Some(spec) = object(o, "spec") else {
        return;
    };
    default(spec, "type", json!("ClusterIP"));
    default(spec, "sessionAffinity", json!("None"));
    if spec["sessionAffinity"] == "ClientIP" {
        let timeout = spec
            .get_mut("sessionAffinityConfig")
            .and_then(Value::as_object_mut);
        if timeout.is_none() {
            spec.insert("sessionAffinityConfig".into(), json!({}));
        }
        if let Some(c) = spec
            .get_mut("sessionAffinityConfig")
            .and_then(Value::as_object_mut)
            .and_then(|c| object(c, "clientIP"))
        {
            default(c, "timeoutSeconds", json!(10800));
        }
    }
    let ty = spec["type"].as_str().unwrap_or("").to_string();
    for p in each(spec, "ports") {
        default(p, "protocol", json!("TCP"));
        // targetPort: the port itself unless named or numbered.
        let unset = match p.get("targetPort") {
            None | Some(Value::Null) => true,
            Some(Value::Number(n)) => n.as_i64() == Some(0),
            Some(Value::String(s)) => s.is_empty(),
            Some(_) => false,
        };
        if unset && let Some(port) = p.get("port").cloned() {
            p.insert("targetPort".into(), port);
        }
    }
    if ty == "NodePort" || ty == "LoadBalancer" {
        default(spec, "externalTrafficPolicy", json!("Cluster"));
    }
    if ty == "LoadBalancer" {
        default(spec, "allocateLoadBalancerNodePorts", json!(true));
    }
    if ty != "ExternalName" {
        default(spec, "internalTrafficPolicy", json!("Cluster"));
    }
}
