//! The migration `wasmlet datastore init` runs: the table, its revision
//! trigger, its NOTIFY trigger and its finalizer triggers (the layout is
//! documented in the module docs of [`crate::datastore`]). Idempotent:
//! running it again changes nothing but the functions' bodies, so a newer
//! host can update them, and a table made by an older host gains the
//! columns it lacks (`ADD COLUMN IF NOT EXISTS`).

use super::{Datastore, DatastoreError, Table};

/// Serialises concurrent migrations (two hosts starting at once would
/// otherwise race on `CREATE OR REPLACE FUNCTION`). Any constant works; this
/// one spells "wasmlet" in ASCII.
const MIGRATION_LOCK: i64 = 0x0077_6173_6d6c_6574;

/// The statements that create `table` and its triggers.
pub(crate) fn migration(table: &Table) -> String {
    let t = table.ident();
    let seq = table.derived("revision_seq");
    let revision = table.derived("revision");
    let notify = table.derived("notify");
    let delete = table.derived("delete");
    let finalized = table.derived("finalized");
    let truncate = table.derived("truncate");
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
    updated_at   timestamptz NOT NULL DEFAULT now(),
    finalizers   text[] NOT NULL DEFAULT '{{}}',
    deleted_at   timestamptz
);
-- Tables made before finalizers existed (a no-op on a new one).
ALTER TABLE {t} ADD COLUMN IF NOT EXISTS finalizers text[] NOT NULL DEFAULT '{{}}';
ALTER TABLE {t} ADD COLUMN IF NOT EXISTS deleted_at timestamptz;
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
    -- As a deletionTimestamp: set by a delete (or by hand), never taken back,
    -- never there from the start.
    IF TG_OP = 'INSERT' THEN
        NEW.deleted_at := NULL;
    ELSIF OLD.deleted_at IS NOT NULL THEN
        NEW.deleted_at := OLD.deleted_at;
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
    ELSIF NEW.revision <> OLD.revision OR NEW.id <> OLD.id
        OR (NEW.deleted_at IS NOT NULL AND OLD.deleted_at IS NULL) THEN
        IF NEW.id <> OLD.id THEN
            PERFORM pg_notify('{channel}', OLD.id);
        END IF;
        PERFORM pg_notify('{channel}', NEW.id);
    END IF;
    RETURN NULL;
END
$$;
-- Finalizers, the Kubernetes way: the application keeps its plain
-- `DELETE FROM table WHERE id = ...`; a row that still has finalizers is
-- only marked (deleted_at, which the NOTIFY trigger signals) and stays until
-- its finalizers are gone. A row without finalizers goes at once.
CREATE OR REPLACE FUNCTION {delete}() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF cardinality(OLD.finalizers) = 0 THEN
        RETURN OLD;
    END IF;
    IF OLD.deleted_at IS NULL THEN
        UPDATE {t} SET deleted_at = now() WHERE id = OLD.id;
    END IF;
    RETURN NULL;
END
$$;
-- The last finalizer of a marked row removed (by the host, or by hand): the
-- delete that was asked for happens now.
CREATE OR REPLACE FUNCTION {finalized}() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM {t} WHERE id = NEW.id AND deleted_at IS NOT NULL AND cardinality(finalizers) = 0;
    RETURN NULL;
END
$$;
-- TRUNCATE fires no row triggers, so it would drop rows past their
-- finalizers: refused while any row has one (DELETE them instead).
CREATE OR REPLACE FUNCTION {truncate}() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM {t} WHERE cardinality(finalizers) > 0) THEN
        RAISE EXCEPTION 'TRUNCATE {t_text}: rows have finalizers (their reconcilers clean up after a DELETE; TRUNCATE would skip them)'
            USING HINT = 'DELETE FROM {t_text} instead';
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
DROP TRIGGER IF EXISTS {delete} ON {t};
CREATE TRIGGER {delete} BEFORE DELETE ON {t}
    FOR EACH ROW EXECUTE FUNCTION {delete}();
DROP TRIGGER IF EXISTS {finalized} ON {t};
CREATE TRIGGER {finalized} AFTER UPDATE OF finalizers, deleted_at ON {t}
    FOR EACH ROW WHEN (NEW.deleted_at IS NOT NULL AND cardinality(NEW.finalizers) = 0)
    EXECUTE FUNCTION {finalized}();
DROP TRIGGER IF EXISTS {truncate} ON {t};
CREATE TRIGGER {truncate} BEFORE TRUNCATE ON {t}
    FOR EACH STATEMENT EXECUTE FUNCTION {truncate}();
"#,
        seq_literal = seq.trim_matches('"'),
        t_text = table.name(),
        members_table = members_table(table),
    )
}

/// The membership table of the hosts reconciling `table` (scale-out, see
/// [`super::members`]).
pub(crate) fn members_table(table: &Table) -> String {
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
pub(crate) async fn init(store: &Datastore, table: &Table) -> Result<(), DatastoreError> {
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

    #[test]
    fn the_migration_upgrades_older_tables_and_guards_deletes() {
        let sql = migration(&Table::new("projects").unwrap());
        // A table made by an older host gains the columns.
        for column in [
            "finalizers text[] NOT NULL DEFAULT '{}'",
            "deleted_at timestamptz",
        ] {
            let add = format!("ALTER TABLE \"projects\" ADD COLUMN IF NOT EXISTS {column};");
            assert!(sql.contains(&add), "{add}");
        }
        assert!(sql.contains("CREATE TRIGGER \"projects_delete\" BEFORE DELETE ON \"projects\""));
        assert!(sql.contains("UPDATE \"projects\" SET deleted_at = now() WHERE id = OLD.id;"));
        // Marking a row notifies; so does nothing else but inserts, deletes
        // and revisions.
        assert!(sql.contains("OR (NEW.deleted_at IS NOT NULL AND OLD.deleted_at IS NULL)"));
    }
}
