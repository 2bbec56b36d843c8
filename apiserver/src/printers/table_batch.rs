//! `kubectl get` columns for batch/v1 Jobs and CronJobs, as upstream's
//! `printJob` and `printCronJob` (`pkg/printers/internalversion`) give
//! them. The wide (priority 1) columns are always sent; kubectl shows them
//! with `-o wide`.

use serde_json::{Value, json};
use wasmlet_apimachinery::selector::LabelSelector;

use crate::printers::table::{age, col, human_duration};
use crate::registry::ResourceType;

/// Seconds since the epoch of the RFC 3339 time at `ptr`.
fn ts(obj: &Value, ptr: &str) -> Option<i64> {
    let s = obj.pointer(ptr)?.as_str()?;
    Some(chrono::DateTime::parse_from_rfc3339(s).ok()?.timestamp())
}

fn now() -> i64 {
    chrono::Utc::now().timestamp()
}

/// The containers' names and images under `spec` (a pod template's spec).
fn containers(spec: Option<&Value>) -> (Value, Value) {
    let list = spec
        .and_then(|s| s.get("containers"))
        .and_then(Value::as_array);
    let field = |f: &str| {
        list.into_iter()
            .flatten()
            .map(|c| c[f].as_str().unwrap_or(""))
            .collect::<Vec<_>>()
            .join(",")
    };
    (json!(field("name")), json!(field("image")))
}

/// `metav1.FormatLabelSelector`.
fn selector(v: Option<&Value>) -> Value {
    json!(match v {
        None | Some(Value::Null) => "<none>".to_string(),
        Some(s) => match LabelSelector::from_label_selector(s) {
            Ok(sel) if sel.is_empty() => "<none>".into(),
            Ok(sel) => sel.to_string(),
            Err(_) => "<error>".into(),
        },
    })
}

fn wide_columns() -> [Value; 3] {
    [
        col("Containers", "string", 1),
        col("Images", "string", 1),
        col("Selector", "string", 1),
    ]
}

/// Whether the Job has condition `type` with status True (`hasJobCondition`).
fn has_condition(job: &Value, type_: &str) -> bool {
    job.pointer("/status/conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .any(|c| c["type"] == type_ && c["status"] == "True")
}

fn job_status(job: &Value) -> &'static str {
    if has_condition(job, "Complete") {
        "Complete"
    } else if has_condition(job, "Failed") {
        "Failed"
    } else if job.pointer("/metadata/deletionTimestamp").is_some() {
        "Terminating"
    } else if has_condition(job, "Suspended") {
        "Suspended"
    } else if has_condition(job, "FailureTarget") {
        "FailureTarget"
    } else if has_condition(job, "SuccessCriteriaMet") {
        "SuccessCriteriaMet"
    } else {
        "Running"
    }
}

fn completions(job: &Value) -> String {
    let succeeded = job
        .pointer("/status/succeeded")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    match job.pointer("/spec/completions").and_then(Value::as_i64) {
        Some(c) => format!("{succeeded}/{c}"),
        None => match job.pointer("/spec/parallelism").and_then(Value::as_i64) {
            Some(p) if p > 1 => format!("{succeeded}/1 of {p}"),
            _ => format!("{succeeded}/1"),
        },
    }
}

fn duration(job: &Value) -> String {
    let Some(start) = ts(job, "/status/startTime") else {
        return String::new();
    };
    let end = ts(job, "/status/completionTime").unwrap_or_else(now);
    human_duration(end - start)
}

/// Column definitions and cells, for the kinds this module prints.
pub(crate) fn cells(
    rt: &ResourceType,
    obj: &Value,
    name: Value,
) -> Option<(Vec<Value>, Vec<Value>)> {
    Some(match (rt.group.as_str(), rt.resource.as_str()) {
        ("batch", "jobs") => {
            let mut defs = vec![
                col("Name", "string", 0),
                col("Status", "string", 0),
                col("Completions", "string", 0),
                col("Duration", "string", 0),
                col("Age", "string", 0),
            ];
            defs.extend(wide_columns());
            let (names, images) = containers(obj.pointer("/spec/template/spec"));
            let row = vec![
                name,
                json!(job_status(obj)),
                json!(completions(obj)),
                json!(duration(obj)),
                json!(age(obj)),
                names,
                images,
                selector(obj.pointer("/spec/selector")),
            ];
            (defs, row)
        }
        ("batch", "cronjobs") => {
            let mut defs = vec![
                col("Name", "string", 0),
                col("Schedule", "string", 0),
                col("Timezone", "string", 0),
                col("Suspend", "boolean", 0),
                col("Active", "integer", 0),
                col("Last Schedule", "string", 0),
                col("Age", "string", 0),
            ];
            defs.extend(wide_columns());
            let last = ts(obj, "/status/lastScheduleTime")
                .map_or_else(|| "<none>".to_string(), |t| human_duration(now() - t));
            let suspend = match obj.pointer("/spec/suspend").and_then(Value::as_bool) {
                Some(true) => "True",
                Some(false) => "False",
                None => "<unset>",
            };
            let active = obj
                .pointer("/status/active")
                .and_then(Value::as_array)
                .map_or(0, Vec::len);
            let (names, images) = containers(obj.pointer("/spec/jobTemplate/spec/template/spec"));
            let row = vec![
                name,
                json!(
                    obj.pointer("/spec/schedule")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                ),
                json!(
                    obj.pointer("/spec/timeZone")
                        .and_then(Value::as_str)
                        .unwrap_or("<none>")
                ),
                json!(suspend),
                json!(active),
                json!(last),
                json!(age(obj)),
                names,
                images,
                selector(obj.pointer("/spec/jobTemplate/spec/selector")),
            ];
            (defs, row)
        }
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::Registry;

    fn row(resource: &str, obj: Value) -> (Vec<String>, Vec<Value>) {
        let rt = Registry::with_builtins().get("batch", resource).unwrap();
        let (defs, cells) = cells(&rt, &obj, json!("x")).unwrap();
        let names = defs
            .iter()
            .map(|d| d["name"].as_str().unwrap().to_string())
            .collect();
        (names, cells)
    }

    #[test]
    fn a_job_prints_as_kubectl_shows_it() {
        let (names, cells) = row(
            "jobs",
            json!({"metadata": {"name": "x", "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"completions": 3, "parallelism": 2,
                "selector": {"matchLabels": {"batch.kubernetes.io/controller-uid": "u"}},
                "template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}},
            "status": {"succeeded": 3, "startTime": "2026-01-01T00:00:00Z",
                "completionTime": "2026-01-01T00:01:05Z",
                "conditions": [{"type": "SuccessCriteriaMet", "status": "True"},
                    {"type": "Complete", "status": "True"}]}}),
        );
        assert_eq!(
            names,
            [
                "Name",
                "Status",
                "Completions",
                "Duration",
                "Age",
                "Containers",
                "Images",
                "Selector"
            ]
        );
        assert_eq!(cells[1], "Complete");
        assert_eq!(cells[2], "3/3");
        assert_eq!(cells[3], "65s");
        assert_eq!(cells[7], "batch.kubernetes.io/controller-uid=u");
        let (_, cells) = row(
            "jobs",
            json!({"spec": {"parallelism": 4}, "status": {"conditions": [
                {"type": "FailureTarget", "status": "True"}]}}),
        );
        assert_eq!(cells[1], "FailureTarget");
        assert_eq!(cells[2], "0/1 of 4");
        assert_eq!(cells[3], "");
    }

    #[test]
    fn a_cronjob_prints_as_kubectl_shows_it() {
        let (names, cells) = row(
            "cronjobs",
            json!({"spec": {"schedule": "*/5 * * * *", "suspend": false,
            "jobTemplate": {"spec": {"template": {"spec": {"containers": [
                {"name": "a", "image": "i"}, {"name": "b", "image": "j"}]}}}}},
            "status": {"active": [{"name": "x-1"}]}}),
        );
        assert_eq!(
            names,
            [
                "Name",
                "Schedule",
                "Timezone",
                "Suspend",
                "Active",
                "Last Schedule",
                "Age",
                "Containers",
                "Images",
                "Selector"
            ]
        );
        assert_eq!(
            cells[1..],
            [
                json!("*/5 * * * *"),
                json!("<none>"),
                json!("False"),
                json!(1),
                json!("<none>"),
                json!("<unknown>"),
                json!("a,b"),
                json!("i,j"),
                json!("<none>")
            ]
        );
    }
}
