//! `wasmlet plugin shadow | shadow-report | promote | abandon`: a candidate
//! version judged on live traffic (see `crate::plugin::shadow`). The plugin
//! directory is the interface, as for every other change of a running host:
//! these commands only place, rename or remove `NAME.shadow.wasm`, and the
//! host's directory watch does the rest. The report comes from the host's
//! endpoints (`GET /shadow/NAME`).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

use crate::plugin::set::shadows::candidate_path;
use crate::plugin::shadow::{Report, ShadowResult};

#[derive(Debug, clap::Args)]
pub(super) struct PluginsDir {
    /// The running host's plugin directory (its --plugins).
    #[arg(long = "plugins", value_name = "DIR")]
    pub(crate) plugins: PathBuf,
}

/// The live plugin's manifest, which the candidate runs under; an error
/// names what is missing.
fn live_manifest(name: &str, dir: &PluginsDir) -> Result<PathBuf> {
    let toml = dir.plugins.join(format!("{name}.toml"));
    let wasm = dir.plugins.join(format!("{name}.wasm"));
    if !toml.exists() || !wasm.exists() {
        bail!(
            "{}: no live plugin {name} ({name}.wasm and {name}.toml) to shadow",
            dir.plugins.display()
        );
    }
    Ok(toml)
}

/// Writes `bytes` to `to` through a hidden temporary file and a rename, so
/// the host's scan never sees half a file.
fn place(bytes: &[u8], to: &Path) -> Result<()> {
    let dir = to.parent().unwrap_or(Path::new("."));
    let tmp = dir.join(format!(
        ".{}.tmp",
        to.file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("candidate")
    ));
    std::fs::write(&tmp, bytes).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, to).with_context(|| format!("renaming to {}", to.display()))
}

pub(super) fn start(name: &str, candidate: &Path, dir: &PluginsDir) -> Result<()> {
    live_manifest(name, dir)?;
    let bytes = std::fs::read(candidate)
        .with_context(|| format!("reading the candidate {}", candidate.display()))?;
    let to = candidate_path(&dir.plugins, name);
    place(&bytes, &to)?;
    println!(
        "{}: the host starts it as {name}'s shadow candidate at its next scan; see `wasmlet plugin shadow-report {name}`",
        to.display()
    );
    Ok(())
}

pub(super) fn promote(name: &str, dir: &PluginsDir) -> Result<()> {
    live_manifest(name, dir)?;
    let from = candidate_path(&dir.plugins, name);
    if !from.exists() {
        bail!(
            "{}: no shadow candidate of {name} to promote",
            from.display()
        );
    }
    let to = dir.plugins.join(format!("{name}.wasm"));
    std::fs::rename(&from, &to)
        .with_context(|| format!("renaming {} to {}", from.display(), to.display()))?;
    println!(
        "{}: the candidate is now {name}'s live version (the host swaps it in at its next scan; `rollback` keeps the previous one)",
        to.display()
    );
    Ok(())
}

pub(super) fn abandon(name: &str, dir: &PluginsDir) -> Result<()> {
    let path = candidate_path(&dir.plugins, name);
    match std::fs::remove_file(&path) {
        Ok(()) => {
            println!("{}: removed; the host stops the candidate", path.display());
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            bail!("{}: no shadow candidate of {name}", path.display())
        }
        Err(e) => Err(e).with_context(|| format!("removing {}", path.display())),
    }
}

pub(super) async fn report(name: &str, host: &str, token: Option<&str>, json: bool) -> Result<()> {
    let url = format!("http://{host}/shadow/{name}");
    // reqwest is built without a TLS provider of its own (plain HTTP here).
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut request = reqwest::Client::new().get(&url);
    // Callers not on 127.0.0.1/::1 need a token allowed to get the path.
    if let Some(t) = token {
        request = request.bearer_auth(t);
    }
    let response = request
        .send()
        .await
        .with_context(|| format!("{url}: is the host running with --metrics-addr {host}?"))?;
    if !response.status().is_success() {
        let status = response.status();
        bail!(
            "{url}: {status}: {}",
            response.text().await.unwrap_or_default().trim()
        );
    }
    let report: Report = response
        .json()
        .await
        .with_context(|| format!("{url}: not a shadow report"))?;
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }
    match &report.candidate {
        Some(d) => println!("{name}: shadow candidate {d}"),
        None => println!("{name}: no shadow candidate running"),
    }
    println!(
        "calls: {} same, {} different, {} error, {} skipped (since the host started)",
        report.same, report.different, report.error, report.skipped
    );
    for d in &report.differences {
        let what = match d.result {
            ShadowResult::Error => "error",
            _ => "different",
        };
        println!("{} {:?} {} {what}", d.at, d.call, d.key);
        for c in &d.changes {
            println!("  {}: live {} candidate {}", c.path, c.live, c.candidate);
        }
        if let Some(a) = &d.asked {
            println!(
                "  asked for {} {} (held back: the live version did not)",
                a.op, a.args
            );
        }
    }
    Ok(())
}
