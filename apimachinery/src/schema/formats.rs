//! The `format`s the validator checks: `date-time`, `date`, `uuid`, `ipv4`,
//! `ipv6` and `cidr`; other formats pass.

/// `Some(valid)` for the formats checked here, `None` for formats ignored.
/// Names are normalized as go-openapi does (`date-time` == `datetime`).
pub(super) fn check_format(format: &str, s: &str) -> Option<bool> {
    Some(match format.replace('-', "").as_str() {
        "datetime" => {
            chrono::DateTime::parse_from_rfc3339(s).is_ok()
                || chrono::NaiveDateTime::parse_from_str(s, "%Y-%m-%dT%H:%M:%S%.f").is_ok()
        }
        "date" => chrono::NaiveDate::parse_from_str(s, "%Y-%m-%d").is_ok() && s.len() == 10,
        "uuid" => is_uuid(s),
        "ipv4" => s.parse::<std::net::Ipv4Addr>().is_ok(),
        "ipv6" => s.parse::<std::net::Ipv6Addr>().is_ok(),
        "cidr" => is_cidr(s),
        _ => return None,
    })
}

/// go-openapi's `(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}$`.
fn is_uuid(s: &str) -> bool {
    let mut rest = s;
    for (i, len) in [8usize, 4, 4, 4, 12].into_iter().enumerate() {
        if i > 0 {
            rest = rest.strip_prefix('-').unwrap_or(rest);
        }
        let Some(head) = rest.get(..len) else {
            return false;
        };
        if !head.bytes().all(|b| b.is_ascii_hexdigit()) {
            return false;
        }
        rest = &rest[len..];
    }
    rest.is_empty()
}

fn is_cidr(s: &str) -> bool {
    let Some((ip, bits)) = s.split_once('/') else {
        return false;
    };
    let Ok(bits) = bits.parse::<u8>() else {
        return false;
    };
    match ip.parse::<std::net::IpAddr>() {
        Ok(std::net::IpAddr::V4(_)) => bits <= 32,
        Ok(std::net::IpAddr::V6(_)) => bits <= 128,
        Err(_) => false,
    }
}
