//! Following a table: LISTEN on its channel, scan it in pages, scan again
//! every `resync` and after every reconnect, reconnect with back-off.
//!
//! Nothing is lost across a dropped connection: LISTEN is in place before
//! each scan starts, so a change is either seen by the scan or notified
//! after it; a NOTIFY sent while no connection listened is caught by the
//! scan that follows the reconnect.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use tokio::sync::{Notify, mpsc};
use tokio_postgres::AsyncMessage;

use super::rows::PAGE;
use super::{Datastore, DatastoreError, RowState, Table};

/// What the watcher reports to (a table controller's queue).
pub(crate) trait Sink: Send + Sync {
    /// A NOTIFY named row `id` (inserted, changed or deleted).
    fn notified(&self, id: String);
    /// A scan found `row`.
    fn scanned(&self, row: &RowState);
}

#[derive(Clone, Debug)]
pub(crate) struct WatchConfig {
    /// A full scan this often (besides the one after every (re)connect).
    pub(crate) resync: Duration,
    /// First wait before reconnecting (doubling up to `backoff_max`). The
    /// first reconnect waits too, so a failing database is not hammered.
    pub(crate) backoff_first: Duration,
    pub(crate) backoff_max: Duration,
    /// How often the LISTEN connection is checked with an empty query, so a
    /// silently dead connection is noticed.
    pub(crate) heartbeat: Duration,
    /// Signalled when the rows this host owns may have changed (the member
    /// list did): the table is scanned again.
    pub(crate) rescan: Option<Arc<Notify>>,
}

impl Default for WatchConfig {
    fn default() -> Self {
        WatchConfig {
            resync: Duration::from_secs(600),
            backoff_first: Duration::from_secs(1),
            backoff_max: Duration::from_secs(30),
            heartbeat: Duration::from_secs(10),
            rescan: None,
        }
    }
}

/// The application_name of LISTEN connections (what `pg_stat_activity`
/// shows for them).
pub(crate) const LISTEN_APPLICATION: &str = "wasmlet-listen";

/// Follows `table` until the future is dropped.
pub(crate) async fn watch(
    store: Datastore,
    table: Table,
    config: WatchConfig,
    sink: Arc<dyn Sink>,
) {
    let mut backoff = config.backoff_first;
    let mut first = true;
    let mut again = false;
    loop {
        if again {
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(config.backoff_max);
        }
        again = true;
        let (client, mut notes) = match listen(&store, &table).await {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!(table = %table, error = %e, retry_in = ?backoff, "datastore: cannot listen; retrying");
                continue;
            }
        };
        match scan(&store, &table, &*sink).await {
            Ok(found) => {
                tracing::info!(table = %table, rows = found.rows, changed = found.changed, first, "datastore: listening, table scanned");
                first = false;
                backoff = config.backoff_first;
            }
            Err(e) => {
                tracing::warn!(table = %table, error = %e, retry_in = ?backoff, "datastore: scan failed; reconnecting");
                continue;
            }
        }
        let start = tokio::time::Instant::now();
        let mut resync = tokio::time::interval_at(start + config.resync, config.resync);
        resync.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        let mut heartbeat = tokio::time::interval_at(start + config.heartbeat, config.heartbeat);
        loop {
            tokio::select! {
                note = notes.recv() => match note {
                    Some(id) => sink.notified(id),
                    None => {
                        tracing::warn!(table = %table, retry_in = ?backoff, "datastore: LISTEN connection lost; reconnecting");
                        break;
                    }
                },
                _ = rescan_asked(&config.rescan) => match scan(&store, &table, &*sink).await {
                    Ok(found) => tracing::info!(table = %table, rows = found.rows, "datastore: members changed, table scanned"),
                    Err(e) => tracing::warn!(table = %table, error = %e, "datastore: rescan failed"),
                },
                _ = resync.tick() => match scan(&store, &table, &*sink).await {
                    Ok(found) => tracing::debug!(table = %table, rows = found.rows, changed = found.changed, "datastore: resync"),
                    // The next tick (or reconnect) scans again; notifications go on.
                    Err(e) => tracing::warn!(table = %table, error = %e, "datastore: resync failed"),
                },
                _ = heartbeat.tick() => {
                    if let Err(e) = client.simple_query("").await {
                        tracing::warn!(table = %table, error = %e, "datastore: LISTEN connection dead; reconnecting");
                        break;
                    }
                }
            }
        }
    }
}

/// Resolves when `rescan` is signalled; never without one.
async fn rescan_asked(rescan: &Option<Arc<Notify>>) {
    match rescan {
        Some(n) => n.notified().await,
        None => std::future::pending().await,
    }
}

/// What a scan found.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Found {
    pub(crate) rows: usize,
    /// Rows whose revision was not reconciled yet.
    pub(crate) changed: usize,
}

/// Reports every row of `table` to `sink`, a page at a time.
pub(crate) async fn scan(
    store: &Datastore,
    table: &Table,
    sink: &dyn Sink,
) -> Result<Found, DatastoreError> {
    let mut found = Found::default();
    let mut after: Option<String> = None;
    loop {
        let page = store.scan_page(table, after.as_deref(), PAGE).await?;
        for row in &page {
            found.rows += 1;
            found.changed += usize::from(!row.up_to_date());
            sink.scanned(row);
        }
        if (page.len() as i64) < PAGE {
            return Ok(found);
        }
        after = page.last().map(|r| r.id.clone());
    }
}

/// A connection of its own that LISTENs on the table's channel: its
/// notifications arrive on the receiver, which closes when the connection
/// ends. The client must be kept: dropping it closes the connection.
async fn listen(
    store: &Datastore,
    table: &Table,
) -> Result<(tokio_postgres::Client, mpsc::UnboundedReceiver<String>), DatastoreError> {
    let mut config = store.config().clone();
    config.application_name(LISTEN_APPLICATION);
    let sql = |e| DatastoreError::sql(table.name(), e);
    let (client, mut connection) = config
        .connect(store.tls())
        .await
        .map_err(DatastoreError::connect)?;
    let (tx, rx) = mpsc::unbounded_channel();
    let name = table.to_string();
    tokio::spawn(async move {
        let mut messages = Box::pin(futures::stream::poll_fn(move |cx| {
            connection.poll_message(cx)
        }));
        while let Some(message) = messages.next().await {
            match message {
                Ok(AsyncMessage::Notification(n)) => {
                    if tx.send(n.payload().to_string()).is_err() {
                        return;
                    }
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::debug!(table = %name, error = %e, "datastore: LISTEN connection ended");
                    return;
                }
            }
        }
    });
    client
        .batch_execute(&format!("LISTEN \"{}\"", table.channel()))
        .await
        .map_err(sql)?;
    Ok((client, rx))
}
