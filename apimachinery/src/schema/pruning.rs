//! Pruning: removing fields the schema does not know, keeping
//! `apiVersion`/`kind`/`metadata` of resource roots and whatever sits under
//! `x-kubernetes-preserve-unknown-fields`.

use serde_json::Value;

use super::child;
use super::structural::Node;

/// The root node with `embedded` forced on, for pruning (borrowed rather
/// than cloning the whole tree for one flag).
pub(super) struct RootView<'a> {
    pub(super) node: &'a Node,
    pub(super) embedded: bool,
}

const META_FIELDS: [&str; 3] = ["apiVersion", "kind", "metadata"];

/// A schema node as seen by pruning: the root view (with its embedded flag
/// forced on) or a plain node.
pub(super) trait PruneSchema {
    fn node(&self) -> &Node;
    fn embedded(&self) -> bool {
        self.node().embedded
    }
}

impl PruneSchema for Node {
    fn node(&self) -> &Node {
        self
    }
}

impl PruneSchema for RootView<'_> {
    fn node(&self) -> &Node {
        self.node
    }
    fn embedded(&self) -> bool {
        self.embedded
    }
}

fn record(path: &str, key: &str, out: &mut Vec<String>) {
    out.push(child(path, key));
}

pub(super) fn prune<S: PruneSchema + ?Sized>(
    x: &mut Value,
    s: Option<&S>,
    path: &mut String,
    out: &mut Vec<String>,
) {
    if let Some(s) = s
        && s.node().preserve_unknown
    {
        skip_prune(x, s, path, out);
        return;
    }
    match x {
        Value::Object(obj) => {
            let Some(s) = s else {
                // No schema at all (under `additionalProperties: true`): every key is unknown.
                for k in obj.keys() {
                    record(path, k, out);
                }
                obj.clear();
                return;
            };
            let node = s.node();
            let at_root = path.is_empty();
            obj.retain(|k, v| {
                if s.embedded() && META_FIELDS.contains(&k.as_str()) {
                    return true;
                }
                let sub: Option<Option<&Node>> = match node.property(k) {
                    Some(p) => Some(Some(p)),
                    None => node.additional.as_ref().map(|a| a.as_deref()),
                };
                match sub {
                    Some(sub) => {
                        with_key(path, k, |p| prune(v, sub, p, out));
                        true
                    }
                    None => {
                        // Upstream does not report meta fields dropped at the root.
                        if !META_FIELDS.contains(&k.as_str()) || !at_root {
                            record(path, k, out);
                        }
                        false
                    }
                }
            });
        }
        Value::Array(items) => {
            let item_schema = s.and_then(|s| s.node().items.as_deref());
            for (i, v) in items.iter_mut().enumerate() {
                with_index(path, i, |p| prune(v, item_schema, p, out));
            }
        }
        _ => {}
    }
}

fn skip_prune<S: PruneSchema + ?Sized>(
    x: &mut Value,
    s: &S,
    path: &mut String,
    out: &mut Vec<String>,
) {
    let node = s.node();
    match x {
        Value::Object(obj) => {
            for (k, v) in obj.iter_mut() {
                if s.embedded() && META_FIELDS.contains(&k.as_str()) {
                    continue;
                }
                if let Some(p) = node.property(k) {
                    with_key(path, k, |pp| prune(v, Some(p), pp, out));
                } else if let Some(a) = &node.additional {
                    with_key(path, k, |pp| prune(v, a.as_deref(), pp, out));
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = node.items.as_deref() {
                for (i, v) in items.iter_mut().enumerate() {
                    with_index(path, i, |p| skip_prune(v, item_schema, p, out));
                }
            }
        }
        _ => {}
    }
}

fn with_key(path: &mut String, key: &str, f: impl FnOnce(&mut String)) {
    let len = path.len();
    if !path.is_empty() {
        path.push('.');
    }
    path.push_str(key);
    f(path);
    path.truncate(len);
}

fn with_index(path: &mut String, i: usize, f: impl FnOnce(&mut String)) {
    let len = path.len();
    path.push_str(&format!("[{i}]"));
    f(path);
    path.truncate(len);
}
