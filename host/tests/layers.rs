//! The import check over the host crate: the top-level modules of
//! `host/src/` form layers, and an import (a `crate::`/`super::` path in a
//! source file, outside its test module and comments) may only go down. Two
//! modules of one layer may not import each other either, so no import
//! circle can form across the folders. ARCHITECTURE.md draws the same
//! picture; `plugin::layers` checks the files inside `plugin/`, and
//! `apiserver/tests/layers.rs` (whose path reader this is) the API server.
//! Run against another tree with `CARGO_MANIFEST_DIR=DIR` on the built test
//! binary.
//!
//! A new top-level module or folder must be placed in [`LAYERS`]; `lib.rs`
//! and `main.rs` are the top and exempt.
#![allow(clippy::unwrap_used)] // a test: a failure should stop it loudly

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The layers, bottom first: each entry lists the top-level modules (files
/// or folders of `src/`) of one layer.
const LAYERS: &[&[&str]] = &[
    // leaves: error text, the data directory's lock, PostgreSQL tables,
    // logs and spans, `process_*` metrics
    &[
        "causes",
        "data_lock",
        "datastore",
        "telemetry",
        "process_metrics",
    ],
    // registry credentials and clients; cluster access (resolver, caches,
    // `ClusterAccess`), which knows nothing of plugins
    &["oci", "cluster"],
    // the plugin runtime: manifest, engine, sandboxed calls, imports
    &["plugin"],
    // what runs plugins: the controller engine, the node agent, the
    // built-in plugin set, the host's health checks
    &["controller", "node", "builtins", "health"],
    // the status page over controllers, pods and plugins
    &["status_page"],
    // the process endpoints (metrics, health, status page)
    &["endpoints"],
    // the command line, which builds and wires everything
    &["cli"],
];

fn layer_of(unit: &str) -> Option<usize> {
    LAYERS.iter().position(|l| l.contains(&unit))
}

/// `src/node/kubelet/mod.rs` → `["node", "kubelet"]`; `src/lib.rs` → `[]`.
fn module_path(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).unwrap();
    let mut parts: Vec<String> = rel
        .iter()
        .map(|c| c.to_string_lossy().trim_end_matches(".rs").to_string())
        .collect();
    if matches!(parts.last().map(String::as_str), Some("mod" | "lib")) {
        parts.pop();
    }
    parts
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The source without its test module (`#[cfg(test)]` then `mod`) and
/// without line comments.
fn code(text: &str) -> Vec<(usize, String)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        if line.trim() == "#[cfg(test)]"
            && lines
                .get(i + 1)
                .is_some_and(|n| n.trim_start().starts_with("mod ") && n.ends_with('{'))
        {
            break;
        }
        let code = match line.find("//") {
            Some(c) => &line[..c],
            None => line,
        };
        out.push((i + 1, code.to_string()));
    }
    out
}

fn ident_at(s: &str) -> &str {
    let end = s
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    &s[..end]
}

/// The first segments a path at `rest` (just after `crate::` or the
/// `super::`s) names: one, or each of a `{a, b::c}` group's.
fn first_segments(rest: &str) -> Vec<String> {
    if let Some(group) = rest.strip_prefix('{') {
        let mut depth = 0;
        let mut names = vec![];
        let mut start = true;
        for (i, c) in group.char_indices() {
            match c {
                '{' => depth += 1,
                '}' if depth == 0 => break,
                '}' => depth -= 1,
                ',' if depth == 0 => start = true,
                c if start && !c.is_whitespace() => {
                    names.push(ident_at(&group[i..]).to_string());
                    start = false;
                }
                _ => {}
            }
        }
        names
    } else {
        vec![ident_at(rest).to_string()]
    }
}

/// Every module path one line reaches, made absolute from `me`.
fn targets(me: &[String], line: &str) -> Vec<Vec<String>> {
    let mut out = vec![];
    let mut i = 0;
    while i < line.len() {
        let at = &line[i..];
        let boundary = i == 0 || {
            let prev = line[..i].chars().next_back().unwrap();
            !(prev.is_ascii_alphanumeric() || prev == '_' || prev == ':')
        };
        if boundary && at.starts_with("crate::") {
            for n in first_segments(&at["crate::".len()..]) {
                out.push(vec![n]);
            }
            i += "crate::".len();
        } else if boundary && at.starts_with("super::") {
            let mut ups = 0;
            let mut rest = at;
            while let Some(r) = rest.strip_prefix("super::") {
                ups += 1;
                rest = r;
            }
            let base = &me[..me.len().saturating_sub(ups)];
            for n in first_segments(rest) {
                let mut p = base.to_vec();
                p.push(n);
                out.push(p);
            }
            i += at.len() - rest.len();
        } else {
            i += at.chars().next().unwrap().len_utf8();
        }
    }
    out
}

#[test]
fn imports_run_down_the_layers() {
    // The crate this was built from, unless the environment names another
    // tree (`cargo test` sets it; scripts/run-tests runs the binary bare).
    let root = PathBuf::from(
        std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").into()),
    );
    let src = root.join("src");
    let mut files = vec![];
    rust_files(&src, &mut files);
    files.sort();
    // Every top-level module has a layer.
    let units: BTreeMap<String, ()> = std::fs::read_dir(&src)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir() || p.extension().is_some_and(|x| x == "rs"))
        .map(|p| p.file_stem().unwrap().to_string_lossy().into_owned())
        .filter(|n| n != "lib" && n != "main")
        .map(|n| (n, ()))
        .collect();
    let mut problems: Vec<String> = units
        .keys()
        .filter(|u| layer_of(u).is_none())
        .map(|u| {
            format!("src/{u}: a top-level module in no layer of LAYERS (host/tests/layers.rs)")
        })
        .collect();
    for file in &files {
        let me = module_path(&src, file);
        let name = file.file_stem().unwrap().to_string_lossy();
        // Test-only modules (`datastore/tests.rs`) may reach anywhere.
        if me.is_empty() || name == "tests" || name.ends_with("_tests") {
            continue;
        }
        let from = &me[0];
        let Some(from_layer) = layer_of(from) else {
            continue;
        };
        let text = std::fs::read_to_string(file).unwrap();
        for (n, line) in code(&text) {
            for target in targets(&me, &line) {
                let Some(to) = target.first() else { continue };
                // Items of lib.rs itself are the top, exempt.
                if to == from || !units.contains_key(to) {
                    continue;
                }
                let to_layer = layer_of(to);
                if to_layer.is_none_or(|l| l >= from_layer) {
                    let to_layer = to_layer.map_or("none".to_string(), |l| l.to_string());
                    problems.push(format!(
                        "{}:{n}: `{from}` (layer {from_layer}) imports `{to}` (layer {to_layer}): {}",
                        file.strip_prefix(&root).unwrap().display(),
                        line.trim()
                    ));
                }
            }
        }
    }
    assert!(
        problems.is_empty(),
        "imports must only go to a lower layer (host/tests/layers.rs, bottom first: {LAYERS:?}):\n{}",
        problems.join("\n")
    );
}

#[test]
fn the_parser_reads_groups_and_supers() {
    let me: Vec<String> = vec!["node".into(), "kubelet".into(), "auth".into()];
    assert_eq!(
        targets(&me, "use crate::{oci, plugin::{A, B}};"),
        vec![vec!["oci".to_string()], vec!["plugin".to_string()]]
    );
    assert_eq!(
        targets(&me, "use super::super::pods::PodRunner;"),
        vec![vec!["node".to_string(), "pods".to_string()]]
    );
    assert_eq!(
        targets(&me, "let x = my_crate::f(); k8s::super_::x;"),
        Vec::<Vec<String>>::new()
    );
}
