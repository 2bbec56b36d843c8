//! The record file of one plugin: a thread that appends records as JSON
//! lines and rotates the file at its size bound, so a guest call never waits
//! for the disk (records queue; past the queue's bound they are dropped and counted).

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};

use super::{CallRecord, FORMAT, FORMAT_VERSION, Header};

/// Records waiting for the writer thread at most.
const QUEUE: usize = 4096;

/// Where and how much a plugin records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RecordSettings {
    /// The directory of the record files (`DATA_DIR/records`).
    pub(crate) dir: PathBuf,
    /// A file is rotated before it would pass this size.
    pub(crate) max_file_bytes: u64,
    /// Rotated files kept besides the current one.
    pub(crate) max_files: u32,
}

struct Msg {
    record: CallRecord,
    manifest: Arc<str>,
    redacted: bool,
}

pub(crate) struct RecordWriter {
    pub(crate) path: PathBuf,
    tx: SyncSender<Msg>,
    seq: AtomicU64,
    /// Records dropped because the queue was full.
    pub(crate) dropped: AtomicU64,
}

impl RecordWriter {
    /// Starts the writer of plugin `name` (the file is opened, and a file
    /// left by an earlier run rotated away, at the first record).
    pub(crate) fn start(
        name: &str,
        settings: &RecordSettings,
    ) -> std::io::Result<Arc<RecordWriter>> {
        wasmlet_apiserver::private_dir::private_dir(&settings.dir)?;
        let path = settings.dir.join(format!("{name}.jsonl"));
        let (tx, rx) = sync_channel(QUEUE);
        let file = FileState {
            path: path.clone(),
            max_bytes: settings.max_file_bytes.max(1),
            max_files: settings.max_files,
            file: None,
            size: 0,
            header: None,
        };
        std::thread::Builder::new()
            .name(format!("record-{name}"))
            .spawn(move || file.run(rx))?;
        Ok(Arc::new(RecordWriter {
            path,
            tx,
            seq: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
        }))
    }

    /// The next record's sequence number.
    pub(crate) fn next_seq(&self) -> u64 {
        self.seq.fetch_add(1, Ordering::Relaxed) + 1
    }

    pub(crate) fn write(&self, record: CallRecord, manifest: Arc<str>, redacted: bool) {
        let msg = Msg {
            record,
            manifest,
            redacted,
        };
        if let Err(TrySendError::Full(m)) = self.tx.try_send(msg) {
            let n = self.dropped.fetch_add(1, Ordering::Relaxed);
            if n.is_power_of_two() || n == 0 {
                tracing::warn!(plugin = %m.record.plugin, dropped = n + 1, file = %self.path.display(), "record queue full: records dropped");
            }
        }
    }
}

struct FileState {
    path: PathBuf,
    max_bytes: u64,
    max_files: u32,
    file: Option<File>,
    size: u64,
    /// The header the current file last got.
    header: Option<Header>,
}

impl FileState {
    fn run(mut self, rx: Receiver<Msg>) {
        for msg in rx {
            if let Err(e) = self.append(msg) {
                tracing::warn!(file = %self.path.display(), error = %e, "cannot write a record");
                self.file = None;
            }
        }
    }

    fn append(&mut self, msg: Msg) -> std::io::Result<()> {
        let header = Header {
            format: FORMAT.into(),
            version: FORMAT_VERSION,
            plugin: msg.record.plugin.clone(),
            digest: msg.record.digest.clone(),
            manifest: msg.manifest.to_string(),
            redacted: msg.redacted,
        };
        let line = serde_json::to_string(&msg.record)? + "\n";
        let header_line = serde_json::to_string(&header)? + "\n";
        if self.file.is_some() && self.size + (line.len() as u64) > self.max_bytes {
            self.file = None;
            rotate(&self.path, self.max_files);
        }
        if self.file.is_none() {
            // A new file, or the first of this run: what was there is rotated away.
            if std::fs::metadata(&self.path).is_ok_and(|m| m.len() > 0) {
                rotate(&self.path, self.max_files);
            }
            self.file = Some(open(&self.path)?);
            self.size = 0;
            self.header = None;
        }
        let mut out = String::new();
        if self.header.as_ref() != Some(&header) {
            out.push_str(&header_line);
            self.header = Some(header);
        }
        out.push_str(&line);
        // One write per record: a reader never sees half a line, except
        // after a crash mid-write (which readers skip, at the end of a file).
        if let Some(f) = self.file.as_mut() {
            f.write_all(out.as_bytes())?;
        }
        self.size += out.len() as u64;
        Ok(())
    }
}

fn open(path: &Path) -> std::io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)
}

/// `NAME.jsonl.(k)` → `.(k+1)`, `NAME.jsonl` → `.1`; the oldest beyond `keep` goes.
fn rotate(path: &Path, keep: u32) {
    let numbered = |k: u32| PathBuf::from(format!("{}.{k}", path.display()));
    if keep == 0 {
        let _ = std::fs::remove_file(path);
        return;
    }
    let _ = std::fs::remove_file(numbered(keep));
    for k in (1..keep).rev() {
        let _ = std::fs::rename(numbered(k), numbered(k + 1));
    }
    let _ = std::fs::rename(path, numbered(1));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugin::record::{CallKind, Outcome};

    fn record(seq: u64, digest: &str, pad: usize) -> CallRecord {
        CallRecord {
            seq,
            at: "t".into(),
            plugin: "p".into(),
            digest: digest.into(),
            call: CallKind::Reconcile,
            key: "ns/x".into(),
            input: serde_json::json!({ "pad": "x".repeat(pad) }),
            state: None,
            state_data: None,
            event: None,
            insecure_seed: "0".into(),
            imports: vec![],
            outcome: Outcome::Failed { error: "e".into() },
            host_writes: vec![],
        }
    }

    fn lines(p: &Path) -> Vec<serde_json::Value> {
        std::fs::read_to_string(p)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    #[test]
    fn files_rotate_at_their_bound_and_each_starts_with_a_header() {
        let dir = tempfile::tempdir().unwrap();
        let mut f = FileState {
            path: dir.path().join("p.jsonl"),
            max_bytes: 2000,
            max_files: 2,
            file: None,
            size: 0,
            header: None,
        };
        for i in 0..12 {
            let digest = if i < 2 { "a" } else { "b" };
            f.append(Msg {
                record: record(i, digest, 400),
                manifest: "m".into(),
                redacted: true,
            })
            .unwrap();
        }
        let path = |s: &str| dir.path().join(format!("p.jsonl{s}"));
        assert!(path(".1").exists() && path(".2").exists() && !path(".3").exists());
        for p in [path(""), path(".1"), path(".2")] {
            let ls = lines(&p);
            assert_eq!(ls[0]["format"], FORMAT, "{}", p.display());
            assert!(std::fs::metadata(&p).unwrap().len() <= 2000 + 600);
        }
        // A version change mid-file repeats the header.
        let first = lines(&path(".2"));
        assert!(first.iter().filter(|l| l.get("format").is_some()).count() >= 1);
        let last = lines(&path(""));
        assert_eq!(last.last().unwrap()["seq"], 11);
    }
}
