//! Shadow candidates in the plugin directory: `NAME.shadow.wasm` beside a
//! live reconciler `NAME.wasm` runs as its candidate under the live manifest
//! (see [`crate::plugin::shadow`]). Dropping the file starts it, replacing it
//! restarts it, removing it stops it; promoting is renaming it to `NAME.wasm`,
//! which the next scan loads as the live version (the hot swap) while the
//! candidate, its file gone, stops.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::{PluginSet, fingerprint};
use crate::cluster::{ClusterAccess, ReadOnly};
use crate::plugin::loaded::{LoadError, Loaded};
use crate::plugin::manifest::{Manifest, PluginKind};
use crate::plugin::metrics::PluginMetrics;
use crate::plugin::sandbox::PluginCtx;
use crate::plugin::shadow::ShadowSlot;

/// What a candidate's file name ends with, before `.wasm`.
pub(super) const SUFFIX: &str = ".shadow";

/// The candidate file of plugin `name` in `dir`.
pub(crate) fn candidate_path(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("{name}{SUFFIX}.wasm"))
}

impl PluginSet {
    /// Where `name`'s shadow candidate runs (made on first use, kept across versions).
    pub fn shadow_slot(&self, name: &str) -> Arc<ShadowSlot> {
        self.shadows
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(name.to_string())
            .or_insert_with(|| ShadowSlot::new(name, self.metrics(name)))
            .clone()
    }

    /// Starts, restarts or stops each live reconciler's candidate as its
    /// directory now has it (`sources`: each plugin's directory).
    pub(super) async fn scan_shadows(&self, sources: &BTreeMap<String, PathBuf>) {
        for (name, dir) in sources {
            let Some(live) = self.get(name) else {
                continue;
            };
            let wasm = candidate_path(dir, name);
            let toml = dir.join(format!("{name}.toml"));
            if !wasm.exists() {
                self.stop_shadow(name);
                continue;
            }
            let Ok(fp) = fingerprint(&wasm, &toml) else {
                continue;
            };
            let slot = self.shadow_slot(name);
            let rejected_as = format!("{name}{SUFFIX}");
            if *slot.fingerprint.lock().unwrap_or_else(|p| p.into_inner()) == fp
                || self
                    .rejected
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .get(&rejected_as)
                    == Some(&fp)
            {
                continue;
            }
            let started = match self.load_candidate(name, &wasm, &toml, &live).await {
                Ok(candidate) => {
                    let digest = candidate.digest.clone();
                    slot.start(candidate, fp.clone())
                        .map(|()| digest)
                        .map_err(|e| e.to_string())
                }
                Err(e) => Err(e.to_string()),
            };
            match started {
                Ok(digest) => {
                    self.rejected
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .remove(&rejected_as);
                    tracing::info!(plugin = %name, %digest, "shadow candidate started: it sees every live call, its writes are held back");
                    self.remember(name.clone(), format!("shadow candidate {digest} started"));
                }
                Err(e) => {
                    tracing::error!(plugin = %name, file = %wasm.display(), error = %e, "shadow candidate rejected");
                    self.rejected
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .insert(rejected_as, fp);
                    self.remember(name.clone(), format!("shadow candidate rejected: {e}"));
                }
            }
        }
    }

    /// Stops `name`'s candidate, if one runs.
    pub(super) fn stop_shadow(&self, name: &str) {
        let slot = self
            .shadows
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
            .cloned();
        if slot.is_some_and(|s| s.stop()) {
            tracing::info!(plugin = %name, "shadow candidate stopped");
            self.remember(name.to_string(), "shadow candidate stopped".into());
        }
    }

    /// Loads a candidate of the live reconciler `live` from `wasm` under the
    /// live manifest `toml`: reads only, no events, no outbound HTTP, no
    /// recording, counters of its own.
    async fn load_candidate(
        &self,
        name: &str,
        wasm: &Path,
        toml: &Path,
        live: &Loaded,
    ) -> Result<Loaded, LoadError> {
        let manifest = Arc::new(Manifest::load(toml)?);
        if live.manifest.plugin.kind != PluginKind::Reconciler {
            return Err(LoadError::Contract {
                path: wasm.display().to_string(),
                message: "shadow mode covers reconcilers only; this plugin is a provider".into(),
            });
        }
        let ctx = Arc::new(PluginCtx {
            name: name.to_string(),
            manifest: manifest.clone(),
            api: self
                .cluster
                .clone()
                .map(|c| Arc::new(ReadOnly(c as Arc<dyn ClusterAccess>)) as Arc<dyn ClusterAccess>),
            clusters: self
                .clusters()
                .map(|c| Arc::new(ReadOnly(c)) as Arc<dyn ClusterAccess>),
            metrics: Arc::new(PluginMetrics::default()),
            events: None,
            workloads: None,
            http: None,
            recording: None,
            replay: true,
            shadow: None,
        });
        Loaded::load(&self.engine, wasm, manifest, ctx).await
    }
}
