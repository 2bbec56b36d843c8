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
