//! Keeps every ResourceQuota's `status` true, as kube-controller-manager's
//! resourcequota controller: a quota is measured when it is created or its
//! `spec.hard` changes, and its namespace is recounted after an object in
//! it is deleted or a pod in it ends (Succeeded/Failed), which admission
//! cannot see; and every namespace with a quota every five minutes (upstream's
//! `--resource-quota-sync-period`), which repairs a status a client wrote.
//! Creates are charged by admission (`resourcequota`); each recount holds
//! the namespace's gate, so it never races one.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use crate::resourcequota::status;
use crate::resources::Resources;
use crate::store::{Event, EventType};

/// Upstream's default full resync period.
const RESYNC: Duration = Duration::from_secs(300);

pub(crate) struct Controller {
    resources: Resources,
}

impl Controller {
    pub(crate) fn new(resources: Resources) -> Controller {
        Controller { resources }
    }

    /// Runs until the store stops; logs rather than failing.
    pub(crate) async fn run(self) {
        loop {
            let snap = self.resources.store.snapshot();
            let Ok(mut sub) = self.resources.store.watch("/", snap.rv) else {
                tracing::warn!("resourcequota controller: watch failed, restarting");
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            };
            self.recount(self.namespaces_with_quotas()).await;
            let mut resync = tokio::time::interval(RESYNC);
            resync.tick().await;
            loop {
                let mut dirty = BTreeSet::new();
                tokio::select! {
                    e = sub.live.recv() => {
                        let Some(e) = e else { break };
                        self.note(&e, &mut dirty);
                    }
                    _ = resync.tick() => dirty = self.namespaces_with_quotas(),
                }
                // A burst (a namespace's deletion) is one recount per namespace.
                while let Some(e) = sub.live.try_recv() {
                    self.note(&e, &mut dirty);
                }
                self.recount(dirty).await;
            }
            tracing::info!("resourcequota controller: resynchronising");
        }
    }

    /// Adds the namespace `e` may have changed the usage of, when it has a quota.
    fn note(&self, e: &Event, dirty: &mut BTreeSet<String>) {
        let key = &e.object.key;
        let (ns, _) = e.object.namespace_name();
        if ns.is_empty() {
            return;
        }
        let quota_changed = key.starts_with("/core/resourcequotas/")
            && e.kind != EventType::Deleted
            && e.object.value().is_ok_and(|q| !status::in_sync(&q));
        let pod_ended = key.starts_with("/core/pods/")
            && is_ended(e.object.phase.as_deref())
            && !e
                .prev
                .as_ref()
                .is_some_and(|p| is_ended(p.phase.as_deref()));
        if (quota_changed || pod_ended || e.kind == EventType::Deleted) && self.has_quota(ns) {
            dirty.insert(ns.to_string());
        }
    }

    fn has_quota(&self, ns: &str) -> bool {
        self.resources
            .store
            .snapshot()
            .range(&format!("/core/resourcequotas/{ns}/"), None)
            .next()
            .is_some()
    }

    fn namespaces_with_quotas(&self) -> BTreeSet<String> {
        let snap = self.resources.store.snapshot();
        snap.range("/core/resourcequotas/", None)
            .map(|s| s.namespace_name().0.to_string())
            .collect()
    }

    /// Measures every quota of each namespace again, its gate held.
    async fn recount(&self, namespaces: BTreeSet<String>) {
        for ns in namespaces {
            let _gate = self.resources.quota_gate.exclusive(&ns).await;
            let keys: Vec<Arc<str>> = self
                .resources
                .store
                .snapshot()
                .range(&format!("/core/resourcequotas/{ns}/"), None)
                .map(|s| s.key.clone())
                .collect();
            for key in keys {
                if let Err(e) =
                    status::sync(&self.resources.store, &self.resources.registry, &key).await
                {
                    tracing::warn!(quota = %key, error = %e, "recounting the quota failed");
                }
            }
        }
    }
}

fn is_ended(phase: Option<&str>) -> bool {
    matches!(phase, Some("Succeeded" | "Failed"))
}
