//! Registry reads whose size is capped before they are read: manifests and
//! indexes (at containerd's 4 MiB), blobs (at their descriptor's size, itself
//! under the caller's limit) and error bodies (64 KiB, the rest left unread).
//! `oci-client` reads every body whole into memory (a registry answering with
//! a 700 MiB manifest cost the node 0.8 GB, on each retry), so the reads,
//! the token handshake's included ([`super::token`]), are done here.

use oci_client::Reference;
use oci_client::manifest::{
    IMAGE_MANIFEST_LIST_MEDIA_TYPE, IMAGE_MANIFEST_MEDIA_TYPE, ImageIndexEntry,
    OCI_IMAGE_INDEX_MEDIA_TYPE, OCI_IMAGE_MEDIA_TYPE, OciDescriptor, OciImageManifest, OciManifest,
};
use oci_client::secrets::RegistryAuth;
use sha2::{Digest, Sha256};

use super::token::{Authorization, authorize};

/// The largest manifest or index read (containerd's `MaxManifestSize`).
pub(crate) const MAX_MANIFEST_BYTES: u64 = 4 << 20;
/// The most of an error response's body read (for its message and codes).
pub(crate) const MAX_ERROR_BODY_BYTES: u64 = 64 << 10;

const MANIFEST_TYPES: [&str; 4] = [
    OCI_IMAGE_MEDIA_TYPE,
    OCI_IMAGE_INDEX_MEDIA_TYPE,
    IMAGE_MANIFEST_MEDIA_TYPE,
    IMAGE_MANIFEST_LIST_MEDIA_TYPE,
];

#[derive(Debug, thiserror::Error)]
pub(crate) enum RegistryError {
    #[error("{reference}: the {what} is larger than the limit of {limit} bytes")]
    TooLarge {
        reference: String,
        what: String,
        limit: u64,
    },
    #[error("{reference}: {url}: HTTP {status}: {message}")]
    Status {
        reference: String,
        url: String,
        status: u16,
        /// The OCI error codes of the body (`MANIFEST_UNKNOWN`, `DENIED`, ...).
        codes: Vec<String>,
        message: String,
    },
    #[error("{reference}: {url}: {message}")]
    Transport {
        reference: String,
        url: String,
        message: String,
    },
    #[error("{reference}: {message}")]
    Invalid { reference: String, message: String },
}

impl RegistryError {
    /// The reference the failed read was for.
    pub(crate) fn reference(&self) -> &str {
        match self {
            RegistryError::TooLarge { reference, .. }
            | RegistryError::Status { reference, .. }
            | RegistryError::Transport { reference, .. }
            | RegistryError::Invalid { reference, .. } => reference,
        }
    }
}

/// Reads of one reference's repository, authenticated once.
pub(crate) struct CappedReader<'a> {
    reference: &'a Reference,
    http: reqwest::Client,
    scheme: &'static str,
    authorization: Authorization,
}

impl<'a> CappedReader<'a> {
    /// Authenticates ([`authorize`]) for pulls of `reference`; plain HTTP
    /// when `insecure`.
    pub(crate) async fn new(
        http: reqwest::Client,
        reference: &'a Reference,
        auth: &RegistryAuth,
        insecure: bool,
    ) -> Result<CappedReader<'a>, RegistryError> {
        let scheme = if insecure { "http" } else { "https" };
        let authorization = authorize(&http, reference, auth, scheme).await?;
        Ok(CappedReader {
            reference,
            http,
            scheme,
            authorization,
        })
    }

    fn url(&self, kind: &str, name: &str) -> String {
        let r = self.reference;
        let ns = r
            .namespace()
            .map(|ns| format!("?ns={ns}"))
            .unwrap_or_default();
        format!(
            "{}://{}/v2/{}/{kind}/{name}{ns}",
            self.scheme,
            r.resolve_registry(),
            r.repository()
        )
    }

    fn get(&self, url: &str) -> reqwest::RequestBuilder {
        let b = self.http.get(url);
        match &self.authorization {
            Authorization::None => b,
            Authorization::Bearer(t) => b.bearer_auth(t),
            Authorization::Basic(u, p) => b.basic_auth(u, Some(p)),
        }
    }

    fn shown(&self) -> String {
        self.reference.to_string()
    }

    /// GETs `url`; a response other than 200 becomes [`RegistryError::Status`]
    /// with at most [`MAX_ERROR_BODY_BYTES`] of its body read.
    async fn send(
        &self,
        req: reqwest::RequestBuilder,
        url: &str,
    ) -> Result<reqwest::Response, RegistryError> {
        let mut res = req.send().await.map_err(|e| RegistryError::Transport {
            reference: self.shown(),
            url: url.into(),
            message: crate::oci::transport_message(&e),
        })?;
        let status = res.status();
        if status == reqwest::StatusCode::OK {
            return Ok(res);
        }
        // Enough for the registry's message; a longer body is not read.
        let body = read_up_to(&mut res, MAX_ERROR_BODY_BYTES)
            .await
            .unwrap_or_default();
        let codes = serde_json::from_slice::<serde_json::Value>(&body)
            .ok()
            .and_then(|v| {
                let errors = v.get("errors")?.as_array()?.clone();
                Some(
                    errors
                        .iter()
                        .filter_map(|e| e.get("code")?.as_str().map(String::from))
                        .collect(),
                )
            })
            .unwrap_or_default();
        let mut message = String::from_utf8_lossy(&body).trim().to_string();
        if message.len() > 1024 {
            let mut cut = 1024;
            while !message.is_char_boundary(cut) {
                cut -= 1;
            }
            message.truncate(cut);
            message.push_str("...");
        }
        Err(RegistryError::Status {
            reference: self.shown(),
            url: url.into(),
            status: status.as_u16(),
            codes,
            message,
        })
    }

    /// The body of `res`, failing as soon as it would pass `limit` bytes (a
    /// declared `Content-Length` over it fails before anything is read).
    async fn body(
        &self,
        res: &mut reqwest::Response,
        url: &str,
        what: &str,
        limit: u64,
    ) -> Result<Vec<u8>, RegistryError> {
        let too_large = || RegistryError::TooLarge {
            reference: self.shown(),
            what: what.into(),
            limit,
        };
        if res.content_length().is_some_and(|n| n > limit) {
            return Err(too_large());
        }
        let mut out = Vec::with_capacity(res.content_length().unwrap_or(0).min(limit) as usize);
        loop {
            let chunk = res.chunk().await.map_err(|e| RegistryError::Transport {
                reference: self.shown(),
                url: url.into(),
                message: format!("reading the {what}: {}", crate::oci::transport_message(&e)),
            })?;
            let Some(chunk) = chunk else { return Ok(out) };
            if (out.len() + chunk.len()) as u64 > limit {
                return Err(too_large());
            }
            out.extend_from_slice(&chunk);
        }
    }

    /// The manifest `name` (a tag or digest) names, at most
    /// [`MAX_MANIFEST_BYTES`], checked against the digest when `name` is one.
    /// Returns the parsed manifest and its digest.
    async fn manifest_at(&self, name: &str) -> Result<(OciManifest, String), RegistryError> {
        let url = self.url("manifests", name);
        let req = self
            .get(&url)
            .header(reqwest::header::ACCEPT, MANIFEST_TYPES.join(", "));
        let mut res = self.send(req, &url).await?;
        let body = self
            .body(&mut res, &url, "manifest", MAX_MANIFEST_BYTES)
            .await?;
        let digest = format!("sha256:{}", hex::encode(Sha256::digest(&body)));
        if name.starts_with("sha256:") && name != digest {
            return Err(self.invalid(format!("the manifest's digest is {digest}, not {name}")));
        }
        let manifest = serde_json::from_slice::<OciManifest>(&body)
            .map_err(|e| self.invalid(format!("the manifest is not an OCI manifest: {e}")))?;
        Ok((manifest, digest))
    }

    fn invalid(&self, message: String) -> RegistryError {
        RegistryError::Invalid {
            reference: self.shown(),
            message,
        }
    }

    /// The reference's image manifest and its digest; an index is resolved
    /// (one level) through `platform`.
    pub(crate) async fn image_manifest(
        &self,
        platform: impl Fn(&[ImageIndexEntry]) -> Option<String>,
    ) -> Result<(OciImageManifest, String), RegistryError> {
        let r = self.reference;
        let name = r.digest().or(r.tag()).unwrap_or("latest").to_string();
        match self.manifest_at(&name).await? {
            (OciManifest::Image(m), digest) => Ok((m, digest)),
            (OciManifest::ImageIndex(index), _) => {
                let entry = platform(&index.manifests).ok_or_else(|| {
                    self.invalid("no entry of the image index is for a wasm platform".into())
                })?;
                match self.manifest_at(&entry).await? {
                    (OciManifest::Image(m), digest) => Ok((m, digest)),
                    (OciManifest::ImageIndex(_), _) => {
                        Err(self.invalid(format!("index entry {entry} is an index again")))
                    }
                }
            }
        }
    }

    /// The digest the reference names now: its manifest read (capped) and hashed.
    pub(crate) async fn manifest_digest(&self) -> Result<String, RegistryError> {
        let r = self.reference;
        let name = r.digest().or(r.tag()).unwrap_or("latest").to_string();
        Ok(self.manifest_at(&name).await?.1)
    }

    /// The blob `layer` describes, read only when its declared size is at most
    /// `limit`, cut off past that size, and checked against its digest.
    pub(crate) async fn blob(
        &self,
        layer: &OciDescriptor,
        limit: u64,
    ) -> Result<Vec<u8>, RegistryError> {
        let what = format!("layer {}", layer.digest);
        let declared = u64::try_from(layer.size).unwrap_or(u64::MAX);
        if declared > limit {
            return Err(RegistryError::TooLarge {
                reference: self.shown(),
                what: format!("{what} (declaring {declared} bytes)"),
                limit,
            });
        }
        let url = self.url("blobs", &layer.digest);
        let mut res = self.send(self.get(&url), &url).await?;
        // The descriptor's size is the cap: a registry may lie about it.
        let body = self.body(&mut res, &url, &what, declared).await?;
        let digest = format!("sha256:{}", hex::encode(Sha256::digest(&body)));
        if body.len() as u64 != declared || digest != layer.digest {
            return Err(self.invalid(format!(
                "{what} does not match its descriptor (size {} of {declared}, digest {digest})",
                body.len()
            )));
        }
        Ok(body)
    }
}

/// Up to `limit` bytes of `res`'s body; the rest is not read.
pub(super) async fn read_up_to(
    res: &mut reqwest::Response,
    limit: u64,
) -> reqwest::Result<Vec<u8>> {
    let mut out = Vec::new();
    while (out.len() as u64) < limit {
        match res.chunk().await? {
            Some(c) => {
                let take = c.len().min((limit - out.len() as u64) as usize);
                out.extend_from_slice(&c[..take]);
            }
            None => break,
        }
    }
    Ok(out)
}
