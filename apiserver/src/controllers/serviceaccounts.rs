//! The `default` ServiceAccount in every namespace, as kube-controller-manager's
//! serviceaccounts controller keeps it: created when a namespace appears (and
//! for every namespace at start), created again when it is deleted, and left
//! alone in a namespace that is terminating.

use std::sync::Arc;

use serde_json::json;

use crate::meta;
use crate::resources::{Resources, WriteOptions};
use crate::store::{Event, EventType};

pub(crate) const DEFAULT: &str = "default";

pub(crate) struct Controller {
    resources: Resources,
}

impl Controller {
    pub(crate) fn new(resources: Resources) -> Controller {
        Controller { resources }
    }

    /// Runs until the store stops; logs rather than failing.
    pub(crate) async fn run(self) {
        let (Ok(nsrt), Ok(sart)) = (
            self.resources.registry.builtin("", "v1", "namespaces"),
            self.resources.registry.builtin("", "v1", "serviceaccounts"),
        ) else {
            return tracing::error!("serviceaccounts controller: types not registered");
        };
        loop {
            let snap = self.resources.store.snapshot();
            let subs = (
                self.resources.store.watch(&nsrt.prefix(None), snap.rv),
                self.resources.store.watch(&sart.prefix(None), snap.rv),
            );
            let (Ok(mut ns_sub), Ok(mut sa_sub)) = subs else {
                tracing::warn!("serviceaccounts controller: watch failed, restarting");
                // Not a hot loop if the failure persists.
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                continue;
            };
            for s in snap.range(&nsrt.prefix(None), None) {
                let (_, name) = s.namespace_name();
                self.ensure(name).await;
            }
            let backlog: Vec<Arc<Event>> = std::mem::take(&mut ns_sub.backlog)
                .into_iter()
                .chain(std::mem::take(&mut sa_sub.backlog))
                .collect();
            for e in backlog {
                self.handle(&e).await;
            }
            loop {
                let e = tokio::select! {
                    e = ns_sub.live.recv() => e,
                    e = sa_sub.live.recv() => e,
                };
                let Some(e) = e else { break };
                self.handle(&e).await;
            }
            tracing::info!("serviceaccounts controller: resynchronising");
        }
    }

    async fn handle(&self, e: &Event) {
        let (ns, name) = e.object.namespace_name();
        if e.object.key.starts_with("/core/namespaces/") {
            if e.kind != EventType::Deleted {
                self.ensure(name).await;
            }
        } else if e.kind == EventType::Deleted && name == DEFAULT {
            self.ensure(ns).await;
        }
    }

    /// Creates `ns`/default unless it exists or `ns` is gone or terminating.
    async fn ensure(&self, ns: &str) {
        let (Ok(nsrt), Ok(sart)) = (
            self.resources.registry.builtin("", "v1", "namespaces"),
            self.resources.registry.builtin("", "v1", "serviceaccounts"),
        ) else {
            return;
        };
        let live = self
            .resources
            .store
            .get(&nsrt.key("", ns))
            .and_then(|s| s.value().ok())
            .is_some_and(|v| !meta::is_deleting(&v));
        if !live || self.resources.store.get(&sart.key(ns, DEFAULT)).is_some() {
            return;
        }
        let sa = json!({"apiVersion": "v1", "kind": "ServiceAccount",
                        "metadata": {"name": DEFAULT, "namespace": ns}});
        let opts = WriteOptions::by("wasmlet-serviceaccounts-controller");
        match self.resources.create(&sart, "v1", ns, sa, &opts).await {
            Ok(_) => tracing::debug!(namespace = %ns, "created the default ServiceAccount"),
            // Someone was first, or the namespace started terminating.
            Err(e) if e.code == 409 || e.code == 403 || e.code == 404 => {}
            Err(e) => {
                tracing::warn!(namespace = %ns, error = %e, "creating the default ServiceAccount failed")
            }
        }
    }
}
