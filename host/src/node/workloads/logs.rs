//! Container log files in kubelet's CRI format, and the stdout/stderr streams that
//! write them.
//!
//! One file per attempt, `DATA/pods/<uid>/logs/<container>/<attempt>.log`; both streams
//! interleaved, one record per line:
//!
//! ```text
//! 2026-01-01T00:00:00.000000000Z stdout F hello
//! 2026-01-01T00:00:00.000000000Z stderr P the first 16 KiB of a very long line...
//! ```
//!
//! `F` ends a line, `P` is a piece of a line longer than [`MAX_LINE`] (the rest follows);
//! output the guest never terminated with a newline is written as `F` when it exits.
//! When the file would grow past the size limit it is renamed to `<attempt>.log.1`
//! (replacing an older one) and a fresh file is started. Starting an attempt removes
//! the files of every attempt before the previous one (as the kubelet keeps two).

use std::collections::VecDeque;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use tokio::io::AsyncWrite;
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::p2::{OutputStream, Pollable, StreamResult};

/// A longer line is split into `P` records of this size, as kubelet's runtimes do.
pub const MAX_LINE: usize = 16 * 1024;
/// How much raw output `read_logs` can return (a termination message is at most 4 KiB).
pub(crate) const TAIL_BYTES: usize = 16 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogStream {
    Stdout,
    Stderr,
}

impl LogStream {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            LogStream::Stdout => "stdout",
            LogStream::Stderr => "stderr",
        }
    }
}

/// One parsed record of a CRI log file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CriLine<'a> {
    /// RFC 3339 with nanoseconds, UTC: `2026-01-01T00:00:00.000000000Z`.
    pub timestamp: &'a str,
    /// `stdout` or `stderr`.
    pub stream: &'a str,
    /// `P`: the line continues in the next record of the same stream.
    pub partial: bool,
    /// The text, without the trailing newline.
    pub text: &'a [u8],
}

/// Parses one line of a CRI log file (without or with its trailing `\n`).
pub fn parse_cri_line(line: &[u8]) -> Option<CriLine<'_>> {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    let mut parts = line.splitn(4, |&b| b == b' ');
    let timestamp = std::str::from_utf8(parts.next()?).ok()?;
    let stream = std::str::from_utf8(parts.next()?).ok()?;
    let partial = match parts.next()? {
        b"P" => true,
        b"F" => false,
        _ => return None,
    };
    let text = parts.next().unwrap_or(b"");
    Some(CriLine {
        timestamp,
        stream,
        partial,
        text,
    })
}

/// The timestamp format of the records.
pub(crate) fn cri_timestamp(t: chrono::DateTime<chrono::Utc>) -> String {
    t.format("%Y-%m-%dT%H:%M:%S%.9fZ").to_string()
}

/// The log file of one workload attempt, shared by its stdout and stderr.
pub(crate) struct LogSink {
    path: PathBuf,
    file: Option<File>,
    written: u64,
    max_bytes: u64,
    pending: [Vec<u8>; 2],
    tail: VecDeque<u8>,
    warned: bool,
}

impl LogSink {
    /// Opens (appending) the attempt's file, creating its directory.
    pub(crate) fn open(path: PathBuf, max_bytes: u64) -> std::io::Result<LogSink> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)?;
        let written = file.metadata().map(|m| m.len()).unwrap_or(0);
        Ok(LogSink {
            path,
            file: Some(file),
            written,
            max_bytes: max_bytes.max(4096),
            pending: [Vec::new(), Vec::new()],
            tail: VecDeque::new(),
            warned: false,
        })
    }

    pub(crate) fn write(&mut self, stream: LogStream, bytes: &[u8]) {
        self.tail.extend(bytes);
        if self.tail.len() > TAIL_BYTES {
            let excess = self.tail.len() - TAIL_BYTES;
            self.tail.drain(..excess);
        }
        let i = stream as usize;
        let mut rest = bytes;
        while !rest.is_empty() {
            match rest.iter().position(|&b| b == b'\n') {
                Some(nl) => {
                    let mut line = std::mem::take(&mut self.pending[i]);
                    line.extend_from_slice(&rest[..nl]);
                    rest = &rest[nl + 1..];
                    for chunk in split_long(&line) {
                        self.record(stream, chunk.0, chunk.1);
                    }
                }
                None => {
                    self.pending[i].extend_from_slice(rest);
                    rest = &[];
                    while self.pending[i].len() > MAX_LINE {
                        let piece: Vec<u8> = self.pending[i].drain(..MAX_LINE).collect();
                        self.record(stream, true, &piece);
                    }
                }
            }
        }
    }

    /// Writes what is left of unterminated lines (the guest has exited).
    pub(crate) fn finish(&mut self) {
        for stream in [LogStream::Stdout, LogStream::Stderr] {
            let line = std::mem::take(&mut self.pending[stream as usize]);
            if !line.is_empty() {
                self.record(stream, false, &line);
            }
        }
        if let Some(f) = self.file.as_mut() {
            let _ = f.flush();
        }
    }

    /// The last `max` bytes of raw output (both streams, as written).
    pub(crate) fn tail(&self, max: usize) -> Vec<u8> {
        let skip = self.tail.len().saturating_sub(max);
        self.tail.iter().skip(skip).copied().collect()
    }

    fn record(&mut self, stream: LogStream, partial: bool, text: &[u8]) {
        let ts = cri_timestamp(chrono::Utc::now());
        let mut rec = Vec::with_capacity(ts.len() + text.len() + 12);
        rec.extend_from_slice(ts.as_bytes());
        rec.push(b' ');
        rec.extend_from_slice(stream.as_str().as_bytes());
        rec.extend_from_slice(if partial { b" P " } else { b" F " });
        rec.extend_from_slice(text);
        rec.push(b'\n');
        if self.written > 0 && self.written + rec.len() as u64 > self.max_bytes {
            self.rotate();
        }
        let result = match self.file.as_mut() {
            Some(f) => f.write_all(&rec),
            None => Err(std::io::Error::other("log file unavailable")),
        };
        match result {
            Ok(()) => self.written += rec.len() as u64,
            Err(e) if !self.warned => {
                self.warned = true;
                tracing::warn!(file = %self.path.display(), error = %e, "cannot write workload log; dropping output");
            }
            Err(_) => {}
        }
    }

    fn rotate(&mut self) {
        self.file = None;
        let old = rotated_path(&self.path);
        if let Err(e) = std::fs::rename(&self.path, &old) {
            tracing::warn!(file = %self.path.display(), error = %e, "cannot rotate workload log");
        }
        self.file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)
            .ok();
        self.written = 0;
    }
}

/// Removes the log files (`N.log`, `N.log.1`) of a container's attempts before
/// `keep_from`, in its log directory `dir`. The kubelet keeps the current
/// container's log and the previous one's only: so a crash loop's logs stay
/// bounded (two attempts, each at most twice the size limit) however long it loops,
/// across host restarts too.
pub(crate) fn prune_attempts(dir: &Path, keep_from: u32) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let attempt = name.to_str().and_then(|n| {
            n.strip_suffix(".log.1")
                .or_else(|| n.strip_suffix(".log"))?
                .parse::<u32>()
                .ok()
        });
        if attempt.is_some_and(|a| a < keep_from)
            && let Err(err) = std::fs::remove_file(e.path())
        {
            tracing::warn!(file = %e.path().display(), error = %err, "cannot remove an old container log");
        }
    }
}

/// `N.log` → `N.log.1`.
pub(crate) fn rotated_path(path: &Path) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(".1");
    PathBuf::from(s)
}

fn split_long(line: &[u8]) -> Vec<(bool, &[u8])> {
    if line.len() <= MAX_LINE {
        return vec![(false, line)];
    }
    let chunks: Vec<&[u8]> = line.chunks(MAX_LINE).collect();
    let n = chunks.len();
    chunks
        .into_iter()
        .enumerate()
        .map(|(i, c)| (i + 1 < n, c))
        .collect()
}

/// A guest's stdout or stderr, writing into its attempt's [`LogSink`].
#[derive(Clone)]
pub(crate) struct Capture {
    pub(crate) sink: Arc<Mutex<LogSink>>,
    pub(crate) stream: LogStream,
    /// Attached clients see the output too.
    pub(crate) attach: super::exec::AttachTap,
}

impl Capture {
    fn put(&self, bytes: &[u8]) {
        self.sink
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .write(self.stream, bytes);
        self.attach.send(self.stream, bytes);
    }
}

impl IsTerminal for Capture {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for Capture {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }

    fn async_stream(&self) -> Box<dyn AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for Capture {
    async fn ready(&mut self) {}
}

impl OutputStream for Capture {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        self.put(&bytes);
        Ok(())
    }

    fn flush(&mut self) -> StreamResult<()> {
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        Ok(1 << 20)
    }
}

impl AsyncWrite for Capture {
    fn poll_write(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.put(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pruning_keeps_the_current_and_the_previous_attempt() {
        let dir = tempfile::tempdir().unwrap();
        for f in [
            "0.log", "1.log", "1.log.1", "2.log", "3.log", "3.log.1", "notes",
        ] {
            std::fs::write(dir.path().join(f), "x").unwrap();
        }
        prune_attempts(dir.path(), 2);
        let mut left: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        assert_eq!(left, ["2.log", "3.log", "3.log.1", "notes"]);
    }
}
