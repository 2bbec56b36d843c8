//! One loaded plugin version: compiled, linked (`InstancePre`), checked against
//! the contract, and callable. Each call gets a fresh `Store` with the
//! manifest's memory cap and CPU deadline; a trap, timeout, out-of-memory or
//! malformed result is an error for that call only.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::Semaphore;
use wasmtime::component::{Component, Linker};
use wasmtime::{Store, Trap};

use super::bindings::provider::{ProviderPlugin, ProviderPluginPre};
use super::bindings::reconciler::{ReconcilerPlugin, ReconcilerPluginPre};
use super::engine::PluginEngine;
use super::manifest::{CONTRACT_VERSION, Manifest, PluginKind};
use super::metrics::PluginMetrics;
use super::outcome::{BadResult, Finalized, GuestError, MAX_RESULT_BYTES, Reconciled};
use super::provider::{HandlerOutcome, StateGraph, WakeEvent};
use super::record::{CallKind, CallRecord, Outcome, Recording, Redaction, Tape, TapeMode, Taped};
use super::sandbox::{CallReport, PluginCtx, State};

/// Why a plugin version could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error(transparent)]
    Manifest(#[from] super::manifest::ManifestError),
    #[error(transparent)]
    Compile(#[from] super::engine::CompileError),
    #[error("{path}: {message}")]
    Contract { path: String, message: String },
    #[error("{path}: cannot be linked: {message}")]
    Link { path: String, message: String },
    /// The first call (`graph` for providers, `declared-conditions` for
    /// reconcilers) doubles as the check that the version works at all.
    #[error("{path}: failed its first call ({export}): {error}")]
    FirstCall {
        path: String,
        export: &'static str,
        error: CallError,
    },
    #[error("{path}: {message}")]
    Io { path: String, message: String },
    /// A CRD the plugin ships could not be applied safely.
    #[error("{path}: {message}")]
    Crd { path: String, message: String },
}

/// Why a call failed inside the sandbox (not the guest's own error result).
#[derive(Debug, Clone, thiserror::Error)]
pub enum CallError {
    #[error("the guest trapped: {0}")]
    Trap(String),
    #[error("the guest ran past its {0:?} deadline")]
    Timeout(Duration),
    #[error("the guest ran out of memory ({0} MiB cap)")]
    OutOfMemory(u32),
    #[error("the guest returned a malformed result: {0}")]
    Malformed(String),
    #[error("the guest returned a result of {bytes} bytes, over the host's limit of {limit} bytes")]
    TooLarge { bytes: usize, limit: usize },
}

pub struct Loaded {
    pub name: String,
    /// sha256 of the `.wasm`.
    pub digest: String,
    pub manifest: Arc<Manifest>,
    pub ctx: Arc<PluginCtx>,
    pub declared_conditions: Vec<String>,
    pub load_time: Duration,
    /// Providers: the state graph, checked at load.
    pub graph: Option<StateGraph>,
    engine: PluginEngine,
    pre: Pre,
    /// The manifest's `limits.concurrency`.
    slots: Arc<Semaphore>,
    /// Instances that finished a call cleanly, when the manifest opts in to reuse.
    idle: std::sync::Mutex<Vec<Warm>>,
}

/// The linked component, per world.
enum Pre {
    Reconciler(ReconcilerPluginPre<State>),
    Provider(ProviderPluginPre<State>),
}

/// An instantiated component, per world.
pub(crate) enum Instance {
    Reconciler(ReconcilerPlugin),
    Provider(ProviderPlugin),
}

/// An instance kept for the next call (`limits.reuse-instances`).
struct Warm {
    store: Store<State>,
    instance: Instance,
}

type CallFuture<'a, R> =
    std::pin::Pin<Box<dyn std::future::Future<Output = wasmtime::Result<R>> + Send + 'a>>;

/// Refuses components built against another contract version, naming it,
/// and components that do not export the world `kind` requires.
pub fn check_contract(
    engine: &PluginEngine,
    component: &Component,
    path: &Path,
    kind: PluginKind,
) -> Result<(), LoadError> {
    let ty = component.component_type();
    let mut names: Vec<String> = ty
        .exports(&engine.engine)
        .map(|(n, _)| n.to_string())
        .collect();
    names.extend(ty.imports(&engine.engine).map(|(n, _)| n.to_string()));
    for n in &names {
        if let Some(rest) = n.strip_prefix("wasmlet:plugin/")
            && let Some((_, version)) = rest.split_once('@')
            && version != CONTRACT_VERSION
        {
            return Err(LoadError::Contract {
                path: path.display().to_string(),
                message: format!(
                    "built against wasmlet:plugin@{version} ({n}); this host provides wasmlet:plugin@{CONTRACT_VERSION}"
                ),
            });
        }
    }
    let want = match kind {
        PluginKind::Reconciler => format!("wasmlet:plugin/reconciler@{CONTRACT_VERSION}"),
        PluginKind::Provider => format!("wasmlet:plugin/provider@{CONTRACT_VERSION}"),
    };
    if !names.contains(&want) {
        return Err(LoadError::Contract {
            path: path.display().to_string(),
            message: format!("does not export {want}, which its manifest's plugin.kind requires"),
        });
    }
    Ok(())
}

impl Loaded {
    pub async fn load(
        engine: &PluginEngine,
        wasm: &Path,
        manifest: Arc<Manifest>,
        ctx: Arc<PluginCtx>,
    ) -> Result<Loaded, LoadError> {
        let started = Instant::now();
        let (component, digest) = engine.load_file(wasm).await?;
        check_contract(engine, &component, wasm, manifest.plugin.kind)?;
        let link = |e: wasmtime::Error| LoadError::Link {
            path: wasm.display().to_string(),
            message: format!("{e:#}"),
        };
        let mut linker: Linker<State> = Linker::new(&engine.engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker).map_err(link)?;
        let pre = match manifest.plugin.kind {
            PluginKind::Reconciler => {
                ReconcilerPlugin::add_to_linker::<State, wasmtime::component::HasSelf<State>>(
                    &mut linker,
                    |s| s,
                )
                .map_err(link)?;
                Pre::Reconciler(
                    ReconcilerPluginPre::new(linker.instantiate_pre(&component).map_err(link)?)
                        .map_err(link)?,
                )
            }
            PluginKind::Provider => {
                ProviderPlugin::add_to_linker::<State, wasmtime::component::HasSelf<State>>(
                    &mut linker,
                    |s| s,
                )
                .map_err(link)?;
                Pre::Provider(
                    ProviderPluginPre::new(linker.instantiate_pre(&component).map_err(link)?)
                        .map_err(link)?,
                )
            }
        };
        let mut loaded = Loaded {
            name: ctx.name.clone(),
            digest,
            slots: Arc::new(Semaphore::new(manifest.limits.concurrency as usize)),
            manifest,
            ctx,
            declared_conditions: Vec::new(),
            graph: None,
            load_time: Duration::ZERO,
            engine: engine.clone(),
            pre,
            idle: std::sync::Mutex::new(Vec::new()),
        };
        // The first call doubles as the check that the new version works at all.
        let first = |export| {
            let path = wasm.display().to_string();
            move |error| LoadError::FirstCall {
                path,
                export,
                error,
            }
        };
        if loaded.manifest.plugin.kind == PluginKind::Provider {
            let graph = loaded
                .call("(load)", |inst, s| {
                    Box::pin(async move {
                        provider(inst)?
                            .wasmlet_plugin_provider()
                            .call_graph(s)
                            .await
                    })
                })
                .await
                .map_err(first("graph"))?
                .0;
            super::provider::validate_graph(&graph).map_err(|m| LoadError::Contract {
                path: wasm.display().to_string(),
                message: format!("state graph: {m}"),
            })?;
            loaded.graph = Some(graph);
            loaded.load_time = started.elapsed();
            return Ok(loaded);
        }
        let conditions = loaded
            .call("(load)", |inst, s| {
                Box::pin(async move {
                    reconciler(inst)?
                        .wasmlet_plugin_reconciler()
                        .call_declared_conditions(s)
                        .await
                })
            })
            .await
            .map_err(first("declared-conditions"))?
            .0;
        loaded.declared_conditions = conditions;
        loaded.load_time = started.elapsed();
        Ok(loaded)
    }

    pub fn deadline(&self) -> Duration {
        Duration::from_millis(self.manifest.limits.deadline_ms)
    }

    /// Runs `f` under the manifest's limits on a fresh instance — or, with
    /// `limits.reuse-instances`, on one that finished its last call cleanly
    /// (a trapped or failed instance is never reused).
    async fn call<R: Send>(
        &self,
        key: &str,
        f: impl for<'a> FnOnce(&'a Instance, &'a mut Store<State>) -> CallFuture<'a, R>,
    ) -> Result<(R, CallReport), CallError> {
        self.call_taped(key, TapeMode::Off, 0, &mut None, f).await
    }

    /// [`Loaded::call`] with the store's tape in `mode` (`seed`: a replayed
    /// store's insecure-seed); `taped` gets what the tape holds afterwards,
    /// whether the call succeeded or not.
    async fn call_taped<R: Send>(
        &self,
        key: &str,
        mode: TapeMode,
        seed: u128,
        taped: &mut Option<Taped>,
        f: impl for<'a> FnOnce(&'a Instance, &'a mut Store<State>) -> CallFuture<'a, R>,
    ) -> Result<(R, CallReport), CallError> {
        let _slot = self
            .slots
            .acquire()
            .await
            .map_err(|_| CallError::Trap("plugin is shutting down".into()))?;
        PluginMetrics::inc(&self.ctx.metrics.calls);
        // A replay never reuses: each call's store answers from its own record.
        let reuse = self.manifest.limits.reuse_instances && !self.ctx.replay;
        let warm = if reuse {
            self.idle.lock().unwrap_or_else(|p| p.into_inner()).pop()
        } else {
            None
        };
        let (mut store, instance) = match warm {
            Some(Warm {
                mut store,
                instance,
            }) => {
                let data = store.data_mut();
                data.key = key.to_string();
                data.writes.clear();
                data.retry_soon = false;
                data.limiter.hit = false;
                (store, Some(instance))
            }
            None => {
                let tape = self.ctx.taped().then(|| {
                    let seed = if self.ctx.replay {
                        seed
                    } else {
                        rand::random::<u128>()
                    };
                    // A replay redacts the guest's requests as the recording
                    // host did (the manifest's `[record]`), so they compare alike.
                    let redaction = match &self.ctx.recording {
                        Some(r) => r.redaction.clone(),
                        None => self
                            .manifest
                            .record
                            .as_ref()
                            .map(|r| Redaction {
                                keep_secrets: r.keep_secrets,
                                sensitive_hosts: r.sensitive_http_hosts.clone(),
                            })
                            .unwrap_or_default(),
                    };
                    Tape::new(redaction, seed)
                });
                let mut store = Store::new(
                    &self.engine.engine,
                    State::with_tape(self.ctx.clone(), key.to_string(), tape),
                );
                store.limiter(|s| &mut s.limiter);
                store.epoch_deadline_trap();
                (store, None)
            }
        };
        // The deadline (and the `http` import's budget) runs from this call's
        // start, also on a reused instance.
        store.data_mut().started = Instant::now();
        store.set_epoch_deadline(PluginEngine::ticks(self.deadline()));
        let tape = store.data().tape.clone();
        if let Some(t) = &tape {
            t.start(mode);
        }
        let result = self.run(&mut store, instance, f).await;
        if let Some(t) = &tape {
            *taped = Some(t.finish());
        }
        let (r, instance) = result?;
        let data = store.data_mut();
        let report = CallReport {
            writes: std::mem::take(&mut data.writes),
            retry_soon: data.retry_soon,
            record: None,
        };
        if reuse {
            self.idle
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(Warm { store, instance });
        }
        Ok((r, report))
    }

    /// Instantiates (unless `instance` is a warm one) and runs `f`.
    async fn run<R: Send>(
        &self,
        store: &mut Store<State>,
        instance: Option<Instance>,
        f: impl for<'a> FnOnce(&'a Instance, &'a mut Store<State>) -> CallFuture<'a, R>,
    ) -> Result<(R, Instance), CallError> {
        let instance = match instance {
            Some(i) => i,
            None => {
                let made = match &self.pre {
                    Pre::Reconciler(p) => p
                        .instantiate_async(&mut *store)
                        .await
                        .map(Instance::Reconciler),
                    Pre::Provider(p) => p
                        .instantiate_async(&mut *store)
                        .await
                        .map(Instance::Provider),
                };
                match made {
                    Ok(i) => i,
                    Err(e) => return Err(self.classify(e, store.data().limiter.hit)),
                }
            }
        };
        let result = f(&instance, store).await;
        match result {
            Ok(r) => Ok((r, instance)),
            Err(e) => Err(self.classify(e, store.data().limiter.hit)),
        }
    }

    fn classify(&self, e: wasmtime::Error, memory_cap_hit: bool) -> CallError {
        let error = match e.downcast_ref::<Trap>() {
            Some(Trap::Interrupt) => CallError::Timeout(self.deadline()),
            _ if memory_cap_hit => CallError::OutOfMemory(self.manifest.limits.memory_mib),
            _ => CallError::Trap(format!("{e:#}")),
        };
        self.failed(error)
    }

    /// Counts a failed call by kind and logs it.
    fn failed(&self, error: CallError) -> CallError {
        let m = &self.ctx.metrics;
        match &error {
            CallError::Timeout(_) => PluginMetrics::inc(&m.timeouts),
            CallError::OutOfMemory(_) => PluginMetrics::inc(&m.out_of_memory),
            CallError::Trap(_) => PluginMetrics::inc(&m.traps),
            CallError::Malformed(_) => PluginMetrics::inc(&m.malformed),
            CallError::TooLarge { .. } => PluginMetrics::inc(&m.oversized),
        }
        tracing::warn!(plugin = %self.name, error = %error, "plugin call failed");
        error
    }

    /// A result the host refuses, as the call's error.
    fn refused(&self, bad: BadResult) -> CallError {
        self.failed(match bad {
            BadResult::Status(s) => {
                CallError::Malformed(format!("status is not a JSON object: {}", truncate(&s)))
            }
            BadResult::TooLarge(bytes) => CallError::TooLarge {
                bytes,
                limit: MAX_RESULT_BYTES,
            },
        })
    }

    /// `reconcile` on a fresh instance. Returns the guest's result and the
    /// writes it made (and, recording, the call's record).
    pub async fn reconcile(
        &self,
        key: &str,
        obj: &str,
    ) -> Result<(Result<Reconciled, GuestError>, CallReport), CallError> {
        let Some(recording) = &self.ctx.recording else {
            return self
                .reconcile_taped(key, obj, TapeMode::Off, 0, &mut None)
                .await;
        };
        let mut taped = None;
        let mut r = self
            .reconcile_taped(key, obj, TapeMode::Record, 0, &mut taped)
            .await;
        let outcome = Outcome::of_reconcile(&r);
        self.attach_record(
            recording,
            CallKind::Reconcile,
            key,
            obj,
            taped,
            outcome,
            &mut r,
        );
        r
    }

    /// Hands the record of a call that just ran to the report, where the host
    /// adds its writes before it is written; a failed call has no host writes
    /// to wait for, so its record goes now (when the pending record drops).
    #[allow(clippy::too_many_arguments)]
    fn attach_record<T>(
        &self,
        recording: &Recording,
        call: CallKind,
        key: &str,
        obj: &str,
        taped: Option<Taped>,
        outcome: Outcome,
        r: &mut Result<(Result<T, GuestError>, CallReport), CallError>,
    ) {
        let record = self.call_record(
            recording,
            call,
            key,
            obj,
            taped.unwrap_or_default(),
            outcome,
        );
        let pending = recording.pending(record);
        if let Ok((_, report)) = r {
            report.record = Some(pending);
        }
    }

    /// The record of a call that just ran.
    fn call_record(
        &self,
        recording: &Recording,
        call: CallKind,
        key: &str,
        obj: &str,
        taped: Taped,
        outcome: Outcome,
    ) -> CallRecord {
        let mut input = serde_json::from_str(obj).unwrap_or(serde_json::Value::Null);
        recording.redaction.object(&mut input);
        CallRecord {
            seq: recording.writer.next_seq(),
            at: super::record::now_rfc3339(),
            plugin: self.name.clone(),
            digest: self.digest.clone(),
            call,
            key: key.to_string(),
            input,
            insecure_seed: format!("{:x}", taped.seed),
            imports: taped.entries,
            outcome,
            host_writes: Vec::new(),
        }
    }

    /// Runs one recorded call again on this version, every import answered
    /// from `record` (the plugin must have been loaded for replay).
    pub async fn replay(&self, record: &CallRecord) -> (Outcome, Taped) {
        let seed = u128::from_str_radix(&record.insecure_seed, 16).unwrap_or(0);
        let mode = TapeMode::Replay(record.imports.clone());
        let obj = record.input.to_string();
        let mut taped = None;
        let outcome = match record.call {
            CallKind::Reconcile => Outcome::of_reconcile(
                &self
                    .reconcile_taped(&record.key, &obj, mode, seed, &mut taped)
                    .await,
            ),
            CallKind::Finalize => Outcome::of_finalize(
                &self
                    .finalize_taped(&record.key, &obj, mode, seed, &mut taped)
                    .await,
            ),
        };
        (outcome, taped.unwrap_or_default())
    }

    async fn reconcile_taped(
        &self,
        key: &str,
        obj: &str,
        mode: TapeMode,
        seed: u128,
        taped: &mut Option<Taped>,
    ) -> Result<(Result<Reconciled, GuestError>, CallReport), CallError> {
        let obj = obj.to_string();
        let (result, report) = self
            .call_taped(key, mode, seed, taped, move |inst, s| {
                Box::pin(async move {
                    reconciler(inst)?
                        .wasmlet_plugin_reconciler()
                        .call_reconcile(s, &obj)
                        .await
                })
            })
            .await?;
        let result = match result {
            Ok(o) => Reconciled::try_from(o).map(Ok),
            Err(e) => GuestError::try_from(e).map(Err),
        };
        match result {
            Ok(result) => Ok((result, report)),
            Err(bad) => Err(self.refused(bad)),
        }
    }

    pub async fn finalize(
        &self,
        key: &str,
        obj: &str,
    ) -> Result<(Result<Finalized, GuestError>, CallReport), CallError> {
        let Some(recording) = &self.ctx.recording else {
            return self
                .finalize_taped(key, obj, TapeMode::Off, 0, &mut None)
                .await;
        };
        let mut taped = None;
        let mut r = self
            .finalize_taped(key, obj, TapeMode::Record, 0, &mut taped)
            .await;
        let outcome = Outcome::of_finalize(&r);
        self.attach_record(
            recording,
            CallKind::Finalize,
            key,
            obj,
            taped,
            outcome,
            &mut r,
        );
        r
    }

    async fn finalize_taped(
        &self,
        key: &str,
        obj: &str,
        mode: TapeMode,
        seed: u128,
        taped: &mut Option<Taped>,
    ) -> Result<(Result<Finalized, GuestError>, CallReport), CallError> {
        let obj = obj.to_string();
        let (result, report) = self
            .call_taped(key, mode, seed, taped, move |inst, s| {
                Box::pin(async move {
                    reconciler(inst)?
                        .wasmlet_plugin_reconciler()
                        .call_finalize(s, &obj)
                        .await
                })
            })
            .await?;
        let result = match result {
            Ok(o) => Ok(Finalized::from(o)),
            Err(e) => match GuestError::try_from(e) {
                Ok(e) => Err(e),
                Err(bad) => return Err(self.refused(bad)),
            },
        };
        Ok((result, report))
    }

    /// Provider: the initial state data for a pod.
    pub async fn provider_init(
        &self,
        key: &str,
        pod: &str,
    ) -> Result<Result<String, String>, CallError> {
        let pod = pod.to_string();
        self.call(key, move |inst, s| {
            Box::pin(async move {
                provider(inst)?
                    .wasmlet_plugin_provider()
                    .call_init(s, &pod)
                    .await
            })
        })
        .await
        .map(|(r, _)| r)
    }

    /// Provider: one handler run.
    pub async fn provider_handle(
        &self,
        key: &str,
        state: &str,
        pod: &str,
        data: &str,
        event: Option<WakeEvent>,
    ) -> Result<Result<HandlerOutcome, String>, CallError> {
        let (state, pod, data) = (state.to_string(), pod.to_string(), data.to_string());
        self.call(key, move |inst, s| {
            Box::pin(async move {
                provider(inst)?
                    .wasmlet_plugin_provider()
                    .call_handle(s, &state, &pod, &data, event)
                    .await
            })
        })
        .await
        .map(|(r, _)| r)
    }

    /// Provider: the status fragment for a state.
    pub async fn provider_status(
        &self,
        key: &str,
        state: &str,
        pod: &str,
        data: &str,
    ) -> Result<String, CallError> {
        let (state, pod, data) = (state.to_string(), pod.to_string(), data.to_string());
        self.call(key, move |inst, s| {
            Box::pin(async move {
                provider(inst)?
                    .wasmlet_plugin_provider()
                    .call_status(s, &state, &pod, &data)
                    .await
            })
        })
        .await
        .map(|(r, _)| r)
    }
}

fn reconciler(inst: &Instance) -> wasmtime::Result<&ReconcilerPlugin> {
    match inst {
        Instance::Reconciler(p) => Ok(p),
        Instance::Provider(_) => Err(wasmtime::Error::msg("a provider has no reconciler exports")),
    }
}

fn provider(inst: &Instance) -> wasmtime::Result<&ProviderPlugin> {
    match inst {
        Instance::Provider(p) => Ok(p),
        Instance::Reconciler(_) => {
            Err(wasmtime::Error::msg("a reconciler has no provider exports"))
        }
    }
}

fn truncate(s: &str) -> String {
    if s.len() <= 80 {
        s.to_string()
    } else {
        format!("{}...", &s[..s.floor_char_boundary(80)])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn component(engine: &PluginEngine, wat: &str) -> Arc<Component> {
        let bytes = wat::parse_str(wat).expect("valid WAT");
        engine
            .load(Path::new("t.wasm"), &bytes)
            .expect("compiles")
            .0
    }

    #[test]
    fn refuses_another_contract_version_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let engine = PluginEngine::new(dir.path()).unwrap();
        let c = component(
            &engine,
            r#"(component (import "wasmlet:plugin/log@0.2.0" (instance)))"#,
        );
        let e = check_contract(
            &engine,
            &c,
            Path::new("/plugins/new.wasm"),
            PluginKind::Reconciler,
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "/plugins/new.wasm: built against wasmlet:plugin@0.2.0 (wasmlet:plugin/log@0.2.0); this host provides wasmlet:plugin@0.1.0"
        );
    }

    #[test]
    fn refuses_a_component_without_the_world_its_manifest_names() {
        let dir = tempfile::tempdir().unwrap();
        let engine = PluginEngine::new(dir.path()).unwrap();
        let c = component(
            &engine,
            r#"(component (import "wasmlet:plugin/log@0.1.0" (instance)))"#,
        );
        let e = check_contract(&engine, &c, Path::new("x.wasm"), PluginKind::Provider).unwrap_err();
        assert!(
            e.to_string()
                .contains("does not export wasmlet:plugin/provider@0.1.0"),
            "{e}"
        );
    }
}
