//! `wasmlet replay RECORDS...`: runs recorded calls again, with no cluster
//! (and, for a provider's, no workload), every import answered from the
//! record, and says per call whether the outcome is the same.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use sha2::{Digest, Sha256};

use crate::plugin::Loaded;
use crate::plugin::engine::PluginEngine;
use crate::plugin::manifest::Manifest;
use crate::plugin::record::replay::{Recorded, Verdict, judge, read_file};
use crate::plugin::sandbox::PluginCtx;

#[derive(clap::Args)]
pub(super) struct ReplayArgs {
    /// Record files (`DATA_DIR/records/NAME.jsonl`, and rotated `NAME.jsonl.N`).
    #[arg(required = true)]
    pub(crate) records: Vec<PathBuf>,
    /// The component to run (default: each record's own version, found by its
    /// digest among the `.wasm` files of DATA_DIR/plugins beside the records
    /// and of `--plugins`). Its manifest is NAME.toml beside it, else the record's.
    #[arg(long)]
    pub(crate) plugin: Option<PathBuf>,
    /// More directories to look for recorded versions in.
    #[arg(long = "plugins", value_name = "DIR")]
    pub(crate) plugin_dirs: Vec<PathBuf>,
    /// Only calls for this key (NAMESPACE/NAME, or NAME for cluster-scoped kinds).
    #[arg(long)]
    pub(crate) key: Option<String>,
    /// Only the Nth call (1-based, counted over the files in the order given).
    #[arg(long)]
    pub(crate) call: Option<usize>,
}

/// `DATA_DIR` when `records` lies in `DATA_DIR/records/`.
fn data_dir_of(records: &Path) -> Option<PathBuf> {
    let dir = std::path::absolute(records).ok()?.parent()?.to_path_buf();
    (dir.file_name()? == "records").then(|| dir.parent().map(Path::to_path_buf))?
}

/// `.wasm` files in `dir` and its subdirectories (two levels: plugins/, plugins/builtin, plugins/oci/...).
fn wasm_files(dir: &Path, depth: u32, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() && depth > 0 {
            wasm_files(&p, depth - 1, out);
        } else if p.extension().is_some_and(|x| x == "wasm") {
            out.push(p);
        }
    }
}

fn sha256_file(p: &Path) -> Option<String> {
    Some(hex::encode(Sha256::digest(std::fs::read(p).ok()?)))
}

pub(super) async fn replay(args: ReplayArgs) -> Result<()> {
    let mut calls: Vec<Recorded> = Vec::new();
    for f in &args.records {
        calls.extend(read_file(f)?);
    }
    let total = calls.len();
    let selected: Vec<(usize, Recorded)> = calls
        .into_iter()
        .enumerate()
        .map(|(i, c)| (i + 1, c))
        .filter(|(n, c)| {
            args.call.is_none_or(|want| want == *n)
                && args.key.as_deref().is_none_or(|k| k == c.record.key)
        })
        .collect();
    if selected.is_empty() {
        bail!("no recorded call matches (the files hold {total})");
    }
    let data_dir = args.records.iter().find_map(|r| data_dir_of(r));
    let mut search = args.plugin_dirs.clone();
    if let Some(d) = &data_dir {
        search.push(d.join("plugins"));
    }
    // The compiled-component cache of the recording host, when the records
    // are in its data directory (a debug build compiles for seconds).
    let scratch = tempfile::tempdir()?;
    let cache = data_dir
        .as_ref()
        .map(|d| d.join("cache").join("components"))
        .filter(|d| d.is_dir())
        .unwrap_or_else(|| scratch.path().to_path_buf());
    let engine = PluginEngine::new(&cache)?;

    let mut by_digest: BTreeMap<String, PathBuf> = BTreeMap::new();
    let mut loaded: BTreeMap<(PathBuf, String), Arc<Loaded>> = BTreeMap::new();
    let (mut same, mut different, mut diverged) = (0, 0, 0);
    for (n, c) in &selected {
        let wasm = match &args.plugin {
            Some(p) => p.clone(),
            None => match by_digest.get(&c.record.digest) {
                Some(p) => p.clone(),
                None => {
                    let mut files = Vec::new();
                    for d in &search {
                        wasm_files(d, 2, &mut files);
                    }
                    let found = files
                        .into_iter()
                        .find(|f| sha256_file(f).as_deref() == Some(c.record.digest.as_str()))
                        .with_context(|| {
                            format!(
                                "{}:{}: no component with the recorded digest {} in {}; pass --plugin NAME.wasm (or --plugins DIR)",
                                c.file,
                                c.line,
                                c.record.digest,
                                search
                                    .iter()
                                    .map(|d| d.display().to_string())
                                    .collect::<Vec<_>>()
                                    .join(", ")
                            )
                        })?;
                    by_digest.insert(c.record.digest.clone(), found.clone());
                    found
                }
            },
        };
        let beside = wasm.with_extension("toml");
        let manifest_key = if args.plugin.is_some() && beside.exists() {
            String::new()
        } else {
            c.header.manifest.clone()
        };
        let plugin = match loaded.get(&(wasm.clone(), manifest_key.clone())) {
            Some(l) => l.clone(),
            None => {
                let manifest = if manifest_key.is_empty() {
                    Manifest::load(&beside)?
                } else {
                    Manifest::parse_detached(
                        &c.header.manifest,
                        &PathBuf::from(format!("{} (header)", c.file)),
                    )?
                };
                let manifest = Arc::new(manifest);
                let ctx = Arc::new(PluginCtx {
                    name: c.header.plugin.clone(),
                    manifest: manifest.clone(),
                    api: None,
                    clusters: Default::default(),
                    metrics: Default::default(),
                    events: None,
                    workloads: None,
                    http: None,
                    recording: None,
                    replay: true,
                    shadow: None,
                });
                let l = Arc::new(Loaded::load(&engine, &wasm, manifest, ctx).await?);
                eprintln!(
                    "replay: {} as {} (sha256 {})",
                    c.header.plugin,
                    wasm.display(),
                    l.digest
                );
                loaded.insert((wasm.clone(), manifest_key), l.clone());
                l
            }
        };
        let (outcome, taped) = crate::plugin::record::replay::replay(&*plugin, &c.record).await;
        // A provider's handle and status calls name their state: `handle Running ns/pod`.
        let export = serde_json::to_value(c.record.call)?;
        let export = match &c.record.state {
            Some(state) => format!("{} {state}", export.as_str().unwrap_or_default()),
            None => export.as_str().unwrap_or_default().to_string(),
        };
        let what = format!("call {n} ({}:{}) {export} {}", c.file, c.line, c.record.key);
        match judge(&c.record, &outcome, &taped) {
            Verdict::Same => {
                same += 1;
                println!("{what}: same");
            }
            Verdict::Different(ds) => {
                different += 1;
                println!("{what}: different");
                for d in ds {
                    println!("    {}: {} -> {}", d.path, d.recorded, d.replayed);
                }
            }
            Verdict::Diverged(asked) => {
                diverged += 1;
                println!(
                    "{what}: diverged: the guest asked {} {}, which the record does not answer",
                    asked.op, asked.args
                );
            }
        }
    }
    println!(
        "replayed {} calls: {same} same, {different} different, {diverged} diverged",
        selected.len()
    );
    if different + diverged > 0 {
        bail!(
            "{} of {} replayed calls differ from their record",
            different + diverged,
            selected.len()
        );
    }
    Ok(())
}
