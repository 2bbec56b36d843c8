//! PUT, and the compare-and-swap loop every update and patch shares.

use std::sync::Arc;

use bytes::Bytes;
use serde_json::Value;
use wasmlet_apimachinery::managedfields::{self, Writer};

use super::{Address, RETRY_FOR, Resources, Sub, WriteOptions, Written, retrying, store_error};
use crate::meta;
use crate::registry::ResourceType;
use crate::status::{ApiError, ApiResult, Cause};
use crate::store::{Expect, StoreError, Stored};
use crate::strategy;

impl Resources {
    /// Writes `new` over `old` (compare-and-swap on `old`'s revision). A
    /// no-op write stores nothing and returns `old`; removing the last
    /// finalizer of a deleted object deletes it.
    pub(super) async fn commit_update(
        &self,
        at: Address<'_>,
        old: &Arc<Stored>,
        old_value: &Value,
        mut new: Value,
        opts: &WriteOptions,
        managed: bool,
    ) -> Result<Arc<Stored>, StoreError> {
        let Address {
            rt, version, sub, ..
        } = at;
        if !managed {
            let lists = self.list_types(rt, version, true);
            let (api_version, now, scope) = (
                rt.api_version(version),
                meta::now_rfc3339(),
                opts.scope(rt, sub),
            );
            let by =
                Writer::new(&opts.field_manager, &api_version, lists.as_ref(), &now).scoped(&scope);
            new = managedfields::update(Some(old_value), &new, &by);
        }
        // After the managed fields: a write of managedFields alone (kubectl's
        // move from client-side apply) or an apply that only records its
        // manager is a change, as upstream stores it.
        if comparable(old_value) == comparable(&new) {
            return Ok(old.clone());
        }
        // The update as asked, at the stored revision: what a dry run and an
        // update that deletes answer without storing it.
        let unstored = |new: &Value| {
            let json = Bytes::from(serde_json::to_vec(new).unwrap_or_default());
            Arc::new(crate::store::make_stored(
                old.key.clone(),
                old.rv,
                json,
                new,
            ))
        };
        if opts.dry_run {
            return Ok(unstored(&new));
        }
        if meta::is_deleting(&new)
            && !strategy::has_pending_finalizers(rt, &new)
            && delete_during_update(rt, old_value)
        {
            // As upstream's deleteWithoutFinalizers: the update is not stored
            // (the object is deleted as it was last stored) but is the answer,
            // so the client sees its finalizer gone.
            let event = self.store.delete(&old.key, Expect::Rv(old.rv)).await?;
            self.after_write(rt, &event.object, true);
            return Ok(unstored(&new));
        }
        let event = self.store.put(&old.key, Expect::Rv(old.rv), new).await?;
        self.after_write(rt, &event.object, false);
        Ok(event.object.clone())
    }

    /// PUT.
    pub(crate) async fn update(
        &self,
        at: Address<'_>,
        obj: Value,
        opts: &WriteOptions,
    ) -> ApiResult<Written> {
        let Address {
            rt,
            version,
            ns,
            name,
            sub,
        } = at;
        // "0" is no precondition, as "" (upstream's versioner reads both as 0).
        let client_rv = meta::meta_str(&obj, "resourceVersion")
            .filter(|s| !s.is_empty() && *s != "0")
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
            at,
            expected,
            |old_value| {
                let new = self.prepare_update(at, old_value, obj.clone(), opts)?;
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
    pub(super) async fn read_modify_write(
        &self,
        at: Address<'_>,
        client_rv: Option<u64>,
        mut mutate: impl FnMut(&Value) -> ApiResult<(Value, bool)>,
        opts: &WriteOptions,
    ) -> ApiResult<Arc<Stored>> {
        let (rt, name, key) = (at.rt, at.name, at.key());
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
            let old_value = old.value()?;
            let (new, managed) = mutate(&old_value)?;
            crate::priority::admit_update(&self.store, &self.registry, rt, &new)?;
            if let Some(a) = &opts.admission {
                a.admit(self, rt, at.ns, at.sub, Some(&old_value), &new)?;
            }
            match self
                .commit_update(at, &old, &old_value, new, opts, managed)
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

    /// Read-modify-write for the server's own controllers: `mutate` returns the
    /// new object, or `None` to leave it alone. Bypasses client validation of
    /// server-owned fields but keeps every storage rule (finalizers, CAS).
    ///
    /// `opts` names the writer (its field manager, and the subresource a
    /// client's write through `/scale` or `/binding` is recorded under).
    pub(crate) async fn modify(
        &self,
        rt: &ResourceType,
        ns: &str,
        name: &str,
        opts: &WriteOptions,
        mut mutate: impl FnMut(&Value) -> Option<Value>,
    ) -> ApiResult<Option<Arc<Stored>>> {
        let key = rt.key(ns, name);
        let deadline = std::time::Instant::now() + RETRY_FOR;
        while retrying(deadline) {
            let Some(old) = self.store.get(&key) else {
                return Ok(None);
            };
            let old_value = old.value()?;
            let Some(new) = mutate(&old_value) else {
                return Ok(Some(old));
            };
            let at = Address {
                rt,
                version: rt.storage_version(),
                ns,
                name,
                sub: Sub::Main,
            };
            match self
                .commit_update(at, &old, &old_value, new, opts, false)
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
    }
    v
}
