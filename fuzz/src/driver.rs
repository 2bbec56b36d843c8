//! The driver: runs a target on mutated corpus inputs and fresh random bytes
//! from a seeded RNG, catches panics, and saves each distinct crash.
//!
//! There is no coverage feedback (that needs nightly's sanitizer coverage);
//! the generators in [`crate::generate`] make up for some of it by producing
//! Kubernetes-shaped input from any bytes.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::panic::{self, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::Once;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::Target;

/// How long a target runs.
#[derive(Debug, Clone, Copy)]
pub enum Budget {
    Time(Duration),
    Execs(u64),
}

/// One distinct crash (by panic location).
#[derive(Debug, Clone)]
pub struct Crash {
    pub message: String,
    /// Where the input was saved, if an artifacts directory was given.
    pub input: Option<PathBuf>,
    pub data: Vec<u8>,
    pub count: u64,
}

#[derive(Debug, Default)]
pub struct Outcome {
    pub execs: u64,
    pub elapsed: Duration,
    /// Keyed by panic location.
    pub crashes: BTreeMap<String, Crash>,
}

thread_local! {
    /// The last panic on this thread: (location, message).
    static LAST_PANIC: RefCell<Option<(String, String)>> = const { RefCell::new(None) };
}

/// Records panics instead of printing them (a run may see thousands).
fn quiet_panics() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        panic::set_hook(Box::new(|info| {
            let location = info
                .location()
                .map(|l| format!("{}:{}", l.file(), l.line()))
                .unwrap_or_default();
            let message = info
                .payload()
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| info.payload().downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            LAST_PANIC.with(|p| *p.borrow_mut() = Some((location, message)));
        }));
    });
}

/// Runs `target` once on `data`; `Some((location, message))` if it panicked.
pub fn run_one(target: &Target, data: &[u8]) -> Option<(String, String)> {
    quiet_panics();
    match panic::catch_unwind(AssertUnwindSafe(|| (target.run)(data))) {
        Ok(()) => None,
        Err(_) => Some(
            LAST_PANIC
                .with(|p| p.borrow_mut().take())
                .unwrap_or_default(),
        ),
    }
}

/// Applies 1..=8 random edits to `input`, sometimes splicing in `other`.
pub fn mutate(rng: &mut StdRng, input: &mut Vec<u8>, other: &[u8]) {
    for _ in 0..rng.random_range(1..=8) {
        let len = input.len();
        match rng.random_range(0..7) {
            0 if len > 0 => {
                let i = rng.random_range(0..len);
                input[i] ^= 1 << rng.random_range(0..8);
            }
            1 if len > 0 => {
                let i = rng.random_range(0..len);
                input[i] = rng.random();
            }
            2 => {
                let i = rng.random_range(0..=len);
                let n = rng.random_range(1..=16);
                let bytes: Vec<u8> = (0..n).map(|_| rng.random()).collect();
                input.splice(i..i, bytes);
            }
            3 if len > 0 => {
                let i = rng.random_range(0..len);
                let n = rng.random_range(1..=(len - i).min(32));
                input.drain(i..i + n);
            }
            4 if len > 0 => {
                // Duplicate a range (repeated structure: nesting, lists).
                let i = rng.random_range(0..len);
                let n = rng.random_range(1..=(len - i).min(64));
                let copy = input[i..i + n].to_vec();
                let at = rng.random_range(0..=len);
                input.splice(at..at, copy);
            }
            5 if !other.is_empty() => {
                let i = rng.random_range(0..other.len());
                let n = rng.random_range(1..=(other.len() - i).min(64));
                let at = rng.random_range(0..=len);
                input.splice(at..at, other[i..i + n].iter().copied());
            }
            _ => {
                // An interesting byte: boundaries and the characters parsers split on.
                let b = *[
                    0u8, 0xff, 0x7f, 0x80, b',', b'=', b'!', b'(', b')', b'"', b'\n', b'[', b'{',
                ]
                .get(rng.random_range(0..13))
                .unwrap_or(&0);
                let i = rng.random_range(0..=len);
                input.insert(i, b);
            }
        }
    }
    input.truncate(1 << 16);
}

/// Runs `target` for `budget`: a quarter fresh random inputs, the rest
/// mutations of `corpus`. Crashing inputs go to `artifacts/crash-<location hash>`,
/// and the input in progress to `artifacts/.current` (what a hard crash such
/// as a stack overflow, which no `catch_unwind` sees, leaves behind).
pub fn run(
    target: &Target,
    budget: Budget,
    seed: u64,
    corpus: &[Vec<u8>],
    artifacts: Option<&Path>,
) -> std::io::Result<Outcome> {
    let mut rng = StdRng::seed_from_u64(seed);
    let current = match artifacts {
        Some(dir) => {
            std::fs::create_dir_all(dir)?;
            Some(File::create(dir.join(".current"))?)
        }
        None => None,
    };
    let started = Instant::now();
    let mut out = Outcome::default();
    let done = |out: &Outcome| match budget {
        Budget::Time(d) => started.elapsed() >= d,
        Budget::Execs(n) => out.execs >= n,
    };
    // Every corpus entry once, unchanged, first.
    let mut queue: Vec<Vec<u8>> = corpus.to_vec();
    queue.reverse();
    while !done(&out) {
        let input = match queue.pop() {
            Some(i) => i,
            None if corpus.is_empty() || rng.random_ratio(1, 4) => {
                let n = [16usize, 64, 256, 1024, 4096][rng.random_range(0..5)];
                let n = rng.random_range(0..=n);
                (0..n).map(|_| rng.random()).collect()
            }
            None => {
                let mut i = corpus[rng.random_range(0..corpus.len())].clone();
                let other = &corpus[rng.random_range(0..corpus.len())];
                mutate(&mut rng, &mut i, other);
                i
            }
        };
        if let Some(f) = &current {
            f.set_len(0)?;
            f.write_all_at(&input, 0)?;
        }
        out.execs += 1;
        if let Some((location, message)) = run_one(target, &input) {
            let crash = out
                .crashes
                .entry(location.clone())
                .or_insert_with(|| Crash {
                    message: message.clone(),
                    input: None,
                    data: input.clone(),
                    count: 0,
                });
            crash.count += 1;
            // Keep the smallest input seen for this location.
            if crash.count == 1 || input.len() < crash.data.len() {
                crash.data = input.clone();
                crash.message = message;
                if let Some(dir) = artifacts {
                    let name = format!("crash-{:016x}", fnv(location.as_bytes()));
                    let path = dir.join(name);
                    std::fs::write(&path, &input)?;
                    crash.input = Some(path);
                }
            }
        }
    }
    out.elapsed = started.elapsed();
    Ok(out)
}

/// FNV-1a: a stable name for a crash location across runs.
fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf29ce484222325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x100000001b3)
    })
}

/// The seed inputs of `target`: the files in `dir` (`fuzz/corpus/<name>`).
pub fn corpus(dir: &Path) -> std::io::Result<Vec<Vec<u8>>> {
    let mut files: Vec<PathBuf> = match std::fs::read_dir(dir) {
        Ok(rd) => rd
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.is_file())
            .collect(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(e),
    };
    files.sort();
    files.iter().map(std::fs::read).collect()
}

/// `fuzz/corpus/<target>` in the source tree.
pub fn corpus_dir(target: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("corpus")
        .join(target)
}
