//! Kubernetes resource quantities (`100m`, `0.5`, `128Mi`, `1e3`) as integers:
//! cpu in millicores, memory and pod counts in whole units, rounded up as
//! upstream's `MilliValue`/`Value` do.

/// The quantity in thousandths of a unit (`1` → 1000, `100m` → 100,
/// `1Ki` → 1,024,000), rounded up; `None` for malformed input.
pub(super) fn parse_milli(q: &str) -> Option<i128> {
    let q = q.trim();
    let (number, suffix) = q.split_at(
        q.find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-'))
            .unwrap_or(q.len()),
    );
    let (negative, number) = match number.strip_prefix('-') {
        Some(n) => (true, n),
        None => (false, number.strip_prefix('+').unwrap_or(number)),
    };
    let (int, frac) = number.split_once('.').unwrap_or((number, ""));
    if int.is_empty() && frac.is_empty()
        || !int.chars().chain(frac.chars()).all(|c| c.is_ascii_digit())
    {
        return None;
    }
    // Exact decimal: digits / 10^frac_len.
    let digits: i128 = format!("{int}{frac}").parse().ok()?;
    let mut den: i128 = 10i128.checked_pow(u32::try_from(frac.len()).ok()?)?;
    let (mut num, mut den_extra) = (digits.checked_mul(1000)?, 1i128);
    let mut scale = |mul: i128, div: i128| -> Option<()> {
        num = num.checked_mul(mul)?;
        den_extra = den_extra.checked_mul(div)?;
        Some(())
    };
    match suffix {
        "" => {}
        "n" => scale(1, 1_000_000_000)?,
        "u" => scale(1, 1_000_000)?,
        "m" => scale(1, 1000)?,
        "k" => scale(1000, 1)?,
        "M" => scale(1_000_000, 1)?,
        "G" => scale(1_000_000_000, 1)?,
        "T" => scale(1_000_000_000_000, 1)?,
        "P" => scale(1_000_000_000_000_000, 1)?,
        "E" => scale(1_000_000_000_000_000_000, 1)?,
        "Ki" => scale(1 << 10, 1)?,
        "Mi" => scale(1 << 20, 1)?,
        "Gi" => scale(1 << 30, 1)?,
        "Ti" => scale(1 << 40, 1)?,
        "Pi" => scale(1 << 50, 1)?,
        "Ei" => scale(1 << 60, 1)?,
        e if e.starts_with(['e', 'E']) => {
            let exp: i32 = e[1..].parse().ok()?;
            let p = 10i128.checked_pow(exp.unsigned_abs())?;
            if exp >= 0 { scale(p, 1)? } else { scale(1, p)? }
        }
        _ => return None,
    }
    den = den.checked_mul(den_extra)?;
    let value = (num + den - 1) / den; // ceil for non-negative
    Some(if negative { -(num / den) } else { value })
}

/// Whole units, rounded up (`1500m` → 2, `128Mi` → 134,217,728).
pub(super) fn parse_units(q: &str) -> Option<i128> {
    parse_milli(q).map(|m| if m >= 0 { (m + 999) / 1000 } else { m / 1000 })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_in_millicores() {
        assert_eq!(parse_milli("100m"), Some(100));
        assert_eq!(parse_milli("1"), Some(1000));
        assert_eq!(parse_milli("0.5"), Some(500));
        assert_eq!(parse_milli("2.25"), Some(2250));
        assert_eq!(parse_milli("1500u"), Some(2)); // rounded up
        assert_eq!(parse_milli("x"), None);
        assert_eq!(parse_milli("1Xi"), None);
        assert_eq!(parse_milli(""), None);
    }

    #[test]
    fn memory_in_bytes() {
        assert_eq!(parse_units("128Mi"), Some(128 << 20));
        assert_eq!(parse_units("1G"), Some(1_000_000_000));
        assert_eq!(parse_units("1e3"), Some(1000));
        assert_eq!(parse_units("512"), Some(512));
        assert_eq!(parse_units("1.5Gi"), Some(3 << 29));
        assert_eq!(parse_units("110"), Some(110));
    }
}
