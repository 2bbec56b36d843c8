//! Whether the workload runtime can start workloads, for the Node's
//! `Ready=False WorkloadRuntimeUnavailable` (the kubelet's `runtime is down`).
//! Every start writes beneath the data directory: a fetch stores the module in
//! `modules/sha256` and its reference in `modules/refs`, a spawn opens its log
//! in `pods/<uid>/logs` and its volumes in `pods/<uid>/volumes`. When one of
//! those cannot take a file (the file system is read-only or full, out of
//! inodes, the directory was removed or replaced by a file), every pod fails
//! to start, whatever the provider does. The probe creates, writes and
//! removes one small file in each, as a start would; it does not look at
//! permission bits (the host often runs as root, which they do not stop).

use std::io::Write;
use std::path::Path;

/// The directories beneath the workload data directory a start writes to.
pub(crate) const WRITTEN: [&str; 3] = ["modules/sha256", "modules/refs", "pods"];

/// Writes and removes a probe file in each of [`WRITTEN`] beneath `data_dir`;
/// the first failure names the directory and the OS error.
pub(crate) fn probe(data_dir: &Path) -> Result<(), String> {
    for rel in WRITTEN {
        let dir = data_dir.join(rel);
        let file = dir.join(format!(".probe-{}", std::process::id()));
        let wrote = std::fs::OpenOptions::new()
            .create(true)
            .truncate(true)
            .write(true)
            .open(&file)
            .and_then(|mut f| f.write_all(b"ok"));
        let _ = std::fs::remove_file(&file);
        if let Err(e) = wrote {
            return Err(format!(
                "the workload data directory {} cannot be written ({e}): no workload can start",
                dir.display()
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_replaced_by_a_file_fails_the_probe_until_restored() {
        let tmp = tempfile::tempdir().unwrap();
        for d in WRITTEN {
            std::fs::create_dir_all(tmp.path().join(d)).unwrap();
        }
        assert_eq!(probe(tmp.path()), Ok(()));
        let pods = tmp.path().join("pods");
        std::fs::remove_dir(&pods).unwrap();
        std::fs::write(&pods, b"not a directory").unwrap();
        let e = probe(tmp.path()).unwrap_err();
        assert!(
            e.contains(&pods.display().to_string()) && e.contains("no workload can start"),
            "{e}"
        );
        std::fs::remove_file(&pods).unwrap();
        std::fs::create_dir(&pods).unwrap();
        assert_eq!(probe(tmp.path()), Ok(()));
        assert_eq!(
            std::fs::read_dir(&pods).unwrap().count(),
            0,
            "no probe left"
        );
    }
}
