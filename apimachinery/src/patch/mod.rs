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
        what: &'static str,
        got: &'static str,
    },
    /// A strategic merge patch is malformed or does not fit the object; `path` is
    /// where (`.spec.containers`), empty at the root.
    #[error("invalid strategic merge patch{}: {message}", at(path))]
    Strategic { path: String, message: String },
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
/// that fails on this object is [`PatchError::JsonPatchFailed`].
pub fn json(target: &mut Value, patch: &Value) -> Result<(), PatchError> {
    if !patch.is_array() {
        return Err(PatchError::MalformedJsonPatch(format!(
            "expected an array of operations, not {}",
            kind_name(patch)
        )));
    }
    let ops: json_patch::Patch = serde_json::from_value(patch.clone())
        .map_err(|e| PatchError::MalformedJsonPatch(e.to_string()))?;
    // On a copy, without json-patch's undo: the undo misses some failures (a
    // `move` whose destination parent is missing keeps its source removed)
    // and panics on others (undoing a move of a child over its parent).
    let mut out = target.clone();
    json_patch::patch_unsafe(&mut out, &ops)
        .map_err(|e| PatchError::JsonPatchFailed(e.to_string()))?;
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
