//! The import check a crate's tests run over its own sources: the top-level
//! modules (files and folders of `src/`) form layers, bottom first, and an
//! import (a `crate::`/`super::` path in a source file, outside its test
//! module and comments) may only go down. Two modules of one layer may not
//! import each other either, so no import circle can form across them.
//!
//! ```no_run
//! // tests/layers.rs of a crate
//! const LAYERS: &[&[&str]] = &[&["store"], &["rest"]];
//! let root = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"));
//! let problems = wasmlet_layers::check(&root, LAYERS, &["lib"]);
//! assert!(problems.is_empty(), "{}", problems.join("\n"));
//! ```
//!
//! A textual reader, not a compiler: it sees `crate::` and `super::` paths
//! wherever they are written (a `use`, an expression, a doc link), which is
//! what a layer rule is about. The API server's and the host's
//! `tests/layers.rs` use it.
#![allow(clippy::unwrap_used)] // read by tests: a failure should stop them loudly

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// What breaks the layers of the crate at `root` (its `src/`): a top-level
/// module in no layer, or an import that does not go down. `top` names the
/// files that are the top and exempt (`lib`, `main`).
pub fn check(root: &Path, layers: &[&[&str]], top: &[&str]) -> Vec<String> {
    let layer_of = |unit: &str| layers.iter().position(|l| l.contains(&unit));
    let src = root.join("src");
    let mut files = vec![];
    rust_files(&src, &mut files);
    files.sort();
    let units: BTreeSet<String> = std::fs::read_dir(&src)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir() || p.extension().is_some_and(|x| x == "rs"))
        .map(|p| p.file_stem().unwrap().to_string_lossy().into_owned())
        .filter(|n| !top.contains(&n.as_str()))
        .collect();
    let mut problems: Vec<String> = units
        .iter()
        .filter(|u| layer_of(u).is_none())
        .map(|u| format!("src/{u}: a top-level module in no layer (tests/layers.rs)"))
        .collect();
    for file in &files {
        let me = module_path(&src, file);
        let name = file.file_stem().unwrap().to_string_lossy();
        // Test-only modules (`codec/tests.rs`, `codec/http_tests.rs`) may reach anywhere.
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
                // Items of the crate root are the top, exempt.
                if to == from || !units.contains(to) {
                    continue;
                }
                let to_layer = layer_of(to);
                if to_layer.is_none_or(|l| l >= from_layer) {
                    let to_layer = to_layer.map_or("none".to_string(), |l| l.to_string());
                    problems.push(format!(
                        "{}:{n}: `{from}` (layer {from_layer}) imports `{to}` (layer {to_layer}): {}",
                        file.strip_prefix(root).unwrap().display(),
                        line.trim()
                    ));
                }
            }
        }
    }
    problems
}

/// `src/auth/rbac/mod.rs` → `["auth", "rbac"]`; `src/lib.rs` → `[]`.
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_parser_reads_groups_and_supers() {
        let me: Vec<String> = vec!["auth".into(), "rbac".into(), "escalation".into()];
        assert_eq!(
            targets(&me, "use crate::{meta, registry::{A, B}};"),
            vec![vec!["meta".to_string()], vec!["registry".to_string()]]
        );
        assert_eq!(
            targets(&me, "use super::super::resources::Resources;"),
            vec![vec!["auth".to_string(), "resources".to_string()]]
        );
        assert_eq!(
            targets(&me, "let x = my_crate::f(); k8s::super_::x;"),
            Vec::<Vec<String>>::new()
        );
    }
}
