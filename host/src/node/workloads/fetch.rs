//! Fetching modules: `file://` paths and OCI registries, into a content-addressed store
//! (`DATA/modules/sha256/<hex>.wasm`), compiled and pre-linked in memory.
//!
//! - `DATA/modules/refs/<sha256 of the reference>` maps a reference (`file:///x.wasm`,
//!   `registry/repo:tag`) to the digest it resolved to, for `IfNotPresent` / `Never`.
//! - Components are compiled through [`PluginEngine::load`] (its precompiled cache);
//!   core modules are precompiled to `DATA/modules/compiled/<engine hash>/<hex>.cwasm`.
//! - A finished fetch's result stays collectable by the same request for
//!   [`RESULT_TTL`], so the provider's "wait on fetch-done, then ask again" returns it
//!   rather than starting another pull (which `Always` would otherwise do forever).

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use oci_client::client::{ClientConfig, ClientProtocol};
use oci_client::errors::{OciDistributionError, OciErrorCode};
use oci_client::manifest::{ImageIndexEntry, OciDescriptor};
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference};
use sha2::{Digest, Sha256};
use wasmtime_wasi::p2::bindings::CommandPre;

use super::{
    FetchError, FetchId, FetchProgress, FetchRequest, Inner, LoadedModule, ModuleRef, PullPolicy,
    PullSecret, Runnable,
};

/// How long a finished fetch's result is handed to callers repeating the request.
pub const RESULT_TTL: Duration = Duration::from_secs(10);

/// Layer media types accepted from a registry: wasm artifacts and image layers (tar).
const WASM_LAYER_TYPES: &[&str] = &[
    "application/wasm",
    "application/vnd.wasm.content.layer.v1+wasm",
    "application/vnd.module.wasm.content.layer.v1+wasm",
    "application/vnd.bytecodealliance.wasm.component.layer.v0+wasm",
];
const TAR_LAYER_TYPES: &[&str] = &[
    "application/vnd.oci.image.layer.v1.tar",
    "application/vnd.oci.image.layer.v1.tar+gzip",
    "application/vnd.docker.image.rootfs.diff.tar",
    "application/vnd.docker.image.rootfs.diff.tar.gzip",
];

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

/// `file:///abs/path.wasm` or an OCI reference; the reference's canonical form is the key.
fn parse_image(image: &str) -> Result<(Source, String), FetchError> {
    let image = image.trim();
    if image.starts_with("file:") {
        let url = url::Url::parse(image)
            .map_err(|e| FetchError::InvalidReference(format!("{image}: {e}")))?;
        if url
            .host_str()
            .is_some_and(|h| !h.is_empty() && h != "localhost")
        {
            return Err(FetchError::InvalidReference(format!(
                "{image}: a file URL must name a local path (file:///...)"
            )));
        }
        let path = url.to_file_path().map_err(|_| {
            FetchError::InvalidReference(format!("{image}: not an absolute file path"))
        })?;
        if path
            .components()
            .any(|c| c == std::path::Component::ParentDir)
        {
            return Err(FetchError::InvalidReference(format!(
                "{image}: '..' is not allowed"
            )));
        }
        let key = format!("file://{}", path.display());
        return Ok((Source::File(path), key));
    }
    if image.contains("://") {
        return Err(FetchError::InvalidReference(format!(
            "{image}: only file:// URLs and OCI references are supported"
        )));
    }
    let reference: Reference = image
        .parse()
        .map_err(|e| FetchError::InvalidReference(format!("{image}: {e}")))?;
    let key = reference.whole();
    Ok((Source::Oci(reference), key))
}

/// `d` with `.` and `..` resolved by name, as a `file://` URL's path is: a configured
/// `DIR/../x` still matches `file:///x/...`.
fn lexical(d: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in d.components() {
        match c {
            std::path::Component::CurDir => {}
            std::path::Component::ParentDir => {
                out.pop();
            }
            c => out.push(c),
        }
    }
    out
}

fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// `sha256:<64 hex>` → the hex.
pub(crate) fn digest_hex(module: &str) -> Option<&str> {
    let hex = module.strip_prefix("sha256:")?;
    (hex.len() == 64
        && hex
            .bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()))
    .then_some(hex)
}

impl Inner {
    fn modules_dir(&self) -> PathBuf {
        self.config.data_dir.join("modules")
    }

    pub(crate) fn module_path(&self, hex: &str) -> PathBuf {
        self.modules_dir()
            .join("sha256")
            .join(format!("{hex}.wasm"))
    }

    fn ref_path(&self, key: &str) -> PathBuf {
        self.modules_dir()
            .join("refs")
            .join(sha256_hex(key.as_bytes()))
    }

    fn lookup_ref(&self, key: &str) -> Option<String> {
        if let Some(hex) = self.refs.lock().unwrap().get(key) {
            return Some(hex.clone());
        }
        let text = std::fs::read_to_string(self.ref_path(key)).ok()?;
        let mut lines = text.lines();
        let hex = digest_hex(lines.next()?)?.to_string();
        (lines.next()? == key).then_some(())?;
        self.refs
            .lock()
            .unwrap()
            .insert(key.to_string(), hex.clone());
        Some(hex)
    }

    fn record_ref(&self, key: &str, hex: &str) {
        self.refs
            .lock()
            .unwrap()
            .insert(key.to_string(), hex.to_string());
        let path = self.ref_path(key);
        if let Err(e) = write_atomic(&path, format!("sha256:{hex}\n{key}\n").as_bytes()) {
            tracing::warn!(file = %path.display(), error = %e, "cannot record module reference");
        }
    }

    pub(crate) fn loaded(&self, hex: &str) -> Option<Arc<LoadedModule>> {
        self.modules.lock().unwrap().get(hex).cloned()
    }

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
            let mut table = self.fetches.lock().unwrap();
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
            if self.loaded(&hex).is_some() {
                return Ok(FetchProgress::Ready(format!("sha256:{hex}")));
            }
            if self.module_path(&hex).is_file() {
                job = Some(Job::Stored(hex));
            }
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
            let mut table = self.fetches.lock().unwrap();
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
            if let Some(e) = inner.fetches.lock().unwrap().entries.get_mut(&id) {
                e.result = Some((result, Instant::now()));
            }
            let _ = inner.fetch_done.send(id);
        });
        Ok(FetchProgress::Pending(id))
    }

    pub(crate) fn poll_fetch(&self, id: FetchId) -> Option<Result<ModuleRef, FetchError>> {
        let table = self.fetches.lock().unwrap();
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
                Ok(format!("sha256:{hex}"))
            }
        }
    }

    /// The configured module directory `path` lies under, and `path` beneath it.
    fn file_image_dir(&self, path: &Path) -> Result<(PathBuf, PathBuf), FetchError> {
        let dirs = &self.config.file_image_dirs;
        dirs.iter()
            .map(|d| lexical(d))
            .find_map(|d| {
                let rel = path.strip_prefix(&d).ok()?.to_path_buf();
                Some((d, rel))
            })
            .filter(|(_, rel)| rel.file_name().is_some())
            .ok_or_else(|| {
                let list: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
                // Unauthorized: kubelet's ErrImagePull, as for a registry's refusal.
                FetchError::Unauthorized(format!(
                    "file://{}: file images are allowed only under this node's module \
                     directories ({}; set with --allow-file-images)",
                    path.display(),
                    if list.is_empty() {
                        "none".to_string()
                    } else {
                        list.join(", ")
                    }
                ))
            })
    }

    /// Reads a `file://` image beneath its module directory, following no symlink (a
    /// link in the directory must not lead to another file of the node).
    async fn read_file(&self, path: &Path) -> Result<Vec<u8>, FetchError> {
        let shown = path.display().to_string();
        let (dir, rel) = self.file_image_dir(path)?;
        let (parent, name) = (
            rel.parent().unwrap_or(Path::new("")),
            rel.file_name().unwrap_or_default(),
        );
        let opened = super::volumes::open_beneath(&dir, parent, false)
            .map_err(|e| match e {
                super::volumes::WalkError::Missing(_) => {
                    FetchError::NotFound(format!("{shown}: no such file"))
                }
                e => FetchError::NotWasm(format!("{shown}: {e}")),
            })
            .and_then(|d| {
                use rustix::fs::{Mode, OFlags};
                rustix::fs::openat(
                    &d,
                    name,
                    OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                    Mode::empty(),
                )
                .map_err(|e| match e {
                    rustix::io::Errno::NOENT => {
                        FetchError::NotFound(format!("{shown}: no such file"))
                    }
                    rustix::io::Errno::LOOP => {
                        FetchError::NotWasm(format!("{shown} is a symbolic link"))
                    }
                    e => FetchError::Other(format!("{shown}: {e}")),
                })
            })?;
        let file = tokio::fs::File::from_std(std::fs::File::from(opened));
        let md = file
            .metadata()
            .await
            .map_err(|e| FetchError::Other(format!("{shown}: {e}")))?;
        if !md.is_file() {
            return Err(FetchError::NotWasm(format!(
                "{shown} is not a regular file"
            )));
        }
        if md.len() > self.config.max_module_bytes {
            return Err(FetchError::NotWasm(format!(
                "{shown} is larger than {} bytes",
                self.config.max_module_bytes
            )));
        }
        let mut bytes = Vec::with_capacity(md.len() as usize);
        tokio::io::AsyncReadExt::read_to_end(
            &mut tokio::io::AsyncReadExt::take(file, self.config.max_module_bytes),
            &mut bytes,
        )
        .await
        .map_err(|e| FetchError::Other(format!("{shown}: {e}")))?;
        Ok(bytes)
    }

    /// Compiles and links `bytes` (digest `hex`) off the async threads.
    async fn load_blocking(
        self: Arc<Self>,
        hex: String,
        bytes: Vec<u8>,
    ) -> Result<Arc<LoadedModule>, FetchError> {
        tokio::task::spawn_blocking(move || self.load_module(&hex, &bytes))
            .await
            .map_err(|e| FetchError::Other(format!("compile task: {e}")))?
    }

    /// Compiles (or takes from the precompiled cache) and pre-links a module.
    pub(crate) fn load_module(
        &self,
        hex: &str,
        bytes: &[u8],
    ) -> Result<Arc<LoadedModule>, FetchError> {
        if let Some(m) = self.loaded(hex) {
            return Ok(m);
        }
        let path = self.module_path(hex);
        let shown = format!("sha256:{hex}");
        let runnable = if is_component(bytes) {
            let (component, _) = self
                .engine
                .load(&path, bytes)
                .map_err(|e| FetchError::NotWasm(e.to_string()))?;
            let pre = self.p2_linker.instantiate_pre(&component).map_err(|e| {
                FetchError::NotWasm(format!("{shown}: cannot be linked with WASI 0.2: {e:#}"))
            })?;
            let pre = CommandPre::new(pre).map_err(|e| {
                FetchError::NotWasm(format!(
                    "{shown}: not a WASI command (no wasi:cli/run export): {e:#}"
                ))
            })?;
            Runnable::Component(pre)
        } else {
            let module = self.load_core(hex, bytes)?;
            match module.get_export("_start") {
                Some(wasmtime::ExternType::Func(_)) => {}
                _ => {
                    return Err(FetchError::NotWasm(format!(
                        "{shown}: a core module without _start is not a WASI command"
                    )));
                }
            }
            let pre = self.p1_linker.instantiate_pre(&module).map_err(|e| {
                FetchError::NotWasm(format!(
                    "{shown}: cannot be linked with WASI preview 1: {e:#}"
                ))
            })?;
            Runnable::Core(pre)
        };
        let loaded = Arc::new(LoadedModule {
            digest: format!("sha256:{hex}"),
            runnable,
        });
        self.modules
            .lock()
            .unwrap()
            .insert(hex.to_string(), loaded.clone());
        Ok(loaded)
    }

    fn load_core(&self, hex: &str, bytes: &[u8]) -> Result<wasmtime::Module, FetchError> {
        let engine = &self.engine.engine;
        let mut h = std::collections::hash_map::DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut h);
        let cached = self
            .modules_dir()
            .join("compiled")
            .join(format!("{:016x}", h.finish()))
            .join(format!("{hex}.cwasm"));
        if cached.is_file() {
            // SAFETY: this directory is written only below, by an engine with the same
            // compatibility hash (part of the path).
            match unsafe { wasmtime::Module::deserialize_file(engine, &cached) } {
                Ok(m) => return Ok(m),
                Err(e) => {
                    tracing::warn!(file = %cached.display(), error = %e, "cached module unusable, recompiling")
                }
            }
        }
        let compiled = engine.precompile_module(bytes).map_err(|e| {
            FetchError::NotWasm(format!(
                "sha256:{hex}: not a valid WebAssembly module: {e:#}"
            ))
        })?;
        write_atomic(&cached, &compiled)
            .map_err(|e| FetchError::Other(format!("{}: {e}", cached.display())))?;
        // SAFETY: written just above by this engine.
        unsafe { wasmtime::Module::deserialize_file(engine, &cached) }
            .map_err(|e| FetchError::Other(format!("{e:#}")))
    }

    async fn pull_oci(
        &self,
        reference: &Reference,
        secrets: &[PullSecret],
    ) -> Result<Vec<u8>, FetchError> {
        // reqwest is built without a bundled crypto provider: use ring, like the rest
        // of the host (a no-op when a process default is already installed).
        let _ = rustls::crypto::ring::default_provider().install_default();
        let config = ClientConfig {
            protocol: ClientProtocol::HttpsExcept(self.config.insecure_registries.clone()),
            platform_resolver: Some(Box::new(wasm_platform)),
            connect_timeout: Some(Duration::from_secs(10)),
            read_timeout: Some(Duration::from_secs(60)),
            ..Default::default()
        };
        // A client per pull: its token cache must not carry one namespace's
        // credentials over to another namespace's pull.
        let client =
            Client::try_from(config).map_err(|e| FetchError::Other(format!("OCI client: {e}")))?;
        let auth = auth_for(reference, secrets);
        let (manifest, _) = client
            .pull_image_manifest(reference, &auth)
            .await
            .map_err(|e| classify_oci(reference, e))?;
        let not_wasm = |m: String| FetchError::NotWasm(format!("{reference}: {m}"));
        for l in &manifest.layers {
            if !WASM_LAYER_TYPES.contains(&l.media_type.as_str())
                && !TAR_LAYER_TYPES.contains(&l.media_type.as_str())
            {
                return Err(not_wasm(format!(
                    "layer media type {} is neither wasm nor an image layer",
                    l.media_type
                )));
            }
        }
        let layer = pick_layer(&manifest.layers).map_err(not_wasm)?;
        let max = self.config.max_module_bytes;
        // The descriptor's size is checked before anything is downloaded, and the
        // download is cut off there too (a registry may lie about it).
        let declared = u64::try_from(layer.size).unwrap_or(u64::MAX);
        if declared > max {
            return Err(not_wasm(format!(
                "the layer declares {declared} bytes, more than the limit of {max} bytes"
            )));
        }
        let mut stream = client
            .pull_blob_stream(reference, layer)
            .await
            .map_err(|e| classify_oci(reference, e))?;
        let mut data = Vec::with_capacity(declared.min(16 << 20) as usize);
        while let Some(chunk) = futures::StreamExt::next(&mut stream.stream).await {
            let chunk = chunk.map_err(|e| {
                FetchError::Unavailable(format!("{reference}: downloading the layer: {e}"))
            })?;
            if (data.len() + chunk.len()) as u64 > declared {
                return Err(not_wasm(format!(
                    "the layer is larger than the {declared} bytes its descriptor declares"
                )));
            }
            data.extend_from_slice(&chunk);
        }
        if WASM_LAYER_TYPES.contains(&layer.media_type.as_str()) {
            return Ok(data);
        }
        wasm_in_tar(reference, &layer.media_type, &data, max)
    }
}

/// Picks an index entry for a wasm platform (`wasip1`/`wasip2`/`wasi` on `wasm`/`wasm32`),
/// or the only entry.
fn wasm_platform(entries: &[ImageIndexEntry]) -> Option<String> {
    let wasm = entries.iter().find(|e| {
        e.platform.as_ref().is_some_and(|p| {
            let os = p.os.to_string();
            let arch = p.architecture.to_string();
            os.starts_with("wasi") || arch.starts_with("wasm")
        })
    });
    match wasm {
        Some(e) => Some(e.digest.clone()),
        None if entries.len() == 1 => Some(entries[0].digest.clone()),
        None => None,
    }
}

/// The credentials of the first pull secret for the reference's registry.
fn auth_for(reference: &Reference, secrets: &[PullSecret]) -> RegistryAuth {
    let wanted = [reference.registry(), reference.resolve_registry()];
    for s in secrets {
        let host = normalize_registry(&s.registry);
        if wanted.iter().any(|w| normalize_registry(w) == host) {
            return RegistryAuth::Basic(s.username.clone(), s.password.clone());
        }
    }
    RegistryAuth::Anonymous
}

/// `https://index.docker.io/v1/` → `docker.io`; `http://host:5000/x` → `host:5000`.
fn normalize_registry(r: &str) -> String {
    let r = r.trim();
    let r = r
        .strip_prefix("https://")
        .or_else(|| r.strip_prefix("http://"))
        .unwrap_or(r);
    let host = r.split('/').next().unwrap_or(r).to_ascii_lowercase();
    match host.as_str() {
        "index.docker.io" | "registry-1.docker.io" | "registry.hub.docker.com" => {
            "docker.io".into()
        }
        _ => host,
    }
}

fn classify_oci(reference: &Reference, e: OciDistributionError) -> FetchError {
    let msg = format!("{reference}: {e}");
    match &e {
        OciDistributionError::AuthenticationFailure(_)
        | OciDistributionError::UnauthorizedError { .. } => FetchError::Unauthorized(msg),
        OciDistributionError::ImageManifestNotFoundError(_) => FetchError::NotFound(msg),
        OciDistributionError::RegistryError { envelope, .. } => {
            let codes: Vec<&OciErrorCode> = envelope.errors.iter().map(|e| &e.code).collect();
            if codes.iter().any(|c| {
                matches!(
                    c,
                    OciErrorCode::NameUnknown
                        | OciErrorCode::ManifestUnknown
                        | OciErrorCode::BlobUnknown
                        | OciErrorCode::NotFound
                )
            }) {
                FetchError::NotFound(msg)
            } else if codes
                .iter()
                .any(|c| matches!(c, OciErrorCode::Unauthorized | OciErrorCode::Denied))
            {
                FetchError::Unauthorized(msg)
            } else if codes
                .iter()
                .any(|c| matches!(c, OciErrorCode::NameInvalid | OciErrorCode::TagInvalid))
            {
                FetchError::InvalidReference(msg)
            } else {
                FetchError::Unavailable(msg)
            }
        }
        OciDistributionError::ServerError { code, .. } => match code {
            404 => FetchError::NotFound(msg),
            401 | 403 => FetchError::Unauthorized(msg),
            _ => FetchError::Unavailable(msg),
        },
        OciDistributionError::RequestError(_) | OciDistributionError::IoError(_) => {
            FetchError::Unavailable(msg)
        }
        OciDistributionError::IncompatibleLayerMediaTypeError(_)
        | OciDistributionError::PullNoLayersError
        | OciDistributionError::UnsupportedMediaTypeError(_)
        | OciDistributionError::ImageIndexParsingNoPlatformResolverError => FetchError::NotWasm(
            format!("{msg} (not a wasm artifact or single-layer wasm image)"),
        ),
        _ => FetchError::Other(msg),
    }
}

/// The layer holding the module: an artifact's single wasm layer, or an image's single
/// (tar) layer.
fn pick_layer(layers: &[OciDescriptor]) -> Result<&OciDescriptor, String> {
    let wasm: Vec<&OciDescriptor> = layers
        .iter()
        .filter(|l| WASM_LAYER_TYPES.contains(&l.media_type.as_str()))
        .collect();
    match wasm.len() {
        1 => return Ok(wasm[0]),
        0 => {}
        n => return Err(format!("{n} wasm layers; expected one")),
    }
    match layers {
        [one] => Ok(one),
        [] => Err("the image has no layers".into()),
        _ => Err(format!(
            "{} image layers; expected a single layer holding a .wasm file",
            layers.len()
        )),
    }
}

/// A reader that fails once more than `left` bytes came through (a gzip bomb stops there).
struct Capped<'a, R> {
    inner: R,
    left: u64,
    hit: &'a std::cell::Cell<bool>,
}

impl<R: std::io::Read> std::io::Read for Capped<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        match self.left.checked_sub(n as u64) {
            Some(left) => {
                self.left = left;
                Ok(n)
            }
            None => {
                self.hit.set(true);
                Err(std::io::Error::other("unpacked size limit reached"))
            }
        }
    }
}

/// The single `.wasm` file of an image layer (a tar, maybe gzipped), unpacking at most
/// `max` bytes.
fn wasm_in_tar(
    reference: &Reference,
    media_type: &str,
    data: &[u8],
    max: u64,
) -> Result<Vec<u8>, FetchError> {
    let not_wasm = |m: String| FetchError::NotWasm(format!("{reference}: {m}"));
    let gz = media_type.ends_with("gzip") || data.starts_with(&[0x1f, 0x8b]);
    let reader: Box<dyn std::io::Read> = if gz {
        Box::new(flate2::read::GzDecoder::new(data))
    } else {
        Box::new(data)
    };
    let hit = std::cell::Cell::new(false);
    let capped = Capped {
        inner: reader,
        left: max,
        hit: &hit,
    };
    let too_big = || not_wasm(format!("the image layer unpacks to more than {max} bytes"));
    let mut archive = tar::Archive::new(capped);
    let mut found: Vec<(String, Vec<u8>)> = Vec::new();
    let entries = archive
        .entries()
        .map_err(|e| not_wasm(format!("image layer is not a tar archive: {e}")))?;
    for entry in entries {
        let mut entry = match entry {
            Ok(e) => e,
            Err(_) if hit.get() => return Err(too_big()),
            Err(e) => return Err(not_wasm(format!("image layer: {e}"))),
        };
        if !entry.header().entry_type().is_file() {
            continue;
        }
        let name = entry
            .path()
            .map(|p| p.display().to_string())
            .unwrap_or_default();
        if !name.ends_with(".wasm") {
            continue;
        }
        let mut buf = Vec::new();
        if let Err(e) = std::io::Read::read_to_end(&mut entry, &mut buf) {
            return Err(if hit.get() {
                too_big()
            } else {
                not_wasm(format!("image layer: {e}"))
            });
        }
        found.push((name, buf));
    }
    match found.len() {
        1 => Ok(found.pop().unwrap().1),
        0 => Err(not_wasm("the image layer holds no .wasm file".into())),
        _ => Err(not_wasm(format!(
            "the image layer holds several .wasm files ({})",
            found
                .iter()
                .map(|(n, _)| n.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ))),
    }
}

fn is_component(bytes: &[u8]) -> bool {
    bytes.len() >= 8 && bytes[..4] == *b"\0asm" && bytes[6..8] == [1, 0]
}

fn check_magic(bytes: &[u8], what: &str) -> Result<(), FetchError> {
    if bytes.len() < 8 || bytes[..4] != *b"\0asm" {
        return Err(FetchError::NotWasm(format!(
            "{what}: not a WebAssembly module or component (no \\0asm header)"
        )));
    }
    Ok(())
}

pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let tmp = path.with_extension(format!(
        "tmp{}.{}",
        std::process::id(),
        rand::random::<u32>()
    ));
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, path).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}

impl PullSecret {
    /// The credentials in a `kubernetes.io/dockerconfigjson` secret's `.dockerconfigjson`
    /// (or a legacy `.dockercfg`): `{"auths": {"REGISTRY": {"username", "password"} or
    /// {"auth": base64("user:pass")}}}`.
    pub fn from_docker_config(json: &[u8]) -> Result<Vec<PullSecret>, String> {
        use base64::Engine;
        let v: serde_json::Value =
            serde_json::from_slice(json).map_err(|e| format!("not JSON: {e}"))?;
        let auths = match v.get("auths") {
            Some(a) => a,
            None => &v,
        };
        let map = auths.as_object().ok_or("no \"auths\" object")?;
        let mut out = Vec::new();
        for (registry, entry) in map {
            let s = |k: &str| {
                entry
                    .get(k)
                    .and_then(|x| x.as_str())
                    .unwrap_or("")
                    .to_string()
            };
            let (mut username, mut password) = (s("username"), s("password"));
            let auth = s("auth");
            if username.is_empty() && !auth.is_empty() {
                let decoded = base64::engine::general_purpose::STANDARD
                    .decode(auth.trim())
                    .map_err(|e| format!("{registry}: auth is not base64: {e}"))?;
                let decoded = String::from_utf8(decoded)
                    .map_err(|_| format!("{registry}: auth is not UTF-8"))?;
                let (u, p) = decoded
                    .split_once(':')
                    .ok_or_else(|| format!("{registry}: auth is not user:password"))?;
                username = u.to_string();
                password = p.to_string();
            }
            if username.is_empty() && password.is_empty() {
                continue;
            }
            out.push(PullSecret {
                registry: registry.clone(),
                username,
                password,
            });
        }
        Ok(out)
    }
}
