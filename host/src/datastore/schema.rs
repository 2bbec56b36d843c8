//! The migration `wasmlet datastore init` runs: the table, its revision
//! trigger and its NOTIFY trigger (the layout is documented in the module
//! docs of [`crate::datastore`]). Idempotent: running it again changes
//! nothing but the functions' bodies, so a newer host can update them.

use super::{Datastore, DatastoreError, Table};

/// Serialises concurrent migrations (two hosts starting at once would
/// otherwise race on `CREATE OR REPLACE FUNCTION`). Any constant works; this
/// one spells "wasmlet" in ASCII.
const MIGRATION_LOCK: i64 = 0x0077_6173_6d6c_6574;

/// The statements that create `table` and its triggers.
pub fn migration(table: &Table) -> String {
    let t = table.ident();
    let seq = table.derived("revision_seq");
    let revision = table.derived("revision");
    let notify = table.derived("notify");
    let channel = table.channel();
    format!(
        r#"
CREATE SEQUENCE IF NOT EXISTS {seq};
CREATE TABLE IF NOT EXISTS {t} (
    id           text PRIMARY KEY CHECK (id <> '' AND length(id) <= 253),
    spec         jsonb NOT NULL DEFAULT '{{}}',
    revision     bigint NOT NULL DEFAULT 0,
    status       jsonb NOT NULL DEFAULT '{{}}',
    reconcile_at timestamptz,
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now()
);
-- Revisions come from one sequence: they only grow, even across a delete and
-- a new row of the same id, so a status computed for an old spec never lands
-- on a new one. Nobody sets them by hand.
CREATE OR REPLACE FUNCTION {revision}() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' OR NEW.spec IS DISTINCT FROM OLD.spec OR NEW.id <> OLD.id THEN
        NEW.revision := nextval('{seq_literal}');
        NEW.updated_at := now();
    ELSE
        NEW.revision := OLD.revision;
    END IF;
    RETURN NEW;
END
$$;
-- Only changes a reconciler must see are signalled: the host's own status
-- writes keep the revision and stay silent.
CREATE OR REPLACE FUNCTION {notify}() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        PERFORM pg_notify('{channel}', OLD.id);
    ELSIF TG_OP = 'INSERT' THEN
        PERFORM pg_notify('{channel}', NEW.id);
    ELSIF NEW.revision <> OLD.revision OR NEW.id <> OLD.id THEN
        IF NEW.id <> OLD.id THEN
            PERFORM pg_notify('{channel}', OLD.id);
        END IF;
        PERFORM pg_notify('{channel}', NEW.id);
    END IF;
    RETURN NULL;
END
$$;
{members_table}
DROP TRIGGER IF EXISTS {revision} ON {t};
CREATE TRIGGER {revision} BEFORE INSERT OR UPDATE ON {t}
    FOR EACH ROW EXECUTE FUNCTION {revision}();
DROP TRIGGER IF EXISTS {notify} ON {t};
CREATE TRIGGER {notify} AFTER INSERT OR UPDATE OR DELETE ON {t}
    FOR EACH ROW EXECUTE FUNCTION {notify}();
"#,
        seq_literal = seq.trim_matches('"'),
        members_table = members_table(table),
    )
}

/// The membership table of the hosts reconciling `table` (scale-out, see
/// [`super::members`]).
pub fn members_table(table: &Table) -> String {
    format!(
        "-- The hosts reconciling this table, each with its last heartbeat (scale-out).
CREATE TABLE IF NOT EXISTS {} (
    member       text PRIMARY KEY,
    heartbeat_at timestamptz NOT NULL DEFAULT now()
);",
        table.derived("members")
    )
}

/// Creates (or updates) `table` and its triggers in one transaction.
pub async fn init(store: &Datastore, table: &Table) -> Result<(), DatastoreError> {
    let mut client = store.client().await?;
    let sql = |e| DatastoreError::sql(table.name(), e);
    let tx = client.transaction().await.map_err(sql)?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
        .await
        .map_err(sql)?;
    tx.batch_execute(&migration(table)).await.map_err(sql)?;
    tx.commit().await.map_err(sql)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_migration_names_only_the_checked_table() {
        let sql = migration(&Table::new("projects").unwrap());
        assert!(sql.contains("CREATE TABLE IF NOT EXISTS \"projects\" ("));
        assert!(sql.contains("pg_notify('projects_changes', NEW.id)"));
        assert!(sql.contains("nextval('projects_revision_seq')"));
    }
}
