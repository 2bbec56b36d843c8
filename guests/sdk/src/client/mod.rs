//! The typed Kubernetes client: objects in and out as k8s-openapi / kube types.
//!
//! Every method works for any `K: kube::Resource<DynamicType = ()>` (all k8s-openapi
//! types and every `#[derive(CustomResource)]` type); the host checks each call against
//! the plugin manifest, so a call it does not grant returns [`ClientError::Denied`].
//!
//! ```no_run
//! use k8s_openapi::api::core::v1::{ConfigMap, Pod};
//! use wasmlet_sdk::client::{Client, DeleteParams, ListParams, Patch};
//!
//! # fn demo() -> Result<(), wasmlet_sdk::client::ClientError> {
//! let client = Client::new();
//! let pod: Pod = client.get("default", "web-0")?;
//! let maybe: Option<ConfigMap> = client.get_opt("default", "settings")?;
//! let pods: Vec<Pod> = client.list(&ListParams::namespaced("default").labels("app=web"))?;
//! client.patch::<Pod>("default", "web-0", &Patch::merge(serde_json::json!({
//!     "metadata": { "labels": { "seen": "yes" } }
//! })))?;
//! client.delete::<ConfigMap>("default", "old", &DeleteParams::background())?;
//! client.evict("default", "web-1")?;
//! // The same calls in the host's named cluster "eu-west" (`--cluster eu-west=KUBECONFIG`).
//! let remote: Option<ConfigMap> = client.cluster("eu-west").get_opt("default", "settings")?;
//! # Ok(()) }
//! ```

mod error;
mod event;
mod mirror;
mod object_ref;
mod params;

use kube::Resource;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::bindings::{client as raw, types};
use crate::host::with_host;

pub use error::ClientError;
pub use event::{Event, EventType};
pub use mirror::{Mirror, Synced, key_of};
pub use object_ref::ObjectRef;
pub use params::{DeleteParams, ListParams, Patch, Propagation};

/// An answer of [`Client::list_changes`]: the contract's `changes`, decoded.
#[derive(Debug, Clone, PartialEq)]
pub struct Changes<K> {
    /// Selected objects created or changed since the cursor.
    pub applied: Vec<K>,
    /// Keys (`namespace/name`, or `name`) deleted or no longer selected; drop
    /// them before storing `applied`.
    pub removed: Vec<String>,
    /// Pass this as `since` next time.
    pub cursor: u64,
    /// `applied` is the whole selection: drop everything kept before.
    pub reset: bool,
}

/// The typed client in one cluster: [`Client`] for the host's own cluster,
/// [`ClusterClient`] for one of its named clusters. It holds nothing but where
/// its calls go (the host keeps the connections, caches and credentials), so
/// make one wherever it is needed, or use `Context::client`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TypedClient<C> {
    via: C,
}

/// The typed client of the host's own cluster (the contract's `client`).
pub type Client = TypedClient<Own>;

/// The typed client of one of the host's *named* clusters (the contract's
/// `clusters`), for global reconcilers that act on regional clusters: the same
/// calls as [`Client`] but `evict`, `bind` and events, which belong to the
/// host's own cluster. A cluster the manifest does not grant answers
/// [`ClientError::Denied`]; one the host was not given answers
/// [`ClientError::Invalid`]; both messages name it.
///
/// ```no_run
/// # fn demo(ctx: &wasmlet_sdk::reconciler::Context) -> Result<(), wasmlet_sdk::client::ClientError> {
/// use k8s_openapi::api::core::v1::ConfigMap;
/// use wasmlet_sdk::client::Patch;
/// let eu = ctx.cluster("eu-west");
/// let cm: ConfigMap = eu.patch("default", "settings", &Patch::apply(serde_json::json!({
///     "apiVersion": "v1", "kind": "ConfigMap",
///     "metadata": {"name": "settings", "namespace": "default"},
///     "data": {"size": "small"},
/// }), "my-controller").force())?;
/// # Ok(()) }
/// ```
pub type ClusterClient = TypedClient<Named>;

/// Where a [`Client`]'s calls go: the host's own cluster.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Own;

/// Where a [`ClusterClient`]'s calls go: the named cluster it holds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Named(String);

impl Client {
    /// The client of the host's own cluster (what `ctx.client()` returns).
    pub fn new() -> Self {
        TypedClient { via: Own }
    }

    /// The same typed client in the host's named cluster `name` (`wasmlet up|run
    /// --cluster NAME=KUBECONFIG`; the manifest's `[clusters.NAME]` says what is
    /// allowed there).
    pub fn cluster(&self, name: &str) -> ClusterClient {
        ClusterClient::new(name)
    }

    /// What changed among the objects `params` selects since `since` (a
    /// cursor an earlier answer gave; 0 for everything). [`Mirror`] keeps a
    /// selection with this; call it directly only to keep your own.
    pub fn list_changes<K>(
        &self,
        params: &ListParams,
        since: u64,
    ) -> Result<Changes<K>, ClientError>
    where
        K: Resource<DynamicType = ()> + DeserializeOwned,
    {
        let (of, params) = (type_ref::<K>(), params.to_raw());
        let c = with_host(|h| h.list_changes(&of, &params, since))?;
        Ok(Changes {
            applied: c
                .applied
                .iter()
                .map(|json| decode(json))
                .collect::<Result<_, _>>()?,
            removed: c.removed,
            cursor: c.cursor,
            reset: c.reset,
        })
    }

    /// [`Client::list_changes`] with each object turned into its key and
    /// `view` as soon as it is decoded, so that a whole selection (a reset)
    /// is never held decoded at once: only its JSON, emptied as it is read,
    /// and the views ([`Mirror`]'s memory is then its views, not the objects).
    pub(crate) fn list_changes_viewed<K, V>(
        &self,
        params: &ListParams,
        since: u64,
        mut view: impl FnMut(K) -> V,
    ) -> Result<Changes<(String, V)>, ClientError>
    where
        K: Resource<DynamicType = ()> + DeserializeOwned,
    {
        let (of, params) = (type_ref::<K>(), params.to_raw());
        let c = with_host(|h| h.list_changes(&of, &params, since))?;
        let mut applied = Vec::with_capacity(c.applied.len());
        for json in c.applied {
            let obj: K = decode(&json)?;
            drop(json);
            applied.push((key_of(obj.meta()), view(obj)));
        }
        Ok(Changes {
            applied,
            removed: c.removed,
            cursor: c.cursor,
            reset: c.reset,
        })
    }

    /// Evicts a pod (honours PodDisruptionBudgets: `TooManyRequests` when one blocks it).
    pub fn evict(&self, namespace: &str, name: &str) -> Result<(), ClientError> {
        self.evict_with(namespace, name, &DeleteParams::default())
    }

    /// [`Client::evict`] with delete options (grace period, preconditions).
    pub fn evict_with(
        &self,
        namespace: &str,
        name: &str,
        params: &DeleteParams,
    ) -> Result<(), ClientError> {
        Ok(with_host(|h| h.evict(namespace, name, &params.to_raw()))?)
    }

    /// Assigns a pod to `node` through the `pods/binding` subresource, as a
    /// scheduler does (manifest: `create` on `pods/binding`). `Conflict` when the
    /// pod is already assigned or being deleted.
    pub fn bind(&self, namespace: &str, name: &str, node: &str) -> Result<(), ClientError> {
        Ok(with_host(|h| h.bind(namespace, name, node))?)
    }

    /// Creates every object of `objs` at once, each answered as
    /// [`TypedClient::create`] would, in order: the host sends the creates
    /// concurrently, so a batch (a controller's slow-start batch of pods)
    /// waits for about one round trip, not one per object. At most 500.
    pub fn create_all<'a, K>(
        &self,
        objs: impl IntoIterator<Item = &'a K>,
    ) -> Result<Vec<Result<K, ClientError>>, ClientError>
    where
        K: Resource<DynamicType = ()> + Serialize + DeserializeOwned + 'a,
    {
        let bodies = objs
            .into_iter()
            .map(encode)
            .collect::<Result<Vec<_>, _>>()?;
        let answers = with_host(|h| h.create_all(&bodies))?;
        Ok(answers
            .into_iter()
            .map(|a| a.map_err(ClientError::from).and_then(|json| decode(&json)))
            .collect())
    }

    /// Records `event`, which must name what it is about (`Event::regarding`);
    /// `Context::event` fills that in with the object being reconciled.
    pub fn event(&self, event: &Event) -> Result<(), ClientError> {
        let Some(regarding) = &event.regarding else {
            return Err(ClientError::Invalid("an event needs `regarding`".into()));
        };
        let raw_event = raw::Event {
            type_: match event.type_ {
                EventType::Normal => raw::EventType::Normal,
                EventType::Warning => raw::EventType::Warning,
            },
            reason: event.reason.clone(),
            action: event.action.clone(),
            note: event.note.clone(),
            regarding: regarding.to_raw(),
            related: event.related.as_ref().map(ObjectRef::to_raw),
        };
        Ok(with_host(|h| h.record_event(&raw_event))?)
    }
}

impl ClusterClient {
    /// A client of the cluster the host knows as `name` (`--cluster NAME=KUBECONFIG`); the manifest must grant it.
    pub fn new(name: &str) -> Self {
        TypedClient {
            via: Named(name.to_owned()),
        }
    }

    /// The cluster's name, as the host's `--cluster NAME=...` gives it.
    pub fn name(&self) -> &str {
        &self.via.0
    }
}

impl<C: sealed::Target> TypedClient<C> {
    /// The object `name` of type `K` (from the cluster's cache in the host).
    /// `namespace` is a `&str` for namespaced kinds and `None` for cluster-scoped ones.
    pub fn get<'a, K>(
        &self,
        namespace: impl Into<Option<&'a str>>,
        name: &str,
    ) -> Result<K, ClientError>
    where
        K: Resource<DynamicType = ()> + DeserializeOwned,
    {
        let target = ObjectRef::of::<K>(namespace, name).to_raw();
        decode(&with_host(|h| h.get(self.via.at(), &target))?)
    }

    /// As [`TypedClient::get`], with `None` when the object does not exist.
    pub fn get_opt<'a, K>(
        &self,
        namespace: impl Into<Option<&'a str>>,
        name: &str,
    ) -> Result<Option<K>, ClientError>
    where
        K: Resource<DynamicType = ()> + DeserializeOwned,
    {
        match self.get(namespace, name) {
            Ok(obj) => Ok(Some(obj)),
            Err(ClientError::NotFound) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The objects of type `K` that `params` selects (from the cluster's cache in the host).
    pub fn list<K>(&self, params: &ListParams) -> Result<Vec<K>, ClientError>
    where
        K: Resource<DynamicType = ()> + DeserializeOwned,
    {
        let (of, params) = (type_ref::<K>(), params.to_raw());
        let items = with_host(|h| h.list(self.via.at(), &of, &params))?;
        items.iter().map(|json| decode(json)).collect()
    }

    /// Creates `obj` (namespace from its metadata) and returns it as stored.
    pub fn create<K>(&self, obj: &K) -> Result<K, ClientError>
    where
        K: Resource<DynamicType = ()> + Serialize + DeserializeOwned,
    {
        let body = encode(obj)?;
        decode(&with_host(|h| h.create(self.via.at(), &body))?)
    }

    /// Replaces `obj`; its resourceVersion makes this fail with `Conflict` when stale.
    pub fn update<K>(&self, obj: &K) -> Result<K, ClientError>
    where
        K: Resource<DynamicType = ()> + Serialize + DeserializeOwned,
    {
        let body = encode(obj)?;
        decode(&with_host(|h| h.update(self.via.at(), &body))?)
    }

    /// Patches the object and returns it as stored; [`Patch::apply`] creates
    /// it when it is missing.
    pub fn patch<'a, K>(
        &self,
        namespace: impl Into<Option<&'a str>>,
        name: &str,
        patch: &Patch,
    ) -> Result<K, ClientError>
    where
        K: Resource<DynamicType = ()> + DeserializeOwned,
    {
        self.patch_at(ObjectRef::of::<K>(namespace, name), patch, false)
    }

    /// Patches the object's status subresource. (A reconciler returns the status of the
    /// object it reconciles in its `Action` instead: the host owns that write.)
    pub fn patch_status<'a, K>(
        &self,
        namespace: impl Into<Option<&'a str>>,
        name: &str,
        patch: &Patch,
    ) -> Result<K, ClientError>
    where
        K: Resource<DynamicType = ()> + DeserializeOwned,
    {
        self.patch_at(ObjectRef::of::<K>(namespace, name), patch, true)
    }

    fn patch_at<K: DeserializeOwned>(
        &self,
        target: ObjectRef,
        patch: &Patch,
        status: bool,
    ) -> Result<K, ClientError> {
        let (how, body) = patch.split();
        let body = serde_json::to_string(body).map_err(|e| ClientError::Decode(e.to_string()))?;
        let target = target.to_raw();
        decode(&with_host(|h| {
            h.patch(self.via.at(), &target, &how, &body, status)
        })?)
    }

    /// Deletes the object.
    pub fn delete<'a, K>(
        &self,
        namespace: impl Into<Option<&'a str>>,
        name: &str,
        params: &DeleteParams,
    ) -> Result<(), ClientError>
    where
        K: Resource<DynamicType = ()>,
    {
        let target = ObjectRef::of::<K>(namespace, name).to_raw();
        let options = params.to_raw();
        Ok(with_host(|h| h.delete(self.via.at(), &target, &options))?)
    }
}

/// Sealed: only this module's [`Own`] and [`Named`] are targets.
mod sealed {
    use crate::host::Cluster;

    /// Where a typed call goes: the host's own cluster (`client`, [`Own`]) or one
    /// of its named clusters (`clusters`, [`Named`]). Static dispatch on purpose:
    /// a guest that never names a cluster must not import `clusters` (a runtime
    /// choice would keep both imports in every guest, which then needs a host
    /// that provides `clusters`). Always inlined, so the [`Cluster`] each call
    /// passes is a constant and the host call only ever reaches one binding.
    ///
    /// [`Own`]: super::Own
    /// [`Named`]: super::Named
    pub trait Target {
        fn at(&self) -> Cluster<'_>;
    }

    impl Target for super::Own {
        #[inline(always)]
        fn at(&self) -> Cluster<'_> {
            Cluster::Own
        }
    }

    impl Target for super::Named {
        #[inline(always)]
        fn at(&self) -> Cluster<'_> {
            Cluster::Named(&self.0)
        }
    }
}

fn encode<K: Serialize>(obj: &K) -> Result<String, ClientError> {
    serde_json::to_string(obj).map_err(|e| ClientError::Decode(format!("encoding the object: {e}")))
}

/// The contract's name for kind `K`.
fn type_ref<K: Resource<DynamicType = ()>>() -> types::TypeRef {
    types::TypeRef {
        api_version: K::api_version(&()).into_owned(),
        kind: K::kind(&()).into_owned(),
    }
}

fn decode<K: DeserializeOwned>(json: &str) -> Result<K, ClientError> {
    serde_json::from_str(json).map_err(|e| {
        ClientError::Decode(format!("{} from the host: {e}", std::any::type_name::<K>()))
    })
}
