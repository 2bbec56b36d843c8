//! `file://` images: only beneath the node's `--allow-file-images` directories,
//! opened without following symlinks.

use std::path::{Path, PathBuf};

use super::super::{FetchError, Inner};

/// `d` with `.` and `..` resolved by name, as a `file://` URL's path is: a configured
/// `DIR/../x` still matches `file:///x/...`.
fn lexical(d: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in d.components() {
        match c {
            std::path::Component::CurDir => {}
            std::path::Component::ParentDir => {
                out.pop();
            }
            c => out.push(c),
        }
    }
    out
}
impl Inner {
    /// The configured module directory `path` lies under, and `path` beneath it.
    pub(super) fn file_image_dir(&self, path: &Path) -> Result<(PathBuf, PathBuf), FetchError> {
        let dirs = &self.config.file_image_dirs;
        dirs.iter()
            .map(|d| lexical(d))
            .find_map(|d| {
                let rel = path.strip_prefix(&d).ok()?.to_path_buf();
                Some((d, rel))
            })
            .filter(|(_, rel)| rel.file_name().is_some())
            .ok_or_else(|| {
                let list: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
                // Unauthorized: kubelet's ErrImagePull, as for a registry's refusal.
                FetchError::Unauthorized(format!(
                    "file://{}: file images are allowed only under this node's module \
                     directories ({}; set with --allow-file-images)",
                    path.display(),
                    if list.is_empty() {
                        "none".to_string()
                    } else {
                        list.join(", ")
                    }
                ))
            })
    }

    /// Reads a `file://` image beneath its module directory, following no symlink (a
    /// link in the directory must not lead to another file of the node).
    pub(super) async fn read_file(&self, path: &Path) -> Result<Vec<u8>, FetchError> {
        let shown = path.display().to_string();
        let (dir, rel) = self.file_image_dir(path)?;
        let (parent, name) = (
            rel.parent().unwrap_or(Path::new("")),
            rel.file_name().unwrap_or_default(),
        );
        let opened = super::super::volumes::open_beneath(&dir, parent, false)
            .map_err(|e| match e {
                super::super::volumes::WalkError::Missing(_) => {
                    FetchError::NotFound(format!("{shown}: no such file"))
                }
                e => FetchError::NotWasm(format!("{shown}: {e}")),
            })
            .and_then(|d| {
                use rustix::fs::{Mode, OFlags};
                rustix::fs::openat(
                    &d,
                    name,
                    OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                    Mode::empty(),
                )
                .map_err(|e| match e {
                    rustix::io::Errno::NOENT => {
                        FetchError::NotFound(format!("{shown}: no such file"))
                    }
                    rustix::io::Errno::LOOP => {
                        FetchError::NotWasm(format!("{shown} is a symbolic link"))
                    }
                    e => FetchError::Other(format!("{shown}: {e}")),
                })
            })?;
        let file = tokio::fs::File::from_std(std::fs::File::from(opened));
        let md = file
            .metadata()
            .await
            .map_err(|e| FetchError::Other(format!("{shown}: {e}")))?;
        if !md.is_file() {
            return Err(FetchError::NotWasm(format!(
                "{shown} is not a regular file"
            )));
        }
        if md.len() > self.config.max_module_bytes {
            return Err(FetchError::NotWasm(format!(
                "{shown} is larger than {} bytes",
                self.config.max_module_bytes
            )));
        }
        let mut bytes = Vec::with_capacity(md.len() as usize);
        tokio::io::AsyncReadExt::read_to_end(
            &mut tokio::io::AsyncReadExt::take(file, self.config.max_module_bytes),
            &mut bytes,
        )
        .await
        .map_err(|e| FetchError::Other(format!("{shown}: {e}")))?;
        Ok(bytes)
    }
}
