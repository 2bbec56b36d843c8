//! POST: a new object with server-set metadata.

use std::sync::Arc;

use bytes::Bytes;
use serde_json::{Value, json};
use wasmlet_apimachinery::managedfields::{self, Writer};

use super::{Resources, Sub, WriteOptions, scope, store_error};
use crate::meta;
use crate::registry::ResourceType;
use crate::status::{ApiError, ApiResult, Cause};
use crate::store::{Expect, Stored};
use crate::strategy;

impl Resources {
    pub(crate) async fn create(
        &self,
        rt: &ResourceType,
        version: &str,
        ns: &str,
        obj: Value,
        opts: &WriteOptions,
    ) -> ApiResult<Arc<Stored>> {
        self.create_managed(rt, version, ns, obj, opts, false).await
    }

    /// [`Resources::create`]; `managed`: `obj`'s managedFields are final (a
    /// server-side apply that creates has recorded its applier already).
    pub(super) async fn create_managed(
        &self,
        rt: &ResourceType,
        version: &str,
        ns: &str,
        mut obj: Value,
        opts: &WriteOptions,
        managed: bool,
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
            if crate::defaults::has_generation(rt) {
                m.insert("generation".into(), json!(1));
            } else {
                m.remove("generation");
            }
        }
        strategy::prepare_for_create(rt, &mut obj);
        crate::services::allocate(&self.store, rt, &mut obj)?;
        self.admit(rt, version, &mut obj, opts, None)?;
        self.admit_rules(rt, version, &obj, None)?;
        // The mutating admission (LimitRanger) before the validating ones.
        crate::limitranger::admit_pod(&self.store, &self.registry, rt, ns, &mut obj)?;
        crate::priority::admit(&self.store, &self.registry, rt, &mut obj)?;
        if let Some(a) = &opts.admission {
            a.admit(self, rt, ns, Sub::Main, None, &obj)?;
        }
        self.check_namespace(rt, ns)?;
        // Held until the object is stored: see `resourcequota`.
        let quota = crate::resourcequota::admit(
            &self.store,
            &self.registry,
            &self.quota_gate,
            rt,
            ns,
            &obj,
        )
        .await?;
        let name = meta::name(&obj).to_string();
        let lists = self.list_types(rt, version, true);
        // As upstream (tracking starts at creation): the creator owns what it
        // set; managedFields it sent are reset (`[]`) or kept for fields it did
        // not set, never stored unchecked.
        if !managed {
            let (api_version, now, scope) = (
                rt.api_version(version),
                meta::now_rfc3339(),
                scope(rt, Sub::Main),
            );
            let by =
                Writer::new(&opts.field_manager, &api_version, lists.as_ref(), &now).scoped(&scope);
            obj = managedfields::update(None, &obj, &by);
        }
        if opts.dry_run {
            let json = Bytes::from(serde_json::to_vec(&obj).unwrap_or_default());
            return Ok(Arc::new(crate::store::make_stored(
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
        quota.charge(&self.store, &self.registry).await;
        self.after_write(rt, &event.object, false);
        Ok(event.object.clone())
    }
}
