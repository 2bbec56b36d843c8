//! Selectors of every size (issue 30): label and field selector strings and
//! `metav1.LabelSelector` objects from a few bytes up to the largest request
//! head the API server reads (hyper's 400 KiB), shaped as many requirements,
//! huge `in` sets, long keys and values, or runs of bad values. Parsing never
//! recurses; a parsed selector has no more requirements than terms, its sets
//! match as a linear scan would, and an error message stays within the input's
//! size plus `MAX_AGGREGATE_BYTES`.

use std::collections::BTreeMap;

use arbitrary::Unstructured;
use serde_json::{Value, json};
use wasmlet_apimachinery::selector::{
    FieldSelector, LabelSelector, MAX_AGGREGATE_BYTES, Operator, SelectorError,
};

/// The largest request head the API server's HTTP/1.1 reader accepts.
const MAX_HEAD: usize = 8192 + 4096 * 100;

const KEYS: &[&str] = &["a", "app", "x/y", "tier", "k8s.io/name", "-bad", "a b"];
const OPS: &[&str] = &["=", "==", "!=", " in ", " notin ", ">", "<", "", "!"];
const VALUES: &[&str] = &["v", "1", "web", "-a", "", "a_b", "x.y", "é"];

/// A piece drawn from `vocab`, or one of them repeated up to `max` bytes.
fn piece(u: &mut Unstructured, vocab: &[&str], max: usize) -> String {
    let s = u.choose(vocab).copied().unwrap_or("a");
    if u.ratio(1, 8).unwrap_or(false) {
        let n = u.int_in_range(1..=max.max(1)).unwrap_or(1);
        s.repeat(n / s.len().max(1) + 1)
    } else {
        s.to_string()
    }
}

/// A selector string of about `size` bytes.
fn selector(u: &mut Unstructured, size: usize) -> String {
    let mut out = String::new();
    while out.len() < size {
        if !out.is_empty() {
            out.push(',');
        }
        let key = piece(u, KEYS, size / 4);
        let op = u.choose(OPS).copied().unwrap_or("=");
        out.push_str(&key);
        out.push_str(op);
        if op.contains("in") {
            // A set: a few values, or as many as fit.
            let n = if u.ratio(1, 4).unwrap_or(false) {
                size / 3
            } else {
                u.int_in_range(0..=8usize).unwrap_or(1)
            };
            out.push('(');
            for i in 0..n {
                if i > 0 {
                    out.push(',');
                }
                if u.ratio(1, 2).unwrap_or(true) {
                    out.push_str(&format!("v{i}"));
                } else {
                    out.push_str(&piece(u, VALUES, 16));
                }
                if out.len() >= size {
                    break;
                }
            }
            out.push(')');
        } else if !op.is_empty() && op != "!" {
            out.push_str(&piece(u, VALUES, size / 4));
        }
        if u.is_empty() && out.len() < size {
            // Out of input: fill with the last shape.
            let again = out.clone();
            out.push(',');
            out.push_str(&again);
        }
    }
    out.truncate(out.floor_char_boundary(MAX_HEAD));
    out
}

fn check_error(what: &str, input: usize, e: &SelectorError) {
    assert!(
        e.0.len() <= 2 * input + MAX_AGGREGATE_BYTES + 1024,
        "{what} of {input} bytes: an error message of {} bytes",
        e.0.len()
    );
}

pub fn selector_bounds(data: &[u8]) {
    let mut u = Unstructured::new(data);
    // Sizes spread over every order of magnitude up to the head limit.
    let exp = u.int_in_range(0..=18u32).unwrap_or(0);
    let size = (1usize << exp).min(MAX_HEAD);
    let text = selector(&mut u, size);

    match LabelSelector::parse(&text) {
        Ok(sel) => {
            let terms = text.matches(',').count() + 1;
            assert!(
                sel.requirements().len() <= terms,
                "{} requirements from {terms} terms",
                sel.requirements().len()
            );
            let mut labels = BTreeMap::new();
            for (i, r) in sel.requirements().iter().enumerate().take(64) {
                if let Some(v) = r.values().get(i % r.values().len().max(1)) {
                    labels.insert(r.key().to_string(), v.clone());
                }
            }
            // Sets match by binary search; a linear scan must agree.
            for r in sel.requirements() {
                let got = labels.get(r.key()).map(String::as_str);
                let has = got.is_some_and(|g| r.values().iter().any(|v| v == g));
                let want = match r.operator() {
                    Operator::In => Some(has),
                    Operator::NotIn => Some(!has),
                    _ => None,
                };
                if let Some(want) = want {
                    assert_eq!(r.matches(&labels), want, "requirement {r} on {labels:?}");
                }
            }
        }
        Err(e) => check_error("label selector", text.len(), &e),
    }
    match FieldSelector::parse(&text) {
        Ok(sel) => assert!(sel.requirements().len() <= text.matches(',').count() + 1),
        Err(e) => check_error("field selector", text.len(), &e),
    }
    // The same terms as a metav1.LabelSelector object.
    let exprs: Vec<Value> = text
        .split(',')
        .take(4096)
        .map(|t| {
            let (k, rest) = t.split_once(' ').unwrap_or((t, ""));
            let values: Vec<&str> = rest.trim_matches(|c| c == '(' || c == ')').split(' ').collect();
            json!({"key": k, "operator": if rest.starts_with("notin") { "NotIn" } else { "In" }, "values": values})
        })
        .collect();
    let obj = json!({"matchExpressions": exprs});
    if let Err(e) = LabelSelector::from_label_selector(&obj) {
        check_error("matchExpressions", obj.to_string().len(), &e);
    }
}
