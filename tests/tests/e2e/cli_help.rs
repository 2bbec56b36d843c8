//! The command line as a shell user meets it (issue 34 item 11): completion
//! scripts, and no hidden internal command offered anywhere; every argument
//! described in `-h`, and each of `up` and `run` offering only its own flags.

use std::process::Command;

use anyhow::{Result, ensure};
use wasmlet_e2e::wasmlet_bin;

#[test]
fn completions_cover_the_commands_and_never_the_internal_one() -> Result<()> {
    for shell in ["bash", "zsh", "fish"] {
        let out = Command::new(wasmlet_bin())
            .args(["completions", shell])
            .output()?;
        ensure!(
            out.status.success(),
            "{shell}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let script = String::from_utf8(out.stdout)?;
        for command in ["up", "plugin", "datastore", "replay", "shadow-report"] {
            ensure!(script.contains(command), "{shell}: no {command}");
        }
        ensure!(
            !script.contains("compile-component"),
            "{shell} completes the internal compile-component"
        );
    }
    // A near miss suggests a real command, not the hidden one.
    let out = Command::new(wasmlet_bin()).arg("complete").output()?;
    let err = String::from_utf8_lossy(&out.stderr);
    ensure!(
        !out.status.success() && !err.contains("compile-component"),
        "{err}"
    );
    Ok(())
}

/// `wasmlet ARGS... -h`'s text.
fn help(path: &[&str]) -> Result<String> {
    let out = Command::new(wasmlet_bin()).args(path).arg("-h").output()?;
    ensure!(
        out.status.success(),
        "{path:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8(out.stdout)?)
}

/// The subcommands a help text lists (`help` left out).
fn subcommands(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|l| *l != "Commands:")
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .map(String::from)
        .collect()
}

/// The argument and option entries of a help text with no description of
/// their own (only `[env: ...]`/`[default: ...]`, or nothing).
fn undescribed(help: &str) -> Vec<String> {
    let lines: Vec<&str> = help.lines().collect();
    let mut missing = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let entry = line.trim_start();
        let indent = line.len() - entry.len();
        if !(2..=6).contains(&indent) || !(entry.starts_with('-') || entry.starts_with('<')) {
            continue;
        }
        // `  --flag <V>  text`: the text after two spaces; else the next
        // line, indented deeper (clap's layout for long descriptions).
        let same = entry.split_once("  ").map(|(_, t)| t.trim()).unwrap_or("");
        let next = lines
            .get(i + 1)
            .filter(|n| n.len() - n.trim_start().len() > indent + 2)
            .map(|n| n.trim())
            .unwrap_or("");
        let text = if same.is_empty() { next } else { same };
        if text.is_empty() || text.starts_with('[') {
            missing.push(entry.to_string());
        }
    }
    missing
}

#[test]
fn every_argument_is_described_and_each_command_shows_only_its_own_flags() -> Result<()> {
    // Every command, walked from the top.
    let mut todo = vec![Vec::<String>::new()];
    let mut seen = 0;
    while let Some(path) = todo.pop() {
        let args: Vec<&str> = path.iter().map(String::as_str).collect();
        let text = help(&args)?;
        let missing = undescribed(&text);
        ensure!(
            missing.is_empty(),
            "wasmlet {}: undescribed {missing:?}\n{text}",
            args.join(" ")
        );
        for sub in subcommands(&text) {
            let mut next = path.clone();
            next.push(sub);
            todo.push(next);
        }
        seen += 1;
    }
    ensure!(seen > 20, "only {seen} commands walked");

    let up = help(&["up"])?;
    let run = help(&["run"])?;
    // An option entry: its first word, exactly.
    let flag = |text: &str, f: &str| {
        text.lines()
            .any(|l| l.split_whitespace().next().is_some_and(|w| w == f))
    };
    // Each command's own flags, not the other's.
    for f in ["--no-builtins", "--no-node", "--port", "--otlp-endpoint"] {
        ensure!(flag(&up, f), "up lacks {f}\n{up}");
        ensure!(
            f == "--otlp-endpoint" || !flag(&run, f),
            "run lists up's {f}\n{run}"
        );
    }
    for f in [
        "--builtins",
        "--kubelet-client-ca",
        "--kubeconfig",
        "--otlp-endpoint",
    ] {
        ensure!(flag(&run, f), "run lacks {f}\n{run}");
        ensure!(
            f == "--otlp-endpoint" || !flag(&up, f),
            "up lists run's {f}\n{up}"
        );
    }
    // Tracing is the host's: commands that run no host do not offer it.
    for path in [
        &["plugin", "check"][..],
        &["completions"],
        &["status"],
        &["apiserver"],
    ] {
        let text = help(path)?;
        ensure!(
            !text.contains("--otlp-endpoint"),
            "wasmlet {} offers --otlp-endpoint\n{text}",
            path.join(" ")
        );
    }
    Ok(())
}
