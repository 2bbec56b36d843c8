//! A table name checked once, so every statement can splice it in: SQL has no
//! parameters for identifiers, and a name from a plugin's manifest must never
//! become SQL of the plugin's choosing.

use super::DatastoreError;

/// Longest table name: the names derived from it (`NAME_changes`,
/// `NAME_revision_seq`, ...) must fit PostgreSQL's 63-byte identifiers.
pub(crate) const MAX_TABLE_NAME: usize = 40;

/// A validated table name: `[a-z_][a-z0-9_]*`, at most [`MAX_TABLE_NAME`]
/// bytes, not starting with `pg_` (PostgreSQL's own namespace).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Table(String);

impl Table {
    pub(crate) fn new(name: &str) -> Result<Table, DatastoreError> {
        let bad = |reason| DatastoreError::TableName {
            name: name.to_string(),
            reason,
        };
        if name.is_empty() {
            return Err(bad("must not be empty"));
        }
        if name.len() > MAX_TABLE_NAME {
            return Err(bad("is longer than 40 bytes"));
        }
        let mut chars = name.chars();
        let first = chars.next().expect("not empty");
        if !(first.is_ascii_lowercase() || first == '_') {
            return Err(bad("must start with a lower-case letter or '_'"));
        }
        if !chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_') {
            return Err(bad(
                "may hold only lower-case letters, digits and '_' (a plain SQL identifier)",
            ));
        }
        if name.starts_with("pg_") {
            return Err(bad("names starting with pg_ are PostgreSQL's"));
        }
        Ok(Table(name.to_string()))
    }

    pub(crate) fn name(&self) -> &str {
        &self.0
    }

    /// The table as an SQL identifier (quoted, so no keyword clashes).
    pub(crate) fn ident(&self) -> String {
        format!("\"{}\"", self.0)
    }

    /// A name derived from the table's (`suffix` is the host's, never input).
    pub(crate) fn derived(&self, suffix: &str) -> String {
        format!("\"{}_{suffix}\"", self.0)
    }

    /// The NOTIFY channel its trigger signals on.
    pub(crate) fn channel(&self) -> String {
        format!("{}_changes", self.0)
    }
}

impl std::fmt::Display for Table {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_identifiers_pass() {
        for ok in ["rows", "_x", "projects_v2", &"a".repeat(40)] {
            assert_eq!(Table::new(ok).unwrap().name(), ok);
        }
        for (bad, why) in [
            ("", "empty"),
            ("rows; DROP TABLE users; --", "only lower-case"),
            ("rows\"", "only lower-case"),
            ("Rows", "start with"),
            ("1rows", "start with"),
            ("ro ws", "only lower-case"),
            ("rows-x", "only lower-case"),
            ("public.rows", "only lower-case"),
            ("pg_class", "PostgreSQL's"),
            ("röws", "only lower-case"),
            (&"a".repeat(41), "longer"),
        ] {
            let e = Table::new(bad).unwrap_err().to_string();
            assert!(e.contains(why), "{bad:?}: {e}");
            assert!(e.starts_with("table name "), "{e}");
        }
    }

    #[test]
    fn derived_names_fit_postgres_identifiers() {
        let t = Table::new(&"a".repeat(MAX_TABLE_NAME)).unwrap();
        for d in [
            t.derived("revision_seq"),
            t.derived("notify"),
            t.derived("finalized"),
            t.channel(),
        ] {
            assert!(d.trim_matches('"').len() <= 63, "{d}");
        }
    }
}
