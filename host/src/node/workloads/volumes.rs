//! Pod volumes: directories under `DATA/pods/<uid>/volumes/<name>` (emptyDir, files) or
//! allow-listed host directories, and their resolution into preopened mounts.
//!
//! Files are written through cap-std rooted at the volume, so a symlink a workload left
//! in a writable volume cannot redirect the host's writes outside it.

use std::collections::HashMap;
use std::path::{Component, Path, PathBuf};

use wasmtime_wasi::FsPerms;

use super::{Mount, VolumeFile, VolumeId, VolumeRequest, VolumeSource, WorkloadError};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum VolumeKind {
    EmptyDir,
    Files,
    HostPath,
}

#[derive(Debug)]
pub(crate) struct Volume {
    pub(crate) pod_uid: String,
    pub(crate) kind: VolumeKind,
    /// The host directory (canonical for host paths).
    pub(crate) dir: PathBuf,
    /// For `files`: the paths written last time, to remove those no longer present.
    files: Vec<String>,
}

#[derive(Default)]
pub(crate) struct VolumeTable {
    pub(crate) by_id: HashMap<VolumeId, Volume>,
    by_key: HashMap<(String, String), VolumeId>,
}

impl VolumeTable {
    /// Forgets the pod's volumes (their directories are removed by the caller).
    pub(crate) fn remove_pod(&mut self, uid: &str) {
        self.by_id.retain(|_, v| v.pod_uid != uid);
        self.by_key.retain(|(u, _), _| u != uid);
    }
}

fn invalid(msg: impl Into<String>) -> WorkloadError {
    WorkloadError::Invalid(msg.into())
}

fn failed(what: &str, e: impl std::fmt::Display) -> WorkloadError {
    WorkloadError::Failed(format!("{what}: {e}"))
}

/// A single path segment chosen by the provider (pod uid, volume or container name).
pub(crate) fn check_segment(s: &str, what: &str) -> Result<(), WorkloadError> {
    if s.is_empty()
        || s == "."
        || s == ".."
        || s.contains('/')
        || s.contains('\\')
        || s.contains('\0')
        || s.len() > 253
    {
        return Err(invalid(format!("{what} {s:?} is not a valid name")));
    }
    Ok(())
}

/// A relative path inside a volume: `a/b.txt`, no `..`, no leading `/`.
pub(crate) fn check_relative(p: &str, what: &str) -> Result<(), WorkloadError> {
    if p.is_empty() || p.contains('\0') {
        return Err(invalid(format!("{what} {p:?} is empty or contains NUL")));
    }
    if p.starts_with('/') {
        return Err(invalid(format!(
            "{what} {p:?} is absolute; it must be relative to the volume"
        )));
    }
    for c in Path::new(p).components() {
        match c {
            Component::Normal(_) | Component::CurDir => {}
            Component::ParentDir => return Err(invalid(format!("{what} {p:?} contains '..'"))),
            _ => return Err(invalid(format!("{what} {p:?} is not a relative path"))),
        }
    }
    Ok(())
}

/// The guest path of a mount: absolute, without `..`.
pub(crate) fn check_guest_path(p: &str) -> Result<(), WorkloadError> {
    if !p.starts_with('/') || p.contains('\0') {
        return Err(invalid(format!("mount path {p:?} must be absolute")));
    }
    if Path::new(p).components().any(|c| c == Component::ParentDir) {
        return Err(invalid(format!("mount path {p:?} contains '..'")));
    }
    Ok(())
}

impl super::Inner {
    pub(crate) fn pod_dir(&self, uid: &str) -> PathBuf {
        self.config.data_dir.join("pods").join(uid)
    }

    pub(crate) fn prepare_volume(&self, req: &VolumeRequest) -> Result<VolumeId, WorkloadError> {
        check_segment(&req.pod_uid, "pod uid")?;
        check_segment(&req.name, "volume name")?;
        let key = (req.pod_uid.clone(), req.name.clone());
        let kind = match &req.source {
            VolumeSource::EmptyDir(_) => VolumeKind::EmptyDir,
            VolumeSource::Files(_) => VolumeKind::Files,
            VolumeSource::HostPath(_) => VolumeKind::HostPath,
        };
        // Validate before touching the disk.
        if let VolumeSource::Files(files) = &req.source {
            for f in files {
                check_relative(&f.path, "volume file path")?;
            }
        }
        let mut table = self.volumes.lock().unwrap();
        let existing = table.by_key.get(&key).copied();
        if let Some(id) = existing {
            let v = &table.by_id[&id];
            if v.kind != kind {
                return Err(invalid(format!(
                    "volume {:?} of pod {} was already prepared as {:?}",
                    req.name, req.pod_uid, v.kind
                )));
            }
        }
        let local_dir = self.pod_dir(&req.pod_uid).join("volumes").join(&req.name);
        let (dir, files) = match &req.source {
            VolumeSource::EmptyDir(_) => {
                std::fs::create_dir_all(&local_dir)
                    .map_err(|e| failed("creating the emptyDir", e))?;
                (local_dir, Vec::new())
            }
            VolumeSource::Files(files) => {
                std::fs::create_dir_all(&local_dir)
                    .map_err(|e| failed("creating the volume", e))?;
                let previous = existing
                    .map(|id| table.by_id[&id].files.clone())
                    .unwrap_or_default();
                write_files(&local_dir, files, &previous)?;
                (local_dir, files.iter().map(|f| f.path.clone()).collect())
            }
            VolumeSource::HostPath(hp) => {
                (self.resolve_host_path(&hp.path, hp.create)?, Vec::new())
            }
        };
        let id = match existing {
            Some(id) => id,
            None => self.next_id(),
        };
        table.by_id.insert(
            id,
            Volume {
                pod_uid: req.pod_uid.clone(),
                kind,
                dir,
                files,
            },
        );
        table.by_key.insert(key, id);
        Ok(id)
    }

    fn resolve_host_path(&self, path: &str, create: bool) -> Result<PathBuf, WorkloadError> {
        let p = Path::new(path);
        if !p.is_absolute() || p.components().any(|c| c == Component::ParentDir) {
            return Err(invalid(format!(
                "hostPath {path:?} must be absolute, without '..'"
            )));
        }
        let not_allowed = || {
            let list: Vec<String> = self
                .config
                .host_path_allow
                .iter()
                .map(|a| a.display().to_string())
                .collect();
            invalid(format!(
                "hostPath {path} is not under the host's allow-list ({})",
                if list.is_empty() {
                    "empty".to_string()
                } else {
                    list.join(", ")
                }
            ))
        };
        if !self.config.host_path_allow.iter().any(|a| p.starts_with(a)) {
            return Err(not_allowed());
        }
        if create && !p.exists() {
            std::fs::create_dir_all(p)
                .map_err(|e| failed(&format!("creating hostPath {path}"), e))?;
        }
        let canon = p
            .canonicalize()
            .map_err(|e| invalid(format!("hostPath {path}: {e}")))?;
        // A symlink under an allowed directory must not lead out of it.
        let inside = self
            .config
            .host_path_allow
            .iter()
            .any(|a| a.canonicalize().is_ok_and(|a| canon.starts_with(a)));
        if !inside {
            return Err(not_allowed());
        }
        if !canon.is_dir() {
            return Err(invalid(format!(
                "hostPath {path} is not a directory (WASI mounts directories only)"
            )));
        }
        Ok(canon)
    }

    /// A mount as (host directory, guest path, permissions), checked against the pod.
    pub(crate) fn resolve_mount(
        &self,
        pod_uid: &str,
        m: &Mount,
    ) -> Result<(PathBuf, String, FsPerms), WorkloadError> {
        check_guest_path(&m.guest_path)?;
        let table = self.volumes.lock().unwrap();
        let v = table
            .by_id
            .get(&m.volume)
            .ok_or(WorkloadError::UnknownHandle)?;
        if v.pod_uid != pod_uid {
            return Err(invalid(format!(
                "volume {} belongs to another pod",
                m.volume
            )));
        }
        // ConfigMap and secret volumes are always read-only, as kubelet mounts them.
        let perms = if m.read_only || v.kind == VolumeKind::Files {
            FsPerms::ReadOnly
        } else {
            FsPerms::ReadWrite
        };
        let Some(sub) = m.sub_path.as_deref().filter(|s| !s.is_empty()) else {
            return Ok((v.dir.clone(), m.guest_path.clone(), perms));
        };
        check_relative(sub, "subPath")?;
        let root = cap_std::fs::Dir::open_ambient_dir(&v.dir, cap_std::ambient_authority())
            .map_err(|e| failed("opening the volume", e))?;
        // cap-std resolves inside the volume and refuses symlinks that lead out of it.
        match root.metadata(sub) {
            Ok(md) if md.is_dir() => {}
            Ok(_) => {
                return Err(invalid(format!(
                    "subPath {sub:?} is not a directory (WASI mounts directories only)"
                )));
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && v.kind != VolumeKind::Files => {
                root.create_dir_all(sub)
                    .map_err(|e| invalid(format!("subPath {sub:?}: {e}")))?;
            }
            Err(e) => return Err(invalid(format!("subPath {sub:?}: {e}"))),
        }
        let base = v
            .dir
            .canonicalize()
            .map_err(|e| failed("resolving the volume", e))?;
        let dir = v
            .dir
            .join(sub)
            .canonicalize()
            .map_err(|e| invalid(format!("subPath {sub:?}: {e}")))?;
        if !dir.starts_with(&base) {
            return Err(invalid(format!("subPath {sub:?} leads outside its volume")));
        }
        Ok((dir, m.guest_path.clone(), perms))
    }
}

/// Writes `files` into `dir` (each via a temporary file and a rename, so a running
/// reader sees the old or the new contents) and removes files of `previous` that are gone.
fn write_files(dir: &Path, files: &[VolumeFile], previous: &[String]) -> Result<(), WorkloadError> {
    use std::os::unix::fs::PermissionsExt;
    let root = cap_std::fs::Dir::open_ambient_dir(dir, cap_std::ambient_authority())
        .map_err(|e| failed("opening the volume", e))?;
    for f in files {
        let rel = Path::new(&f.path);
        let name = rel
            .file_name()
            .ok_or_else(|| invalid(format!("volume file path {:?} names no file", f.path)))?;
        let parent = rel.parent().filter(|p| !p.as_os_str().is_empty());
        if let Some(parent) = parent {
            root.create_dir_all(parent)
                .map_err(|e| invalid(format!("volume file {}: {e}", f.path)))?;
        }
        let tmp_name = format!(".{}.wasmlet-tmp", name.to_string_lossy());
        let tmp = match parent {
            Some(p) => p.join(&tmp_name),
            None => PathBuf::from(&tmp_name),
        };
        let write = || -> std::io::Result<()> {
            root.write(&tmp, &f.contents)?;
            root.set_permissions(
                &tmp,
                cap_std::fs::Permissions::from_std(std::fs::Permissions::from_mode(
                    f.mode & 0o7777,
                )),
            )?;
            root.rename(&tmp, &root, rel)
        };
        if let Err(e) = write() {
            let _ = root.remove_file(&tmp);
            return Err(failed(&format!("writing volume file {}", f.path), e));
        }
    }
    for old in previous {
        if !files.iter().any(|f| &f.path == old) {
            let _ = root.remove_file(old);
        }
    }
    Ok(())
}
