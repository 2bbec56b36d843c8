//! Test guest for the datastore tests: a table row read as a custom resource.
//! Its spec is kept as arbitrary JSON and checked here, so a bad row gets an
//! error that names the row and the field instead of a decoding error.
//!
//! With a `finalizer` in its manifest (the tests add one), a deleted row is
//! finalized here: `spec.finalize = "fail"` refuses (a transient error naming
//! the row), anything else logs what the guest saw of the deletion and is done.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use wasmlet_sdk::prelude::*;

/// A row of the `rows` table, as the host hands it over (`metadata.name` is
/// the row's id, `metadata.generation` its revision).
#[derive(kube::CustomResource, Clone, Debug, serde::Serialize, serde::Deserialize)]
#[kube(
    group = "datastore.wasmlet.dev",
    version = "v1",
    kind = "Row",
    schema = "disabled"
)]
pub struct RowSpec {
    #[serde(flatten)]
    pub fields: serde_json::Map<String, Value>,
}

fn reconcile(row: Arc<Row>, _ctx: &Context) -> Result<Action, Error> {
    let name = row.metadata.name.clone().unwrap_or_default();
    let replicas = match row.spec.fields.get("replicas") {
        Some(Value::Number(n)) if n.as_u64().is_some_and(|r| r <= 1000) => n.as_u64().unwrap_or(0),
        other => {
            let got = other.map_or("nothing".to_string(), Value::to_string);
            return Err(Error::terminal(
                "InvalidSpec",
                format!("row {name:?}: spec.replicas: expected an integer in 0..=1000, got {got}"),
            ));
        }
    };
    let action = match row
        .spec
        .fields
        .get("requeueSeconds")
        .and_then(Value::as_u64)
    {
        Some(secs) => Action::requeue(Duration::from_secs(secs)),
        None => Action::await_change(),
    };
    let mut status = serde_json::json!({
        "summary": format!("{name}: {replicas} replicas"),
        "seenRevision": row.metadata.generation,
    });
    // What the host set before this first reconcile (a finalizing manifest).
    if let Some(finalizers) = &row.metadata.finalizers {
        status["seenFinalizers"] = serde_json::json!(finalizers);
    }
    Ok(action.status(status))
}

/// A deleted row: refuses while `spec.finalize` is `"fail"`, otherwise logs
/// the deletion as the guest saw it (the tests read the host's log).
fn finalize(row: Arc<Row>, ctx: &Context) -> Result<Finalize, Error> {
    let name = row.metadata.name.clone().unwrap_or_default();
    let deleted = row
        .metadata
        .deletion_timestamp
        .as_ref()
        .map_or("none".to_string(), |t| {
            serde_json::to_value(t).map_or_else(|e| e.to_string(), |v| v.to_string())
        });
    let finalizers = row.metadata.finalizers.clone().unwrap_or_default();
    if row.spec.fields.get("finalize").and_then(Value::as_str) == Some("fail") {
        return Err(Error::transient(
            "CleanupFailed",
            format!("row {name:?}: spec.finalize is \"fail\": the cleanup refuses"),
        ));
    }
    ctx.info(&format!(
        "row {name:?} finalized: deletionTimestamp {deleted}, finalizers {finalizers:?}"
    ));
    Ok(Finalize::Done)
}

wasmlet_sdk::reconciler!(Row, reconcile, finalize = finalize);
