//! JSON patches built to amplify (issue 30 row 1): copies of a subtree into
//! itself or its own list, nesting and doubling the object. Whatever the ops,
//! a patch that applies stays within the bounds of `patch::bounds`, and one
//! that fails leaves the object unchanged.

use arbitrary::Unstructured;
use serde_json::{Value, json};
use wasmlet_apimachinery::patch::{self, bounds};

/// A path into `/a` from the input: up to `len` tokens of `a`, `0`, `-`.
fn path(u: &mut Unstructured, len: u8) -> String {
    let n = u.int_in_range(0..=len).unwrap_or(0);
    let mut p = "/a".to_string();
    for _ in 0..n {
        p.push('/');
        p.push_str(u.choose(&["a", "0", "-"]).unwrap_or(&"a"));
    }
    p
}

pub fn patch_bounds(data: &[u8]) {
    let mut u = Unstructured::new(data);
    let seed_len = u.int_in_range(0..=4096usize).unwrap_or(0);
    let original = json!({"a": {"a": ["x".repeat(seed_len)], "0": {}}});
    let mut ops = vec![];
    let n = u.int_in_range(0..=40u8).unwrap_or(0);
    for _ in 0..n {
        let op = match u.int_in_range(0..=4u8).unwrap_or(0) {
            // Doubles the list /a/a.
            0 => json!({"op": "copy", "from": "/a/a", "path": "/a/a/-"}),
            // Nests /a into itself.
            1 => json!({"op": "copy", "from": "/a", "path": path(&mut u, 12)}),
            2 => json!({"op": "copy", "from": path(&mut u, 6), "path": path(&mut u, 12)}),
            3 => json!({"op": "move", "from": path(&mut u, 6), "path": path(&mut u, 12)}),
            _ => {
                let depth = u.int_in_range(0..=120u8).unwrap_or(0);
                let mut v = json!(1);
                for _ in 0..depth {
                    v = json!([v]);
                }
                json!({"op": "add", "path": path(&mut u, 12), "value": v})
            }
        };
        ops.push(op);
    }
    let before = bounds::measure(&original);
    let mut x = original.clone();
    match patch::json(&mut x, &Value::Array(ops)) {
        Ok(()) => {
            let after = bounds::measure(&x);
            assert!(
                after.depth <= before.depth.max(bounds::MAX_DEPTH),
                "a patch nested the object {} deep",
                after.depth
            );
            assert!(
                after.bytes <= before.bytes.max(bounds::MAX_RESULT_BYTES),
                "a patch grew the object to {} bytes",
                after.bytes
            );
        }
        Err(_) => assert_eq!(x, original, "a failed JSON patch changed the object"),
    }
}
