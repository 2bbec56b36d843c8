//! One loaded plugin version: compiled, linked (`InstancePre`), checked against
//! the contract, and callable. Each call gets a fresh `Store` with the
//! manifest's memory cap and deadline; a trap, timeout, out-of-memory or
//! malformed result is an error for that call only.
//!
//! The sandboxed call (a fresh or warm `Store` under the manifest's limits,
//! failures classified and counted) is in `call`; the world's exports as
//! typed methods, each handed to one observer (`super::observe`: recording
//! and shadowing are watchers of the live call, a replay or a shadow
//! candidate's call runs again from a tape), are in `exports` (the provider
//! world's in `provider_calls`). Nothing here imports `record` or `shadow`.

mod call;
mod exports;
mod provider_calls;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::Semaphore;
use wasmtime::component::{Component, Linker};

use super::bindings::provider::{ProviderPlugin, ProviderPluginPre};
use super::bindings::reconciler::{ReconcilerPlugin, ReconcilerPluginPre};
use super::engine::PluginEngine;
use super::manifest::{CONTRACT_VERSION, Manifest, PluginKind};
use super::provider::StateGraph;
use super::sandbox::{PluginCtx, State};
use call::Warm;
use exports::{provider, reconciler};
pub(crate) use provider_calls::ProviderReply;

pub(crate) use super::outcome::CallError;

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
    /// A provider beside another: a node runs one provider.
    #[error("plugin {name} is a second provider beside {other}: a node runs one provider; {hint}")]
    SecondProvider {
        name: String,
        other: String,
        hint: String,
    },
    /// A CRD the plugin ships could not be applied safely.
    #[error("{path}: {message}")]
    Crd { path: String, message: String },
}

pub struct Loaded {
    pub(crate) name: String,
    /// sha256 of the `.wasm`.
    pub digest: String,
    pub manifest: Arc<Manifest>,
    pub(crate) ctx: Arc<PluginCtx>,
    pub(crate) declared_conditions: Vec<String>,
    pub(crate) load_time: Duration,
    /// Providers: the state graph, checked at load.
    pub(crate) graph: Option<StateGraph>,
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
    pub(crate) async fn load(
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
