//! CRD structural schemas (`openAPIV3Schema` of `apiextensions.k8s.io/v1`):
//! defaulting, pruning, validation and list types for custom resources.
//!
//! The three passes mirror apiextensions-apiserver (v0.33): `default` is
//! `schema/defaulting.Default`, `prune` is `schema/pruning.Prune` with the
//! object treated as a resource root, and `validate` is kube-openapi's schema
//! validator with its errors converted to field errors as
//! `apiserver/validation.ValidateCustomResource` does. Upstream runs them in
//! that order on a write: default, prune, validate.
//!
//! ```
//! use serde_json::json;
//! use wasmlet_apimachinery::schema::Structural;
//!
//! let s = Structural::new(&json!({
//!     "type": "object",
//!     "properties": {"spec": {"type": "object", "required": ["size"], "properties": {
//!         "replicas": {"type": "integer", "minimum": 1, "default": 1},
//!         "size": {"type": "string"},
//!     }}},
//! })).unwrap();
//! let mut obj = json!({"apiVersion": "x/v1", "kind": "X", "spec": {"foo": 1}});
//! s.default(&mut obj);
//! assert_eq!(s.prune(&mut obj), vec!["spec.foo"]);
//! assert_eq!(obj["spec"], json!({"replicas": 1}));
//! let causes = s.validate(&obj);
//! assert_eq!(causes[0].full_message(), "spec.size: Required value");
//! assert_eq!(causes[0].reason, "FieldValueRequired");
//! ```
//!
//! Deviations from upstream, on purpose or for now:
//! - `allOf`/`anyOf`/`oneOf`/`not`, `x-kubernetes-validations` (CEL),
//!   `patternProperties` and validation ratcheting on update are not
//!   evaluated; the keywords are accepted and ignored.
//! - `additionalProperties: false` is treated as absent (unknown fields are
//!   pruned) instead of being kept and reported as forbidden.
//! - `format` is checked for `date-time`, `date`, `uuid`, `ipv4`, `ipv6` and
//!   `cidr` only (upstream knows ~25 formats); other formats are ignored.
//!   `format: int-or-string` is read as `x-kubernetes-int-or-string: true`.
//! - A bad object or array value is printed as compact JSON in messages where
//!   Go prints its `%#v` form.
//! - Properties are validated in schema order; upstream's order follows Go
//!   map iteration, i.e. is unspecified.
//! - Schema checks done by `Structural::new` are a subset of upstream's CRD
//!   validation (the ones that would otherwise make the passes ambiguous).

use regex::Regex;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::goquote::go_quote;
use crate::listtype::{ListType, ListTypes};

/// A schema that is not a usable structural schema. `field` is the path
/// inside the schema, e.g. `properties[spec].properties[replicas].type`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}{message}", if field.is_empty() { String::new() } else { format!("{field}: ") })]
pub struct SchemaError {
    pub field: String,
    pub message: String,
}

/// One validation failure, shaped like a `metav1.StatusCause`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cause {
    /// Upstream's cause type: `FieldValueRequired`, `FieldValueInvalid`,
    /// `FieldValueNotSupported`, `FieldValueTypeInvalid`, `FieldValueTooLong`,
    /// `FieldValueTooMany`.
    pub reason: String,
    /// The message without the field, e.g. `Required value` or
    /// `Invalid value: 0: spec.replicas in body should be greater than or equal to 1`.
    pub message: String,
    /// The field path, e.g. `spec.replicas` or `spec.items[0].name`.
    pub field: String,
}

impl Cause {
    /// `"{field}: {message}"`, the line upstream prints in a 422's message.
    pub fn full_message(&self) -> String {
        if self.field.is_empty() {
            self.message.clone()
        } else {
            format!("{}: {}", self.field, self.message)
        }
    }
}

/// A parsed structural schema. Cheap to keep per CRD version; all methods are pure.
#[derive(Debug, Clone)]
pub struct Structural {
    root: Node,
}

#[derive(Debug, Clone, Default)]
struct Node {
    typ: Option<String>,
    nullable: bool,
    int_or_string: bool,
    preserve_unknown: bool,
    embedded: bool,
    properties: Vec<(String, Node)>,
    /// `Some(None)`: `additionalProperties: true`; `Some(Some(s))`: a schema.
    additional: Option<Option<Box<Node>>>,
    items: Option<Box<Node>>,
    default: Option<Value>,
    enum_values: Option<Vec<Value>>,
    required: Vec<String>,
    minimum: Option<f64>,
    exclusive_minimum: bool,
    maximum: Option<f64>,
    exclusive_maximum: bool,
    multiple_of: Option<f64>,
    min_length: Option<u64>,
    max_length: Option<u64>,
    pattern: Option<(String, Regex)>,
    min_items: Option<u64>,
    max_items: Option<u64>,
    unique_items: bool,
    min_properties: Option<u64>,
    max_properties: Option<u64>,
    format: Option<String>,
    /// `None` is atomic (`ListType` has no `Default`).
    list_type: Option<ListType>,
}

#[derive(Clone, Copy, PartialEq)]
enum Level {
    Root,
    Field,
    Item,
}

const TYPES: [&str; 6] = ["array", "boolean", "integer", "number", "object", "string"];

impl Structural {
    /// Parses an `openAPIV3Schema`. Rejects what upstream's CRD validation
    /// would reject and this module relies on: unknown `type`s, a missing
    /// `type` (unless int-or-string or preserve-unknown-fields), a non-object
    /// root or embedded resource, arrays without `items`, `properties`
    /// together with an `additionalProperties` schema, `additionalProperties`
    /// at the root, invalid `pattern`s, bad list types, wrongly typed keywords.
    ///
    /// ```
    /// use serde_json::json;
    /// use wasmlet_apimachinery::schema::Structural;
    /// let e = Structural::new(&json!({"type": "object", "properties": {"spec": {"type": "array"}}})).unwrap_err();
    /// assert_eq!(e.to_string(), "properties[spec].items: Required value: must be specified");
    /// ```
    pub fn new(schema: &Value) -> Result<Structural, SchemaError> {
        let root = parse_node(schema, "", Level::Root)?;
        if let Some(t) = &root.typ
            && t != "object"
        {
            return Err(err(
                "type",
                format!("Invalid value: {}: must be object at the root", go_quote(t)),
            ));
        }
        Ok(Structural { root })
    }

    /// Applies `default`s in place, as upstream: a property's default is set
    /// where the property is absent (or `null` while not nullable); array
    /// items and additionalProperties values that are non-nullable `null`s get
    /// their schema's default; then it recurses, so defaults nested inside a
    /// freshly set default object apply too.
    pub fn default(&self, obj: &mut Value) {
        apply_default(obj, Some(&self.root));
    }

    /// Removes fields the schema does not know, in place, and returns their
    /// paths sorted (`spec.foo`, `spec.items[0].bar`) for `fieldValidation`
    /// warnings or `unknown field "spec.foo"` errors. `apiVersion`, `kind`
    /// and `metadata` are kept at the root and in `x-kubernetes-embedded-resource`
    /// objects; under `x-kubernetes-preserve-unknown-fields` unknown fields stay
    /// while known ones are still pruned inside.
    pub fn prune(&self, obj: &mut Value) -> Vec<String> {
        // Upstream prunes the object as a resource root: as if the root schema
        // were x-kubernetes-embedded-resource, so apiVersion/kind/metadata stay.
        let root = RootView {
            node: &self.root,
            embedded: true,
        };
        let mut out = Vec::new();
        prune(obj, Some(&root), &mut String::new(), &mut out);
        out.sort();
        out
    }

    /// Validates `obj` against the schema; empty when valid. Run it after
    /// [`Structural::default`] and [`Structural::prune`], as upstream does.
    pub fn validate(&self, obj: &Value) -> Vec<Cause> {
        let mut out = Vec::new();
        validate(&self.root, obj, "", true, &mut out);
        out
    }
}

impl ListTypes for Structural {
    /// From `x-kubernetes-list-type` (+ `x-kubernetes-list-map-keys`); arrays
    /// without one, and paths the schema does not describe, are atomic.
    fn list_type(&self, path: &[&str]) -> ListType {
        let mut node = &self.root;
        for seg in path {
            // List indices are left out of the path, so step through arrays.
            while let Some(items) = &node.items {
                node = items;
            }
            node = match node.property(seg) {
                Some(n) => n,
                None => match &node.additional {
                    Some(Some(n)) => n,
                    _ => return ListType::Atomic,
                },
            };
        }
        match (&node.typ, &node.list_type) {
            (Some(t), Some(lt)) if t == "array" => lt.clone(),
            _ => ListType::Atomic,
        }
    }
}

impl Node {
    fn property(&self, name: &str) -> Option<&Node> {
        self.properties
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, n)| n)
    }
}

/// The root node with `embedded` forced on, for pruning (borrowed rather
/// than cloning the whole tree for one flag).
struct RootView<'a> {
    node: &'a Node,
    embedded: bool,
}

// ---------------------------------------------------------------------------
// Parsing

fn err(field: impl Into<String>, message: impl Into<String>) -> SchemaError {
    SchemaError {
        field: field.into(),
        message: message.into(),
    }
}

fn child(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

fn parse_node(v: &Value, path: &str, level: Level) -> Result<Node, SchemaError> {
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

// ---------------------------------------------------------------------------
// Defaulting

fn is_non_nullable_null(v: &Value, s: Option<&Node>) -> bool {
    v.is_null() && s.is_some_and(|s| !s.nullable)
}

fn apply_default(x: &mut Value, s: Option<&Node>) {
    let Some(s) = s else { return };
    match x {
        Value::Object(obj) => {
            for (k, prop) in &s.properties {
                let Some(d) = &prop.default else { continue };
                match obj.get_mut(k) {
                    None => {
                        obj.insert(k.clone(), d.clone());
                    }
                    Some(v) if is_non_nullable_null(v, Some(prop)) => *v = d.clone(),
                    Some(_) => {}
                }
            }
            let additional = s.additional.as_ref().and_then(|a| a.as_deref());
            for (k, v) in obj.iter_mut() {
                if let Some(prop) = s.property(k) {
                    apply_default(v, Some(prop));
                } else if s.additional.is_some() {
                    if let Some(a) = additional
                        && is_non_nullable_null(v, Some(a))
                        && let Some(d) = &a.default
                    {
                        *v = d.clone();
                    }
                    apply_default(v, additional);
                }
            }
        }
        Value::Array(items) => {
            let item_schema = s.items.as_deref();
            for v in items.iter_mut() {
                if is_non_nullable_null(v, item_schema)
                    && let Some(d) = item_schema.and_then(|i| i.default.as_ref())
                {
                    *v = d.clone();
                }
                apply_default(v, item_schema);
            }
        }
        _ => {}
    }
}

// ---------------------------------------------------------------------------
// Pruning

const META_FIELDS: [&str; 3] = ["apiVersion", "kind", "metadata"];

/// A schema node as seen by pruning: the root view (with its embedded flag
/// forced on) or a plain node.
trait PruneSchema {
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

fn prune<S: PruneSchema + ?Sized>(
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

// ---------------------------------------------------------------------------
// Validation

fn cause(reason: &str, field: &str, message: String) -> Cause {
    Cause {
        reason: reason.to_string(),
        message,
        field: field.to_string(),
    }
}

fn required(field: &str, detail: &str) -> Cause {
    let msg = if detail.is_empty() {
        "Required value".to_string()
    } else {
        format!("Required value: {detail}")
    };
    cause("FieldValueRequired", field, msg)
}

fn invalid(field: &str, bad: &str, detail: &str) -> Cause {
    cause(
        "FieldValueInvalid",
        field,
        format!("Invalid value: {bad}: {detail}"),
    )
}

fn type_invalid(field: &str, bad: &str, detail: &str) -> Cause {
    cause(
        "FieldValueTypeInvalid",
        field,
        format!("Invalid value: {bad}: {detail}"),
    )
}

fn too_many(field: &str, actual: usize, max: u64) -> Cause {
    cause(
        "FieldValueTooMany",
        field,
        format!("Too many: {actual}: must have at most {max} items"),
    )
}

/// The JSON schema type name of a value, as kube-openapi reports it.
fn data_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// A bad value as Go's field errors print it: `%q` for strings, `%v` for
/// numbers and booleans, `"null"` for null (JSON for objects and arrays).
fn bad_value(v: &Value) -> String {
    match v {
        Value::Null => go_quote("null"),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => number_string(n),
        Value::String(s) => go_quote(s),
        other => other.to_string(),
    }
}

fn number_string(n: &serde_json::Number) -> String {
    match n.as_i64() {
        Some(i) => i.to_string(),
        None => go_float(n.as_f64().unwrap_or(f64::NAN)),
    }
}

/// Go's `%v` for a float64: shortest representation, exponent form below
/// 1e-4 and from 1e21 on (`1e+21`, `1.5e-05`).
fn go_float(f: f64) -> String {
    if f.is_nan() {
        return "NaN".into();
    }
    if f.is_infinite() {
        return if f > 0.0 {
            "+Inf".into()
        } else {
            "-Inf".into()
        };
    }
    if f == 0.0 {
        return if f.is_sign_negative() {
            "-0".into()
        } else {
            "0".into()
        };
    }
    let sci = format!("{f:e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if !(-4..21).contains(&exp) {
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{mantissa}e{sign}{:02}", exp.abs())
    } else {
        format!("{f}")
    }
}

fn is_integral(f: f64) -> bool {
    f.is_finite() && f.fract() == 0.0
}

/// JSON equality with numbers compared by value (`1 == 1.0`), as enum
/// matching converts between Go's int64 and float64.
fn json_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => match (x.as_i64(), y.as_i64()) {
            (Some(i), Some(j)) => i == j,
            _ => x.as_f64() == y.as_f64(),
        },
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| json_eq(a, b))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| json_eq(v, w)))
        }
        _ => a == b,
    }
}

fn validate(s: &Node, v: &Value, path: &str, root: bool, out: &mut Vec<Cause>) {
    let types: Vec<&str> = if s.int_or_string {
        vec!["integer", "string"]
    } else {
        s.typ.iter().map(String::as_str).collect()
    };
    let name = path;

    // type
    let dt = data_type(v);
    if v.is_null() {
        if !types.is_empty() && !s.nullable {
            out.push(type_invalid(
                path,
                &go_quote("null"),
                &format!(
                    "{name} in body must be of type {}: \"null\"",
                    types.join(",")
                ),
            ));
        }
        validate_enum(s, v, path, out);
        return;
    }
    let float_int =
        dt == "number" && v.as_f64().is_some_and(is_integral) && types.contains(&"integer");
    let int_float = dt == "integer" && types.contains(&"number");
    if !(types.is_empty() || types.contains(&dt) || float_int || int_float) {
        out.push(type_invalid(
            path,
            &go_quote(dt),
            &format!(
                "{name} in body must be of type {}: {}",
                types.join(","),
                go_quote(dt)
            ),
        ));
    }

    // string: upstream stops at the first failing check
    if let Value::String(st) = v {
        let len = st.chars().count() as u64;
        if let Some(max) = s.max_length
            && len > max
        {
            out.push(cause(
                "FieldValueTooLong",
                path,
                format!("Too long: may not be more than {max} bytes"),
            ));
        } else if let Some(min) = s.min_length
            && len < min
        {
            out.push(invalid(
                path,
                &go_quote(st),
                &format!("{name} in body should be at least {min} chars long"),
            ));
        } else if let Some((p, re)) = &s.pattern
            && !re.is_match(st)
        {
            out.push(invalid(
                path,
                &go_quote(st),
                &format!("{name} in body should match '{p}'"),
            ));
        }
        // format
        if let Some(f) = &s.format
            && let Some(ok) = check_format(f, st)
            && !ok
        {
            out.push(type_invalid(
                path,
                &go_quote(st),
                &format!("{name} in body must be of type {f}: {}", go_quote(st)),
            ));
        }
    }

    // number
    if let Value::Number(n) = v {
        let x = n.as_f64().unwrap_or(f64::NAN);
        let shown = number_string(n);
        if let Some(m) = s.multiple_of
            && m > 0.0
        {
            let q = x / m;
            if !(q.is_finite() && (q - q.round()).abs() <= 1e-9 * q.abs().max(1.0)) {
                out.push(invalid(
                    path,
                    &shown,
                    &format!("{name} in body should be a multiple of {}", go_float(m)),
                ));
            }
        }
        if let Some(min) = s.minimum {
            let (bad, word) = if s.exclusive_minimum {
                (x <= min, "greater than")
            } else {
                (x < min, "greater than or equal to")
            };
            if bad {
                out.push(invalid(
                    path,
                    &shown,
                    &format!("{name} in body should be {word} {}", go_float(min)),
                ));
            }
        }
        if let Some(max) = s.maximum {
            let (bad, word) = if s.exclusive_maximum {
                (x >= max, "less than")
            } else {
                (x > max, "less than or equal to")
            };
            if bad {
                out.push(invalid(
                    path,
                    &shown,
                    &format!("{name} in body should be {word} {}", go_float(max)),
                ));
            }
        }
    }

    // array
    if let Value::Array(items) = v {
        if let Some(item_schema) = &s.items {
            for (i, item) in items.iter().enumerate() {
                validate(item_schema, item, &format!("{path}[{i}]"), false, out);
            }
        }
        if let Some(min) = s.min_items
            && (items.len() as u64) < min
        {
            out.push(invalid(
                path,
                &items.len().to_string(),
                &format!("{name} in body should have at least {min} items"),
            ));
        }
        if let Some(max) = s.max_items
            && items.len() as u64 > max
        {
            out.push(too_many(path, items.len(), max));
        }
        if s.unique_items && has_duplicates(items) {
            out.push(invalid(
                path,
                "\"\"",
                &format!("{name} in body shouldn't contain duplicates"),
            ));
        }
    }

    validate_enum(s, v, path, out);

    // object
    if let Value::Object(obj) = v {
        let n = obj.len() as u64;
        if let Some(min) = s.min_properties
            && n < min
        {
            out.push(invalid(
                path,
                &n.to_string(),
                &format!("{name} in body should have at least {min} properties"),
            ));
        }
        if let Some(max) = s.max_properties
            && n > max
        {
            out.push(too_many(path, obj.len(), max));
        }
        if let Some(Some(additional)) = &s.additional {
            for (k, val) in obj {
                if s.property(k).is_none() {
                    validate(additional, val, &child(path, k), false, out);
                }
            }
        }
        for (k, prop) in &s.properties {
            if let Some(val) = obj.get(k) {
                validate(prop, val, &child(path, k), false, out);
            }
        }
        for k in &s.required {
            if !obj.contains_key(k) {
                out.push(required(&child(path, k), ""));
            }
        }
        if s.embedded && !root {
            validate_embedded(obj, path, out);
        }
    }
}

fn validate_enum(s: &Node, v: &Value, path: &str, out: &mut Vec<Cause>) {
    let Some(allowed) = &s.enum_values else {
        return;
    };
    if allowed.is_empty() || allowed.iter().any(|a| json_eq(a, v)) {
        return;
    }
    // Upstream lists string values as they are and others as JSON, each quoted.
    let supported: Vec<String> = allowed
        .iter()
        .map(|a| {
            go_quote(
                &a.as_str()
                    .map(str::to_string)
                    .unwrap_or_else(|| a.to_string()),
            )
        })
        .collect();
    out.push(cause(
        "FieldValueNotSupported",
        path,
        format!(
            "Unsupported value: {}: supported values: {}",
            bad_value(v),
            supported.join(", ")
        ),
    ));
}

/// Upstream's objectmeta check for `x-kubernetes-embedded-resource` objects.
fn validate_embedded(obj: &Map<String, Value>, path: &str, out: &mut Vec<Cause>) {
    for key in ["apiVersion", "kind"] {
        let field = child(path, key);
        match obj.get(key) {
            None => out.push(required(&field, "must not be empty")),
            Some(Value::String(s)) if s.is_empty() => {
                out.push(invalid(&field, "\"\"", "must not be empty"))
            }
            Some(Value::String(_)) => {}
            Some(other) => out.push(invalid(&field, &bad_value(other), "must be a string")),
        }
    }
}

fn has_duplicates(items: &[Value]) -> bool {
    items
        .iter()
        .enumerate()
        .any(|(i, a)| items[i + 1..].iter().any(|b| json_eq(a, b)))
}

/// `Some(valid)` for the formats checked here, `None` for formats ignored.
/// Names are normalized as go-openapi does (`date-time` == `datetime`).
fn check_format(format: &str, s: &str) -> Option<bool> {
    Some(match format.replace('-', "").as_str() {
        "datetime" => {
            chrono::DateTime::parse_from_rfc3339(s).is_ok()
                || chrono::NaiveDateTime::parse_from_str(s, "%Y-%m-%dT%H:%M:%S%.f").is_ok()
        }
        "date" => chrono::NaiveDate::parse_from_str(s, "%Y-%m-%d").is_ok() && s.len() == 10,
        "uuid" => is_uuid(s),
        "ipv4" => s.parse::<std::net::Ipv4Addr>().is_ok(),
        "ipv6" => s.parse::<std::net::Ipv6Addr>().is_ok(),
        "cidr" => is_cidr(s),
        _ => return None,
    })
}

/// go-openapi's `(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}$`.
fn is_uuid(s: &str) -> bool {
    let mut rest = s;
    for (i, len) in [8usize, 4, 4, 4, 12].into_iter().enumerate() {
        if i > 0 {
            rest = rest.strip_prefix('-').unwrap_or(rest);
        }
        let Some(head) = rest.get(..len) else {
            return false;
        };
        if !head.bytes().all(|b| b.is_ascii_hexdigit()) {
            return false;
        }
        rest = &rest[len..];
    }
    rest.is_empty()
}

fn is_cidr(s: &str) -> bool {
    let Some((ip, bits)) = s.split_once('/') else {
        return false;
    };
    let Ok(bits) = bits.parse::<u8>() else {
        return false;
    };
    match ip.parse::<std::net::IpAddr>() {
        Ok(std::net::IpAddr::V4(_)) => bits <= 32,
        Ok(std::net::IpAddr::V6(_)) => bits <= 128,
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests;
