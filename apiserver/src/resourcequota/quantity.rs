//! Resource quantities (`500m`, `128Mi`, `2`, `1e3`) as quota arithmetic
//! needs them: exact sums in thousandths of a unit, compared and printed in
//! upstream's canonical form (`resource.Quantity.String()`), because the
//! refusal message and `status.used` show them (`used: requests.memory=384Mi`).

use std::cmp::Ordering;
use std::fmt;

/// Binary (`Ki`, `Mi`, ...) or decimal (`m`, `k`, `M`, ..., exponents)
/// suffixes: a sum is printed in the format of its first non-zero term, as
/// upstream's `Quantity.Add` keeps it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Format {
    Binary,
    Decimal,
}

/// A quantity in thousandths of a unit (upstream's `MilliValue`, rounded up).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Quantity {
    pub(crate) milli: i128,
    pub(crate) format: Format,
}

impl Default for Quantity {
    fn default() -> Self {
        Quantity::ZERO
    }
}

/// Units of 1000 (decimal) or 1024 (binary) a value is printed with.
const DECIMAL: [&str; 7] = ["", "k", "M", "G", "T", "P", "E"];
const BINARY: [&str; 7] = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"];

impl Quantity {
    pub(crate) const ZERO: Quantity = Quantity {
        milli: 0,
        format: Format::Decimal,
    };

    /// A count (`pods=1`).
    pub(crate) fn count(n: i128) -> Quantity {
        Quantity {
            milli: n * 1000,
            format: Format::Decimal,
        }
    }

    /// Parses a Kubernetes quantity; `None` when malformed (decoding has
    /// checked the syntax of every stored quantity already).
    pub(crate) fn parse(q: &str) -> Option<Quantity> {
        let q = q.trim();
        let split = q
            .find(|c: char| !(c.is_ascii_digit() || matches!(c, '.' | '+' | '-')))
            .unwrap_or(q.len());
        let (number, suffix) = q.split_at(split);
        let (negative, number) = match number.strip_prefix('-') {
            Some(n) => (true, n),
            None => (false, number.strip_prefix('+').unwrap_or(number)),
        };
        let (int, frac) = number.split_once('.').unwrap_or((number, ""));
        if (int.is_empty() && frac.is_empty())
            || !int.chars().chain(frac.chars()).all(|c| c.is_ascii_digit())
            || int.len() + frac.len() > 30
        {
            return None;
        }
        let digits: i128 = format!("{int}{frac}").parse().ok()?;
        let mut num = digits.checked_mul(1000)?;
        let mut den = 10i128.checked_pow(u32::try_from(frac.len()).ok()?)?;
        let mut format = Format::Decimal;
        let (mul, div): (i128, i128) = match suffix {
            "" => (1, 1),
            "n" => (1, 1_000_000_000),
            "u" => (1, 1_000_000),
            "m" => (1, 1000),
            s if DECIMAL.contains(&s) => {
                let i = DECIMAL.iter().position(|d| *d == s)?;
                (1000i128.checked_pow(i as u32)?, 1)
            }
            s if BINARY.contains(&s) => {
                format = Format::Binary;
                let i = BINARY.iter().position(|d| *d == s)?;
                (1024i128.checked_pow(i as u32)?, 1)
            }
            e if e.starts_with(['e', 'E']) => {
                let exp: i32 = e[1..].parse().ok()?;
                let p = 10i128.checked_pow(exp.unsigned_abs())?;
                if exp >= 0 { (p, 1) } else { (1, p) }
            }
            _ => return None,
        };
        num = num.checked_mul(mul)?;
        den = den.checked_mul(div)?;
        // Rounded up, as upstream's MilliValue.
        let milli = (num + den - 1) / den;
        Some(Quantity {
            milli: if negative { -(num / den) } else { milli },
            format,
        })
    }

    /// The sum, in the format of the first non-zero term.
    pub(crate) fn add(self, other: Quantity) -> Quantity {
        Quantity {
            milli: self.milli.saturating_add(other.milli),
            format: if self.milli == 0 {
                other.format
            } else {
                self.format
            },
        }
    }

    pub(crate) fn max(self, other: Quantity) -> Quantity {
        if other.milli > self.milli {
            other
        } else {
            self
        }
    }
}

impl PartialOrd for Quantity {
    fn partial_cmp(&self, other: &Quantity) -> Option<Ordering> {
        Some(self.milli.cmp(&other.milli))
    }
}

impl fmt::Display for Quantity {
    /// Upstream's canonical form: the largest suffix that keeps the value
    /// whole; binary only for whole values of 1024 and more.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sign = if self.milli < 0 { "-" } else { "" };
        let m = self.milli.unsigned_abs();
        if !m.is_multiple_of(1000) {
            return write!(f, "{sign}{m}m");
        }
        let mut n = m / 1000;
        let (base, suffixes) = match self.format {
            Format::Binary if n >= 1024 => (1024, &BINARY),
            _ => (1000, &DECIMAL),
        };
        let mut i = 0;
        while n != 0 && n.is_multiple_of(base) && i + 1 < suffixes.len() {
            n /= base;
            i += 1;
        }
        write!(f, "{sign}{n}{}", suffixes[i])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn canon(q: &str) -> String {
        Quantity::parse(q).unwrap().to_string()
    }

    #[test]
    fn prints_as_upstream_canonicalises() {
        assert_eq!(canon("500m"), "500m");
        assert_eq!(canon("0.5"), "500m");
        assert_eq!(canon("2000m"), "2");
        assert_eq!(canon("2000"), "2k");
        assert_eq!(canon("1024Mi"), "1Gi");
        assert_eq!(canon("1536Mi"), "1536Mi");
        assert_eq!(canon("1e3"), "1k");
        assert_eq!(canon("0"), "0");
        assert_eq!(canon("10"), "10");
        let sum = Quantity::parse("256Mi")
            .unwrap()
            .add(Quantity::parse("128Mi").unwrap());
        assert_eq!(sum.to_string(), "384Mi");
        let cpu = Quantity::parse("1")
            .unwrap()
            .add(Quantity::parse("500m").unwrap());
        assert_eq!(cpu.to_string(), "1500m");
        // A zero sum takes the format of what is added to it.
        assert_eq!(
            Quantity::ZERO
                .add(Quantity::parse("1Gi").unwrap())
                .to_string(),
            "1Gi"
        );
        assert!(Quantity::parse("1Xi").is_none());
        assert!(Quantity::parse("").is_none());
    }
}
