//! What can go wrong between the host and its datastore.

/// A datastore failure. Messages name the table (and the row or field when
/// there is one), never the connection string: it may hold a password.
#[derive(Debug, thiserror::Error)]
pub enum DatastoreError {
    /// A table name that is not a plain lower-case SQL identifier.
    #[error("table name {name:?}: {reason}")]
    TableName { name: String, reason: &'static str },
    /// The connection URL does not parse (its text is not repeated here).
    #[error("datastore URL: {0}")]
    Url(String),
    #[error("datastore connection pool: {0}")]
    Pool(String),
    /// The table has not been created (`wasmlet datastore init`).
    #[error(
        "table {table} does not exist: create it with `wasmlet datastore init --table {table}`"
    )]
    NoTable { table: String },
    #[error("table {table}: {source}")]
    Sql {
        table: String,
        #[source]
        source: tokio_postgres::Error,
    },
}

impl DatastoreError {
    /// Wraps a driver error, recognising a missing table.
    pub(crate) fn sql(table: &str, source: tokio_postgres::Error) -> DatastoreError {
        if source.code() == Some(&tokio_postgres::error::SqlState::UNDEFINED_TABLE) {
            return DatastoreError::NoTable {
                table: table.to_string(),
            };
        }
        DatastoreError::Sql {
            table: table.to_string(),
            source,
        }
    }
}
