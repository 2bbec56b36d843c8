//! [`ClusterClient`]: the typed client in one of the host's *named* clusters
//! (the contract's `clusters` interface), for global reconcilers that act on
//! regional clusters. Same calls as [`Client`](super::Client) but `evict`,
//! `bind` and events, which belong to the host's own cluster.

use kube::Resource;
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::{ClientError, DeleteParams, ListParams, Named, ObjectRef, Patch};

/// The typed client of the named cluster [`ClusterClient::name`]. A cluster
/// the manifest does not grant answers [`ClientError::Denied`]; one the host
/// was not given answers [`ClientError::Invalid`]; both messages name it.
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
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterClient {
    name: String,
}

impl ClusterClient {
    pub fn new(name: &str) -> Self {
        ClusterClient {
            name: name.to_owned(),
        }
    }

    /// The cluster's name, as the host's `--cluster NAME=...` gives it.
    pub fn name(&self) -> &str {
        &self.name
    }

    fn via(&self) -> Named<'_> {
        Named(&self.name)
    }

    /// The object `name` of type `K` in this cluster.
    pub fn get<'a, K>(
        &self,
        namespace: impl Into<Option<&'a str>>,
        name: &str,
    ) -> Result<K, ClientError>
    where
        K: Resource<DynamicType = ()> + DeserializeOwned,
    {
        super::get_at(&self.via(), namespace.into(), name)
    }

    /// As [`ClusterClient::get`], with `None` when the object does not exist.
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

    /// The objects of type `K` in this cluster that `params` selects.
    pub fn list<K>(&self, params: &ListParams) -> Result<Vec<K>, ClientError>
    where
        K: Resource<DynamicType = ()> + DeserializeOwned,
    {
        super::list_at(&self.via(), params)
    }

    /// Creates `obj` in this cluster and returns it as stored.
    pub fn create<K>(&self, obj: &K) -> Result<K, ClientError>
    where
        K: Resource<DynamicType = ()> + Serialize + DeserializeOwned,
    {
        super::create_at(&self.via(), obj)
    }

    /// Replaces `obj` in this cluster (`Conflict` when its resourceVersion is stale).
    pub fn update<K>(&self, obj: &K) -> Result<K, ClientError>
    where
        K: Resource<DynamicType = ()> + Serialize + DeserializeOwned,
    {
        super::update_at(&self.via(), obj)
    }

    /// Patches the object in this cluster and returns it as stored;
    /// [`Patch::apply`] creates it when it is missing.
    pub fn patch<'a, K>(
        &self,
        namespace: impl Into<Option<&'a str>>,
        name: &str,
        patch: &Patch,
    ) -> Result<K, ClientError>
    where
        K: Resource<DynamicType = ()> + DeserializeOwned,
    {
        super::patch_at(
            &self.via(),
            ObjectRef::of::<K>(namespace, name),
            patch,
            false,
        )
    }

    /// Patches the object's status subresource in this cluster.
    pub fn patch_status<'a, K>(
        &self,
        namespace: impl Into<Option<&'a str>>,
        name: &str,
        patch: &Patch,
    ) -> Result<K, ClientError>
    where
        K: Resource<DynamicType = ()> + DeserializeOwned,
    {
        super::patch_at(
            &self.via(),
            ObjectRef::of::<K>(namespace, name),
            patch,
            true,
        )
    }

    /// Deletes the object in this cluster.
    pub fn delete<'a, K>(
        &self,
        namespace: impl Into<Option<&'a str>>,
        name: &str,
        params: &DeleteParams,
    ) -> Result<(), ClientError>
    where
        K: Resource<DynamicType = ()>,
    {
        super::delete_at::<K>(&self.via(), namespace.into(), name, params)
    }
}
