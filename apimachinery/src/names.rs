//! Name and label syntax checks with upstream's error strings
//! (`k8s.io/apimachinery/pkg/util/validation`, as of v0.33).
//!
//! Each function returns the list of problems; an empty list means valid. The
//! strings are exactly what upstream puts in the `detail` of a field error, so
//! a caller builds messages such as
//! `metadata.name: Invalid value: "Foo": a lowercase RFC 1123 subdomain must ...`.
//!
//! ```
//! use wasmlet_apimachinery::names::{is_dns1123_subdomain, is_qualified_name};
//! assert!(is_dns1123_subdomain("web-0.example").is_empty());
//! assert_eq!(is_dns1123_subdomain(&"a".repeat(254))[0], "must be no more than 253 characters");
//! assert!(is_qualified_name("app.kubernetes.io/name").is_empty());
//! ```
//!
//! The checks are written as byte loops instead of regexes: the grammars are
//! tiny, and this keeps the module free of lazily compiled statics.

/// Max length of a DNS-1123 label (and of a label value, and of a qualified name's name part).
pub const DNS1123_LABEL_MAX_LENGTH: usize = 63;
/// Max length of a DNS-1123 subdomain (object names of most kinds).
pub const DNS1123_SUBDOMAIN_MAX_LENGTH: usize = 253;
/// Max length of a label value.
pub const LABEL_VALUE_MAX_LENGTH: usize = 63;
const QUALIFIED_NAME_MAX_LENGTH: usize = 63;

const DNS1123_LABEL_FMT: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?";
const DNS1123_LABEL_ERR_MSG: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character";
const DNS1123_SUBDOMAIN_ERR_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character";
const QUALIFIED_NAME_FMT: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";
const QUALIFIED_NAME_ERR_MSG: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
const LABEL_VALUE_FMT: &str = "(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?";
const LABEL_VALUE_ERR_MSG: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";

fn dns1123_subdomain_fmt() -> String {
    format!("{DNS1123_LABEL_FMT}(\\.{DNS1123_LABEL_FMT})*")
}

/// Upstream `MaxLenError`.
pub fn max_len_error(length: usize) -> String {
    format!("must be no more than {length} characters")
}

/// Upstream `EmptyError`.
pub fn empty_error() -> String {
    "must be non-empty".to_string()
}

/// Upstream `RegexError`: the message, examples, and the regex itself.
pub fn regex_error(msg: &str, fmt: &str, examples: &[&str]) -> String {
    if examples.is_empty() {
        return format!("{msg} (regex used for validation is '{fmt}')");
    }
    let mut out = format!("{msg} (e.g. ");
    for (i, e) in examples.iter().enumerate() {
        if i > 0 {
            out.push_str(" or ");
        }
        out.push('\'');
        out.push_str(e);
        out.push_str("', ");
    }
    out.push_str("regex used for validation is '");
    out.push_str(fmt);
    out.push_str("')");
    out
}

fn is_lower_alnum(b: u8) -> bool {
    b.is_ascii_lowercase() || b.is_ascii_digit()
}

/// `^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
fn matches_dns1123_label(s: &str) -> bool {
    let b = s.as_bytes();
    match (b.first(), b.last()) {
        (Some(&f), Some(&l)) => {
            is_lower_alnum(f)
                && is_lower_alnum(l)
                && b.iter().all(|&c| is_lower_alnum(c) || c == b'-')
        }
        _ => false,
    }
}

/// `^label(\.label)*$`
fn matches_dns1123_subdomain(s: &str) -> bool {
    s.split('.').all(matches_dns1123_label)
}

/// `^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$`
fn matches_qualified_name_part(s: &str) -> bool {
    let b = s.as_bytes();
    match (b.first(), b.last()) {
        (Some(&f), Some(&l)) => {
            f.is_ascii_alphanumeric()
                && l.is_ascii_alphanumeric()
                && b.iter()
                    .all(|&c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
        }
        _ => false,
    }
}

/// Checks a DNS-1123 label (namespace names, and names of kinds that need it):
/// at most 63 characters of `[a-z0-9-]`, alphanumeric at both ends.
///
/// ```
/// use wasmlet_apimachinery::names::is_dns1123_label;
/// assert!(is_dns1123_label("kube-system").is_empty());
/// assert_eq!(is_dns1123_label("a.b"), vec!["must not contain dots"]);
/// ```
pub fn is_dns1123_label(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > DNS1123_LABEL_MAX_LENGTH {
        errs.push(max_len_error(DNS1123_LABEL_MAX_LENGTH));
    }
    if !matches_dns1123_label(value) {
        if matches_dns1123_subdomain(value) {
            // A valid subdomain that is not a valid label can only differ by its dots.
            errs.push("must not contain dots".to_string());
        } else {
            errs.push(regex_error(
                DNS1123_LABEL_ERR_MSG,
                DNS1123_LABEL_FMT,
                &["my-name", "123-abc"],
            ));
        }
    }
    errs
}

/// Checks a DNS-1123 subdomain (the name of most objects): at most 253
/// characters, dot-separated DNS-1123 labels.
pub fn is_dns1123_subdomain(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > DNS1123_SUBDOMAIN_MAX_LENGTH {
        errs.push(max_len_error(DNS1123_SUBDOMAIN_MAX_LENGTH));
    }
    if !matches_dns1123_subdomain(value) {
        errs.push(regex_error(
            DNS1123_SUBDOMAIN_ERR_MSG,
            &dns1123_subdomain_fmt(),
            &["example.com"],
        ));
    }
    errs
}

/// Checks a "qualified name": label and annotation keys, finalizers.
/// An optional DNS-1123 subdomain prefix and `/`, then a name of at most 63
/// characters of `[-A-Za-z0-9_.]`, alphanumeric at both ends.
pub fn is_qualified_name(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    let parts: Vec<&str> = value.split('/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                errs.push(format!("prefix part {}", empty_error()));
            } else {
                errs.extend(
                    is_dns1123_subdomain(prefix)
                        .into_iter()
                        .map(|m| format!("prefix part {m}")),
                );
            }
            *name
        }
        _ => {
            errs.push(format!(
                "a qualified name {} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
                regex_error(QUALIFIED_NAME_ERR_MSG, QUALIFIED_NAME_FMT, &["MyName", "my.name", "123-abc"])
            ));
            return errs;
        }
    };
    if name.is_empty() {
        errs.push(format!("name part {}", empty_error()));
    } else if name.len() > QUALIFIED_NAME_MAX_LENGTH {
        errs.push(format!(
            "name part {}",
            max_len_error(QUALIFIED_NAME_MAX_LENGTH)
        ));
    }
    if !matches_qualified_name_part(name) {
        errs.push(format!(
            "name part {}",
            regex_error(
                QUALIFIED_NAME_ERR_MSG,
                QUALIFIED_NAME_FMT,
                &["MyName", "my.name", "123-abc"]
            )
        ));
    }
    errs
}

/// Checks a label value: empty, or up to 63 characters of `[-A-Za-z0-9_.]`
/// with alphanumeric ends.
pub fn is_valid_label_value(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > LABEL_VALUE_MAX_LENGTH {
        errs.push(max_len_error(LABEL_VALUE_MAX_LENGTH));
    }
    if !value.is_empty() && !matches_qualified_name_part(value) {
        errs.push(regex_error(
            LABEL_VALUE_ERR_MSG,
            LABEL_VALUE_FMT,
            &["MyValue", "my_value", "12345"],
        ));
    }
    errs
}

/// Upstream `NameIsDNSSubdomain`: validates `metadata.name`, or with
/// `prefix = true` a `metadata.generateName` (a trailing `-` is allowed there
/// because random characters follow it).
pub fn name_is_dns_subdomain(name: &str, prefix: bool) -> Vec<String> {
    is_dns1123_subdomain(if prefix {
        mask_trailing_dash(name)
    } else {
        name
    })
}

/// Upstream `NameIsDNSLabel`: as [`name_is_dns_subdomain`] for kinds whose
/// names must be DNS-1123 labels (namespaces).
pub fn name_is_dns_label(name: &str, prefix: bool) -> Vec<String> {
    is_dns1123_label(if prefix {
        mask_trailing_dash(name)
    } else {
        name
    })
}

/// Upstream `maskTrailingDash`: `"abc-"` is checked as `"abc"`; a lone `"-"` stays.
fn mask_trailing_dash(name: &str) -> &str {
    if name.len() > 1 && name.ends_with('-') {
        &name[..name.len() - 1]
    } else {
        name
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
    const LABEL_MSG: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";

    #[test]
    fn subdomain_accepts() {
        for ok in [
            "a",
            "0",
            "abc-123",
            "a.b.c",
            "my-app.example.com",
            &"a".repeat(253),
        ] {
            assert!(is_dns1123_subdomain(ok).is_empty(), "{ok}");
        }
    }

    #[test]
    fn subdomain_rejects_with_upstream_message() {
        for bad in ["", "A", "-a", "a-", "a..b", ".a", "a.", "a_b", "a b", "é"] {
            assert_eq!(
                is_dns1123_subdomain(bad),
                vec![SUBDOMAIN_MSG.to_string()],
                "{bad:?}"
            );
        }
        assert_eq!(
            is_dns1123_subdomain(&"a".repeat(254)),
            vec!["must be no more than 253 characters"]
        );
        // Both problems at once, in upstream's order.
        let errs = is_dns1123_subdomain(&"A".repeat(300));
        assert_eq!(
            errs,
            vec![
                "must be no more than 253 characters".to_string(),
                SUBDOMAIN_MSG.to_string()
            ]
        );
    }

    #[test]
    fn label_rules() {
        assert!(is_dns1123_label("default").is_empty());
        assert!(is_dns1123_label(&"a".repeat(63)).is_empty());
        assert_eq!(
            is_dns1123_label(&"a".repeat(64)),
            vec!["must be no more than 63 characters"]
        );
        assert_eq!(is_dns1123_label("a.b"), vec!["must not contain dots"]);
        assert_eq!(is_dns1123_label("Abc"), vec![LABEL_MSG.to_string()]);
        assert_eq!(is_dns1123_label(""), vec![LABEL_MSG.to_string()]);
    }

    #[test]
    fn regex_error_matches_upstream_spacing() {
        // Upstream puts ", " after each example and " or " between them, hence the double space.
        assert_eq!(
            regex_error("m", "f", &["a", "b"]),
            "m (e.g. 'a',  or 'b', regex used for validation is 'f')"
        );
        assert_eq!(
            regex_error("m", "f", &[]),
            "m (regex used for validation is 'f')"
        );
    }

    #[test]
    fn qualified_names() {
        for ok in [
            "a",
            "A_b.c-D",
            "example.com/MyName",
            "app.kubernetes.io/name",
            "x/y",
        ] {
            assert!(is_qualified_name(ok).is_empty(), "{ok}");
        }
        assert_eq!(
            is_qualified_name("/a"),
            vec!["prefix part must be non-empty"]
        );
        assert_eq!(is_qualified_name("a/"), vec![
            "name part must be non-empty".to_string(),
            "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')".to_string(),
        ]);
        assert_eq!(
            is_qualified_name("Bad_Prefix/a"),
            vec![format!("prefix part {SUBDOMAIN_MSG}")]
        );
        assert_eq!(
            is_qualified_name(&"a".repeat(64)),
            vec!["name part must be no more than 63 characters"]
        );
        let three = is_qualified_name("a/b/c");
        assert_eq!(three.len(), 1);
        assert!(
            three[0].starts_with("a qualified name must consist of"),
            "{}",
            three[0]
        );
        assert!(three[0].ends_with(
            "with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
        ));
        assert_eq!(is_qualified_name("-a").len(), 1);
    }

    #[test]
    fn label_values() {
        for ok in ["", "a", "My_value-1.2", &"v".repeat(63)] {
            assert!(is_valid_label_value(ok).is_empty(), "{ok}");
        }
        assert_eq!(is_valid_label_value("-a"), vec![
            "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')".to_string()
        ]);
        assert_eq!(
            is_valid_label_value(&"v".repeat(64)),
            vec!["must be no more than 63 characters"]
        );
        assert_eq!(is_valid_label_value("a b").len(), 1);
    }

    #[test]
    fn generate_name_prefix_may_end_with_dash() {
        assert!(name_is_dns_subdomain("web-", true).is_empty());
        assert!(!name_is_dns_subdomain("web-", false).is_empty());
        assert!(name_is_dns_label("ns-", true).is_empty());
        assert!(!name_is_dns_subdomain("-", true).is_empty());
    }
}
