//! APIServices, as kube-aggregator's autoregistration keeps them: one per
//! group and version this server serves (`v1.`, `v1.apps`, a CRD's
//! `v1.example.com`), labelled `kube-aggregator.kubernetes.io/automanaged`,
//! created at start and whenever a CRD adds a group version, deleted when it
//! goes, and `Available` because they are local. An APIService a user
//! stores that names a Service is kept but honestly not available: this
//! server has no aggregation layer to proxy to it.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::meta;
use crate::registry::ResourceType;
use crate::resources::{DeleteOptions, Resources, WriteOptions};
use crate::store::Event;

const AUTOMANAGED: &str = "kube-aggregator.kubernetes.io/automanaged";
const MANAGER: &str = "wasmlet-apiservice-autoregistration";

/// Upstream's priorities for the groups it serves (`apiVersionPriorities`):
/// (group, groupPriorityMinimum, versionPriority). A group not listed (a
/// CRD's) gets 1000 and 100, as the CRD autoregistration gives it.
const PRIORITIES: [(&str, i64, i64); 18] = [
    ("", 18000, 1),
    ("apiextensions.k8s.io", 16700, 15),
    ("apiregistration.k8s.io", 18000, 15),
    ("apps", 17800, 15),
    ("authentication.k8s.io", 17700, 15),
    ("authorization.k8s.io", 17600, 15),
    ("autoscaling", 17500, 30),
    ("batch", 17400, 15),
    ("certificates.k8s.io", 17300, 15),
    ("coordination.k8s.io", 16500, 15),
    ("discovery.k8s.io", 16200, 15),
    ("events.k8s.io", 17750, 15),
    ("networking.k8s.io", 17200, 15),
    ("node.k8s.io", 16300, 15),
    ("policy", 17100, 15),
    ("rbac.authorization.k8s.io", 17000, 15),
    ("scheduling.k8s.io", 16600, 15),
    ("storage.k8s.io", 16800, 15),
];

pub(crate) struct Controller {
    resources: Resources,
}

impl Controller {
    pub(crate) fn new(resources: Resources) -> Controller {
        Controller { resources }
    }

    /// Runs until the store stops; logs rather than failing.
    pub(crate) async fn run(self) {
        let reg = &self.resources.registry;
        let (Ok(crds), Ok(apis)) = (
            reg.builtin("apiextensions.k8s.io", "v1", "customresourcedefinitions"),
            reg.builtin("apiregistration.k8s.io", "v1", "apiservices"),
        ) else {
            return tracing::error!("apiservices controller: types not registered");
        };
        loop {
            let rv = self.resources.store.snapshot().rv;
            let subs = (
                self.resources.store.watch(&crds.prefix(None), rv),
                self.resources.store.watch(&apis.prefix(None), rv),
            );
            let (Ok(mut crd_sub), Ok(mut api_sub)) = subs else {
                tracing::warn!("apiservices controller: watch failed, restarting");
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                continue;
            };
            let mut seen = reg.generation();
            self.sync(&apis).await;
            // A CRD's event can come before the registry follows it (the
            // type is added or removed after the write): the registry's
            // generation is checked every second as well.
            let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
            loop {
                let e: Option<Option<std::sync::Arc<Event>>> = tokio::select! {
                    e = crd_sub.live.recv() => Some(e),
                    e = api_sub.live.recv() => Some(e),
                    _ = tick.tick() => None,
                };
                match e {
                    Some(None) => break,
                    None if reg.generation() == seen => continue,
                    _ => {}
                }
                seen = reg.generation();
                // Whatever moved, the whole set is small: compare it all.
                self.sync(&apis).await;
            }
            tracing::info!("apiservices controller: resynchronising");
        }
    }

    /// The APIServices the served group versions call for, by name.
    fn desired(&self) -> BTreeMap<String, Value> {
        let mut want = BTreeMap::new();
        let core = std::iter::once((String::new(), vec!["v1".to_string()]));
        for (group, versions) in core.chain(self.resources.registry.groups()) {
            let (min, prio) = PRIORITIES
                .iter()
                .find(|(g, ..)| *g == group)
                .map_or((1000, 100), |(_, m, p)| (*m, *p));
            let onstart = PRIORITIES.iter().any(|(g, ..)| *g == group);
            for version in versions {
                let name = format!("{version}.{group}");
                let mut spec = json!({"version": version,
                    "groupPriorityMinimum": min, "versionPriority": prio});
                if !group.is_empty() {
                    spec["group"] = json!(group);
                }
                want.insert(
                    name.clone(),
                    json!({"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
                        "metadata": {"name": name,
                            "labels": {AUTOMANAGED: if onstart { "onstart" } else { "true" }}},
                        "spec": spec}),
                );
            }
        }
        want
    }

    async fn sync(&self, rt: &ResourceType) {
        let want = self.desired();
        let have: BTreeMap<String, Value> = self
            .resources
            .store
            .snapshot()
            .range(&rt.prefix(None), None)
            .filter_map(|s| s.value().ok())
            .map(|v| (meta::name(&v).to_string(), v))
            .collect();
        let opts = WriteOptions::by(MANAGER);
        for (name, obj) in &want {
            if !have.contains_key(name)
                && let Err(e) = self
                    .resources
                    .create(rt, "v1", "", obj.clone(), &opts)
                    .await
                && e.code != 409
            {
                tracing::warn!(apiservice = %name, error = %e, "registering the APIService failed");
            }
        }
        for (name, obj) in &have {
            let managed = obj
                .pointer(&format!(
                    "/metadata/labels/{}",
                    AUTOMANAGED.replace('/', "~1")
                ))
                .is_some();
            if managed && !want.contains_key(name) {
                let gone = self
                    .resources
                    .delete(rt, "", name, &DeleteOptions::default())
                    .await;
                if let Err(e) = gone
                    .map(|_| ())
                    .or_else(|e| if e.code == 404 { Ok(()) } else { Err(e) })
                {
                    tracing::warn!(apiservice = %name, error = %e, "removing the APIService failed");
                }
            }
        }
        // Every APIService (new ones included) gets the condition it deserves.
        let names: Vec<String> = want.keys().chain(have.keys()).cloned().collect();
        for name in names {
            let _ = self
                .resources
                .modify(rt, "", &name, &opts, |cur| {
                    let cond = available(cur);
                    let now = cur.pointer("/status/conditions/0");
                    let same = now.is_some_and(|c| {
                        c["status"] == cond["status"] && c["reason"] == cond["reason"]
                    });
                    if same {
                        return None;
                    }
                    let mut v = cur.clone();
                    v["status"] = json!({"conditions": [cond]});
                    Some(v)
                })
                .await;
        }
    }
}

/// The `Available` condition: local ones always are; one that names a
/// Service is not (nothing here proxies to it).
fn available(obj: &Value) -> Value {
    let now = meta::now_rfc3339();
    if obj.pointer("/spec/service").is_none_or(Value::is_null) {
        json!({"type": "Available", "status": "True", "reason": "Local",
            "message": "Local APIServices are always available", "lastTransitionTime": now})
    } else {
        json!({"type": "Available", "status": "False", "reason": "FailedDiscoveryCheck",
            "message": "this API server has no aggregation layer: it does not proxy to APIServices backed by a Service",
            "lastTransitionTime": now})
    }
}
