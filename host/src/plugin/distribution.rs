//! Plugins as OCI artifacts, in the CNCF TAG Runtime layout for wasm: config
//! `application/vnd.wasm.config.v0+json`, the component as an
//! `application/wasm` layer, then the plugin's manifest and each CRD file it
//! lists as layers of their own types, each titled with its file name
//! (`org.opencontainers.image.title`), so `oras`, `crane` or `wkg` can list
//! and pull them and a wasm-aware tool finds the component where it expects it.
//!
//! ```ignore
//! # async fn demo() -> Result<(), wasmlet::plugin::distribution::DistributionError> {
//! use wasmlet::plugin::distribution::{Artifact, RegistryOptions, pull, push};
//! let (name, artifact) = Artifact::read("target/plugins/configmap-summary.toml".as_ref())?;
//! let opts = RegistryOptions::default();
//! let digest = push(&artifact, "registry.example/plugins/configmap-summary:v1", &opts).await?;
//! let (pulled_digest, pulled) = pull("registry.example/plugins/configmap-summary:v1", &opts).await?;
//! assert_eq!(digest, pulled_digest);
//! pulled.write("plugins".as_ref(), &name)?;
//! # Ok(()) }
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use oci_client::client::{Config, ImageLayer};
use oci_client::{Client, Reference};

use super::manifest::{Manifest, ManifestError};
use crate::oci::capped::{CappedReader, RegistryError};
use crate::oci::clients::{http_client, registry_client};
use crate::oci::{PullSecret, auth_for};

pub(crate) const CONFIG_MEDIA_TYPE: &str = "application/vnd.wasm.config.v0+json";
pub(crate) const COMPONENT_MEDIA_TYPE: &str = "application/wasm";
pub(crate) const MANIFEST_MEDIA_TYPE: &str = "application/vnd.wasmlet.plugin.manifest.v1+toml";
pub(crate) const CRD_MEDIA_TYPE: &str = "application/vnd.wasmlet.plugin.crd.v1+yaml";
const TITLE: &str = "org.opencontainers.image.title";

/// A layer's annotations naming it `title` (the file name tools write it to).
pub(crate) fn titled(title: &str) -> Option<BTreeMap<String, String>> {
    Some(BTreeMap::from([(TITLE.to_string(), title.to_string())]))
}
/// The most a pulled artifact may hold, all layers together: a registry that
/// declares more is refused before anything is downloaded, and a layer longer
/// than its descriptor says is cut off there (manifests: at 4 MiB,
/// [`crate::oci::capped::MAX_MANIFEST_BYTES`]).
pub(crate) const MAX_ARTIFACT_BYTES: i64 = 256 << 20;

#[derive(Debug, thiserror::Error)]
pub(crate) enum DistributionError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    #[error("{reference}: {message}")]
    Registry { reference: String, message: String },
    #[error("{reference}: not a wasmlet plugin artifact: {message}")]
    NotAPlugin { reference: String, message: String },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> DistributionError + '_ {
    move |source| DistributionError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// A plugin's files: its component, its manifest and the files the manifest
/// lists (CRDs), by their path relative to the manifest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Artifact {
    pub(crate) wasm: Vec<u8>,
    pub(crate) manifest: Vec<u8>,
    pub(crate) files: BTreeMap<String, Vec<u8>>,
}

impl Artifact {
    /// Reads plugin NAME from `path` (`DIR/NAME.wasm`, `DIR/NAME.toml` or
    /// `DIR/NAME`), checking its manifest. Returns NAME and the files.
    pub(crate) fn read(path: &Path) -> Result<(String, Artifact), DistributionError> {
        let stem = path.with_extension("");
        let name = stem
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default()
            .to_string();
        let toml = stem.with_extension("toml");
        let wasm = stem.with_extension("wasm");
        let manifest = Manifest::load(&toml)?;
        let dir = toml.parent().unwrap_or(Path::new("."));
        let mut files = BTreeMap::new();
        for crd in &manifest.crds {
            let relative = crd.strip_prefix(dir).unwrap_or(crd);
            files.insert(
                relative.display().to_string(),
                std::fs::read(crd).map_err(io(crd))?,
            );
        }
        Ok((
            name,
            Artifact {
                wasm: std::fs::read(&wasm).map_err(io(&wasm))?,
                manifest: std::fs::read(&toml).map_err(io(&toml))?,
                files,
            },
        ))
    }

    /// Writes plugin `name` into `dir`: the listed files, then the manifest,
    /// then the component, each by rename, so a host watching `dir` never
    /// loads half of a version.
    pub(crate) fn write(&self, dir: &Path, name: &str) -> Result<(), DistributionError> {
        let put = |relative: &str, bytes: &[u8]| -> Result<(), DistributionError> {
            if !inside(relative) {
                return Err(DistributionError::Io {
                    path: dir.join(relative),
                    source: std::io::Error::new(
                        std::io::ErrorKind::InvalidInput,
                        "not a relative path inside the plugin directory",
                    ),
                });
            }
            let path = dir.join(relative);
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent).map_err(io(parent))?;
            }
            let file_name = path.file_name().and_then(|n| n.to_str()).unwrap_or(name);
            let tmp = path.with_file_name(format!(".{file_name}.part"));
            std::fs::write(&tmp, bytes).map_err(io(&tmp))?;
            std::fs::rename(&tmp, &path).map_err(io(&path))
        };
        for (relative, bytes) in &self.files {
            put(relative, bytes)?;
        }
        put(&format!("{name}.toml"), &self.manifest)?;
        put(&format!("{name}.wasm"), &self.wasm)
    }

    fn layers(&self) -> Vec<ImageLayer> {
        let mut layers = vec![
            ImageLayer::new(
                self.wasm.clone(),
                COMPONENT_MEDIA_TYPE.into(),
                titled("plugin.wasm"),
            ),
            ImageLayer::new(
                self.manifest.clone(),
                MANIFEST_MEDIA_TYPE.into(),
                titled("plugin.toml"),
            ),
        ];
        for (relative, bytes) in &self.files {
            layers.push(ImageLayer::new(
                bytes.clone(),
                CRD_MEDIA_TYPE.into(),
                titled(relative),
            ));
        }
        layers
    }
}

/// The plugin name a reference stands for: its repository's last path
/// segment (`oci://r.example/team/configmap-summary:v1` → `configmap-summary`).
pub(crate) fn name_of(reference: &str) -> String {
    let repo = reference.rsplit('/').next().unwrap_or(reference);
    repo.split([':', '@']).next().unwrap_or(repo).to_string()
}

/// How to reach a registry.
#[derive(Debug, Clone, Default)]
pub(crate) struct RegistryOptions {
    /// Plain HTTP (a local registry); HTTPS otherwise.
    pub(crate) insecure: bool,
    /// Credentials by registry; anonymous where none matches.
    pub(crate) credentials: Vec<PullSecret>,
}

fn parse(reference: &str) -> Result<Reference, DistributionError> {
    let r = reference.strip_prefix("oci://").unwrap_or(reference);
    r.parse().map_err(|e| DistributionError::Registry {
        reference: reference.into(),
        message: format!("not an OCI reference: {e}"),
    })
}

fn client(reference: &Reference, opts: &RegistryOptions) -> Result<Client, DistributionError> {
    registry_client(reference, opts.insecure).map_err(|message| DistributionError::Registry {
        reference: reference.to_string(),
        message,
    })
}

fn registry_error(
    reference: &Reference,
) -> impl Fn(oci_client::errors::OciDistributionError) -> DistributionError + '_ {
    move |e| DistributionError::Registry {
        reference: reference.to_string(),
        message: crate::oci::transport_message(&e),
    }
}

/// A relative path with no `..`, root or prefix: it stays inside a directory.
fn inside(relative: &str) -> bool {
    !relative.is_empty()
        && Path::new(relative)
            .components()
            .all(|c| matches!(c, std::path::Component::Normal(_)))
}

/// Pushes `artifact` as `reference`; returns the manifest's digest.
pub(crate) async fn push(
    artifact: &Artifact,
    reference: &str,
    opts: &RegistryOptions,
) -> Result<String, DistributionError> {
    push_layers(artifact.layers(), "wasip2", reference, opts).await
}

/// Pushes `layers` under a wasm config (`architecture: wasm`, `os`, the
/// layers' digests) as `reference`; returns the manifest's digest. Plugins
/// and workload modules (`wasmlet module push`, `cli/registry/module.rs`) go out
/// through it.
pub(crate) async fn push_layers(
    layers: Vec<ImageLayer>,
    os: &str,
    reference: &str,
    opts: &RegistryOptions,
) -> Result<String, DistributionError> {
    let r = parse(reference)?;
    let client = client(&r, opts)?;
    let auth = auth_for(&r, &opts.credentials);
    let config = serde_json::json!({
        "created": chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        "architecture": "wasm",
        "os": os,
        "layerDigests": layers.iter().map(|l| l.sha256_digest()).collect::<Vec<_>>(),
    });
    let config = Config::new(
        serde_json::to_vec(&config).expect("a JSON value serialises"),
        CONFIG_MEDIA_TYPE.into(),
        None,
    );
    client
        .push(&r, &layers, config, &auth, None)
        .await
        .map_err(registry_error(&r))?;
    client
        .fetch_manifest_digest(&r, &auth)
        .await
        .map_err(registry_error(&r))
}

/// The digest `reference` names now (one HEAD/GET of its manifest): what a
/// host polls to see a tag move.
pub(crate) async fn digest(
    reference: &str,
    opts: &RegistryOptions,
) -> Result<String, DistributionError> {
    let r = parse(reference)?;
    let registry = reader(&r, opts).await?;
    registry.manifest_digest().await.map_err(capped_error)
}

/// A size-capped reader of `r`'s repository (see [`crate::oci::capped`]).
async fn reader<'a>(
    r: &'a Reference,
    opts: &RegistryOptions,
) -> Result<CappedReader<'a>, DistributionError> {
    let http = http_client().map_err(|message| DistributionError::Registry {
        reference: r.to_string(),
        message,
    })?;
    CappedReader::new(http, r, &auth_for(r, &opts.credentials), opts.insecure)
        .await
        .map_err(capped_error)
}

fn capped_error(e: RegistryError) -> DistributionError {
    let reference = e.reference().to_string();
    let shown = e.to_string();
    let message = shown
        .strip_prefix(&format!("{reference}: "))
        .unwrap_or(&shown)
        .to_string();
    match e {
        RegistryError::TooLarge { .. } | RegistryError::Invalid { .. } => {
            DistributionError::NotAPlugin { reference, message }
        }
        _ => DistributionError::Registry { reference, message },
    }
}

/// Pulls the plugin `reference` names; returns its manifest digest and files.
/// Every layer is checked against its descriptor's size and digest.
pub(crate) async fn pull(
    reference: &str,
    opts: &RegistryOptions,
) -> Result<(String, Artifact), DistributionError> {
    let r = parse(reference)?;
    let registry = reader(&r, opts).await?;
    // Indexes are not plugin artifacts: no entry is picked.
    let (manifest, digest) = registry
        .image_manifest(|_| None)
        .await
        .map_err(capped_error)?;
    let not_a_plugin = |message: String| DistributionError::NotAPlugin {
        reference: reference.into(),
        message,
    };
    if manifest.config.media_type != CONFIG_MEDIA_TYPE {
        return Err(not_a_plugin(format!(
            "config media type {} (expected {CONFIG_MEDIA_TYPE})",
            manifest.config.media_type
        )));
    }
    let total: i64 = manifest.layers.iter().map(|l| l.size.max(0)).sum();
    if total > MAX_ARTIFACT_BYTES {
        return Err(not_a_plugin(format!(
            "its layers hold {total} bytes, over the {MAX_ARTIFACT_BYTES}-byte limit"
        )));
    }
    let (mut wasm, mut toml, mut files) = (None, None, BTreeMap::new());
    for layer in &manifest.layers {
        // Streamed, cut off at the size its descriptor declares (all of them
        // together are under the limit), then checked against its digest.
        let bytes = registry
            .blob(layer, MAX_ARTIFACT_BYTES as u64)
            .await
            .map_err(capped_error)?;
        let title = layer
            .annotations
            .as_ref()
            .and_then(|a| a.get(TITLE))
            .cloned();
        match layer.media_type.as_str() {
            COMPONENT_MEDIA_TYPE if wasm.is_none() => wasm = Some(bytes),
            MANIFEST_MEDIA_TYPE if toml.is_none() => toml = Some(bytes),
            CRD_MEDIA_TYPE => {
                // The title becomes a file name beside the manifest.
                let title = title.filter(|t| inside(t)).ok_or_else(|| {
                    not_a_plugin(
                        "a CRD layer's title is not a relative path inside the plugin directory"
                            .into(),
                    )
                })?;
                files.insert(title, bytes);
            }
            other => {
                return Err(not_a_plugin(format!("unexpected layer of type {other}")));
            }
        }
    }
    let wasm = wasm.ok_or_else(|| not_a_plugin(format!("no {COMPONENT_MEDIA_TYPE} layer")))?;
    let manifest = toml.ok_or_else(|| not_a_plugin(format!("no {MANIFEST_MEDIA_TYPE} layer")))?;
    Ok((
        digest,
        Artifact {
            wasm,
            manifest,
            files,
        },
    ))
}
