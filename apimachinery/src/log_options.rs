//! The numeric `pods/log` options (`tailLines`, `sinceSeconds`, `sinceTime`,
//! `limitBytes`), parsed and validated once for the kubelet endpoint and the
//! API server's proxy, as upstream's `ValidatePodLogOptions`: `tailLines` at
//! least 0, `limitBytes` and `sinceSeconds` at least 1, not both
//! `sinceSeconds` and `sinceTime`. Values past what a clock or a buffer can
//! hold mean "everything" (`sinceSeconds=9223372036854775807` once panicked
//! the handler).

use std::collections::HashMap;

use chrono::{DateTime, Utc};

/// The options as given; construct with [`LogOptions::parse`].
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct LogOptions {
    /// `tailLines`: only the last N lines (0 is allowed and returns nothing).
    pub tail_lines: Option<i64>,
    /// `sinceSeconds`: only lines newer than this many seconds before now.
    pub since_seconds: Option<i64>,
    /// `sinceTime`: only lines at or after this RFC 3339 time.
    pub since_time: Option<DateTime<Utc>>,
    /// `limitBytes`: stop after this many bytes of log.
    pub limit_bytes: Option<i64>,
}

/// A value upstream's validation refuses (422 Invalid at the API server).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invalid {
    /// The field, as the query parameter is named (`""`: the options as a whole).
    pub field: &'static str,
    /// The refused value as the client sent it, quoted back in the error.
    pub value: String,
    /// Why the value is refused, in upstream's words (`must be greater than 0`).
    pub message: &'static str,
}

impl Invalid {
    /// Upstream's field error text: `sinceSeconds: Invalid value: 0: must be greater than 0`.
    pub fn text(&self) -> String {
        if self.field.is_empty() {
            format!("Forbidden: {}", self.message)
        } else {
            format!(
                "{}: Invalid value: {}: {}",
                self.field, self.value, self.message
            )
        }
    }
}

impl LogOptions {
    /// Reads the options from the query; `Err` names a parameter that is not
    /// a number (or time) at all (400 Bad Request, as upstream's decoding).
    pub fn parse(query: &HashMap<String, String>) -> Result<LogOptions, String> {
        let int = |k: &str| -> Result<Option<i64>, String> {
            query
                .get(k)
                .filter(|v| !v.is_empty())
                .map(|v| {
                    v.parse::<i64>()
                        .map_err(|e| format!("{k}: \"{v}\" is not a 64-bit integer ({e})"))
                })
                .transpose()
        };
        let since_time = query
            .get("sinceTime")
            .filter(|v| !v.is_empty())
            .map(|v| {
                DateTime::parse_from_rfc3339(v)
                    .map(|t| t.with_timezone(&Utc))
                    .map_err(|e| format!("sinceTime: \"{v}\" is not an RFC 3339 time ({e})"))
            })
            .transpose()?;
        Ok(LogOptions {
            tail_lines: int("tailLines")?,
            since_seconds: int("sinceSeconds")?,
            since_time,
            limit_bytes: int("limitBytes")?,
        })
    }

    /// What upstream's `ValidatePodLogOptions` refuses (empty: valid).
    pub fn validate(&self) -> Vec<Invalid> {
        let mut out = Vec::new();
        if let Some(n) = self.tail_lines.filter(|n| *n < 0) {
            out.push(Invalid {
                field: "tailLines",
                value: n.to_string(),
                message: "must be greater than or equal to 0",
            });
        }
        if let Some(n) = self.limit_bytes.filter(|n| *n < 1) {
            out.push(Invalid {
                field: "limitBytes",
                value: n.to_string(),
                message: "must be greater than 0",
            });
        }
        match (self.since_seconds, self.since_time) {
            (Some(_), Some(_)) => out.push(Invalid {
                field: "",
                value: String::new(),
                message: "at most one of `sinceTime` or `sinceSeconds` may be specified",
            }),
            (Some(n), None) if n < 1 => out.push(Invalid {
                field: "sinceSeconds",
                value: n.to_string(),
                message: "must be greater than 0",
            }),
            _ => {}
        }
        out
    }

    /// The oldest line's time to show at `now`; `None`: every line (also
    /// when `sinceSeconds` reaches back past what a date can hold).
    pub fn since(&self, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        match (self.since_seconds, self.since_time) {
            (Some(s), _) => {
                chrono::TimeDelta::try_seconds(s).and_then(|d| now.checked_sub_signed(d))
            }
            (None, t) => t,
        }
    }

    /// The last lines to keep; `None`: all (larger than memory can hold is all).
    pub fn tail(&self) -> Option<usize> {
        self.tail_lines
            .filter(|n| *n >= 0)
            .map(|n| usize::try_from(n).unwrap_or(usize::MAX))
    }

    /// The most bytes to send; `None`: no limit.
    pub fn limit(&self) -> Option<usize> {
        self.limit_bytes
            .filter(|n| *n >= 0)
            .map(|n| usize::try_from(n).unwrap_or(usize::MAX))
    }

    /// The options as query parameters, to forward (normalised: what was parsed).
    pub fn to_pairs(&self) -> Vec<(&'static str, String)> {
        let mut out = Vec::new();
        if let Some(n) = self.tail_lines {
            out.push(("tailLines", n.to_string()));
        }
        if let Some(n) = self.since_seconds {
            out.push(("sinceSeconds", n.to_string()));
        }
        if let Some(t) = self.since_time {
            out.push((
                "sinceTime",
                t.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true),
            ));
        }
        if let Some(n) = self.limit_bytes {
            out.push(("limitBytes", n.to_string()));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn extreme_values_mean_everything_and_never_overflow() {
        let now = Utc::now();
        for s in [i64::MAX, i64::MAX / 1000, 100_000_000_000_000] {
            let o = LogOptions::parse(&q(&[("sinceSeconds", s.to_string().as_str())])).unwrap();
            assert!(o.validate().is_empty());
            assert_eq!(o.since(now), None, "{s}");
        }
        let o = LogOptions::parse(&q(&[
            ("tailLines", i64::MAX.to_string().as_str()),
            ("limitBytes", i64::MAX.to_string().as_str()),
        ]))
        .unwrap();
        assert!(o.validate().is_empty());
        // As many as an i64 counts: more than any log holds.
        let most = usize::try_from(i64::MAX).unwrap_or(usize::MAX);
        assert_eq!(o.tail(), Some(most));
        assert_eq!(o.limit(), Some(most));
        let o = LogOptions::parse(&q(&[("sinceSeconds", "10")])).unwrap();
        assert_eq!(o.since(now), Some(now - chrono::TimeDelta::seconds(10)));
    }

    #[test]
    fn values_upstream_refuses_are_named() {
        let bad = |pairs: &[(&str, &str)]| {
            LogOptions::parse(&q(pairs))
                .unwrap()
                .validate()
                .iter()
                .map(Invalid::text)
                .collect::<Vec<_>>()
        };
        assert_eq!(
            bad(&[("sinceSeconds", "0")]),
            ["sinceSeconds: Invalid value: 0: must be greater than 0"]
        );
        assert_eq!(
            bad(&[("sinceSeconds", i64::MIN.to_string().as_str())]),
            [format!(
                "sinceSeconds: Invalid value: {}: must be greater than 0",
                i64::MIN
            )]
        );
        assert_eq!(
            bad(&[("tailLines", "-1")]),
            ["tailLines: Invalid value: -1: must be greater than or equal to 0"]
        );
        assert_eq!(
            bad(&[("limitBytes", "0")]),
            ["limitBytes: Invalid value: 0: must be greater than 0"]
        );
        assert_eq!(
            bad(&[("sinceSeconds", "5"), ("sinceTime", "2026-01-01T00:00:00Z")]),
            ["Forbidden: at most one of `sinceTime` or `sinceSeconds` may be specified"]
        );
        for (k, v) in [
            ("sinceSeconds", "9223372036854775808"),
            ("tailLines", "x"),
            ("sinceTime", "yesterday"),
        ] {
            let e = LogOptions::parse(&q(&[(k, v)])).unwrap_err();
            assert!(e.starts_with(&format!("{k}: \"{v}\"")), "{e}");
        }
    }
}
