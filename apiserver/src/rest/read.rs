//! GET and LIST: selectors, `limit`/`continue` paging over one consistent
//! snapshot, and the resourceVersion / resourceVersionMatch rules.

use std::sync::Arc;

use axum::response::{IntoResponse, Response};
use base64::Engine;
use bytes::Bytes;
use serde_json::{Value, json};
use wasmlet_apimachinery::selector::{FieldSelector, LabelSelector};

use super::{Query, Target, json_response};
use crate::ApiState;
use crate::printers::table;
use crate::registry::ResourceType;
use crate::status::{ApiError, ApiResult};
use crate::store::{Snapshot, Stored};

/// The selectors of a LIST or WATCH, checked against one object.
pub(crate) struct Filter {
    labels: LabelSelector,
    fields: FieldSelector,
    /// The kind's selectable fields the selector names, by the stored JSON
    /// path they read and the value an absent field has (as Go's zero value).
    paths: Vec<(String, String, &'static str)>,
    /// Whether a selected field reads the stored JSON (anything but the
    /// parsed `spec.nodeName` and `status.phase`): decided once, not per object.
    reads_json: bool,
}

/// The stored (core/v1) path of an event field selector, per upstream's
/// selectable fields for each form.
fn event_field(group: &str, field: &str) -> Option<String> {
    let core = [
        "involvedObject.kind",
        "involvedObject.namespace",
        "involvedObject.name",
        "involvedObject.uid",
        "involvedObject.apiVersion",
        "involvedObject.resourceVersion",
        "involvedObject.fieldPath",
        "reason",
        "reportingComponent",
        "source",
        "type",
    ];
    if group.is_empty() {
        return core.contains(&field).then(|| {
            if field == "source" {
                "source.component".into()
            } else {
                field.into()
            }
        });
    }
    match field {
        "reason" | "type" => Some(field.into()),
        "reportingController" => Some("reportingComponent".into()),
        f => f
            .strip_prefix("regarding.")
            .filter(|r| core.contains(&format!("involvedObject.{r}").as_str()))
            .map(|r| format!("involvedObject.{r}")),
    }
}

/// The fields upstream lets a field selector name per kind (beyond
/// `metadata.name` and `metadata.namespace`): the stored path each reads and
/// its value when absent.
fn selectable_field(rt: &ResourceType, field: &str) -> Option<(String, &'static str)> {
    if rt.resource == "events" {
        return event_field(&rt.group, field).map(|p| (p, ""));
    }
    let zero = match (rt.group.as_str(), rt.resource.as_str(), field) {
        (
            "",
            "pods",
            "spec.nodeName"
            | "spec.restartPolicy"
            | "spec.schedulerName"
            | "spec.serviceAccountName"
            | "status.phase"
            | "status.podIP"
            | "status.nominatedNodeName",
        )
        | ("", "secrets", "type")
        | ("", "namespaces", "status.phase")
        | ("", "services", "spec.clusterIP" | "spec.type")
        | ("certificates.k8s.io", "certificatesigningrequests", "spec.signerName") => "",
        ("", "pods", "spec.hostNetwork") | ("", "nodes", "spec.unschedulable") => "false",
        ("", "replicationcontrollers", "status.replicas")
        | ("apps", "replicasets", "status.replicas")
        | ("batch", "jobs", "status.successful") => "0",
        _ => return None,
    };
    Some((field.to_string(), zero))
}

impl Filter {
    pub(crate) fn from_query(rt: &ResourceType, query: &Query) -> ApiResult<Filter> {
        let labels =
            LabelSelector::parse(query.get("labelSelector").map(String::as_str).unwrap_or(""))
                .map_err(|e| ApiError::bad_request(format!("unable to parse requirement: {e}")))?;
        let fields =
            FieldSelector::parse(query.get("fieldSelector").map(String::as_str).unwrap_or(""))
                .map_err(|e| ApiError::bad_request(format!("invalid field selector: {e}")))?;
        let mut paths = Vec::new();
        for field in fields.fields() {
            if matches!(field, "metadata.name" | "metadata.namespace") {
                continue;
            }
            let Some((path, zero)) = selectable_field(rt, field) else {
                return Err(ApiError::bad_request(format!(
                    "field label not supported: {field} (for {})",
                    rt.qualified()
                )));
            };
            paths.push((field.to_string(), path, zero));
        }
        let reads_json = paths
            .iter()
            .any(|(f, _, _)| !matches!(f.as_str(), "spec.nodeName" | "status.phase"));
        Ok(Filter {
            labels,
            fields,
            paths,
            reads_json,
        })
    }

    pub(crate) fn matches(&self, s: &Stored) -> bool {
        if !self.labels.matches(&s.labels) {
            return false;
        }
        let (ns, name) = s.namespace_name();
        // `spec.nodeName` and `status.phase` are kept parsed (the node
        // agent's and the scheduler's watches); other fields read the JSON. An
        // unreadable object matches no such field (the LIST that renders it
        // reports the error).
        let value = if self.reads_json {
            s.value().ok()
        } else {
            None
        };
        self.fields.matches(|f| match f {
            "metadata.name" => Some(name.to_string()),
            "metadata.namespace" => Some(ns.to_string()),
            "spec.nodeName" => Some(s.node_name.clone().unwrap_or_default()),
            "status.phase" => Some(s.phase.clone().unwrap_or_default()),
            other => {
                let (_, path, zero) = self.paths.iter().find(|(f, _, _)| f == other)?;
                let mut cur = value.as_ref()?;
                for part in path.split('.') {
                    match cur.get(part) {
                        Some(v) => cur = v,
                        None => return Some(zero.to_string()),
                    }
                }
                Some(match cur {
                    serde_json::Value::String(v) => v.clone(),
                    serde_json::Value::Null => zero.to_string(),
                    v => v.to_string(),
                })
            }
        })
    }
}

pub(crate) fn wants_table(accept: &str) -> bool {
    accept.contains("as=Table")
}

/// `Accept: application/json;as=PartialObjectMetadata[List];g=meta.k8s.io;v=v1`
/// (kube-rs `Api::list_metadata`, controller-runtime's metadata informers):
/// objects reduced to their metadata.
pub(crate) fn wants_metadata(accept: &str) -> bool {
    accept.contains("as=PartialObjectMetadata")
}

/// The meta.k8s.io version the client asked its partial metadata in.
fn metadata_version(accept: &str) -> &'static str {
    if accept.contains("v=v1beta1") {
        "meta.k8s.io/v1beta1"
    } else {
        "meta.k8s.io/v1"
    }
}

/// One object as `PartialObjectMetadata`.
pub(crate) fn partial_metadata(accept: &str, object: &Value) -> Value {
    json!({
        "kind": "PartialObjectMetadata",
        "apiVersion": metadata_version(accept),
        "metadata": object.get("metadata").cloned().unwrap_or_else(|| json!({})),
    })
}

pub(crate) fn get(state: &ApiState, t: &Target, accept: &str) -> ApiResult<Response> {
    let name = t.name.as_deref().unwrap_or_default();
    let stored = state.resources.get(&t.rt, t.ns(), name)?;
    if wants_table(accept) {
        return Ok(super::value_response(
            200,
            &table::table(&t.rt, &[stored.value()?], None, ""),
        ));
    }
    if wants_metadata(accept) {
        return Ok(super::value_response(
            200,
            &partial_metadata(accept, &stored.value()?),
        ));
    }
    Ok(json_response(
        200,
        state.resources.render(&t.rt, &t.version, &stored)?,
    ))
}

#[derive(serde::Serialize, serde::Deserialize)]
struct ContinueToken {
    rv: u64,
    start: String,
}

fn encode_continue(rv: u64, start: &str) -> String {
    let token = serde_json::to_vec(&ContinueToken {
        rv,
        start: start.to_string(),
    })
    .unwrap_or_default();
    base64::engine::general_purpose::STANDARD.encode(token)
}

fn decode_continue(s: &str) -> ApiResult<ContinueToken> {
    base64::engine::general_purpose::STANDARD
        .decode(s)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .ok_or_else(|| {
            ApiError::bad_request("continue key is not valid: not a token this server issued")
        })
}

fn parse_rv(s: &str) -> ApiResult<u64> {
    s.parse().map_err(|_| {
        ApiError::bad_request(format!(
            "invalid resource version \"{s}\": must be an integer"
        ))
    })
}

/// Picks the snapshot a LIST reads, per resourceVersion and resourceVersionMatch.
pub(crate) fn list_snapshot(
    state: &ApiState,
    query: &Query,
) -> ApiResult<(Arc<Snapshot>, Option<String>)> {
    if let Some(token) = query.get("continue").filter(|c| !c.is_empty()) {
        let token = decode_continue(token)?;
        let snap = state.resources.store.snapshot_at(token.rv).map_err(|_| {
            ApiError::gone(
                "The provided continue parameter is too old to display a consistent list result. \
                 You can start a new list without the continue parameter.",
            )
        })?;
        return Ok((Arc::new(snap), Some(token.start)));
    }
    let rv = query
        .get("resourceVersion")
        .map(String::as_str)
        .unwrap_or("");
    let exact = query.get("resourceVersionMatch").map(String::as_str);
    match (rv, exact) {
        ("", Some(m)) if !m.is_empty() => Err(ApiError::bad_request(
            "resourceVersionMatch is forbidden unless resourceVersion is provided",
        )),
        ("" | "0", _) => Ok((state.resources.store.snapshot(), None)),
        (rv, Some("Exact")) => {
            let rv = parse_rv(rv)?;
            let now = state.resources.store.snapshot();
            if rv > now.rv {
                return Err(ApiError::timeout(format!(
                    "Too large resource version: {rv}, current: {}",
                    now.rv
                )));
            }
            let snap = state
                .resources
                .store
                .snapshot_at(rv)
                .map_err(|e| ApiError::gone(e.to_string()))?;
            Ok((Arc::new(snap), None))
        }
        (rv, None | Some("NotOlderThan") | Some("")) => {
            let rv = parse_rv(rv)?;
            let now = state.resources.store.snapshot();
            if rv > now.rv {
                return Err(ApiError::timeout(format!(
                    "Too large resource version: {rv}, current: {}",
                    now.rv
                )));
            }
            Ok((now, None))
        }
        (_, Some(m)) => Err(ApiError::bad_request(format!(
            "resourceVersionMatch: Unsupported value: \"{m}\": supported values: \"Exact\", \"NotOlderThan\""
        ))),
    }
}

pub(crate) fn list(
    state: &ApiState,
    t: &Target,
    query: &Query,
    accept: &str,
) -> ApiResult<Response> {
    let filter = Filter::from_query(&t.rt, query)?;
    let limit: usize = match query.get("limit").map(String::as_str) {
        None | Some("") | Some("0") => usize::MAX,
        Some(l) => l
            .parse()
            .map_err(|_| ApiError::bad_request(format!("invalid limit \"{l}\"")))?,
    };
    let (snap, after) = list_snapshot(state, query)?;
    let prefix = t.rt.prefix(t.namespace.as_deref());
    let mut items: Vec<&Arc<Stored>> = Vec::new();
    let mut next = None;
    let mut remaining = 0usize;
    for s in snap.range(&prefix, after.as_deref()) {
        if !filter.matches(s) {
            continue;
        }
        if items.len() < limit {
            items.push(s);
        } else {
            if next.is_none() {
                next = items.last().map(|last| encode_continue(snap.rv, &last.key));
            }
            remaining += 1;
        }
    }
    let mut metadata = json!({"resourceVersion": snap.rv.to_string()});
    if let Some(c) = &next {
        metadata["continue"] = json!(c);
        metadata["remainingItemCount"] = json!(remaining);
    }
    if wants_table(accept) {
        let values = items
            .iter()
            .map(|s| s.value())
            .collect::<Result<Vec<Value>, _>>()?;
        return Ok(super::value_response(
            200,
            &table::table(&t.rt, &values, next.as_deref(), &snap.rv.to_string()),
        ));
    }
    if wants_metadata(accept) {
        let items = items
            .iter()
            .map(|s| Ok(partial_metadata(accept, &s.value()?)))
            .collect::<ApiResult<Vec<Value>>>()?;
        return Ok(super::value_response(
            200,
            &json!({"kind": "PartialObjectMetadataList", "apiVersion": metadata_version(accept),
                "metadata": metadata, "items": items}),
        ));
    }
    list_response(state, t, metadata, &items)
}

/// A `KindList` of `items` with `metadata`, the items as stored: no parse
/// and no re-encoding on the hot path (a LIST, and the answer of a DELETE of
/// a collection, which may hold every object of a kind), and no copy of the
/// whole (the body streams them, [`super::list_body`]).
pub(crate) fn list_response(
    state: &ApiState,
    t: &Target,
    metadata: Value,
    items: &[&Arc<Stored>],
) -> ApiResult<Response> {
    let head = json!({
        "kind": format!("{}List", t.rt.kind),
        "apiVersion": t.rt.api_version(&t.version),
        "metadata": metadata,
    });
    let mut head = serde_json::to_vec(&head).unwrap_or_default();
    head.pop(); // its closing brace: the items follow
    let items = items
        .iter()
        .map(|s| state.resources.render(&t.rt, &t.version, s))
        .collect::<ApiResult<Vec<Bytes>>>()?;
    let body = super::list_body::ListBody::new(Bytes::from(head), items);
    Ok((
        axum::http::StatusCode::OK,
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        axum::body::Body::new(body),
    )
        .into_response())
}
