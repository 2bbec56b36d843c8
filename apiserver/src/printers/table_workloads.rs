//! `kubectl get` columns for DaemonSets and ReplicationControllers, as
//! upstream's `printDaemonSet` and `printReplicationController`
//! (`pkg/printers/internalversion/printers.go`).

use serde_json::{Map, Value, json};

use crate::printers::table::{age, col};
use crate::printers::table_apps::{int, replica_counts, template_cells, template_columns};
use crate::registry::ResourceType;

/// `labels.FormatLabels`: `k=v` pairs sorted by key, `<none>` when empty.
pub(super) fn format_labels(map: Option<&Map<String, Value>>) -> String {
    let mut pairs: Vec<String> = map
        .into_iter()
        .flatten()
        .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
        .collect();
    if pairs.is_empty() {
        return "<none>".into();
    }
    pairs.sort();
    pairs.join(",")
}

pub(crate) fn cells(
    rt: &ResourceType,
    obj: &Value,
    name: Value,
) -> Option<(Vec<Value>, Vec<Value>)> {
    Some(match (rt.group.as_str(), rt.resource.as_str()) {
        ("apps", "daemonsets") => {
            let mut defs = vec![
                col("Name", "string", 0),
                col("Desired", "integer", 0),
                col("Current", "integer", 0),
                col("Ready", "integer", 0),
                col("Up-to-date", "integer", 0),
                col("Available", "integer", 0),
                col("Node Selector", "string", 0),
                col("Age", "string", 0),
            ];
            defs.extend(template_columns(true));
            let node_selector = obj
                .pointer("/spec/template/spec/nodeSelector")
                .and_then(Value::as_object);
            let mut row = vec![
                name,
                json!(int(obj, "/status/desiredNumberScheduled")),
                json!(int(obj, "/status/currentNumberScheduled")),
                json!(int(obj, "/status/numberReady")),
                json!(int(obj, "/status/updatedNumberScheduled")),
                json!(int(obj, "/status/numberAvailable")),
                json!(format_labels(node_selector)),
                json!(age(obj)),
            ];
            row.extend(template_cells(obj, true));
            (defs, row)
        }
        ("", "replicationcontrollers") => {
            let (defs, mut row) = replica_counts(obj, name);
            // The selector is a label map, printed as `FormatLabels` does.
            row.extend(template_cells(obj, false));
            row.push(json!(format_labels(
                obj.pointer("/spec/selector").and_then(Value::as_object)
            )));
            (defs, row)
        }
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::registry::Registry;

    fn row(group: &str, resource: &str, obj: Value) -> Vec<(String, Value)> {
        let rt = Registry::with_builtins().get(group, resource).unwrap();
        let (defs, cells) = cells(&rt, &obj, json!("x")).unwrap();
        defs.iter()
            .map(|d| d["name"].as_str().unwrap().to_string())
            .zip(cells)
            .collect()
    }

    #[test]
    fn daemonset_columns_are_upstreams() {
        let ds = json!({"metadata": {"name": "x"},
            "spec": {"selector": {"matchLabels": {"app": "a"}}, "template": {"spec": {
                "nodeSelector": {"zone": "b", "kubernetes.io/os": "wasi"},
                "containers": [{"name": "c", "image": "i:1"}]}}},
            "status": {"desiredNumberScheduled": 2, "currentNumberScheduled": 2, "numberReady": 1,
                "updatedNumberScheduled": 1, "numberAvailable": 1}});
        let r = row("apps", "daemonsets", ds);
        let names: Vec<&str> = r.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "Name",
                "Desired",
                "Current",
                "Ready",
                "Up-to-date",
                "Available",
                "Node Selector",
                "Age",
                "Containers",
                "Images",
                "Selector"
            ]
        );
        let cells: Vec<Value> = r.into_iter().map(|(_, v)| v).collect();
        assert_eq!(
            cells[1..6],
            [json!(2), json!(2), json!(1), json!(1), json!(1)]
        );
        assert_eq!(cells[6], "kubernetes.io/os=wasi,zone=b");
        assert_eq!(cells[8..], [json!("c"), json!("i:1"), json!("app=a")]);
    }

    #[test]
    fn replication_controller_columns_are_upstreams() {
        let rc = json!({"metadata": {"name": "x"},
            "spec": {"replicas": 3, "selector": {"b": "2", "a": "1"}, "template": {"spec": {
                "containers": [{"name": "c", "image": "i:1"}, {"name": "d", "image": "j:2"}]}}},
            "status": {"replicas": 2, "readyReplicas": 1}});
        let r = row("", "replicationcontrollers", rc);
        let names: Vec<&str> = r.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "Name",
                "Desired",
                "Current",
                "Ready",
                "Age",
                "Containers",
                "Images",
                "Selector"
            ]
        );
        let cells: Vec<Value> = r.into_iter().map(|(_, v)| v).collect();
        assert_eq!(cells[1..4], [json!(3), json!(2), json!(1)]);
        assert_eq!(
            cells[5..],
            [json!("c,d"), json!("i:1,j:2"), json!("a=1,b=2")]
        );
    }
}
