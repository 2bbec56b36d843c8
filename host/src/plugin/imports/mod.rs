//! The host side of the contract's shared imports (`client`, `log`, `http`)
//! every call gets, each checked against the manifest: `client` here, `log`
//! in `logging`, `http` in `fetch`.

mod fetch;
mod logging;
mod taped;
#[cfg(test)]
mod tests;

use futures::StreamExt;
use serde_json::Value;
use wasmlet_apimachinery::names;

use super::events::Dropped;
use super::in_flight::InFlight;
use super::manifest::{Manifest, Rule, rules_allow, rules_may_allow};
use super::metrics::PluginMetrics;
use super::sandbox::{State, Write};
use crate::cluster::{ClientError as ApiClientError, ClusterAccess, Delete, PatchKind, Resolved};

use super::bindings::reconciler::wasmlet::plugin::client::{
    self, ClientError, DeleteOptions, Event, EventType, ObjectRef, PatchType, Propagation, TypeRef,
};
use super::bindings::reconciler::wasmlet::plugin::types;

impl From<ApiClientError> for ClientError {
    fn from(e: ApiClientError) -> ClientError {
        match e {
            ApiClientError::NotFound => ClientError::NotFound,
            ApiClientError::Conflict(m) => ClientError::Conflict(m),
            ApiClientError::Denied(m) => ClientError::Denied(m),
            ApiClientError::Invalid(m) => ClientError::Invalid(m),
            ApiClientError::TooManyRequests => ClientError::TooManyRequests,
            ApiClientError::Unavailable(m) => ClientError::Unavailable(m),
            ApiClientError::Other(m) => ClientError::Other(m),
        }
    }
}

fn group_of(api_version: &str) -> &str {
    api_version.split_once('/').map(|(g, _)| g).unwrap_or("")
}

fn delete_of(o: &DeleteOptions) -> Delete {
    Delete {
        propagation: o.propagation.map(|p| match p {
            Propagation::Orphan => kube::api::PropagationPolicy::Orphan,
            Propagation::Background => kube::api::PropagationPolicy::Background,
            Propagation::Foreground => kube::api::PropagationPolicy::Foreground,
        }),
        uid: o.preconditions.as_ref().and_then(|p| p.uid.clone()),
        resource_version: o
            .preconditions
            .as_ref()
            .and_then(|p| p.resource_version.clone()),
        grace_period_seconds: o.grace_period_seconds,
    }
}

/// Which cluster a call addresses: the host's own (`client`) or one of its
/// named clusters (`clusters`).
#[derive(Clone, Copy, Debug)]
pub(super) enum At<'a> {
    Own,
    Named(&'a str),
}

impl At<'_> {
    /// Writes to the host's own cluster become expectations (its caches are
    /// the ones the controller waits on); a named cluster's do not.
    fn expects_writes(self) -> bool {
        matches!(self, At::Own)
    }

    /// ` in cluster "NAME"`, for messages.
    fn where_(self) -> String {
        match self {
            At::Own => String::new(),
            At::Named(n) => format!(" in cluster \"{n}\""),
        }
    }
}

/// The manifest's rules in `at`: `[permissions]` for the host's own cluster,
/// `[clusters.NAME]` (else `[clusters."*"]`) for a named one.
fn rules_in<'m>(manifest: &'m Manifest, at: At<'_>) -> &'m [Rule] {
    match at {
        At::Own => &manifest.permissions.rules,
        At::Named(name) => manifest.cluster_rules(name).unwrap_or(&[]),
    }
}

impl State {
    /// The cluster `at` addresses: a named cluster the manifest does not
    /// reach is denied, one this host was not given is invalid.
    fn cluster_for(&self, at: At<'_>) -> Result<std::sync::Arc<dyn ClusterAccess>, ClientError> {
        let name = match at {
            At::Own => {
                return self.plugin.api.clone().ok_or_else(|| {
                    ClientError::Unavailable("this host has no Kubernetes API connected".into())
                });
            }
            At::Named(name) => name,
        };
        let manifest = &self.plugin.manifest;
        if manifest.cluster_rules(name).is_none() {
            PluginMetrics::inc(&self.plugin.metrics.denied);
            tracing::warn!(plugin = %self.plugin.name, key = %self.key, cluster = name, "plugin call denied by its manifest: cluster not granted");
            return Err(ClientError::Denied(format!(
                "the manifest of plugin {} grants nothing in cluster \"{name}\" (no [clusters.{name}] or [clusters.\"*\"] in {})",
                self.plugin.name,
                manifest.path.display()
            )));
        }
        self.plugin.clusters.get(name).ok_or_else(|| {
            let known: Vec<String> = self.plugin.clusters.names();
            ClientError::Invalid(format!(
                "cluster \"{name}\" is not configured on this host (wasmlet up|run --cluster {name}=KUBECONFIG, or a file {name} in --clusters-dir; configured: {})",
                if known.is_empty() {
                    "none".to_string()
                } else {
                    known.join(", ")
                }
            ))
        })
    }

    /// Resolves the kind and checks the manifest grants `verb` on it (or on
    /// `resource/sub`) in cluster `at`. A refusal is logged and counted.
    async fn authorize(
        &mut self,
        at: At<'_>,
        api_version: &str,
        kind: &str,
        sub: Option<&str>,
        verb: &str,
    ) -> Result<(std::sync::Arc<dyn ClusterAccess>, Resolved), ClientError> {
        let api = self.cluster_for(at)?;
        let manifest = self.plugin.manifest.clone();
        let rules = rules_in(&manifest, at);
        let group = group_of(api_version);
        // Before discovery: a call no rule could grant (group, verb, subresource)
        // is refused without reaching the API server.
        if !rules_may_allow(rules, group, sub, verb) {
            let what = format!(
                "{verb} {}",
                sub.map_or(kind.to_string(), |s| format!("{kind}/{s}"))
            );
            return Err(self.deny(at, group, &what));
        }
        let r = self
            .deadline()
            .bound(api.resolve(api_version, kind))
            .await?;
        let resource = match sub {
            Some(s) => format!("{}/{s}", r.resource.plural),
            None => r.resource.plural.clone(),
        };
        if !rules_allow(rules, group, &resource, verb) {
            return Err(self.deny(at, group, &format!("{verb} {resource}")));
        }
        Ok((api, r))
    }

    /// What is left of the call's deadline (it runs from the start of the call).
    fn remaining(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.plugin.manifest.limits.deadline_ms)
            .saturating_sub(self.started.elapsed())
    }

    fn deadline(&self) -> Deadline {
        Deadline {
            left: self.remaining(),
            ms: self.plugin.manifest.limits.deadline_ms,
        }
    }

    /// Logs, counts and returns the refusal of `what` (verb and resource) in
    /// `group`, in cluster `at`.
    fn deny(&self, at: At<'_>, group: &str, what: &str) -> ClientError {
        PluginMetrics::inc(&self.plugin.metrics.denied);
        let what = if group.is_empty() {
            what.to_string()
        } else {
            format!("{what}.{group}")
        };
        let where_ = at.where_();
        tracing::warn!(plugin = %self.plugin.name, key = %self.key, denied = %what, cluster = ?at, "plugin call denied by its manifest");
        ClientError::Denied(format!(
            "the manifest of plugin {} does not grant \"{what}\"{where_} ({})",
            self.plugin.name,
            self.plugin.manifest.path.display()
        ))
    }
}

/// The rest of a call's deadline, which bounds each request to the cluster.
/// Epoch deadlines interrupt guest code, not a host call the guest waits on:
/// without this a stalled API server would hold the call, and its worker, for
/// as long as the client's own timeouts (minutes).
#[derive(Clone, Copy)]
struct Deadline {
    left: std::time::Duration,
    ms: u64,
}

impl Deadline {
    fn passed(self) -> ApiClientError {
        ApiClientError::Unavailable(format!(
            "no answer from the API server within the call's deadline ({} ms)",
            self.ms
        ))
    }

    async fn bound<T>(
        self,
        request: impl std::future::Future<Output = Result<T, ApiClientError>>,
    ) -> Result<T, ApiClientError> {
        tokio::time::timeout(self.left, request)
            .await
            .unwrap_or_else(|_| Err(self.passed()))
    }
}

/// The largest object a guest may create: the API server's request limit.
const MAX_OBJECT_BYTES: usize = 3 * 1024 * 1024;

/// The most objects one `create-all` takes.
pub(crate) const MAX_CREATE_ALL: usize = 500;

/// Creates one `create-all` has in flight at once: a batch is one round
/// trip's wait, not a flood of the API server.
const CREATES_AT_ONCE: usize = 32;

/// A create the manifest grants, ready to send.
struct Create {
    api: std::sync::Arc<dyn ClusterAccess>,
    r: Resolved,
    namespace: Option<String>,
    obj: Value,
    api_version: String,
    kind: String,
}

impl Create {
    async fn send(&self) -> Result<String, ApiClientError> {
        self.api
            .create(&self.r, self.namespace.as_deref(), &self.obj)
            .await
    }
}

/// A server-side apply's field manager must be a qualified name (any error refuses it).
fn check_field_manager(name: &str) -> Result<(), ClientError> {
    let errors = names::is_qualified_name(name);
    if errors.is_empty() {
        Ok(())
    } else {
        Err(ClientError::Invalid(format!(
            "field manager \"{name}\" is not valid: {}",
            errors.join("; ")
        )))
    }
}

fn parse_json(s: &str) -> Result<Value, ClientError> {
    serde_json::from_str(s).map_err(|e| ClientError::Invalid(format!("not JSON: {e}")))
}

fn meta_of(v: &Value) -> (String, String, Option<String>, String) {
    let s = |p: &str| {
        v.pointer(p)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    let ns = v
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .map(str::to_string);
    (s("/apiVersion"), s("/kind"), ns, s("/metadata/name"))
}

impl State {
    /// Notes 409/429 so the controller retries soon instead of backing off.
    fn note<T>(&mut self, r: Result<T, ApiClientError>) -> Result<T, ClientError> {
        if matches!(
            r,
            Err(ApiClientError::Conflict(_)) | Err(ApiClientError::TooManyRequests)
        ) {
            self.retry_soon = true;
        }
        r.map_err(ClientError::from)
    }
}

/// The live imports: what the host does when nothing is replayed.
impl State {
    async fn get_live(&mut self, at: At<'_>, target: ObjectRef) -> Result<String, ClientError> {
        let (api, r) = self
            .authorize(at, &target.api_version, &target.kind, None, "get")
            .await?;
        let r = self
            .deadline()
            .bound(api.get(&r, target.namespace.as_deref(), &target.name))
            .await;
        self.note(r)
    }

    async fn list_live(
        &mut self,
        at: At<'_>,
        of: TypeRef,
        params: client::ListParams,
    ) -> Result<Vec<String>, ClientError> {
        let (api, r) = self
            .authorize(at, &of.api_version, &of.kind, None, "list")
            .await?;
        let r = self
            .deadline()
            .bound(api.list(
                &r,
                params.namespace.as_deref(),
                &params.label_selector,
                params.field_selector.as_deref(),
            ))
            .await;
        self.note(r)
    }

    async fn list_changes_live(
        &mut self,
        at: At<'_>,
        of: TypeRef,
        params: client::ListParams,
        since: u64,
    ) -> Result<client::Changes, ClientError> {
        let (api, r) = self
            .authorize(at, &of.api_version, &of.kind, None, "list")
            .await?;
        let r = self
            .deadline()
            .bound(api.list_changes(
                &r,
                params.namespace.as_deref(),
                &params.label_selector,
                params.field_selector.as_deref(),
                since,
            ))
            .await;
        let c = self.note(r)?;
        Ok(client::Changes {
            applied: c.applied,
            removed: c.removed,
            cursor: c.cursor,
            reset: c.reset,
        })
    }

    async fn create_live(&mut self, at: At<'_>, obj: String) -> Result<String, ClientError> {
        let create = self.authorize_create(at, &obj).await?;
        let created = self.deadline().bound(create.send()).await;
        self.created(at, create.api_version, create.kind, created)
    }

    /// `create-all`: each object checked as `create` (a refusal answers that
    /// object alone), then the creates sent [`CREATES_AT_ONCE`] at a time.
    /// Objects are parsed one by one as places free up, and each guest string
    /// is dropped once parsed: the host holds the batch as the guest sent it
    /// and at most [`CREATES_AT_ONCE`] parsed objects (parsing a 103 MiB batch
    /// at once grew the host by 3.4 GB).
    async fn create_all_live(&mut self, objs: Vec<String>) -> Vec<Result<String, ClientError>> {
        type Sent = Result<(String, String, Result<String, ApiClientError>), ClientError>;
        let deadline = self.deadline();
        let mut in_flight: futures::stream::FuturesOrdered<
            std::pin::Pin<Box<dyn std::future::Future<Output = Sent> + Send>>,
        > = futures::stream::FuturesOrdered::new();
        let mut sent: Vec<Sent> = Vec::with_capacity(objs.len());
        for obj in objs {
            if in_flight.len() >= CREATES_AT_ONCE
                && let Some(done) = in_flight.next().await
            {
                sent.push(done);
            }
            let checked = self.authorize_create(At::Own, &obj).await;
            drop(obj);
            in_flight.push_back(match checked {
                Ok(c) => Box::pin(async move {
                    let created = deadline.bound(c.send()).await;
                    Ok((c.api_version, c.kind, created))
                }),
                Err(e) => Box::pin(std::future::ready(Err(e))),
            });
        }
        while let Some(done) = in_flight.next().await {
            sent.push(done);
        }
        sent.into_iter()
            .map(|s| s.and_then(|(av, kind, created)| self.created(At::Own, av, kind, created)))
            .collect()
    }

    /// Parses `obj` and checks the manifest grants creating it.
    async fn authorize_create(&mut self, at: At<'_>, obj: &str) -> Result<Create, ClientError> {
        // Refused before it is parsed: the API server takes no larger body,
        // and a parsed object takes several times its text.
        if obj.len() > MAX_OBJECT_BYTES {
            return Err(ClientError::Invalid(format!(
                "the object is {} bytes; the API server takes at most {MAX_OBJECT_BYTES} (3 MiB)",
                obj.len()
            )));
        }
        let v = parse_json(obj)?;
        let (api_version, kind, namespace, _) = meta_of(&v);
        let (api, r) = self
            .authorize(at, &api_version, &kind, None, "create")
            .await?;
        Ok(Create {
            api,
            r,
            namespace,
            obj: v,
            api_version,
            kind,
        })
    }

    /// A create's answer: the stored object, its write remembered for the
    /// expectations (own cluster).
    fn created(
        &mut self,
        at: At<'_>,
        api_version: String,
        kind: String,
        created: Result<String, ApiClientError>,
    ) -> Result<String, ClientError> {
        let created = self.note(created)?;
        if !at.expects_writes() {
            return Ok(created);
        }
        let c = parse_json(&created)?;
        let (_, _, ns, name) = meta_of(&c);
        let uid = c
            .pointer("/metadata/uid")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        self.writes.push(Write::Created {
            api_version,
            kind,
            namespace: ns,
            name,
            uid,
        });
        Ok(created)
    }

    async fn update_live(&mut self, at: At<'_>, obj: String) -> Result<String, ClientError> {
        let v = parse_json(&obj)?;
        let (av, kind, ns, name) = meta_of(&v);
        let (api, r) = self.authorize(at, &av, &kind, None, "update").await?;
        let updated = self
            .deadline()
            .bound(api.update(&r, ns.as_deref(), &name, &v))
            .await;
        let updated = self.note(updated)?;
        if !at.expects_writes() {
            return Ok(updated);
        }
        let rv = parse_json(&updated)?
            .pointer("/metadata/resourceVersion")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        self.writes.push(Write::Updated {
            api_version: av,
            kind,
            namespace: ns,
            name,
            resource_version: rv,
        });
        Ok(updated)
    }

    async fn patch_live(
        &mut self,
        at: At<'_>,
        target: ObjectRef,
        how: PatchType,
        body: String,
    ) -> Result<String, ClientError> {
        self.patch_any(at, target, how, body, false).await
    }

    async fn patch_status_live(
        &mut self,
        at: At<'_>,
        target: ObjectRef,
        how: PatchType,
        body: String,
    ) -> Result<String, ClientError> {
        self.patch_any(at, target, how, body, true).await
    }

    async fn delete_live(
        &mut self,
        at: At<'_>,
        target: ObjectRef,
        options: DeleteOptions,
    ) -> Result<(), ClientError> {
        let (api, r) = self
            .authorize(at, &target.api_version, &target.kind, None, "delete")
            .await?;
        let uid = api.cached_uid(
            &target.api_version,
            &target.kind,
            target.namespace.as_deref(),
            &target.name,
        );
        let r = self
            .deadline()
            .bound(api.delete(
                &r,
                target.namespace.as_deref(),
                &target.name,
                &delete_of(&options),
            ))
            .await;
        self.note(r)?;
        if !at.expects_writes() {
            return Ok(());
        }
        self.writes.push(Write::Deleted {
            api_version: target.api_version,
            kind: target.kind,
            namespace: target.namespace,
            name: target.name,
            uid,
        });
        Ok(())
    }

    async fn evict_live(
        &mut self,
        namespace: String,
        name: String,
        options: DeleteOptions,
    ) -> Result<(), ClientError> {
        let allowed = self.plugin.manifest.allows("", "pods", "evict")
            || self.plugin.manifest.allows("", "pods/eviction", "create");
        if !allowed {
            PluginMetrics::inc(&self.plugin.metrics.denied);
            tracing::warn!(plugin = %self.plugin.name, key = %self.key, denied = "evict pods", "plugin call denied by its manifest");
            return Err(ClientError::Denied(format!(
                "the manifest of plugin {} does not grant \"evict pods\"",
                self.plugin.name
            )));
        }
        let api = self
            .plugin
            .api
            .clone()
            .ok_or_else(|| ClientError::Unavailable("no Kubernetes API".into()))?;
        let uid = api.cached_uid("v1", "Pod", Some(&namespace), &name);
        let r = self
            .deadline()
            .bound(api.evict(&namespace, &name, &delete_of(&options)))
            .await;
        self.note(r)?;
        self.writes.push(Write::Evicted {
            namespace,
            name,
            uid,
        });
        Ok(())
    }

    async fn bind_live(
        &mut self,
        namespace: String,
        name: String,
        node: String,
    ) -> Result<(), ClientError> {
        if !self.plugin.manifest.allows("", "pods/binding", "create") {
            return Err(self.deny(At::Own, "", "create pods/binding"));
        }
        let api = self
            .plugin
            .api
            .clone()
            .ok_or_else(|| ClientError::Unavailable("no Kubernetes API".into()))?;
        let bound = |namespace, name, resource_version| Write::Updated {
            api_version: "v1".into(),
            kind: "Pod".into(),
            namespace: Some(namespace),
            name,
            resource_version,
        };
        let in_flight = self.plugin.manifest.limits.bindings_in_flight as usize;
        if self.in_flight.len() < in_flight {
            // Sent, not waited for (`in_flight`): bounded by the plugin's
            // deadline from now, as the call it leaves would have been. Past
            // the limit, a call's bindings wait as without it.
            let what = format!("pod {namespace}/{name} to node {node}");
            let ms = self.plugin.manifest.limits.deadline_ms;
            let deadline = Deadline {
                left: std::time::Duration::from_millis(ms),
                ms,
            };
            self.in_flight.push(InFlight::send(what, async move {
                let rv = deadline.bound(api.bind(&namespace, &name, &node)).await?;
                Ok(bound(namespace, name, rv))
            }));
            return Ok(());
        }
        let r = self
            .deadline()
            .bound(api.bind(&namespace, &name, &node))
            .await;
        let resource_version = self.note(r)?;
        self.writes.push(bound(namespace, name, resource_version));
        Ok(())
    }

    async fn record_event_live(&mut self, event: Event) -> Result<(), ClientError> {
        let Some(sink) = &self.plugin.events else {
            return Err(ClientError::Unavailable(
                "this host records no events".into(),
            ));
        };
        // The uid from the host's caches, where the object is cached (what a
        // controller reports on is its own, owned or watched object):
        // `kubectl describe` finds an object's Events by uid.
        let api = self.plugin.api.clone();
        let reference = |o: &ObjectRef| k8s_openapi::api::core::v1::ObjectReference {
            api_version: Some(o.api_version.clone()),
            kind: Some(o.kind.clone()),
            // A cluster-scoped object's events go to `default`, as upstream's
            // recorders put them: an empty namespace would name no namespace.
            namespace: o.namespace.clone().filter(|n| !n.is_empty()),
            name: Some(o.name.clone()),
            uid: api.as_ref().and_then(|api| {
                api.cached_uid(&o.api_version, &o.kind, o.namespace.as_deref(), &o.name)
            }),
            ..Default::default()
        };
        let ev = kube::runtime::events::Event {
            type_: match event.type_ {
                EventType::Normal => kube::runtime::events::EventType::Normal,
                EventType::Warning => kube::runtime::events::EventType::Warning,
            },
            reason: event.reason,
            note: Some(event.note),
            action: event.action,
            secondary: event.related.as_ref().map(reference),
        };
        let deadline = self.deadline();
        let published = tokio::time::timeout(
            deadline.left,
            sink.publish(ev, &reference(&event.regarding)),
        )
        .await;
        match published {
            Ok(Ok(())) => Ok(()),
            Ok(Err(Dropped::Throttled)) => {
                PluginMetrics::inc(&self.plugin.metrics.events_dropped);
                tracing::debug!(plugin = %self.plugin.name, key = %self.key, "event dropped: over record-event's rate limits");
                Ok(())
            }
            Ok(Err(Dropped::Failed(e))) => Err(ApiClientError::from(e).into()),
            Err(_) => Err(deadline.passed().into()),
        }
    }
}

impl State {
    async fn patch_any(
        &mut self,
        at: At<'_>,
        target: ObjectRef,
        how: PatchType,
        body: String,
        status: bool,
    ) -> Result<String, ClientError> {
        let sub = status.then_some("status");
        let (api, r) = self
            .authorize(at, &target.api_version, &target.kind, sub, "patch")
            .await?;
        let kind = match how {
            PatchType::Merge => PatchKind::Merge,
            PatchType::Json => PatchKind::Json,
            PatchType::Strategic => PatchKind::Strategic,
            PatchType::Apply(o) => {
                check_field_manager(&o.field_manager)?;
                PatchKind::Apply {
                    manager: o.field_manager,
                    force: o.force,
                }
            }
        };
        let body = parse_json(&body)?;
        let patched = self
            .deadline()
            .bound(api.patch(
                &r,
                target.namespace.as_deref(),
                &target.name,
                kind,
                body,
                status,
            ))
            .await;
        let patched = self.note(patched)?;
        if !at.expects_writes() {
            return Ok(patched);
        }
        let rv = parse_json(&patched)?
            .pointer("/metadata/resourceVersion")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        self.writes.push(Write::Updated {
            api_version: target.api_version,
            kind: target.kind,
            namespace: target.namespace,
            name: target.name,
            resource_version: rv,
        });
        Ok(patched)
    }
}

impl types::Host for State {}
