//! What a controller's workers do with a key: the host-owned reconcile loop
//! (scope and leadership checks, expectations, finalizers, the guest call,
//! the status write, the requeue decision).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::Resource;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::runtime::events::{Event, EventType};
use serde_json::{Value, json};

use super::controller::{Controller, Outcome, split_key};
use super::expectations::Seen;
use super::guest::{Requeue, call_reconcile, settle};
use super::keys::Written;
use super::metrics::ControllerSeries;
use super::source::Reconciler;
use super::status::{GuestResult, desired_status};
use super::worker::{Admit, Objects};
use super::workqueue::{Priority, WorkQueue};
use crate::cluster::{CachedObject, ClientError};
use crate::plugin::events::{MAX_NOTE, MAX_REASON, truncate};
use crate::plugin::manifest::ExpectationScope;
use crate::plugin::outcome::Finalized;
use crate::plugin::record::PendingRecord;
use crate::plugin::sandbox::Write;

/// The expectations key of a plugin's writes when they hold back all its keys
/// (no object key is empty).
const PLUGIN_KEY: &str = "";

impl Objects for Controller {
    fn queue(&self) -> &WorkQueue<String> {
        &self.queue
    }

    fn series(&self) -> &ControllerSeries {
        &self.metrics
    }

    async fn ready(&self) {
        self.primary.wait_synced().await;
        // A follower takes no work: keys wait in the queue, at their
        // priority, until leadership comes.
        self.leading.acquired().await;
    }

    fn admit(&self, key: &str) -> Admit {
        if !self.leading.is_leading() {
            // Lost the lease while waiting for work.
            return Admit::PutBack;
        }
        if !self.in_scope(key) {
            // Only the reconciler's own scope decides what it acts on: keys from
            // `owns` and `watches` come from what other objects say, and whoever
            // may label a watched object could otherwise aim the plugin (its
            // finalizer, its status writes) at any object of the kind.
            self.metrics.out_of_scope();
            self.forget(key);
            return Admit::Drop;
        }
        Admit::Reconcile
    }

    fn span(&self, key: &str) -> tracing::Span {
        tracing::info_span!("reconcile", plugin = %self.name, key = %key, generation = tracing::field::Empty, outcome = tracing::field::Empty)
    }

    fn reconcile_key(&self, key: &str) -> impl Future<Output = Outcome> + Send {
        self.reconcile(key)
    }
}

impl Controller {
    pub(super) fn lookup(&self) -> impl Fn(&str, &str, Option<&str>, &str) -> Option<Seen> + '_ {
        |av, kind, ns, name| {
            let cache = self.caches.existing(av, kind)?;
            let o = cache.get(ns, name)?;
            Some(Seen {
                uid: o.metadata.uid.clone().unwrap_or_default(),
                resource_version: o
                    .metadata
                    .resource_version
                    .as_deref()
                    .and_then(|r| r.parse().ok())
                    .unwrap_or(0),
                deleting: o.metadata.deletion_timestamp.is_some(),
            })
        }
    }

    pub(super) fn api(&self) -> Api<DynamicObject> {
        let r = &self.primary.resolved;
        Api::all_with(self.caches.client().clone(), &r.resource)
    }

    pub(super) fn api_in(&self, ns: Option<&str>) -> Api<DynamicObject> {
        let r = &self.primary.resolved;
        match self.scoped(ns) {
            Some(ns) => Api::namespaced_with(self.caches.client().clone(), ns, &r.resource),
            None => self.api(),
        }
    }

    /// The URL of the collection `api_in(ns)` reaches, without building an
    /// `Api` (and cloning the client) for it.
    fn url_in(&self, ns: Option<&str>) -> String {
        DynamicObject::url_path(&self.primary.resolved.resource, self.scoped(ns))
    }

    /// `ns` when the primary kind is namespaced (a cluster-scoped kind's key
    /// may carry one all the same).
    fn scoped<'a>(&self, ns: Option<&'a str>) -> Option<&'a str> {
        ns.filter(|_| self.primary.resolved.namespaced)
    }

    /// Writes finalizers with the object's resourceVersion as precondition.
    pub(super) async fn set_finalizers(
        &self,
        o: &CachedObject,
        list: Vec<String>,
    ) -> Result<(), ClientError> {
        let (ns, name) = (
            o.metadata.namespace.as_deref(),
            o.metadata.name.as_deref().unwrap_or_default(),
        );
        let patch = json!({"metadata": {"resourceVersion": o.metadata.resource_version, "finalizers": list}});
        self.api_in(ns)
            .patch(name, &PatchParams::default(), &Patch::Merge(patch))
            .await?;
        Ok(())
    }

    /// One pass of the host-owned reconcile loop for `key`, in its steps:
    /// forget a key whose object is gone; wait while the cache lacks this
    /// controller's own writes (expectations); finalize an object being
    /// deleted; put the finalizer on a live one first; call the guest; write
    /// the host-owned status; queue the key again as the guest asked.
    pub(super) async fn reconcile(&self, key: &str) -> Outcome {
        let Some(obj) = self.primary.get_key(key) else {
            // Gone: nothing to do, nothing to remember.
            self.forget(key);
            return Outcome::Success;
        };
        let obj = self.as_stored(key, obj);
        if let Some(wait) = self.held(key) {
            // Our own writes are not in the cache yet: acting now would act twice.
            self.queue
                .add_after(key.to_string(), wait.min(Duration::from_secs(1)));
            return Outcome::RequeueAfter;
        }
        tracing::Span::current().record("generation", obj.metadata.generation.unwrap_or(0));
        let Some(plugin) = self.source.current(&self.name) else {
            return Outcome::Error;
        };
        if obj.metadata.deletion_timestamp.is_some() {
            return self.finalize(key, &obj, &*plugin).await;
        }
        if let Some(outcome) = self.ensure_finalizer(key, &obj).await {
            return outcome;
        }
        let obj_json = obj.json(&self.primary.resolved.resource);
        let call = call_reconcile(&*plugin, &self.name, key, &obj_json).await;
        self.record_writes(key, &call.writes);
        if let Some((reason, message)) = &call.result.error {
            self.note_error(key, reason, message);
        }
        if self.host_status()
            && let Some(failed) = self
                .write_status(key, &obj, &call.result, &*plugin, call.record.as_ref())
                .await
        {
            return failed;
        }
        // Without host status the guest owns the kind's status: only the outcome counts.
        self.settle(key, call.requeue)
    }

    /// How long `key` must wait for the cache to show this controller's own
    /// writes (its own, and the plugin's with plugin-wide expectations).
    fn held(&self, key: &str) -> Option<Duration> {
        let held = self.expectations.check(key, self.lookup()).and_then(|()| {
            if self.plugin_wide_expectations() {
                self.expectations.check(PLUGIN_KEY, self.lookup())
            } else {
                Ok(())
            }
        });
        held.err()
    }

    /// Whether the host writes the kind's status (the manifest's `host-status`).
    pub(super) fn host_status(&self) -> bool {
        self.manifest
            .reconciles
            .as_ref()
            .is_none_or(|r| r.host_status)
    }

    /// A live object without the manifest's finalizer gets it before the
    /// guest first acts on it. `Some(outcome)`: the pass ends here (the cache
    /// will bring the updated object back: reconcile then).
    async fn ensure_finalizer(&self, key: &str, obj: &CachedObject) -> Option<Outcome> {
        let f = self.manifest.finalizer.as_ref()?;
        let mut finalizers = obj.metadata.finalizers.clone().unwrap_or_default();
        if finalizers.contains(f) {
            return None;
        }
        finalizers.push(f.clone());
        Some(match self.set_finalizers(obj, finalizers).await {
            Ok(()) => Outcome::Success,
            Err(e) => self.retry(key, &e),
        })
    }

    /// An object being deleted: while it carries this plugin's finalizer,
    /// the guest's `finalize` runs; once it is done the finalizer goes.
    async fn finalize(&self, key: &str, obj: &CachedObject, plugin: &dyn Reconciler) -> Outcome {
        let mut finalizers = obj.metadata.finalizers.clone().unwrap_or_default();
        let Some(f) = self
            .manifest
            .finalizer
            .clone()
            .filter(|f| finalizers.contains(f))
        else {
            return Outcome::Success;
        };
        let obj_json = obj.json(&self.primary.resolved.resource);
        match plugin.finalize(key, &obj_json).await {
            Ok((Ok(Finalized::Done), report)) => {
                self.record_writes(key, &report.writes);
                finalizers.retain(|x| *x != f);
                let written = self.set_finalizers(obj, finalizers.clone()).await;
                if let Some(r) = &report.record {
                    let body = json!({"metadata": {"finalizers": &finalizers}});
                    let result = written.as_ref().map(|_| None).map_err(|e| e.to_string());
                    r.host_write("patch", key, &body, result);
                }
                match written {
                    Ok(()) => {
                        self.queue.forget(&key.to_string());
                        Outcome::Success
                    }
                    Err(e) => self.retry(key, &e),
                }
            }
            Ok((Ok(Finalized::RetryAfter(wait)), _)) => {
                self.queue.add_after(key.to_string(), wait);
                Outcome::RequeueAfter
            }
            Ok((Err(e), report)) => {
                self.record_writes(key, &report.writes);
                // Retried with back-off, whatever its kind: not terminal.
                let failed = GuestResult {
                    status: e.status,
                    conditions: e.conditions,
                    error: Some((e.reason, e.message)),
                    terminal: false,
                };
                self.finalize_failed(key, obj, failed, plugin, report.record.as_ref())
                    .await
            }
            Err(e) => {
                let failed = GuestResult {
                    error: Some(("FinalizeFailed".into(), e.to_string())),
                    ..Default::default()
                };
                self.finalize_failed(key, obj, failed, plugin, None).await
            }
        }
    }

    /// Writes the host-owned status `result` asks for (when it differs from
    /// the stored one). `Some(outcome)`: the write failed, and the key is
    /// queued again as `outcome` says.
    async fn write_status(
        &self,
        key: &str,
        obj: &CachedObject,
        result: &GuestResult,
        plugin: &dyn Reconciler,
        record: Option<&Arc<PendingRecord>>,
    ) -> Option<Outcome> {
        let (ns, name) = split_key(key);
        let generation = obj.metadata.generation.unwrap_or(0);
        let current = obj.status();
        // What the host last sent stands for the stored status while the
        // server still holds what it kept of that write.
        // So does it while the cache still shows the object from before that
        // write: the server holds the write, and comparing with the stale
        // status would send a PATCH bound to fail its precondition.
        let base = self.keys.with(key, |s| match &s.written {
            Some(w) if w.kept == current => w.sent.clone(),
            Some(w) if w.replaced.is_some() && w.replaced == obj.metadata.resource_version => {
                w.sent.clone()
            }
            _ => current.clone(),
        });
        let now = super::status::now();
        let desired = desired_status(
            &base,
            result,
            plugin.declared_conditions(),
            generation,
            &now,
        );
        if desired != base {
            let patch = json!({"metadata": {"resourceVersion": obj.metadata.resource_version}, "status": desired});
            let params = PatchParams {
                field_manager: Some(self.config.field_manager.clone()),
                ..Default::default()
            };
            self.own_writes.begin(key);
            let response = super::status_write::patch_status(
                self.url_in(ns),
                self.caches.client(),
                name,
                &params,
                &Patch::Merge(patch),
            )
            .await;
            let rv = response.as_ref().ok().and_then(|s| s.resource_version());
            if let Some(r) = record {
                let result = response.as_ref().map(|_| rv).map_err(|e| e.to_string());
                r.host_write("patch-status", key, &json!({"status": &desired}), result);
            }
            if self.own_writes.finish(key, rv) {
                // A change by someone else came while the write was in flight.
                self.queue.add(key.to_string(), Priority::High);
            }
            let stored = match response {
                Ok(stored) => stored,
                Err(e) => return Some(self.retry(key, &e)),
            };
            self.metrics.status_written();
            let (stored_rv, kept) = stored.into_parts();
            let pruned = kept != desired;
            if pruned {
                self.warn_pruned(&desired, &kept);
            }
            let caught_up = self.primary.get_key(key).is_some_and(|o| {
                o.metadata.resource_version.is_some() && o.metadata.resource_version == stored_rv
            });
            // Once the cache has the write (its event came first), only a
            // pruned write needs remembering.
            let written = (pruned || !caught_up).then(|| Written {
                sent: desired,
                kept,
                replaced: obj.metadata.resource_version.clone(),
                stored: stored_rv,
                pruned,
            });
            self.keys.with(key, |s| s.written = written);
        }
        None
    }

    /// A failed `finalize`: the object stays (retried with back-off) and says
    /// why where a user looks, as a failed reconcile does: `Ready=False` with
    /// the guest's reason and a message starting `finalize:`, the status and
    /// conditions the guest returned, a Warning Event, the status page.
    async fn finalize_failed(
        &self,
        key: &str,
        obj: &CachedObject,
        mut failed: GuestResult,
        plugin: &dyn Reconciler,
        record: Option<&Arc<PendingRecord>>,
    ) -> Outcome {
        let (reason, message) = failed.error.take().unwrap_or_default();
        let message = format!("finalize: {message}");
        tracing::warn!(plugin = %self.name, %key, %reason, %message, "finalize failed");
        self.note_error(key, &reason, &message);
        self.warn_event(obj, &reason, &message).await;
        failed.error = Some((reason, message));
        if self.host_status()
            && let Some(outcome) = self.write_status(key, obj, &failed, plugin, record).await
        {
            return outcome;
        }
        self.queue.add_rate_limited(key.to_string());
        Outcome::Error
    }

    /// A Warning Event about `obj` (what `kubectl describe` shows). Its
    /// recorder aggregates repeats into a series, so a failure retried with
    /// back-off costs one Event, then patches of its count.
    async fn warn_event(&self, obj: &CachedObject, reason: &str, message: &str) {
        let r = &self.primary.resolved.resource;
        let regarding = ObjectReference {
            api_version: Some(r.api_version.clone()),
            kind: Some(r.kind.clone()),
            namespace: obj.metadata.namespace.clone(),
            name: obj.metadata.name.clone(),
            uid: obj.metadata.uid.clone(),
            resource_version: obj.metadata.resource_version.clone(),
            ..Default::default()
        };
        // Cut to what the API server accepts, as the plugins' own Events are.
        let (mut reason, mut note) = (reason.to_string(), message.to_string());
        truncate(&mut reason, MAX_REASON);
        truncate(&mut note, MAX_NOTE);
        let event = Event {
            type_: EventType::Warning,
            reason,
            note: Some(note),
            action: "Finalize".into(),
            secondary: None,
        };
        if let Err(e) = self.recorder.publish(&event, &regarding).await {
            tracing::warn!(plugin = %self.name, key = ?obj.metadata.name, error = %e, "cannot record the Warning Event");
        }
    }

    /// `obj` as the server stores it: while the cache still shows the object
    /// from before the host's last status write, that write's result (the
    /// status the server kept, at the resourceVersion it answered). A guest
    /// that keeps its progress in the status (the time of its last eviction,
    /// say) must never decide on the status before its last pass.
    fn as_stored(&self, key: &str, obj: Arc<CachedObject>) -> Arc<CachedObject> {
        let stored = self.keys.with(key, |s| {
            let w = s.written.as_ref()?;
            (w.replaced.is_some() && w.replaced == obj.metadata.resource_version)
                .then(|| (w.kept.clone(), w.stored.clone()))
        });
        match stored {
            Some((kept, rv)) => Arc::new(obj.with_status(kept, rv)),
            None => obj,
        }
    }

    /// Queues `key` again (or not) as the reconcile's outcome asks.
    fn settle(&self, key: &str, outcome: Requeue) -> Outcome {
        settle(&self.queue, &self.keys, key, outcome)
    }

    fn plugin_wide_expectations(&self) -> bool {
        self.manifest
            .reconciles
            .as_ref()
            .is_some_and(|r| r.expectations == ExpectationScope::Plugin)
    }

    /// Remembers a reconcile's writes under its key (and, with plugin-wide
    /// expectations, under the plugin's too).
    fn record_writes(&self, key: &str, writes: &[Write]) {
        let cached = |av: &str, k: &str| self.caches.existing(av, k).is_some();
        self.expectations.record(key, writes, cached);
        if self.plugin_wide_expectations() {
            self.expectations.record(PLUGIN_KEY, writes, cached);
        }
    }

    /// The cache shows `key` at `rv`: a status write stored at that
    /// resourceVersion, kept whole, needs remembering no longer.
    pub(super) fn cache_caught_up(&self, key: &str, rv: Option<&str>) {
        self.keys.with(key, |s| {
            if s.written
                .as_ref()
                .is_some_and(|w| !w.pruned && rv.is_some() && w.stored.as_deref() == rv)
            {
                s.written = None;
            }
        });
    }

    /// Drops everything kept of `key` (its object is gone, or out of scope):
    /// back-off, expectations, the last status write, the requeue-after wait.
    pub(super) fn forget(&self, key: &str) {
        self.queue.forget(&key.to_string());
        self.expectations.forget(key);
        self.keys.forget(key);
        self.own_writes.forget(key);
    }

    /// Says once per controller which host-owned status fields the server
    /// dropped, and where to declare them.
    pub(super) fn warn_pruned(&self, sent: &Value, kept: &Value) {
        let dropped: Vec<&str> = ["conditions", "observedGeneration"]
            .into_iter()
            .filter(|f| sent.get(*f).is_some() && kept.get(*f).is_none())
            .collect();
        if dropped.is_empty()
            || self
                .warned_pruned
                .swap(true, std::sync::atomic::Ordering::Relaxed)
        {
            return;
        }
        let r = &self.primary.resolved.resource;
        let crd = format!("{}.{}", r.plural, r.group);
        tracing::warn!(
            plugin = %self.name, %crd, ?dropped,
            "the server prunes host-owned status fields: declare them in the CRD's status schema (or x-kubernetes-preserve-unknown-fields: true); until then the host compares with what it sent, so unchanged objects cost no writes"
        );
    }

    /// API errors from the host's own writes: 409 and 429 mean "soon".
    pub(super) fn retry(&self, key: &str, e: &ClientError) -> Outcome {
        match e {
            ClientError::Conflict(_) | ClientError::TooManyRequests => {
                self.queue.add_soon(key.to_string());
                Outcome::Requeue
            }
            ClientError::NotFound => Outcome::Success,
            other => {
                tracing::warn!(plugin = %self.name, %key, error = %other, "host write failed");
                self.queue.add_rate_limited(key.to_string());
                Outcome::Error
            }
        }
    }
}
