//! Events are stored once, as core/v1, and served at both core/v1 and
//! events.k8s.io/v1, converting field names as upstream does
//! (`regarding` ⇄ `involvedObject`, `note` ⇄ `message`, `deprecated*` ⇄ the
//! old top-level fields). So an event a controller records through
//! events.k8s.io shows in `kubectl get events` and `kubectl describe`.

use serde_json::{Map, Value};

/// (events.k8s.io/v1 field, core/v1 field)
const RENAMES: &[(&str, &str)] = &[
    ("regarding", "involvedObject"),
    ("note", "message"),
    ("reportingController", "reportingComponent"),
    ("deprecatedSource", "source"),
    ("deprecatedFirstTimestamp", "firstTimestamp"),
    ("deprecatedLastTimestamp", "lastTimestamp"),
    ("deprecatedCount", "count"),
];

fn rename(v: &Value, api_version: &str, to_core: bool) -> Value {
    let Some(o) = v.as_object() else {
        return v.clone();
    };
    let mut out = Map::new();
    for (k, val) in o {
        let k2 = RENAMES
            .iter()
            .find(|(new, old)| if to_core { new == k } else { old == k })
            .map(|(new, old)| if to_core { *old } else { *new })
            .unwrap_or(k.as_str());
        out.insert(k2.to_string(), val.clone());
    }
    out.insert("apiVersion".into(), Value::String(api_version.into()));
    out.insert("kind".into(), Value::String("Event".into()));
    Value::Object(out)
}

/// events.k8s.io/v1 → core/v1 (the stored form).
pub(crate) fn to_core(v: &Value) -> Value {
    rename(v, "v1", true)
}

/// core/v1 (stored) → events.k8s.io/v1.
pub(crate) fn to_events_v1(v: &Value) -> Value {
    rename(v, "events.k8s.io/v1", false)
}

/// Whether a resource type is the events.k8s.io view of core events.
pub(crate) fn is_view(group: &str, resource: &str) -> bool {
    group == "events.k8s.io" && resource == "events"
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn round_trips_and_renames() {
        let new = json!({
            "apiVersion": "events.k8s.io/v1", "kind": "Event",
            "metadata": {"name": "e", "namespace": "default"},
            "regarding": {"kind": "Pod", "name": "p"}, "note": "hi", "reason": "Started",
            "reportingController": "wasmlet", "deprecatedCount": 2, "type": "Normal",
        });
        let core = to_core(&new);
        assert_eq!(core["apiVersion"], "v1");
        assert_eq!(core["involvedObject"]["name"], "p");
        assert_eq!(core["message"], "hi");
        assert_eq!(core["reportingComponent"], "wasmlet");
        assert_eq!(core["count"], 2);
        assert!(core.get("note").is_none());
        assert_eq!(to_events_v1(&core), new);
    }
}
