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
//! - `allOf`/`anyOf`/`oneOf`/`not`, `patternProperties` and validation
//!   ratcheting on update are not evaluated; the keywords are accepted and
//!   ignored. `x-kubernetes-validations` (CEL) are not evaluated here: the
//!   host's API server compiles and runs them (`apiserver::cel_rules`).
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
//!
//! Layout: this file holds the public types; `structural` the schema tree and
//! its parsing, `defaulting`, `pruning` and `validation` the three passes, and
//! `formats` the `format` checks validation uses.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::goquote::go_quote;
use crate::listtype::{ListType, ListTypes};

use defaulting::apply_default;
use pruning::{RootView, prune};
use structural::{Level, Node, err, parse_node};
use validation::validate;

/// A schema that is not a usable structural schema. `field` is the path
/// inside the schema, e.g. `properties[spec].properties[replicas].type`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}{message}", if field.is_empty() { String::new() } else { format!("{field}: ") })]
pub struct SchemaError {
    /// Where in the schema, e.g. `properties[spec].type`; empty for the schema as a whole.
    pub field: String,
    /// What is wrong there, in the API server's wording.
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

    /// Like [`Structural::prune`], but `apiVersion`, `kind` and `metadata`
    /// are pruned by the schema too: for built-in kinds, whose schemas
    /// describe them (upstream decodes them into typed structs, which drops
    /// unknown fields in `metadata` as well).
    pub fn prune_typed(&self, obj: &mut Value) -> Vec<String> {
        let root = RootView {
            node: &self.root,
            embedded: false,
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

/// The field path of `key` under `path` (`spec` + `replicas` → `spec.replicas`).
fn child(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

mod defaulting;
mod formats;
mod pruning;
mod structural;
#[cfg(test)]
mod tests;
mod validation;
