//! Directories only the host's user may read: the data directory (the
//! database and its WAL, the PKI keys, kubeconfigs, secret volumes, pulled
//! modules) and the compiled-component cache, whose files run as machine code.
//!
//! A directory that exists already must belong to this user; group and other
//! permission bits are removed (with a log line), never silently kept.

use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::Path;

/// Creates `dir` (and missing parents) with mode 0700, or checks and tightens
/// an existing one. Refuses a directory another user owns: whoever owns it
/// could swap its contents.
pub fn private_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    let meta = std::fs::metadata(dir)?;
    let me = rustix::process::geteuid().as_raw();
    if meta.uid() != me {
        // A volume the kubelet makes (emptyDir, a PVC with fsGroup) belongs to
        // root and is open to the pod's group, or to everyone: never private,
        // and not ours to tighten. A directory the host makes inside it is.
        let hint = if rustix::fs::access(dir, rustix::fs::Access::WRITE_OK).is_ok() {
            format!(
                "; this user may write in it (a volume a kubelet mounted, say): pass a subdirectory, e.g. --data-dir {}, which the host creates as its own",
                dir.join("data").display()
            )
        } else {
            "; use a directory of your own".to_string()
        };
        return Err(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            format!(
                "{} belongs to uid {}, not to this user (uid {me}){hint}",
                dir.display(),
                meta.uid()
            ),
        ));
    }
    if meta.mode() & 0o077 != 0 {
        tracing::debug!(dir = %dir.display(), mode = format!("{:o}", meta.mode() & 0o777), "making the directory private (0700)");
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
    }
    Ok(())
}

/// Checks, without changing anything, that `dir` is a directory of this user
/// that nobody else may write to (a cache the host reads but did not make,
/// say): refused otherwise, since its contents may have been replaced.
pub fn check_private_dir(dir: &Path) -> std::io::Result<()> {
    check_owned(
        dir,
        std::fs::Metadata::is_dir,
        0o022,
        "a directory of this user that others may not write to",
    )
}

/// Checks that `path` is a regular file of this user that nobody else may
/// read or write (a key, say): refused otherwise, since such a file may have
/// been read or replaced.
pub fn check_private_file(path: &Path) -> std::io::Result<()> {
    check_owned(
        path,
        std::fs::Metadata::is_file,
        0o077,
        "a regular file of this user with mode 0600",
    )
}

/// `path` (not followed if a link) is of the kind `is`, this user's, and has
/// none of the mode bits `others`; else an error saying it must be `what`.
fn check_owned(
    path: &Path,
    is: fn(&std::fs::Metadata) -> bool,
    others: u32,
    what: &str,
) -> std::io::Result<()> {
    let meta = std::fs::symlink_metadata(path)?;
    let me = rustix::process::geteuid().as_raw();
    if !is(&meta) || meta.uid() != me || meta.mode() & others != 0 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            format!("{} must be {what}", path.display()),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_or_open_directory_ends_up_private() {
        let root = tempfile::tempdir().unwrap();
        let new = root.path().join("a/b");
        private_dir(&new).unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().mode() & 0o777;
        assert_eq!(mode(&new), 0o700);
        let open = root.path().join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o755)).unwrap();
        private_dir(&open).unwrap();
        assert_eq!(mode(&open), 0o700);
    }

    #[test]
    fn a_file_others_may_read_is_refused() {
        let root = tempfile::tempdir().unwrap();
        let key = root.path().join("k");
        std::fs::write(&key, b"x").unwrap();
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
        let err = check_private_file(&key).unwrap_err();
        assert!(err.to_string().contains("mode 0600"), "{err}");
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
        check_private_file(&key).unwrap();
        let link = root.path().join("l");
        std::os::unix::fs::symlink(&key, &link).unwrap();
        assert!(
            check_private_file(&link).is_err(),
            "a symlink is not the file"
        );
    }
}
