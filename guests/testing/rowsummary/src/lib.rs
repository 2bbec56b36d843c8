//! Test guest for the datastore tests: a table row read as a custom resource.
//! Its spec is kept as arbitrary JSON and checked here, so a bad row gets an
//! error that names the row and the field instead of a decoding error.

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
    Ok(action.status(serde_json::json!({
        "summary": format!("{name}: {replicas} replicas"),
        "seenRevision": row.metadata.generation,
    })))
}

wasmlet_sdk::reconciler!(Row, reconcile);
