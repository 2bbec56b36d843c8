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

#[derive(Default)]
pub struct Delete {
    pub(crate) propagation: Option<PropagationPolicy>,
    pub(crate) uid: Option<String>,
    pub(crate) resource_version: Option<String>,
    pub(crate) grace_period_seconds: Option<u32>,
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
/// An answer of `list-changes` (see [`super::cache::KindCache::changes`]):
/// objects as JSON texts, removed ones by key (`namespace/name`, or `name`).
#[derive(Debug, Default, Clone, PartialEq)]
pub struct ListChanges {
    pub(crate) applied: Vec<String>,
    pub(crate) removed: Vec<String>,
    pub(crate) cursor: u64,
    pub(crate) reset: bool,
}

impl ListChanges {
    /// The answer without a journal to read: everything selected, with
    /// `reset` and cursor 0, so the next call lists again.
    pub(crate) fn everything(applied: Vec<String>) -> ListChanges {
        ListChanges {
            applied,
            reset: true,
            ..ListChanges::default()
        }
    }
}

/// A guest's selectors, parsed (an error names what is wrong with them).
fn selectors(
    labels: &str,
    fields: Option<&str>,
) -> Result<
    (
        wasmlet_apimachinery::selector::LabelSelector,
        wasmlet_apimachinery::selector::FieldSelector,
    ),
    ClientError,
> {
    let labels = wasmlet_apimachinery::selector::LabelSelector::parse(labels)
        .map_err(|e| ClientError::Invalid(e.to_string()))?;
    let fields = wasmlet_apimachinery::selector::FieldSelector::parse(fields.unwrap_or(""))
        .map_err(|e| ClientError::Invalid(e.to_string()))?;
    Ok((labels, fields))
}

pub struct Cluster {
    resolver: Arc<Resolver>,
    /// `None`: every read goes to the API server.
    caches: Option<Arc<Caches>>,
    /// Start a kind's watch on its first read (named clusters: a kind no
    /// loaded plugin's rules name there, whose cache the cluster's
    /// supervisor did not start); otherwise only kinds a controller watches are cached.
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
    pub(crate) fn with_lazy_watches(mut self) -> Cluster {
        self.lazy_watches = true;
        self
    }

    /// Straight to the API server, no caches (tools, benchmarks).
    pub fn uncached(client: kube::Client) -> Cluster {
        Cluster::new(Arc::new(Resolver::new(client)), None)
    }

    pub(crate) fn client(&self) -> &kube::Client {
        self.resolver.client()
    }

    pub(crate) fn resolver(&self) -> &Resolver {
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
    pub(crate) fn cached_uid(
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

    pub(crate) async fn get(
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

    pub(crate) async fn list(
        &self,
        r: &Resolved,
        namespace: Option<&str>,
        labels: &str,
        fields: Option<&str>,
    ) -> Result<Vec<String>, ClientError> {
        if let Some(cache) = self.cached(r) {
            let (labels, fields) = selectors(labels, fields)?;
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

    /// See [`ClusterAccess::list_changes`](super::ClusterAccess::list_changes):
    /// from the kind's cache journal when the cache is synced.
    pub(crate) async fn list_changes(
        &self,
        r: &Resolved,
        namespace: Option<&str>,
        labels: &str,
        fields: Option<&str>,
        cursor: u64,
    ) -> Result<ListChanges, ClientError> {
        let Some(cache) = self.cached(r) else {
            let all = self.list(r, namespace, labels, fields).await?;
            return Ok(ListChanges::everything(all));
        };
        let (labels, fields) = selectors(labels, fields)?;
        let c = cache.changes(cursor, namespace, &labels, &fields);
        Ok(ListChanges {
            applied: c.applied.iter().map(|o| o.json(&r.resource)).collect(),
            removed: c
                .removed
                .iter()
                .map(|o| {
                    let name = o.metadata.name.as_deref().unwrap_or_default();
                    match o.metadata.namespace.as_deref().filter(|_| r.namespaced) {
                        Some(ns) => format!("{ns}/{name}"),
                        None => name.to_string(),
                    }
                })
                .collect(),
            cursor: c.cursor,
            reset: c.reset,
        })
    }

    pub(crate) async fn create(
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

    pub(crate) async fn update(
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

    pub(crate) async fn patch(
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

    pub(crate) async fn delete(
        &self,
        r: &Resolved,
        namespace: Option<&str>,
        name: &str,
        opts: &Delete,
    ) -> Result<(), ClientError> {
        self.api(r, namespace).delete(name, &opts.params()).await?;
        Ok(())
    }

    pub(crate) async fn evict(
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
    pub(crate) async fn bind(
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
    use wasmlet_apiserver::testing::test_server;

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
        let (_dir, server, client) = test_server().await;
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

    /// `list-changes` brings what `list` would answer now, reading only
    /// the changes since the cursor: a change, a deletion, an object that
    /// leaves the selection, one that comes into it; a first call (or a
    /// cursor from nowhere) gets everything with `reset`.
    #[tokio::test]
    async fn list_changes_keep_a_copy_equal_to_a_fresh_list() {
        let (_dir, server, client) = test_server().await;
        let resolver = Arc::new(Resolver::new(client.clone()));
        let caches = Caches::new(resolver.clone());
        let cached = Cluster::new(resolver.clone(), Some(caches.clone()));
        let direct = Cluster::new(resolver.clone(), None);
        let cms = resolver.resolve("v1", "ConfigMap").await.unwrap();
        let cm = |name: &str, app: &str, v: &str| json!({"metadata": {"name": name, "labels": {"app": app}}, "data": {"v": v}});
        for name in ["a", "b", "c"] {
            direct
                .create(&cms, Some("default"), &cm(name, "web", "1"))
                .await
                .unwrap();
        }
        let cache = caches.cache("v1", "ConfigMap").await.unwrap();
        cache.wait_synced().await;
        let first = cached
            .list_changes(&cms, Some("default"), "app=web", None, 0)
            .await
            .unwrap();
        assert!(first.reset);
        assert_eq!(names(&first.applied), ["\"a\"", "\"b\"", "\"c\""]);
        // Kept as the guest would keep it: name -> JSON.
        let mut kept: std::collections::BTreeMap<String, String> = first
            .applied
            .iter()
            .map(|o| {
                (
                    serde_json::from_str::<Value>(o).unwrap()["metadata"]["name"].to_string(),
                    o.clone(),
                )
            })
            .collect();
        let caught_up = cached
            .list_changes(&cms, Some("default"), "app=web", None, first.cursor)
            .await
            .unwrap();
        assert!(!caught_up.reset && caught_up.applied.is_empty() && caught_up.removed.is_empty());

        // a changes, b is deleted, c leaves the selection, d joins it, and
        // an object of another namespace changes.
        direct
            .patch(
                &cms,
                Some("default"),
                "a",
                PatchKind::Merge,
                json!({"data": {"v": "2"}}),
                false,
            )
            .await
            .unwrap();
        direct
            .delete(&cms, Some("default"), "b", &Delete::default())
            .await
            .unwrap();
        direct
            .patch(
                &cms,
                Some("default"),
                "c",
                PatchKind::Merge,
                json!({"metadata": {"labels": {"app": "db"}}}),
                false,
            )
            .await
            .unwrap();
        direct
            .create(&cms, Some("default"), &cm("d", "web", "1"))
            .await
            .unwrap();
        let want = names(
            &direct
                .list(&cms, Some("default"), "app=web", None)
                .await
                .unwrap(),
        );
        let mut seen = caught_up.cursor;
        // The cache catches up with the writes in its own time (the bound is
        // generous: it only ends the wait for a cache that never does).
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        loop {
            let c = cached
                .list_changes(&cms, Some("default"), "app=web", None, seen)
                .await
                .unwrap();
            assert!(!c.reset);
            for key in &c.removed {
                let name = format!("\"{}\"", key.rsplit('/').next().unwrap());
                kept.remove(&name);
            }
            for o in &c.applied {
                let v: Value = serde_json::from_str(o).unwrap();
                kept.insert(v["metadata"]["name"].to_string(), o.clone());
            }
            seen = c.cursor;
            if kept.keys().cloned().collect::<Vec<_>>() == want {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "kept {:?}, want {want:?}",
                kept.keys()
            );
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        assert!(kept["\"a\""].contains(r#""v":"2""#), "a is as it is now");
        // A cursor the cache never gave starts over.
        let other = cached
            .list_changes(&cms, Some("default"), "app=web", None, seen + 1_000_000)
            .await
            .unwrap();
        assert!(other.reset);
        assert_eq!(names(&other.applied), want);
        server.shutdown();
    }
}
