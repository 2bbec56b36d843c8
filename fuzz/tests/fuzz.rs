//! The fuzz driver, as a test target without libtest's harness.
//!
//! - `cargo test` (no arguments, or libtest's): check mode, every target over
//!   its seed corpus plus a few hundred generated inputs from a fixed seed, so
//!   the corpus (and each crash once fixed and added to it) stays a
//!   regression test.
//! - `cargo test --test fuzz -- run [--seconds N | --execs N] [--seed N]
//!   [--artifacts DIR] [TARGET...]`: fuzzing for a budget, reporting
//!   executions and crashes (`scripts/fuzz` wraps this).
//! - `... -- replay TARGET FILE`: one input, with the panic shown.
//! - `... -- list`: the targets.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, bail};
use wasmlet_fuzz::driver::{self, Budget};
use wasmlet_fuzz::{TARGETS, Target};

const USAGE: &str =
    "usage: fuzz run [--seconds N | --execs N] [--seed N] [--artifacts DIR] [TARGET...]
       fuzz replay TARGET FILE
       fuzz list
       fuzz            (check mode: each target's corpus plus generated inputs)";

/// Generated inputs per target in check mode (fewer where one costs more).
fn check_execs(t: &Target) -> u64 {
    match t.name {
        "component" => 40,
        "rest" => 150,
        _ => 400,
    }
}

fn target(name: &str) -> anyhow::Result<&'static Target> {
    wasmlet_fuzz::target(name)
        .with_context(|| format!("unknown target {name:?} (`list` shows them)"))
}

fn main() -> anyhow::Result<ExitCode> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("run") => run(&args[1..]),
        Some("replay") => {
            let [_, name, file] = args.as_slice() else {
                bail!("{USAGE}");
            };
            let t = target(name)?;
            let data = std::fs::read(file).with_context(|| format!("reading {file}"))?;
            // The default panic hook stays: the panic prints as usual.
            (t.run)(&data);
            println!("{name}: {file} ran without a crash");
            Ok(ExitCode::SUCCESS)
        }
        Some("list") => {
            for t in TARGETS {
                println!("{:16} {}", t.name, t.about);
            }
            Ok(ExitCode::SUCCESS)
        }
        Some("-h" | "--help" | "help") => {
            println!("{USAGE}");
            Ok(ExitCode::SUCCESS)
        }
        // libtest's flags, as `cargo test` and cargo-nextest pass them: check
        // mode. `--list` names one test per target (nextest lists, then runs
        // each as `--exact NAME`); a bare name (or none) picks the targets.
        _ => {
            let names: Vec<&str> = args
                .iter()
                .map(String::as_str)
                .filter(|a| !a.starts_with('-'))
                .collect();
            if args.iter().any(|a| a == "--list") {
                if !args.iter().any(|a| a == "--ignored") {
                    for t in TARGETS {
                        println!("check::{}: test", t.name);
                    }
                }
                return Ok(ExitCode::SUCCESS);
            }
            check(&names, args.iter().any(|a| a == "--exact"))
        }
    }
}

/// Check mode over the targets whose test name (`check::NAME`) contains one
/// of `names` (is one, with `exact`; all when none), as libtest filters.
fn check(names: &[&str], exact: bool) -> anyhow::Result<ExitCode> {
    let mut failed = false;
    let picked = |t: &Target| {
        let test = format!("check::{}", t.name);
        names.is_empty()
            || names
                .iter()
                .any(|n| if exact { test == *n } else { test.contains(n) })
    };
    for t in TARGETS.iter().filter(|t| picked(t)) {
        let corpus = driver::corpus(&driver::corpus_dir(t.name))?;
        let budget = Budget::Execs(corpus.len() as u64 + check_execs(t));
        let out = driver::run(t, budget, 1, &corpus, None)?;
        let verdict = if out.crashes.is_empty() {
            "ok"
        } else {
            "FAILED"
        };
        println!("fuzz check {}: {} inputs ... {verdict}", t.name, out.execs);
        for (location, c) in &out.crashes {
            failed = true;
            println!(
                "  crash at {location}: {}\n  input ({} bytes): {:?}",
                c.message,
                c.data.len(),
                String::from_utf8_lossy(&c.data)
            );
        }
    }
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

fn run(args: &[String]) -> anyhow::Result<ExitCode> {
    let mut budget = Budget::Time(Duration::from_secs(60));
    let mut seed = 0u64;
    let mut artifacts = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/artifacts"));
    let mut targets = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = |what: &str| it.next().with_context(|| format!("{a} needs {what}"));
        match a.as_str() {
            "--seconds" => {
                budget = Budget::Time(Duration::from_secs_f64(value("seconds")?.parse()?))
            }
            "--execs" => budget = Budget::Execs(value("a count")?.parse()?),
            "--seed" => seed = value("a number")?.parse()?,
            "--artifacts" => artifacts = value("a directory")?.into(),
            name => targets.push(target(name)?),
        }
    }
    if targets.is_empty() {
        targets = TARGETS.iter().collect();
    }
    let mut crashed = false;
    for t in targets {
        let corpus = driver::corpus(&driver::corpus_dir(t.name))?;
        let dir = artifacts.join(t.name);
        let out = driver::run(t, budget, seed, &corpus, Some(&dir))?;
        let secs = out.elapsed.as_secs_f64();
        println!(
            "{:16} {:>9} execs in {:6.1} s ({:>6.0}/s), {} seeds, {} distinct crashes",
            t.name,
            out.execs,
            secs,
            out.execs as f64 / secs.max(1e-9),
            corpus.len(),
            out.crashes.len()
        );
        for (location, c) in &out.crashes {
            crashed = true;
            let saved = c
                .input
                .as_ref()
                .map(|p| p.display().to_string())
                .unwrap_or_default();
            println!(
                "  CRASH x{} at {location}: {}\n    input: {saved}",
                c.count, c.message
            );
        }
        let _ = std::fs::remove_file(dir.join(".current"));
    }
    Ok(if crashed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}
