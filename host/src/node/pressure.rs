//! The Node's pressure conditions, as the kubelet's eviction manager sets
//! them from its signals and default hard thresholds, taken from what this
//! node can actually run out of:
//!
//! - `MemoryPressure`: the memory the workloads hold leaves less of the
//!   workload memory budget (`--workload-memory-budget`) than the default
//!   container memory cap, or the
//!   machine's `MemAvailable` is under 100 MiB (the kubelet's
//!   `memory.available<100Mi`);
//! - `DiskPressure`: the data directory's file system has under 10% of its
//!   space or 5% of its inodes free (`nodefs.available<10%`,
//!   `nodefs.inodesFree<5%`);
//! - `PIDPressure`: the node runs as many workloads as it may
//!   (`max_workloads`: further spawns are refused), the counterpart of
//!   `pid.available` for WASI workloads, which are not processes.

use std::path::Path;

use super::workloads::WorkloadManager;

/// The kubelet's default `memory.available` hard eviction threshold.
pub(crate) const MEMORY_AVAILABLE_MIN: u64 = 100 << 20;

/// Each pressure's message while it holds; `None`: no pressure.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Pressure {
    pub(crate) memory: Option<String>,
    pub(crate) disk: Option<String>,
    pub(crate) pid: Option<String>,
}

/// Memory pressure from the budget's use (`used`: what the workloads hold)
/// and the machine's available memory.
pub(crate) fn memory(
    used: u64,
    budget: u64,
    default_limit: u64,
    available: Option<u64>,
) -> Option<String> {
    let left = budget.saturating_sub(used);
    if left < default_limit {
        return Some(format!(
            "the workload memory budget has {left} of {budget} bytes left, under the default container limit of {default_limit} bytes"
        ));
    }
    match available {
        // No figure in the message: it would change, and be rewritten, at every look.
        Some(a) if a < MEMORY_AVAILABLE_MIN => Some(format!(
            "the machine has less than {MEMORY_AVAILABLE_MIN} bytes of memory available"
        )),
        _ => None,
    }
}

/// Disk pressure from the file system's free space and inodes (no figures
/// in the message: they change at every look).
pub(crate) fn disk(free: u64, total: u64, inodes_free: u64, inodes: u64) -> Option<String> {
    if total > 0 && free.saturating_mul(10) < total {
        return Some("the data directory's file system has less than 10% of its space free".into());
    }
    if inodes > 0 && inodes_free.saturating_mul(20) < inodes {
        return Some("the data directory's file system has less than 5% of its inodes free".into());
    }
    None
}

/// Workload-count pressure.
pub(crate) fn pid(running: usize, max: usize) -> Option<String> {
    (running >= max).then(|| format!("{running} workloads run, the node's maximum of {max}"))
}

/// `MemAvailable` from /proc/meminfo, in bytes.
fn mem_available() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kb: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("MemAvailable:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    kb.checked_mul(1024)
}

fn disk_of(dir: &Path) -> Option<String> {
    let s = rustix::fs::statvfs(dir).ok()?;
    disk(
        s.f_bavail.saturating_mul(s.f_frsize),
        s.f_blocks.saturating_mul(s.f_frsize),
        s.f_favail,
        s.f_files,
    )
}

/// The node's pressures now.
pub(crate) fn measure(w: &WorkloadManager) -> Pressure {
    let c = w.config();
    let (running, used) = w.usage();
    Pressure {
        memory: memory(
            used,
            c.memory_budget,
            c.default_memory_limit,
            mem_available(),
        ),
        disk: disk_of(&c.data_dir),
        pid: pid(running, c.max_workloads),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thresholds_are_the_kubelets_defaults_and_the_budgets_room() {
        let mi = 1u64 << 20;
        assert_eq!(memory(0, 1024 * mi, 256 * mi, Some(4096 * mi)), None);
        assert!(memory(800 * mi, 1024 * mi, 256 * mi, Some(4096 * mi)).is_some());
        assert!(memory(0, 1024 * mi, 256 * mi, Some(99 * mi)).is_some());
        assert_eq!(memory(0, 1024 * mi, 256 * mi, None), None);
        assert_eq!(disk(11, 100, 6, 100), None);
        assert!(disk(9, 100, 50, 100).is_some());
        assert!(disk(50, 100, 4, 100).is_some());
        assert_eq!(disk(0, 0, 0, 0), None);
        assert_eq!(pid(3, 4), None);
        assert!(pid(4, 4).unwrap().contains("maximum of 4"));
    }
}
