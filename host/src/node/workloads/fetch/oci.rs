//! Pulling a module from an OCI registry: a wasm artifact's layer, or the single
//! `.wasm` file of a single-layer image, with size caps on download and unpacking.

use oci_client::Reference;
use oci_client::manifest::{ImageIndexEntry, OciDescriptor};

use super::super::{FetchError, Inner, PullSecret};
use crate::oci::auth_for;
use crate::oci::capped::{CappedReader, RegistryError};
use crate::oci::clients::http_client;

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
        let auth = auth_for(reference, secrets);
        let http = http_client().map_err(FetchError::Other)?;
        let insecure = self
            .config
            .insecure_registries
            .iter()
            .any(|r| r == reference.resolve_registry());
        // Every read below is capped before it is read (manifests at 4 MiB,
        // the layer at its declared size, under the module limit).
        let registry = CappedReader::new(http, reference, &auth, insecure)
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
    if found.len() > 1 {
        return Err(not_wasm(format!(
            "the image layer holds several .wasm files ({})",
            found
                .iter()
                .map(|(n, _)| n.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    match found.pop() {
        Some((_, buf)) => Ok(buf),
        None => Err(not_wasm("the image layer holds no .wasm file".into())),
    }
}
