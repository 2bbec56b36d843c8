//! DELETE: finalizers and grace periods make it a mark; otherwise the object
//! is gone at once.

use serde_json::{Value, json};

use super::{DeleteOptions, Deleted, Propagation, RETRY_FOR, Resources, retrying, store_error};
use crate::meta;
use crate::registry::ResourceType;
use crate::status::{ApiError, ApiResult};
use crate::store::{Expect, StoreError};
use crate::strategy;

/// What kube-apiserver refuses to delete, because the cluster itself needs
/// it, with the reason its 403 gives: the three system namespaces (its
/// NamespaceLifecycle admission) and the two system PriorityClasses (their
/// storage).
pub(crate) fn immortal(rt: &ResourceType, name: &str) -> Option<&'static str> {
    match (rt.group.as_str(), rt.resource.as_str()) {
        ("", "namespaces") if ["default", "kube-system", "kube-public"].contains(&name) => {
            Some("this namespace may not be deleted")
        }
        ("scheduling.k8s.io", "priorityclasses")
            if crate::priority::SYSTEM_CLASSES
                .iter()
                .any(|(n, _)| *n == name) =>
        {
            Some("this is a system priority class and cannot be deleted")
        }
        _ => None,
    }
}

impl Resources {
    /// DELETE: finalizers and grace periods make it a mark (deletionTimestamp);
    /// otherwise the object is gone at once.
    pub(crate) async fn delete(
        &self,
        rt: &ResourceType,
        ns: &str,
        name: &str,
        opts: &DeleteOptions,
    ) -> ApiResult<Deleted> {
        if let Some(why) = immortal(rt, name) {
            return Err(ApiError::forbidden(format!(
                "{} \"{name}\" is forbidden: {why}",
                rt.qualified()
            )));
        }
        let key = rt.key(ns, name);
        let deadline = std::time::Instant::now() + RETRY_FOR;
        while retrying(deadline) {
            let old = self
                .store
                .get(&key)
                .ok_or_else(|| ApiError::not_found(rt, name))?;
            let mut value = old.value()?;
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
                // Upstream sets 0 on an object held only by finalizers too.
                if graceful || existing.is_some() || pending {
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
}
