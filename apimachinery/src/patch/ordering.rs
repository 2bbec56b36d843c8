//! List ordering in strategic merge patch: upstream's `$setElementOrder`
//! directive (`mergePatchIntoOriginal`, `validatePatchWithSetOrderList`) and
//! `normalizeElementOrder`, which decides where merged items land.

use super::PatchError;
use super::strategic::{DIRECTIVE, Kind, Obj, SET_ELEMENT_ORDER, Smp, clean_new, kind_name, same};
use crate::listtype::ListType;
use serde_json::Value;

impl Smp<'_> {
    /// Upstream `normalizeElementOrder`: sort the patch items by `patch_order`,
    /// the server-only items by `server_order`, then interleave them.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn normalize_element_order(
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

    /// Upstream `mergePatchIntoOriginal`: each `$setElementOrder/<list>` merges its
    /// list (if the patch has one) and then imposes the given order.
    pub(super) fn merge_set_element_order(
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

pub(super) fn partition_scalars(merged: Vec<Value>, by: &[Value]) -> (Vec<Value>, Vec<Value>) {
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
