//! PostgreSQL as a source of objects for reconcilers (issue 14): rows of a
//! table are documents a reconciler keeps in line, as it keeps custom
//! resources in line, with the same workqueue lanes, guest contract and
//! host-owned status.
//!
//! # Schema
//!
//! `wasmlet datastore init --table NAME` creates (idempotently, see
//! [`schema`]):
//!
//! | column | type | meaning |
//! |---|---|---|
//! | `id` | `text` primary key | the row's name (`metadata.name` for the guest), 1-253 bytes |
//! | `spec` | `jsonb` | what the row asks for; written by the application |
//! | `revision` | `bigint` | set by a trigger from the sequence `NAME_revision_seq` on insert and on every change of `spec` (never by hand): it only grows |
//! | `status` | `jsonb` | written by the host only: the guest's status, `conditions` (with `Ready`), `observedGeneration` (the revision it saw) and `lastReconciledRevision` |
//! | `reconcile_at` | `timestamptz` null | when the row is due again (the guest's `requeue-after`) |
//! | `created_at`, `updated_at` | `timestamptz` | for people; `updated_at` moves with the revision |
//! | `finalizers` | `text[]`, default `{}` | what must happen before the row may go (`metadata.finalizers`); the host adds its plugin's `finalizer` before the first reconcile |
//! | `deleted_at` | `timestamptz` null | when a `DELETE` marked the row (`metadata.deletionTimestamp`); set by the delete trigger, never cleared |
//!
//! A trigger `NOTIFY`s channel `NAME_changes` with the row's id on insert,
//! delete, every revision change and when `deleted_at` becomes set; the
//! host's own writes (status, finalizers) keep the revision and notify
//! nobody. A table made by an older host gains `finalizers` and `deleted_at`
//! when `init` runs again.
//!
//! # Finalizers
//!
//! The application deletes rows with a plain `DELETE FROM NAME WHERE id =
//! ...`. A `BEFORE DELETE` trigger lets a row without finalizers go as
//! before; a row that still has some is only marked (`deleted_at = now()`,
//! the DELETE reports 0 rows) and stays, readable, until its finalizers are
//! gone. The host calls the guest's `finalize` for a marked row carrying its
//! plugin's finalizer, then removes that finalizer (under the row's lock,
//! guarded by the revision `finalize` saw); when the last finalizer of a
//! marked row goes, by the host or by hand, a trigger deletes the row in the
//! same statement. A failed `finalize` keeps the row and is retried with
//! back-off. `TRUNCATE` fires no row triggers, so a statement trigger
//! refuses it while any row has a finalizer.
//!
//! # Priorities
//!
//! A marked row (`deleted_at` set) → high; `revision` ≠
//! `status.lastReconciledRevision` → high; otherwise low
//! (re-verified at the plugin's low-lane rate); an up-to-date row whose
//! `reconcile_at` is in the future → scheduled for then. Every scan (the
//! first, one every `--resync-seconds`, one after every reconnect) applies
//! that rule; a NOTIFY queues its row high.
//!
//! # Writes
//!
//! The host writes `status` and `reconcile_at` with `UPDATE ... WHERE id = $1
//! AND revision = $seen`: a spec change since the row was read makes the write
//! a no-op and queues the row high again. Its finalizer is added to live rows
//! only (`WHERE deleted_at IS NULL`: a row being deleted takes no new
//! finalizer) and removed from marked ones with the same revision guard. `lastReconciledRevision` becomes the
//! revision seen when the guest succeeded or failed terminally (nothing more
//! to try at that revision); a retryable failure leaves it, so the row stays
//! high priority until it converges.
//!
//! # Security
//!
//! The connection string comes from the host (`--datastore-url` or
//! `WASMLET_DATASTORE_URL`), never from a plugin, and is never logged; a
//! plugin names only its table, which must be a plain identifier ([`Table`]).
//!
//! # Scale-out
//!
//! Several hosts may reconcile one table: each renews a row in `NAME_members`
//! every 2 s, members silent for 10 s are gone, and each host queues only
//! the rows rendezvous hashing gives it among the live members, scanning
//! again whenever the member list changes ([`members`]). A row is reconciled
//! or finalized only under its advisory lock, and its status and finalizers
//! are written on the lock's connection ([`lock`]): no row is reconciled or
//! finalized by two hosts at once, and a host that lost its connection
//! cannot write. Kubernetes-sourced plugins keep Lease-based leader
//! election; table controllers need none.
//!
//! Layout: [`table`] (checked names), [`schema`] (the migration), [`rows`]
//! (reads, the guarded status write, the finalizer writes), [`watch`]
//! (LISTEN/NOTIFY, scans, reconnects), [`members`] and [`lock`] (scale-out),
//! [`error`].

pub(crate) mod error;
pub(crate) mod lock;
pub(crate) mod members;
pub(crate) mod rows;
pub(crate) mod schema;
pub(crate) mod table;
pub(crate) mod tls;
pub(crate) mod watch;

use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};

pub(crate) use error::DatastoreError;
pub(crate) use rows::{Row, RowState};
pub(crate) use table::Table;

/// The host's connection to its datastore: a pool for reads and writes and
/// the settings to open each table's LISTEN connection. Cheap to clone.
#[derive(Clone)]
pub struct Datastore {
    pool: Pool,
    config: tokio_postgres::Config,
    tls: tls::RustlsConnect,
}

impl std::fmt::Debug for Datastore {
    // The URL may hold a password: show where, never how.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Datastore")
            .field("dbname", &self.config.get_dbname())
            .field("max_connections", &self.pool.status().max_size)
            .finish_non_exhaustive()
    }
}

/// Waits of the pool: a datastore that does not answer fails a reconcile
/// (which is retried) instead of hanging a worker.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
const WAIT_TIMEOUT: Duration = Duration::from_secs(30);

impl Datastore {
    /// A pool of at most `max_connections` for `url` (a `postgres://` URL or
    /// a `key=value` string). Connects lazily: nothing is opened yet (a
    /// missing `sslrootcert` file fails now). TCP connections use TLS,
    /// verify-full, unless the URL says `sslmode=disable` ([`tls`]); Unix
    /// sockets are plain, as libpq's.
    pub(crate) fn new(url: &str, max_connections: usize) -> Result<Datastore, DatastoreError> {
        let (settings, url) = tls::TlsSettings::split(url)?;
        let mut config: tokio_postgres::Config =
            url.parse().map_err(|e: tokio_postgres::Error| {
                // The driver's message does not echo the URL.
                DatastoreError::Url(e.to_string())
            })?;
        let local = config
            .get_hosts()
            .iter()
            .all(|h| !matches!(h, tokio_postgres::config::Host::Tcp(_)));
        config.ssl_mode(if settings.mode == tls::Mode::Disable || local {
            tokio_postgres::config::SslMode::Disable
        } else {
            tokio_postgres::config::SslMode::Require
        });
        let tls = settings.connector()?;
        if config.get_application_name().is_none() {
            config.application_name("wasmlet");
        }
        config.connect_timeout(CONNECT_TIMEOUT);
        let manager = Manager::from_config(
            config.clone(),
            tls.clone(),
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(max_connections.max(1))
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(WAIT_TIMEOUT))
            .create_timeout(Some(CONNECT_TIMEOUT))
            .build()
            .map_err(|e| DatastoreError::Pool(e.to_string()))?;
        Ok(Datastore { pool, config, tls })
    }

    /// A pooled connection.
    pub(crate) async fn client(&self) -> Result<deadpool_postgres::Object, DatastoreError> {
        self.pool.get().await.map_err(|e| match e {
            deadpool_postgres::PoolError::Backend(e) => DatastoreError::connect(e),
            other => DatastoreError::Pool(other.to_string()),
        })
    }

    /// The settings a dedicated (LISTEN) connection uses.
    pub(crate) fn config(&self) -> &tokio_postgres::Config {
        &self.config
    }

    /// The TLS connector a dedicated connection uses (a plain one never
    /// calls it: its config says `sslmode=disable`).
    pub(crate) fn tls(&self) -> tls::RustlsConnect {
        self.tls.clone()
    }
}

#[cfg(test)]
mod tests;
