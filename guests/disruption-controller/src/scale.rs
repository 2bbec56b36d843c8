//! Upstream's pod controller finders: the scale of a pod's controller, read
//! with `get` (ReplicaSets controlled by a Deployment count as the Deployment).

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::ReplicationController;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use wasmlet_sdk::client::{Client, ClientError};
use wasmlet_sdk::controllers::controller_of;

use crate::budget::Scales;

pub struct Lookup<'a>(pub &'a Client);

fn group(api_version: &str) -> &str {
    api_version.split_once('/').map_or("", |(g, _)| g)
}

/// The object only if it is the one the reference names (same uid).
fn same<K>(
    found: Result<Option<K>, ClientError>,
    uid: &str,
    meta: impl Fn(&K) -> &ObjectMeta,
) -> Result<Option<K>, String> {
    match found {
        Ok(Some(o)) if meta(&o).uid.as_deref() == Some(uid) => Ok(Some(o)),
        Ok(_) => Ok(None),
        Err(e) => Err(e.to_string()),
    }
}

impl Scales for Lookup<'_> {
    fn scale_of(
        &mut self,
        ns: &str,
        owner: &OwnerReference,
    ) -> Result<Option<(String, i32)>, String> {
        let c = self.0;
        match (group(&owner.api_version), owner.kind.as_str()) {
            ("", "ReplicationController") => {
                let rc = same(
                    c.get_opt::<ReplicationController>(ns, &owner.name),
                    &owner.uid,
                    |o| &o.metadata,
                )?;
                Ok(rc.map(|rc| {
                    (
                        owner.uid.clone(),
                        rc.spec.and_then(|s| s.replicas).unwrap_or(1),
                    )
                }))
            }
            ("apps", "ReplicaSet") => {
                let Some(rs) = same(c.get_opt::<ReplicaSet>(ns, &owner.name), &owner.uid, |o| {
                    &o.metadata
                })?
                else {
                    return Ok(None);
                };
                if let Some(dref) = controller_of(&rs.metadata)
                    .filter(|r| r.kind == "Deployment" && group(&r.api_version) == "apps")
                {
                    let dep = same(c.get_opt::<Deployment>(ns, &dref.name), &dref.uid, |o| {
                        &o.metadata
                    })?;
                    return Ok(dep.map(|d| {
                        (
                            dref.uid.clone(),
                            d.spec.and_then(|s| s.replicas).unwrap_or(1),
                        )
                    }));
                }
                Ok(Some((
                    owner.uid.clone(),
                    rs.spec.and_then(|s| s.replicas).unwrap_or(1),
                )))
            }
            ("apps", "StatefulSet") => {
                let ss = same(c.get_opt::<StatefulSet>(ns, &owner.name), &owner.uid, |o| {
                    &o.metadata
                })?;
                Ok(ss.map(|s| {
                    (
                        owner.uid.clone(),
                        s.spec.and_then(|s| s.replicas).unwrap_or(1),
                    )
                }))
            }
            _ => Ok(None),
        }
    }
}
