//! The datastore against a real PostgreSQL (a private server per test, see
//! `wasmlet_e2e::postgres`).

use std::sync::Mutex;
use std::time::Duration;

use serde_json::json;
use wasmlet_e2e::postgres::Postgres;

use super::watch::{Sink, scan};
use super::*;

async fn store() -> (Postgres, Datastore, Table) {
    let pg = Postgres::start().await.expect("a private PostgreSQL");
    let store = Datastore::new(&pg.url(), 2).unwrap();
    let table = Table::new("items").unwrap();
    schema::init(&store, &table).await.unwrap();
    // Twice: the migration is idempotent.
    schema::init(&store, &table).await.unwrap();
    (pg, store, table)
}

#[tokio::test]
async fn a_status_write_for_an_old_revision_is_a_no_op() {
    let (_pg, store, table) = store().await;
    let db = store.client().await.unwrap();
    db.execute(
        "INSERT INTO items (id, spec) VALUES ('a', '{\"n\": 1}')",
        &[],
    )
    .await
    .unwrap();
    let seen = store.get(&table, "a").await.unwrap().unwrap();
    db.execute("UPDATE items SET spec = '{\"n\": 2}' WHERE id = 'a'", &[])
        .await
        .unwrap();
    let status = json!({"lastReconciledRevision": seen.revision});
    let written = store
        .write_status(&table, "a", seen.revision, &status, None)
        .await
        .unwrap();
    assert!(!written, "a status computed for an old spec must not land");
    let now = store.get(&table, "a").await.unwrap().unwrap();
    assert_eq!(now.status, json!({}));
    assert!(now.revision > seen.revision);

    let status = json!({"lastReconciledRevision": now.revision});
    let written = store
        .write_status(
            &table,
            "a",
            now.revision,
            &status,
            Some(Duration::from_secs(60)),
        )
        .await
        .unwrap();
    assert!(written);
    let after = store.get(&table, "a").await.unwrap().unwrap();
    assert_eq!(after.status, status);
    assert_eq!(
        after.revision, now.revision,
        "a status write keeps the revision"
    );
    let due = after.due_in.unwrap();
    assert!((55.0..=60.0).contains(&due), "{due}");
    assert!(store.get(&table, "nope").await.unwrap().is_none());
}

#[derive(Default)]
struct Collect(Mutex<Vec<RowState>>);

impl Sink for Collect {
    fn notified(&self, _id: String) {}
    fn scanned(&self, row: &RowState) {
        self.0.lock().unwrap().push(row.clone());
    }
}

#[tokio::test]
async fn a_scan_pages_through_every_row_once() {
    let (_pg, store, table) = store().await;
    let db = store.client().await.unwrap();
    db.batch_execute(
        "INSERT INTO items (id) SELECT 'r' || i FROM generate_series(1, 2500) i; \
         UPDATE items SET status = jsonb_build_object('lastReconciledRevision', revision) \
           WHERE id LIKE 'r1%'; \
         UPDATE items SET status = '{\"lastReconciledRevision\": \"junk\"}', \
           reconcile_at = now() + interval '1 hour' WHERE id = 'r2';",
    )
    .await
    .unwrap();
    let sink = Collect::default();
    let found = scan(&store, &table, &sink).await.unwrap();
    let rows = sink.0.into_inner().unwrap();
    assert_eq!(found.rows, 2500);
    let mut ids: Vec<&str> = rows.iter().map(|r| r.id.as_str()).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 2500, "every row once");
    let up_to_date = rows.iter().filter(|r| r.up_to_date()).count();
    assert_eq!(found.changed, 2500 - up_to_date);
    // r1, r10..r19, r100..r199, r1000..r1999
    assert_eq!(up_to_date, 1 + 10 + 100 + 1000);
    let r2 = rows.iter().find(|r| r.id == "r2").unwrap();
    assert_eq!(r2.last_reconciled, None, "a non-integer is no revision");
    assert!(r2.due_in.unwrap() > 3500.0);
}

#[tokio::test]
async fn a_missing_table_says_how_to_create_it() {
    let (_pg, store, _) = store().await;
    let e = store
        .get(&Table::new("absent").unwrap(), "a")
        .await
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "table absent does not exist: create it with `wasmlet datastore init --table absent`"
    );
}

/// Row `id`'s (finalizers, deleted_at set), if it exists, read by hand.
async fn marks(db: &tokio_postgres::Client, id: &str) -> Option<(Vec<String>, bool)> {
    db.query_opt(
        "SELECT finalizers, deleted_at IS NOT NULL FROM items WHERE id = $1",
        &[&id],
    )
    .await
    .unwrap()
    .map(|r| (r.get(0), r.get(1)))
}

#[tokio::test]
async fn a_table_made_before_finalizers_gains_them() {
    let pg = Postgres::start().await.expect("a private PostgreSQL");
    let store = Datastore::new(&pg.url(), 2).unwrap();
    let table = Table::new("items").unwrap();
    let db = store.client().await.unwrap();
    // The layout an older host created, with a row in it.
    db.batch_execute(
        "CREATE SEQUENCE items_revision_seq;
         CREATE TABLE items (id text PRIMARY KEY, spec jsonb NOT NULL DEFAULT '{}',
             revision bigint NOT NULL DEFAULT 0, status jsonb NOT NULL DEFAULT '{}',
             reconcile_at timestamptz, created_at timestamptz NOT NULL DEFAULT now(),
             updated_at timestamptz NOT NULL DEFAULT now());
         INSERT INTO items (id, spec) VALUES ('old', '{\"n\": 1}');",
    )
    .await
    .unwrap();
    schema::init(&store, &table).await.unwrap();
    schema::init(&store, &table).await.unwrap();
    assert_eq!(marks(&db, "old").await, Some((vec![], false)));
    let row = store.get(&table, "old").await.unwrap().unwrap();
    assert_eq!(row.spec, json!({"n": 1}));
    // No finalizers: a delete is a delete.
    assert_eq!(
        db.execute("DELETE FROM items WHERE id = 'old'", &[])
            .await
            .unwrap(),
        1
    );
    assert_eq!(marks(&db, "old").await, None);
}

#[tokio::test]
async fn a_delete_only_marks_a_row_with_finalizers_until_the_last_goes() {
    let (pg, store, table) = store().await;
    // The application's connection, outside the pool (the lock and the scan
    // take both of its slots).
    let db = pg.client().await.unwrap();
    db.execute("INSERT INTO items (id) VALUES ('a'), ('b')", &[])
        .await
        .unwrap();
    let lock = store.try_lock_row(&table, "a").await.unwrap().unwrap();
    assert!(lock.add_finalizer("a", "x.io/host").await.unwrap());
    // Twice is once.
    assert!(lock.add_finalizer("a", "x.io/host").await.unwrap());
    db.execute(
        "UPDATE items SET finalizers = finalizers || '{x.io/other}' WHERE id = 'a'",
        &[],
    )
    .await
    .unwrap();
    let live = lock.get("a").await.unwrap().unwrap();
    assert_eq!(live.finalizers, ["x.io/host", "x.io/other"]);
    assert_eq!(live.deleted_at, None);

    // The application's plain DELETE: the row stays, marked.
    let n = db
        .execute("DELETE FROM items WHERE id = 'a'", &[])
        .await
        .unwrap();
    assert_eq!(n, 0, "the delete is cancelled while finalizers remain");
    let marked = lock.get("a").await.unwrap().unwrap();
    let at = marked.deleted_at.clone().expect("deleted_at set");
    assert!(at.ends_with('Z') && at.contains('T'), "RFC 3339: {at}");
    assert_eq!(marked.revision, live.revision, "marking keeps the revision");
    // Never taken back, never moved by a second delete.
    db.execute("UPDATE items SET deleted_at = NULL WHERE id = 'a'", &[])
        .await
        .unwrap();
    db.execute("DELETE FROM items WHERE id = 'a'", &[])
        .await
        .unwrap();
    assert_eq!(lock.get("a").await.unwrap().unwrap().deleted_at, Some(at));
    // A row being deleted takes no new finalizer.
    assert!(!lock.add_finalizer("a", "x.io/late").await.unwrap());
    let sink = Collect::default();
    scan(&store, &table, &sink).await.unwrap();
    let deleting: Vec<(String, bool)> = sink
        .0
        .into_inner()
        .unwrap()
        .into_iter()
        .map(|r| (r.id, r.deleting))
        .collect();
    assert_eq!(deleting, [("a".into(), true), ("b".into(), false)]);

    // Finalize saw an older spec: nothing is removed.
    db.execute("UPDATE items SET spec = '{\"n\": 2}' WHERE id = 'a'", &[])
        .await
        .unwrap();
    assert_eq!(
        lock.remove_finalizer("a", marked.revision, "x.io/host")
            .await
            .unwrap(),
        rows::Removed::Stale
    );
    let revision = lock.get("a").await.unwrap().unwrap().revision;
    assert_eq!(
        lock.remove_finalizer("a", revision, "x.io/host")
            .await
            .unwrap(),
        rows::Removed::Others(1)
    );
    assert_eq!(
        marks(&db, "a").await,
        Some((vec!["x.io/other".into()], true))
    );
    // The last one removed (here by hand): the row goes.
    db.execute(
        "UPDATE items SET finalizers = array_remove(finalizers, 'x.io/other') WHERE id = 'a'",
        &[],
    )
    .await
    .unwrap();
    assert_eq!(marks(&db, "a").await, None);
    lock.release().await;

    // The host's finalizer the last one: its removal deletes the row.
    let lock = store.try_lock_row(&table, "b").await.unwrap().unwrap();
    assert!(lock.add_finalizer("b", "x.io/host").await.unwrap());
    db.execute("DELETE FROM items WHERE id = 'b'", &[])
        .await
        .unwrap();
    let b = lock.get("b").await.unwrap().unwrap();
    assert_eq!(
        lock.remove_finalizer("b", b.revision, "x.io/host")
            .await
            .unwrap(),
        rows::Removed::RowDeleted
    );
    assert!(lock.get("b").await.unwrap().is_none());
    lock.release().await;
}
