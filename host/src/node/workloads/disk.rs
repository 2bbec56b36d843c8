//! `emptyDir.sizeLimit`, enforced as the kubelet's eviction manager does it: every
//! [`WorkloadConfig::disk_check_interval`](super::WorkloadConfig) the disk usage of
//! each limited emptyDir is measured, and a pod whose volume is over its limit is
//! evicted: its running workloads stop as `Failed("Evicted: ...")`, and later spawns
//! for it are refused until the pod is released.
//!
//! Why not a write error (ENOSPC) at the limit: workloads write to the host's file
//! system directly through WASI's preopened directories, so failing a write exactly at
//! the limit needs a file system per volume (a size-limited tmpfs or loop mount) or
//! project quotas, both privileged and specific to the file system. Measuring works
//! unprivileged on any file system; a workload may overshoot by what it writes within
//! one interval, as under the kubelet.

use std::collections::HashSet;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};

use super::volumes::{VolumeKind, open_beneath};
use super::{Inner, RunState};

/// What the evicted pod's workloads report (no "memory" or "kill" in it: the
/// provider would take it for an OOM kill or a stop).
fn eviction_message(volume: &str, used: u64, limit: u64) -> String {
    format!(
        "Evicted: usage of emptyDir volume {volume:?} ({used} bytes) exceeds its sizeLimit of {limit} bytes"
    )
}

/// Bytes allocated on disk under `rel` beneath `base` (as `du` counts them, each inode
/// once), walking without following symlinks: a link a workload plants cannot make
/// the node measure, or walk, a directory outside the volume.
fn usage(base: &Path, rel: &Path) -> std::io::Result<u64> {
    use rustix::fs::{AtFlags, FileType, statat};
    let mut seen: HashSet<(u64, u64)> = HashSet::new();
    let mut total = 0u64;
    // Paths, not open directories: a wide tree must not exhaust descriptors.
    let mut pending = vec![PathBuf::new()];
    while let Some(sub) = pending.pop() {
        let dir: OwnedFd = match open_beneath(base, &rel.join(&sub), false) {
            Ok(d) => d,
            // Removed or swapped for a link since it was listed: not counted.
            Err(_) if !sub.as_os_str().is_empty() => continue,
            Err(e) => return Err(std::io::Error::other(e.to_string())),
        };
        for entry in rustix::fs::Dir::read_from(&dir)? {
            let entry = entry?;
            let name = entry.file_name().to_bytes();
            if name == b"." || name == b".." {
                continue;
            }
            let Ok(st) = statat(&dir, entry.file_name(), AtFlags::SYMLINK_NOFOLLOW) else {
                continue;
            };
            #[allow(clippy::unnecessary_cast)] // the field types differ between targets
            let (inode, blocks) = ((st.st_dev as u64, st.st_ino as u64), st.st_blocks as u64);
            if seen.insert(inode) {
                total = total.saturating_add(blocks.saturating_mul(512));
            }
            if FileType::from_raw_mode(st.st_mode) == FileType::Directory {
                use std::os::unix::ffi::OsStrExt;
                pending.push(sub.join(std::ffi::OsStr::from_bytes(name)));
            }
        }
    }
    Ok(total)
}

impl Inner {
    /// Measures the pods' limited emptyDirs every interval, for as long as the
    /// manager lives.
    pub(crate) fn start_disk_monitor(self: &Arc<Self>) {
        let weak: Weak<Inner> = Arc::downgrade(self);
        let interval = self.config.disk_check_interval;
        self.rt.spawn(async move {
            loop {
                tokio::time::sleep(interval).await;
                let Some(inner) = weak.upgrade() else { break };
                let _ = tokio::task::spawn_blocking(move || inner.check_disk()).await;
            }
        });
    }

    fn check_disk(&self) {
        let limited: Vec<(String, String, PathBuf, PathBuf, u64)> = {
            let evicted = self.evicted.lock().unwrap_or_else(|p| p.into_inner());
            let table = self.volumes.lock().unwrap_or_else(|p| p.into_inner());
            table
                .by_id
                .values()
                .filter(|v| v.kind == VolumeKind::EmptyDir && !evicted.contains_key(&v.pod_uid))
                .filter_map(|v| {
                    let limit = v.size_limit?;
                    let (base, rel) = v.location();
                    Some((v.pod_uid.clone(), v.name().to_string(), base, rel, limit))
                })
                .collect()
        };
        for (uid, name, base, rel, limit) in limited {
            match usage(&base, &rel) {
                Ok(used) if used > limit => {
                    self.evict(&uid, eviction_message(&name, used, limit));
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::debug!(pod = %uid, volume = %name, error = %e, "cannot measure emptyDir")
                }
            }
        }
    }

    /// Stops the pod's running workloads with `message` and refuses its later spawns.
    fn evict(&self, uid: &str, message: String) {
        tracing::info!(pod = %uid, reason = %message, "evicting pod");
        self.evicted
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(uid.to_string(), message.clone());
        for w in self
            .workloads
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .of_pod(uid)
        {
            if matches!(w.status.borrow().state, RunState::Running) {
                w.kill.evict(message.clone());
            }
        }
    }
}
