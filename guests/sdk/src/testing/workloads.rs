//! The fake `workloads` side of [`FakeHost`]: a module store, volumes, and workloads
//! that run until the test ends them, on a fake clock.

use std::collections::BTreeMap;

use crate::bindings::workloads as wl;

use super::FakeHost;

/// A module as [`FakeHost`] serves it.
#[derive(Clone)]
enum FakeModule {
    Ready(String),
    Pending { id: u64, digest: String, done: bool },
    Failed(wl::FetchError),
}

#[derive(Default)]
pub(super) struct FakeWorkloads {
    clock_ms: u64,
    next_id: u64,
    modules: BTreeMap<String, FakeModule>,
    fetches: Vec<wl::FetchRequest>,
    volumes: Vec<(u64, wl::VolumeRequest)>,
    spawned: Vec<(u64, wl::SpawnSpec)>,
    status: BTreeMap<u64, wl::WorkloadStatus>,
    pod_of: BTreeMap<u64, String>,
    kills: Vec<(u64, u32)>,
    released: Vec<String>,
    logs: BTreeMap<u64, Vec<u8>>,
}

impl FakeWorkloads {
    fn id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }
}

/// What a test sets up and inspects.
impl FakeHost {
    /// `image` is in the module store as `digest`.
    pub fn add_module(&self, image: &str, digest: &str) {
        self.inner
            .wl
            .borrow_mut()
            .modules
            .insert(image.to_owned(), FakeModule::Ready(digest.to_owned()));
    }

    /// `image` answers `pending(id)` until [`FakeHost::finish_fetch`]`(id)`; returns the id.
    pub fn add_pending_module(&self, image: &str, digest: &str) -> u64 {
        let mut w = self.inner.wl.borrow_mut();
        let id = w.id();
        w.modules.insert(
            image.to_owned(),
            FakeModule::Pending {
                id,
                digest: digest.to_owned(),
                done: false,
            },
        );
        id
    }

    /// Finishes the pending fetch `id`: its image is ready from now on.
    pub fn finish_fetch(&self, id: u64) {
        for m in self.inner.wl.borrow_mut().modules.values_mut() {
            if let FakeModule::Pending { id: i, done, .. } = m
                && *i == id
            {
                *done = true;
            }
        }
    }

    /// Fetching `image` fails with `error`.
    pub fn fail_module(&self, image: &str, error: wl::FetchError) {
        self.inner
            .wl
            .borrow_mut()
            .modules
            .insert(image.to_owned(), FakeModule::Failed(error));
    }

    /// Sets the fake clock (milliseconds since the epoch) used for workload times.
    pub fn set_clock(&self, ms: u64) {
        self.inner.wl.borrow_mut().clock_ms = ms;
    }

    /// Workload `handle` exits with `code` now.
    pub fn exit(&self, handle: u64, code: i32) {
        self.finish(handle, wl::RunState::Exited(code));
    }

    /// Workload `handle` ends without an exit (trap, out of memory, killed) now.
    pub fn fail(&self, handle: u64, message: &str) {
        self.finish(handle, wl::RunState::Failed(message.to_owned()));
    }

    fn finish(&self, handle: u64, state: wl::RunState) {
        let mut w = self.inner.wl.borrow_mut();
        let now = w.clock_ms;
        let st = w.status.get_mut(&handle).expect("a spawned workload");
        st.state = state;
        st.finished_at_ms = Some(now);
    }

    /// What `read-logs` returns for `handle`.
    pub fn set_logs(&self, handle: u64, logs: &[u8]) {
        self.inner
            .wl
            .borrow_mut()
            .logs
            .insert(handle, logs.to_vec());
    }

    /// Fetch requests so far.
    pub fn fetches(&self) -> Vec<wl::FetchRequest> {
        self.inner.wl.borrow().fetches.clone()
    }

    /// Volumes prepared so far, with their ids (a repeat of a (pod, name) reuses its id).
    pub fn volumes(&self) -> Vec<(u64, wl::VolumeRequest)> {
        self.inner.wl.borrow().volumes.clone()
    }

    /// Workloads spawned so far, with their handles.
    pub fn spawned(&self) -> Vec<(u64, wl::SpawnSpec)> {
        self.inner.wl.borrow().spawned.clone()
    }

    /// `kill` calls so far, as `(handle, grace_ms)`.
    pub fn kills(&self) -> Vec<(u64, u32)> {
        self.inner.wl.borrow().kills.clone()
    }

    /// `release-pod` calls so far (pod uids).
    pub fn released(&self) -> Vec<String> {
        self.inner.wl.borrow().released.clone()
    }
}

/// The host's side of the `workloads` imports.
impl FakeWorkloads {
    pub(super) fn fetch_module(
        &mut self,
        req: &wl::FetchRequest,
    ) -> Result<wl::FetchProgress, wl::FetchError> {
        self.fetches.push(req.clone());
        match self.modules.get(&req.image) {
            Some(FakeModule::Ready(d))
            | Some(FakeModule::Pending {
                digest: d,
                done: true,
                ..
            }) => Ok(wl::FetchProgress::Ready(d.clone())),
            Some(FakeModule::Pending { id, .. }) => Ok(wl::FetchProgress::Pending(*id)),
            Some(FakeModule::Failed(e)) => Err(e.clone()),
            None => Err(wl::FetchError::NotFound(format!(
                "{}: no such module",
                req.image
            ))),
        }
    }

    pub(super) fn prepare_volume(
        &mut self,
        req: &wl::VolumeRequest,
    ) -> Result<u64, wl::WorkloadError> {
        let known = self
            .volumes
            .iter()
            .find(|(_, r)| r.pod_uid == req.pod_uid && r.name == req.name)
            .map(|(id, _)| *id);
        let id = match known {
            Some(id) => id,
            None => self.id(),
        };
        self.volumes.push((id, req.clone()));
        Ok(id)
    }

    pub(super) fn spawn(&mut self, spec: &wl::SpawnSpec) -> Result<u64, wl::WorkloadError> {
        if !self.modules.values().any(|m| matches!(m, FakeModule::Ready(d) | FakeModule::Pending { digest: d, .. } if *d == spec.module)) {
            return Err(wl::WorkloadError::Invalid(format!("module {} is not ready", spec.module)));
        }
        let handle = self.id();
        let started_at_ms = self.clock_ms;
        self.spawned.push((handle, spec.clone()));
        self.status.insert(
            handle,
            wl::WorkloadStatus {
                state: wl::RunState::Running,
                started_at_ms,
                finished_at_ms: None,
            },
        );
        self.pod_of.insert(handle, spec.logs.pod_uid.clone());
        Ok(handle)
    }

    pub(super) fn workload_status(
        &self,
        handle: u64,
    ) -> Result<wl::WorkloadStatus, wl::WorkloadError> {
        self.status
            .get(&handle)
            .cloned()
            .ok_or(wl::WorkloadError::UnknownHandle)
    }

    pub(super) fn kill(&mut self, handle: u64, grace_ms: u32) -> Result<(), wl::WorkloadError> {
        if !self.status.contains_key(&handle) {
            return Err(wl::WorkloadError::UnknownHandle);
        }
        self.kills.push((handle, grace_ms));
        Ok(())
    }

    pub(super) fn read_logs(
        &self,
        handle: u64,
        max_bytes: u32,
    ) -> Result<Vec<u8>, wl::WorkloadError> {
        if !self.status.contains_key(&handle) {
            return Err(wl::WorkloadError::UnknownHandle);
        }
        let logs = self.logs.get(&handle).cloned().unwrap_or_default();
        let start = logs.len().saturating_sub(max_bytes as usize);
        Ok(logs[start..].to_vec())
    }

    pub(super) fn release_pod(&mut self, pod_uid: &str) {
        self.released.push(pod_uid.to_owned());
        let gone: Vec<u64> = self
            .pod_of
            .iter()
            .filter(|(_, uid)| *uid == pod_uid)
            .map(|(h, _)| *h)
            .collect();
        for h in gone {
            self.status.remove(&h);
            self.pod_of.remove(&h);
        }
    }
}
