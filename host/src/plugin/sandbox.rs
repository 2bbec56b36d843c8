//! What one call's `Store` holds: an empty WASI context (no files, no
//! environment, no sockets), the memory limiter, and the plugin's context for
//! its imports. A fresh one per call, so nothing leaks between reconciles.

use std::sync::Arc;

use wasmtime::component::ResourceTable;
use wasmtime::{ResourceLimiter, StoreLimits, StoreLimitsBuilder};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use super::api::ClusterApi;
use super::manifest::Manifest;
use super::metrics::PluginMetrics;

/// A write a guest made through `client`, for the controller's expectations.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Write {
    Created { api_version: String, kind: String, namespace: Option<String>, name: String, uid: String },
    Updated { api_version: String, kind: String, namespace: Option<String>, name: String, resource_version: String },
    Deleted { api_version: String, kind: String, namespace: Option<String>, name: String },
    Evicted { namespace: String, name: String },
}

/// Everything a plugin version's imports need, shared by its calls.
pub struct PluginCtx {
    pub name: String,
    pub manifest: Arc<Manifest>,
    pub api: Option<Arc<ClusterApi>>,
    pub metrics: Arc<PluginMetrics>,
    pub recorder: Option<kube::runtime::events::Recorder>,
    /// Providers only: the node agent's workload runner.
    pub workloads: Option<Arc<dyn super::provider::Workloads>>,
}

/// Denies growth past the manifest's cap and remembers that it did, so a trap
/// that follows is reported as out-of-memory rather than a plain trap.
pub struct Limiter {
    limits: StoreLimits,
    pub hit: bool,
}

impl ResourceLimiter for Limiter {
    fn memory_growing(&mut self, current: usize, desired: usize, maximum: Option<usize>) -> wasmtime::Result<bool> {
        let ok = self.limits.memory_growing(current, desired, maximum)?;
        self.hit |= !ok;
        Ok(ok)
    }

    fn table_growing(&mut self, current: usize, desired: usize, maximum: Option<usize>) -> wasmtime::Result<bool> {
        let ok = self.limits.table_growing(current, desired, maximum)?;
        self.hit |= !ok;
        Ok(ok)
    }
}

pub struct State {
    wasi: WasiCtx,
    table: ResourceTable,
    pub limiter: Limiter,
    pub plugin: Arc<PluginCtx>,
    /// The object the call is about, for logs.
    pub key: String,
    pub writes: Vec<Write>,
    /// A client call met 409 or 429: the controller retries soon, not with back-off.
    pub retry_soon: bool,
}

/// What a call did besides its result.
#[derive(Debug, Default, Clone)]
pub struct CallReport {
    pub writes: Vec<Write>,
    pub retry_soon: bool,
}

impl State {
    pub fn new(plugin: Arc<PluginCtx>, key: String) -> State {
        let mut wasi = WasiCtx::builder();
        wasi.allow_tcp(false).allow_udp(false).allow_ip_name_lookup(false);
        let memory = plugin.manifest.limits.memory_mib as usize * 1024 * 1024;
        State {
            wasi: wasi.build(),
            table: ResourceTable::new(),
            limiter: Limiter {
                limits: StoreLimitsBuilder::new().memory_size(memory).instances(64).tables(64).memories(16).build(),
                hit: false,
            },
            plugin,
            key,
            writes: Vec::new(),
            retry_soon: false,
        }
    }
}

impl WasiView for State {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView { ctx: &mut self.wasi, table: &mut self.table }
    }
}
