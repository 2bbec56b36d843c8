//! [`NamedClusters`]: the clusters a host is given besides its own
//! (`wasmlet up|run --cluster NAME=KUBECONFIG`), which global reconcilers
//! address by name through the contract's `clusters` interface. Each is a
//! [`Cluster`] of its own (client, resolver, caches), so a slow or
//! unreachable region never touches another region's reads.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, RwLock};

use super::cache::Caches;
use super::{Cluster, ClusterAccess, Resolver};

/// Why a `--cluster` flag was refused.
#[derive(Debug, thiserror::Error)]
pub(crate) enum NamedClusterError {
    #[error("--cluster {0:?}: expected NAME=KUBECONFIG")]
    Syntax(String),
    #[error(
        "--cluster {flag:?}: cluster name {name:?} must be a DNS label (lowercase letters, digits and '-', at most 63)"
    )]
    Name { flag: String, name: String },
    #[error("--cluster {0:?}: the cluster is named twice")]
    Duplicate(String),
}

/// One `--cluster NAME=KUBECONFIG` flag, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ClusterFlag {
    pub(crate) name: String,
    pub(crate) kubeconfig: std::path::PathBuf,
}

/// Whether `name` is usable as a cluster name: a DNS label, the form region
/// names already have, and one that never clashes with the manifest's `*`.
pub(crate) fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-')
}

impl ClusterFlag {
    pub(crate) fn parse(flag: &str) -> Result<ClusterFlag, NamedClusterError> {
        let (name, path) = flag
            .split_once('=')
            .filter(|(_, p)| !p.is_empty())
            .ok_or_else(|| NamedClusterError::Syntax(flag.to_string()))?;
        if !valid_name(name) {
            return Err(NamedClusterError::Name {
                flag: flag.to_string(),
                name: name.to_string(),
            });
        }
        Ok(ClusterFlag {
            name: name.to_string(),
            kubeconfig: path.into(),
        })
    }

    /// Every flag parsed, each name once.
    pub(crate) fn parse_all(flags: &[String]) -> Result<Vec<ClusterFlag>, NamedClusterError> {
        let mut out: Vec<ClusterFlag> = Vec::new();
        for f in flags {
            let c = ClusterFlag::parse(f)?;
            if out.iter().any(|o| o.name == c.name) {
                return Err(NamedClusterError::Duplicate(f.clone()));
            }
            out.push(c);
        }
        Ok(out)
    }
}

/// The host's named clusters. Empty on a host given none (and in replays).
/// Every clone shares one registry, so a cluster added or removed while the
/// host runs (`--clusters-dir`) is seen by every plugin version at its next
/// call, not at its next load.
#[derive(Default, Clone)]
pub struct NamedClusters {
    clusters: Arc<RwLock<BTreeMap<String, Named>>>,
    /// Passed every access on the way out (a shadow candidate's: read-only).
    wrap: Option<Wrap>,
}

type Wrap = Arc<dyn Fn(Arc<dyn ClusterAccess>) -> Arc<dyn ClusterAccess> + Send + Sync>;

/// One named cluster.
#[derive(Clone)]
struct Named {
    access: Arc<dyn ClusterAccess>,
    /// A real cluster's caches: what controllers watch there, and the client
    /// the host applies a plugin's CRDs with (`None`: a bare [`ClusterAccess`]).
    caches: Option<Arc<Caches>>,
    /// What its supervisor last found (shared by every copy of the set).
    health: Arc<Mutex<ClusterHealth>>,
    /// Which client this is: a cluster given again (its kubeconfig changed)
    /// gets a new one, and the old one's supervisor stops.
    generation: u64,
}

impl Named {
    /// A cluster of its own: resolver and caches whose watches start on a
    /// kind's first read.
    fn of(client: kube::Client, generation: u64) -> Named {
        let resolver = Arc::new(Resolver::new(client));
        let caches = Caches::new(resolver.clone());
        let cluster = Cluster::new(resolver, Some(caches.clone())).with_lazy_watches();
        Named {
            access: Arc::new(cluster),
            caches: Some(caches),
            health: Arc::default(),
            generation,
        }
    }
}

/// Generations of [`Named`] clients, unique in the process.
static GENERATION: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

fn next_generation() -> u64 {
    GENERATION.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// What the host last found in a named cluster: whether it answers, since
/// when it does not, and whether the CRDs its plugins ship there are in it.
/// The status page and `wasmlet status` show it (`plugin/set/heal.rs` keeps it).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ClusterHealth {
    /// The last check reached the cluster.
    pub(crate) connected: bool,
    /// When checks started failing (RFC 3339); `None` while it answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) unreachable_since: Option<String>,
    /// Why the last check failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) last_error: Option<String>,
    /// CRDs the loaded plugins ship to this cluster, and how many of them
    /// the last check found there.
    pub(crate) crds_wanted: usize,
    pub(crate) crds_present: usize,
    /// Times the host applied CRDs that were missing (the cluster came
    /// back empty, was rebuilt, or someone deleted one).
    pub(crate) crds_reapplied: u64,
    /// Kinds whose cache runs here because a loaded plugin's rules let it
    /// read them (started with the plugin, not on its first read).
    #[serde(default)]
    pub(crate) informers: usize,
    /// When the last check ran (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) checked_at: Option<String>,
}

impl ClusterHealth {
    /// A check that reached the cluster.
    pub(crate) fn reached(&mut self, wanted: usize, present: usize, reapplied: u64) {
        self.connected = true;
        self.unreachable_since = None;
        self.last_error = None;
        self.crds_wanted = wanted;
        self.crds_present = present;
        self.crds_reapplied += reapplied;
        self.checked_at = Some(wasmlet_apimachinery::time::now_rfc3339());
    }

    /// A check that did not.
    pub(crate) fn unreachable(&mut self, error: String) {
        let now = wasmlet_apimachinery::time::now_rfc3339();
        if self.connected || self.unreachable_since.is_none() {
            self.unreachable_since = Some(now.clone());
        }
        self.connected = false;
        self.last_error = Some(error);
        self.checked_at = Some(now);
    }
}

impl std::fmt::Debug for NamedClusters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.names()).finish()
    }
}

impl NamedClusters {
    /// A cluster per `(name, client)`, each with its own resolver and caches
    /// whose watches start on a kind's first read.
    pub fn new(clients: impl IntoIterator<Item = (String, kube::Client)>) -> NamedClusters {
        let clusters = clients
            .into_iter()
            .map(|(name, client)| (name, Named::of(client, next_generation())))
            .collect();
        NamedClusters {
            clusters: Arc::new(RwLock::new(clusters)),
            wrap: None,
        }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, BTreeMap<String, Named>> {
        self.clusters.read().unwrap_or_else(|p| p.into_inner())
    }

    /// Adds cluster `name`, or gives it a new client (its kubeconfig
    /// changed): its generation, for [`NamedClusters::generation`].
    pub(crate) fn insert(&self, name: &str, client: kube::Client) -> u64 {
        let generation = next_generation();
        let mut map = self.clusters.write().unwrap_or_else(|p| p.into_inner());
        map.insert(name.to_string(), Named::of(client, generation));
        generation
    }

    /// Removes cluster `name`: calls there fail as for a cluster never
    /// given. Whether it was there.
    pub(crate) fn remove(&self, name: &str) -> bool {
        let mut map = self.clusters.write().unwrap_or_else(|p| p.into_inner());
        map.remove(name).is_some()
    }

    /// Which client cluster `name` has now (`None`: not there).
    pub(crate) fn generation(&self, name: &str) -> Option<u64> {
        Some(self.read().get(name)?.generation)
    }

    pub fn get(&self, name: &str) -> Option<Arc<dyn ClusterAccess>> {
        let access = self.read().get(name)?.access.clone();
        Some(match &self.wrap {
            Some(wrap) => wrap(access),
            None => access,
        })
    }

    /// The caches of cluster `name` (`None` for one served by a bare
    /// [`ClusterAccess`]): its watches, and its client.
    pub(crate) fn caches(&self, name: &str) -> Option<Arc<Caches>> {
        self.read().get(name)?.caches.clone()
    }

    /// The clusters' names now.
    pub(crate) fn names(&self) -> Vec<String> {
        self.read().keys().cloned().collect()
    }

    /// Where cluster `name`'s supervisor writes what it finds.
    pub(crate) fn health(&self, name: &str) -> Option<Arc<Mutex<ClusterHealth>>> {
        Some(self.read().get(name)?.health.clone())
    }

    /// Every cluster's health, by name.
    pub(crate) fn report(&self) -> BTreeMap<String, ClusterHealth> {
        self.read()
            .iter()
            .map(|(n, c)| {
                let h = c.health.lock().unwrap_or_else(|p| p.into_inner()).clone();
                (n.clone(), h)
            })
            .collect()
    }

    /// The same clusters (the same registry) with every access passed
    /// through `wrap` (a shadow candidate's are read-only; the caches, which
    /// only the host uses, stay).
    pub(crate) fn map(
        &self,
        wrap: impl Fn(Arc<dyn ClusterAccess>) -> Arc<dyn ClusterAccess> + Send + Sync + 'static,
    ) -> Self {
        let inner = self.wrap.clone();
        let wrap: Wrap = Arc::new(move |a| match &inner {
            Some(first) => wrap(first(a)),
            None => wrap(a),
        });
        NamedClusters {
            clusters: self.clusters.clone(),
            wrap: Some(wrap),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unreachable_since_is_the_first_failure_and_a_reach_clears_it() {
        let mut h = ClusterHealth::default();
        h.unreachable("connection refused".into());
        let since = h.unreachable_since.clone().unwrap();
        h.unreachable_since = Some("2020-01-01T00:00:00Z".into());
        h.unreachable("still refused".into());
        assert_eq!(h.unreachable_since.as_deref(), Some("2020-01-01T00:00:00Z"));
        assert_eq!(h.last_error.as_deref(), Some("still refused"));
        assert!(!since.is_empty() && !h.connected);
        h.reached(2, 2, 1);
        h.reached(2, 2, 0);
        assert!(h.connected && h.unreachable_since.is_none() && h.last_error.is_none());
        assert_eq!((h.crds_wanted, h.crds_present, h.crds_reapplied), (2, 2, 1));
        h.unreachable("gone again".into());
        assert_ne!(h.unreachable_since.as_deref(), Some("2020-01-01T00:00:00Z"));
    }

    #[test]
    fn flags_name_a_dns_label_and_a_kubeconfig() {
        let c = ClusterFlag::parse("eu-west=/etc/kc/eu.yaml").unwrap();
        assert_eq!(c.name, "eu-west");
        assert_eq!(c.kubeconfig, std::path::Path::new("/etc/kc/eu.yaml"));
        for bad in ["eu-west", "=x", "eu-west=", "EU=x", "*=x", "-a=x", "a b=x"] {
            let e = ClusterFlag::parse(bad).unwrap_err();
            assert!(e.to_string().contains(&format!("{bad:?}")), "{bad}: {e}");
        }
        let e = ClusterFlag::parse_all(&["a=1".into(), "b=2".into(), "a=3".into()]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "--cluster \"a=3\": the cluster is named twice"
        );
    }
}
