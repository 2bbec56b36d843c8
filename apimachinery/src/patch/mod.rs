//! The three PATCH bodies the API server accepts, as pure functions:
//! JSON merge patch (RFC 7386), JSON patch (RFC 6902) and strategic merge patch.
//!
//! ```
//! use serde_json::json;
//! use wasmlet_apimachinery::builtin::BuiltinListTypes;
//! use wasmlet_apimachinery::patch;
//!
//! let pod = json!({"spec": {"containers": [
//!     {"name": "app", "image": "app:1"},
//!     {"name": "sidecar", "image": "proxy:1"},
//! ]}});
//! let smp = json!({"spec": {"containers": [{"name": "app", "image": "app:2"}]}});
//! let out = patch::strategic(&pod, &smp, &BuiltinListTypes::for_kind("", "Pod")).unwrap();
//! assert_eq!(out["spec"]["containers"][0], json!({"name": "app", "image": "app:2"}));
//! assert_eq!(out["spec"]["containers"][1]["name"], "sidecar");
//!
//! let mut obj = json!({"metadata": {"labels": {"a": "1", "b": "2"}}});
//! patch::merge(&mut obj, &json!({"metadata": {"labels": {"a": null}}}));
//! assert_eq!(obj, json!({"metadata": {"labels": {"b": "2"}}}));
//!
//! patch::json(&mut obj, &json!([{"op": "add", "path": "/spec", "value": {}}])).unwrap();
//! assert_eq!(obj["spec"], json!({}));
//! ```
//!
//! # Strategic merge patch
//!
//! A port of upstream `k8s.io/apimachinery/pkg/util/strategicpatch` in its
//! server-side mode (`StrategicMergeMapPatch`: parallel lists merged, unmatched
//! nulls ignored), including its list ordering: the merged list keeps the patch's
//! order for the items the patch names and slots the server-only items in by their
//! original positions. A consequence upstream's tests pin down: patching
//! `finalizers: [a, b]` with `[c]` gives `[c, a, b]`, not `[a, b, c]`; only a
//! `$setElementOrder/finalizers: [a, b, c]` directive (what kubectl sends) puts `c`
//! last. Lists with [`ListType::Map`](crate::listtype::ListType::Map) merge on the *first* key, as upstream's single
//! `patchMergeKey` does.
//!
//! Deviations from upstream, all on inputs upstream accepts but would store oddly
//! or panic on:
//! * Keys starting with `$` that are not a directive (`$patch`, `$retainKeys`,
//!   `$setElementOrder/…`, `$deleteFromPrimitiveList/…`) are an error instead of
//!   being stored as fields; `$ref` and `$schema` (JSON-schema fields of a CRD)
//!   are the exception.
//! * Values taken from the patch as they are (new list elements, new fields,
//!   atomic lists, `$patch: replace`) have their nested directives and `null`
//!   fields removed; upstream leaves that to typed decoding, which drops them.
//! * `null` list elements form their own element type instead of crashing.
//! * Error texts say where in the object the problem is and print values as JSON.

//!
//! Layout: this file holds the errors and the entry points (the merge and
//! JSON patch wrappers over the `json-patch` crate); `strategic` holds the
//! strategic merge itself and `ordering` its list-ordering rules
//! (`$setElementOrder` and upstream's `normalizeElementOrder`).

use crate::listtype::ListTypes;
use serde_json::Value;

use strategic::kind_name;

pub mod bounds;
mod ordering;
mod strategic;
#[cfg(test)]
mod tests;

/// Why a patch could not be applied. The `Display` text is meant for the
/// `message` of the 400/422 `Status` the handler returns.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PatchError {
    /// The body is not an RFC 6902 document (not an array, unknown `op`, missing
    /// `path`/`value`/`from`, a path that is not a JSON pointer, ...).
    #[error("invalid JSON patch document: {0}")]
    MalformedJsonPatch(String),
    /// A well-formed JSON patch failed on this object (missing path, failed `test`).
    /// The object is left unchanged.
    #[error("the JSON patch could not be applied: {0}")]
    JsonPatchFailed(String),
    /// The object or the patch is not a JSON object where one is required.
    #[error("{what} must be a JSON object, not {got}")]
    NotAnObject {
        /// Which input it is: `"the patch"` or `"the object"`.
        what: &'static str,
        /// The JSON type found instead (`array`, `string`, ...).
        got: &'static str,
    },
    /// More operations than [`bounds::MAX_OPERATIONS`] (upstream answers 413).
    #[error(
        "The allowed maximum operations in a JSON patch is {}, got {got}",
        bounds::MAX_OPERATIONS
    )]
    TooManyOperations {
        /// How many operations the patch holds.
        got: usize,
    },
    /// The `copy` ops would add more than [`bounds::MAX_COPY_BYTES`] in all;
    /// the text after the op is upstream's json-patch error.
    #[error(
        "the JSON patch could not be applied: operation '/{op}' failed at path '{path}': Unable to complete the copy, the accumulated size increase of copy is {accumulated}, exceeding the limit {}",
        bounds::MAX_COPY_BYTES
    )]
    CopyTooLarge {
        /// Index of the `copy` op that crossed the limit.
        op: usize,
        /// That op's `path`.
        path: String,
        /// Bytes added by the copies up to and including this one.
        accumulated: usize,
    },
    /// The op would nest the object deeper than [`bounds::MAX_DEPTH`].
    #[error(
        "the JSON patch could not be applied: operation '/{op}' failed at path '{path}': the result would nest {depth} levels deep, over the limit of {}",
        bounds::MAX_DEPTH
    )]
    TooDeep {
        /// Index of the op that would nest too deep.
        op: usize,
        /// That op's `path`.
        path: String,
        /// The depth the result would reach.
        depth: usize,
    },
    /// The patched object would be larger than [`bounds::MAX_RESULT_BYTES`].
    #[error(
        "the JSON patch could not be applied: the patched object would be {bytes} bytes, over the limit of {}",
        bounds::MAX_RESULT_BYTES
    )]
    ResultTooLarge {
        /// The size the patched object would have, in bytes of JSON.
        bytes: usize,
    },
    /// A strategic merge patch is malformed or does not fit the object; `path` is
    /// where (`.spec.containers`), empty at the root.
    #[error("invalid strategic merge patch{}: {message}", at(path))]
    Strategic {
        /// Where in the object, e.g. `.spec.containers`; empty at the root.
        path: String,
        /// What is wrong there.
        message: String,
    },
}

fn at(path: &str) -> String {
    if path.is_empty() {
        String::new()
    } else {
        format!(" at {path}")
    }
}

/// JSON merge patch (RFC 7386): objects merge recursively, `null` deletes, and
/// anything else (arrays included) replaces. A patch that is not an object
/// replaces the whole target.
pub fn merge(target: &mut Value, patch: &Value) {
    json_patch::merge(target, patch);
}

/// JSON patch (RFC 6902). Either every operation applies or `target` is left as it
/// was. A malformed document is [`PatchError::MalformedJsonPatch`]; an operation
/// that fails on this object is [`PatchError::JsonPatchFailed`]. The patch is held
/// to the limits in [`bounds`]: at most [`bounds::MAX_OPERATIONS`] ops, copies
/// adding at most [`bounds::MAX_COPY_BYTES`], no op nesting the object deeper than
/// [`bounds::MAX_DEPTH`], a result of at most [`bounds::MAX_RESULT_BYTES`]. Each op
/// is checked before it applies, so an over-limit object is never built.
pub fn json(target: &mut Value, patch: &Value) -> Result<(), PatchError> {
    let Some(list) = patch.as_array() else {
        return Err(PatchError::MalformedJsonPatch(format!(
            "expected an array of operations, not {}",
            kind_name(patch)
        )));
    };
    if list.len() > bounds::MAX_OPERATIONS {
        return Err(PatchError::TooManyOperations { got: list.len() });
    }
    let ops: json_patch::Patch = serde_json::from_value(patch.clone())
        .map_err(|e| PatchError::MalformedJsonPatch(e.to_string()))?;
    // On a copy, without json-patch's undo: the undo misses some failures (a
    // `move` whose destination parent is missing keeps its source removed)
    // and panics on others (undoing a move of a child over its parent).
    let mut out = target.clone();
    let mut copied = 0;
    // An upper bound of the result's size: what the object had plus all that
    // adds, replaces and copies brought in (removals are not subtracted).
    let mut bound = bounds::measure(&out).bytes;
    for (i, op) in ops.iter().enumerate() {
        use json_patch::PatchOperation as Op;
        // What the op puts where; a missing `from` is json-patch's to report.
        let added = match op {
            Op::Add(o) => Some((&o.path, bounds::measure(&o.value))),
            Op::Replace(o) => Some((&o.path, bounds::measure(&o.value))),
            Op::Copy(o) => out
                .pointer(o.from.as_str())
                .map(|v| (&o.path, bounds::measure(v))),
            Op::Move(o) => out
                .pointer(o.from.as_str())
                .map(|v| (&o.path, bounds::measure(v))),
            Op::Remove(_) | Op::Test(_) => None,
        };
        if let Some((path, m)) = added {
            let depth = path.count() + m.depth;
            if depth > bounds::MAX_DEPTH {
                return Err(PatchError::TooDeep {
                    op: i,
                    path: path.to_string(),
                    depth,
                });
            }
            if let Op::Copy(_) = op {
                copied += m.bytes;
                if copied > bounds::MAX_COPY_BYTES {
                    return Err(PatchError::CopyTooLarge {
                        op: i,
                        path: path.to_string(),
                        accumulated: copied,
                    });
                }
            }
            if !matches!(op, Op::Move(_)) {
                bound += m.bytes;
            }
        }
        json_patch::patch_unsafe(&mut out, std::slice::from_ref(op)).map_err(|mut e| {
            e.operation = i;
            PatchError::JsonPatchFailed(e.to_string())
        })?;
    }
    // Adds and copies are bounded by the body and the copy limit; only when
    // their sum could pass the limit is the result measured.
    if bound > bounds::MAX_RESULT_BYTES {
        let bytes = bounds::measure(&out).bytes;
        if bytes > bounds::MAX_RESULT_BYTES {
            return Err(PatchError::ResultTooLarge { bytes });
        }
    }
    *target = out;
    Ok(())
}

/// Strategic merge patch of `original` by `patch`, with list semantics from
/// `lists` (use [`crate::builtin::BuiltinListTypes::for_kind`]). Returns the new
/// object; neither input is modified.
///
/// Maps merge recursively and `null` deletes a field. A list merges according to
/// its [`ListType`](crate::listtype::ListType): `Map(keys)` by the first key (matching elements merged, new
/// ones added), `Set` as a union of scalars, `Atomic` replaced. Directives:
/// `$patch: replace|delete` on maps and map-list elements, `$retainKeys`,
/// `$setElementOrder/<list>`, `$deleteFromPrimitiveList/<list>`.
pub fn strategic(
    original: &Value,
    patch: &Value,
    lists: &dyn ListTypes,
) -> Result<Value, PatchError> {
    strategic::apply(original, patch, lists)
}
