//! Pods and pod templates: `SetDefaults_PodSpec`, `_Container`, `_Volume`,
//! `_Probe` and friends (core/v1), and what the ServiceAccount,
//! DefaultTolerationSeconds and Priority admission plugins add to a new pod.

use serde_json::{Map, Value, json};

use super::{default, each, object};

/// The file mode upstream gives projected files (0644).
const DEFAULT_MODE: i64 = 0o644;

/// What every pod spec gets, a template's as well as a pod's.
pub(crate) fn spec(spec: &mut Map<String, Value>) {
    default(spec, "restartPolicy", json!("Always"));
    default(spec, "dnsPolicy", json!("ClusterFirst"));
    default(spec, "schedulerName", json!("default-scheduler"));
    default(spec, "terminationGracePeriodSeconds", json!(30));
    default(spec, "securityContext", json!({}));
    for group in ["initContainers", "containers", "ephemeralContainers"] {
        for c in each(spec, group) {
            container(c);
        }
    }
    for v in each(spec, "volumes") {
        volume(v);
    }
    if let Some(sa) = spec
        .get("serviceAccountName")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
    {
        // The deprecated alias always mirrors the name (v1 conversion).
        let sa = sa.to_string();
        spec.insert("serviceAccount".into(), json!(sa));
    }
}

/// What only a pod gets (`SetDefaults_Pod`): service links, and requests
/// copied from limits where a container names limits but no requests.
pub(crate) fn pod(spec: &mut Map<String, Value>) {
    default(spec, "enableServiceLinks", json!(true));
    for group in ["initContainers", "containers"] {
        for c in each(spec, group) {
            let Some(res) = c.get_mut("resources").and_then(Value::as_object_mut) else {
                continue;
            };
            let Some(limits) = res.get("limits").and_then(Value::as_object).cloned() else {
                continue;
            };
            if let Some(requests) = object(res, "requests") {
                for (k, v) in limits {
                    requests.entry(k).or_insert(v);
                }
            }
        }
    }
}

/// The admission plugins' additions to a pod being created.
pub(crate) fn admission(spec: &mut Map<String, Value>) {
    // ServiceAccount: every pod runs as one, `default` unless named.
    default(spec, "serviceAccountName", json!("default"));
    let sa = spec["serviceAccountName"].clone();
    spec.insert("serviceAccount".into(), sa);
    default_tolerations(spec);
    // Priority and preemptionPolicy come from the pod's PriorityClass,
    // resolved by the Priority admission (`crate::priority`).
}

/// DefaultTolerationSeconds: pods stay 300 s on a node that went not-ready
/// or unreachable, unless they already tolerate it. Upstream's plugin runs
/// on create and on update, so re-applying a manifest that lists its own
/// tolerations gets these back rather than removing them (which pod update
/// validation forbids).
pub(crate) fn default_tolerations(spec: &mut Map<String, Value>) {
    let mut add = Vec::new();
    for key in [
        "node.kubernetes.io/not-ready",
        "node.kubernetes.io/unreachable",
    ] {
        let tolerated = spec
            .get("tolerations")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .any(|t| {
                let k = t.get("key").and_then(Value::as_str).unwrap_or("");
                let e = t.get("effect").and_then(Value::as_str).unwrap_or("");
                (k == key || k.is_empty()) && (e == "NoExecute" || e.is_empty())
            });
        if !tolerated {
            add.push(json!({"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}));
        }
    }
    if !add.is_empty() {
        match spec.get_mut("tolerations").and_then(Value::as_array_mut) {
            Some(list) => list.extend(add),
            None => {
                spec.insert("tolerations".into(), Value::Array(add));
            }
        }
    }
}

fn container(c: &mut Map<String, Value>) {
    let image = c.get("image").and_then(Value::as_str).unwrap_or("");
    default(c, "imagePullPolicy", json!(pull_policy(image)));
    default(c, "terminationMessagePath", json!("/dev/termination-log"));
    default(c, "terminationMessagePolicy", json!("File"));
    // A struct, not a pointer, upstream: always present, if empty.
    default(c, "resources", json!({}));
    for p in each(c, "ports") {
        default(p, "protocol", json!("TCP"));
    }
    for e in each(c, "env") {
        if let Some(f) = e
            .get_mut("valueFrom")
            .and_then(|v| v.get_mut("fieldRef"))
            .and_then(Value::as_object_mut)
        {
            default(f, "apiVersion", json!("v1"));
        }
    }
    for probe in ["livenessProbe", "readinessProbe", "startupProbe"] {
        if let Some(p) = c.get_mut(probe).and_then(Value::as_object_mut) {
            default(p, "timeoutSeconds", json!(1));
            default(p, "periodSeconds", json!(10));
            default(p, "successThreshold", json!(1));
            default(p, "failureThreshold", json!(3));
            http_get(p);
        }
    }
    if let Some(l) = c.get_mut("lifecycle").and_then(Value::as_object_mut) {
        for hook in ["postStart", "preStop"] {
            if let Some(h) = l.get_mut(hook).and_then(Value::as_object_mut) {
                http_get(h);
            }
        }
    }
}

fn http_get(handler: &mut Map<String, Value>) {
    if let Some(h) = handler.get_mut("httpGet").and_then(Value::as_object_mut) {
        default(h, "path", json!("/"));
        default(h, "scheme", json!("HTTP"));
    }
}

/// Upstream parses the reference: the tag `latest` (also implied by no tag
/// and no digest) pulls always, anything else (a tag, a digest, a reference
/// that does not parse, such as a `file://` module) if not present.
pub(crate) fn pull_policy(image: &str) -> &'static str {
    if image.contains("://") || image.contains('@') || image.is_empty() {
        return "IfNotPresent";
    }
    let last = image.rsplit('/').next().unwrap_or(image);
    match last.split_once(':') {
        Some((_, "latest")) | None => "Always",
        Some(_) => "IfNotPresent",
    }
}

fn volume(v: &mut Map<String, Value>) {
    if v.keys().all(|k| k == "name") {
        v.insert("emptyDir".into(), json!({}));
    }
    for source in ["secret", "configMap", "downwardAPI", "projected"] {
        if let Some(s) = v.get_mut(source).and_then(Value::as_object_mut) {
            default(s, "defaultMode", json!(DEFAULT_MODE));
            for item in each(s, "items") {
                field_ref(item);
            }
            for p in each(s, "sources") {
                if let Some(d) = p.get_mut("downwardAPI").and_then(Value::as_object_mut) {
                    for item in each(d, "items") {
                        field_ref(item);
                    }
                }
                if let Some(t) = p
                    .get_mut("serviceAccountToken")
                    .and_then(Value::as_object_mut)
                {
                    default(t, "expirationSeconds", json!(3600));
                }
            }
        }
    }
    if let Some(h) = v.get_mut("hostPath").and_then(Value::as_object_mut) {
        // HostPathUnset is the empty string, and upstream stores it.
        h.entry("type").or_insert(json!(""));
    }
}

fn field_ref(item: &mut Map<String, Value>) {
    if let Some(f) = item.get_mut("fieldRef").and_then(Value::as_object_mut) {
        default(f, "apiVersion", json!("v1"));
    }
}

/// The pod's QoS class from its (defaulted) containers' cpu and memory
/// requests and limits, as upstream's `GetPodQOS`. Quantities are compared as
/// written, so `1` and `1000m` count as different.
pub(crate) fn qos_class(spec: &Value) -> &'static str {
    let containers = ["initContainers", "containers"]
        .iter()
        .filter_map(|g| spec.get(*g).and_then(Value::as_array))
        .flatten();
    let (mut any, mut guaranteed) = (false, true);
    for c in containers {
        let get = |kind: &str, r: &str| c.pointer(&format!("/resources/{kind}/{r}")).cloned();
        for r in ["cpu", "memory"] {
            let (req, lim) = (get("requests", r), get("limits", r));
            any |= req.is_some() || lim.is_some();
            if lim.is_none() || req != lim {
                guaranteed = false;
            }
        }
    }
    match (any, guaranteed) {
        (false, _) => "BestEffort",
        (true, true) => "Guaranteed",
        (true, false) => "Burstable",
    }
}
