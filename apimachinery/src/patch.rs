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
//! last. Lists with [`ListType::Map`] merge on the *first* key, as upstream's single
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

use crate::listtype::{ListType, ListTypes};
use serde_json::{Map, Value};

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
    json_patch::patch(target, &ops).map_err(|e| PatchError::JsonPatchFailed(e.to_string()))
}

/// Strategic merge patch of `original` by `patch`, with list semantics from
/// `lists` (use [`crate::builtin::BuiltinListTypes::for_kind`]). Returns the new
/// object; neither input is modified.
///
/// Maps merge recursively and `null` deletes a field. A list merges according to
/// its [`ListType`]: `Map(keys)` by the first key (matching elements merged, new
/// ones added), `Set` as a union of scalars, `Atomic` replaced. Directives:
/// `$patch: replace|delete` on maps and map-list elements, `$retainKeys`,
/// `$setElementOrder/<list>`, `$deleteFromPrimitiveList/<list>`.
pub fn strategic(
    original: &Value,
    patch: &Value,
    lists: &dyn ListTypes,
) -> Result<Value, PatchError> {
    let Value::Object(orig) = original else {
        return Err(PatchError::NotAnObject {
            what: "the object to patch",
            got: kind_name(original),
        });
    };
    let Value::Object(p) = patch else {
        return Err(PatchError::NotAnObject {
            what: "a strategic merge patch",
            got: kind_name(patch),
        });
    };
    let smp = Smp { lists };
    let mut path = Vec::new();
    smp.check_directives(patch, &mut path)?;
    smp.merge_map(orig.clone(), p.clone(), &mut path)
        .map(Value::Object)
}

const DIRECTIVE: &str = "$patch";
const RETAIN_KEYS: &str = "$retainKeys";
const SET_ELEMENT_ORDER: &str = "$setElementOrder";
const DELETE_FROM_PRIMITIVE_LIST: &str = "$deleteFromPrimitiveList";

/// Keys that look like directives but are plain JSON-schema fields of a CRD.
const DOLLAR_FIELDS: &[&str] = &["$ref", "$schema"];

fn is_directive_key(k: &str) -> bool {
    k == DIRECTIVE
        || k == RETAIN_KEYS
        || k.starts_with(SET_ELEMENT_ORDER)
        || k.starts_with(DELETE_FROM_PRIMITIVE_LIST)
}

type Obj = Map<String, Value>;

struct Smp<'a> {
    lists: &'a dyn ListTypes,
}

/// Element kinds as Go's `reflect.Type` tells them apart after `json.Unmarshal`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Null,
    Bool,
    Number,
    String,
    Array,
    Object,
}

fn kind(v: &Value) -> Kind {
    match v {
        Value::Null => Kind::Null,
        Value::Bool(_) => Kind::Bool,
        Value::Number(_) => Kind::Number,
        Value::String(_) => Kind::String,
        Value::Array(_) => Kind::Array,
        Value::Object(_) => Kind::Object,
    }
}

fn kind_name(v: &Value) -> &'static str {
    match kind(v) {
        Kind::Null => "null",
        Kind::Bool => "a boolean",
        Kind::Number => "a number",
        Kind::String => "a string",
        Kind::Array => "a list",
        Kind::Object => "an object",
    }
}

/// Equality as Go's `==` on decoded JSON: numbers compare by value (`1 == 1.0`).
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x == y || x.as_f64() == y.as_f64(),
        _ => a == b,
    }
}

/// Upstream's `removeDirectives` + `discardNullValuesFromPatch` for values taken
/// from the patch as they are. `None`: the value is itself a directive, drop it.
fn clean_new(v: Value) -> Option<Value> {
    match v {
        Value::Object(m) => {
            if m.contains_key(DIRECTIVE) {
                return None;
            }
            Some(Value::Object(clean_map(m)))
        }
        Value::Array(a) => Some(Value::Array(a.into_iter().filter_map(clean_new).collect())),
        other => Some(other),
    }
}

fn clean_map(m: Obj) -> Obj {
    m.into_iter()
        .filter(|(k, v)| !is_directive_key(k) && !v.is_null())
        .filter_map(|(k, v)| clean_new(v).map(|v| (k, v)))
        .collect()
}

impl Smp<'_> {
    fn err(&self, path: &[String], message: impl Into<String>) -> PatchError {
        let path = path.iter().map(|s| format!(".{s}")).collect::<String>();
        PatchError::Strategic {
            path,
            message: message.into(),
        }
    }

    fn list_type(&self, path: &[String]) -> ListType {
        let names: Vec<&str> = path.iter().map(String::as_str).collect();
        self.lists.list_type(&names)
    }

    /// Rejects `$`-keys that are no directive before anything is merged.
    fn check_directives(&self, v: &Value, path: &mut Vec<String>) -> Result<(), PatchError> {
        match v {
            Value::Object(m) => {
                for (k, v) in m {
                    if k.starts_with('$')
                        && !is_directive_key(k)
                        && !DOLLAR_FIELDS.contains(&k.as_str())
                    {
                        return Err(self.err(path, format!(
                            "unknown directive {k:?}; strategic merge patch knows $patch, $retainKeys, \
                             $setElementOrder/<list> and $deleteFromPrimitiveList/<list>"
                        )));
                    }
                    path.push(k.clone());
                    let r = self.check_directives(v, path);
                    path.pop();
                    r?;
                }
            }
            Value::Array(a) => {
                for v in a {
                    self.check_directives(v, path)?;
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// Upstream `mergeMap`.
    fn merge_map(
        &self,
        mut original: Obj,
        mut patch: Obj,
        path: &mut Vec<String>,
    ) -> Result<Obj, PatchError> {
        if let Some(d) = patch.remove(DIRECTIVE) {
            return match d.as_str() {
                Some("replace") => Ok(clean_map(patch)),
                Some("delete") => Ok(Map::new()),
                _ => Err(self.err(path, format!(
                    "unknown patch type: {d} in map: {}; $patch in a map must be \"replace\" or \"delete\"",
                    Value::Object(patch)
                ))),
            };
        }
        self.apply_retain_keys(&mut original, &mut patch, path)?;
        self.merge_set_element_order(&mut original, &mut patch, path)?;

        for (k, patch_v) in patch {
            let (key, is_delete_list) = if k.starts_with(DELETE_FROM_PRIMITIVE_LIST) {
                (
                    self.directive_target(&k, DELETE_FROM_PRIMITIVE_LIST, path)?,
                    true,
                )
            } else {
                (k, false)
            };
            if patch_v.is_null() {
                original.remove(&key);
                continue;
            }
            let orig_kind = original.get(&key).map(kind);
            if orig_kind != Some(kind(&patch_v)) {
                // Absent, or of another type: the patch value wins. A deletion list
                // for a list that is not there deletes nothing.
                if !is_delete_list {
                    match clean_new(patch_v) {
                        Some(v) => {
                            original.insert(key, v);
                        }
                        None => {
                            original.remove(&key);
                        }
                    }
                }
                continue;
            }
            let orig_v = original
                .get_mut(&key)
                .map(Value::take)
                .unwrap_or(Value::Null);
            path.push(key.clone());
            let merged = match (orig_v, patch_v) {
                (Value::Object(o), Value::Object(p)) => {
                    self.merge_map(o, p, path).map(Value::Object)
                }
                (Value::Array(o), Value::Array(p)) => self
                    .merge_list_field(o, p, path, is_delete_list)
                    .map(Value::Array),
                (_, p) => Ok(p),
            };
            path.pop();
            original.insert(key, merged?);
        }
        Ok(original)
    }

    /// `$prefix/<field>` → `field`, with upstream's errors for a bad spelling.
    fn directive_target(
        &self,
        key: &str,
        prefix: &str,
        path: &[String],
    ) -> Result<String, PatchError> {
        match key.split_once('/') {
            Some((p, field)) if p == prefix => Ok(field.to_string()),
            _ => Err(self.err(path, match prefix {
                DELETE_FROM_PRIMITIVE_LIST => format!("invalid patch format of primitive list: {key:?} is not $deleteFromPrimitiveList/<list>"),
                _ => format!("invalid patch format of setElementOrder list: {key:?} is not $setElementOrder/<list>"),
            })),
        }
    }

    /// Upstream `mergeSliceHandler`: merge if the list merges (or this is a
    /// deletion list), else the patch replaces it.
    fn merge_list_field(
        &self,
        original: Vec<Value>,
        patch: Vec<Value>,
        path: &mut Vec<String>,
        is_delete_list: bool,
    ) -> Result<Vec<Value>, PatchError> {
        let (merges, key) = match self.list_type(path) {
            ListType::Atomic => (false, String::new()),
            ListType::Set => (true, String::new()),
            ListType::Map(keys) => (true, keys.into_iter().next().unwrap_or_default()),
        };
        if merges || is_delete_list {
            self.merge_slice(original, patch, path, &key, is_delete_list)
        } else {
            Ok(patch.into_iter().filter_map(clean_new).collect())
        }
    }

    /// Upstream `mergeSlice`.
    fn merge_slice(
        &self,
        original: Vec<Value>,
        patch: Vec<Value>,
        path: &mut Vec<String>,
        key: &str,
        is_delete_list: bool,
    ) -> Result<Vec<Value>, PatchError> {
        if original.is_empty() && patch.is_empty() {
            return Ok(original);
        }
        let elem = self.element_kind(&[&original, &patch], path)?;
        if elem != Kind::Object {
            if is_delete_list {
                return Ok(original
                    .into_iter()
                    .filter(|v| !patch.iter().any(|d| same(v, d)))
                    .collect());
            }
            let merged = dedup_scalars(original.iter().chain(&patch).cloned().collect());
            let (in_patch, server_only) = partition_scalars(merged, &patch);
            return self.normalize_element_order(
                in_patch,
                server_only,
                &patch,
                &original,
                "",
                elem,
                path,
            );
        }
        if key.is_empty() {
            return Err(self.err(path, "cannot merge lists of objects without a merge key"));
        }
        let (original, patch) = self.merge_special_elements(original, patch, key, path)?;
        let merged = self.merge_plain_elements(original.clone(), &patch, key, path)?;
        let (in_patch, server_only) = self.partition_maps(merged, &patch, key, path)?;
        self.normalize_element_order(in_patch, server_only, &patch, &original, key, elem, path)
    }

    /// Upstream `sliceElementType`: all elements of all lists share one type, and
    /// it is not a list.
    fn element_kind(&self, lists: &[&[Value]], path: &[String]) -> Result<Kind, PatchError> {
        let mut found: Option<Kind> = None;
        for v in lists.iter().flat_map(|l| l.iter()) {
            let k = kind(v);
            if k == Kind::Array {
                return Err(self.err(path, "lists of lists are not supported"));
            }
            match found {
                None => found = Some(k),
                Some(prev) if prev != k => {
                    let all: Vec<Value> = lists.iter().map(|l| Value::Array(l.to_vec())).collect();
                    return Err(self.err(
                        path,
                        format!(
                            "list element types are not identical: {}",
                            Value::Array(all)
                        ),
                    ));
                }
                Some(_) => {}
            }
        }
        found.ok_or_else(|| self.err(path, "no elements in any of the given slices"))
    }

    /// Upstream `mergeSliceWithSpecialElements`: applies `$patch: delete` items to
    /// `original`; a `$patch: replace` item makes the plain items the whole list.
    fn merge_special_elements(
        &self,
        mut original: Vec<Value>,
        patch: Vec<Value>,
        key: &str,
        path: &[String],
    ) -> Result<(Vec<Value>, Vec<Value>), PatchError> {
        let mut plain = Vec::new();
        let mut replace = false;
        for v in patch {
            let Some(d) = v.get(DIRECTIVE) else {
                plain.push(v);
                continue;
            };
            match d.as_str() {
                Some("delete") => {
                    let Some(want) = v.get(key) else {
                        return Err(self.no_merge_key(&v, key, path));
                    };
                    let mut kept = Vec::with_capacity(original.len());
                    for item in original {
                        match &item {
                            Value::Object(m) => {
                                if !m.get(key).is_some_and(|x| same(x, want)) {
                                    kept.push(item);
                                }
                            }
                            _ => {
                                return Err(
                                    self.err(path, format!("list element {item} is not an object"))
                                );
                            }
                        }
                    }
                    original = kept;
                }
                Some("replace") => replace = true,
                Some("merge") => {
                    return Err(
                        self.err(path, "merging lists cannot yet be specified in the patch")
                    );
                }
                _ => return Err(self.err(path, format!("unknown patch type: {d} in map: {v}"))),
            }
        }
        if replace {
            let plain = plain.into_iter().filter_map(clean_new).collect();
            return Ok((plain, Vec::new()));
        }
        Ok((original, plain))
    }

    /// Upstream `mergeSliceWithoutSpecialElements`: merge each patch item into the
    /// original item with the same merge key, or add it.
    fn merge_plain_elements(
        &self,
        mut original: Vec<Value>,
        patch: &[Value],
        key: &str,
        path: &mut Vec<String>,
    ) -> Result<Vec<Value>, PatchError> {
        for v in patch {
            let Some(want) = v.get(key) else {
                return Err(self.no_merge_key(v, key, path));
            };
            match self.find_by_key(&original, key, want, path)? {
                Some(i) => {
                    let (Value::Object(o), Value::Object(p)) = (original[i].take(), v.clone())
                    else {
                        return Err(self.err(path, "list elements must be objects"));
                    };
                    original[i] = Value::Object(self.merge_map(o, p, path)?);
                }
                None => {
                    if let Some(v) = clean_new(v.clone()) {
                        original.push(v);
                    }
                }
            }
        }
        Ok(original)
    }

    /// Upstream `findMapInSliceBasedOnKeyValue`.
    fn find_by_key(
        &self,
        list: &[Value],
        key: &str,
        want: &Value,
        path: &[String],
    ) -> Result<Option<usize>, PatchError> {
        for (i, item) in list.iter().enumerate() {
            let Value::Object(m) = item else {
                return Err(self.err(path, format!("value for key {i} is not a map")));
            };
            if m.get(key).is_some_and(|x| same(x, want)) {
                return Ok(Some(i));
            }
        }
        Ok(None)
    }

    fn no_merge_key(&self, m: &Value, key: &str, path: &[String]) -> PatchError {
        self.err(
            path,
            format!("map: {m} does not contain declared merge key: {key}"),
        )
    }

    /// Upstream `partitionMapsByPresentInList`.
    fn partition_maps(
        &self,
        merged: Vec<Value>,
        by: &[Value],
        key: &str,
        path: &[String],
    ) -> Result<(Vec<Value>, Vec<Value>), PatchError> {
        let (mut hit, mut miss) = (Vec::new(), Vec::new());
        for v in merged {
            let Some(want) = v.get(key).filter(|_| v.is_object()) else {
                return Err(self.no_merge_key(&v, key, path));
            };
            if self.find_by_key(by, key, want, path)?.is_some() {
                hit.push(v);
            } else {
                miss.push(v);
            }
        }
        Ok((hit, miss))
    }

    /// Upstream `normalizeElementOrder`: sort the patch items by `patch_order`,
    /// the server-only items by `server_order`, then interleave them.
    #[allow(clippy::too_many_arguments)]
    fn normalize_element_order(
        &self,
        patch_items: Vec<Value>,
        server_only: Vec<Value>,
        patch_order: &[Value],
        server_order: &[Value],
        key: &str,
        elem: Kind,
        path: &[String],
    ) -> Result<Vec<Value>, PatchError> {
        let patch_items = self.normalize_slice_order(patch_items, patch_order, key, elem, path)?;
        let server_only = self.normalize_slice_order(server_only, server_order, key, elem, path)?;
        Ok(merge_sorted(
            server_only,
            patch_items,
            server_order,
            key,
            elem,
        ))
    }

    /// Upstream `normalizeSliceOrder`: items with `$patch: delete` go last.
    fn normalize_slice_order(
        &self,
        items: Vec<Value>,
        order: &[Value],
        key: &str,
        elem: Kind,
        path: &[String],
    ) -> Result<Vec<Value>, PatchError> {
        let (mut keep, mut delete) = (Vec::new(), Vec::new());
        if elem == Kind::Object {
            for v in items.iter().chain(order) {
                if !v.is_object() {
                    return Err(self.err(path, format!("expected an object in the list, got {v}")));
                }
                if v.get(key).is_none() {
                    return Err(self.no_merge_key(v, key, path));
                }
            }
            for v in items {
                if v.get(DIRECTIVE).and_then(Value::as_str) == Some("delete") {
                    delete.push(v);
                } else {
                    keep.push(v);
                }
            }
        } else {
            keep = items;
        }
        // Stable by position in `order`. Upstream's comparator calls an item it
        // cannot find "less"; by construction every item here is found, so only
        // the order of the found ones matters.
        keep.sort_by_key(|v| index_of(order, v, key, elem).map_or(0, |i| i + 1));
        keep.extend(delete);
        Ok(keep)
    }

    /// Upstream `applyRetainKeysDirective`.
    fn apply_retain_keys(
        &self,
        original: &mut Obj,
        patch: &mut Obj,
        path: &[String],
    ) -> Result<(), PatchError> {
        let Some(retain) = patch.remove(RETAIN_KEYS) else {
            return Ok(());
        };
        let Value::Array(retain) = retain else {
            return Err(self.err(
                path,
                "invalid patch format of retainKeys: $retainKeys must be a list of field names",
            ));
        };
        let keeps = |k: &str| retain.iter().any(|r| r.as_str() == Some(k));
        for (k, v) in patch.iter() {
            if v.is_null()
                || k.starts_with(DELETE_FROM_PRIMITIVE_LIST)
                || k.starts_with(SET_ELEMENT_ORDER)
            {
                continue;
            }
            if !keeps(k) {
                return Err(self.err(path, format!(
                    "invalid patch format of retainKeys: field {k:?} is in the patch but not in $retainKeys"
                )));
            }
        }
        original.retain(|k, _| keeps(k));
        Ok(())
    }

    /// Upstream `mergePatchIntoOriginal`: each `$setElementOrder/<list>` merges its
    /// list (if the patch has one) and then imposes the given order.
    fn merge_set_element_order(
        &self,
        original: &mut Obj,
        patch: &mut Obj,
        path: &mut Vec<String>,
    ) -> Result<(), PatchError> {
        let keys: Vec<String> = patch
            .keys()
            .filter(|k| k.starts_with(SET_ELEMENT_ORDER))
            .cloned()
            .collect();
        for k in keys {
            let order = patch.remove(&k).unwrap_or(Value::Null);
            let Value::Array(order) = order else {
                return Err(self.err(
                    path,
                    format!("{k} must be a list, not {}", kind_name(&order)),
                ));
            };
            let field = self.directive_target(&k, SET_ELEMENT_ORDER, path)?;
            let orig_list = match original.get(&field) {
                None => None,
                Some(Value::Array(a)) => Some(a.clone()),
                Some(other) => {
                    return Err(self.err(
                        path,
                        format!(
                            "{k} orders {field}, which is {} in the object",
                            kind_name(other)
                        ),
                    ));
                }
            };
            let patch_list = match patch.get(&field) {
                None => None,
                Some(Value::Array(a)) => Some(a.clone()),
                Some(other) => {
                    return Err(self.err(
                        path,
                        format!(
                            "{k} orders {field}, which is {} in the patch",
                            kind_name(other)
                        ),
                    ));
                }
            };
            path.push(field.clone());
            let r = self.order_one(orig_list, patch_list, &order, path);
            path.pop();
            if let Some(list) = r? {
                original.insert(field.clone(), Value::Array(list));
                patch.remove(&field);
            }
        }
        Ok(())
    }

    fn order_one(
        &self,
        orig_list: Option<Vec<Value>>,
        patch_list: Option<Vec<Value>>,
        order: &[Value],
        path: &mut Vec<String>,
    ) -> Result<Option<Vec<Value>>, PatchError> {
        let key = match self.list_type(path) {
            ListType::Map(keys) => keys.into_iter().next().unwrap_or_default(),
            _ => String::new(),
        };
        self.validate_order(patch_list.as_deref().unwrap_or(&[]), order, &key, path)?;
        let original_value = orig_list.clone().unwrap_or_default();
        let patch_value = patch_list.clone().unwrap_or_default();
        let merged = match (orig_list, patch_list) {
            (None, None) => return Ok(None),
            (Some(o), None) => o,
            (None, Some(p)) => p.into_iter().filter_map(clean_new).collect(),
            (Some(o), Some(p)) => self.merge_list_field(o, p, path, false)?,
        };
        let (in_order, server_only) = if key.is_empty() {
            partition_scalars(merged, order)
        } else {
            self.partition_maps(merged, order, &key, path)?
        };
        let elem = self.element_kind(&[&original_value, &patch_value], path)?;
        self.normalize_element_order(
            in_order,
            server_only,
            order,
            &original_value,
            &key,
            elem,
            path,
        )
        .map(Some)
    }

    /// Upstream `validatePatchWithSetOrderList`: the patch items appear in the
    /// `$setElementOrder` list, in the same relative order.
    fn validate_order(
        &self,
        patch: &[Value],
        order: &[Value],
        key: &str,
        path: &[String],
    ) -> Result<(), PatchError> {
        if order.is_empty() || patch.is_empty() {
            return Ok(());
        }
        let items: Vec<&Value> = if key.is_empty() {
            patch.iter().collect()
        } else {
            for v in patch {
                if !v.is_object() {
                    return Err(self.err(path, format!("expected an object in the list, got {v}")));
                }
            }
            patch
                .iter()
                .filter(|v| v.get(DIRECTIVE).and_then(Value::as_str) != Some("delete"))
                .collect()
        };
        let (mut p, mut o) = (0, 0);
        while p < items.len() && o < order.len() {
            if items[p].get(DIRECTIVE).is_some() {
                p += 1;
                continue;
            }
            let equal = if key.is_empty() {
                same(items[p], &order[o])
            } else {
                let (Some(a), Some(b)) = (items[p].get(key), order[o].get(key)) else {
                    let missing = if items[p].get(key).is_none() {
                        items[p]
                    } else {
                        &order[o]
                    };
                    return Err(self.no_merge_key(missing, key, path));
                };
                same(a, b)
            };
            if equal {
                p += 1;
            }
            o += 1;
        }
        if p < items.len() {
            return Err(self.err(
                path,
                format!(
                    "the order in patch list {} doesn't match $setElementOrder list {}",
                    Value::Array(patch.to_vec()),
                    Value::Array(order.to_vec())
                ),
            ));
        }
        Ok(())
    }
}

/// Upstream `deduplicateScalars`, swap-remove and all: later duplicates are
/// replaced by the last element. The order is fixed afterwards anyway.
fn dedup_scalars(mut s: Vec<Value>) -> Vec<Value> {
    let mut i = 0;
    while i + 1 < s.len() {
        let mut j = i + 1;
        while j < s.len() {
            if same(&s[i], &s[j]) {
                s.swap_remove(j);
            } else {
                j += 1;
            }
        }
        i += 1;
    }
    s
}

fn partition_scalars(merged: Vec<Value>, by: &[Value]) -> (Vec<Value>, Vec<Value>) {
    merged
        .into_iter()
        .partition(|v| by.iter().any(|b| same(v, b)))
}

/// Upstream `index`: position of `v` in `l`, by merge key for objects.
fn index_of(l: &[Value], v: &Value, key: &str, elem: Kind) -> Option<usize> {
    if elem == Kind::Object {
        let want = v.get(key);
        l.iter().position(|x| match (x.get(key), want) {
            (Some(a), Some(b)) => same(a, b),
            (None, None) => true,
            _ => false,
        })
    } else {
        l.iter().position(|x| same(x, v))
    }
}

/// Upstream `mergeSortedSlice`: walks both lists, taking the `left` (server-only)
/// item first only when both items are in `server_order` and it comes first there.
fn merge_sorted(
    left: Vec<Value>,
    right: Vec<Value>,
    server_order: &[Value],
    key: &str,
    elem: Kind,
) -> Vec<Value> {
    let mut out = Vec::with_capacity(left.len() + right.len());
    let mut left = left.into_iter().peekable();
    let mut right = right.into_iter().peekable();
    loop {
        let take_left = match (left.peek(), right.peek()) {
            (None, None) => break,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (Some(l), Some(r)) => matches!(
                (index_of(server_order, l, key, elem), index_of(server_order, r, key, elem)),
                (Some(li), Some(ri)) if li < ri
            ),
        };
        let next = if take_left { left.next() } else { right.next() };
        out.extend(next);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builtin::BuiltinListTypes;
    use crate::listtype::AllAtomic;
    use serde_json::json;

    fn pod_types() -> BuiltinListTypes {
        BuiltinListTypes::for_kind("", "Pod")
    }

    fn pod() -> Value {
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web", "namespace": "default", "labels": {"app": "web"},
                         "finalizers": ["a.example.com/x", "b.example.com/y"]},
            "spec": {
                "containers": [
                    {"name": "app", "image": "nginx:1.25", "args": ["-g", "daemon off;"],
                     "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
                     "ports": [{"containerPort": 80, "protocol": "TCP"}]},
                    {"name": "sidecar", "image": "envoy:1.30"}
                ],
                "tolerations": [{"key": "k1", "operator": "Exists"}],
                "volumes": [{"name": "data", "emptyDir": {}}]
            },
            "status": {"phase": "Running", "conditions": [
                {"type": "Ready", "status": "False"}, {"type": "Initialized", "status": "True"}
            ]}
        })
    }

    #[test]
    fn merge_patch_is_rfc7386() {
        let mut obj = pod();
        merge(
            &mut obj,
            &json!({"metadata": {"labels": {"app": null, "tier": "fe"}}, "spec": {"tolerations": []}}),
        );
        assert_eq!(obj["metadata"]["labels"], json!({"tier": "fe"}));
        // Lists are replaced whole, even mergeable ones.
        assert_eq!(obj["spec"]["tolerations"], json!([]));
        merge(
            &mut obj,
            &json!({"spec": {"containers": [{"name": "only"}]}}),
        );
        assert_eq!(obj["spec"]["containers"], json!([{"name": "only"}]));
    }

    #[test]
    fn json_patch_applies_and_rolls_back() {
        let mut obj = pod();
        json(
            &mut obj,
            &json!([
                {"op": "replace", "path": "/spec/containers/0/image", "value": "nginx:1.26"},
                {"op": "add", "path": "/metadata/labels/tier", "value": "fe"},
                {"op": "remove", "path": "/spec/tolerations"}
            ]),
        )
        .unwrap();
        assert_eq!(obj["spec"]["containers"][0]["image"], "nginx:1.26");
        assert_eq!(obj["metadata"]["labels"]["tier"], "fe");
        assert!(obj["spec"].get("tolerations").is_none());

        let before = obj.clone();
        let err = json(
            &mut obj,
            &json!([
                {"op": "add", "path": "/metadata/labels/x", "value": "1"},
                {"op": "test", "path": "/status/phase", "value": "Pending"}
            ]),
        )
        .unwrap_err();
        assert!(matches!(err, PatchError::JsonPatchFailed(_)), "{err}");
        assert_eq!(
            obj, before,
            "a failed patch must leave the object unchanged"
        );
    }

    #[test]
    fn json_patch_malformed_documents_say_what_is_wrong() {
        let mut obj = pod();
        let e = json(&mut obj, &json!({"op": "add"})).unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid JSON patch document: expected an array of operations, not an object"
        );
        let e = json(&mut obj, &json!([{"op": "frobnicate", "path": "/a"}])).unwrap_err();
        assert!(
            matches!(&e, PatchError::MalformedJsonPatch(m) if m.contains("frobnicate")),
            "{e}"
        );
        let e = json(&mut obj, &json!([{"op": "add", "path": "/a"}])).unwrap_err();
        assert!(
            matches!(&e, PatchError::MalformedJsonPatch(m) if m.contains("value")),
            "{e}"
        );
        let e = json(&mut obj, &json!([{"op": "remove", "path": "/spec/nope"}])).unwrap_err();
        assert!(e.to_string().contains("/spec/nope"), "{e}");
    }

    #[test]
    fn smp_merges_containers_by_name() {
        let patch = json!({"spec": {"containers": [
            {"name": "sidecar", "image": "envoy:1.31"},
            {"name": "app", "env": [{"name": "B", "value": "two"}, {"name": "C", "value": "3"}]}
        ]}});
        let out = strategic(&pod(), &patch, &pod_types()).unwrap();
        let cs = out["spec"]["containers"].as_array().unwrap();
        // Patch order for the items the patch names.
        assert_eq!(cs[0], json!({"name": "sidecar", "image": "envoy:1.31"}));
        assert_eq!(cs[1]["name"], "app");
        assert_eq!(
            cs[1]["image"], "nginx:1.25",
            "fields the patch does not mention survive"
        );
        assert_eq!(cs[1]["args"], json!(["-g", "daemon off;"]));
        // env merged by name; B changed in place, C new.
        // env merged by name: B changed in place, C added; A (server-only) keeps
        // its place before B.
        assert_eq!(
            cs[1]["env"],
            json!([{"name": "A", "value": "1"}, {"name": "B", "value": "two"}, {"name": "C", "value": "3"}])
        );
        // Untouched parts of the object are untouched.
        assert_eq!(out["status"], pod()["status"]);
        assert_eq!(out["metadata"], pod()["metadata"]);
    }

    #[test]
    fn smp_new_items_order_follows_upstream() {
        // upstream patch_test.go "preserve the order from the patch in a merging
        // int list": [1,2,3] + [3,1] = [2,3,1].
        let types = |p: &[&str]| {
            if p == ["list"] {
                ListType::Set
            } else {
                ListType::Atomic
            }
        };
        struct T<F: Fn(&[&str]) -> ListType>(F);
        impl<F: Fn(&[&str]) -> ListType> ListTypes for T<F> {
            fn list_type(&self, p: &[&str]) -> ListType {
                (self.0)(p)
            }
        }
        let out = strategic(
            &json!({"list": [1, 2, 3]}),
            &json!({"list": [3, 1]}),
            &T(types),
        )
        .unwrap();
        assert_eq!(out["list"], json!([2, 3, 1]));
        // New finalizer without $setElementOrder lands first, as upstream.
        let out = strategic(
            &pod(),
            &json!({"metadata": {"finalizers": ["c.example.com/z"]}}),
            &pod_types(),
        )
        .unwrap();
        assert_eq!(
            out["metadata"]["finalizers"],
            json!(["c.example.com/z", "a.example.com/x", "b.example.com/y"])
        );
        // A new container likewise.
        let out = strategic(
            &pod(),
            &json!({"spec": {"containers": [{"name": "new", "image": "busybox"}]}}),
            &pod_types(),
        )
        .unwrap();
        let names: Vec<_> = out["spec"]["containers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].clone())
            .collect();
        assert_eq!(names, vec![json!("new"), json!("app"), json!("sidecar")]);
    }

    #[test]
    fn smp_unions_finalizers_and_deletes_from_primitive_list() {
        let patch = json!({
            "metadata": {
                "$setElementOrder/finalizers": ["a.example.com/x", "b.example.com/y", "c.example.com/z"],
                "finalizers": ["b.example.com/y", "c.example.com/z"]
            }
        });
        let out = strategic(&pod(), &patch, &pod_types()).unwrap();
        assert_eq!(
            out["metadata"]["finalizers"],
            json!(["a.example.com/x", "b.example.com/y", "c.example.com/z"])
        );
        let patch = json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["a.example.com/x", "nope"]}});
        let out = strategic(&out, &patch, &pod_types()).unwrap();
        assert_eq!(
            out["metadata"]["finalizers"],
            json!(["b.example.com/y", "c.example.com/z"])
        );
        // Deleting from a list that is not there does not create it.
        let out = strategic(&json!({"metadata": {}}), &patch, &pod_types()).unwrap();
        assert_eq!(out, json!({"metadata": {}}));
    }

    #[test]
    fn smp_patch_delete_removes_list_element_and_map() {
        let patch = json!({"spec": {"containers": [{"name": "sidecar", "$patch": "delete"}]},
                           "status": {"conditions": [{"type": "Ready", "$patch": "delete"}]}});
        let out = strategic(&pod(), &patch, &pod_types()).unwrap();
        let cs = out["spec"]["containers"].as_array().unwrap();
        assert_eq!(cs.len(), 1);
        assert_eq!(cs[0]["name"], "app");
        assert_eq!(
            out["status"]["conditions"],
            json!([{"type": "Initialized", "status": "True"}])
        );
        // $patch: delete on a map empties it.
        let out = strategic(
            &pod(),
            &json!({"metadata": {"labels": {"$patch": "delete"}}}),
            &pod_types(),
        )
        .unwrap();
        assert_eq!(out["metadata"]["labels"], json!({}));
    }

    #[test]
    fn smp_patch_replace_on_list_and_map() {
        let patch = json!({"spec": {"containers": [{"$patch": "replace"}, {"name": "solo", "image": "x"}]}});
        let out = strategic(&pod(), &patch, &pod_types()).unwrap();
        assert_eq!(
            out["spec"]["containers"],
            json!([{"name": "solo", "image": "x"}])
        );
        let patch = json!({"metadata": {"labels": {"$patch": "replace", "only": "this"}}});
        let out = strategic(&pod(), &patch, &pod_types()).unwrap();
        assert_eq!(out["metadata"]["labels"], json!({"only": "this"}));
    }

    #[test]
    fn smp_replaces_atomic_lists() {
        let patch = json!({"spec": {"tolerations": [{"key": "k2", "operator": "Exists"}],
                                    "containers": [{"name": "app", "args": ["-v"]}]}});
        let out = strategic(&pod(), &patch, &pod_types()).unwrap();
        assert_eq!(
            out["spec"]["tolerations"],
            json!([{"key": "k2", "operator": "Exists"}])
        );
        assert_eq!(out["spec"]["containers"][0]["args"], json!(["-v"]));
        // With no list semantics at all, even containers are replaced.
        let out = strategic(
            &pod(),
            &json!({"spec": {"containers": [{"name": "x"}]}}),
            &AllAtomic,
        )
        .unwrap();
        assert_eq!(out["spec"]["containers"], json!([{"name": "x"}]));
    }

    #[test]
    fn smp_set_element_order_reorders() {
        let patch = json!({"spec": {"$setElementOrder/containers": [{"name": "sidecar"}, {"name": "app"}]}});
        let out = strategic(&pod(), &patch, &pod_types()).unwrap();
        assert_eq!(out["spec"]["containers"][0]["name"], "sidecar");
        assert_eq!(out["spec"]["containers"][1]["name"], "app");
        assert_eq!(out["spec"]["containers"][1]["image"], "nginx:1.25");
        // kubectl's shape: order list + changed items; new item placed as ordered.
        let patch = json!({"spec": {
            "$setElementOrder/containers": [{"name": "app"}, {"name": "mid"}, {"name": "sidecar"}],
            "containers": [{"name": "mid", "image": "busybox"}]
        }});
        let out = strategic(&pod(), &patch, &pod_types()).unwrap();
        let names: Vec<_> = out["spec"]["containers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(names, ["app", "mid", "sidecar"]);
        // Patch items out of the declared order are rejected.
        let patch = json!({"spec": {
            "$setElementOrder/containers": [{"name": "app"}, {"name": "sidecar"}],
            "containers": [{"name": "sidecar", "image": "a"}, {"name": "app", "image": "b"}]
        }});
        let err = strategic(&pod(), &patch, &pod_types()).unwrap_err();
        assert!(
            err.to_string().contains("doesn't match $setElementOrder"),
            "{err}"
        );
    }

    #[test]
    fn smp_null_deletes_and_retain_keys() {
        let out = strategic(
            &pod(),
            &json!({"spec": {"tolerations": null}, "status": null}),
            &pod_types(),
        )
        .unwrap();
        assert!(out["spec"].get("tolerations").is_none());
        assert!(out.get("status").is_none());
        // $retainKeys clears what it does not list (volume source switch).
        let patch = json!({"spec": {"volumes": [{"name": "data", "$retainKeys": ["name", "hostPath"], "hostPath": {"path": "/d"}}]}});
        let out = strategic(&pod(), &patch, &pod_types()).unwrap();
        assert_eq!(
            out["spec"]["volumes"],
            json!([{"name": "data", "hostPath": {"path": "/d"}}])
        );
        let bad = json!({"spec": {"volumes": [{"name": "data", "$retainKeys": ["name"], "hostPath": {"path": "/d"}}]}});
        let err = strategic(&pod(), &bad, &pod_types()).unwrap_err();
        assert!(err.to_string().contains("not in $retainKeys"), "{err}");
    }

    #[test]
    fn smp_errors_are_actionable() {
        let err =
            strategic(&pod(), &json!({"spec": {"$frobnicate": 1}}), &pod_types()).unwrap_err();
        assert!(
            err.to_string().starts_with(
                "invalid strategic merge patch at .spec: unknown directive \"$frobnicate\""
            ),
            "{err}"
        );
        let err = strategic(
            &pod(),
            &json!({"spec": {"containers": [{"image": "x"}]}}),
            &pod_types(),
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid strategic merge patch at .spec.containers: map: {\"image\":\"x\"} does not contain declared merge key: name"
        );
        let err = strategic(
            &pod(),
            &json!({"metadata": {"labels": {"$patch": "merge"}}}),
            &pod_types(),
        )
        .unwrap_err();
        assert!(
            err.to_string().contains("unknown patch type: \"merge\""),
            "{err}"
        );
        let err = strategic(
            &pod(),
            &json!({"spec": {"containers": [{"name": "app", "$patch": "merge"}]}}),
            &pod_types(),
        )
        .unwrap_err();
        assert!(
            err.to_string()
                .contains("merging lists cannot yet be specified"),
            "{err}"
        );
        let err = strategic(
            &pod(),
            &json!({"metadata": {"finalizers": ["x", 1]}}),
            &pod_types(),
        )
        .unwrap_err();
        assert!(err.to_string().contains("not identical"), "{err}");
        let err = strategic(&pod(), &json!([1]), &pod_types()).unwrap_err();
        assert_eq!(
            err,
            PatchError::NotAnObject {
                what: "a strategic merge patch",
                got: "a list"
            }
        );
        let err = strategic(
            &pod(),
            &json!({"metadata": {"$deleteFromPrimitiveListfinalizers": ["a"]}}),
            &pod_types(),
        )
        .unwrap_err();
        assert!(
            err.to_string()
                .contains("invalid patch format of primitive list"),
            "{err}"
        );
    }

    #[test]
    fn smp_new_values_lose_directives_and_nulls() {
        let patch = json!({"spec": {"containers": [{"name": "n", "image": "i", "command": null,
                                                    "env": [{"name": "X", "$patch": "delete"}]}]}});
        let out = strategic(&pod(), &patch, &pod_types()).unwrap();
        let new = out["spec"]["containers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == "n")
            .unwrap()
            .clone();
        assert_eq!(new, json!({"name": "n", "image": "i", "env": []}));
        // $ref is a field of CRD schemas, not a directive.
        let out = strategic(&json!({}), &json!({"schema": {"$ref": "#/x"}}), &AllAtomic).unwrap();
        assert_eq!(out, json!({"schema": {"$ref": "#/x"}}));
    }
}
