//! The server's own controllers, run from one watch of everything:
//!
//! - **garbage collection** by `ownerReferences`: a dependent whose owners are
//!   all gone is deleted (background), a dangling reference next to a live owner
//!   is removed; `orphan` and `foregroundDeletion` finalizers are honoured;
//! - **namespace deletion**: a terminating namespace's contents are deleted,
//!   then its `kubernetes` finalizer is removed and it goes;
//! - **CRDs**: established (status + cleanup finalizer) when stored; on
//!   deletion their custom resources are deleted first.
//!
//! The indices are rebuilt from a snapshot at start and kept by events, so a
//! restart loses nothing: whatever was pending is found again.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use serde_json::Value;

use crate::crd::{self, CLEANUP_FINALIZER};
use crate::meta;
use crate::registry::{ResourceType, is_builtin};
use crate::resources::{DeleteOptions, Propagation, Resources, WriteOptions};
use crate::store::{EventType, Stored};

/// The finalizer the job controller puts on a Job's pods.
/// The field managers of this module's writes: kube-controller-manager's
/// garbage collector and namespace controller, and the CRD controller that
/// upstream runs in kube-apiserver (so its fields are the API server's, which
/// plugin CRD loading does not count as a foreign owner).
const MANAGER: &str = "wasmlet-garbage-collector";
const NAMESPACE_MANAGER: &str = "wasmlet-namespace-controller";
const CRD_MANAGER: &str = crate::MANAGER;

const JOB_TRACKING: &str = "batch.kubernetes.io/job-tracking";

#[derive(Default)]
struct Index {
    /// uid → key of every object.
    keys: HashMap<String, Arc<str>>,
    /// owner uid → keys of its dependents.
    dependents: HashMap<String, BTreeSet<Arc<str>>>,
}

impl Index {
    fn add(&mut self, s: &Stored, v: &Value) {
        self.keys.insert(meta::uid(v).to_string(), s.key.clone());
        for owner in meta::owner_uids(v) {
            self.dependents
                .entry(owner)
                .or_default()
                .insert(s.key.clone());
        }
    }

    fn remove(&mut self, s: &Stored, v: &Value) {
        if self.keys.get(meta::uid(v)).is_some_and(|k| **k == *s.key) {
            self.keys.remove(meta::uid(v));
        }
        for owner in meta::owner_uids(v) {
            if let Some(set) = self.dependents.get_mut(&owner) {
                set.remove(&s.key);
                if set.is_empty() {
                    self.dependents.remove(&owner);
                }
            }
        }
    }
}

pub(crate) struct Controllers {
    resources: Resources,
    index: Index,
}

/// `/group/resource/ns/name` → (group, resource, ns, name)
fn split_key(key: &str) -> Option<(&str, &str, &str, &str)> {
    let mut it = key.trim_start_matches('/').splitn(4, '/');
    let g = it.next()?;
    let r = it.next()?;
    let ns = it.next()?;
    let name = it.next()?;
    Some((if g == "core" { "" } else { g }, r, ns, name))
}

impl Controllers {
    pub(crate) fn new(resources: Resources) -> Controllers {
        Controllers {
            resources,
            index: Index::default(),
        }
    }

    fn type_of(&self, key: &str) -> Option<Arc<ResourceType>> {
        let (g, r, _, _) = split_key(key)?;
        self.resources.registry.get(g, r)
    }

    /// Runs until the store stops; never returns an error, logs instead.
    pub(crate) async fn run(mut self) {
        loop {
            let snap = self.resources.store.snapshot();
            self.index = Index::default();
            let mut pending = Vec::new();
            for (_, s) in snap.objects.iter() {
                let Some(v) = read(s) else { continue };
                self.index.add(s, &v);
                pending.push(s.clone());
            }
            let mut sub = match self.resources.store.watch("/", snap.rv) {
                Ok(sub) => sub,
                Err(e) => {
                    tracing::warn!(error = %e, "controllers: watch failed, restarting");
                    continue;
                }
            };
            for s in pending {
                self.reconcile(&s).await;
            }
            for e in std::mem::take(&mut sub.backlog) {
                self.handle(e.kind, &e.object, e.prev.as_deref()).await;
            }
            while let Some(e) = sub.live.recv().await {
                self.handle(e.kind, &e.object, e.prev.as_deref()).await;
            }
            // Cut off as too slow: rebuild from a fresh snapshot.
            tracing::info!("controllers: resynchronising");
        }
    }

    async fn handle(&mut self, kind: EventType, s: &Arc<Stored>, prev: Option<&Stored>) {
        if let Some(p) = prev
            && let Some(pv) = read(p)
        {
            self.index.remove(p, &pv);
        }
        let Some(v) = read(s) else { return };
        if kind == EventType::Deleted {
            self.index.remove(s, &v);
            self.on_deleted(s, &v).await;
        } else {
            self.index.add(s, &v);
            self.reconcile_read(s, v).await;
        }
    }

    /// Everything that depends on one object's current state.
    async fn reconcile(&mut self, s: &Arc<Stored>) {
        let Some(v) = read(s) else { return };
        self.reconcile_read(s, v).await;
    }

    /// [`Self::reconcile`] with the object already [`read`].
    async fn reconcile_read(&mut self, s: &Arc<Stored>, v: Value) {
        let Some(rt) = self.type_of(&s.key) else {
            return;
        };
        let (ns, name) = s.namespace_name();
        let (ns, name) = (ns.to_string(), name.to_string());
        if rt.group == "apiextensions.k8s.io"
            && !meta::is_deleting(&v)
            && let Err(e) = self
                .resources
                .modify(
                    &rt,
                    "",
                    &name,
                    &WriteOptions::by(CRD_MANAGER),
                    crd::established,
                )
                .await
        {
            tracing::warn!(crd = %name, error = %e, "establishing CRD failed");
        }
        let owners = meta::owner_uids(&v);
        if !owners.is_empty() {
            let live: Vec<&String> = owners
                .iter()
                .filter(|u| self.index.keys.contains_key(*u))
                .collect();
            if live.is_empty() {
                // A Job's pod keeps its job-tracking finalizer until the job
                // controller counts it; with the Job gone nothing will, so
                // it is released here (upstream's job controller releases
                // such orphans itself, but a reconciler here runs only for
                // Jobs that exist).
                if rt.group.is_empty()
                    && rt.resource == "pods"
                    && meta::finalizers(&v).iter().any(|f| f == JOB_TRACKING)
                {
                    self.remove_finalizer(&rt, &ns, &name, JOB_TRACKING).await;
                }
                self.delete(&rt, &ns, &name, None).await;
            } else if live.len() < owners.len() {
                let keep: Vec<String> = live.into_iter().cloned().collect();
                self.drop_refs(&rt, &ns, &name, |u| keep.contains(&u.to_string()))
                    .await;
            }
        }
        if meta::is_deleting(&v) {
            self.finish_deletion(&rt, &v, &ns, &name).await;
        }
    }

    async fn on_deleted(&mut self, s: &Arc<Stored>, v: &Value) {
        let uid = meta::uid(v).to_string();
        if let Some((g, r, _, _)) = split_key(&s.key)
            && g == "apiextensions.k8s.io"
            && r == "customresourcedefinitions"
            && let Ok(t) = crd::resource_type(v)
        {
            self.resources.registry.remove(&t.group, &t.resource);
        }
        let dependents: Vec<Arc<str>> = self
            .index
            .dependents
            .get(&uid)
            .map(|d| d.iter().cloned().collect())
            .unwrap_or_default();
        for key in dependents {
            if let Some(d) = self.resources.store.get(&key) {
                self.reconcile(&d).await;
            }
        }
        // Something this object's deletion was waiting for may be done now.
        for owner in meta::owner_uids(v) {
            if let Some(key) = self.index.keys.get(&owner).cloned()
                && let Some(o) = self.resources.store.get(&key)
            {
                self.reconcile(&o).await;
            }
        }
        let (_, _, ns, _) = split_key(&s.key).unwrap_or_default();
        if !ns.is_empty() {
            let nsrt = self.resources.registry.lookup("", "v1", "namespaces");
            if let Some(nsrt) = nsrt
                && let Some(n) = self.resources.store.get(&nsrt.key("", ns))
                && parsed(&n).is_some_and(|v| meta::is_deleting(&v))
            {
                self.reconcile(&n).await;
            }
        }
        if let Some((g, _, _, _)) = split_key(&s.key)
            && let Some(rt) = self.type_of(&s.key)
            && !rt.builtin
        {
            let crd_rt = self.resources.registry.lookup(
                "apiextensions.k8s.io",
                "v1",
                "customresourcedefinitions",
            );
            let crd_name = format!("{}.{g}", rt.resource);
            if let Some(crd_rt) = crd_rt
                && let Some(c) = self.resources.store.get(&crd_rt.key("", &crd_name))
                && parsed(&c).is_some_and(|v| meta::is_deleting(&v))
            {
                self.reconcile(&c).await;
            }
        }
    }

    async fn finish_deletion(&mut self, rt: &ResourceType, v: &Value, ns: &str, name: &str) {
        let finalizers = meta::finalizers(v);
        let uid = meta::uid(v).to_string();
        let dependents: Vec<Arc<str>> = self
            .index
            .dependents
            .get(&uid)
            .map(|d| d.iter().cloned().collect())
            .unwrap_or_default();
        if finalizers.iter().any(|f| f == "orphan") {
            for key in &dependents {
                if let Some(drt) = self.type_of(key)
                    && let Some((_, _, dns, dname)) = split_key(key)
                {
                    let uid = uid.clone();
                    self.drop_refs(&drt, dns, dname, move |u| u != uid).await;
                }
            }
            self.remove_finalizer(rt, ns, name, "orphan").await;
        }
        if finalizers.iter().any(|f| f == "foregroundDeletion") {
            if dependents.is_empty() {
                self.remove_finalizer(rt, ns, name, "foregroundDeletion")
                    .await;
            } else {
                for key in &dependents {
                    // As upstream's garbage collector: a dependent with
                    // dependents of its own is deleted in the foreground too;
                    // one without is deleted at once (no finalizer round trip,
                    // so no MODIFIED events per dependent).
                    let nested = self
                        .resources
                        .store
                        .get(key)
                        .and_then(|s| parsed(&s))
                        .is_some_and(|d| {
                            self.index
                                .dependents
                                .get(meta::uid(&d))
                                .is_some_and(|c| !c.is_empty())
                        });
                    let policy = if nested {
                        Propagation::Foreground
                    } else {
                        Propagation::Background
                    };
                    if let Some(drt) = self.type_of(key)
                        && let Some((_, _, dns, dname)) = split_key(key)
                    {
                        self.delete(&drt, dns, dname, Some(policy)).await;
                    }
                }
            }
        }
        if rt.group.is_empty() && rt.resource == "namespaces" {
            self.empty_namespace(v, name).await;
        }
        if rt.group == "apiextensions.k8s.io" && finalizers.iter().any(|f| f == CLEANUP_FINALIZER) {
            self.empty_crd(v, rt, name).await;
        }
    }

    async fn empty_namespace(&mut self, v: &Value, ns: &str) {
        let waiting = v
            .pointer("/spec/finalizers")
            .and_then(Value::as_array)
            .is_some_and(|a| a.iter().any(|f| f == "kubernetes"));
        if !waiting {
            return;
        }
        let snap = self.resources.store.snapshot();
        let mut remaining = 0;
        let mut left = crate::controllers::nsconditions::Remaining::default();
        for (key, s) in snap.objects.iter() {
            let Some((_, _, kns, kname)) = split_key(key) else {
                continue;
            };
            if kns != ns {
                continue;
            }
            let Some(rt) = self.type_of(key) else {
                continue;
            };
            if !rt.namespaced {
                continue;
            }
            remaining += 1;
            if let Some(v) = parsed(s) {
                left.add(&rt.resource, &rt.group, &v);
            }
            self.delete(&rt, kns, kname, None).await;
        }
        if let Ok(nsrt) = self.resources.registry.builtin("", "v1", "namespaces")
            && let Err(e) = self
                .resources
                .modify(&nsrt, "", ns, &WriteOptions::by(NAMESPACE_MANAGER), |old| {
                    left.apply(old)
                })
                .await
        {
            tracing::warn!(namespace = %ns, error = %e, "writing namespace conditions failed");
        }
        if remaining == 0 {
            let nsrt = self.resources.registry.builtin("", "v1", "namespaces");
            let r = match nsrt {
                Ok(nsrt) => {
                    self.resources
                        .modify(&nsrt, "", ns, &WriteOptions::by(NAMESPACE_MANAGER), |old| {
                            let mut new = old.clone();
                            let list: Vec<Value> = old
                                .pointer("/spec/finalizers")
                                .and_then(Value::as_array)
                                .map(|a| a.iter().filter(|f| *f != "kubernetes").cloned().collect())
                                .unwrap_or_default();
                            new["spec"]["finalizers"] = Value::Array(list);
                            Some(new)
                        })
                        .await
                }
                Err(e) => Err(e.into()),
            };
            if let Err(e) = r {
                tracing::warn!(namespace = %ns, error = %e, "finalizing namespace failed");
            }
        }
    }

    async fn empty_crd(&mut self, v: &Value, crd_rt: &ResourceType, name: &str) {
        // A CRD that names a built-in type (stored before such CRDs were
        // refused) never served it: the objects under that prefix are the
        // built-in's, not the CRD's, and stay.
        let own = crd::resource_type(v)
            .ok()
            .filter(|t| !is_builtin(&t.group, &t.resource));
        let Some(t) = own else {
            self.remove_finalizer(crd_rt, "", name, CLEANUP_FINALIZER)
                .await;
            return;
        };
        let snap = self.resources.store.snapshot();
        let items: Vec<Arc<Stored>> = snap.range(&t.prefix(None), None).cloned().collect();
        if items.is_empty() {
            self.remove_finalizer(crd_rt, "", name, CLEANUP_FINALIZER)
                .await;
            return;
        }
        for s in items {
            let (ns, n) = s.namespace_name();
            self.delete(&t, ns, n, None).await;
        }
    }

    async fn delete(
        &self,
        rt: &ResourceType,
        ns: &str,
        name: &str,
        propagation: Option<Propagation>,
    ) {
        if let Some(s) = self.resources.store.get(&rt.key(ns, name))
            && parsed(&s).is_some_and(|v| meta::is_deleting(&v))
        {
            return;
        }
        let opts = DeleteOptions {
            propagation,
            ..Default::default()
        };
        match self.resources.delete(rt, ns, name, &opts).await {
            Ok(_) => tracing::debug!(kind = %rt.kind, %ns, %name, "garbage collected"),
            Err(e) if e.code == 404 => {}
            Err(e) => {
                tracing::warn!(kind = %rt.kind, %ns, %name, error = %e, "garbage collection failed")
            }
        }
    }

    async fn drop_refs(
        &self,
        rt: &ResourceType,
        ns: &str,
        name: &str,
        keep: impl Fn(&str) -> bool,
    ) {
        let r = self
            .resources
            .modify(rt, ns, name, &WriteOptions::by(MANAGER), |old| {
                let refs = old
                    .pointer("/metadata/ownerReferences")
                    .and_then(Value::as_array)?;
                let kept: Vec<Value> = refs
                    .iter()
                    .filter(|r| keep(r["uid"].as_str().unwrap_or("")))
                    .cloned()
                    .collect();
                if kept.len() == refs.len() {
                    return None;
                }
                let mut new = old.clone();
                if kept.is_empty() {
                    meta::meta_mut(&mut new).remove("ownerReferences");
                } else {
                    new["metadata"]["ownerReferences"] = Value::Array(kept);
                }
                Some(new)
            })
            .await;
        if let Err(e) = r {
            tracing::warn!(kind = %rt.kind, %ns, %name, error = %e, "removing owner references failed");
        }
    }

    async fn remove_finalizer(&self, rt: &ResourceType, ns: &str, name: &str, finalizer: &str) {
        let r = self
            .resources
            .modify(rt, ns, name, &WriteOptions::by(MANAGER), |old| {
                let list = meta::finalizers(old);
                if !list.iter().any(|f| f == finalizer) {
                    return None;
                }
                let mut new = old.clone();
                meta::set_finalizers(
                    &mut new,
                    list.into_iter().filter(|f| f != finalizer).collect(),
                );
                Some(new)
            })
            .await;
        if let Err(e) = r {
            tracing::warn!(kind = %rt.kind, %ns, %name, error = %e, "removing finalizer failed");
        }
    }
}

/// What the collector reads of the object in `s` at each event: its metadata
/// only (owners, uid, finalizers, deletion), except a Namespace's or a CRD's,
/// whose deletion reads their spec too. Skipping the rest of a pod instead of
/// building it as a `Value` (three times an event) was 5 % of the plane's
/// CPU while 5,000 pods started (issue 32). `None` (logged) as [`parsed`].
fn read(s: &Stored) -> Option<Value> {
    #[derive(serde::Deserialize)]
    struct Metadata {
        #[serde(default)]
        metadata: Value,
    }
    match split_key(&s.key) {
        Some(("apiextensions.k8s.io", ..)) | Some(("", "namespaces", ..)) => parsed(s),
        _ => match serde_json::from_slice::<Metadata>(&s.json) {
            Ok(m) => Some(serde_json::json!({"metadata": m.metadata})),
            Err(e) => {
                tracing::error!(key = %s.key, error = %e, "garbage collector skips an unreadable object");
                None
            }
        },
    }
}

/// The object in `s`, or `None` (logged) if the store holds something that
/// does not parse: the collector skips it rather than stopping.
fn parsed(s: &Stored) -> Option<Value> {
    s.value()
        .inspect_err(
            |e| tracing::error!(error = %e, "garbage collector skips an unreadable object"),
        )
        .ok()
}
