//! The plugin runtime's import rules, checked over the source: the live call
//! (`loaded`, and the store it runs in, `sandbox`) knows recording and
//! shadowing only through the observer interface (`observe`), and they know
//! the live call only through it too, so that imports run one way:
//! `loaded` → `observe` ← `record`, `shadow`, with the call's outcome types
//! (`outcome`) and the tape (`tape`) below all of them.
//!
//! The check reads each file's `crate::plugin::NAME` and `super::NAME` paths
//! (in `use` lines and in code, `super` resolved from the file's place) up to
//! its `#[cfg(test)]` module, and names the file and the path of any import
//! a rule forbids.

use std::path::{Path, PathBuf};

/// `(module, modules it must not import)`.
const RULES: &[(&str, &[&str])] = &[
    ("loaded", &["record", "shadow"]),
    ("sandbox", &["loaded", "record", "shadow"]),
    ("record", &["loaded", "shadow"]),
    ("shadow", &["loaded"]),
    ("observe", &["loaded", "sandbox", "record", "shadow"]),
    (
        "tape",
        &["loaded", "sandbox", "record", "shadow", "observe"],
    ),
    (
        "outcome",
        &["loaded", "sandbox", "record", "shadow", "observe"],
    ),
];

/// A file of the plugin runtime: its path under `plugin/` and its module path
/// below `plugin` (`["loaded", "call"]` for `loaded/call.rs`).
struct Source {
    path: PathBuf,
    module: Vec<String>,
}

fn sources(dir: &Path, module: &[String], out: &mut Vec<Source>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .expect("plugin sources readable")
        .map(|e| e.expect("directory entry").path())
        .collect();
    entries.sort();
    for path in entries {
        let name = path
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or_default()
            .to_string();
        if path.is_dir() {
            let mut m = module.to_vec();
            m.push(name);
            sources(&path, &m, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let mut m = module.to_vec();
            if name != "mod" {
                m.push(name);
            }
            out.push(Source { path, module: m });
        }
    }
}

/// The top-level plugin modules `line` names, as `(module, the path's text)`:
/// `super` is resolved from `module` (the file's module path below `plugin`),
/// and a group (`super::{a::X, b::Y}`) names each of its members.
fn named(module: &[String], line: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut rest = line;
    while let Some(at) = ["crate::plugin::", "super::"]
        .iter()
        .filter_map(|p| rest.find(p).map(|i| (i, *p)))
        .min()
    {
        let (i, prefix) = at;
        // `crate::plugin::` contains no `super::`; a `super::` preceded by
        // an identifier character is part of a longer word.
        let before = rest[..i].chars().last();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            rest = &rest[i + prefix.len()..];
            continue;
        }
        let start = i;
        let mut path = &rest[i + prefix.len()..];
        // Where the path lands below `plugin`.
        let base: Vec<String> = if prefix == "super::" {
            let mut up = 1;
            while let Some(p) = path.strip_prefix("super::") {
                up += 1;
                path = p;
            }
            module[..module.len().saturating_sub(up)].to_vec()
        } else {
            Vec::new()
        };
        let end = path
            .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':' || c == '{'))
            .unwrap_or(path.len());
        let text = match rest[start..start + prefix.len() + end].split_once('{') {
            Some((head, _)) => format!("{head}{{..}}"),
            None => rest[start..start + prefix.len() + end].to_string(),
        };
        let members: Vec<String> = match path.strip_prefix('{') {
            Some(group) => {
                let close = group.find('}').unwrap_or(group.len());
                let mut depth = 0;
                let mut items = vec![String::new()];
                for c in group[..close].chars() {
                    match c {
                        '{' => depth += 1,
                        '}' => depth -= 1,
                        ',' if depth == 0 => items.push(String::new()),
                        _ => items.last_mut().expect("one item").push(c),
                    }
                }
                items
            }
            None => vec![path[..end].to_string()],
        };
        for m in members {
            let first = m.trim().split("::").next().unwrap_or_default().to_string();
            if first.is_empty() || first == "*" || first == "self" {
                continue;
            }
            let top = base.first().cloned().unwrap_or(first);
            out.push((top, text.clone()));
        }
        rest = &rest[start + prefix.len() + end..];
    }
    out
}

/// Every import a rule forbids, as `file: module imports NAME (path)`.
fn violations(root: &Path) -> Vec<String> {
    let mut files = Vec::new();
    sources(root, &[], &mut files);
    let mut found = Vec::new();
    for f in files {
        let Some(top) = f.module.first() else {
            continue;
        };
        let Some((_, forbidden)) = RULES.iter().find(|(m, _)| m == top) else {
            continue;
        };
        let text = std::fs::read_to_string(&f.path).expect("source readable");
        for (n, line) in text.lines().enumerate() {
            let code = line.trim_start();
            if code.starts_with("#[cfg(test)]") {
                break;
            }
            if code.starts_with("//") {
                continue;
            }
            for (target, path) in named(&f.module, code) {
                if forbidden.contains(&target.as_str()) {
                    found.push(format!(
                        "{}:{}: {top} must not import {target} ({path})",
                        f.path.strip_prefix(root).unwrap_or(&f.path).display(),
                        n + 1
                    ));
                }
            }
        }
    }
    found
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src/plugin")
}

#[test]
fn the_call_path_imports_run_one_way() {
    let found = violations(&root());
    assert!(
        found.is_empty(),
        "imports against the plugin runtime's layers:\n{}",
        found.join("\n")
    );
}

#[test]
fn paths_resolve_from_the_files_place() {
    let m = |s: &[&str]| s.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let tops = |module: &[String], line: &str| {
        named(module, line)
            .into_iter()
            .map(|(t, _)| t)
            .collect::<Vec<_>>()
    };
    assert_eq!(
        tops(&m(&["loaded", "call"]), "use super::{CallError, Loaded};"),
        ["loaded", "loaded"]
    );
    assert_eq!(
        tops(&m(&["loaded"]), "use super::{engine::X, record::{A, B}};"),
        ["engine", "record"]
    );
    assert_eq!(
        tops(
            &m(&["sandbox"]),
            "    super::record::tape::install(&mut wasi, t);"
        ),
        ["record"]
    );
    assert_eq!(
        tops(
            &m(&["record", "tape"]),
            "use crate::plugin::loaded::CallError;"
        ),
        ["loaded"]
    );
    assert_eq!(
        tops(&m(&["record", "tape"]), "use super::super::shadow::X;"),
        ["shadow"]
    );
    assert!(tops(&m(&["shadow"]), "let x = my_super::record;").is_empty());
}

#[test]
fn names_the_file_line_and_path_of_a_forbidden_import() {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::create_dir(dir.path().join("loaded")).expect("mkdir");
    let write = |p: &str, s: &str| std::fs::write(dir.path().join(p), s).expect("write");
    write(
        "loaded/call.rs",
        "//! calls\nuse super::{CallError, Loaded};\nuse crate::plugin::record::{Tape, TapeMode};\n",
    );
    write(
        "shadow.rs",
        "use super::observe::Watcher;\nuse super::loaded::Loaded;\n#[cfg(test)]\nmod tests {\n    use super::super::loaded::X;\n}\n",
    );
    write(
        "set.rs",
        "use super::loaded::Loaded;\nuse super::shadow::ShadowSlot;\n",
    );
    assert_eq!(
        violations(dir.path()),
        [
            "loaded/call.rs:3: loaded must not import record (crate::plugin::record::{..})",
            "shadow.rs:2: shadow must not import loaded (super::loaded::Loaded)",
        ]
    );
}
