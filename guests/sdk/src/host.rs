//! The seam between the SDK and whatever answers its imports.
//!
//! In a wasm32 guest every call goes straight to the wit-bindgen imports (the host).
//! On any other target (unit tests of guest logic, doc tests) calls go to the
//! [`Host`] installed on the current thread with [`crate::testing::FakeHost::install`]
//! or [`install`], so reconcile and handler functions run natively against a fake.
//!
//! The trait speaks the contract's own types (`crate::bindings`): it is the WIT
//! interface as a Rust trait, one method per import function. A function both
//! `client` and `clusters` have is one method taking the [`Cluster`] it
//! addresses, so a new one is written once for both.

#[cfg(target_arch = "wasm32")]
use crate::bindings::clusters as raw_clusters;
use crate::bindings::{
    client as raw, http as raw_http, log as raw_log, types, workloads as raw_wl,
};

/// Which cluster a call addresses: the host's own (the contract's `client`) or
/// one of its named clusters (`clusters`, with the name first).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cluster<'a> {
    /// The host's own cluster: the `client` import.
    Own,
    /// A named cluster of the host's configuration: the `clusters` import.
    Named(&'a str),
}

impl Cluster<'_> {
    /// The import `function` is in this cluster: `client.FUNCTION` or
    /// `clusters.FUNCTION`, as the host's records name it.
    pub(crate) fn import(self, function: &str) -> String {
        match self {
            Cluster::Own => format!("client.{function}"),
            Cluster::Named(_) => format!("clusters.{function}"),
        }
    }
}

/// One method per contract import. Implement it to fake the host in native tests
/// (or use [`crate::testing::FakeHost`]); every method has a default that fails with
/// `unavailable`, so a fake implements only what the code under test calls.
///
/// The methods taking a [`Cluster`] are the functions `client` and `clusters`
/// share; the rest of `client` (`list_changes`, `evict`, `bind`,
/// `record_event`) is the host's own cluster's only.
#[allow(unused_variables)]
pub trait Host {
    /// `get`: one object as JSON, from the host's cache.
    fn get(&self, at: Cluster<'_>, target: &types::ObjectRef) -> Result<String, raw::ClientError> {
        Err(unsupported(at, "get"))
    }
    /// `list`: the matching objects, one JSON document each.
    fn list(
        &self,
        at: Cluster<'_>,
        of: &types::TypeRef,
        params: &raw::ListParams,
    ) -> Result<Vec<String>, raw::ClientError> {
        Err(unsupported(at, "list"))
    }
    /// `create`: the created object as the server returned it.
    fn create(&self, at: Cluster<'_>, obj: &str) -> Result<String, raw::ClientError> {
        Err(unsupported(at, "create"))
    }
    /// `update`: a full replace, answered with the stored object.
    fn update(&self, at: Cluster<'_>, obj: &str) -> Result<String, raw::ClientError> {
        Err(unsupported(at, "update"))
    }
    /// `status`: the `patch-status` import rather than `patch`.
    fn patch(
        &self,
        at: Cluster<'_>,
        target: &types::ObjectRef,
        how: &raw::PatchType,
        body: &str,
        status: bool,
    ) -> Result<String, raw::ClientError> {
        Err(unsupported(
            at,
            if status { "patch-status" } else { "patch" },
        ))
    }
    /// `delete`.
    fn delete(
        &self,
        at: Cluster<'_>,
        target: &types::ObjectRef,
        options: &raw::DeleteOptions,
    ) -> Result<(), raw::ClientError> {
        Err(unsupported(at, "delete"))
    }
    /// `client.list-changes`. The default answers `list` in full, with `reset`
    /// (a fake that keeps no journal is still a correct one).
    fn list_changes(
        &self,
        of: &types::TypeRef,
        params: &raw::ListParams,
        since: u64,
    ) -> Result<raw::Changes, raw::ClientError> {
        let _ = since;
        Ok(raw::Changes {
            applied: self.list(Cluster::Own, of, params)?,
            removed: vec![],
            cursor: 0,
            reset: true,
        })
    }
    /// `client.evict`: the pod's eviction subresource, which PodDisruptionBudgets may refuse.
    fn evict(
        &self,
        namespace: &str,
        name: &str,
        options: &raw::DeleteOptions,
    ) -> Result<(), raw::ClientError> {
        Err(unsupported(Cluster::Own, "evict"))
    }
    /// `client.bind`: assigns a pod to a node (`pods/binding`), as a scheduler does.
    fn bind(&self, namespace: &str, name: &str, node: &str) -> Result<(), raw::ClientError> {
        Err(unsupported(Cluster::Own, "bind"))
    }
    /// `client.create-all`: a batch of creates. The default sends each through
    /// [`Host::create`], so a fake answers a batch as the creates it is.
    fn create_all(
        &self,
        objs: &[String],
    ) -> Result<Vec<Result<String, raw::ClientError>>, raw::ClientError> {
        Ok(objs.iter().map(|o| self.create(Cluster::Own, o)).collect())
    }
    /// `client.record-event`.
    fn record_event(&self, event: &raw::Event) -> Result<(), raw::ClientError> {
        Err(unsupported(Cluster::Own, "record-event"))
    }
    /// `log.enabled`: whether a record at `level` would be kept (the default keeps all).
    fn log_enabled(&self, level: raw_log::Level) -> bool {
        true
    }
    /// `log.log`: one structured record (the default drops it).
    fn log(&self, level: raw_log::Level, message: &str, fields: &[(String, String)]) {}
    /// `http.fetch`: an outbound request to a host the manifest allows.
    fn http_fetch(
        &self,
        req: &raw_http::Request,
    ) -> Result<raw_http::Response, raw_http::HttpError> {
        Err(raw_http::HttpError::Other(
            "http.fetch is not supported by this test host".into(),
        ))
    }
    /// `workloads.fetch-module`: looks up or starts fetching a module; never blocks.
    fn fetch_module(
        &self,
        req: &raw_wl::FetchRequest,
    ) -> Result<raw_wl::FetchProgress, raw_wl::FetchError> {
        Err(raw_wl::FetchError::Other(
            "workloads.fetch-module is not supported by this test host".into(),
        ))
    }
    /// `workloads.prepare-volume`: creates (or finds) a pod volume.
    fn prepare_volume(&self, req: &raw_wl::VolumeRequest) -> Result<u64, raw_wl::WorkloadError> {
        Err(wl_unsupported("workloads.prepare-volume"))
    }
    /// `workloads.spawn`: starts a workload and returns its handle at once.
    fn spawn(&self, spec: &raw_wl::SpawnSpec) -> Result<u64, raw_wl::WorkloadError> {
        Err(wl_unsupported("workloads.spawn"))
    }
    /// `workloads.status`: where a workload stands now.
    fn workload_status(
        &self,
        handle: u64,
    ) -> Result<raw_wl::WorkloadStatus, raw_wl::WorkloadError> {
        Err(wl_unsupported("workloads.status"))
    }
    /// `workloads.kill`: asks the workload to stop within `grace_ms`, then interrupts it.
    fn kill(&self, handle: u64, grace_ms: u32) -> Result<(), raw_wl::WorkloadError> {
        Err(wl_unsupported("workloads.kill"))
    }
    /// `workloads.read-logs`: the last `max_bytes` of its combined stdout and stderr.
    fn read_logs(&self, handle: u64, max_bytes: u32) -> Result<Vec<u8>, raw_wl::WorkloadError> {
        Err(wl_unsupported("workloads.read-logs"))
    }
    /// `workloads.release-pod`: kills and forgets what still runs for the pod, removes its volumes (the default does nothing).
    fn release_pod(&self, pod_uid: &str) {}
}

fn unsupported(at: Cluster<'_>, function: &str) -> raw::ClientError {
    raw::ClientError::Unavailable(format!(
        "{} is not supported by this test host",
        at.import(function)
    ))
}

fn wl_unsupported(what: &str) -> raw_wl::WorkloadError {
    raw_wl::WorkloadError::Failed(format!("{what} is not supported by this test host"))
}

/// Runs `f` with the host that answers this guest's imports.
#[cfg(target_arch = "wasm32")]
pub(crate) fn with_host<R>(f: impl FnOnce(&dyn Host) -> R) -> R {
    f(&Imports)
}

/// Runs `f` with the test host installed on this thread.
///
/// # Panics
/// When none is installed: outside wasm there is no real host to fall back to.
#[cfg(not(target_arch = "wasm32"))]
pub(crate) fn with_host<R>(f: impl FnOnce(&dyn Host) -> R) -> R {
    let host = TEST_HOST.with(|h| h.borrow().clone()).expect(
        "no wasmlet host on this thread: outside wasm, install one first \
         (wasmlet_sdk::testing::FakeHost::new().install())",
    );
    f(&*host)
}

#[cfg(not(target_arch = "wasm32"))]
thread_local! {
    static TEST_HOST: std::cell::RefCell<Option<std::rc::Rc<dyn Host>>> = const { std::cell::RefCell::new(None) };
}

/// Installs `host` for the current thread until the returned guard drops
/// (native targets only; a wasm guest always talks to its real host).
#[cfg(not(target_arch = "wasm32"))]
pub fn install(host: std::rc::Rc<dyn Host>) -> InstalledHost {
    let previous = TEST_HOST.with(|h| h.borrow_mut().replace(host));
    InstalledHost { previous }
}

/// Restores the previously installed host when dropped.
#[cfg(not(target_arch = "wasm32"))]
#[must_use = "the host is uninstalled when this guard drops"]
pub struct InstalledHost {
    previous: Option<std::rc::Rc<dyn Host>>,
}

#[cfg(not(target_arch = "wasm32"))]
impl Drop for InstalledHost {
    fn drop(&mut self) {
        let previous = self.previous.take();
        TEST_HOST.with(|h| *h.borrow_mut() = previous);
    }
}

/// The real host: the component's imports.
#[cfg(target_arch = "wasm32")]
struct Imports;

/// The one place `client` and `clusters` stay twins: each shared function's
/// two bindings. Always inlined, so with the cluster a constant at the call
/// (`Own`, or a `ClusterClient`'s `Named`) only one binding is called, and a
/// guest that never names a cluster does not import `clusters`.
#[cfg(target_arch = "wasm32")]
impl Host for Imports {
    #[inline(always)]
    fn get(&self, at: Cluster<'_>, target: &types::ObjectRef) -> Result<String, raw::ClientError> {
        match at {
            Cluster::Own => raw::get(target),
            Cluster::Named(c) => raw_clusters::get(c, target),
        }
    }
    #[inline(always)]
    fn list(
        &self,
        at: Cluster<'_>,
        of: &types::TypeRef,
        params: &raw::ListParams,
    ) -> Result<Vec<String>, raw::ClientError> {
        match at {
            Cluster::Own => raw::list(of, params),
            Cluster::Named(c) => raw_clusters::list(c, of, params),
        }
    }
    #[inline(always)]
    fn create(&self, at: Cluster<'_>, obj: &str) -> Result<String, raw::ClientError> {
        match at {
            Cluster::Own => raw::create(obj),
            Cluster::Named(c) => raw_clusters::create(c, obj),
        }
    }
    #[inline(always)]
    fn update(&self, at: Cluster<'_>, obj: &str) -> Result<String, raw::ClientError> {
        match at {
            Cluster::Own => raw::update(obj),
            Cluster::Named(c) => raw_clusters::update(c, obj),
        }
    }
    #[inline(always)]
    fn patch(
        &self,
        at: Cluster<'_>,
        target: &types::ObjectRef,
        how: &raw::PatchType,
        body: &str,
        status: bool,
    ) -> Result<String, raw::ClientError> {
        match (at, status) {
            (Cluster::Own, false) => raw::patch(target, how, body),
            (Cluster::Own, true) => raw::patch_status(target, how, body),
            (Cluster::Named(c), false) => raw_clusters::patch(c, target, how, body),
            (Cluster::Named(c), true) => raw_clusters::patch_status(c, target, how, body),
        }
    }
    #[inline(always)]
    fn delete(
        &self,
        at: Cluster<'_>,
        target: &types::ObjectRef,
        options: &raw::DeleteOptions,
    ) -> Result<(), raw::ClientError> {
        match at {
            Cluster::Own => raw::delete(target, options),
            Cluster::Named(c) => raw_clusters::delete(c, target, options),
        }
    }
    fn list_changes(
        &self,
        of: &types::TypeRef,
        params: &raw::ListParams,
        since: u64,
    ) -> Result<raw::Changes, raw::ClientError> {
        raw::list_changes(of, params, since)
    }
    fn evict(
        &self,
        namespace: &str,
        name: &str,
        options: &raw::DeleteOptions,
    ) -> Result<(), raw::ClientError> {
        raw::evict(namespace, name, options)
    }
    fn bind(&self, namespace: &str, name: &str, node: &str) -> Result<(), raw::ClientError> {
        raw::bind(namespace, name, node)
    }
    fn create_all(
        &self,
        objs: &[String],
    ) -> Result<Vec<Result<String, raw::ClientError>>, raw::ClientError> {
        raw::create_all(objs)
    }
    fn record_event(&self, event: &raw::Event) -> Result<(), raw::ClientError> {
        raw::record_event(event)
    }
    fn log_enabled(&self, level: raw_log::Level) -> bool {
        raw_log::enabled(level)
    }
    fn log(&self, level: raw_log::Level, message: &str, fields: &[(String, String)]) {
        raw_log::log(level, message, fields)
    }
    fn http_fetch(
        &self,
        req: &raw_http::Request,
    ) -> Result<raw_http::Response, raw_http::HttpError> {
        raw_http::fetch(req)
    }
    fn fetch_module(
        &self,
        req: &raw_wl::FetchRequest,
    ) -> Result<raw_wl::FetchProgress, raw_wl::FetchError> {
        raw_wl::fetch_module(req)
    }
    fn prepare_volume(&self, req: &raw_wl::VolumeRequest) -> Result<u64, raw_wl::WorkloadError> {
        raw_wl::prepare_volume(req)
    }
    fn spawn(&self, spec: &raw_wl::SpawnSpec) -> Result<u64, raw_wl::WorkloadError> {
        raw_wl::spawn(spec)
    }
    fn workload_status(
        &self,
        handle: u64,
    ) -> Result<raw_wl::WorkloadStatus, raw_wl::WorkloadError> {
        raw_wl::status(handle)
    }
    fn kill(&self, handle: u64, grace_ms: u32) -> Result<(), raw_wl::WorkloadError> {
        raw_wl::kill(handle, grace_ms)
    }
    fn read_logs(&self, handle: u64, max_bytes: u32) -> Result<Vec<u8>, raw_wl::WorkloadError> {
        raw_wl::read_logs(handle, max_bytes)
    }
    fn release_pod(&self, pod_uid: &str) {
        raw_wl::release_pod(pod_uid)
    }
}
