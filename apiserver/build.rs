#![allow(clippy::unwrap_used)] // a build script: a failure should stop the build loudly
//! Builds the table the apiserver's protobuf codec reads: every message of
//! the `k8s-pb` crate (kube-rs's prost types for the Kubernetes API) with its
//! fields' tags and wire types, taken from the crate's generated source so
//! the field numbers are upstream's and nothing is written out by hand.
//!
//! Output (`$OUT_DIR/k8s_pb_table.txt`), one record a line:
//! `M <message>` then its fields as `F <tag> <rust_name> <type> <rep|opt> [<message>]`,
//! where messages are named by their module path (`api.core.v1.Pod`) and a
//! map's type is `map:<value type>`.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

fn main() {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap());
    let lock = manifest.join("../Cargo.lock");
    println!("cargo:rerun-if-changed={}", lock.display());
    println!("cargo:rerun-if-changed=build.rs");
    let version = k8s_pb_version(&lock);
    let src = locate_source(&manifest, &version)
        .or_else(|| find_source(&version))
        .unwrap_or_else(|| {
            panic!(
                "k8s-pb {version}'s source was found neither by `cargo metadata` nor under \
                 $CARGO_HOME/registry/src; run `cargo fetch` first"
            )
        });
    let mut out = String::new();
    let mut files = Vec::new();
    collect(&src, &mut files);
    files.sort();
    for file in files {
        let rel = file.parent().unwrap().strip_prefix(&src).unwrap();
        let module: Vec<String> = rel
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        let text = std::fs::read_to_string(&file).unwrap();
        table_of(&module, &text, &mut out);
    }
    let dest = PathBuf::from(std::env::var("OUT_DIR").unwrap()).join("k8s_pb_table.txt");
    std::fs::write(dest, out).unwrap();
}

fn k8s_pb_version(lock: &Path) -> String {
    let text = std::fs::read_to_string(lock).expect("Cargo.lock is readable");
    let mut lines = text.lines();
    while let Some(l) = lines.next() {
        if l == "name = \"k8s-pb\"" {
            let v = lines.next().unwrap_or_default();
            return v
                .trim_start_matches("version = \"")
                .trim_end_matches('"')
                .to_string();
        }
    }
    panic!("Cargo.lock has no k8s-pb")
}

/// Where cargo itself has k8s-pb's source: the registry, a vendored
/// directory (`cargo vendor` + `[source]` replacement) or a git checkout, as
/// the workspace's `cargo metadata` says (offline, from the lock file).
fn locate_source(manifest: &Path, version: &str) -> Option<PathBuf> {
    let cargo = std::env::var_os("CARGO")?;
    let out = std::process::Command::new(cargo)
        .args(["metadata", "--format-version", "1", "--offline", "--locked"])
        .arg("--manifest-path")
        .arg(manifest.join("../Cargo.toml"))
        .output()
        .ok()
        .filter(|o| o.status.success())?;
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
    let path = meta["packages"]
        .as_array()?
        .iter()
        .find(|p| p["name"] == "k8s-pb" && p["version"] == version)?["manifest_path"]
        .as_str()?;
    let src = Path::new(path).parent()?.join("src");
    src.join("lib.rs").exists().then_some(src)
}

/// The registry's unpacked sources (when `cargo metadata` cannot run).
fn find_source(version: &str) -> Option<PathBuf> {
    let home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")))?;
    let registries = std::fs::read_dir(home.join("registry/src")).ok()?;
    registries
        .flatten()
        .map(|r| r.path().join(format!("k8s-pb-{version}/src")))
        .find(|p| p.join("lib.rs").exists())
}

fn collect(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let p = entry.path();
        if p.is_dir() {
            collect(&p, out);
        } else if p.file_name().is_some_and(|n| n == "mod.rs") {
            out.push(p);
        }
    }
}

/// The structs of one generated module: prost's output is rustfmt'd, one
/// `#[prost(...)]` line per field followed by its `pub name: Type,` (which
/// may wrap over lines).
fn table_of(module: &[String], text: &str, out: &mut String) {
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect();
    let mut i = 0;
    let mut in_struct = false;
    while i < lines.len() {
        let line = lines[i];
        if let Some(rest) = line.strip_prefix("pub struct ") {
            let name = rest.split([' ', '{']).next().unwrap();
            writeln!(out, "M {}.{name}", module.join(".")).unwrap();
            in_struct = true;
        } else if line == "}" {
            in_struct = false;
        } else if in_struct && let Some(attr) = line.trim().strip_prefix("#[prost(") {
            let attr = attr.trim_end_matches(")]");
            // The field declaration, joined until its closing comma.
            let mut decl = String::new();
            i += 1;
            while i < lines.len() {
                decl.push_str(lines[i].trim());
                if lines[i].trim_end().ends_with(',') && depth(&decl) == 0 {
                    break;
                }
                i += 1;
            }
            field(module, attr, &decl, out);
        }
        i += 1;
    }
}

fn depth(s: &str) -> i32 {
    s.chars().fold(0, |d, c| match c {
        '<' => d + 1,
        '>' => d - 1,
        _ => d,
    })
}

fn field(module: &[String], attr: &str, decl: &str, out: &mut String) {
    // A map's types hold a comma of their own: read them before splitting.
    let (map, attr) = match attr.strip_prefix("btree_map = \"") {
        Some(rest) => {
            let (types, rest) = rest.split_once('"').unwrap();
            (Some(types), rest.trim_start_matches(", "))
        }
        None => (None, attr),
    };
    let parts: Vec<&str> = attr.split(", ").collect();
    let tag = parts
        .iter()
        .find_map(|p| p.strip_prefix("tag = \""))
        .map(|t| t.trim_end_matches('"'))
        .expect("every prost field has a tag");
    let (name, ty) = decl
        .trim_start_matches("pub ")
        .trim_end_matches(',')
        .split_once(':')
        .unwrap();
    let name = name.trim().trim_start_matches("r#");
    let repeated = if parts.contains(&"repeated") {
        "rep"
    } else {
        "opt"
    };
    let (kind, target) = if let Some(map) = map {
        let value = map.split(", ").nth(1).unwrap();
        if value == "message" {
            ("map:message".to_string(), Some(resolve(module, ty)))
        } else {
            (format!("map:{value}"), None)
        }
    } else if parts[0] == "message" {
        ("message".to_string(), Some(resolve(module, ty)))
    } else {
        (parts[0].split(' ').next().unwrap().to_string(), None)
    };
    write!(out, "F {tag} {name} {kind} {repeated}").unwrap();
    if let Some(t) = target {
        write!(out, " {t}").unwrap();
    }
    out.push('\n');
}

/// The message a field's Rust type names, as a full module path: the
/// innermost type argument, with `super::` resolved against `module`.
fn resolve(module: &[String], ty: &str) -> String {
    let ty: String = ty.chars().filter(|c| !c.is_whitespace()).collect();
    let ty = ty.replace(",>", ">");
    let inner = ty.trim_end_matches('>');
    let inner = inner.rsplit(['<', ',']).next().unwrap();
    let segs: Vec<&str> = inner.split("::").collect();
    let ups = segs.iter().take_while(|s| **s == "super").count();
    let mut path: Vec<String> = module[..module.len() - ups].to_vec();
    let rest = &segs[ups..];
    let rest = if rest.first() == Some(&"crate") {
        path.clear();
        &rest[1..]
    } else {
        rest
    };
    path.extend(rest.iter().map(|s| s.to_string()));
    path.join(".")
}
