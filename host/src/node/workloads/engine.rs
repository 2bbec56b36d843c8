//! The engine pods' workloads run on: their own, never the plugins' (a type, so the
//! two cannot be swapped by mistake).

use std::path::Path;

use crate::plugin::engine::PluginEngine;

/// A `PluginEngine::for_workloads`: no pod can exhaust the instance pool the
/// reconcilers and providers instantiate from. Cheap to clone.
#[derive(Clone)]
pub struct WorkloadEngine(pub(crate) PluginEngine);

impl WorkloadEngine {
    /// Compiled components are cached under `cache_dir` (it may be the plugins'
    /// cache directory: artifacts are keyed by the engine's compatibility hash).
    pub fn new(cache_dir: &Path) -> anyhow::Result<WorkloadEngine> {
        Ok(WorkloadEngine(PluginEngine::for_workloads(cache_dir)?))
    }

    /// Compiles pods' modules in child processes of `exe`, as plugins are
    /// ([`PluginEngine::compile_in_child`]): a pod's module is untrusted input
    /// to the compiler.
    pub(crate) fn compile_in_child(self, exe: std::path::PathBuf) -> WorkloadEngine {
        WorkloadEngine(self.0.compile_in_child(exe))
    }
}
