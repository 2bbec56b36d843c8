//! The Kubernetes side of the plugin `client` import: resolves kinds to
//! resources (discovery, cached), checks nothing (the caller checks the
//! manifest first) and maps API errors onto the contract's error cases.
//!
//! Reads go to the API server for now; the controller engine will serve them
//! from its shared caches instead.

use std::collections::HashMap;
use std::sync::Mutex;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, EvictParams, ListParams, Patch, PatchParams,
    PostParams, Preconditions, PropagationPolicy,
};
use kube::discovery::{ApiCapabilities, Scope};
use serde_json::Value;

/// Why a client call failed: the contract's `client-error`, host side.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClientError {
    #[error("not found")]
    NotFound,
    #[error("conflict: {0}")]
    Conflict(String),
    #[error("denied: {0}")]
    Denied(String),
    #[error("invalid: {0}")]
    Invalid(String),
    #[error("too many requests")]
    TooManyRequests,
    #[error("unavailable: {0}")]
    Unavailable(String),
    #[error("{0}")]
    Other(String),
}

impl From<kube::Error> for ClientError {
    fn from(e: kube::Error) -> ClientError {
        match e {
            kube::Error::Api(s) => match s.code {
                404 => ClientError::NotFound,
                409 => ClientError::Conflict(s.message),
                400 | 415 | 422 => ClientError::Invalid(s.message),
                429 => ClientError::TooManyRequests,
                500..=599 => ClientError::Unavailable(s.message),
                _ => ClientError::Other(s.message),
            },
            kube::Error::SerdeError(e) => ClientError::Invalid(e.to_string()),
            other => ClientError::Unavailable(other.to_string()),
        }
    }
}

#[derive(Clone, Debug)]
pub struct Resolved {
    pub resource: ApiResource,
    pub namespaced: bool,
}

pub enum PatchKind {
    Merge,
    Json,
    Strategic,
    Apply { manager: String, force: bool },
}

pub struct Delete {
    pub propagation: Option<PropagationPolicy>,
    pub uid: Option<String>,
    pub resource_version: Option<String>,
    pub grace_period_seconds: Option<u32>,
}

impl Delete {
    fn params(&self) -> DeleteParams {
        DeleteParams {
            propagation_policy: self.propagation.clone(),
            grace_period_seconds: self.grace_period_seconds,
            preconditions: (self.uid.is_some() || self.resource_version.is_some()).then(|| {
                Preconditions {
                    uid: self.uid.clone(),
                    resource_version: self.resource_version.clone(),
                }
            }),
            ..Default::default()
        }
    }
}

/// Shared by every plugin; cheap to clone the client out of.
pub struct ClusterApi {
    pub client: kube::Client,
    kinds: Mutex<HashMap<(String, String), Resolved>>,
    /// The controller engine's caches, once they exist: reads of a kind with
    /// a synced cache are served from memory.
    caches: std::sync::RwLock<Option<std::sync::Weak<crate::controller::cache::Caches>>>,
}

fn split_api_version(av: &str) -> (&str, &str) {
    av.split_once('/').unwrap_or(("", av))
}

impl ClusterApi {
    pub fn new(client: kube::Client) -> ClusterApi {
        ClusterApi {
            client,
            kinds: Mutex::new(HashMap::new()),
            caches: Default::default(),
        }
    }

    pub fn use_caches(&self, caches: &std::sync::Arc<crate::controller::cache::Caches>) {
        *self.caches.write().unwrap_or_else(|p| p.into_inner()) =
            Some(std::sync::Arc::downgrade(caches));
    }

    fn cached(&self, r: &Resolved) -> Option<std::sync::Arc<crate::controller::cache::KindCache>> {
        let caches = self
            .caches
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()?
            .upgrade()?;
        caches
            .existing(&r.resource.api_version, &r.resource.kind)
            .filter(|c| c.is_synced())
    }

    /// The resource behind `apiVersion` + `kind` (discovery, cached).
    pub async fn resolve(&self, api_version: &str, kind: &str) -> Result<Resolved, ClientError> {
        let key = (api_version.to_string(), kind.to_string());
        if let Some(r) = self
            .kinds
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&key)
        {
            return Ok(r.clone());
        }
        let (group, version) = split_api_version(api_version);
        let gvk = kube::api::GroupVersionKind::gvk(group, version, kind);
        let (resource, caps): (ApiResource, ApiCapabilities) =
            kube::discovery::pinned_kind(&self.client, &gvk)
                .await
                .map_err(|e| match e {
                    kube::Error::Discovery(_) => ClientError::Invalid(format!(
                        "the server does not serve {kind} in {api_version}"
                    )),
                    other => ClientError::from(other),
                })?;
        let r = Resolved {
            resource,
            namespaced: caps.scope == Scope::Namespaced,
        };
        self.kinds
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key, r.clone());
        Ok(r)
    }

    fn api(&self, r: &Resolved, namespace: Option<&str>) -> Api<DynamicObject> {
        match (r.namespaced, namespace) {
            (true, Some(ns)) => Api::namespaced_with(self.client.clone(), ns, &r.resource),
            _ => Api::all_with(self.client.clone(), &r.resource),
        }
    }

    fn encode(obj: &DynamicObject, r: &Resolved) -> String {
        let mut v = serde_json::to_value(obj).unwrap_or(Value::Null);
        // Every object handed to a guest decodes on its own.
        v["apiVersion"] = Value::String(r.resource.api_version.clone());
        v["kind"] = Value::String(r.resource.kind.clone());
        v.to_string()
    }

    pub async fn get(
        &self,
        r: &Resolved,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<String, ClientError> {
        if let Some(cache) = self.cached(r) {
            return cache
                .get(namespace, name)
                .map(|o| Self::encode(&o, r))
                .ok_or(ClientError::NotFound);
        }
        let obj = self.api(r, namespace).get(name).await?;
        Ok(Self::encode(&obj, r))
    }

    pub async fn list(
        &self,
        r: &Resolved,
        namespace: Option<&str>,
        labels: &str,
        fields: Option<&str>,
    ) -> Result<Vec<String>, ClientError> {
        if let Some(cache) = self.cached(r) {
            let labels = wasmlet_apimachinery::selector::LabelSelector::parse(labels)
                .map_err(|e| ClientError::Invalid(e.to_string()))?;
            let fields = wasmlet_apimachinery::selector::FieldSelector::parse(fields.unwrap_or(""))
                .map_err(|e| ClientError::Invalid(e.to_string()))?;
            return Ok(cache
                .list(namespace, &labels, &fields)
                .iter()
                .map(|o| Self::encode(o, r))
                .collect());
        }
        let mut lp = ListParams::default();
        if !labels.is_empty() {
            lp = lp.labels(labels);
        }
        if let Some(f) = fields.filter(|f| !f.is_empty()) {
            lp = lp.fields(f);
        }
        let list = self.api(r, namespace).list(&lp).await?;
        Ok(list.items.iter().map(|o| Self::encode(o, r)).collect())
    }

    pub async fn create(
        &self,
        r: &Resolved,
        namespace: Option<&str>,
        obj: &Value,
    ) -> Result<String, ClientError> {
        let obj: DynamicObject =
            serde_json::from_value(obj.clone()).map_err(|e| ClientError::Invalid(e.to_string()))?;
        let created = self
            .api(r, namespace)
            .create(&PostParams::default(), &obj)
            .await?;
        Ok(Self::encode(&created, r))
    }

    pub async fn update(
        &self,
        r: &Resolved,
        namespace: Option<&str>,
        name: &str,
        obj: &Value,
    ) -> Result<String, ClientError> {
        let obj: DynamicObject =
            serde_json::from_value(obj.clone()).map_err(|e| ClientError::Invalid(e.to_string()))?;
        let updated = self
            .api(r, namespace)
            .replace(name, &PostParams::default(), &obj)
            .await?;
        Ok(Self::encode(&updated, r))
    }

    pub async fn patch(
        &self,
        r: &Resolved,
        namespace: Option<&str>,
        name: &str,
        kind: PatchKind,
        body: Value,
        status: bool,
    ) -> Result<String, ClientError> {
        let (params, patch) = match kind {
            PatchKind::Merge => (PatchParams::default(), Patch::Merge(body)),
            PatchKind::Strategic => (PatchParams::default(), Patch::Strategic(body)),
            PatchKind::Json => {
                let ops: json_patch::Patch = serde_json::from_value(body)
                    .map_err(|e| ClientError::Invalid(e.to_string()))?;
                (PatchParams::default(), Patch::Json(ops))
            }
            PatchKind::Apply { manager, force } => {
                let mut p = PatchParams::apply(&manager);
                if force {
                    p = p.force();
                }
                (p, Patch::Apply(body))
            }
        };
        let api = self.api(r, namespace);
        let obj = if status {
            api.patch_status(name, &params, &patch).await?
        } else {
            api.patch(name, &params, &patch).await?
        };
        Ok(Self::encode(&obj, r))
    }

    pub async fn delete(
        &self,
        r: &Resolved,
        namespace: Option<&str>,
        name: &str,
        opts: &Delete,
    ) -> Result<(), ClientError> {
        self.api(r, namespace).delete(name, &opts.params()).await?;
        Ok(())
    }

    pub async fn evict(
        &self,
        namespace: &str,
        name: &str,
        opts: &Delete,
    ) -> Result<(), ClientError> {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        api.evict(
            name,
            &EvictParams {
                delete_options: Some(opts.params()),
                ..Default::default()
            },
        )
        .await?;
        Ok(())
    }
}
