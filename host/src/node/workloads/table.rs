//! The node's workloads by handle, with each pod's handles and what the running
//! ones take from the node's limits kept as they change: a spawn checks
//! `max_workloads` and the memory budget, and a pod's release or eviction finds
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
    /// The memory limits of the running workloads, summed (bytes).
    memory: u64,
}

impl WorkloadTable {
    pub(crate) fn get(&self, handle: WorkloadHandle) -> Option<&Arc<Workload>> {
        self.by_handle.get(&handle)
    }

    /// Workloads running now, and the memory their limits take.
    pub(crate) fn usage(&self) -> (usize, u64) {
        (self.running, self.memory)
    }

    /// Adds a workload that has just started running.
    pub(crate) fn insert(&mut self, handle: WorkloadHandle, w: Arc<Workload>) {
        self.running += 1;
        self.memory = self.memory.saturating_add(w.memory_limit);
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
        if let Some(w) = self.by_handle.get(&handle) {
            self.running = self.running.saturating_sub(1);
            self.memory = self.memory.saturating_sub(w.memory_limit);
        }
    }

    /// Forgets the pod's workloads; those still running are counted off now.
    pub(crate) fn remove_pod(&mut self, pod_uid: &str) -> Vec<Arc<Workload>> {
        let handles = self.by_pod.remove(pod_uid).unwrap_or_default();
        let gone: Vec<Arc<Workload>> = handles
            .iter()
            .filter_map(|h| self.by_handle.remove(h))
            .collect();
        for w in gone.iter().filter(|w| w.running()) {
            self.running = self.running.saturating_sub(1);
            self.memory = self.memory.saturating_sub(w.memory_limit);
        }
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

    fn workload(dir: &std::path::Path, pod: &str, memory: u64) -> Arc<Workload> {
        let log_path = dir.join(format!("{pod}-{memory}.log"));
        let (status, _) = watch::channel(WorkloadStatus {
            state: RunState::Running,
            started_at_ms: 0,
            finished_at_ms: None,
        });
        Arc::new(Workload {
            pod_uid: pod.into(),
            memory_limit: memory,
            status,
            kill: Arc::default(),
            sink: Arc::new(Mutex::new(LogSink::open(log_path.clone(), 1024).unwrap())),
            log_path,
        })
    }

    fn exit(w: &Workload) {
        w.status.send_modify(|s| s.state = RunState::Exited(0));
    }

    /// Each workload is counted off once: when it stops, or when its pod is
    /// released while it runs, whichever comes first.
    #[test]
    fn running_workloads_and_their_memory_are_counted_off_once() {
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
        assert_eq!(t.usage(), (3, 70));
        assert_eq!(t.of_pod("p").count(), 2);

        exit(&a);
        t.stopped(1);
        assert_eq!(t.usage(), (2, 60));

        // Released with b still running: b is counted off now, not again
        // when its run task reports it stopped.
        let gone = t.remove_pod("p");
        assert_eq!(gone.len(), 2);
        assert_eq!(t.usage(), (1, 40));
        exit(&b);
        t.stopped(2);
        assert_eq!(t.usage(), (1, 40));
        assert_eq!(t.of_pod("p").count(), 0);
        assert!(t.get(1).is_none() && t.get(3).is_some());
    }
}
