//! The bounds a JSON patch (RFC 6902) is held to, so that a small patch cannot
//! amplify into a huge or deeply nested object: `copy` ops duplicate subtrees
//! the body never carried (each op can double the object), and an object
//! copied into its own descendant doubles its depth per op. serde_json's
//! `Value` recurses on drop and on serialisation, so a too-deep value must
//! never be built; every measure here walks with an explicit stack.

use serde_json::Value;

/// Upstream's `maxJSONPatchOperations`.
pub const MAX_OPERATIONS: usize = 10_000;
/// Bytes the `copy` ops of one patch may add in all: upstream's json-patch
/// `AccumulatedCopySizeLimit`, which kube-apiserver sets from
/// `JSONPatchMaxCopyBytes` (3 MiB, its request body limit).
pub const MAX_COPY_BYTES: usize = 3 * 1024 * 1024;
/// Largest patched object, in bytes of compact JSON: what a request body may
/// carry (3 MiB), so a patch cannot store what no create or update could.
pub const MAX_RESULT_BYTES: usize = 3 * 1024 * 1024;
/// Deepest nesting (objects and arrays) an op may create. serde_json reads
/// at most 127 levels, so an object nested deeper could be stored but never
/// read back; 100 keeps a margin for what wraps an object (lists, events).
pub const MAX_DEPTH: usize = 100;

/// Size and nesting of a JSON value.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Measure {
    /// Bytes of its compact JSON, counting each string's characters unescaped.
    pub bytes: usize,
    /// Objects and arrays on the deepest path: 0 for a scalar, 1 for `{}`.
    pub depth: usize,
}

/// Measures `v` without recursion, in time and memory linear in its size.
pub fn measure(v: &Value) -> Measure {
    let mut m = Measure::default();
    let mut stack: Vec<(&Value, usize)> = vec![(v, 0)];
    while let Some((v, level)) = stack.pop() {
        m.bytes += match v {
            Value::Null => 4,
            Value::Bool(b) => 4 + usize::from(!b),
            Value::Number(n) => number_len(n),
            Value::String(s) => s.len() + 2,
            // Brackets and commas.
            Value::Array(a) => 2 + a.len().saturating_sub(1),
            // Braces, commas, each key's quotes and colon.
            Value::Object(o) => {
                2 + o.len().saturating_sub(1) + o.keys().map(|k| k.len() + 3).sum::<usize>()
            }
        };
        match v {
            Value::Array(a) => {
                m.depth = m.depth.max(level + 1);
                stack.extend(a.iter().map(|c| (c, level + 1)));
            }
            Value::Object(o) => {
                m.depth = m.depth.max(level + 1);
                stack.extend(o.values().map(|c| (c, level + 1)));
            }
            _ => {}
        }
    }
    m
}

fn number_len(n: &serde_json::Number) -> usize {
    // Integers are exact; floats at most 24 characters (ryu's longest).
    if let Some(i) = n.as_i64() {
        i.unsigned_abs()
            .checked_ilog10()
            .map_or(1, |d| d as usize + 1)
            + usize::from(i < 0)
    } else if let Some(u) = n.as_u64() {
        u.checked_ilog10().map_or(1, |d| d as usize + 1)
    } else {
        24
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn measures_compact_json() {
        for v in [
            json!(null),
            json!(true),
            json!(false),
            json!(0),
            json!(-120),
            json!(u64::MAX),
            json!("ab"),
            json!([]),
            json!({}),
            json!([1, "x", {"a": [true, null]}, {}]),
            json!({"k": {"l": [1, 2, 3]}, "m": "n"}),
        ] {
            assert_eq!(
                measure(&v).bytes,
                serde_json::to_vec(&v).unwrap().len(),
                "{v}"
            );
        }
        assert_eq!(measure(&json!(1)).depth, 0);
        assert_eq!(measure(&json!({})).depth, 1);
        assert_eq!(measure(&json!({"a": [[{}]], "b": 1})).depth, 4);
    }

    #[test]
    fn measures_deep_values_without_recursion() {
        // Built and dropped by hand: serde_json's own drop would recurse.
        let mut v = Value::Null;
        for _ in 0..200_000 {
            v = Value::Array(vec![v]);
        }
        let m = measure(&v);
        assert_eq!(m.depth, 200_000);
        assert_eq!(m.bytes, 200_000 * 2 + 4);
        let mut cur = v;
        while let Value::Array(mut a) = cur {
            cur = a.pop().unwrap_or(Value::Null);
        }
    }
}
