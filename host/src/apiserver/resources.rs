//! The generic object semantics every resource shares, as upstream's generic
//! registry store: create, update, patch and delete with optimistic concurrency,
//! `generation`, the status subresource, finalizers, graceful deletion, managed
//! fields and CRD schemas. The HTTP layer, the garbage collector and the
//! built-in controllers all write through here, so the rules hold for everyone.

use std::sync::Arc;

use bytes::Bytes;
use serde_json::{Value, json};
use wasmlet_apimachinery::builtin::BuiltinListTypes;
use wasmlet_apimachinery::listtype::{AllAtomic, ListTypes};
use wasmlet_apimachinery::managedfields::{self, ApplyError, Scope};
use wasmlet_apimachinery::patch as patches;

use super::meta;
use super::registry::{Registry, ResourceType};
use super::status::{ApiError, ApiResult, Cause};
use super::store::{Expect, Store, StoreError, Stored};
use super::strategy;

/// How long a write that did not pin a resourceVersion keeps retrying after
/// losing a compare-and-swap race, as upstream's GuaranteedUpdate does (a
/// fixed count of 16 made 8 concurrent patches of one object fail with 409).
const RETRY_FOR: std::time::Duration = std::time::Duration::from_secs(30);

/// True while a lost race may still be retried.
fn retrying(deadline: std::time::Instant) -> bool {
    std::time::Instant::now() < deadline
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sub {
    Main,
    Status,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldValidation {
    Ignore,
    Warn,
    Strict,
}

#[derive(Debug, Clone)]
pub struct WriteOptions {
    pub field_manager: String,
    pub dry_run: bool,
    pub field_validation: FieldValidation,
    pub force: bool,
}

impl Default for WriteOptions {
    fn default() -> Self {
        WriteOptions {
            field_manager: "wasmlet".into(),
            dry_run: false,
            field_validation: FieldValidation::Warn,
            force: false,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Propagation {
    Orphan,
    Background,
    Foreground,
}

#[derive(Debug, Clone, Default)]
pub struct DeleteOptions {
    pub grace_period_seconds: Option<i64>,
    pub propagation: Option<Propagation>,
    pub precondition_uid: Option<String>,
    pub precondition_rv: Option<String>,
    pub dry_run: bool,
}

pub enum PatchBody {
    Merge(Value),
    Json(Value),
    Strategic(Value),
    Apply(Value),
}

/// Result of a write: the stored object, and whether it was created.
pub struct Written {
    pub object: Arc<Stored>,
    pub created: bool,
}

/// Result of a delete: the last state, and whether it is gone already (or
/// waits for finalizers / a graceful shutdown).
pub struct Deleted {
    pub object: Arc<Stored>,
    pub gone: bool,
}

#[derive(Clone)]
pub struct Resources {
    pub store: Store,
    pub registry: Arc<Registry>,
}

fn store_error(rt: &ResourceType, name: &str, e: StoreError) -> ApiError {
    match e {
        StoreError::AlreadyExists => ApiError::already_exists(rt, name),
        StoreError::NotFound => ApiError::not_found(rt, name),
        StoreError::Conflict { .. } => ApiError::conflict(rt, name),
        StoreError::Internal(m) => ApiError::internal(m),
    }
}

/// Strips what never takes part in "did anything change?".
/// Whether an update that leaves a deleted object without finalizers removes it
/// (upstream's `shouldDeleteDuringUpdate`): when the update removed the last
/// finalizer, or when the object was deleted without a grace period. A pod in its
/// graceful termination stays while its kubelet writes status; the kubelet then
/// deletes it with grace 0.
fn delete_during_update(rt: &ResourceType, old: &Value) -> bool {
    if strategy::has_pending_finalizers(rt, old) {
        return true;
    }
    old.pointer("/metadata/deletionGracePeriodSeconds")
        .and_then(Value::as_i64)
        .unwrap_or(0)
        == 0
}

fn comparable(v: &Value) -> Value {
    let mut v = v.clone();
    if let Some(m) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        m.remove("resourceVersion");
        m.remove("managedFields");
    }
    v
}

impl Resources {
    pub fn new(store: Store, registry: Arc<Registry>) -> Resources {
        Resources { store, registry }
    }

    /// How lists merge: for strategic merge patch (`apply == false`) or for
    /// managed fields and server-side apply (which use `listType` keys).
    fn list_types(
        &self,
        rt: &ResourceType,
        version: &str,
        apply: bool,
    ) -> Box<dyn ListTypes + Send + Sync> {
        if rt.builtin {
            Box::new(if apply {
                BuiltinListTypes::for_apply(&rt.group, &rt.kind)
            } else {
                BuiltinListTypes::for_kind(&rt.group, &rt.kind)
            })
        } else if let Some(s) = rt.schemas.get(version) {
            Box::new(s.as_ref().clone())
        } else {
            Box::new(AllAtomic)
        }
    }

    /// Serves (or stops serving) what a stored CRD declares, the moment it is
    /// written, so custom resources can be created right after their CRD.
    fn after_write(&self, rt: &ResourceType, stored: &Stored, gone: bool) {
        if rt.group != "apiextensions.k8s.io" || rt.resource != "customresourcedefinitions" {
            return;
        }
        let v = stored.value();
        match super::crd::resource_type(&v) {
            Ok(t) if gone => self.registry.remove(&t.group, &t.resource),
            Ok(t) => self.registry.insert(t),
            Err(causes) => {
                tracing::warn!(crd = meta::name(&v), ?causes, "stored CRD cannot be served")
            }
        }
    }

    /// Serves every stored CRD (at start).
    pub fn load_crds(&self) {
        let Some(rt) =
            self.registry
                .lookup("apiextensions.k8s.io", "v1", "customresourcedefinitions")
        else {
            return;
        };
        let snap = self.store.snapshot();
        for s in snap.range(&rt.prefix(None), None) {
            self.after_write(&rt, s, false);
        }
    }

    pub fn get(&self, rt: &ResourceType, ns: &str, name: &str) -> ApiResult<Arc<Stored>> {
        self.store
            .get(&rt.key(ns, name))
            .ok_or_else(|| ApiError::not_found(rt, name))
    }

    /// The object's JSON as the client asked for it (`apiVersion` of the
    /// requested version; custom resources convert with strategy `None`).
    pub fn render(&self, rt: &ResourceType, version: &str, stored: &Stored) -> Bytes {
        if super::events::is_view(&rt.group, &rt.resource) {
            return Bytes::from(
                serde_json::to_vec(&super::events::to_events_v1(&stored.value()))
                    .unwrap_or_default(),
            );
        }
        let want = rt.api_version(version);
        // The hot path (every LIST item, every watch event for every watcher):
        // served as stored, no parse.
        if stored.api_version == want {
            return stored.json.clone();
        }
        let mut v = stored.value();
        v["apiVersion"] = Value::String(want);
        Bytes::from(serde_json::to_vec(&v).unwrap_or_default())
    }

    fn check_namespace(&self, rt: &ResourceType, ns: &str) -> ApiResult<()> {
        if !rt.namespaced {
            return Ok(());
        }
        let nsrt = self
            .registry
            .lookup("", "v1", "namespaces")
            .expect("namespaces are built in");
        match self.store.get(&nsrt.key("", ns)) {
            None => Err(ApiError::namespace_not_found(ns)),
            Some(n) if meta::is_deleting(&n.value()) => Err(ApiError::forbidden(format!(
                "{} \"{}\" is forbidden: unable to create new content in namespace {ns} because it is being terminated",
                rt.qualified(),
                "",
            ))),
            Some(_) => Ok(()),
        }
    }

    /// Checks `apiVersion`/`kind` of a body against the URL, fills them in when
    /// absent, and places the object in the request's namespace.
    fn normalize(
        &self,
        rt: &ResourceType,
        version: &str,
        ns: &str,
        obj: &mut Value,
    ) -> ApiResult<()> {
        if !obj.is_object() {
            return Err(ApiError::bad_request(format!(
                "the body of a {} must be a JSON object",
                rt.kind
            )));
        }
        let want = rt.api_version(version);
        match obj.get("apiVersion").and_then(Value::as_str) {
            Some(av) if av != want && !rt.versions.iter().any(|v| rt.api_version(v) == av) => {
                return Err(ApiError::bad_request(format!(
                    "the API version in the data ({av}) does not match the expected API version ({want})"
                )));
            }
            _ => {}
        }
        match obj.get("kind").and_then(Value::as_str) {
            Some(k) if k != rt.kind => {
                return Err(ApiError::bad_request(format!(
                    "the kind in the data ({k}) does not match the expected kind ({})",
                    rt.kind
                )));
            }
            _ => {}
        }
        // Objects are stored at the storage version.
        obj["apiVersion"] = Value::String(rt.api_version(rt.storage_version()));
        obj["kind"] = Value::String(rt.kind.clone());
        let m = meta::meta_mut(obj);
        if rt.namespaced {
            match m.get("namespace").and_then(Value::as_str) {
                Some(n) if !n.is_empty() && n != ns => {
                    return Err(ApiError::bad_request(
                        "the namespace of the provided object does not match the namespace sent on the request",
                    ));
                }
                _ => {
                    m.insert("namespace".into(), Value::String(ns.to_string()));
                }
            }
        } else {
            m.remove("namespace");
        }
        if super::events::is_view(&rt.group, &rt.resource) {
            *obj = super::events::to_core(obj);
        }
        Ok(())
    }

    /// Defaults, prunes and validates a custom resource against its schema,
    /// and validates built-in kinds.
    fn admit(
        &self,
        rt: &ResourceType,
        version: &str,
        obj: &mut Value,
        opts: &WriteOptions,
    ) -> ApiResult<()> {
        if let Some(schema) = rt.schemas.get(version) {
            schema.default(obj);
            let unknown = schema.prune(obj);
            if !unknown.is_empty() && opts.field_validation == FieldValidation::Strict {
                let list: Vec<String> = unknown
                    .iter()
                    .map(|f| format!("unknown field \"{f}\""))
                    .collect();
                return Err(ApiError::bad_request(format!(
                    "strict decoding error: {}",
                    list.join(", ")
                )));
            }
            let causes: Vec<Cause> = schema
                .validate(obj)
                .into_iter()
                .map(|c| Cause {
                    reason: c.reason,
                    message: c.message,
                    field: c.field,
                })
                .collect();
            if !causes.is_empty() {
                return Err(ApiError::invalid(rt, meta::name(obj), causes));
            }
        }
        let causes = strategy::validate(rt, obj);
        if !causes.is_empty() {
            return Err(ApiError::invalid(rt, meta::name(obj), causes));
        }
        Ok(())
    }

    pub async fn create(
        &self,
        rt: &ResourceType,
        version: &str,
        ns: &str,
        mut obj: Value,
        opts: &WriteOptions,
    ) -> ApiResult<Arc<Stored>> {
        self.normalize(rt, version, ns, &mut obj)?;
        {
            let m = meta::meta_mut(&mut obj);
            let name = m
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            if name.is_empty() {
                match m.get("generateName").and_then(Value::as_str) {
                    Some(g) if !g.is_empty() => {
                        let g = g.to_string();
                        m.insert("name".into(), Value::String(meta::generate_name(&g)));
                    }
                    _ => {
                        return Err(ApiError::invalid(
                            rt,
                            "",
                            vec![Cause {
                                reason: "FieldValueRequired".into(),
                                message: "Required value: name or generateName is required".into(),
                                field: "metadata.name".into(),
                            }],
                        ));
                    }
                }
            }
            for server_set in [
                "resourceVersion",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
                "selfLink",
            ] {
                m.remove(server_set);
            }
            m.insert("uid".into(), Value::String(meta::new_uid()));
            m.insert(
                "creationTimestamp".into(),
                Value::String(meta::now_rfc3339()),
            );
            m.insert("generation".into(), json!(1));
        }
        strategy::prepare_for_create(rt, &mut obj);
        self.admit(rt, version, &mut obj, opts)?;
        self.check_namespace(rt, ns)?;
        let name = meta::name(&obj).to_string();
        let lists = self.list_types(rt, version, true);
        if obj.pointer("/metadata/managedFields").is_none() {
            obj = managedfields::update_scoped(
                None,
                &obj,
                &opts.field_manager,
                &rt.api_version(version),
                lists.as_ref(),
                &meta::now_rfc3339(),
                &scope(rt, Sub::Main),
            );
        }
        if opts.dry_run {
            let json = Bytes::from(serde_json::to_vec(&obj).unwrap_or_default());
            return Ok(Arc::new(super::store::make_stored(
                Arc::from(rt.key(ns, &name)),
                0,
                json,
                &obj,
            )));
        }
        let event = self
            .store
            .put(&rt.key(ns, &name), Expect::Absent, obj)
            .await
            .map_err(|e| store_error(rt, &name, e))?;
        self.after_write(rt, &event.object, false);
        Ok(event.object.clone())
    }

    /// Turns a client's new object into what will be stored over `old`:
    /// server-owned metadata kept, status or spec kept per subresource,
    /// generation bumped on spec changes, schema and validation applied.
    fn prepare_update(
        &self,
        rt: &ResourceType,
        version: &str,
        ns: &str,
        old: &Value,
        mut new: Value,
        sub: Sub,
        opts: &WriteOptions,
    ) -> ApiResult<Value> {
        self.normalize(rt, version, ns, &mut new)?;
        let name = meta::name(old).to_string();
        let new_name = meta::name(&new);
        if !new_name.is_empty() && new_name != name {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({new_name}) does not match the name on the URL ({name})"
            )));
        }
        if sub == Sub::Status {
            // A status write changes status and nothing else.
            let mut merged = old.clone();
            match new.get("status") {
                Some(s) => merged["status"] = s.clone(),
                None => {
                    merged.as_object_mut().map(|o| o.remove("status"));
                }
            }
            if let Some(mf) = new.pointer("/metadata/managedFields") {
                meta::meta_mut(&mut merged).insert("managedFields".into(), mf.clone());
            }
            new = merged;
        } else {
            if rt.status {
                match old.get("status") {
                    Some(s) => new["status"] = s.clone(),
                    None => {
                        new.as_object_mut().map(|o| o.remove("status"));
                    }
                }
            }
            let old_meta = meta::meta(old).cloned().unwrap_or_default();
            let m = meta::meta_mut(&mut new);
            m.insert("name".into(), Value::String(name.clone()));
            for kept in [
                "uid",
                "creationTimestamp",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
                "generation",
            ] {
                match old_meta.get(kept) {
                    Some(v) => m.insert(kept.into(), v.clone()),
                    None => m.remove(kept),
                };
            }
            let generation = old_meta
                .get("generation")
                .and_then(Value::as_i64)
                .unwrap_or(1);
            if meta::spec_part(old, rt.status) != meta::spec_part(&new, rt.status) {
                meta::meta_mut(&mut new).insert("generation".into(), json!(generation + 1));
            }
            // Finalizers cannot be added to an object on its way out.
            if meta::is_deleting(old) {
                let before = meta::finalizers(old);
                let after: Vec<String> = meta::finalizers(&new)
                    .into_iter()
                    .filter(|f| before.contains(f))
                    .collect();
                meta::set_finalizers(&mut new, after);
            }
        }
        self.admit(rt, version, &mut new, opts)?;
        Ok(new)
    }

    /// Writes `new` over `old` (compare-and-swap on `old`'s revision). A
    /// no-op write stores nothing and returns `old`; removing the last
    /// finalizer of a deleted object deletes it.
    async fn commit_update(
        &self,
        rt: &ResourceType,
        version: &str,
        old: &Arc<Stored>,
        old_value: &Value,
        mut new: Value,
        opts: &WriteOptions,
        managed: bool,
        sub: Sub,
    ) -> Result<Arc<Stored>, StoreError> {
        if comparable(old_value) == comparable(&new) {
            return Ok(old.clone());
        }
        if !managed {
            let lists = self.list_types(rt, version, true);
            new = managedfields::update_scoped(
                Some(old_value),
                &new,
                &opts.field_manager,
                &rt.api_version(version),
                lists.as_ref(),
                &meta::now_rfc3339(),
                &scope(rt, sub),
            );
        }
        if opts.dry_run {
            let json = Bytes::from(serde_json::to_vec(&new).unwrap_or_default());
            return Ok(Arc::new(super::store::make_stored(
                old.key.clone(),
                old.rv,
                json,
                &new,
            )));
        }
        if meta::is_deleting(&new)
            && !strategy::has_pending_finalizers(rt, &new)
            && delete_during_update(rt, old_value)
        {
            let event = self
                .store
                .delete_as(&old.key, Expect::Rv(old.rv), new)
                .await?;
            self.after_write(rt, &event.object, true);
            return Ok(event.object.clone());
        }
        let event = self.store.put(&old.key, Expect::Rv(old.rv), new).await?;
        self.after_write(rt, &event.object, false);
        Ok(event.object.clone())
    }

    /// PUT.
    pub async fn update(
        &self,
        rt: &ResourceType,
        version: &str,
        ns: &str,
        name: &str,
        sub: Sub,
        obj: Value,
        opts: &WriteOptions,
    ) -> ApiResult<Written> {
        let client_rv = meta::meta_str(&obj, "resourceVersion")
            .filter(|s| !s.is_empty())
            .map(str::to_string);
        if self.store.get(&rt.key(ns, name)).is_none() {
            if strategy::allow_create_on_update(rt) && sub == Sub::Main {
                let mut obj = obj;
                meta::meta_mut(&mut obj).insert("name".into(), Value::String(name.into()));
                let object = self.create(rt, version, ns, obj, opts).await?;
                return Ok(Written {
                    object,
                    created: true,
                });
            }
            return Err(ApiError::not_found(rt, name));
        };
        let expected = match &client_rv {
            Some(rv) => Some(rv.parse::<u64>().map_err(|_| {
                ApiError::bad_request(format!(
                    "invalid resourceVersion \"{rv}\" for {} \"{name}\"",
                    rt.qualified()
                ))
            })?),
            None if strategy::allow_unconditional_update(rt) || sub == Sub::Status => None,
            None => {
                return Err(ApiError::invalid(
                    rt,
                    name,
                    vec![Cause {
                        reason: "FieldValueInvalid".into(),
                        message: "Invalid value: 0: must be specified for an update".into(),
                        field: "metadata.resourceVersion".into(),
                    }],
                ));
            }
        };
        self.read_modify_write(
            rt,
            version,
            ns,
            name,
            expected,
            sub,
            |old_value| {
                let new =
                    self.prepare_update(rt, version, ns, old_value, obj.clone(), sub, opts)?;
                Ok((new, false))
            },
            opts,
        )
        .await
        .map(|object| Written {
            object,
            created: false,
        })
    }

    /// Reads, applies `mutate`, and compare-and-swaps; retries on a lost race
    /// unless the client pinned a resourceVersion (then it is a 409).
    async fn read_modify_write(
        &self,
        rt: &ResourceType,
        version: &str,
        ns: &str,
        name: &str,
        client_rv: Option<u64>,
        sub: Sub,
        mut mutate: impl FnMut(&Value) -> ApiResult<(Value, bool)>,
        opts: &WriteOptions,
    ) -> ApiResult<Arc<Stored>> {
        let key = rt.key(ns, name);
        let deadline = std::time::Instant::now() + RETRY_FOR;
        while retrying(deadline) {
            let old = self
                .store
                .get(&key)
                .ok_or_else(|| ApiError::not_found(rt, name))?;
            if let Some(rv) = client_rv
                && rv != old.rv
            {
                return Err(ApiError::conflict(rt, name));
            }
            let old_value = old.value();
            let (new, managed) = mutate(&old_value)?;
            match self
                .commit_update(rt, version, &old, &old_value, new, opts, managed, sub)
                .await
            {
                Ok(obj) => return Ok(obj),
                Err(StoreError::Conflict { .. }) if client_rv.is_none() => continue,
                Err(StoreError::NotFound) if client_rv.is_none() => continue,
                Err(e) => return Err(store_error(rt, name, e)),
            }
        }
        Err(ApiError::conflict_msg(
            rt,
            name,
            "too many concurrent writers; try again",
        ))
    }

    /// PATCH of every kind, including server-side apply (which may create).
    pub async fn patch(
        &self,
        rt: &ResourceType,
        version: &str,
        ns: &str,
        name: &str,
        sub: Sub,
        body: PatchBody,
        opts: &WriteOptions,
    ) -> ApiResult<Written> {
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
        let key = rt.key(ns, name);
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
            let obj = managedfields::apply_scoped(
                None,
                &obj,
                &opts.field_manager,
                &rt.api_version(version),
                opts.force,
                lists.as_ref(),
                &meta::now_rfc3339(),
                &scope(rt, sub),
            )
            .map_err(apply_error)?;
            match self.create(rt, version, ns, obj, opts).await {
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
                rt,
                version,
                ns,
                name,
                client_rv,
                sub,
                |stored| {
                    // Patches apply to the object as the client sees it.
                    let view;
                    let old = if super::events::is_view(&rt.group, &rt.resource) {
                        view = super::events::to_events_v1(stored);
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
                            patches::json(&mut v, p)
                                .map_err(|e| ApiError::invalid_patch(e.to_string()))?;
                            (v, false)
                        }
                        PatchBody::Strategic(p) => {
                            let v = patches::strategic(old, p, smp_lists.as_ref())
                                .map_err(|e| ApiError::invalid_patch(e.to_string()))?;
                            (v, false)
                        }
                        PatchBody::Apply(applied) => {
                            let v = managedfields::apply_scoped(
                                Some(old),
                                applied,
                                &opts.field_manager,
                                &rt.api_version(version),
                                opts.force,
                                lists.as_ref(),
                                &meta::now_rfc3339(),
                                &scope(rt, sub),
                            )
                            .map_err(apply_error)?;
                            (v, true)
                        }
                    };
                    let new = self.prepare_update(rt, version, ns, stored, patched, sub, opts)?;
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

    /// DELETE: finalizers and grace periods make it a mark (deletionTimestamp);
    /// otherwise the object is gone at once.
    pub async fn delete(
        &self,
        rt: &ResourceType,
        ns: &str,
        name: &str,
        opts: &DeleteOptions,
    ) -> ApiResult<Deleted> {
        let key = rt.key(ns, name);
        let deadline = std::time::Instant::now() + RETRY_FOR;
        while retrying(deadline) {
            let old = self
                .store
                .get(&key)
                .ok_or_else(|| ApiError::not_found(rt, name))?;
            let mut value = old.value();
            if let Some(uid) = &opts.precondition_uid
                && uid != meta::uid(&value)
            {
                return Err(ApiError::conflict_msg(
                    rt,
                    name,
                    &format!(
                        "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                        meta::uid(&value)
                    ),
                ));
            }
            if let Some(rv) = &opts.precondition_rv
                && *rv != old.rv.to_string()
            {
                return Err(ApiError::conflict_msg(
                    rt,
                    name,
                    &format!(
                        "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
                        old.rv
                    ),
                ));
            }
            let mut finalizers = meta::finalizers(&value);
            match opts.propagation {
                Some(Propagation::Orphan) if !finalizers.iter().any(|f| f == "orphan") => {
                    finalizers.push("orphan".into())
                }
                Some(Propagation::Foreground)
                    if !finalizers.iter().any(|f| f == "foregroundDeletion") =>
                {
                    finalizers.push("foregroundDeletion".into())
                }
                _ => {}
            }
            let graceful = strategy::needs_graceful_delete(rt, &value);
            let grace = if graceful {
                opts.grace_period_seconds
                    .or_else(|| strategy::default_grace(rt, &value))
                    .unwrap_or(0)
                    .max(0)
            } else {
                0
            };
            meta::set_finalizers(&mut value, finalizers);
            let pending = strategy::has_pending_finalizers(rt, &value);
            if !pending && grace == 0 {
                if opts.dry_run {
                    return Ok(Deleted {
                        object: old,
                        gone: true,
                    });
                }
                match self.store.delete(&key, Expect::Rv(old.rv)).await {
                    Ok(e) => {
                        self.after_write(rt, &e.object, true);
                        return Ok(Deleted {
                            object: e.object.clone(),
                            gone: true,
                        });
                    }
                    Err(StoreError::Conflict { .. }) => continue,
                    Err(e) => return Err(store_error(rt, name, e)),
                }
            }
            // Mark for deletion. A later delete may shorten a pod's grace period.
            let m = meta::meta_mut(&mut value);
            let existing = m.get("deletionGracePeriodSeconds").and_then(Value::as_i64);
            if m.get("deletionTimestamp").is_none() || existing.is_some_and(|g| grace < g) {
                m.insert(
                    "deletionTimestamp".into(),
                    Value::String(meta::rfc3339_in(grace)),
                );
                if graceful || existing.is_some() {
                    m.insert("deletionGracePeriodSeconds".into(), json!(grace));
                }
            }
            if rt.group.is_empty() && rt.resource == "namespaces" {
                value["status"]["phase"] = json!("Terminating");
            }
            if opts.dry_run {
                return Ok(Deleted {
                    object: old,
                    gone: false,
                });
            }
            match self.store.put(&key, Expect::Rv(old.rv), value).await {
                Ok(e) => {
                    return Ok(Deleted {
                        object: e.object.clone(),
                        gone: false,
                    });
                }
                Err(StoreError::Conflict { .. }) => continue,
                Err(e) => return Err(store_error(rt, name, e)),
            }
        }
        Err(ApiError::conflict_msg(
            rt,
            name,
            "too many concurrent writers; try again",
        ))
    }

    /// Read-modify-write for the server's own controllers: `mutate` returns the
    /// new object, or `None` to leave it alone. Bypasses client validation of
    /// server-owned fields but keeps every storage rule (finalizers, CAS).
    pub async fn modify(
        &self,
        rt: &ResourceType,
        ns: &str,
        name: &str,
        mut mutate: impl FnMut(&Value) -> Option<Value>,
    ) -> ApiResult<Option<Arc<Stored>>> {
        let key = rt.key(ns, name);
        let opts = WriteOptions {
            field_manager: "wasmlet-apiserver".into(),
            ..Default::default()
        };
        let deadline = std::time::Instant::now() + RETRY_FOR;
        while retrying(deadline) {
            let Some(old) = self.store.get(&key) else {
                return Ok(None);
            };
            let old_value = old.value();
            let Some(new) = mutate(&old_value) else {
                return Ok(Some(old));
            };
            let version = rt.storage_version().to_string();
            match self
                .commit_update(rt, &version, &old, &old_value, new, &opts, false, Sub::Main)
                .await
            {
                Ok(obj) => return Ok(Some(obj)),
                Err(StoreError::Conflict { .. }) => continue,
                Err(StoreError::NotFound) => return Ok(None),
                Err(e) => return Err(store_error(rt, name, e)),
            }
        }
        Err(ApiError::conflict_msg(
            rt,
            name,
            "too many concurrent writers; try again",
        ))
    }
}

fn patch_rv(body: &PatchBody) -> Option<u64> {
    let v = match body {
        PatchBody::Merge(p) | PatchBody::Strategic(p) | PatchBody::Apply(p) => p,
        PatchBody::Json(_) => return None,
    };
    meta::meta_str(v, "resourceVersion").and_then(|s| s.parse().ok())
}

/// Which fields a write may own: status writes own status, main-resource
/// writes of kinds with a status subresource own everything but status.
fn scope(rt: &ResourceType, sub: Sub) -> Scope {
    match sub {
        Sub::Status => Scope {
            subresource: Some("status".into()),
            ignored: vec![vec!["spec".into()]],
        },
        Sub::Main if rt.status => Scope {
            subresource: None,
            ignored: vec![vec!["status".into()]],
        },
        Sub::Main => Scope {
            subresource: None,
            ignored: vec![],
        },
    }
}

fn apply_error(e: ApplyError) -> ApiError {
    let c = match e {
        ApplyError::Conflicts(c) => c,
        ApplyError::Invalid(m) => return ApiError::new(422, "Invalid", m),
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

impl ApiError {
    fn invalid_patch(message: String) -> ApiError {
        ApiError::new(422, "Invalid", message)
    }
}
