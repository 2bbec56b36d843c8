//! `wasmlet plugin precompile DIR`: every component of a plugin directory
//! compiled ahead of time into `DIR/.precompiled`, the seed cache a host
//! reads on a fresh data directory ([`crate::plugin::engine`]). Compiling is
//! what a fresh `wasmlet up` spent its first half minute on (11 built-ins one
//! after another); done once when the plugins are built or installed, a host's
//! first start deserializes them instead.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use anyhow::{Context, Result, bail};

use crate::plugin::engine::{PluginEngine, SEED_DIR};

/// Compiles each `*.wasm` of `dir` (or only `NAME.wasm` of each of `only`)
/// into `dir/.precompiled`, as many at once as there are cores. Fails naming
/// every file that did not compile.
pub(crate) fn precompile(dir: &Path, only: &[String]) -> Result<()> {
    let mut files: Vec<PathBuf> = if only.is_empty() {
        std::fs::read_dir(dir)
            .with_context(|| format!("reading {}", dir.display()))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|e| e == "wasm") && p.is_file())
            .collect()
    } else {
        let files: Vec<PathBuf> = only.iter().map(|n| dir.join(format!("{n}.wasm"))).collect();
        if let Some(missing) = files.iter().find(|f| !f.is_file()) {
            bail!("{} does not exist", missing.display());
        }
        files
    };
    files.sort();
    let out = dir.join(SEED_DIR);
    let engine = PluginEngine::new(&out)?;
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get());
    let next = AtomicUsize::new(0);
    let started = Instant::now();
    let failures: Vec<String> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..workers.min(files.len()))
            .map(|_| {
                scope.spawn(|| {
                    let mut failed = Vec::new();
                    while let Some(path) = files.get(next.fetch_add(1, Ordering::Relaxed)) {
                        let t0 = Instant::now();
                        let result = std::fs::read(path)
                            .map_err(|e| e.to_string())
                            .and_then(|bytes| engine.load(path, &bytes).map_err(|e| e.to_string()));
                        match result {
                            Ok(_) => println!(
                                "precompiled {} in {:.1} s",
                                path.display(),
                                t0.elapsed().as_secs_f64()
                            ),
                            Err(e) => failed.push(e),
                        }
                    }
                    failed
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| {
                h.join()
                    .unwrap_or_else(|_| vec!["a compile thread panicked".into()])
            })
            .collect()
    });
    if !failures.is_empty() {
        bail!(
            "{} of {} components in {} did not compile:\n  {}",
            failures.len(),
            files.len(),
            dir.display(),
            failures.join("\n  ")
        );
    }
    println!(
        "{} components precompiled into {} in {:.1} s",
        files.len(),
        out.display(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}
