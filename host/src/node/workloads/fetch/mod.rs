//! Fetching modules: `file://` paths and OCI registries, into a content-addressed store
//! (`DATA/modules/sha256/<hex>.wasm`), compiled and pre-linked in memory.
//!
//! - `DATA/modules/refs/<sha256 of the reference>` maps a reference (`file:///x.wasm`,
//!   `registry/repo:tag`) to the digest it resolved to, for `IfNotPresent` / `Never`.
//! - Components and core modules are compiled through [`PluginEngine::load`](crate::plugin::engine::PluginEngine::load)
//!   and [`PluginEngine::load_module`](crate::plugin::engine::PluginEngine::load_module): in the
//!   compile child, cached sealed.
//! - A finished fetch's result stays collectable by the same request for
//!   [`RESULT_TTL`], so the provider's "wait on fetch-done, then ask again" returns it
//!   rather than starting another pull (which `Always` would otherwise do forever).
//!
//! - A stored OCI image is another pod's under `IfNotPresent` / `Never` only if the
//!   registry served it to that pod's credentials, or to anyone ([`pulled`]).
//!
//! Split by seam: [`reference`] (parsing images, the reference → digest map),
//! [`file`] (`file://` images), [`oci`] (registry pulls), [`store`] (the store,
//! compiling and linking).

mod file;
mod oci;
mod pulled;
mod reference;
mod store;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use oci_client::Reference;
use sha2::{Digest, Sha256};

use super::{
    FetchError, FetchId, FetchProgress, FetchRequest, Inner, ModuleRef, PullPolicy, PullSecret,
};
pub(crate) use reference::digest_hex;
use reference::{parse_image, sha256_hex};
use store::check_magic;
pub(crate) use store::write_atomic;

/// How long a finished fetch's result is handed to callers repeating the request.
pub(crate) const RESULT_TTL: Duration = Duration::from_secs(10);

#[derive(Debug, Clone)]
enum Source {
    File(PathBuf),
    Oci(Reference),
}

enum Job {
    /// The digest is in the store; compile / link it.
    Stored(String),
    Pull {
        source: Source,
        key: String,
        secrets: Vec<PullSecret>,
    },
}

struct FetchEntry {
    key: String,
    result: Option<(Result<ModuleRef, FetchError>, Instant)>,
}

#[derive(Default)]
pub(crate) struct FetchTable {
    entries: HashMap<FetchId, FetchEntry>,
    by_key: HashMap<String, FetchId>,
}

impl FetchTable {
    fn sweep(&mut self, now: Instant) {
        let expired: Vec<FetchId> = self
            .entries
            .iter()
            .filter(|(_, e)| {
                e.result
                    .as_ref()
                    .is_some_and(|(_, at)| now.duration_since(*at) > RESULT_TTL)
            })
            .map(|(id, _)| *id)
            .collect();
        for id in expired {
            if let Some(e) = self.entries.remove(&id)
                && self.by_key.get(&e.key) == Some(&id)
            {
                self.by_key.remove(&e.key);
            }
        }
    }
}
impl Inner {
    pub(crate) fn fetch_module(
        self: &Arc<Self>,
        req: &FetchRequest,
    ) -> Result<FetchProgress, FetchError> {
        let (source, key) = parse_image(&req.image)?;
        // Before any look-up (the store's references included): the refusal is the
        // same whether or not the file exists.
        if let Source::File(path) = &source {
            self.file_image_dir(path)?;
        }
        let fetch_key = {
            let mut h = Sha256::new();
            h.update(key.as_bytes());
            h.update([req.pull_policy as u8]);
            for s in &req.pull_secrets {
                for part in [&s.registry, &s.username, &s.password] {
                    h.update((part.len() as u64).to_le_bytes());
                    h.update(part.as_bytes());
                }
            }
            hex::encode(h.finalize())
        };
        {
            let mut table = self.fetches.lock().unwrap_or_else(|p| p.into_inner());
            table.sweep(Instant::now());
            if let Some(id) = table.by_key.get(&fetch_key) {
                return match &table.entries[id].result {
                    None => Ok(FetchProgress::Pending(*id)),
                    Some((r, _)) => r.clone().map(FetchProgress::Ready),
                };
            }
        }
        let mut job = None;
        if req.pull_policy != PullPolicy::Always
            && let Some(hex) = self.lookup_ref(&key)
        {
            let verified = match &source {
                Source::File(_) => true,
                Source::Oci(r) => {
                    self.pull_verified(&key, &hex, &pulled::credential_id(r, &req.pull_secrets))
                }
            };
            if verified {
                if self.loaded(&hex).is_some() {
                    return Ok(FetchProgress::Ready(format!("sha256:{hex}")));
                }
                if self.module_path(&hex).is_file() {
                    job = Some(Job::Stored(hex));
                }
            } else if req.pull_policy == PullPolicy::Never {
                return Err(FetchError::Unauthorized(format!(
                    "{key}: stored on this node, but pulled with credentials other than this \
                     pod's pull secrets, and the pull policy Never forbids checking those \
                     with the registry"
                )));
            }
            // Otherwise pulled again with this pod's credentials: the registry decides.
        }
        let job = match job {
            Some(j) => j,
            // A local file is the air-gapped store itself: `Never` may still read it.
            None if req.pull_policy == PullPolicy::Never && matches!(source, Source::Oci(_)) => {
                return Err(FetchError::NeverPull);
            }
            None => Job::Pull {
                source,
                key,
                secrets: req.pull_secrets.clone(),
            },
        };
        let id = self.next_id();
        {
            let mut table = self.fetches.lock().unwrap_or_else(|p| p.into_inner());
            table.entries.insert(
                id,
                FetchEntry {
                    key: fetch_key.clone(),
                    result: None,
                },
            );
            table.by_key.insert(fetch_key, id);
        }
        let inner = self.clone();
        self.rt.spawn(async move {
            let timeout = inner.config.pull_timeout;
            let result = match tokio::time::timeout(timeout, inner.clone().run_job(job)).await {
                Ok(r) => r,
                Err(_) => Err(FetchError::Unavailable(format!(
                    "timed out after {timeout:?}"
                ))),
            };
            if let Err(e) = &result {
                tracing::info!(fetch = id, error = %e, "module fetch failed");
            }
            if let Some(e) = inner
                .fetches
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .entries
                .get_mut(&id)
            {
                e.result = Some((result, Instant::now()));
            }
            let _ = inner.fetch_done.send(id);
        });
        Ok(FetchProgress::Pending(id))
    }

    pub(crate) fn poll_fetch(&self, id: FetchId) -> Option<Result<ModuleRef, FetchError>> {
        let table = self.fetches.lock().unwrap_or_else(|p| p.into_inner());
        table
            .entries
            .get(&id)?
            .result
            .as_ref()
            .map(|(r, _)| r.clone())
    }

    async fn run_job(self: Arc<Self>, job: Job) -> Result<ModuleRef, FetchError> {
        match job {
            Job::Stored(hex) => {
                let path = self.module_path(&hex);
                let bytes = tokio::fs::read(&path)
                    .await
                    .map_err(|e| FetchError::Other(format!("{}: {e}", path.display())))?;
                if sha256_hex(&bytes) != hex {
                    return Err(FetchError::Other(format!(
                        "{} is corrupt (digest mismatch)",
                        path.display()
                    )));
                }
                self.clone().load_blocking(hex.clone(), bytes).await?;
                Ok(format!("sha256:{hex}"))
            }
            Job::Pull {
                source,
                key,
                secrets,
            } => {
                let bytes = match &source {
                    Source::File(path) => self.read_file(path).await?,
                    Source::Oci(reference) => self.pull_oci(reference, &secrets).await?,
                };
                check_magic(&bytes, &key)?;
                let hex = sha256_hex(&bytes);
                let path = self.module_path(&hex);
                if !path.is_file() {
                    write_atomic(&path, &bytes).map_err(|e| {
                        FetchError::Other(format!("storing {}: {e}", path.display()))
                    })?;
                }
                if self.loaded(&hex).is_none() {
                    self.clone().load_blocking(hex.clone(), bytes).await?;
                }
                self.record_ref(&key, &hex);
                if let Source::Oci(r) = &source {
                    self.record_pull(&key, &hex, &pulled::credential_id(r, &secrets));
                }
                Ok(format!("sha256:{hex}"))
            }
        }
    }
}
