//! [`ReadOnly`]: cluster access that reads and never writes, for a shadow
//! candidate (`crate::plugin::shadow`). Its writes are held back before they
//! get here; this is the guarantee that none reaches the API server anyway.

use std::sync::Arc;

use futures::future::BoxFuture;
use serde_json::Value;

use super::access::ClusterAccess;
use super::client::{Delete, ListChanges, PatchKind};
use super::{ClientError, Resolved};

/// Reads through `0`; every write is refused.
pub(crate) struct ReadOnly(pub Arc<dyn ClusterAccess>);

fn refused<'a, T: Send + 'a>() -> BoxFuture<'a, Result<T, ClientError>> {
    Box::pin(async {
        Err(ClientError::Denied(
            "read-only cluster access (a shadow candidate's writes are not performed)".into(),
        ))
    })
}

impl ClusterAccess for ReadOnly {
    fn resolve<'a>(
        &'a self,
        api_version: &'a str,
        kind: &'a str,
    ) -> BoxFuture<'a, Result<Resolved, ClientError>> {
        self.0.resolve(api_version, kind)
    }

    fn get<'a>(
        &'a self,
        r: &'a Resolved,
        namespace: Option<&'a str>,
        name: &'a str,
    ) -> BoxFuture<'a, Result<String, ClientError>> {
        self.0.get(r, namespace, name)
    }

    fn list<'a>(
        &'a self,
        r: &'a Resolved,
        namespace: Option<&'a str>,
        labels: &'a str,
        fields: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Vec<String>, ClientError>> {
        self.0.list(r, namespace, labels, fields)
    }

    fn list_changes<'a>(
        &'a self,
        r: &'a Resolved,
        namespace: Option<&'a str>,
        labels: &'a str,
        fields: Option<&'a str>,
        cursor: u64,
    ) -> BoxFuture<'a, Result<ListChanges, ClientError>> {
        self.0.list_changes(r, namespace, labels, fields, cursor)
    }

    fn cached_uid(
        &self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Option<String> {
        self.0.cached_uid(api_version, kind, namespace, name)
    }

    fn create<'a>(
        &'a self,
        _: &'a Resolved,
        _: Option<&'a str>,
        _: &'a Value,
    ) -> BoxFuture<'a, Result<String, ClientError>> {
        refused()
    }

    fn update<'a>(
        &'a self,
        _: &'a Resolved,
        _: Option<&'a str>,
        _: &'a str,
        _: &'a Value,
    ) -> BoxFuture<'a, Result<String, ClientError>> {
        refused()
    }

    fn patch<'a>(
        &'a self,
        _: &'a Resolved,
        _: Option<&'a str>,
        _: &'a str,
        _: PatchKind,
        _: Value,
        _: bool,
    ) -> BoxFuture<'a, Result<String, ClientError>> {
        refused()
    }

    fn delete<'a>(
        &'a self,
        _: &'a Resolved,
        _: Option<&'a str>,
        _: &'a str,
        _: &'a Delete,
    ) -> BoxFuture<'a, Result<(), ClientError>> {
        refused()
    }

    fn evict<'a>(
        &'a self,
        _: &'a str,
        _: &'a str,
        _: &'a Delete,
    ) -> BoxFuture<'a, Result<(), ClientError>> {
        refused()
    }

    fn bind<'a>(
        &'a self,
        _: &'a str,
        _: &'a str,
        _: &'a str,
    ) -> BoxFuture<'a, Result<String, ClientError>> {
        refused()
    }
}
