//! The wall time as the API writes it: `metav1.Time` (RFC 3339, seconds,
//! UTC: `2026-11-27T13:10:00Z`), and with milliseconds for the host's own
//! records. One place for both, so the node agent, the plugin runtime's
//! records and the API server spell a timestamp alike.

/// Now as a `metav1.Time`: RFC 3339 in UTC to the second.
pub fn now_rfc3339() -> String {
    chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// Now as RFC 3339 in UTC with milliseconds (a call record's `at`).
pub fn now_rfc3339_millis() -> String {
    chrono::Utc::now()
        .format("%Y-%m-%dT%H:%M:%S%.3fZ")
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_parse_as_rfc3339_in_utc_at_their_precision() {
        let s = now_rfc3339();
        assert!(chrono::DateTime::parse_from_rfc3339(&s).is_ok(), "{s}");
        assert_eq!((s.len(), s.ends_with('Z')), (20, true), "{s}");
        let ms = now_rfc3339_millis();
        assert!(chrono::DateTime::parse_from_rfc3339(&ms).is_ok(), "{ms}");
        assert_eq!((ms.len(), &ms[19..20]), (24, "."), "{ms}");
    }
}
