//! The structural schema tree ([`Node`]) and its parsing from an
//! `openAPIV3Schema`, with the checks `Structural::new` makes.

use regex::Regex;
use serde_json::{Map, Value};

use super::{SchemaError, child};
use crate::goquote::go_quote;
use crate::listtype::ListType;

/// One schema node, with the keywords the passes use already parsed.
#[derive(Debug, Clone, Default)]
pub(super) struct Node {
    pub(super) typ: Option<String>,
    pub(super) nullable: bool,
    pub(super) int_or_string: bool,
    pub(super) preserve_unknown: bool,
    pub(super) embedded: bool,
    pub(super) properties: Vec<(String, Node)>,
    /// `Some(None)`: `additionalProperties: true`; `Some(Some(s))`: a schema.
    pub(super) additional: Option<Option<Box<Node>>>,
    pub(super) items: Option<Box<Node>>,
    pub(super) default: Option<Value>,
    pub(super) enum_values: Option<Vec<Value>>,
    pub(super) required: Vec<String>,
    pub(super) minimum: Option<f64>,
    pub(super) exclusive_minimum: bool,
    pub(super) maximum: Option<f64>,
    pub(super) exclusive_maximum: bool,
    pub(super) multiple_of: Option<f64>,
    pub(super) min_length: Option<u64>,
    pub(super) max_length: Option<u64>,
    pub(super) pattern: Option<(String, Regex)>,
    pub(super) min_items: Option<u64>,
    pub(super) max_items: Option<u64>,
    pub(super) unique_items: bool,
    pub(super) min_properties: Option<u64>,
    pub(super) max_properties: Option<u64>,
    pub(super) format: Option<String>,
    /// `None` is atomic (`ListType` has no `Default`).
    pub(super) list_type: Option<ListType>,
}

#[derive(Clone, Copy, PartialEq)]
pub(super) enum Level {
    Root,
    Field,
    Item,
}

const TYPES: [&str; 6] = ["array", "boolean", "integer", "number", "object", "string"];

impl Node {
    pub(super) fn property(&self, name: &str) -> Option<&Node> {
        self.properties
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, n)| n)
    }
}

pub(super) fn err(field: impl Into<String>, message: impl Into<String>) -> SchemaError {
    SchemaError {
        field: field.into(),
        message: message.into(),
    }
}

pub(super) fn parse_node(v: &Value, path: &str, level: Level) -> Result<Node, SchemaError> {
    let Some(m) = v.as_object() else {
        return Err(err(path, "Invalid value: must be a schema object"));
    };
    let mut n = Node {
        typ: opt_string(m, path, "type")?,
        nullable: opt_bool(m, path, "nullable")?,
        int_or_string: opt_bool(m, path, "x-kubernetes-int-or-string")?,
        preserve_unknown: opt_bool(m, path, "x-kubernetes-preserve-unknown-fields")?,
        embedded: opt_bool(m, path, "x-kubernetes-embedded-resource")?,
        default: m.get("default").filter(|d| !d.is_null()).cloned(),
        minimum: opt_f64(m, path, "minimum")?,
        exclusive_minimum: opt_bool(m, path, "exclusiveMinimum")?,
        maximum: opt_f64(m, path, "maximum")?,
        exclusive_maximum: opt_bool(m, path, "exclusiveMaximum")?,
        multiple_of: opt_f64(m, path, "multipleOf")?,
        min_length: opt_u64(m, path, "minLength")?,
        max_length: opt_u64(m, path, "maxLength")?,
        min_items: opt_u64(m, path, "minItems")?,
        max_items: opt_u64(m, path, "maxItems")?,
        unique_items: opt_bool(m, path, "uniqueItems")?,
        min_properties: opt_u64(m, path, "minProperties")?,
        max_properties: opt_u64(m, path, "maxProperties")?,
        format: opt_string(m, path, "format")?,
        ..Node::default()
    };
    if n.format.as_deref() == Some("int-or-string") {
        // What the built-in OpenAPI says for IntOrString fields.
        n.int_or_string = true;
    }
    if let Some(t) = &n.typ
        && !TYPES.contains(&t.as_str())
    {
        return Err(err(
            child(path, "type"),
            format!(
                "Unsupported value: {}: supported values: {}",
                go_quote(t),
                quoted_list(&TYPES)
            ),
        ));
    }
    if n.embedded && n.typ.as_deref() != Some("object") {
        let field = child(path, "type");
        return Err(match &n.typ {
            None => err(
                field,
                "Required value: must be object if x-kubernetes-embedded-resource is true",
            ),
            Some(t) => err(
                field,
                format!(
                    "Invalid value: {}: must be object if x-kubernetes-embedded-resource is true",
                    go_quote(t)
                ),
            ),
        });
    }
    if n.typ.is_none() && !n.int_or_string && !n.preserve_unknown {
        let why = match level {
            Level::Root => "must not be empty at the root",
            Level::Item => "must not be empty for specified array items",
            Level::Field => "must not be empty for specified object fields",
        };
        return Err(err(child(path, "type"), format!("Required value: {why}")));
    }
    match m.get("enum") {
        None | Some(Value::Null) => {}
        Some(Value::Array(a)) => n.enum_values = Some(a.clone()),
        Some(_) => return Err(err(child(path, "enum"), "Invalid value: must be an array")),
    }
    match m.get("required") {
        None | Some(Value::Null) => {}
        Some(Value::Array(a)) => {
            for r in a {
                let r = r.as_str().ok_or_else(|| {
                    err(
                        child(path, "required"),
                        "Invalid value: must be an array of strings",
                    )
                })?;
                n.required.push(r.to_string());
            }
        }
        Some(_) => {
            return Err(err(
                child(path, "required"),
                "Invalid value: must be an array of strings",
            ));
        }
    }
    if let Some(p) = opt_string(m, path, "pattern")? {
        let re = Regex::new(&p).map_err(|e| {
            err(
                child(path, "pattern"),
                format!(
                    "Invalid value: {}: must be a valid regular expression, but isn't: {e}",
                    go_quote(&p)
                ),
            )
        })?;
        n.pattern = Some((p, re));
    }
    match m.get("properties") {
        None | Some(Value::Null) => {}
        Some(Value::Object(props)) => {
            for (k, pv) in props {
                let p = if path.is_empty() {
                    format!("properties[{k}]")
                } else {
                    format!("{path}.properties[{k}]")
                };
                n.properties
                    .push((k.clone(), parse_node(pv, &p, Level::Field)?));
            }
        }
        Some(_) => {
            return Err(err(
                child(path, "properties"),
                "Invalid value: must be an object",
            ));
        }
    }
    match m.get("additionalProperties") {
        None | Some(Value::Null) | Some(Value::Bool(false)) => {}
        Some(_) if level == Level::Root => {
            return Err(err(
                child(path, "additionalProperties"),
                "Forbidden: must not be used at the root",
            ));
        }
        Some(Value::Bool(true)) => n.additional = Some(None),
        Some(s @ Value::Object(_)) => {
            if !n.properties.is_empty() {
                return Err(err(
                    child(path, "additionalProperties"),
                    "Forbidden: additionalProperties and properties are mutual exclusive",
                ));
            }
            n.additional = Some(Some(Box::new(parse_node(
                s,
                &child(path, "additionalProperties"),
                Level::Field,
            )?)));
        }
        Some(_) => {
            return Err(err(
                child(path, "additionalProperties"),
                "Invalid value: must be a boolean or a schema",
            ));
        }
    }
    match m.get("items") {
        None | Some(Value::Null) => {
            if n.typ.as_deref() == Some("array") {
                return Err(err(
                    child(path, "items"),
                    "Required value: must be specified",
                ));
            }
        }
        Some(s) => n.items = Some(Box::new(parse_node(s, &child(path, "items"), Level::Item)?)),
    }
    n.list_type = Some(
        match opt_string(m, path, "x-kubernetes-list-type")?.as_deref() {
            None | Some("atomic") => ListType::Atomic,
            Some("set") => ListType::Set,
            Some("map") => {
                let keys_path = child(path, "x-kubernetes-list-map-keys");
                let keys: Vec<String> = match m.get("x-kubernetes-list-map-keys") {
                    Some(Value::Array(a)) => a
                        .iter()
                        .map(|k| k.as_str().map(str::to_string))
                        .collect::<Option<_>>()
                        .ok_or_else(|| {
                            err(&keys_path, "Invalid value: must be an array of strings")
                        })?,
                    _ => Vec::new(),
                };
                if keys.is_empty() {
                    return Err(err(
                        keys_path,
                        "Required value: must not be empty if x-kubernetes-list-type is map",
                    ));
                }
                ListType::Map(keys)
            }
            Some(other) => {
                return Err(err(
                    child(path, "x-kubernetes-list-type"),
                    format!(
                        "Unsupported value: {}: supported values: {}",
                        go_quote(other),
                        quoted_list(&["atomic", "map", "set"])
                    ),
                ));
            }
        },
    );
    Ok(n)
}

fn quoted_list(v: &[&str]) -> String {
    v.iter().map(|s| go_quote(s)).collect::<Vec<_>>().join(", ")
}

fn opt_bool(m: &Map<String, Value>, path: &str, key: &str) -> Result<bool, SchemaError> {
    match m.get(key) {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(_) => Err(err(child(path, key), "Invalid value: must be a boolean")),
    }
}

fn opt_string(
    m: &Map<String, Value>,
    path: &str,
    key: &str,
) -> Result<Option<String>, SchemaError> {
    match m.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.is_empty() => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(err(child(path, key), "Invalid value: must be a string")),
    }
}

fn opt_f64(m: &Map<String, Value>, path: &str, key: &str) -> Result<Option<f64>, SchemaError> {
    match m.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => Ok(n.as_f64()),
        Some(_) => Err(err(child(path, key), "Invalid value: must be a number")),
    }
}

fn opt_u64(m: &Map<String, Value>, path: &str, key: &str) -> Result<Option<u64>, SchemaError> {
    match m.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) if n.as_u64().is_some() => Ok(n.as_u64()),
        Some(_) => Err(err(
            child(path, key),
            "Invalid value: must be a non-negative integer",
        )),
    }
}
