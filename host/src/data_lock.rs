//! One process per data directory: an exclusive lock on `DATA_DIR/lock`,
//! taken before anything in the directory is written and held for the
//! process's life.
//!
//! Two hosts on one directory overwrite each other's kubeconfig and race on
//! the database's revision counter (every later write of the first failed
//! with `UNIQUE constraint failed: log.rv`). The lock is `flock(2)` (std's
//! `File::try_lock`): the kernel drops it when the process ends, however it
//! ends, so a crash never leaves a stale lock behind; the pid written into the
//! file is only for the message.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// The lock file's name in the data directory.
pub(crate) const LOCK_FILE: &str = "lock";

#[derive(Debug, thiserror::Error)]
pub(crate) enum DataDirLockError {
    #[error(
        "data directory {dir} is in use by another wasmlet ({holder}); stop it or pass another --data-dir"
    )]
    InUse { dir: PathBuf, holder: String },
    #[error("data directory {dir}: cannot lock {file}: {source}")]
    Io {
        dir: PathBuf,
        file: PathBuf,
        source: std::io::Error,
    },
}

/// Held while the process uses the directory; dropping it (or the process
/// ending) releases the lock.
#[derive(Debug)]
pub(crate) struct DataDirLock {
    _file: File,
}

impl DataDirLock {
    /// Locks `dir` (which must exist) for this process, or says which process holds it.
    pub(crate) fn acquire(dir: &Path) -> Result<DataDirLock, DataDirLockError> {
        let path = dir.join(LOCK_FILE);
        let io = |source| DataDirLockError::Io {
            dir: dir.to_path_buf(),
            file: path.clone(),
            source,
        };
        // Not truncated on open: the holder's pid must stay readable.
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(&path)
            .map_err(io)?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                let mut text = String::new();
                let _ = file.read_to_string(&mut text);
                let holder = match text.trim().parse::<u32>() {
                    Ok(pid) => format!("pid {pid}"),
                    // Locked an instant ago and not written yet.
                    Err(_) => "pid unknown".into(),
                };
                return Err(DataDirLockError::InUse {
                    dir: dir.to_path_buf(),
                    holder,
                });
            }
            Err(TryLockError::Error(e)) => return Err(io(e)),
        }
        file.set_len(0).map_err(io)?;
        file.rewind().map_err(io)?;
        writeln!(file, "{}", std::process::id()).map_err(io)?;
        Ok(DataDirLock { _file: file })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_lock_on_the_directory_names_the_holder_until_the_first_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let first = DataDirLock::acquire(dir.path()).unwrap();
        // flock locks belong to the open file, so a second open in this
        // process conflicts as another process's would.
        let err = DataDirLock::acquire(dir.path()).unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains(&format!("pid {}", std::process::id())),
            "{msg}"
        );
        assert!(msg.contains(&dir.path().display().to_string()), "{msg}");
        drop(first);
        let _again = DataDirLock::acquire(dir.path()).unwrap();
        let pid = std::fs::read_to_string(dir.path().join(LOCK_FILE)).unwrap();
        assert_eq!(pid.trim(), std::process::id().to_string());
    }
}
