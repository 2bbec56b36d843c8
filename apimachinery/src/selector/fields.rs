//! Field selectors (`fieldSelector`): `field=value`, `field==value` and
//! `field!=value` terms joined by commas, with upstream's backslash escaping.

use std::fmt;

use super::SelectorError;

/// `=`/`==` or `!=` in a field selector.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldOperator {
    /// `a=b` or `a==b`.
    Equals,
    /// `a!=b`.
    NotEquals,
}

/// One `field op value` term; `value` is unescaped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldRequirement {
    /// The field path, e.g. `metadata.name` or `spec.nodeName`.
    pub field: String,
    /// `=`/`==` or `!=`.
    pub operator: FieldOperator,
    /// The value compared with, escapes (`\,`, `\=`, `\\`) already resolved.
    pub value: String,
}

/// A parsed field selector: the AND of its terms. Which fields exist is the
/// caller's business (upstream answers `field label not supported: X`);
/// use [`FieldSelector::fields`] to check them.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FieldSelector {
    terms: Vec<FieldRequirement>,
}

impl FieldSelector {
    /// Parses `a=b`, `a==b`, `a!=b`, comma-separated. In values, `\,` `\=`
    /// and `\\` stand for `,` `=` and `\`; a bare `,`/`=` or another escape is
    /// an error, as upstream.
    ///
    /// ```
    /// use wasmlet_apimachinery::selector::FieldSelector;
    /// let s = FieldSelector::parse(r"metadata.name=a\,b").unwrap();
    /// assert_eq!(s.requirements()[0].value, "a,b");
    /// assert_eq!(FieldSelector::parse("x").unwrap_err().to_string(), "invalid selector: 'x'; can't understand 'x'");
    /// ```
    pub fn parse(selector: &str) -> Result<FieldSelector, SelectorError> {
        let mut parts = split_terms(selector);
        // Upstream sorts the raw terms, which fixes the canonical order.
        parts.sort_unstable();
        let mut terms = Vec::new();
        for part in parts {
            if part.is_empty() {
                continue;
            }
            let Some((lhs, op, rhs)) = split_term(part) else {
                return Err(SelectorError(format!(
                    "invalid selector: '{selector}'; can't understand '{part}'"
                )));
            };
            terms.push(FieldRequirement {
                field: lhs.to_string(),
                operator: op,
                value: unescape_value(rhs)?,
            });
        }
        // Upstream's order comes from the raw text, so `a==b,a=c` printed
        // (`a=b,a=c`) would parse into another order. Re-sorting by each
        // term's printed form keeps upstream's order for canonical input and
        // makes printing a fixed point.
        terms.sort_by_cached_key(FieldRequirement::to_string);
        Ok(FieldSelector { terms })
    }

    /// The terms, in canonical (sorted) order.
    pub fn requirements(&self) -> &[FieldRequirement] {
        &self.terms
    }

    /// The field names used, for the caller to validate against what a kind supports.
    pub fn fields(&self) -> impl Iterator<Item = &str> {
        self.terms.iter().map(|t| t.field.as_str())
    }

    /// The value a field must equal, when some `field=value` term demands it
    /// (lets a LIST with `metadata.name=x` become a point lookup).
    pub fn requires_exact_match(&self, field: &str) -> Option<&str> {
        self.terms
            .iter()
            .find(|t| t.field == field && t.operator == FieldOperator::Equals)
            .map(|t| t.value.as_str())
    }

    /// Whether the selector has no terms (and so selects everything).
    pub fn is_empty(&self) -> bool {
        self.terms.is_empty()
    }

    /// Whether an object is selected; `get` returns the object's value for a
    /// field name (`metadata.name`, `spec.nodeName`, ...). As upstream, a
    /// field `get` does not know reads as the empty string.
    pub fn matches(&self, get: impl Fn(&str) -> Option<String>) -> bool {
        self.terms.iter().all(|t| {
            let v = get(&t.field).unwrap_or_default();
            match t.operator {
                FieldOperator::Equals => v == t.value,
                FieldOperator::NotEquals => v != t.value,
            }
        })
    }
}

impl fmt::Display for FieldRequirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let op = if self.operator == FieldOperator::Equals {
            "="
        } else {
            "!="
        };
        write!(f, "{}{op}{}", self.field, escape_value(&self.value))
    }
}

impl fmt::Display for FieldSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, t) in self.terms.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{t}")?;
        }
        Ok(())
    }
}

/// Escapes a literal for use as a field selector value (upstream `EscapeValue`).
pub fn escape_value(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, '\\' | ',' | '=') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// Splits on commas that are not escaped; escapes are kept for `unescape_value`.
fn split_terms(s: &str) -> Vec<&str> {
    if s.is_empty() {
        return Vec::new();
    }
    let mut terms = Vec::new();
    let mut start = 0;
    let mut in_slash = false;
    for (i, c) in s.char_indices() {
        if in_slash {
            in_slash = false;
        } else if c == '\\' {
            in_slash = true;
        } else if c == ',' {
            terms.push(&s[start..i]);
            start = i + 1;
        }
    }
    terms.push(&s[start..]);
    terms
}

/// The first operator occurrence splits the term; `!=` and `==` win over `=`
/// at the same position.
fn split_term(term: &str) -> Option<(&str, FieldOperator, &str)> {
    for (i, _) in term.char_indices() {
        let rest = &term[i..];
        for (tok, op) in [
            ("!=", FieldOperator::NotEquals),
            ("==", FieldOperator::Equals),
            ("=", FieldOperator::Equals),
        ] {
            if let Some(rhs) = rest.strip_prefix(tok) {
                return Some((&term[..i], op, rhs));
            }
        }
    }
    None
}

fn unescape_value(s: &str) -> Result<String, SelectorError> {
    let mut out = String::with_capacity(s.len());
    let mut in_slash = false;
    for c in s.chars() {
        if in_slash {
            match c {
                '\\' | ',' | '=' => out.push(c),
                _ => {
                    return Err(SelectorError(format!(
                        "invalid field selector: invalid escape sequence: \\{c}"
                    )));
                }
            }
            in_slash = false;
            continue;
        }
        match c {
            '\\' => in_slash = true,
            // Upstream prints the rune with %v, i.e. as its code point number.
            ',' | '=' => {
                return Err(SelectorError(format!(
                    "invalid field selector: unescaped character in value: {}",
                    c as u32
                )));
            }
            c => out.push(c),
        }
    }
    if in_slash {
        return Err(SelectorError(
            "invalid field selector: invalid escape sequence: \\".to_string(),
        ));
    }
    Ok(out)
}
