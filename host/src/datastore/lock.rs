//! A row's lock for one reconcile: a PostgreSQL session advisory lock, taken
//! with `pg_try_advisory_lock` on a pooled connection kept for the whole
//! reconcile. The row is read and its status and finalizers written on that
//! same connection, so the lock fences the writes: a host whose connection
//! (and so whose lock) is gone cannot write a status another host may
//! already be computing, nor remove a finalizer while another host
//! finalizes. No two hosts reconcile or finalize a row at once, whatever
//! each believes about the membership ([`super::members`]).

use std::time::Duration;

use serde_json::Value;

use super::members::stable_hash;
use super::rows::{Removed, Row, add_finalizer_on, get_on, remove_finalizer_on, write_status_on};
use super::{Datastore, DatastoreError, Table};

/// A held row lock; [`RowLock::release`] gives it back. Dropped unreleased
/// (a reconcile cancelled at shutdown), its connection is closed rather
/// than returned to the pool, which releases the lock with it.
pub(crate) struct RowLock {
    client: Option<deadpool_postgres::Object>,
    key: i64,
    table: Table,
}

/// The advisory lock key of row `id` of `table` (a collision only makes two
/// rows wait for each other).
fn key(table: &Table, id: &str) -> i64 {
    stable_hash(table.name(), id) as i64
}

impl Datastore {
    /// Row `id`'s lock, or `None` when another session holds it.
    pub(crate) async fn try_lock_row(
        &self,
        table: &Table,
        id: &str,
    ) -> Result<Option<RowLock>, DatastoreError> {
        let client = self.client().await?;
        let key = key(table, id);
        let got: bool = client
            .query_one("SELECT pg_try_advisory_lock($1)", &[&key])
            .await
            .map_err(|e| DatastoreError::sql(table.name(), e))?
            .get(0);
        Ok(got.then(|| RowLock {
            client: Some(client),
            key,
            table: table.clone(),
        }))
    }
}

impl RowLock {
    fn client(&self) -> &tokio_postgres::Client {
        self.client.as_ref().expect("held until release or drop")
    }

    /// The row, read under the lock.
    pub(crate) async fn get(&self, id: &str) -> Result<Option<Row>, DatastoreError> {
        get_on(self.client(), &self.table, id).await
    }

    /// [`Datastore::write_status`] under the lock: it fails if the lock's
    /// connection is gone.
    pub(crate) async fn write_status(
        &self,
        id: &str,
        revision: i64,
        status: &Value,
        requeue_after: Option<Duration>,
    ) -> Result<bool, DatastoreError> {
        write_status_on(
            self.client(),
            &self.table,
            id,
            revision,
            status,
            requeue_after,
        )
        .await
    }

    /// Adds the host's `finalizer` to row `id` under the lock (see
    /// `add_finalizer_on`): `false` when the row is gone or being deleted.
    pub(crate) async fn add_finalizer(
        &self,
        id: &str,
        finalizer: &str,
    ) -> Result<bool, DatastoreError> {
        add_finalizer_on(self.client(), &self.table, id, finalizer).await
    }

    /// Removes the host's `finalizer` from the marked row `id` under the
    /// lock, if it is still at `revision` (see `remove_finalizer_on`).
    pub(crate) async fn remove_finalizer(
        &self,
        id: &str,
        revision: i64,
        finalizer: &str,
    ) -> Result<Removed, DatastoreError> {
        remove_finalizer_on(self.client(), &self.table, id, revision, finalizer).await
    }

    /// Unlocks and returns the connection to the pool (or closes it, if the
    /// unlock fails: the lock must not stay with a pooled connection).
    pub(crate) async fn release(mut self) {
        let Some(client) = self.client.take() else {
            return;
        };
        match client
            .execute("SELECT pg_advisory_unlock($1)", &[&self.key])
            .await
        {
            Ok(_) => drop(client),
            Err(e) => {
                tracing::warn!(table = %self.table, error = %e, "datastore: cannot unlock a row; closing its connection");
                drop(deadpool_postgres::Object::take(client));
            }
        }
    }
}

impl Drop for RowLock {
    fn drop(&mut self) {
        if let Some(client) = self.client.take() {
            drop(deadpool_postgres::Object::take(client));
        }
    }
}
