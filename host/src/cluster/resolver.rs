//! Kinds to resources: `apiVersion` + `kind` resolved through discovery
//! once, then from memory.

use std::collections::HashMap;
use std::sync::Mutex;

use kube::api::ApiResource;
use kube::discovery::{ApiCapabilities, Scope};

use super::ClientError;

#[derive(Clone, Debug)]
pub struct Resolved {
    pub(crate) resource: ApiResource,
    pub(crate) namespaced: bool,
}

/// The client and what discovery said, shared by the caches and every plugin.
pub struct Resolver {
    client: kube::Client,
    kinds: Mutex<HashMap<(String, String), Resolved>>,
}

fn split_api_version(av: &str) -> (&str, &str) {
    av.split_once('/').unwrap_or(("", av))
}

impl Resolver {
    pub fn new(client: kube::Client) -> Resolver {
        Resolver {
            client,
            kinds: Mutex::new(HashMap::new()),
        }
    }

    pub(crate) fn client(&self) -> &kube::Client {
        &self.client
    }

    /// The resource behind `apiVersion` + `kind` (discovery, cached).
    pub(crate) async fn resolve(
        &self,
        api_version: &str,
        kind: &str,
    ) -> Result<Resolved, ClientError> {
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

    /// The kind behind `resource` (a plural, as a manifest's rules name it)
    /// of API `group` (`""`: the core group), at the version the server
    /// prefers: what a plugin's rules let it read, as a kind to cache.
    pub(crate) async fn resolve_resource(
        &self,
        group: &str,
        resource: &str,
    ) -> Result<Resolved, ClientError> {
        let served = kube::discovery::group(&self.client, group)
            .await
            .map_err(|e| match e {
                kube::Error::Discovery(_) => {
                    ClientError::Invalid(format!("the server does not serve API group {group:?}"))
                }
                other => ClientError::from(other),
            })?;
        let (resource, caps) = served
            .recommended_resources()
            .into_iter()
            .find(|(r, _)| r.plural == resource)
            .ok_or_else(|| {
                ClientError::Invalid(format!(
                    "the server does not serve {resource} in API group {group:?}"
                ))
            })?;
        let r = Resolved {
            namespaced: caps.scope == Scope::Namespaced,
            resource,
        };
        let key = (r.resource.api_version.clone(), r.resource.kind.clone());
        self.kinds
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key, r.clone());
        Ok(r)
    }
}
