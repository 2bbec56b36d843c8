//! PATCH of every kind: JSON, merge, strategic merge and server-side apply.

use serde_json::{Value, json};
use wasmlet_apimachinery::listtype::ListTypes;
use wasmlet_apimachinery::managedfields::{self, ApplyError, Scope, Writer};
use wasmlet_apimachinery::patch as patches;

use super::{Address, PatchBody, Resources, Sub, WriteOptions, Written, scope};
use crate::meta;
use crate::status::{ApiError, ApiResult};

impl Resources {
    /// PATCH of every kind, including server-side apply (which may create).
    pub(crate) async fn patch(
        &self,
        at: Address<'_>,
        body: PatchBody,
        opts: &WriteOptions,
    ) -> ApiResult<Written> {
        let Address {
            rt,
            version,
            ns,
            name,
            sub,
        } = at;
        if let PatchBody::Strategic(_) = body
            && !rt.builtin
        {
            return Err(ApiError::unsupported_media_type(
                "application/strategic-merge-patch+json",
                &[
                    "application/json-patch+json",
                    "application/merge-patch+json",
                    "application/apply-patch+yaml",
                ],
            ));
        }
        let key = at.key();
        let applier = Applier::new(at, opts);
        let smp_lists = self.list_types(rt, version, false);
        let lists = self.list_types(rt, version, true);
        if let PatchBody::Apply(applied) = &body
            && self.store.get(&key).is_none()
        {
            if sub == Sub::Status {
                return Err(ApiError::not_found(rt, name));
            }
            let mut obj = applied.clone();
            meta::meta_mut(&mut obj).insert("name".into(), Value::String(name.into()));
            let obj = managedfields::apply(None, &obj, &applier.by(lists.as_ref()))
                .map_err(apply_error)?;
            match self.create_managed(rt, version, ns, obj, opts, true).await {
                Ok(object) => {
                    return Ok(Written {
                        object,
                        created: true,
                    });
                }
                // Lost a race with another creator: fall through to the update path.
                Err(e) if e.reason == "AlreadyExists" => {}
                Err(e) => return Err(e),
            }
        }
        let client_rv = patch_rv(&body);
        let object = self
            .read_modify_write(
                at,
                client_rv,
                |stored| {
                    // Patches apply to the object as the client sees it.
                    let view;
                    let old = if crate::events::is_view(&rt.group, &rt.resource) {
                        view = crate::events::to_events_v1(stored);
                        &view
                    } else {
                        stored
                    };
                    let (patched, managed) = match &body {
                        PatchBody::Merge(p) => {
                            let mut v = old.clone();
                            patches::merge(&mut v, p);
                            (v, false)
                        }
                        PatchBody::Json(p) => {
                            let mut v = old.clone();
                            patches::json(&mut v, p).map_err(json_patch_error)?;
                            (v, false)
                        }
                        PatchBody::Strategic(p) => {
                            let v = patches::strategic(old, p, smp_lists.as_ref())
                                .map_err(|e| ApiError::invalid_patch(e.to_string()))?;
                            (v, false)
                        }
                        PatchBody::Apply(applied) => {
                            let v = managedfields::apply(
                                Some(old),
                                applied,
                                &applier.by(lists.as_ref()),
                            )
                            .map_err(apply_error)?;
                            (v, true)
                        }
                    };
                    let new = self.prepare_update(at, stored, patched, opts)?;
                    Ok((new, managed))
                },
                opts,
            )
            .await?;
        Ok(Written {
            object,
            created: false,
        })
    }
}

/// The owned parts of a server-side apply's [`Writer`].
struct Applier<'a> {
    manager: &'a str,
    api_version: String,
    now: String,
    scope: Scope,
    force: bool,
}

impl<'a> Applier<'a> {
    fn new(at: Address, opts: &'a WriteOptions) -> Applier<'a> {
        Applier {
            manager: &opts.field_manager,
            api_version: at.rt.api_version(at.version),
            now: meta::now_rfc3339(),
            scope: scope(at.rt, at.sub),
            force: opts.force,
        }
    }

    fn by<'b>(&'b self, lists: &'b dyn ListTypes) -> Writer<'b> {
        Writer::new(self.manager, &self.api_version, lists, &self.now)
            .scoped(&self.scope)
            .forced(self.force)
    }
}

fn patch_rv(body: &PatchBody) -> Option<u64> {
    let v = match body {
        PatchBody::Merge(p) | PatchBody::Strategic(p) | PatchBody::Apply(p) => p,
        PatchBody::Json(_) => return None,
    };
    meta::meta_str(v, "resourceVersion").and_then(|s| s.parse().ok())
}

fn apply_error(e: ApplyError) -> ApiError {
    let c = match e {
        ApplyError::Conflicts(c) => c,
        ApplyError::Invalid(m) => return ApiError::new(422, "Invalid", m),
        ApplyError::ManagedFields => {
            return ApiError::bad_request(ApplyError::ManagedFields.to_string());
        }
    };
    let causes: Vec<Value> = c
        .causes()
        .into_iter()
        .map(|(message, field)| json!({"reason": "FieldManagerConflict", "message": message, "field": field}))
        .collect();
    let mut e = ApiError::new(409, "Conflict", c.to_string());
    e.details = Some(json!({"causes": causes}));
    e
}

/// Upstream's answers: 413 for too many ops (and, like its storage limit, for
/// a result too large to store), 422 for an op that cannot apply.
fn json_patch_error(e: patches::PatchError) -> ApiError {
    use patches::PatchError as E;
    match e {
        E::TooManyOperations { .. } | E::ResultTooLarge { .. } => {
            ApiError::new(413, "RequestEntityTooLarge", e.to_string())
        }
        e => ApiError::invalid_patch(e.to_string()),
    }
}

impl ApiError {
    fn invalid_patch(message: String) -> ApiError {
        ApiError::new(422, "Invalid", message)
    }
}
