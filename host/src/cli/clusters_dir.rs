//! `--clusters-dir DIR`: named clusters added, changed and removed while the
//! host runs. Each file in DIR named for a cluster (a DNS label, no
//! extension) is that cluster's kubeconfig: a Secret with a key per cluster
//! mounted as a volume is such a directory as it is (its `..data` links and
//! hidden entries are skipped). DIR is read again every [`POLL`]: a new file
//! adds its cluster, a changed one gives it a new client (a rebuilt cluster's
//! new credentials), a removed one removes it.
//!
//! Polled rather than watched with inotify: a mounted Secret changes by an
//! atomic swap of a symlink, which a poll of the contents sees whatever the
//! filesystem reports.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};
use std::time::Duration;

use crate::cluster::NamedClusters;
use crate::cluster::metrics::ClusterMetrics;
use crate::cluster::named::valid_name;
use crate::plugin::PluginSet;

/// Between two reads of the directory.
const POLL: Duration = Duration::from_secs(2);

/// The clusters DIR holds now: name → (file, contents).
fn scan(dir: &Path, fixed: &BTreeSet<String>) -> BTreeMap<String, (PathBuf, Vec<u8>)> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return BTreeMap::new();
    };
    entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_str()?.to_string();
            if !valid_name(&name) || fixed.contains(&name) {
                return None;
            }
            // `metadata` follows symlinks (a mounted Secret's keys are links).
            let path = e.path();
            std::fs::metadata(&path).ok().filter(|m| m.is_file())?;
            let bytes = std::fs::read(&path).ok()?;
            Some((name, (path, bytes)))
        })
        .collect()
}

/// A client for the kubeconfig `path`, counting its requests as cluster `name`'s.
async fn client(path: &Path, name: &str, counted: &ClusterMetrics) -> anyhow::Result<kube::Client> {
    let config = super::host::config_from(Some(path)).await?;
    Ok(kube::client::ClientBuilder::try_from(config)?
        .with_layer(&counted.layer(name))
        .build())
}

/// What DIR held at the last read: name → contents.
pub(super) struct ClustersDir {
    dir: PathBuf,
    /// The `--cluster` flags' names: a file of the same name is ignored.
    fixed: BTreeSet<String>,
    counted: ClusterMetrics,
    known: BTreeMap<String, Vec<u8>>,
}

impl ClustersDir {
    pub(super) fn new(dir: PathBuf, named: &NamedClusters, counted: ClusterMetrics) -> Self {
        ClustersDir {
            dir,
            fixed: named.names().into_iter().collect(),
            counted,
            known: BTreeMap::new(),
        }
    }

    /// The first read, before any plugin loads: the clusters go straight
    /// into `named`.
    pub(super) async fn load(&mut self, named: &NamedClusters) {
        for (name, (path, bytes)) in scan(&self.dir, &self.fixed) {
            if let Some(c) = self.client_for(&name, &path).await {
                named.insert(&name, c);
            }
            self.known.insert(name, bytes);
        }
    }

    /// Follows DIR until the plugin set is gone.
    pub(super) async fn follow(mut self, set: Weak<PluginSet>) {
        loop {
            tokio::time::sleep(POLL).await;
            let Some(set) = set.upgrade() else { return };
            self.once(&set).await;
        }
    }

    async fn once(&mut self, set: &Arc<PluginSet>) {
        let now = scan(&self.dir, &self.fixed);
        for (name, (path, bytes)) in &now {
            if self.known.get(name) == Some(bytes) {
                continue;
            }
            // A file that does not make a client is warned about once per
            // content; the cluster's previous client (if any) stays.
            if let Some(c) = self.client_for(name, path).await {
                let what = if self.known.contains_key(name) {
                    "changed"
                } else {
                    "added"
                };
                tracing::info!(cluster = %name, file = %path.display(), "named cluster {what}");
                set.add_cluster(name, c);
            }
            self.known.insert(name.clone(), bytes.clone());
        }
        let gone: Vec<String> = self
            .known
            .keys()
            .filter(|n| !now.contains_key(*n))
            .cloned()
            .collect();
        for name in gone {
            self.known.remove(&name);
            if set.remove_cluster(&name) {
                tracing::info!(cluster = %name, "named cluster removed (its file is gone)");
            }
        }
    }

    async fn client_for(&self, name: &str, path: &Path) -> Option<kube::Client> {
        match client(path, name, &self.counted).await {
            Ok(c) => Some(c),
            Err(e) => {
                tracing::warn!(cluster = %name, file = %path.display(), error = format!("{e:#}"), "not a usable kubeconfig; cluster not added");
                None
            }
        }
    }
}
