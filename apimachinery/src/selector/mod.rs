//! Label and field selectors: the `labelSelector` / `fieldSelector` query
//! parameters of LIST and WATCH, and `metav1.LabelSelector` objects.
//!
//! Parsing follows `k8s.io/apimachinery/pkg/labels/selector.go` and
//! `pkg/fields/selector.go` (v0.33): same grammar, same error strings, same
//! canonical string form (requirements sorted by key, set values sorted).
//!
//! ```
//! use std::collections::BTreeMap;
//! use wasmlet_apimachinery::selector::{FieldSelector, LabelSelector};
//!
//! let sel = LabelSelector::parse("app in (web, api), tier!=cache, !legacy").unwrap();
//! let labels = BTreeMap::from([("app".to_string(), "web".to_string())]);
//! assert!(sel.matches(&labels));
//! // A label map straight out of an object works too (a missing map is no labels):
//! let pod = serde_json::json!({"metadata": {"labels": {"app": "db"}}});
//! assert!(!sel.matches(&pod["metadata"]["labels"]));
//! assert_eq!(sel.to_string(), "app in (api,web),!legacy,tier!=cache");
//!
//! let fs = FieldSelector::parse("spec.nodeName=node-1,status.phase!=Succeeded").unwrap();
//! assert!(fs.matches(|f| match f {
//!     "spec.nodeName" => Some("node-1".into()),
//!     "status.phase" => Some("Running".into()),
//!     _ => None,
//! }));
//! ```

//! The module is split by what it parses: `labels` holds label
//! requirements and `metav1.LabelSelector` conversion, `parser` the
//! transliterated upstream lexer and parser of the label selector string, and
//! `fields` the field selector.

mod fields;
mod labels;
mod parser;
#[cfg(test)]
mod tests;

pub use fields::{FieldOperator, FieldRequirement, FieldSelector, escape_value};
pub use labels::{LabelSelector, Labels, MAX_AGGREGATE_BYTES, Operator, Requirement};

/// A selector that could not be parsed or built. The message is upstream's,
/// ready for a `BadRequest` Status.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SelectorError(pub String);
