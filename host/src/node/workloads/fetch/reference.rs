//! Image references: parsing `file://` URLs and OCI references, and the store's
//! reference → digest map (`DATA/modules/refs/`) that `IfNotPresent` / `Never` read.

use std::path::PathBuf;

use oci_client::Reference;
use sha2::{Digest, Sha256};

use super::super::{FetchError, Inner};
use super::Source;
use super::store::write_atomic;

/// `file:///abs/path.wasm` or an OCI reference; the reference's canonical form is the key.
pub(super) fn parse_image(image: &str) -> Result<(Source, String), FetchError> {
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
pub(super) fn sha256_hex(bytes: &[u8]) -> String {
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
    pub(super) fn ref_path(&self, key: &str) -> PathBuf {
        self.modules_dir()
            .join("refs")
            .join(sha256_hex(key.as_bytes()))
    }

    pub(super) fn lookup_ref(&self, key: &str) -> Option<String> {
        if let Some(hex) = self.refs.lock().unwrap_or_else(|p| p.into_inner()).get(key) {
            return Some(hex.clone());
        }
        let text = std::fs::read_to_string(self.ref_path(key)).ok()?;
        let mut lines = text.lines();
        let hex = digest_hex(lines.next()?)?.to_string();
        (lines.next()? == key).then_some(())?;
        self.refs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key.to_string(), hex.clone());
        Some(hex)
    }

    pub(super) fn record_ref(&self, key: &str, hex: &str) {
        self.refs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key.to_string(), hex.to_string());
        let path = self.ref_path(key);
        if let Err(e) = write_atomic(&path, format!("sha256:{hex}\n{key}\n").as_bytes()) {
            tracing::warn!(file = %path.display(), error = %e, "cannot record module reference");
        }
    }
}
