//! `pods/NAME/eviction`, as upstream's eviction REST handler: a pod that is
//! not running (or already terminating) is deleted at once; otherwise its one
//! PodDisruptionBudget decides from the status the disruption controller
//! writes: 429 while the budget is unprocessed or allows no disruption, else
//! `disruptionsAllowed` is decremented and the pod recorded in
//! `disruptedPods` (one status update conditioned on the budget's
//! resourceVersion) before the pod is deleted. An unready pod is deleted
//! without spending the budget when the budget is healthy anyway (or its
//! `unhealthyPodEvictionPolicy` is `AlwaysAllow`), conditioned on the pod's
//! resourceVersion so a pod that became ready meanwhile is looked at again.
//!
//! Deviation: the pod gets no `DisruptionTarget` condition before deletion.

use axum::response::Response;
use bytes::Bytes;
use serde_json::{Value, json};
use wasmlet_apimachinery::selector::LabelSelector;

use super::write::delete_options;
use super::{Query, Target, parse_object, value_response};
use crate::ApiState;
use crate::meta;
use crate::resources::{Address, DeleteOptions, Sub};
use crate::status::{ApiError, ApiResult, success};

/// Upstream's `MaxDisruptedPodSize`: evictions the controller has not yet
/// confirmed, past which the budget refuses more.
const MAX_DISRUPTED_PODS: usize = 2000;

fn int(v: &Value, path: &str) -> i64 {
    v.pointer(path).and_then(Value::as_i64).unwrap_or(0)
}

fn pod_ready(pod: &Value) -> bool {
    pod.pointer("/status/conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Ready" && c["status"] == "True")
}

/// `canIgnorePDB`: finished, pending or terminating pods cause no new disruption.
fn can_ignore_budget(pod: &Value) -> bool {
    let phase = pod
        .pointer("/status/phase")
        .and_then(Value::as_str)
        .unwrap_or("");
    matches!(phase, "Succeeded" | "Failed" | "Pending") || meta::is_deleting(pod)
}

fn refuse(why: String) -> ApiError {
    ApiError::too_many_requests(
        "Cannot evict pod as it would violate the pod's disruption budget.",
        vec![json!({"reason": "DisruptionBudget", "message": why})],
    )
}

fn forbidden(pdb_name: &str, why: &str) -> ApiError {
    ApiError::forbidden(format!(
        "poddisruptionbudget.policy \"{pdb_name}\" is forbidden: {why}"
    ))
}

pub(crate) async fn evict(state: &ApiState, t: &Target, body: Bytes) -> ApiResult<Response> {
    let eviction = parse_object(&body, "application/json")?;
    let name = t.name.as_deref().unwrap_or_default();
    let ns = t.ns().to_string();
    let opts = match eviction.get("deleteOptions") {
        Some(d) => delete_options(&serde_json::to_vec(d).unwrap_or_default(), &Query::new())?,
        None => DeleteOptions::default(),
    };
    let pdb_rt = state
        .registry
        .builtin("policy", "v1", "poddisruptionbudgets")?;
    for _ in 0..8 {
        let pod = state.resources.get(&t.rt, &ns, name)?.value()?;
        // Deleting without spending the budget is conditioned on the pod as
        // seen here (unless the client gave its own precondition).
        let pinned = opts.precondition_rv.is_none();
        let mut pinned_opts = opts.clone();
        if pinned {
            pinned_opts.precondition_rv = meta::meta_str(&pod, "resourceVersion").map(String::from);
        }
        let delete_pinned = async {
            match state.resources.delete(&t.rt, &ns, name, &pinned_opts).await {
                Ok(_) => Ok(true),
                Err(e) if e.code == 409 && pinned => Ok(false),
                Err(e) => Err(e),
            }
        };
        if can_ignore_budget(&pod) {
            if delete_pinned.await? {
                return Ok(value_response(201, &success(201)));
            }
            continue;
        }
        let labels = pod
            .pointer("/metadata/labels")
            .cloned()
            .unwrap_or(json!({}));
        let snap = state.resources.store.snapshot();
        let pdbs: Vec<Value> = snap
            .range(&pdb_rt.prefix(Some(&ns)), None)
            .map(|s| s.value())
            .collect::<Result<Vec<Value>, _>>()?
            .into_iter()
            .filter(|pdb| {
                // A missing or empty selector matches nothing here (upstream).
                pdb.pointer("/spec/selector")
                    .and_then(|s| LabelSelector::from_label_selector(s).ok())
                    .is_some_and(|sel| !sel.is_empty() && sel.matches(&labels))
            })
            .collect();
        if pdbs.len() > 1 {
            return Err(ApiError::internal(
                "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.",
            ));
        }
        let Some(pdb) = pdbs.first() else {
            state.resources.delete(&t.rt, &ns, name, &opts).await?;
            return Ok(value_response(201, &success(201)));
        };
        let pdb_name = meta::name(pdb).to_string();
        let desired = int(pdb, "/status/desiredHealthy");
        let current = int(pdb, "/status/currentHealthy");
        if !pod_ready(&pod) {
            let always = pdb
                .pointer("/spec/unhealthyPodEvictionPolicy")
                .and_then(Value::as_str)
                == Some("AlwaysAllow");
            // An unready pod is no disruption to a budget that is met anyway.
            if always || (current >= desired && desired > 0) {
                if delete_pinned.await? {
                    return Ok(value_response(201, &success(201)));
                }
                continue;
            }
        }
        if int(pdb, "/status/observedGeneration") < int(pdb, "/metadata/generation") {
            return Err(refuse(format!(
                "The disruption budget {pdb_name} is still being processed by the server."
            )));
        }
        let allowed = int(pdb, "/status/disruptionsAllowed");
        if allowed < 0 {
            return Err(forbidden(&pdb_name, "pdb disruptions allowed is negative"));
        }
        let recorded = pdb
            .pointer("/status/disruptedPods")
            .and_then(Value::as_object)
            .map_or(0, serde_json::Map::len);
        if recorded > MAX_DISRUPTED_PODS {
            return Err(forbidden(
                &pdb_name,
                "DisruptedPods map too big - too many evictions not confirmed by PDB controller",
            ));
        }
        if allowed == 0 {
            return Err(refuse(format!(
                "The disruption budget {pdb_name} needs {desired} healthy pods and has {current} currently"
            )));
        }
        let mut new = pdb.clone();
        new["status"]["disruptionsAllowed"] = json!(allowed - 1);
        if allowed == 1 {
            set_insufficient(&mut new);
        }
        if !new["status"]["disruptedPods"].is_object() {
            new["status"]["disruptedPods"] = json!({});
        }
        new["status"]["disruptedPods"][name] = json!(meta::now_rfc3339());
        let written = state
            .resources
            .update(
                Address {
                    rt: &pdb_rt,
                    version: "v1",
                    ns: &ns,
                    name: &pdb_name,
                    sub: Sub::Status,
                },
                new,
                &Default::default(),
            )
            .await;
        match written {
            Ok(_) => {}
            // Another eviction (or the controller) wrote the budget first: look again.
            Err(e) if e.code == 409 => continue,
            Err(e) => return Err(e),
        }
        state.resources.delete(&t.rt, &ns, name, &opts).await?;
        return Ok(value_response(201, &success(201)));
    }
    Err(ApiError::too_many_requests(
        "Too many concurrent evictions; try again.",
        vec![],
    ))
}

/// `UpdateDisruptionAllowedCondition` for a budget the eviction just spent.
fn set_insufficient(pdb: &mut Value) {
    let generation = int(pdb, "/status/observedGeneration");
    let mut conds: Vec<Value> = pdb["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let fresh = json!({"type": "DisruptionAllowed", "status": "False", "reason": "InsufficientPods",
        "message": "", "observedGeneration": generation, "lastTransitionTime": meta::now_rfc3339()});
    match conds.iter_mut().find(|c| c["type"] == "DisruptionAllowed") {
        Some(c) if c["status"] == "False" => {
            c["reason"] = json!("InsufficientPods");
            c["message"] = json!("");
            c["observedGeneration"] = json!(generation);
        }
        Some(c) => *c = fresh,
        None => conds.push(fresh),
    }
    pdb["status"]["conditions"] = Value::Array(conds);
}
