//! batch/v1: `SetDefaults_Job` and `SetDefaults_CronJob` (k8s.io/kubernetes
//! `pkg/apis/batch/v1/defaults.go`), and the Job strategy's create-time
//! selector (`generateSelector` in `pkg/registry/batch/job/strategy.go`):
//! unless `manualSelector` is true, a Job selects its pods by its own uid,
//! and its template carries `batch.kubernetes.io/controller-uid` and
//! `batch.kubernetes.io/job-name` (plus the legacy unprefixed pair).

use serde_json::{Map, Value, json};

use super::{default, object, pod};

/// The label a Job's generated selector picks its pods by.
pub(crate) const CONTROLLER_UID: &str = "batch.kubernetes.io/controller-uid";
/// The label naming a generated selector's Job on its pods.
pub(crate) const JOB_NAME: &str = "batch.kubernetes.io/job-name";
const LEGACY_CONTROLLER_UID: &str = "controller-uid";
const LEGACY_JOB_NAME: &str = "job-name";

/// The template's pod spec gets `SetDefaults_PodSpec` only.
fn template(spec: &mut Map<String, Value>) {
    if let Some(p) = spec
        .get_mut("template")
        .and_then(|t| t.get_mut("spec"))
        .and_then(Value::as_object_mut)
    {
        pod::spec(p);
    }
}

/// `SetDefaults_Job` on a JobSpec; `labels` are the Job's, filled from the
/// template's when it has none.
fn job_spec(spec: &mut Map<String, Value>) {
    let unset = |s: &Map<String, Value>, k: &str| s.get(k).is_none_or(Value::is_null);
    if unset(spec, "completions") && unset(spec, "parallelism") {
        spec.insert("completions".into(), json!(1));
    }
    default(spec, "parallelism", json!(1));
    let backoff = if unset(spec, "backoffLimitPerIndex") {
        json!(6)
    } else {
        json!(i32::MAX)
    };
    default(spec, "backoffLimit", backoff);
    default(spec, "completionMode", json!("NonIndexed"));
    default(spec, "suspend", json!(false));
    let replacement = if unset(spec, "podFailurePolicy") {
        "TerminatingOrFailed"
    } else {
        "Failed"
    };
    default(spec, "podReplacementPolicy", json!(replacement));
    default(spec, "manualSelector", json!(false));
    template(spec);
}

pub(crate) fn job(obj: &mut Value, create: bool) {
    let Some(o) = obj.as_object_mut() else { return };
    let (name, uid) = {
        let m = o.get("metadata");
        let s = |k: &str| {
            m.and_then(|m| m.get(k))
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string()
        };
        (s("name"), s("uid"))
    };
    let Some(spec) = object(o, "spec") else {
        return;
    };
    job_spec(spec);
    if create && spec.get("manualSelector") != Some(&json!(true)) {
        generate_selector(spec, &name, &uid);
    }
    let template_labels = spec
        .get("template")
        .and_then(|t| t.pointer("/metadata/labels"))
        .filter(|l| l.as_object().is_some_and(|l| !l.is_empty()))
        .cloned();
    // A Job without labels takes its template's (upstream does this on
    // every decode, so a read shows the generated labels too).
    if let (Some(labels), Some(meta)) = (template_labels, object(o, "metadata")) {
        let empty = meta
            .get("labels")
            .is_none_or(|l| l.as_object().is_none_or(Map::is_empty));
        if empty {
            meta.insert("labels".into(), labels);
        }
    }
}

/// `generateSelector`: the template's labels (each only where the client
/// left it out; validation refuses a conflict) and a selector by uid.
fn generate_selector(spec: &mut Map<String, Value>, name: &str, uid: &str) {
    if let Some(labels) = object(spec, "template")
        .and_then(|t| object(t, "metadata"))
        .and_then(|m| object(m, "labels"))
    {
        for (k, v) in [
            (LEGACY_JOB_NAME, name),
            (JOB_NAME, name),
            (LEGACY_CONTROLLER_UID, uid),
            (CONTROLLER_UID, uid),
        ] {
            if !labels.contains_key(k) {
                labels.insert(k.into(), json!(v));
            }
        }
    }
    if let Some(ml) = object(spec, "selector").and_then(|s| object(s, "matchLabels"))
        && !ml.contains_key(CONTROLLER_UID)
    {
        ml.insert(CONTROLLER_UID.into(), json!(uid));
    }
}

pub(crate) fn cronjob(obj: &mut Value) {
    let Some(spec) = obj.as_object_mut().and_then(|o| object(o, "spec")) else {
        return;
    };
    default(spec, "concurrencyPolicy", json!("Allow"));
    default(spec, "suspend", json!(false));
    default(spec, "successfulJobsHistoryLimit", json!(3));
    default(spec, "failedJobsHistoryLimit", json!(1));
    // The job template's pod spec is defaulted as a pod spec; the JobSpec
    // itself only when a Job is made from it (SetDefaults_Job is per Job).
    if let Some(js) = spec
        .get_mut("jobTemplate")
        .and_then(|t| t.get_mut("spec"))
        .and_then(Value::as_object_mut)
    {
        template(js);
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::apply;
    use crate::registry::Registry;

    fn rt(resource: &str) -> std::sync::Arc<super::super::ResourceType> {
        Registry::with_builtins().get("batch", resource).unwrap()
    }

    #[test]
    fn a_job_gets_upstreams_defaults_and_a_selector_by_uid() {
        let mut j = json!({"metadata": {"name": "pi", "uid": "u-1"},
            "spec": {"template": {"spec": {"restartPolicy": "Never",
                "containers": [{"name": "c", "image": "x:1"}]}}}});
        apply(&rt("jobs"), &mut j, true);
        let s = &j["spec"];
        assert_eq!(s["completions"], 1);
        assert_eq!(s["parallelism"], 1);
        assert_eq!(s["backoffLimit"], 6);
        assert_eq!(s["completionMode"], "NonIndexed");
        assert_eq!(s["suspend"], false);
        assert_eq!(s["manualSelector"], false);
        assert_eq!(s["podReplacementPolicy"], "TerminatingOrFailed");
        assert_eq!(
            s["selector"],
            json!({"matchLabels": {super::CONTROLLER_UID: "u-1"}})
        );
        let labels = &s["template"]["metadata"]["labels"];
        assert_eq!(labels[super::JOB_NAME], "pi");
        assert_eq!(labels["controller-uid"], "u-1");
        assert_eq!(j["metadata"]["labels"], *labels);
        assert_eq!(s["template"]["spec"]["terminationGracePeriodSeconds"], 30);
        // Parallelism alone leaves completions unset (a work queue).
        let mut q = json!({"spec": {"parallelism": 3}});
        apply(&rt("jobs"), &mut q, false);
        assert!(q["spec"].get("completions").is_none());
        assert!(q["spec"].get("selector").is_none(), "only on create");
    }

    #[test]
    fn a_cronjob_gets_upstreams_defaults() {
        let mut c = json!({"spec": {"schedule": "@hourly", "jobTemplate": {"spec": {
            "template": {"spec": {"containers": [{"name": "c", "image": "x:1"}]}}}}}});
        apply(&rt("cronjobs"), &mut c, true);
        let s = &c["spec"];
        assert_eq!(s["concurrencyPolicy"], "Allow");
        assert_eq!(s["suspend"], false);
        assert_eq!(s["successfulJobsHistoryLimit"], 3);
        assert_eq!(s["failedJobsHistoryLimit"], 1);
        assert!(s["jobTemplate"]["spec"].get("backoffLimit").is_none());
        assert_eq!(
            s["jobTemplate"]["spec"]["template"]["spec"]["restartPolicy"],
            "Always"
        );
    }
}
