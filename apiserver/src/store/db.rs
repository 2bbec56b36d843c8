//! The on-disk half of the store: SQLite in WAL mode with `synchronous=FULL`,
//! so a committed transaction survives power loss and `kill -9`.
//!
//! Tables: `objects` (current state), `log` (one row per revision, with the
//! previous state, for watch history across restarts) and `meta` (the revision
//! counter and the compaction point).

use std::collections::VecDeque;
use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use rusqlite::{Connection, OptionalExtension, params};

use super::{Event, EventType, StoreError, Stored, make_stored};

pub(crate) struct Db {
    conn: Connection,
}

pub(crate) struct Loaded {
    pub(crate) rv: u64,
    pub(crate) compacted: u64,
    pub(crate) objects: im::OrdMap<Arc<str>, Arc<Stored>>,
    pub(crate) history: VecDeque<Arc<Event>>,
}

fn internal(e: impl std::fmt::Display) -> StoreError {
    StoreError::Internal(e.to_string())
}

/// `PRAGMA auto_vacuum` value of INCREMENTAL.
const INCREMENTAL: i64 = 2;

const EVENT_ADDED: i64 = 0;
const EVENT_MODIFIED: i64 = 1;
const EVENT_DELETED: i64 = 2;

impl Db {
    pub(crate) fn open(path: &Path) -> Result<Db, StoreError> {
        let conn = Connection::open(path).map_err(internal)?;
        // Pages freed by deletes and compaction go back to the file system
        // (incremental vacuum after each compaction). A database made before
        // this setting is rebuilt once to take it.
        let auto_vacuum: i64 = conn
            .query_row("PRAGMA auto_vacuum", [], |r| r.get(0))
            .map_err(internal)?;
        if auto_vacuum != INCREMENTAL {
            conn.execute_batch("PRAGMA auto_vacuum=INCREMENTAL; VACUUM;")
                .map_err(internal)?;
        }
        conn.execute_batch(
            "PRAGMA journal_mode=WAL;
             PRAGMA journal_size_limit=67108864;
             PRAGMA synchronous=FULL;
             PRAGMA foreign_keys=OFF;
             CREATE TABLE IF NOT EXISTS objects (key TEXT PRIMARY KEY, rv INTEGER NOT NULL, value BLOB NOT NULL) WITHOUT ROWID;
             CREATE TABLE IF NOT EXISTS log (rv INTEGER PRIMARY KEY, key TEXT NOT NULL, type INTEGER NOT NULL, value BLOB NOT NULL, prev BLOB);
             CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value INTEGER NOT NULL);",
        )
        .map_err(internal)?;
        Ok(Db { conn })
    }

    fn meta(&self, name: &str) -> Result<u64, StoreError> {
        let v: Option<i64> = self
            .conn
            .query_row("SELECT value FROM meta WHERE name = ?1", [name], |r| {
                r.get(0)
            })
            .optional()
            .map_err(internal)?;
        Ok(v.unwrap_or(0) as u64)
    }

    pub(crate) fn load(&mut self) -> Result<Loaded, StoreError> {
        let rv = self.meta("rv")?;
        let compacted = self.meta("compacted")?;
        let mut objects = im::OrdMap::new();
        {
            let mut stmt = self
                .conn
                .prepare("SELECT key, rv, value FROM objects")
                .map_err(internal)?;
            let mut rows = stmt.query([]).map_err(internal)?;
            while let Some(row) = rows.next().map_err(internal)? {
                let key: String = row.get(0).map_err(internal)?;
                let orv: i64 = row.get(1).map_err(internal)?;
                let blob: Vec<u8> = row.get(2).map_err(internal)?;
                let stored = decode(Arc::from(key.as_str()), orv as u64, blob)?;
                objects.insert(stored.key.clone(), Arc::new(stored));
            }
        }
        let mut history = VecDeque::new();
        {
            let mut stmt = self
                .conn
                .prepare("SELECT rv, key, type, value, prev FROM log WHERE rv > ?1 ORDER BY rv")
                .map_err(internal)?;
            let mut rows = stmt.query([compacted as i64]).map_err(internal)?;
            while let Some(row) = rows.next().map_err(internal)? {
                let erv: i64 = row.get(0).map_err(internal)?;
                let key: String = row.get(1).map_err(internal)?;
                let ty: i64 = row.get(2).map_err(internal)?;
                let value: Vec<u8> = row.get(3).map_err(internal)?;
                let prev: Option<Vec<u8>> = row.get(4).map_err(internal)?;
                let key: Arc<str> = Arc::from(key.as_str());
                let object = Arc::new(decode(key.clone(), erv as u64, value)?);
                let prev = match prev {
                    Some(p) => {
                        let v: serde_json::Value = serde_json::from_slice(&p).map_err(internal)?;
                        let prv = rv_of(&v);
                        Some(Arc::new(make_stored(key, prv, Bytes::from(p), &v)))
                    }
                    None => None,
                };
                let kind = match ty {
                    EVENT_ADDED => EventType::Added,
                    EVENT_MODIFIED => EventType::Modified,
                    _ => EventType::Deleted,
                };
                history.push_back(Arc::new(Event {
                    rv: erv as u64,
                    kind,
                    object,
                    prev,
                }));
            }
        }
        // A log that was never compacted starts at revision 1.
        let compacted = history
            .front()
            .map(|e| e.rv - 1)
            .unwrap_or(rv)
            .min(rv)
            .max(compacted);
        Ok(Loaded {
            rv,
            compacted,
            objects,
            history,
        })
    }

    /// Writes one batch of events in one transaction and fsyncs it.
    pub(crate) fn commit(
        &mut self,
        events: &[Arc<Event>],
        rv: u64,
        compact_to: Option<u64>,
    ) -> Result<(), StoreError> {
        let tx = self.conn.transaction().map_err(internal)?;
        {
            let mut put = tx
                .prepare_cached(
                    "INSERT OR REPLACE INTO objects (key, rv, value) VALUES (?1, ?2, ?3)",
                )
                .map_err(internal)?;
            let mut del = tx
                .prepare_cached("DELETE FROM objects WHERE key = ?1")
                .map_err(internal)?;
            let mut log = tx
                .prepare_cached(
                    "INSERT INTO log (rv, key, type, value, prev) VALUES (?1, ?2, ?3, ?4, ?5)",
                )
                .map_err(internal)?;
            for e in events {
                let key: &str = &e.object.key;
                let ty = match e.kind {
                    EventType::Added => EVENT_ADDED,
                    EventType::Modified => EVENT_MODIFIED,
                    EventType::Deleted => EVENT_DELETED,
                };
                if e.kind == EventType::Deleted {
                    del.execute([key]).map_err(internal)?;
                } else {
                    put.execute(params![key, e.rv as i64, &e.object.json[..]])
                        .map_err(internal)?;
                }
                let prev = e.prev.as_ref().map(|p| &p.json[..]);
                log.execute(params![e.rv as i64, key, ty, &e.object.json[..], prev])
                    .map_err(internal)?;
            }
            tx.execute(
                "INSERT OR REPLACE INTO meta (name, value) VALUES ('rv', ?1)",
                [rv as i64],
            )
            .map_err(internal)?;
            if let Some(c) = compact_to {
                tx.execute("DELETE FROM log WHERE rv <= ?1", [c as i64])
                    .map_err(internal)?;
                tx.execute(
                    "INSERT OR REPLACE INTO meta (name, value) VALUES ('compacted', ?1)",
                    [c as i64],
                )
                .map_err(internal)?;
            }
        }
        tx.commit().map_err(internal)
    }
}

impl Db {
    /// Cuts the log at `compacted` (revisions the history no longer holds).
    pub(crate) fn compact(&mut self, compacted: u64) -> Result<(), StoreError> {
        let tx = self.conn.transaction().map_err(internal)?;
        tx.execute("DELETE FROM log WHERE rv <= ?1", [compacted as i64])
            .map_err(internal)?;
        tx.execute(
            "INSERT OR REPLACE INTO meta (name, value) VALUES ('compacted', ?1)",
            [compacted as i64],
        )
        .map_err(internal)?;
        tx.commit().map_err(internal)
    }

    /// Gives free pages and the write-ahead log back to the file system.
    pub(crate) fn give_back(&mut self) -> Result<(), StoreError> {
        // Each step of incremental_vacuum frees one page: run it to the end.
        for pragma in [
            "PRAGMA incremental_vacuum",
            "PRAGMA wal_checkpoint(TRUNCATE)",
        ] {
            let mut stmt = self.conn.prepare(pragma).map_err(internal)?;
            let mut rows = stmt.query([]).map_err(internal)?;
            while rows.next().map_err(internal)?.is_some() {}
        }
        Ok(())
    }
}

fn rv_of(v: &serde_json::Value) -> u64 {
    v.pointer("/metadata/resourceVersion")
        .and_then(|r| r.as_str())
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

fn decode(key: Arc<str>, rv: u64, blob: Vec<u8>) -> Result<Stored, StoreError> {
    let value: serde_json::Value = serde_json::from_slice(&blob).map_err(internal)?;
    Ok(make_stored(key, rv, Bytes::from(blob), &value))
}
