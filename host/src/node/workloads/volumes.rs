//! Pod volumes: directories under `DATA/pods/<uid>/volumes/<name>` (emptyDir, files) or
//! allow-listed host directories, and their resolution into preopened mounts.
//!
//! Files are written through cap-std rooted at the volume, so a symlink a workload left
//! in a writable volume cannot redirect the host's writes outside it.
//!
//! Mounts are resolved at spawn time beneath an open directory handle, one component at
//! a time, following no symlink ([`open_beneath`]), and WASI gets that handle: a volume
//! is never re-resolved by path, so a workload that swaps a directory for a symlink
//! (in a hostPath or a shared emptyDir) cannot redirect a later mount.

use std::collections::HashMap;
use std::os::fd::{AsRawFd, OwnedFd};
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
    /// The volume's name in the pod, for error messages.
    name: String,
    /// A directory only the host writes: the allow-list entry of a hostPath, the pod's
    /// `volumes` directory otherwise. Opened by path (symlinks in it are the admin's).
    base: PathBuf,
    /// The volume beneath `base`, walked without following symlinks.
    rel: PathBuf,
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
        let volumes_dir = self.pod_dir(&req.pod_uid).join("volumes");
        let local_dir = volumes_dir.join(&req.name);
        let local = (volumes_dir, PathBuf::from(&req.name));
        let ((base, rel), files) = match &req.source {
            VolumeSource::EmptyDir(_) => {
                std::fs::create_dir_all(&local_dir)
                    .map_err(|e| failed("creating the emptyDir", e))?;
                (local, Vec::new())
            }
            VolumeSource::Files(files) => {
                std::fs::create_dir_all(&local_dir)
                    .map_err(|e| failed("creating the volume", e))?;
                let previous = existing
                    .map(|id| table.by_id[&id].files.clone())
                    .unwrap_or_default();
                write_files(&local_dir, files, &previous)?;
                (local, files.iter().map(|f| f.path.clone()).collect())
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
                name: req.name.clone(),
                base,
                rel,
                files,
            },
        );
        table.by_key.insert(key, id);
        Ok(id)
    }

    /// The allow-list entry a hostPath lies under and the path beneath it. The path is
    /// checked lexically before anything touches the disk, then walked beneath the
    /// entry without following symlinks (creating missing directories only there).
    fn resolve_host_path(
        &self,
        path: &str,
        create: bool,
    ) -> Result<(PathBuf, PathBuf), WorkloadError> {
        let p = Path::new(path);
        if !p.is_absolute() || p.components().any(|c| c == Component::ParentDir) {
            return Err(invalid(format!(
                "hostPath {path:?} must be absolute, without '..'"
            )));
        }
        let Some((base, rel)) = self
            .config
            .host_path_allow
            .iter()
            .find_map(|a| Some((a.clone(), p.strip_prefix(a).ok()?.to_path_buf())))
        else {
            let list: Vec<String> = self
                .config
                .host_path_allow
                .iter()
                .map(|a| a.display().to_string())
                .collect();
            return Err(invalid(format!(
                "hostPath {path} is not under the host's allow-list ({})",
                if list.is_empty() {
                    "empty".to_string()
                } else {
                    list.join(", ")
                }
            )));
        };
        open_beneath(&base, &rel, create).map_err(|e| invalid(format!("hostPath {path}: {e}")))?;
        Ok((base, rel))
    }

    /// A mount as (open host directory, guest path, permissions), checked against the
    /// pod. The directory is opened now, beneath the volume's base, following no
    /// symlink; see [`preopen_path`] for handing it to WASI.
    pub(crate) fn resolve_mount(
        &self,
        pod_uid: &str,
        m: &Mount,
    ) -> Result<(OwnedFd, String, FsPerms), WorkloadError> {
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
        let sub = m.sub_path.as_deref().filter(|s| !s.is_empty());
        if let Some(sub) = sub {
            check_relative(sub, "subPath")?;
        }
        let what = || {
            let at = v.base.join(&v.rel);
            match sub {
                Some(sub) => format!("volume {:?} ({}) subPath {sub:?}", v.name, at.display()),
                None => format!("volume {:?} ({})", v.name, at.display()),
            }
        };
        let root = open_beneath(&v.base, &v.rel, false)
            .map_err(|e| invalid(format!("{}: {e}", what())))?;
        let dir = match sub {
            None => root,
            // A missing subPath is created (as kubelet does), except in read-only volumes.
            Some(sub) => open_beneath_fd(root, Path::new(sub), v.kind != VolumeKind::Files)
                .map_err(|e| invalid(format!("{}: {e}", what())))?,
        };
        Ok((dir, m.guest_path.clone(), perms))
    }
}

/// The path under which WASI opens an already open directory.
///
/// `WasiCtxBuilder::preopened_dir` (wasmtime-wasi 48) takes only a path. On Linux
/// `/proc/self/fd/N` is a magic link to the open file itself: opening it reaches the
/// inode `fd` refers to without re-resolving the path it was opened by, so a symlink
/// swapped in since cannot redirect the mount. Keep `fd` open until the call returns.
pub(crate) fn preopen_path(fd: &OwnedFd) -> PathBuf {
    PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()))
}

/// Why a walk beneath a volume stopped, worded for the pod's author.
#[derive(Debug, thiserror::Error)]
pub(crate) enum WalkError {
    #[error("{0:?} is a symbolic link or not a directory; mounts follow no symlinks")]
    NotADirectory(PathBuf),
    #[error("{0:?} does not exist")]
    Missing(PathBuf),
    #[error("{0:?} is not a plain relative path")]
    NotRelative(PathBuf),
    #[error("opening {0:?}: {1}")]
    Io(PathBuf, std::io::Error),
}

/// Opens the directory `rel` beneath `base` (see [`open_beneath_fd`]).
pub(crate) fn open_beneath(base: &Path, rel: &Path, create: bool) -> Result<OwnedFd, WalkError> {
    use rustix::fs::{Mode, OFlags, openat};
    let root = openat(
        rustix::fs::CWD,
        base,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| WalkError::Io(base.to_path_buf(), e.into()))?;
    open_beneath_fd(root, rel, create)
}

/// Opens the directory `rel` beneath the open directory `dir`, one component at a time
/// with `O_NOFOLLOW`, so no symlink is followed anywhere on the way; with `create`,
/// missing directories are made on the way (with `mkdirat` beneath the same handle).
pub(crate) fn open_beneath_fd(
    mut dir: OwnedFd,
    rel: &Path,
    create: bool,
) -> Result<OwnedFd, WalkError> {
    use rustix::fs::{Mode, OFlags, mkdirat, openat};
    use rustix::io::Errno;
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let mut walked = PathBuf::new();
    for c in rel.components() {
        let name = match c {
            Component::CurDir => continue,
            Component::Normal(name) => name,
            _ => return Err(WalkError::NotRelative(rel.to_path_buf())),
        };
        walked.push(name);
        let mut opened = openat(&dir, name, flags, Mode::empty());
        if create && matches!(opened, Err(Errno::NOENT)) {
            match mkdirat(&dir, name, Mode::from_raw_mode(0o755)) {
                Ok(()) | Err(Errno::EXIST) => {}
                Err(e) => return Err(WalkError::Io(walked, e.into())),
            }
            opened = openat(&dir, name, flags, Mode::empty());
        }
        dir = match opened {
            Ok(fd) => fd,
            Err(Errno::LOOP | Errno::NOTDIR) => return Err(WalkError::NotADirectory(walked)),
            Err(Errno::NOENT) => return Err(WalkError::Missing(walked)),
            Err(e) => return Err(WalkError::Io(walked, e.into())),
        };
    }
    Ok(dir)
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
                // Permission bits only: no setuid/setgid/sticky on files a pod supplies.
                cap_std::fs::Permissions::from_std(std::fs::Permissions::from_mode(f.mode & 0o777)),
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
