//! Strategic merge patch: directives, map merging and list merging, ported
//! from upstream `strategicpatch` (`mergeMap`, `mergeSlice` and friends). The
//! ordering of merged lists lives in `ordering`.

use super::PatchError;
use super::ordering::partition_scalars;
use crate::listtype::{ListType, ListTypes};
use serde_json::{Map, Value};

/// The body of [`super::strategic`].
pub(super) fn apply(
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

pub(super) const DIRECTIVE: &str = "$patch";
const RETAIN_KEYS: &str = "$retainKeys";
pub(super) const SET_ELEMENT_ORDER: &str = "$setElementOrder";
const DELETE_FROM_PRIMITIVE_LIST: &str = "$deleteFromPrimitiveList";

/// Keys that look like directives but are plain JSON-schema fields of a CRD.
const DOLLAR_FIELDS: &[&str] = &["$ref", "$schema"];

fn is_directive_key(k: &str) -> bool {
    k == DIRECTIVE
        || k == RETAIN_KEYS
        || k.starts_with(SET_ELEMENT_ORDER)
        || k.starts_with(DELETE_FROM_PRIMITIVE_LIST)
}

pub(super) type Obj = Map<String, Value>;

pub(super) struct Smp<'a> {
    lists: &'a dyn ListTypes,
}

/// Element kinds as Go's `reflect.Type` tells them apart after `json.Unmarshal`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
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

pub(super) fn kind_name(v: &Value) -> &'static str {
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
pub(super) fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x == y || x.as_f64() == y.as_f64(),
        _ => a == b,
    }
}

/// Upstream's `removeDirectives` + `discardNullValuesFromPatch` for values taken
/// from the patch as they are. `None`: the value is itself a directive, drop it.
pub(super) fn clean_new(v: Value) -> Option<Value> {
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
    pub(super) fn err(&self, path: &[String], message: impl Into<String>) -> PatchError {
        let path = path.iter().map(|s| format!(".{s}")).collect::<String>();
        PatchError::Strategic {
            path,
            message: message.into(),
        }
    }

    pub(super) fn list_type(&self, path: &[String]) -> ListType {
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
    pub(super) fn directive_target(
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
    pub(super) fn merge_list_field(
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
    pub(super) fn element_kind(
        &self,
        lists: &[&[Value]],
        path: &[String],
    ) -> Result<Kind, PatchError> {
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

    pub(super) fn no_merge_key(&self, m: &Value, key: &str, path: &[String]) -> PatchError {
        self.err(
            path,
            format!("map: {m} does not contain declared merge key: {key}"),
        )
    }

    /// Upstream `partitionMapsByPresentInList`.
    pub(super) fn partition_maps(
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
