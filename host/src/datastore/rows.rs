//! Reading rows and writing their status back: the page scan the watcher
//! classifies, the full row a reconcile reads, the status write guarded by
//! the revision it was computed for, and the host's finalizer writes.

use std::time::Duration;

use serde_json::{Value, json};

use super::{Datastore, DatastoreError, Table};

/// The status field that says which revision the host last reconciled.
pub(crate) const LAST_RECONCILED: &str = "lastReconciledRevision";

/// What a scan sees of a row: enough to give it its priority.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct RowState {
    pub(crate) id: String,
    pub(crate) revision: i64,
    /// `status.lastReconciledRevision`, if it is an integer.
    pub(crate) last_reconciled: Option<i64>,
    /// Until `reconcile_at`, by the server's clock (negative: past).
    pub(crate) due_in: Option<f64>,
    /// `deleted_at` is set: deleted, held by its finalizers.
    pub(crate) deleting: bool,
}

impl RowState {
    /// Whether the row's current revision has been reconciled.
    pub(crate) fn up_to_date(&self) -> bool {
        self.last_reconciled == Some(self.revision)
    }
}

/// A whole row, as a reconcile reads it.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Row {
    pub(crate) id: String,
    pub(crate) spec: Value,
    pub(crate) revision: i64,
    pub(crate) status: Value,
    /// Until `reconcile_at` (negative: past); `None`: not set.
    pub(crate) due_in: Option<f64>,
    /// What must happen before the row may go (`metadata.finalizers`).
    pub(crate) finalizers: Vec<String>,
    /// When a DELETE marked the row, RFC 3339 in UTC
    /// (`metadata.deletionTimestamp`); `None`: not deleted.
    pub(crate) deleted_at: Option<String>,
}

impl Row {
    /// The row as the guest sees it: a Kubernetes-shaped document with
    /// `metadata.name` = id and `metadata.generation` = revision, so a
    /// reconciler reads it as it reads a custom resource. `finalizers` and
    /// `deletionTimestamp` appear only when set, as the API server shows them.
    pub(crate) fn document(&self, api_version: &str, kind: &str) -> Value {
        let mut doc = serde_json::Map::new();
        if !api_version.is_empty() {
            doc.insert("apiVersion".into(), json!(api_version));
        }
        if !kind.is_empty() {
            doc.insert("kind".into(), json!(kind));
        }
        let mut metadata = json!({
            "name": self.id,
            "generation": self.revision,
            "resourceVersion": self.revision.to_string(),
        });
        if !self.finalizers.is_empty() {
            metadata["finalizers"] = json!(self.finalizers);
        }
        if let Some(at) = &self.deleted_at {
            metadata["deletionTimestamp"] = json!(at);
        }
        doc.insert("metadata".into(), metadata);
        doc.insert("spec".into(), self.spec.clone());
        doc.insert("status".into(), self.status.clone());
        Value::Object(doc)
    }
}

/// Rows per page of a scan: big enough to be cheap, small enough that a
/// scan of a large table never holds much in memory or a long query open.
pub(crate) const PAGE: i64 = 1000;

impl Datastore {
    /// One page of `table` in id order, after `after` (keyset pagination: no
    /// OFFSET, so every page costs the same however deep the scan is).
    pub(crate) async fn scan_page(
        &self,
        table: &Table,
        after: Option<&str>,
        limit: i64,
    ) -> Result<Vec<RowState>, DatastoreError> {
        let client = self.client().await?;
        let sql = format!(
            "SELECT id, revision, status->'{LAST_RECONCILED}', \
             EXTRACT(EPOCH FROM reconcile_at - now())::float8, deleted_at IS NOT NULL \
             FROM {} WHERE id > $1 ORDER BY id LIMIT $2",
            table.ident()
        );
        let rows = client
            .query(&sql, &[&after.unwrap_or(""), &limit])
            .await
            .map_err(|e| DatastoreError::sql(table.name(), e))?;
        Ok(rows
            .iter()
            .map(|r| RowState {
                id: r.get(0),
                revision: r.get(1),
                last_reconciled: r.get::<_, Option<Value>>(2).and_then(|v| v.as_i64()),
                due_in: r.get(3),
                deleting: r.get(4),
            })
            .collect())
    }

    #[cfg(test)]
    /// The row `id`, if it exists.
    pub(crate) async fn get(&self, table: &Table, id: &str) -> Result<Option<Row>, DatastoreError> {
        let client = self.client().await?;
        get_on(&client, table, id).await
    }

    #[cfg(test)]
    /// Writes `status` (and `reconcile_at`: now + `requeue_after`, or none)
    /// to row `id` only if it is still at `revision`. `false`: the spec
    /// changed (or the row went) since it was read, and nothing was written.
    pub(crate) async fn write_status(
        &self,
        table: &Table,
        id: &str,
        revision: i64,
        status: &Value,
        requeue_after: Option<Duration>,
    ) -> Result<bool, DatastoreError> {
        let client = self.client().await?;
        write_status_on(&client, table, id, revision, status, requeue_after).await
    }
}

/// [`Datastore::get`] on `client` (a row lock's connection).
pub(super) async fn get_on(
    client: &tokio_postgres::Client,
    table: &Table,
    id: &str,
) -> Result<Option<Row>, DatastoreError> {
    let sql = format!(
        "SELECT id, spec, revision, status, \
         EXTRACT(EPOCH FROM reconcile_at - now())::float8, finalizers, \
         to_char(deleted_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"') \
         FROM {} WHERE id = $1",
        table.ident()
    );
    let row = client
        .query_opt(&sql, &[&id])
        .await
        .map_err(|e| DatastoreError::sql(table.name(), e))?;
    Ok(row.map(|r| Row {
        id: r.get(0),
        spec: r.get(1),
        revision: r.get(2),
        status: r.get(3),
        due_in: r.get(4),
        finalizers: r.get(5),
        deleted_at: r.get(6),
    }))
}

/// [`Datastore::write_status`] on `client` (a row lock's connection).
pub(super) async fn write_status_on(
    client: &tokio_postgres::Client,
    table: &Table,
    id: &str,
    revision: i64,
    status: &Value,
    requeue_after: Option<Duration>,
) -> Result<bool, DatastoreError> {
    let sql = format!(
        "UPDATE {} SET status = $3, reconcile_at = now() + make_interval(secs => $4) \
         WHERE id = $1 AND revision = $2",
        table.ident()
    );
    // NULL seconds make a NULL reconcile_at: "no time asked for".
    let secs = requeue_after.map(|d| d.as_secs_f64());
    let n = client
        .execute(&sql, &[&id, &revision, status, &secs])
        .await
        .map_err(|e| DatastoreError::sql(table.name(), e))?;
    Ok(n == 1)
}

/// What removing a finalizer from a marked row did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Removed {
    /// Gone from the row; others remain, so the row stays (marked).
    Others(usize),
    /// It was the last one: the row is deleted (the table's trigger carries
    /// out the DELETE that marked it, in the same statement).
    RowDeleted,
    /// The row is no longer at the revision finalize saw (its spec changed,
    /// or it went): nothing was written.
    Stale,
}

/// Adds `finalizer` to row `id` unless it carries it already, as the
/// Kubernetes path adds its finalizer before the first reconcile. A row
/// being deleted takes no new finalizer (as the API server refuses one):
/// `false` then, or when the row is gone. Keeps the revision and notifies
/// nobody (the triggers see no spec change).
pub(super) async fn add_finalizer_on(
    client: &tokio_postgres::Client,
    table: &Table,
    id: &str,
    finalizer: &str,
) -> Result<bool, DatastoreError> {
    let sql = format!(
        "UPDATE {} SET finalizers = CASE WHEN $2 = ANY(finalizers) THEN finalizers \
         ELSE array_append(finalizers, $2) END \
         WHERE id = $1 AND deleted_at IS NULL",
        table.ident()
    );
    let n = client
        .execute(&sql, &[&id, &finalizer])
        .await
        .map_err(|e| DatastoreError::sql(table.name(), e))?;
    Ok(n == 1)
}

/// Removes `finalizer` from the marked row `id` if it is still at
/// `revision` (what finalize saw: a spec changed meanwhile is finalized
/// again, as a stale resourceVersion fails the Kubernetes path's patch).
pub(super) async fn remove_finalizer_on(
    client: &tokio_postgres::Client,
    table: &Table,
    id: &str,
    revision: i64,
    finalizer: &str,
) -> Result<Removed, DatastoreError> {
    let sql = format!(
        "UPDATE {} SET finalizers = array_remove(finalizers, $3) \
         WHERE id = $1 AND revision = $2 AND deleted_at IS NOT NULL \
         RETURNING cardinality(finalizers)",
        table.ident()
    );
    let left = client
        .query_opt(&sql, &[&id, &revision, &finalizer])
        .await
        .map_err(|e| DatastoreError::sql(table.name(), e))?;
    Ok(match left.map(|r| r.get::<_, i32>(0)) {
        None => Removed::Stale,
        Some(0) => Removed::RowDeleted,
        Some(n) => Removed::Others(n as usize),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_reads_like_a_custom_resource() {
        let row = Row {
            id: "p1".into(),
            spec: json!({"replicas": 2}),
            revision: 7,
            status: json!({}),
            due_in: None,
            finalizers: vec![],
            deleted_at: None,
        };
        let d = row.document("example.com/v1", "Project");
        assert_eq!(d["metadata"]["name"], "p1");
        assert_eq!(d["metadata"]["generation"], 7);
        assert_eq!(d["kind"], "Project");
        assert_eq!(d["spec"]["replicas"], 2);
        assert!(row.document("", "").get("apiVersion").is_none());
        // Unset, they are absent, as the API server leaves them out.
        assert!(d["metadata"].get("finalizers").is_none());
        assert!(d["metadata"].get("deletionTimestamp").is_none());
    }

    #[test]
    fn a_deleted_row_reads_like_a_custom_resource_being_deleted() {
        let row = Row {
            id: "p1".into(),
            spec: json!({}),
            revision: 7,
            status: json!({}),
            due_in: None,
            finalizers: vec!["example.com/cleanup".into()],
            deleted_at: Some("2025-01-02T03:04:05Z".into()),
        };
        let d = row.document("example.com/v1", "Project");
        assert_eq!(d["metadata"]["finalizers"], json!(["example.com/cleanup"]));
        assert_eq!(d["metadata"]["deletionTimestamp"], "2025-01-02T03:04:05Z");
    }

    #[test]
    fn up_to_date_means_the_current_revision_was_reconciled() {
        let mut s = RowState {
            id: "a".into(),
            revision: 3,
            last_reconciled: Some(3),
            due_in: None,
            deleting: false,
        };
        assert!(s.up_to_date());
        s.last_reconciled = Some(2);
        assert!(!s.up_to_date());
        s.last_reconciled = None;
        assert!(!s.up_to_date());
    }
}
