//! The value walks server-side apply needs, ported from upstream
//! `structured-merge-diff/typed` (`ToFieldSet`, `Compare`, `Merge`,
//! `RemoveItems`), over plain JSON with list semantics from [`ListTypes`].
//!
//! Without a schema every JSON object is treated as a struct: its fields are
//! paths, and an object is a leaf only when it is empty (upstream's
//! `emptyPromoteToLeaf`). Maps declared `+mapType=atomic`/`+structType=atomic`
//! upstream are therefore granular here.

use super::fieldpath::{Path, PathElement, Set};
use crate::listtype::{ListType, ListTypes};
use serde_json::{Map, Value};
use std::collections::{HashMap, HashSet};

/// Added / modified / removed leaf paths between two objects (upstream `Comparison`).
#[derive(Debug, Default)]
pub(crate) struct Comparison {
    pub added: Set,
    pub modified: Set,
    pub removed: Set,
}

pub(crate) struct Walker<'a> {
    pub lists: &'a dyn ListTypes,
}

/// Field names from the root, list positions left out: the [`ListTypes`] path.
type Names = Vec<String>;

impl Walker<'_> {
    /// The path element of every element of the list at `names`, or `None` when
    /// the list is a leaf (atomic). With `strict` (the applied configuration), an
    /// element that cannot be keyed or a duplicate key is an error, as upstream;
    /// otherwise (stored objects) such a list is treated as atomic.
    pub fn list_elements(
        &self,
        names: &Names,
        list: &[Value],
        strict: bool,
    ) -> Result<Option<Vec<PathElement>>, String> {
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let keys = match self.lists.list_type(&refs) {
            ListType::Atomic => return Ok(None),
            ListType::Set => Vec::new(),
            ListType::Map(keys) => keys,
        };
        let mut pes: Vec<PathElement> = Vec::with_capacity(list.len());
        let mut seen: HashSet<PathElement> = HashSet::with_capacity(list.len());
        for (i, item) in list.iter().enumerate() {
            let pe = if keys.is_empty() {
                set_element(item)
            } else {
                self.keyed_element(&refs, &keys, item)
            };
            let failure = match pe {
                Ok(pe) if seen.contains(&pe) => format!("duplicate entries for key {pe}"),
                Ok(pe) => {
                    seen.insert(pe.clone());
                    pes.push(pe);
                    continue;
                }
                Err(e) => format!("element {i}: {e}"),
            };
            return if strict { Err(failure) } else { Ok(None) };
        }
        Ok(Some(pes))
    }

    fn keyed_element(
        &self,
        names: &[&str],
        keys: &[String],
        item: &Value,
    ) -> Result<PathElement, String> {
        let m = match item {
            Value::Null => {
                return Err("associative list with keys may not have a null element".into());
            }
            Value::Object(m) => m,
            _ => return Err("associative list with keys may not have non-map elements".into()),
        };
        let defaults: Vec<(String, Value)> = keys
            .iter()
            .filter(|k| !m.contains_key(*k))
            .filter_map(|k| self.lists.key_default(names, k).map(|d| (k.clone(), d)))
            .collect();
        let mut fields: Vec<(&str, &Value)> = keys
            .iter()
            .filter_map(|k| m.get(k).map(|v| (k.as_str(), v)))
            .collect();
        fields.extend(defaults.iter().map(|(k, v)| (k.as_str(), v)));
        if fields.is_empty() {
            return Err(format!(
                "associative list with keys has an element that omits all key fields {keys:?} \
                 (and doesn't have default values for any key fields)"
            ));
        }
        Ok(PathElement::key(&fields))
    }

    /// Checks that the applied configuration can be walked: every keyed list
    /// element has its key, and no key repeats. Errors are `path: problem`.
    pub fn check_strict(&self, v: &Value) -> Result<(), String> {
        self.check(v, &mut Vec::new(), &mut Vec::new())
    }

    fn check(&self, v: &Value, names: &mut Names, path: &mut Path) -> Result<(), String> {
        match v {
            Value::Object(m) => {
                for (k, val) in m {
                    names.push(k.clone());
                    path.push(PathElement::field(k));
                    let r = self.check(val, names, path);
                    names.pop();
                    path.pop();
                    r?;
                }
            }
            Value::Array(a) => {
                let pes = self
                    .list_elements(names, a, true)
                    .map_err(|e| format!("{}: {e}", super::fieldpath::path_string(path)))?;
                if let Some(pes) = pes {
                    for (item, pe) in a.iter().zip(pes) {
                        path.push(pe);
                        let r = self.check(item, names, path);
                        path.pop();
                        r?;
                    }
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// Upstream `ToFieldSet`: the leaves of `v` (scalars, atomic lists, empty
    /// objects, nulls) plus every map-list/set element itself.
    pub fn to_field_set(&self, v: &Value) -> Set {
        let mut set = Set::new();
        self.fields(v, &mut Vec::new(), &mut Vec::new(), &mut set);
        set
    }

    fn fields(&self, v: &Value, names: &mut Names, path: &mut Path, set: &mut Set) {
        match v {
            Value::Object(m) => {
                for (k, val) in m {
                    names.push(k.clone());
                    path.push(PathElement::field(k));
                    self.fields(val, names, path, set);
                    if val.is_null() || val.as_object().is_some_and(Map::is_empty) {
                        set.insert(path);
                    }
                    names.pop();
                    path.pop();
                }
            }
            Value::Array(a) => match self.list_elements(names, a, false).ok().flatten() {
                None => set.insert(path),
                Some(pes) => {
                    for (item, pe) in a.iter().zip(pes) {
                        path.push(pe);
                        self.fields(item, names, path, set);
                        set.insert(path);
                        path.pop();
                    }
                }
            },
            Value::Null => {}
            _ => set.insert(path),
        }
    }

    /// Upstream `Compare`: what changed from `lhs` to `rhs`, at the leaves, plus
    /// every granular node that appeared or disappeared.
    pub fn compare(&self, lhs: &Value, rhs: &Value) -> Comparison {
        let mut c = Comparison::default();
        self.cmp(
            Some(lhs),
            Some(rhs),
            &mut Vec::new(),
            &mut Vec::new(),
            &mut c,
        );
        c
    }

    fn cmp(
        &self,
        l: Option<&Value>,
        r: Option<&Value>,
        names: &mut Names,
        path: &mut Path,
        c: &mut Comparison,
    ) {
        let granular = match (l, r) {
            (Some(Value::Object(_)) | None, Some(Value::Object(_)) | None) => {
                let (lm, rm) = (l.and_then(Value::as_object), r.and_then(Value::as_object));
                if lm.is_none_or(Map::is_empty) && rm.is_none_or(Map::is_empty) {
                    false
                } else {
                    let empty = Map::new();
                    let (lm, rm) = (lm.unwrap_or(&empty), rm.unwrap_or(&empty));
                    for k in lm.keys().chain(rm.keys().filter(|k| !lm.contains_key(*k))) {
                        names.push(k.clone());
                        path.push(PathElement::field(k));
                        self.cmp(lm.get(k), rm.get(k), names, path, c);
                        names.pop();
                        path.pop();
                    }
                    true
                }
            }
            (Some(Value::Array(_)) | None, Some(Value::Array(_)) | None) => {
                let empty = Vec::new();
                let la = l.and_then(Value::as_array).unwrap_or(&empty);
                let ra = r.and_then(Value::as_array).unwrap_or(&empty);
                match (
                    la.is_empty() && ra.is_empty(),
                    self.list_elements(names, la, false).ok().flatten(),
                    self.list_elements(names, ra, false).ok().flatten(),
                ) {
                    (false, Some(lp), Some(rp)) => {
                        // Items matched through an index of their keys:
                        // linear in the lists' lengths.
                        let (lx, rx) = (positions(&lp), positions(&rp));
                        let mut seen: HashSet<&PathElement> = HashSet::new();
                        for pe in lp.iter().chain(rp.iter()) {
                            if !seen.insert(pe) {
                                continue;
                            }
                            let li = lx.get(pe).map(|&i| &la[i]);
                            let ri = rx.get(pe).map(|&i| &ra[i]);
                            path.push(pe.clone());
                            self.cmp(li, ri, names, path, c);
                            path.pop();
                        }
                        true
                    }
                    _ => false,
                }
            }
            _ => false,
        };
        if !granular {
            match (l, r) {
                (None, Some(_)) => c.added.insert(path),
                (Some(_), None) => c.removed.insert(path),
                (Some(a), Some(b)) if a != b => c.modified.insert(path),
                _ => {}
            }
        } else if l.is_none() {
            c.added.insert(path);
        } else if r.is_none() {
            c.removed.insert(path);
        }
    }

    /// Upstream `Merge` of the applied configuration `rhs` into `lhs`: objects
    /// merge field by field, keyed lists element by element, leaves take `rhs`.
    /// A field that merges to `null` is left out (typed decoding drops it upstream).
    pub fn merge(&self, lhs: &Value, rhs: &Value) -> Value {
        self.mrg(Some(lhs), Some(rhs), &mut Vec::new())
            .unwrap_or(Value::Object(Map::new()))
    }

    fn mrg(&self, l: Option<&Value>, r: Option<&Value>, names: &mut Names) -> Option<Value> {
        match (l, r) {
            (Some(Value::Object(lm)), Some(Value::Object(rm)))
                if !(lm.is_empty() && rm.is_empty()) =>
            {
                let mut out = Map::new();
                for k in lm.keys().chain(rm.keys().filter(|k| !lm.contains_key(*k))) {
                    names.push(k.clone());
                    let v = self.mrg(lm.get(k), rm.get(k), names);
                    names.pop();
                    if let Some(v) = v.filter(|v| !v.is_null()) {
                        out.insert(k.clone(), v);
                    }
                }
                Some(Value::Object(out))
            }
            (Some(Value::Array(la)), Some(r @ Value::Array(ra)))
                if !(la.is_empty() && ra.is_empty()) =>
            {
                let lp = self.list_elements(names, la, false).ok().flatten();
                let rp = self.list_elements(names, ra, false).ok().flatten();
                match (lp, rp) {
                    (Some(lp), Some(rp)) => {
                        Some(Value::Array(self.merge_items(la, &lp, ra, &rp, names)))
                    }
                    // Nulls dropped as when the list is new (below).
                    _ => Some(drop_null_fields(r)),
                }
            }
            (_, Some(r)) => Some(drop_null_fields(r)),
            (l, None) => l.cloned(),
        }
    }

    /// Upstream `visitListItems` of the merging walker: keeps the live order,
    /// takes shared items in the applied order, and puts new items after the
    /// applied item they follow.
    fn merge_items(
        &self,
        la: &[Value],
        lp: &[PathElement],
        ra: &[Value],
        rp: &[PathElement],
        names: &mut Names,
    ) -> Vec<Value> {
        let (lx, rx) = (positions(lp), positions(rp));
        let find = |ix: &HashMap<&PathElement, usize>, pe: &PathElement| ix.get(pe).copied();
        let mut out = Vec::with_capacity(la.len().max(ra.len()));
        let mut shared = rp.iter().filter(|pe| find(&lx, pe).is_some());
        let mut next_shared = shared.next();
        let mut merged_rhs: HashSet<&PathElement> = HashSet::new();
        let (mut li, mut ri) = (0, 0);
        while li < lp.len() || ri < rp.len() {
            if li < lp.len() && ri < rp.len() {
                let pe = &lp[li];
                if *pe == rp[ri] {
                    merged_rhs.insert(pe);
                    out.extend(self.mrg(Some(&la[li]), Some(&ra[ri]), names));
                    li += 1;
                    ri += 1;
                    next_shared = shared.next();
                    continue;
                }
                if find(&rx, pe).is_some() && next_shared.is_some_and(|n| n != pe) {
                    li += 1;
                    continue;
                }
            }
            if li < lp.len() {
                let pe = &lp[li];
                if find(&rx, pe).is_none() {
                    out.extend(self.mrg(Some(&la[li]), None, names));
                    li += 1;
                    continue;
                } else if merged_rhs.contains(&pe) {
                    li += 1;
                }
            }
            if ri < rp.len() {
                let pe = &rp[ri];
                merged_rhs.insert(pe);
                let lchild = find(&lx, pe).map(|i| &la[i]);
                out.extend(self.mrg(lchild, Some(&ra[ri]), names));
                ri += 1;
                if next_shared.is_some_and(|n| n == pe) {
                    next_shared = shared.next();
                }
            }
        }
        out
    }

    /// Upstream `RemoveItems`: drops every member of `set` from `v`; objects and
    /// lists emptied by it disappear (`None`), as the nil they become upstream.
    pub fn remove_items(&self, v: &Value, set: &Set) -> Value {
        self.rm(v, set, &mut Vec::new())
            .unwrap_or(Value::Object(Map::new()))
    }

    fn rm(&self, v: &Value, set: &Set, names: &mut Names) -> Option<Value> {
        match v {
            Value::Object(m) if !m.is_empty() => {
                let mut out = Map::new();
                for (k, val) in m {
                    let pe = PathElement::field(k);
                    if set.has_member(&pe) {
                        continue;
                    }
                    match set.child(&pe) {
                        Some(sub) => {
                            names.push(k.clone());
                            let kept = self.rm(val, sub, names);
                            names.pop();
                            if let Some(kept) = kept {
                                out.insert(k.clone(), kept);
                            }
                        }
                        None => {
                            out.insert(k.clone(), val.clone());
                        }
                    }
                }
                (!out.is_empty()).then_some(Value::Object(out))
            }
            Value::Array(a) if !a.is_empty() => {
                let Some(pes) = self.list_elements(names, a, false).ok().flatten() else {
                    return Some(v.clone());
                };
                let mut out = Vec::new();
                for (item, pe) in a.iter().zip(pes) {
                    if set.has_member(&pe) {
                        continue;
                    }
                    match set.child(&pe) {
                        Some(sub) => out.extend(self.rm(item, sub, names)),
                        None => out.push(item.clone()),
                    }
                }
                (!out.is_empty()).then_some(Value::Array(out))
            }
            Value::Object(_) | Value::Array(_) => None,
            other => Some(other.clone()),
        }
    }
}

/// Removes `null` fields from objects, recursively: what the applied
/// configuration's nulls become once stored.
fn drop_null_fields(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k.clone(), drop_null_fields(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(drop_null_fields).collect()),
        other => other.clone(),
    }
}

fn set_element(item: &Value) -> Result<PathElement, String> {
    match item {
        Value::Object(_) => {
            Err("associative list without keys has an element that's a map type".into())
        }
        Value::Array(_) => Err("not supported: associative list with lists as elements".into()),
        Value::Null => {
            Err("associative list without keys has an element that's an explicit null".into())
        }
        scalar => Ok(PathElement::value(scalar)),
    }
}

/// Each path element's first position in `pes`, for lookups in constant
/// time (matching two lists' items by scanning was quadratic).
fn positions(pes: &[PathElement]) -> HashMap<&PathElement, usize> {
    let mut ix = HashMap::with_capacity(pes.len());
    for (i, pe) in pes.iter().enumerate() {
        ix.entry(pe).or_insert(i);
    }
    ix
}
