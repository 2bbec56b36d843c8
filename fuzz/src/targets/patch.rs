//! JSON merge patch, JSON patch and strategic merge patch.

use arbitrary::Unstructured;
use serde_json::{Map, Value};
use wasmlet_apimachinery::builtin::BuiltinListTypes;
use wasmlet_apimachinery::patch;

use crate::generate;

/// `b` without object members that are `null`: a merge patch cannot express
/// them (`null` means delete), so the round trip holds only without them.
fn strip_nulls(v: &mut Value) {
    match v {
        Value::Object(m) => {
            m.retain(|_, v| !v.is_null());
            m.values_mut().for_each(strip_nulls);
        }
        Value::Array(items) => items.iter_mut().for_each(strip_nulls),
        _ => {}
    }
}

/// The RFC 7386 merge patch that turns `a` into `b` (`b` free of object nulls).
fn merge_diff(a: &Value, b: &Value) -> Value {
    match (a, b) {
        (Value::Object(a), Value::Object(b)) => {
            let mut p = Map::new();
            for k in a.keys().filter(|k| !b.contains_key(*k)) {
                p.insert(k.clone(), Value::Null);
            }
            for (k, bv) in b {
                match a.get(k) {
                    Some(av) if av == bv => {}
                    Some(av) => {
                        p.insert(k.clone(), merge_diff(av, bv));
                    }
                    None => {
                        p.insert(k.clone(), bv.clone());
                    }
                }
            }
            Value::Object(p)
        }
        _ => b.clone(),
    }
}

pub fn merge_and_json(data: &[u8]) {
    let Some([a, mut b, ops]) = generate::json_or_value::<3>(data) else {
        return;
    };
    // Arbitrary patches: no panic, and a merge patch of a diff round-trips.
    let mut x = a.clone();
    patch::merge(&mut x, &b);
    strip_nulls(&mut b);
    let mut x = a.clone();
    patch::merge(&mut x, &merge_diff(&a, &b));
    assert_eq!(x, b, "merge(a, diff(a, b)) != b");
    let mut x = a.clone();
    patch::merge(&mut x, &merge_diff(&a, &a));
    assert_eq!(x, a, "merge(a, diff(a, a)) != a");

    // JSON patch: the crate's diff applies through our validation, and a
    // failing document leaves the target as it was.
    let d = serde_json::to_value(json_patch::diff(&a, &b)).expect("a patch serializes");
    let mut x = a.clone();
    patch::json(&mut x, &d).expect("the diff of two documents applies");
    assert_eq!(x, b, "json(a, diff(a, b)) != b");
    let ops = json_ops(data, ops);
    let mut x = a.clone();
    if patch::json(&mut x, &ops).is_err() {
        assert_eq!(x, a, "a failed JSON patch changed the object");
    }
}

/// An RFC 6902 document: `v` if it is an array, else operations built from
/// the input with paths into common fields.
fn json_ops(data: &[u8], v: Value) -> Value {
    if v.is_array() {
        return v;
    }
    let mut u = Unstructured::new(data);
    let mut ops = Vec::new();
    let n = u.int_in_range(0..=4u8).unwrap_or(0);
    for _ in 0..n {
        let mut op = Map::new();
        let name = u
            .choose(&["add", "remove", "replace", "move", "copy", "test", "bogus"])
            .unwrap_or(&"add");
        op.insert("op".into(), Value::String(name.to_string()));
        let path = |u: &mut Unstructured| -> String {
            let depth = u.int_in_range(0..=3u8).unwrap_or(0);
            (0..depth)
                .map(|_| {
                    let w = generate::word(u).unwrap_or_default();
                    if u.ratio(1, 4).unwrap_or(false) {
                        format!(
                            "/{}",
                            u.choose(&["0", "1", "-", "99", "~1", "~0", "~2"])
                                .unwrap_or(&"0")
                        )
                    } else {
                        format!("/{w}")
                    }
                })
                .collect()
        };
        op.insert("path".into(), Value::String(path(&mut u)));
        if u.ratio(1, 2).unwrap_or(false) {
            op.insert("from".into(), Value::String(path(&mut u)));
        }
        if u.ratio(3, 4).unwrap_or(false) {
            op.insert(
                "value".into(),
                generate::value(&mut u, 2).unwrap_or(Value::Null),
            );
        }
        ops.push(Value::Object(op));
    }
    Value::Array(ops)
}

/// Whether `v` holds a key starting with `$` (a directive) anywhere.
fn has_directive(v: &Value) -> bool {
    match v {
        Value::Object(m) => m
            .iter()
            .any(|(k, v)| k.starts_with('$') || has_directive(v)),
        Value::Array(items) => items.iter().any(has_directive),
        _ => false,
    }
}

pub fn strategic(data: &[u8]) {
    let Some([original, p]) = generate::json_or_value::<2>(data) else {
        return;
    };
    let mut u = Unstructured::new(data);
    let (group, kind) = *u
        .choose(&[
            ("", "Pod"),
            ("apps", "Deployment"),
            ("", "ConfigMap"),
            ("", "Service"),
            ("", "Node"),
        ])
        .unwrap_or(&("", "Pod"));
    let lists = BuiltinListTypes::for_kind(group, kind);
    let _ = patch::strategic(&original, &p, &lists);
    if original.is_object() && !has_directive(&original) {
        let same = patch::strategic(&original, &Value::Object(Map::new()), &lists);
        if let Ok(same) = same {
            assert_eq!(
                same, original,
                "an empty strategic patch changed the object"
            );
        }
    }
}
