//! Plugins that live in OCI registries: `plugins.toml` in the plugin
//! directory names them, and [`RemotePlugins`] pulls each into
//! `DATA_DIR/plugins/oci/`, verifies it and lets the plugin set load it,
//! polling each reference so that a moved tag hot-swaps the plugin.
//!
//! ```toml
//! # PLUGIN_DIR/plugins.toml
//! [[plugin]]
//! source = "oci://registry.example/plugins/configmap-summary:v1"
//! # name = "configmap-summary"   # default: the repository's last segment
//! # insecure = true              # plain HTTP (a local registry)
//! ```
//!
//! Credentials come from the host's docker config file (`DOCKER_CONFIG`, else
//! `~/.docker/config.json`). A plugin file of the same name in the plugin
//! directory wins over a pulled one; a failed pull keeps the version pulled
//! before (the set keeps running it), and is tried again at the next poll.
//! A change to `plugins.toml` itself is synced at once (the directory is
//! watched, as the plugin set watches its `.wasm` files), not at the next poll.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;

use super::distribution::{self, RegistryOptions};
use super::set::PluginSet;
use crate::oci::docker_config_credentials;

/// The list's file name in the plugin directory.
pub(crate) const LIST: &str = "plugins.toml";

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
struct List {
    #[serde(default)]
    plugin: Vec<Entry>,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Entry {
    pub(crate) source: String,
    #[serde(default)]
    pub(crate) name: Option<String>,
    #[serde(default)]
    pub(crate) insecure: bool,
}

impl Entry {
    /// The plugin's name: given, or the repository's last path segment.
    pub(crate) fn name(&self) -> String {
        self.name
            .clone()
            .unwrap_or_else(|| distribution::name_of(&self.source))
    }
}

/// Reads `plugins.toml`: each entry needs an `oci://` source and a name of
/// letters, digits and dashes; errors name the entry and the field.
pub(crate) fn read_list(path: &Path) -> Result<BTreeMap<String, Entry>, String> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(BTreeMap::new()),
        Err(e) => return Err(format!("{}: {e}", path.display())),
    };
    let list: List = toml::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut out = BTreeMap::new();
    for (i, e) in list.plugin.into_iter().enumerate() {
        let field = |f: &str, m: String| format!("{}: plugin[{i}].{f}: {m}", path.display());
        if !e.source.starts_with("oci://") {
            return Err(field(
                "source",
                format!("{:?} must start with oci://", e.source),
            ));
        }
        let name = e.name();
        let valid = !name.is_empty()
            && name.len() <= 63
            && name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
        if !valid {
            return Err(field(
                "name",
                format!("{name:?} is not a plugin name (lowercase letters, digits, '-')"),
            ));
        }
        if out.insert(name.clone(), e).is_some() {
            return Err(field("name", format!("{name:?} is listed twice")));
        }
    }
    Ok(out)
}

/// Keeps `dest` in line with the list in the plugin directory.
pub(crate) struct RemotePlugins {
    pub(crate) list: PathBuf,
    pub(crate) dest: PathBuf,
    pub(crate) set: Arc<PluginSet>,
    pub(crate) interval: Duration,
}

impl RemotePlugins {
    /// Syncs now, then every `interval` and whenever the list changes, forever.
    pub(crate) async fn run(self) {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        // Kept for as long as the loop runs; without it, only the poll.
        let _watcher = self.watch_list(tx);
        loop {
            if self.sync().await {
                self.set.scan().await;
            }
            tokio::select! {
                _ = tokio::time::sleep(self.interval) => {}
                Some(()) = rx.recv() => {
                    // Editors write a file in several steps: wait for quiet.
                    tokio::time::sleep(Duration::from_millis(150)).await;
                    while rx.try_recv().is_ok() {}
                }
            }
        }
    }

    /// Watches the list's directory for changes to the list (created,
    /// written, renamed over, removed); `None`, with a warning, when the
    /// platform's watch fails (the poll still syncs).
    fn watch_list(
        &self,
        changed: tokio::sync::mpsc::UnboundedSender<()>,
    ) -> Option<notify::RecommendedWatcher> {
        use notify::{RecursiveMode, Watcher};
        let dir = self.list.parent()?.to_path_buf();
        let name = self.list.file_name()?.to_owned();
        let watch = || -> notify::Result<notify::RecommendedWatcher> {
            let mut w = notify::recommended_watcher(move |ev: notify::Result<notify::Event>| {
                // Reads (the sync's own) change nothing.
                if let Ok(ev) = ev
                    && !matches!(ev.kind, notify::EventKind::Access(_))
                    && ev
                        .paths
                        .iter()
                        .any(|p| p.file_name() == Some(name.as_os_str()))
                {
                    let _ = changed.send(());
                }
            })?;
            w.watch(&dir, RecursiveMode::NonRecursive)?;
            Ok(w)
        };
        watch()
            .inspect_err(|e| {
                tracing::warn!(list = %self.list.display(), error = %e, "plugin list not watched; its changes wait for the next poll")
            })
            .ok()
    }

    fn digest_file(&self, name: &str) -> PathBuf {
        self.dest.join(format!(".{name}.digest"))
    }

    /// One pass: pulls what moved, removes what is no longer listed. Returns
    /// whether `dest` changed.
    pub(crate) async fn sync(&self) -> bool {
        let entries = match read_list(&self.list) {
            Ok(e) => e,
            Err(e) => {
                // A broken list changes nothing: what runs keeps running.
                tracing::error!(error = %e, "plugin list not read; pulled plugins stay as they are");
                return false;
            }
        };
        if let Err(e) = std::fs::create_dir_all(&self.dest) {
            tracing::error!(dir = %self.dest.display(), error = %e, "cannot create the pulled-plugin directory");
            return false;
        }
        let credentials = docker_config_credentials().unwrap_or_else(|e| {
            tracing::warn!(error = %e, "registry credentials not read; pulling anonymously");
            Vec::new()
        });
        let mut changed = false;
        for (name, entry) in &entries {
            let opts = RegistryOptions {
                insecure: entry.insecure,
                credentials: credentials.clone(),
            };
            let have = std::fs::read_to_string(self.digest_file(name)).unwrap_or_default();
            let now = match distribution::digest(&entry.source, &opts).await {
                Ok(d) => d,
                Err(e) => {
                    tracing::warn!(plugin = %name, error = %e, "plugin source not reachable; keeping the pulled version");
                    continue;
                }
            };
            if now == have.trim() {
                continue;
            }
            match distribution::pull(&entry.source, &opts).await {
                Ok((digest, artifact)) => match artifact.write(&self.dest, name) {
                    Ok(()) => {
                        let _ = std::fs::write(self.digest_file(name), &digest);
                        tracing::info!(plugin = %name, source = %entry.source, %digest, "plugin pulled");
                        changed = true;
                    }
                    Err(e) => {
                        tracing::error!(plugin = %name, error = %e, "pulled plugin not written")
                    }
                },
                Err(e) => {
                    tracing::error!(plugin = %name, error = %e, "plugin pull failed; keeping the pulled version")
                }
            }
        }
        // Unlisted: remove the component and manifest (the set unloads it).
        let pulled: Vec<String> = std::fs::read_dir(&self.dest)
            .map(|rd| {
                rd.filter_map(|e| e.ok())
                    .filter_map(|e| {
                        e.file_name()
                            .to_str()?
                            .strip_suffix(".wasm")
                            .map(String::from)
                    })
                    .collect()
            })
            .unwrap_or_default();
        for name in pulled.into_iter().filter(|n| !entries.contains_key(n)) {
            for f in [
                self.dest.join(format!("{name}.wasm")),
                self.dest.join(format!("{name}.toml")),
                self.digest_file(&name),
            ] {
                let _ = std::fs::remove_file(f);
            }
            tracing::info!(plugin = %name, "plugin no longer listed; removed");
            changed = true;
        }
        changed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(text: &str) -> Result<BTreeMap<String, Entry>, String> {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join(LIST);
        std::fs::write(&p, text).unwrap();
        read_list(&p).map_err(|e| e.replace(&p.display().to_string(), "LIST"))
    }

    #[test]
    fn names_default_to_the_repository() {
        let l = list(
            "[[plugin]]\nsource = \"oci://r.example:5000/team/summary:v1\"\n\n[[plugin]]\nsource = \"oci://r.example/x@sha256:00\"\nname = \"other\"\ninsecure = true\n",
        )
        .unwrap();
        assert_eq!(l.keys().collect::<Vec<_>>(), ["other", "summary"]);
        assert!(l["other"].insecure);
    }

    #[test]
    fn errors_name_the_entry_and_field() {
        assert_eq!(
            list("[[plugin]]\nsource = \"r.example/x:v1\"\n").unwrap_err(),
            "LIST: plugin[0].source: \"r.example/x:v1\" must start with oci://"
        );
        assert_eq!(
            list("[[plugin]]\nsource = \"oci://r/x:1\"\n[[plugin]]\nsource = \"oci://r/y/x:2\"\n")
                .unwrap_err(),
            "LIST: plugin[1].name: \"x\" is listed twice"
        );
        assert!(
            list("[[plugin]]\nsource = \"oci://r/x:1\"\nname = \"../x\"\n")
                .unwrap_err()
                .contains("plugin[0].name")
        );
        assert!(list("[[plugin]]\nsorce = \"oci://r/x:1\"\n").is_err());
    }
}
