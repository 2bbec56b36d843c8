//! The part of a custom resource's status the host writes: `observedGeneration`
//! and `conditions` (a `Ready` condition, and those the reconciler declares).
//! The CRD's status schema must declare both, or the API server prunes what
//! the host writes (and `wasmlet plugin check` warns). Add them to your status
//! type with this crate's [`StatusCondition`], whose schema is the one the
//! host writes (metav1.Condition's shape):
//!
//! ```
//! use schemars::JsonSchema;
//! use serde::{Deserialize, Serialize};
//! use wasmlet_sdk::status::StatusCondition;
//!
//! #[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
//! #[serde(rename_all = "camelCase")]
//! pub struct GreetingStatus {
//!     /// Yours. `default`: not `required`, so the host's status patch on a
//!     /// failure (conditions only) is not refused for lacking it.
//!     #[serde(default)]
//!     pub message: String,
//!     /// The host's: never serialised by you when empty, so the status your
//!     /// reconciler returns cannot clobber them.
//!     #[serde(default, skip_serializing_if = "Option::is_none")]
//!     pub observed_generation: Option<i64>,
//!     #[serde(default, skip_serializing_if = "Vec::is_empty")]
//!     pub conditions: Vec<StatusCondition>,
//! }
//! ```

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A condition as the host writes it into a status.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StatusCondition {
    /// `Ready`, or a type the reconciler declares.
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// A CamelCase word saying why.
    #[serde(default)]
    pub reason: String,
    /// A sentence for people.
    #[serde(default)]
    pub message: String,
    /// When `status` last changed (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<String>,
    /// The object's generation the condition was set for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}
