//! The conflicts an apply reports: one per field another manager owns, and
//! upstream's Status message and causes for them.

use std::fmt;

use serde_json::Value;

use super::entry::identifier;

/// One field that another manager owns and the apply would change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflict {
    /// The manager (`fieldManager`) that owns the field now.
    pub manager: String,
    /// `"Apply"` or `"Update"`.
    pub operation: String,
    /// The API version that manager's entry was written with.
    pub api_version: String,
    /// The subresource the owning entry is for (`status`), or `None` for the main resource.
    pub subresource: Option<String>,
    /// Upstream's path spelling: `.spec.containers[name="app"].image`.
    pub field: String,
}

impl Conflict {
    /// Upstream `printManager`: `"name"`, plus ` with subresource "s"`, plus
    /// ` using <apiVersion>` for `Update` managers.
    pub fn who(&self) -> String {
        let mut s = quote(&self.manager);
        if let Some(sub) = self.subresource.as_deref().filter(|s| !s.is_empty()) {
            s.push_str(&format!(" with subresource {}", quote(sub)));
        }
        if self.operation == "Update" {
            s.push_str(&format!(" using {}", self.api_version));
        }
        s
    }

    /// The `message` of this conflict's `FieldManagerConflict` status cause.
    pub fn message(&self) -> String {
        format!("conflict with {}", self.who())
    }

    fn identifier(&self) -> String {
        identifier(
            &self.manager,
            &self.operation,
            &self.api_version,
            self.subresource.as_deref().unwrap_or(""),
        )
    }
}

/// The conflicts of one apply; `Display` is upstream's Status message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflicts(pub Vec<Conflict>);

impl Conflicts {
    /// `(message, field)` of each `FieldManagerConflict` status cause.
    pub fn causes(&self) -> Vec<(String, String)> {
        self.0
            .iter()
            .map(|c| (c.message(), c.field.clone()))
            .collect()
    }
}

impl fmt::Display for Conflicts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let [c] = self.0.as_slice() {
            return write!(
                f,
                "Apply failed with 1 conflict: conflict with {}: {}",
                c.who(),
                c.field
            );
        }
        let mut groups: Vec<(String, String, Vec<&str>)> = Vec::new();
        for c in &self.0 {
            let id = c.identifier();
            match groups.iter_mut().find(|g| g.0 == id) {
                Some(g) => g.2.push(&c.field),
                None => groups.push((id, c.who(), vec![&c.field])),
            }
        }
        groups.sort_by(|a, b| a.0.cmp(&b.0));
        let mut lines = Vec::new();
        for (_, who, fields) in groups {
            lines.push(format!("conflicts with {who}:"));
            lines.extend(fields.into_iter().map(|p| format!("- {p}")));
        }
        write!(
            f,
            "Apply failed with {} conflicts: {}",
            self.0.len(),
            lines.join("\n")
        )
    }
}

impl std::error::Error for Conflicts {}

/// Go's `%q` for the strings we print (JSON string syntax for anything printable).
fn quote(s: &str) -> String {
    Value::from(s).to_string()
}
