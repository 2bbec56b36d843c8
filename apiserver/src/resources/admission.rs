//! What every write passes through before it is stored: the body checked
//! against the URL, defaults, pruning and validation, and the rules for the
//! server-owned parts of an update; and [`Admit`], the checks that depend on
//! who writes, which `resources` calls without knowing them.

use std::fmt::Debug;

use serde_json::{Value, json};

use super::{Address, Resources, Sub, WriteOptions};
use crate::meta;
use crate::registry::ResourceType;
use crate::status::{ApiError, ApiResult, Cause};
use crate::strategy;
use crate::validation;

/// An admission check a client's write carries (`WriteOptions::admission`):
/// the user-dependent ones (NodeRestriction, RBAC escalation prevention),
/// implemented above this module (`requester.rs`), so that `resources` calls
/// them through this trait and never imports them (they import `resources`).
pub(crate) trait Admit: Debug + Send + Sync {
    /// Refuses writing `new` (over `old`, for an update) when the writer may
    /// not, although the authorizer let the request through.
    fn admit(
        &self,
        resources: &Resources,
        rt: &ResourceType,
        ns: &str,
        sub: Sub,
        old: Option<&Value>,
        new: &Value,
    ) -> ApiResult<()>;
}

impl Resources {
    pub(super) fn check_namespace(&self, rt: &ResourceType, ns: &str) -> ApiResult<()> {
        if !rt.namespaced {
            return Ok(());
        }
        let nsrt = self.registry.builtin("", "v1", "namespaces")?;
        match self.store.get(&nsrt.key("", ns)) {
            None => Err(ApiError::namespace_not_found(ns)),
            Some(n) if meta::is_deleting(&n.value()?) => Err(ApiError::forbidden(format!(
                "{} \"{}\" is forbidden: unable to create new content in namespace {ns} because it is being terminated",
                rt.qualified(),
                "",
            ))),
            Some(_) => Ok(()),
        }
    }

    /// Checks `apiVersion`/`kind` of a body against the URL, fills them in when
    /// absent, and places the object in the request's namespace.
    pub(super) fn normalize(
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
            // Custom resources are decoded whatever their kind; upstream's
            // validator then refuses the wrong one as an invalid field.
            Some(k) if k != rt.kind && !rt.builtin => {
                let name = meta::meta_str(obj, "name").unwrap_or_default().to_string();
                return Err(ApiError::invalid(
                    rt,
                    &name,
                    vec![Cause {
                        reason: "FieldValueInvalid".into(),
                        message: format!("Invalid value: \"{k}\": must be {}", rt.kind),
                        field: "kind".into(),
                    }],
                ));
            }
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
        if crate::events::is_view(&rt.group, &rt.resource) {
            *obj = crate::events::to_core(obj);
        }
        Ok(())
    }

    /// Defaults, prunes and validates a custom resource against its schema,
    /// and decodes and validates built-in kinds; `old` is the stored object
    /// a main-resource update replaces (its rules come first, as upstream's).
    pub(super) fn admit(
        &self,
        rt: &ResourceType,
        version: &str,
        obj: &mut Value,
        opts: &WriteOptions,
        old: Option<&Value>,
    ) -> ApiResult<()> {
        if let Some(schema) = rt.schemas.get(version) {
            schema.default(obj);
            let unknown = schema.prune(obj);
            validation::field_problems(&unknown, &opts.fields)?;
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
        } else if rt.builtin {
            validation::decode(rt, version, obj, &opts.fields)?;
        }
        crate::defaults::apply(rt, obj, false);
        let mut causes = old
            .map(|old| validation::validate_update(rt, old, obj))
            .unwrap_or_default();
        causes.extend(strategy::validate(rt, obj, old));
        causes.extend(validation::validate(rt, obj));
        if !causes.is_empty() {
            return Err(ApiError::invalid(rt, meta::name(obj), causes));
        }
        Ok(())
    }

    /// Turns a client's new object into what will be stored over `old`:
    /// server-owned metadata kept, status or spec kept per subresource,
    /// generation bumped on spec changes, schema and validation applied.
    pub(super) fn prepare_update(
        &self,
        at: Address,
        old: &Value,
        mut new: Value,
        opts: &WriteOptions,
    ) -> ApiResult<Value> {
        let Address {
            rt,
            version,
            ns,
            sub,
            ..
        } = at;
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
            crate::services::keep_allocated(rt, old, &mut new);
            crate::defaults::keep_admitted(rt, old, &mut new);
            if crate::defaults::has_generation(rt)
                && meta::spec_part(old, rt.status) != meta::spec_part(&new, rt.status)
            {
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
        let old_main = (sub == Sub::Main).then_some(old);
        self.admit(rt, version, &mut new, opts, old_main)?;
        self.admit_rules(rt, version, &new, Some(old))?;
        let causes = strategy::validate_update(rt, old, &new);
        if !causes.is_empty() {
            return Err(ApiError::invalid(rt, &name, causes));
        }
        Ok(new)
    }
}
