//! `[[watches]] cluster = "NAME"` (or `"*"`): a kind watched in the host's
//! named clusters (`--cluster NAME=KUBECONFIG`) instead of its own, so a
//! global reconciler hears of its regional objects' changes (their status,
//! written by the region) instead of polling them.
//!
//! Each cluster's watch starts on its own: a region that is down, or that
//! does not serve the kind yet (its CRD applied a moment ago), is retried with
//! back-off in the background, never holding the controller or another region.
//! (A table reconciler's watches of the host's own cluster start the same way.)

use std::sync::Arc;
use std::time::Duration;

use crate::cluster::NamedClusters;
use crate::cluster::cache::{Caches, KindCache};
use crate::plugin::manifest::{Manifest, MapFn, Watch, clusters};

const RETRY_FIRST: Duration = Duration::from_secs(1);
const RETRY_MAX: Duration = Duration::from_secs(30);

/// One watch in one cluster.
pub(super) struct RemoteWatch {
    /// `None`: the host's own.
    cluster: Option<String>,
    caches: Arc<Caches>,
    watch: Watch,
    pub(crate) map: MapFn,
}

/// The manifest's watches that name a cluster, one per cluster they cover:
/// `*` covers every named cluster of this host the manifest reaches. A
/// named cluster this host was not given is warned about and left out.
/// With `own`, the watches of the host's own cluster too.
pub(super) fn remote_watches(
    plugin: &str,
    manifest: &Manifest,
    named: &NamedClusters,
    own: Option<&Arc<Caches>>,
) -> Vec<RemoteWatch> {
    let mut out = Vec::new();
    for (w, map) in &manifest.watches {
        let Some(wanted) = &w.cluster else {
            if let Some(caches) = own {
                out.push(RemoteWatch {
                    cluster: None,
                    caches: caches.clone(),
                    watch: w.clone(),
                    map: map.clone(),
                });
            }
            continue;
        };
        if wanted != clusters::ANY && named.get(wanted).is_none() {
            tracing::warn!(plugin, cluster = %wanted, kind = %w.kind, "watched cluster is not configured on this host (--cluster NAME=KUBECONFIG); not watched");
            continue;
        }
        for name in named.names() {
            if !clusters::covers(wanted, &name) || manifest.cluster_rules(&name).is_none() {
                continue;
            }
            let Some(caches) = named.caches(&name) else {
                continue;
            };
            out.push(RemoteWatch {
                cluster: Some(name),
                caches,
                watch: w.clone(),
                map: map.clone(),
            });
        }
    }
    out
}

impl RemoteWatch {
    /// Which changes requeue (the manifest's `changes`).
    pub(crate) fn changes(&self) -> crate::plugin::manifest::Changes {
        self.watch.changes
    }

    /// The kind's cache in this cluster, once the cluster serves the kind.
    pub(super) async fn cache(&self, plugin: &str) -> Arc<KindCache> {
        let cluster = self.cluster.as_deref().unwrap_or("(the host's)");
        let mut wait = RETRY_FIRST;
        loop {
            match self
                .caches
                .cache(&self.watch.api_version, &self.watch.kind)
                .await
            {
                Ok(c) => {
                    tracing::info!(plugin, cluster, api_version = %self.watch.api_version, kind = %self.watch.kind, "watching");
                    return c;
                }
                Err(e) => {
                    tracing::warn!(plugin, cluster, api_version = %self.watch.api_version, kind = %self.watch.kind, error = %e, retry_in = ?wait, "cannot watch the kind yet; retrying");
                    tokio::time::sleep(wait).await;
                    wait = (wait * 2).min(RETRY_MAX);
                }
            }
        }
    }
}
