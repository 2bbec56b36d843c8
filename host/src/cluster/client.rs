//! [`Cluster`]: reads served from the shared caches when the kind has a
//! synced one (else from the API server), writes sent to the API server.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{
    Api, DeleteParams, DynamicObject, EvictParams, ListParams, Patch, PatchParams, PostParams,
    Preconditions, PropagationPolicy,
};
use serde_json::Value;

use super::cache::{Caches, KindCache};
use super::{ClientError, Resolved, Resolver};

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

/// Cluster access for plugins, built once by the CLI.
pub struct Cluster {
    resolver: Arc<Resolver>,
    /// `None`: every read goes to the API server.
    caches: Option<Arc<Caches>>,
    /// Start a kind's watch on its first read (named clusters: nothing else
    /// starts their caches); otherwise only kinds a controller watches are cached.
    lazy_watches: bool,
}

impl Cluster {
    pub fn new(resolver: Arc<Resolver>, caches: Option<Arc<Caches>>) -> Cluster {
        Cluster {
            resolver,
            caches,
            lazy_watches: false,
        }
    }

    /// Reads start the kind's watch (the read itself goes to the API server
    /// until the cache has synced).
    pub fn with_lazy_watches(mut self) -> Cluster {
        self.lazy_watches = true;
        self
    }

    /// Straight to the API server, no caches (tools, benchmarks).
    pub fn uncached(client: kube::Client) -> Cluster {
        Cluster::new(Arc::new(Resolver::new(client)), None)
    }

    pub fn client(&self) -> &kube::Client {
        self.resolver.client()
    }

    pub fn resolver(&self) -> &Resolver {
        &self.resolver
    }

    fn cached(&self, r: &Resolved) -> Option<Arc<KindCache>> {
        let caches = self.caches.as_ref()?;
        let (av, kind) = (&r.resource.api_version, &r.resource.kind);
        let cache = match caches.existing(av, kind) {
            Some(c) => c,
            None if self.lazy_watches => caches.start(r.clone()),
            None => return None,
        };
        cache.is_synced().then_some(cache)
    }

    fn api(&self, r: &Resolved, namespace: Option<&str>) -> Api<DynamicObject> {
        match (r.namespaced, namespace) {
            (true, Some(ns)) => Api::namespaced_with(self.client().clone(), ns, &r.resource),
            _ => Api::all_with(self.client().clone(), &r.resource),
        }
    }

    fn encode(obj: &DynamicObject, r: &Resolved) -> String {
        // Every object handed to a guest decodes on its own.
        super::CachedObject::from_dynamic(obj).json(&r.resource)
    }

    /// See [`ClusterAccess::cached_uid`](super::ClusterAccess::cached_uid).
    pub fn cached_uid(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Option<String> {
        self.caches
            .as_ref()?
            .existing(api_version, kind)?
            .get(namespace, name)?
            .metadata
            .uid
            .clone()
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
                .map(|o| o.json(&r.resource))
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
                .map(|o| o.json(&r.resource))
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
        let api: Api<Pod> = Api::namespaced(self.client().clone(), namespace);
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

    /// Binds a pod to `node` (`POST .../pods/NAME/binding`), then reads the pod
    /// back from the API server: the binding's answer is a Status, and the
    /// caller's expectations need the resourceVersion the binding made.
    pub async fn bind(
        &self,
        namespace: &str,
        name: &str,
        node: &str,
    ) -> Result<String, ClientError> {
        let api: Api<Pod> = Api::namespaced(self.client().clone(), namespace);
        let binding = serde_json::json!({
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name, "namespace": namespace},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        });
        let _: serde_json::Value = api
            .create_subresource("binding", name, &Default::default(), &binding)
            .await?;
        let pod = api.get(name).await?;
        Ok(pod.metadata.resource_version.unwrap_or_default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Names in a `list` answer, sorted.
    fn names(list: &[String]) -> Vec<String> {
        let mut v: Vec<String> = list
            .iter()
            .map(|o| serde_json::from_str::<Value>(o).unwrap()["metadata"]["name"].to_string())
            .collect();
        v.sort();
        v
    }

    /// The cache answers a `list` as the API server does: a namespace's own
    /// objects (through the cache's namespace index), and for a
    /// cluster-scoped kind every object whatever namespace is named.
    #[tokio::test]
    async fn cached_lists_answer_as_the_api_server_does() {
        let (_dir, server, client) = crate::apiserver::test_server().await;
        let resolver = Arc::new(Resolver::new(client.clone()));
        let caches = Caches::new(resolver.clone());
        let cached = Cluster::new(resolver.clone(), Some(caches.clone()));
        let direct = Cluster::new(resolver.clone(), None);
        let namespaces = resolver.resolve("v1", "Namespace").await.unwrap();
        let cms = resolver.resolve("v1", "ConfigMap").await.unwrap();
        for ns in ["a", "b"] {
            let body = json!({"metadata": {"name": ns}});
            direct.create(&namespaces, None, &body).await.unwrap();
            for (name, app) in [("web", "web"), ("db", "db")] {
                let body =
                    json!({"metadata": {"name": name, "labels": {"app": app}}, "data": {"ns": ns}});
                direct.create(&cms, Some(ns), &body).await.unwrap();
            }
        }
        for kind in ["ConfigMap", "Namespace"] {
            caches.cache("v1", kind).await.unwrap().wait_synced().await;
        }
        for (r, ns, labels) in [
            (&cms, Some("a"), "app=web"),
            (&cms, Some("b"), ""),
            (&cms, Some("none"), ""),
            (&cms, None, "app=db"),
            (&namespaces, Some("a"), ""),
            (&namespaces, None, ""),
        ] {
            let want = names(&direct.list(r, ns, labels, None).await.unwrap());
            let got = names(&cached.list(r, ns, labels, None).await.unwrap());
            assert_eq!(got, want, "{} in {ns:?} with {labels:?}", r.resource.kind);
        }
        let in_a = cached.list(&cms, Some("a"), "", None).await.unwrap();
        assert_eq!(names(&in_a), ["\"db\"", "\"web\""]);
        assert!(in_a.iter().all(|o| o.contains(r#""ns":"a""#)));
        server.shutdown();
    }
}
