//! [`ClusterAccess`]: what the plugin imports may ask of the cluster. The
//! plugin layer calls this trait and never a kube client, so its imports can
//! be served by anything that answers these (the [`Cluster`] the CLI builds,
//! or a test double).

use futures::future::BoxFuture;
use serde_json::Value;

use super::client::{Cluster, Delete, ListChanges, PatchKind};
use super::{ClientError, Resolved};

/// Reads (JSON objects as strings, `apiVersion`/`kind` set) and writes of any
/// resolved kind.
pub trait ClusterAccess: Send + Sync {
    /// The resource behind `apiVersion` + `kind`.
    fn resolve<'a>(
        &'a self,
        api_version: &'a str,
        kind: &'a str,
    ) -> BoxFuture<'a, Result<Resolved, ClientError>>;

    fn get<'a>(
        &'a self,
        r: &'a Resolved,
        namespace: Option<&'a str>,
        name: &'a str,
    ) -> BoxFuture<'a, Result<String, ClientError>>;

    /// Objects matching a label selector and an optional field selector.
    fn list<'a>(
        &'a self,
        r: &'a Resolved,
        namespace: Option<&'a str>,
        labels: &'a str,
        fields: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Vec<String>, ClientError>>;

    /// What changed in a selection since `cursor` (the `list-changes`
    /// import); without a journal, [`ListChanges::everything`].
    fn list_changes<'a>(
        &'a self,
        r: &'a Resolved,
        namespace: Option<&'a str>,
        labels: &'a str,
        fields: Option<&'a str>,
        cursor: u64,
    ) -> BoxFuture<'a, Result<ListChanges, ClientError>> {
        let _ = cursor;
        Box::pin(async move {
            let all = self.list(r, namespace, labels, fields).await?;
            Ok(ListChanges::everything(all))
        })
    }

    fn create<'a>(
        &'a self,
        r: &'a Resolved,
        namespace: Option<&'a str>,
        obj: &'a Value,
    ) -> BoxFuture<'a, Result<String, ClientError>>;

    fn update<'a>(
        &'a self,
        r: &'a Resolved,
        namespace: Option<&'a str>,
        name: &'a str,
        obj: &'a Value,
    ) -> BoxFuture<'a, Result<String, ClientError>>;

    /// A patch of the object, or of its status subresource (`status`).
    fn patch<'a>(
        &'a self,
        r: &'a Resolved,
        namespace: Option<&'a str>,
        name: &'a str,
        kind: PatchKind,
        body: Value,
        status: bool,
    ) -> BoxFuture<'a, Result<String, ClientError>>;

    fn delete<'a>(
        &'a self,
        r: &'a Resolved,
        namespace: Option<&'a str>,
        name: &'a str,
        opts: &'a Delete,
    ) -> BoxFuture<'a, Result<(), ClientError>>;

    /// The uid of the object as the shared cache shows it now, without a
    /// request (`None` when the kind is not cached or the object is absent).
    /// Expectations use it to tell a deleted object from its same-named successor.
    fn cached_uid(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Option<String>;

    /// The Eviction API (PodDisruptionBudgets apply).
    fn evict<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
        opts: &'a Delete,
    ) -> BoxFuture<'a, Result<(), ClientError>>;

    /// The `pods/binding` subresource; returns the bound pod's resourceVersion.
    fn bind<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
        node: &'a str,
    ) -> BoxFuture<'a, Result<String, ClientError>>;
}

impl ClusterAccess for Cluster {
    fn resolve<'a>(
        &'a self,
        api_version: &'a str,
        kind: &'a str,
    ) -> BoxFuture<'a, Result<Resolved, ClientError>> {
        Box::pin(self.resolver().resolve(api_version, kind))
    }

    fn get<'a>(
        &'a self,
        r: &'a Resolved,
        namespace: Option<&'a str>,
        name: &'a str,
    ) -> BoxFuture<'a, Result<String, ClientError>> {
        Box::pin(Cluster::get(self, r, namespace, name))
    }

    fn list<'a>(
        &'a self,
        r: &'a Resolved,
        namespace: Option<&'a str>,
        labels: &'a str,
        fields: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Vec<String>, ClientError>> {
        Box::pin(Cluster::list(self, r, namespace, labels, fields))
    }

    fn list_changes<'a>(
        &'a self,
        r: &'a Resolved,
        namespace: Option<&'a str>,
        labels: &'a str,
        fields: Option<&'a str>,
        cursor: u64,
    ) -> BoxFuture<'a, Result<ListChanges, ClientError>> {
        Box::pin(Cluster::list_changes(
            self, r, namespace, labels, fields, cursor,
        ))
    }

    fn create<'a>(
        &'a self,
        r: &'a Resolved,
        namespace: Option<&'a str>,
        obj: &'a Value,
    ) -> BoxFuture<'a, Result<String, ClientError>> {
        Box::pin(Cluster::create(self, r, namespace, obj))
    }

    fn update<'a>(
        &'a self,
        r: &'a Resolved,
        namespace: Option<&'a str>,
        name: &'a str,
        obj: &'a Value,
    ) -> BoxFuture<'a, Result<String, ClientError>> {
        Box::pin(Cluster::update(self, r, namespace, name, obj))
    }

    fn patch<'a>(
        &'a self,
        r: &'a Resolved,
        namespace: Option<&'a str>,
        name: &'a str,
        kind: PatchKind,
        body: Value,
        status: bool,
    ) -> BoxFuture<'a, Result<String, ClientError>> {
        Box::pin(Cluster::patch(self, r, namespace, name, kind, body, status))
    }

    fn delete<'a>(
        &'a self,
        r: &'a Resolved,
        namespace: Option<&'a str>,
        name: &'a str,
        opts: &'a Delete,
    ) -> BoxFuture<'a, Result<(), ClientError>> {
        Box::pin(Cluster::delete(self, r, namespace, name, opts))
    }

    fn evict<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
        opts: &'a Delete,
    ) -> BoxFuture<'a, Result<(), ClientError>> {
        Box::pin(Cluster::evict(self, namespace, name, opts))
    }

    fn cached_uid(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Option<String> {
        Cluster::cached_uid(self, api_version, kind, namespace, name)
    }

    fn bind<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
        node: &'a str,
    ) -> BoxFuture<'a, Result<String, ClientError>> {
        Box::pin(Cluster::bind(self, namespace, name, node))
    }
}
