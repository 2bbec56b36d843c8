//! What a CronJob should do now (upstream's `syncCronJob` scheduling part)
//! as a pure function of the CronJob, how many of its Jobs run, and the
//! clock: create a Job for the latest due time unless suspended, too late
//! (`startingDeadlineSeconds`) or held back by `concurrencyPolicy: Forbid`;
//! replace the running ones under `Replace`; look again at the next
//! scheduled time.

use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::batch::v1::CronJob;

use crate::schedule::{MAX_MISSED, Schedule};

/// One event to record: (warning, reason, note).
pub type Note = (bool, &'static str, String);

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Decision {
    /// The scheduled time to make a Job for.
    pub create: Option<Timestamp>,
    /// Delete the running Jobs first (`Replace`).
    pub replace: bool,
    pub requeue: Option<Duration>,
    pub events: Vec<Note>,
}

/// Active Jobs from which a new one is a pile-up worth a Warning.
pub const PILE_UP: usize = 5;

/// A little past the scheduled time, so the call lands after it.
const SLACK: Duration = Duration::from_millis(100);

pub fn decide(cj: &CronJob, running: usize, now: Timestamp) -> Decision {
    let mut d = Decision::default();
    let Some(spec) = cj.spec.as_ref() else {
        return d;
    };
    if spec.suspend == Some(true) {
        return d;
    }
    let schedule = match Schedule::parse(&spec.schedule, spec.time_zone.as_deref()) {
        Ok(s) => s,
        Err(e) => {
            d.events.push((true, "InvalidSchedule", e));
            return d;
        }
    };
    match schedule.next_after(now) {
        Ok(next) => d.requeue = Some(next.duration_since(now).unsigned_abs() + SLACK),
        Err(e) => d.events.push((true, "InvalidSchedule", e)),
    }
    let created = cj.metadata.creation_timestamp.as_ref().map(|t| t.0);
    let last = cj
        .status
        .as_ref()
        .and_then(|s| s.last_schedule_time.as_ref())
        .map(|t| t.0);
    let Some(mut earliest) = last.or(created) else {
        return d;
    };
    if let Some(sds) = spec.starting_deadline_seconds {
        earliest = earliest.max(now - SignedDuration::from_secs(sds));
    }
    let due = match schedule.due(earliest, now) {
        Ok(Some(due)) => due,
        Ok(None) => return d,
        Err(e) => {
            d.events.push((true, "InvalidSchedule", e));
            return d;
        }
    };
    if due.missed > MAX_MISSED {
        d.events.push((
            true,
            "TooManyMissedTimes",
            "too many missed start times. Set or decrease .spec.startingDeadlineSeconds or check clock skew"
                .into(),
        ));
    }
    if let Some(sds) = spec.starting_deadline_seconds
        && due.at + SignedDuration::from_secs(sds) < now
    {
        d.events.push((
            true,
            "MissSchedule",
            format!("Missed scheduled time to start a job: {}", due.at),
        ));
        return d;
    }
    match spec.concurrency_policy.as_deref() {
        // The missed time stays due: a finished Job requeues the CronJob.
        Some("Forbid") if running > 0 => return d,
        Some("Replace") if running > 0 => d.replace = true,
        // Allow: Jobs that never finish pile up, one more at each scheduled
        // time. Upstream says nothing; here a Warning says so at each new
        // one (status.active lists them), and a ResourceQuota on
        // count/jobs.batch is what stops them (the create then fails).
        _ if running >= PILE_UP => d.events.push((
            true,
            "TooManyActiveJobs",
            format!(
                "{running} Jobs of this CronJob are still active and another is due: \
                 with concurrencyPolicy Allow they pile up (set concurrencyPolicy Forbid or \
                 Replace, activeDeadlineSeconds in the jobTemplate, or a ResourceQuota on \
                 count/jobs.batch)"
            ),
        )),
        _ => {}
    }
    d.create = Some(due.at);
    d
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn cj(spec: Value, status: Value) -> CronJob {
        let mut spec = spec;
        spec["jobTemplate"] = json!({"spec": {"template": {"spec": {"containers": []}}}});
        serde_json::from_value(json!({"metadata": {"name": "c",
            "creationTimestamp": "2026-01-01T00:00:30Z"}, "spec": spec, "status": status}))
        .unwrap()
    }

    fn t(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn the_latest_due_time_gets_a_job_and_the_next_a_requeue() {
        let c = cj(json!({"schedule": "*/5 * * * *"}), json!({}));
        let d = decide(&c, 0, t("2026-01-01T00:12:00Z"));
        assert_eq!(d.create, Some(t("2026-01-01T00:10:00Z")));
        assert_eq!(d.requeue, Some(Duration::from_secs(180) + SLACK));
        // Once made (lastScheduleTime), nothing until 00:15.
        let c = cj(
            json!({"schedule": "*/5 * * * *"}),
            json!({"lastScheduleTime": "2026-01-01T00:10:00Z"}),
        );
        let d = decide(&c, 1, t("2026-01-01T00:14:59Z"));
        assert_eq!(d.create, None);
        assert_eq!(d.requeue, Some(Duration::from_secs(1) + SLACK));
        let d = decide(&c, 1, t("2026-01-01T00:15:00Z"));
        assert_eq!(d.create, Some(t("2026-01-01T00:15:00Z")));
    }

    #[test]
    fn forbid_starts_no_second_job_while_one_runs() {
        let c = cj(
            json!({"schedule": "* * * * *", "concurrencyPolicy": "Forbid"}),
            json!({"lastScheduleTime": "2026-01-01T00:01:00Z"}),
        );
        let now = t("2026-01-01T00:02:10Z");
        assert_eq!(decide(&c, 1, now).create, None);
        // The missed 00:02 run starts once the first Job is done.
        assert_eq!(decide(&c, 0, now).create, Some(t("2026-01-01T00:02:00Z")));
        let allow = cj(
            json!({"schedule": "* * * * *"}),
            json!({"lastScheduleTime": "2026-01-01T00:01:00Z"}),
        );
        assert_eq!(
            decide(&allow, 1, now).create,
            Some(t("2026-01-01T00:02:00Z"))
        );
    }

    #[test]
    fn allowed_jobs_piling_up_are_warned_of_at_each_new_one() {
        let c = cj(
            json!({"schedule": "* * * * *"}),
            json!({"lastScheduleTime": "2026-01-01T00:01:00Z"}),
        );
        let now = t("2026-01-01T00:02:10Z");
        assert!(decide(&c, PILE_UP - 1, now).events.is_empty());
        let d = decide(&c, PILE_UP, now);
        assert_eq!(d.create, Some(t("2026-01-01T00:02:00Z")));
        assert_eq!(d.events[0].1, "TooManyActiveJobs");
        assert!(
            d.events[0].2.starts_with("5 Jobs of this CronJob"),
            "{}",
            d.events[0].2
        );
        // Nothing due, nothing said.
        let c = cj(
            json!({"schedule": "* * * * *"}),
            json!({"lastScheduleTime": "2026-01-01T00:02:00Z"}),
        );
        assert!(decide(&c, 50, now).events.is_empty());
    }

    #[test]
    fn replace_deletes_the_running_job_first() {
        let c = cj(
            json!({"schedule": "* * * * *", "concurrencyPolicy": "Replace"}),
            json!({"lastScheduleTime": "2026-01-01T00:01:00Z"}),
        );
        let d = decide(&c, 1, t("2026-01-01T00:02:10Z"));
        assert!(d.replace);
        assert_eq!(d.create, Some(t("2026-01-01T00:02:00Z")));
    }

    #[test]
    fn the_starting_deadline_skips_a_late_run() {
        let c = cj(
            json!({"schedule": "*/5 * * * *", "startingDeadlineSeconds": 30}),
            json!({}),
        );
        let d = decide(&c, 0, t("2026-01-01T00:12:00Z"));
        assert_eq!(d.create, None);
        let d = decide(&c, 0, t("2026-01-01T00:10:20Z"));
        assert_eq!(d.create, Some(t("2026-01-01T00:10:00Z")));
    }

    #[test]
    fn a_long_sleep_makes_one_job_and_an_event() {
        let c = cj(
            json!({"schedule": "* * * * *"}),
            json!({"lastScheduleTime": "2025-01-01T00:00:00Z"}),
        );
        let d = decide(&c, 0, t("2026-01-01T00:00:30Z"));
        assert_eq!(d.create, Some(t("2026-01-01T00:00:00Z")));
        assert_eq!(d.events[0].1, "TooManyMissedTimes");
    }

    #[test]
    fn suspended_or_unparseable_makes_nothing() {
        let c = cj(json!({"schedule": "* * * * *", "suspend": true}), json!({}));
        assert_eq!(
            decide(&c, 0, t("2026-01-01T00:12:00Z")),
            Decision::default()
        );
        let c = cj(json!({"schedule": "soon"}), json!({}));
        let d = decide(&c, 0, t("2026-01-01T00:12:00Z"));
        assert_eq!((d.create, d.events[0].1), (None, "InvalidSchedule"));
    }
}
