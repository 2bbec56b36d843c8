//! Pulling a module from an OCI registry: a wasm artifact's layer, or the single
//! `.wasm` file of a single-layer image, with size caps on download and unpacking.

use std::time::Duration;

use oci_client::client::{ClientConfig, ClientProtocol};
use oci_client::errors::{OciDistributionError, OciErrorCode};
use oci_client::manifest::{ImageIndexEntry, OciDescriptor};
use oci_client::{Client, Reference};

use super::super::{FetchError, Inner, PullSecret};
use crate::oci::auth_for;
use crate::oci::capped::{CappedReader, RegistryError, http_client};

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
impl Inner {
    pub(super) async fn pull_oci(
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
        let http = http_client().map_err(FetchError::Other)?;
        let insecure = self
            .config
            .insecure_registries
            .iter()
            .any(|r| r == reference.resolve_registry());
        // Every read below is capped before it is read (manifests at 4 MiB,
        // the layer at its declared size, under the module limit).
        let registry = CappedReader::new(&client, http, reference, &auth, insecure)
            .await
            .map_err(classify)?;
        let (manifest, _) = registry
            .image_manifest(wasm_platform)
            .await
            .map_err(classify)?;
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
        let data = registry.blob(layer, max).await.map_err(classify)?;
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

/// A capped read's failure as the pod's pull error: too large is not a
/// usable wasm image; statuses and codes as the registry client's.
fn classify(e: RegistryError) -> FetchError {
    let msg = e.to_string();
    match &e {
        RegistryError::TooLarge { .. } | RegistryError::Invalid { .. } => FetchError::NotWasm(msg),
        RegistryError::Auth { reference, source } => classify_oci(reference, source),
        RegistryError::Transport { .. } => FetchError::Unavailable(msg),
        RegistryError::Status { status, codes, .. } => {
            let has = |c: &[&str]| codes.iter().any(|x| c.contains(&x.as_str()));
            if has(&[
                "NAME_UNKNOWN",
                "MANIFEST_UNKNOWN",
                "BLOB_UNKNOWN",
                "NOT_FOUND",
            ]) || *status == 404
            {
                FetchError::NotFound(msg)
            } else if has(&["UNAUTHORIZED", "DENIED"]) || matches!(status, 401 | 403) {
                FetchError::Unauthorized(msg)
            } else if has(&["NAME_INVALID", "TAG_INVALID"]) {
                FetchError::InvalidReference(msg)
            } else {
                FetchError::Unavailable(msg)
            }
        }
    }
}

/// An error of the registry client (its authentication) as the pod's pull error.
fn classify_oci(reference: &str, e: &OciDistributionError) -> FetchError {
    let msg = format!("{reference}: {e}");
    match e {
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
