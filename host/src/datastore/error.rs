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
    /// No connection: the server is down, refused us, or failed TLS
    /// verification (the hint says what to check).
    #[error("connecting to the datastore: {source}{hint}")]
    Connect {
        #[source]
        source: tokio_postgres::Error,
        hint: &'static str,
    },
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
    /// A failed connection, with a hint when TLS verification refused it.
    pub(crate) fn connect(source: tokio_postgres::Error) -> DatastoreError {
        let mut chain =
            std::iter::successors(Some(&source as &(dyn std::error::Error + 'static)), |e| {
                e.source()
            });
        let hint = if chain.any(|e| e.to_string().contains("invalid peer certificate")) {
            " (the server's certificate must chain to the CA in the URL's sslrootcert, or the system's roots without one, and name the host connected to: sslmode=verify-full)"
        } else {
            ""
        };
        DatastoreError::Connect { source, hint }
    }

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
