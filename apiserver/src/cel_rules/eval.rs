//! Evaluating a version's rules on an object: the schema walked alongside
//! the object (and the old object, correlated by field name, map key and
//! `listType: map` keys, as upstream), each node's rules run with `self`
//! (and `oldSelf`) bound, and failures turned into field errors.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use cel::objects::{Key, Map, OptionalValue};
use cel::{Context, ExecutionError, Value as Cel};
use serde_json::Value;

use super::functions::env;
use super::guard::{BUDGET_MESSAGE, RUNTIME_DEADLINE};
use super::rule::{Reason, Rule};
use super::schema::Node;
use crate::cause::Cause;

/// upstream's `RuntimeCELCostBudget`: what all rule evaluations of one
/// write may cost together. Each evaluation is charged its rule's static
/// estimate, an upper bound of its actual cost.
pub(crate) const RUNTIME_BUDGET: u64 = 10_000_000;

pub(crate) struct Walk {
    pub(crate) causes: Vec<Cause>,
    pub(crate) budget: u64,
    pub(crate) exhausted: bool,
    /// When the write's evaluations must have ended ([`RUNTIME_DEADLINE`]).
    pub(crate) deadline: Instant,
}

/// The value as CEL sees it, typed by the schema: `integer` fields are ints,
/// `number` fields doubles (a JSON `1` included), the rest as JSON says.
pub(crate) fn to_cel(v: &Value, node: Option<&Node>) -> Cel {
    let typ = node.map_or("", |n| n.typ.as_str());
    match v {
        Value::Null => Cel::Null,
        Value::Bool(b) => Cel::Bool(*b),
        Value::Number(n) if typ == "number" => Cel::Float(n.as_f64().unwrap_or(0.0)),
        Value::Number(n) => match n.as_i64() {
            Some(i) => Cel::Int(i),
            None => match n.as_u64() {
                Some(u) => Cel::UInt(u),
                None => Cel::Float(n.as_f64().unwrap_or(0.0)),
            },
        },
        Value::String(s) => Cel::String(Arc::new(s.clone())),
        Value::Array(a) => {
            let items = node.and_then(|n| n.items.as_deref());
            Cel::List(Arc::new(a.iter().map(|x| to_cel(x, items)).collect()))
        }
        Value::Object(o) => {
            let mut m = HashMap::with_capacity(o.len());
            for (k, x) in o {
                m.insert(
                    Key::String(Arc::new(k.clone())),
                    to_cel(x, node.and_then(|n| n.field(k))),
                );
            }
            Cel::Map(Map { map: Arc::new(m) })
        }
    }
}

/// The root object as rules see it: `apiVersion`, `kind`, `metadata.name`
/// and `metadata.generateName` (upstream hides the rest of metadata), and
/// every other field.
fn root_view(obj: &Value) -> Value {
    let mut v = obj.clone();
    if let Some(m) = obj.get("metadata") {
        let mut kept = serde_json::Map::new();
        for k in ["name", "generateName"] {
            if let Some(x) = m.get(k) {
                kept.insert(k.into(), x.clone());
            }
        }
        v["metadata"] = Value::Object(kept);
    }
    v
}

/// Upstream's wording of a CEL runtime error.
fn error_text(e: &ExecutionError) -> String {
    match e {
        ExecutionError::NoSuchKey(k) => format!("no such key: {k}"),
        ExecutionError::NoSuchOverload(o) => format!("no such overload: {o}"),
        ExecutionError::DivisionByZero(_) => "division by zero".into(),
        ExecutionError::RemainderByZero(_) => "modulus by zero".into(),
        ExecutionError::IndexOutOfBounds(i) => format!("index out of bounds: {i:?}"),
        ExecutionError::Overflow(..) => "integer overflow".into(),
        other => {
            let s = other.to_string();
            let mut c = s.chars();
            c.next()
                .map(|f| f.to_lowercase().collect::<String>() + c.as_str())
                .unwrap_or_default()
        }
    }
}

fn type_name(node: &Node) -> &str {
    if node.typ.is_empty() {
        if node.int_or_string {
            "integer"
        } else {
            "object"
        }
    } else {
        &node.typ
    }
}

impl Walk {
    pub(crate) fn new() -> Walk {
        Walk {
            causes: vec![],
            budget: RUNTIME_BUDGET,
            exhausted: false,
            deadline: Instant::now() + RUNTIME_DEADLINE,
        }
    }

    /// Runs the rules of `node` and below on `new`; `old` is the correlated
    /// old value on an update. `root` says whether `new` is the object itself.
    pub(crate) fn node(
        &mut self,
        node: &Node,
        path: &str,
        new: &Value,
        old: Option<&Value>,
        root: bool,
    ) {
        if !node.has_rules || self.exhausted || new.is_null() {
            return;
        }
        if !node.rules.is_empty() {
            self.rules(node, path, new, old, root);
        }
        match new {
            Value::Object(o) => {
                for (k, v) in o {
                    if root && k == "metadata" {
                        continue;
                    }
                    let (child, field) = match node.properties.get(k) {
                        Some(c) => (c, join(path, k)),
                        None => match node.additional.as_deref() {
                            Some(a) => (a, format!("{path}[{k}]")),
                            None => continue,
                        },
                    };
                    let old_child = old.and_then(|o| o.get(k));
                    self.node(child, &field, v, old_child, false);
                }
            }
            Value::Array(items) => {
                let Some(child) = node.items.as_deref() else {
                    return;
                };
                // Only `listType: map` items have an old self, the old item
                // with the same keys: looked up in an index of the old list,
                // so that correlating is linear in the lists' lengths.
                let old_items = (node.list_type == "map")
                    .then(|| old.and_then(Value::as_array))
                    .flatten()
                    .map(|old| key_index(old, &node.list_map_keys));
                for (i, v) in items.iter().enumerate() {
                    let old_item = old_items
                        .as_ref()
                        .and_then(|ix| ix.get(&map_key(v, &node.list_map_keys)).copied());
                    self.node(child, &format!("{path}[{i}]"), v, old_item, false);
                    if self.exhausted {
                        return;
                    }
                }
            }
            _ => {}
        }
    }

    fn rules(&mut self, node: &Node, path: &str, new: &Value, old: Option<&Value>, root: bool) {
        let view = |v: &Value| if root { root_view(v) } else { v.clone() };
        let new_view = view(new);
        let old_view = old.map(view);
        let this = to_cel(&new_view, Some(node));
        let before = old_view.as_ref().map(|o| to_cel(o, Some(node)));
        // Ratcheting (upstream since 1.30): a value left as it was keeps
        // passing even if a rule added since would now refuse it.
        let unchanged = old_view.as_ref() == Some(&new_view);
        for rule in &node.rules {
            if rule.transition && before.is_none() && !rule.optional_old_self {
                continue;
            }
            if unchanged && !rule.transition {
                continue;
            }
            // At least 1, so that evaluations are counted even for rules
            // estimated free (`true`).
            let charge = rule.cost.max(1);
            if self.budget < charge || Instant::now() >= self.deadline {
                self.out_of_budget(node, path);
                return;
            }
            self.budget -= charge;
            let mut ctx = Context::with_env(env().clone());
            ctx.add_variable_from_value("self", this.clone());
            if rule.transition {
                let old = match (&before, rule.optional_old_self) {
                    (Some(b), true) => Cel::Opaque(Arc::new(OptionalValue::of(b.clone()))),
                    (None, true) => Cel::Opaque(Arc::new(OptionalValue::none())),
                    (Some(b), false) => b.clone(),
                    (None, false) => continue,
                };
                ctx.add_variable_from_value("oldSelf", old);
            }
            let outcome = rule.program.execute(&ctx, self.deadline);
            if outcome.expired {
                self.out_of_budget(node, path);
                return;
            }
            match outcome.result {
                Ok(Cel::Bool(true)) => {}
                Ok(Cel::Bool(false)) => self.failed(node, path, rule, &ctx),
                Ok(other) => self.causes.push(Cause {
                    reason: "FieldValueInvalid".into(),
                    message: format!(
                        "Invalid value: \"{}\": rule evaluated to {:?}, not a bool, evaluating rule: {}",
                        type_name(node),
                        other.type_of().to_string(),
                        rule.source.trim()
                    ),
                    field: path.to_string(),
                }),
                Err(e) => self.causes.push(Cause {
                    reason: "FieldValueInvalid".into(),
                    message: format!(
                        "Invalid value: \"{}\": {} evaluating rule: {}",
                        type_name(node),
                        error_text(&e),
                        rule.source.trim()
                    ),
                    field: path.to_string(),
                }),
            }
        }
    }

    /// Upstream's runtime budget error; no rule runs after it.
    fn out_of_budget(&mut self, node: &Node, path: &str) {
        self.exhausted = true;
        self.causes.push(Cause {
            reason: "FieldValueInvalid".into(),
            message: format!("Invalid value: \"{}\": {BUDGET_MESSAGE}", type_name(node)),
            field: path.to_string(),
        });
    }

    fn failed(&mut self, node: &Node, path: &str, rule: &Rule, ctx: &Context) {
        let mut message = if rule.message.is_empty() {
            format!("failed rule: {}", rule.source.trim())
        } else {
            rule.message.clone()
        };
        // A messageExpression that errs or is empty falls back to the
        // message, as upstream (which logs it).
        if let Some(m) = &rule.message_expression
            && let Ok(Cel::String(s)) = m.execute(ctx, self.deadline).result
            && !s.trim().is_empty()
            && !s.contains('\n')
        {
            message = s.to_string();
        }
        let field = format!("{path}{}", rule.field_path);
        let field = field.strip_prefix('.').map(str::to_string).unwrap_or(field);
        let typ = type_name(node);
        let (reason, message) = match rule.reason {
            Reason::Invalid => (
                "FieldValueInvalid",
                format!("Invalid value: \"{typ}\": {message}"),
            ),
            Reason::Forbidden => ("FieldValueForbidden", format!("Forbidden: {message}")),
            Reason::Required => ("FieldValueRequired", format!("Required value: {message}")),
            Reason::Duplicate => ("FieldValueDuplicate", format!("Duplicate value: \"{typ}\"")),
        };
        self.causes.push(Cause {
            reason: reason.into(),
            message,
            field,
        });
    }
}

/// A `listType: map` item's identity: its key fields' values (a missing
/// key is `null`, as an absent field compares equal to an absent one).
pub(crate) fn map_key(item: &Value, keys: &[String]) -> String {
    let values: Vec<&Value> = keys
        .iter()
        .map(|k| item.get(k).unwrap_or(&Value::Null))
        .collect();
    serde_json::to_string(&values).unwrap_or_default()
}

/// The items of a `listType: map` list by [`map_key`]; the first of items
/// with equal keys wins.
pub(crate) fn key_index<'v>(items: &'v [Value], keys: &[String]) -> HashMap<String, &'v Value> {
    let mut ix = HashMap::with_capacity(items.len());
    for o in items {
        ix.entry(map_key(o, keys)).or_insert(o);
    }
    ix
}

fn join(path: &str, k: &str) -> String {
    if path.is_empty() {
        k.to_string()
    } else {
        format!("{path}.{k}")
    }
}
