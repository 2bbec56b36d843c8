//! project-controller: a global reconciler whose objects are rows of the PostgreSQL
//! table `projects` and whose work lands in regional clusters (issue 14).
//!
//! For each project it server-side applies a cluster-scoped `ProjectDeployment` named
//! after the project in the cluster its `spec.region` names (`ctx.cluster(region)`,
//! the host's `--cluster REGION=KUBECONFIG`), and copies that object's regional status
//! (phase, url, message) into the project's row. The host watches every region's
//! ProjectDeployments for this plugin (manifest `[[watches]]`, mapped to the row by
//! [`PROJECT_LABEL`]), so a region's report reconciles the row at once; the `requeue`
//! asked for here (kept by the host as the row's `reconcileAt`) is only a backstop.
//! A project moved to another region has its old ProjectDeployment deleted.
//!
//! Deleting a project's row (a plain `DELETE`) deletes its ProjectDeployment too: the
//! manifest names a `finalizer`, so the host keeps the row (marked with `deleted_at`,
//! `metadata.deletionTimestamp` here) and calls [`finalize`], which deletes the
//! regional object; once that is done the host removes its finalizer and the row goes.
//!
//! Errors name the project and the field or region: a bad spec and a region the host
//! does not have are terminal (`Ready=False` in the row's status, no retries until the
//! row changes); an unreachable region is transient (retried with back-off).

use std::sync::Arc;
use std::time::Duration;

use kube::{CustomResource, ResourceExt};
use serde::{Deserialize, Serialize};
use serde_json::json;
use wasmlet_sdk::prelude::*;

/// The field manager of the applies: this controller owns the spec it declares.
pub const MANAGER: &str = "project-controller";
/// The label every ProjectDeployment carries: the project's id.
pub const PROJECT_LABEL: &str = "examples.wasmlet.dev/project";
/// How soon a project whose deployment is not running yet is looked at again,
/// should the region's report not reach the host's watch.
pub const POLL_PENDING: Duration = Duration::from_secs(60);
/// How often a running project's regional status is re-read anyway.
pub const POLL_RUNNING: Duration = Duration::from_secs(600);

/// A row of `projects` (`metadata.name` = the row's id, `metadata.generation` = its
/// revision). Fields are optional here so that a bad row gets an error naming the
/// field instead of a decoding error.
#[derive(CustomResource, Clone, Debug, Default, Serialize, Deserialize)]
#[kube(
    group = "examples.wasmlet.dev",
    version = "v1",
    kind = "Project",
    status = "ProjectStatus",
    schema = "disabled"
)]
pub struct ProjectSpec {
    /// The cluster name of the project's region, e.g. `eu-west`.
    pub region: Option<String>,
    /// A display name.
    pub name: Option<String>,
    /// `small`, `medium` or `large`.
    pub size: Option<String>,
}

/// What this controller keeps in a row's status (besides the host's
/// `conditions`, `observedGeneration` and `lastReconciledRevision`).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProjectStatus {
    /// The region whose cluster holds the project's ProjectDeployment.
    pub region: Option<String>,
}

/// The regional object, cluster-scoped (see `projectdeployment.crd.yaml`).
#[derive(CustomResource, Clone, Debug, Default, Serialize, Deserialize)]
#[kube(
    group = "examples.wasmlet.dev",
    version = "v1",
    kind = "ProjectDeployment",
    status = "ProjectDeploymentStatus",
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct ProjectDeploymentSpec {
    pub project: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub display_name: Option<String>,
    pub size: String,
    pub replicas: u32,
    pub revision: i64,
}

/// Written by the regional side.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProjectDeploymentStatus {
    pub phase: Option<String>,
    pub url: Option<String>,
    pub message: Option<String>,
    pub observed_revision: Option<i64>,
}

/// A checked spec.
struct Wanted {
    region: String,
    size: String,
    replicas: u32,
}

fn checked(id: &str, spec: &ProjectSpec) -> Result<Wanted, Error> {
    let invalid = |field: &str, message: String| {
        Error::terminal(
            "InvalidSpec",
            format!("project {id:?}: spec.{field}: {message}"),
        )
    };
    let region = match spec.region.as_deref() {
        Some(r) if is_dns_label(r) => r.to_string(),
        Some(r) => {
            return Err(invalid(
                "region",
                format!(
                    "{r:?} is not a region (a cluster name: lowercase letters, digits and '-')"
                ),
            ));
        }
        None => return Err(invalid("region", "missing".into())),
    };
    let size = spec.size.as_deref().unwrap_or("small");
    let replicas = match size {
        "small" => 1,
        "medium" => 2,
        "large" => 4,
        other => {
            return Err(invalid(
                "size",
                format!("{other:?}: expected small, medium or large"),
            ));
        }
    };
    Ok(Wanted {
        region,
        size: size.to_string(),
        replicas,
    })
}

fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// A failed call to `region`'s cluster, as the reconcile's error. A region the
/// host does not have (or the manifest does not reach) will not appear by
/// retrying: terminal. Anything else may pass: transient.
fn region_error(id: &str, region: &str, e: ClientError) -> Error {
    let message = format!("project {id:?}: region {region:?}: {e}");
    match e {
        ClientError::Denied(_) | ClientError::Invalid(_) | ClientError::Decode(_) => {
            Error::terminal("RegionUnavailable", message)
        }
        _ => Error::transient("RegionUnreachable", message),
    }
    .condition(
        Condition::is_false("Deployed")
            .reason("RegionUnavailable")
            .message(format!("region {region:?}: {e}")),
    )
}

fn reconcile(project: Arc<Project>, ctx: &Context) -> Result<Action, Error> {
    let id = project.name_any();
    let revision = project.metadata.generation.unwrap_or_default();
    let wanted = checked(&id, &project.spec)?;
    let region = ctx.cluster(&wanted.region);

    // Moved: the old region's object goes first.
    let previous = project.status.as_ref().and_then(|s| s.region.clone());
    if let Some(old) = previous.filter(|r| *r != wanted.region) {
        remove_from(ctx, &id, &old)?;
    }

    let spec = ProjectDeploymentSpec {
        project: id.clone(),
        display_name: project.spec.name.clone(),
        size: wanted.size.clone(),
        replicas: wanted.replicas,
        revision,
    };
    let desired = json!({
        "apiVersion": "examples.wasmlet.dev/v1",
        "kind": "ProjectDeployment",
        "metadata": { "name": id, "labels": { PROJECT_LABEL: id } },
        "spec": spec,
    });
    // Apply creates or updates in one call, and answers with the object as
    // stored: its status is the region's current word.
    let deployment: ProjectDeployment = region
        .patch(None, &id, &Patch::apply(desired, MANAGER).force())
        .map_err(|e| region_error(&id, &wanted.region, e))?;

    let st = deployment.status.unwrap_or_default();
    let phase = st.phase.clone().unwrap_or_else(|| "Pending".into());
    let current = st.observed_revision == Some(revision);
    let running = phase == "Running" && current;
    let running_condition = if running {
        Condition::is_true("Running")
            .reason("Running")
            .message(st.url.clone().unwrap_or_default())
    } else {
        let why = match (&st.message, current) {
            (Some(m), _) => m.clone(),
            (None, false) => format!(
                "waiting for region {:?} to act on revision {revision}",
                wanted.region
            ),
            (None, true) => format!("phase {phase}"),
        };
        // A condition's reason is UpperCamelCase; a phase that is not stays out of it.
        let reason = if phase.starts_with(|c: char| c.is_ascii_uppercase())
            && phase.chars().all(|c| c.is_ascii_alphanumeric())
        {
            phase.as_str()
        } else {
            "NotRunning"
        };
        Condition::is_false("Running").reason(reason).message(why)
    };
    let action = if running {
        Action::requeue(POLL_RUNNING)
    } else {
        Action::requeue(POLL_PENDING)
    };
    Ok(action
        .status(json!({
            "region": wanted.region,
            "deployment": {
                "cluster": wanted.region,
                "name": id,
                "phase": phase,
                "url": st.url,
                "message": st.message,
                "observedRevision": st.observed_revision,
            },
        }))
        .condition(
            Condition::is_true("Deployed")
                .reason("Applied")
                .message(format!(
                    "ProjectDeployment {id} in cluster {} at revision {revision}",
                    wanted.region
                )),
        )
        .condition(running_condition))
}

/// Deletes project `id`'s ProjectDeployment in `region`. Already gone is done; a
/// region this host does not have (or may not reach) holds nothing it can clean up,
/// which a warning says; anything else may pass, so it is an error to retry.
fn remove_from(ctx: &Context, id: &str, region: &str) -> Result<(), Error> {
    match ctx
        .cluster(region)
        .delete::<ProjectDeployment>(None, id, &DeleteParams::background())
    {
        Ok(()) | Err(ClientError::NotFound) => Ok(()),
        Err(e @ (ClientError::Invalid(_) | ClientError::Denied(_))) => {
            ctx.warn(&format!(
                "project {id}: cannot clean up region {region:?}: {e}"
            ));
            Ok(())
        }
        Err(e) => Err(region_error(id, region, e)),
    }
}

/// A deleted project (its row marked by the DELETE, held by the manifest's
/// finalizer): its ProjectDeployment goes from every region it may be in, the one
/// the row's status names (where it was last applied) and the one its spec names
/// (where a reconcile may have applied it before the status was written). Done,
/// the host lets the row go; an unreachable region keeps the row, retried with
/// back-off.
fn finalize(project: Arc<Project>, ctx: &Context) -> Result<Finalize, Error> {
    let id = project.name_any();
    let applied = project.status.as_ref().and_then(|s| s.region.clone());
    let asked = project.spec.region.clone().filter(|r| is_dns_label(r));
    let mut regions: Vec<String> = applied.into_iter().chain(asked).collect();
    regions.dedup();
    for region in &regions {
        remove_from(ctx, &id, region)?;
    }
    Ok(Finalize::Done)
}

wasmlet_sdk::reconciler!(
    Project,
    reconcile,
    finalize = finalize,
    conditions = ["Deployed", "Running"]
);

#[cfg(test)]
mod tests;
