//! The node's workloads by handle, with each pod's handles and how many run,
//! kept as they change: a spawn checks `max_workloads` (the memory budget is
//! the sandbox's pool, `plugin::sandbox::MemoryPool`), and a pod's release or eviction finds
//! its workloads, without walking every workload on the node (a walk per spawn
//! made starting N pods cost N², issue 32).
//!
//! A workload counts as running from its insert until its status leaves
//! `Running` (the run task calls [`WorkloadTable::stopped`] under the table's
//! lock as it changes the status) or its pod is released, whichever is first:
//! both happen under the one lock, so each is counted off exactly once.

use std::collections::HashMap;
use std::sync::Arc;

use super::run::Workload;
use super::types::WorkloadHandle;

#[derive(Default)]
pub(crate) struct WorkloadTable {
    by_handle: HashMap<WorkloadHandle, Arc<Workload>>,
    by_pod: HashMap<String, Vec<WorkloadHandle>>,
    running: usize,
}

impl WorkloadTable {
    pub(crate) fn get(&self, handle: WorkloadHandle) -> Option<&Arc<Workload>> {
        self.by_handle.get(&handle)
    }

    /// Workloads running now.
    pub(crate) fn running(&self) -> usize {
        self.running
    }

    /// Adds a workload that has just started running.
    pub(crate) fn insert(&mut self, handle: WorkloadHandle, w: Arc<Workload>) {
        self.running += 1;
        self.by_pod
            .entry(w.pod_uid.clone())
            .or_default()
            .push(handle);
        self.by_handle.insert(handle, w);
    }

    /// `handle`'s workload has just left `Running` (called under the lock the
    /// status changed under): its share is counted off unless its pod was
    /// released first.
    pub(crate) fn stopped(&mut self, handle: WorkloadHandle) {
        if self.by_handle.contains_key(&handle) {
            self.running = self.running.saturating_sub(1);
        }
    }

    /// Forgets the pod's workloads; those still running are counted off now.
    pub(crate) fn remove_pod(&mut self, pod_uid: &str) -> Vec<Arc<Workload>> {
        let handles = self.by_pod.remove(pod_uid).unwrap_or_default();
        let gone: Vec<Arc<Workload>> = handles
            .iter()
            .filter_map(|h| self.by_handle.remove(h))
            .collect();
        let running = gone.iter().filter(|w| w.running()).count();
        self.running = self.running.saturating_sub(running);
        gone
    }

    /// The pod's workloads, finished ones included.
    pub(crate) fn of_pod<'a>(&'a self, pod_uid: &str) -> impl Iterator<Item = &'a Arc<Workload>> {
        self.by_pod
            .get(pod_uid)
            .into_iter()
            .flatten()
            .filter_map(|h| self.by_handle.get(h))
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = (&WorkloadHandle, &Arc<Workload>)> {
        self.by_handle.iter()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use tokio::sync::watch;

    use super::*;
    use crate::node::workloads::logs::LogSink;
    use crate::node::workloads::types::{RunState, WorkloadStatus};

    fn workload(dir: &std::path::Path, pod: &str, id: u64) -> Arc<Workload> {
        let log_path = dir.join(format!("{pod}-{id}.log"));
        let (status, _) = watch::channel(WorkloadStatus {
            state: RunState::Running,
            started_at_ms: 0,
            finished_at_ms: None,
        });
        Arc::new(Workload {
            pod_uid: pod.into(),
            status,
            kill: Arc::default(),
            sink: Some(Arc::new(Mutex::new(
                LogSink::open(log_path.clone(), 1024).unwrap(),
            ))),
            log_path,
            attach: Default::default(),
            session: false,
        })
    }

    fn exit(w: &Workload) {
        w.status.send_modify(|s| s.state = RunState::Exited(0));
    }

    /// Each workload is counted off once: when it stops, or when its pod is
    /// released while it runs, whichever comes first.
    #[test]
    fn running_workloads_are_counted_off_once() {
        let dir = tempfile::tempdir().unwrap();
        let mut t = WorkloadTable::default();
        let (a, b, c) = (
            workload(dir.path(), "p", 10),
            workload(dir.path(), "p", 20),
            workload(dir.path(), "q", 40),
        );
        t.insert(1, a.clone());
        t.insert(2, b.clone());
        t.insert(3, c.clone());
        assert_eq!(t.running(), 3);
        assert_eq!(t.of_pod("p").count(), 2);

        exit(&a);
        t.stopped(1);
        assert_eq!(t.running(), 2);

        // Released with b still running: b is counted off now, not again
        // when its run task reports it stopped.
        let gone = t.remove_pod("p");
        assert_eq!(gone.len(), 2);
        assert_eq!(t.running(), 1);
        exit(&b);
        t.stopped(2);
        assert_eq!(t.running(), 1);
        assert_eq!(t.of_pod("p").count(), 0);
        assert!(t.get(1).is_none() && t.get(3).is_some());
    }
}
