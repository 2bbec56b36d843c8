//! Which credentials may use a stored image, as the kubelet's
//! `KubeletEnsureSecretPulledImages` decides it: a private image pulled with one
//! pod's pull secrets is not another pod's for the asking under `IfNotPresent`.
//!
//! `DATA/modules/pulled/<sha256 of the reference>` holds the digest the reference was
//! last pulled as, the reference, then one line per credential the registry served it
//! to: `anonymous` (no credentials needed: anyone may use it), or a digest of the
//! registry, user name and password (never the password itself). A pod whose
//! credentials are not listed pulls again with its own: the registry decides.

use std::path::PathBuf;

use oci_client::Reference;
use oci_client::secrets::RegistryAuth;
use sha2::{Digest, Sha256};

use super::super::{Inner, PullSecret};
use super::reference::sha256_hex;
use super::store::write_atomic;
use crate::oci::auth_for;

const ANONYMOUS: &str = "anonymous";

/// Names the credentials a pull of `reference` with `secrets` presents.
pub(super) fn credential_id(reference: &Reference, secrets: &[PullSecret]) -> String {
    match auth_for(reference, secrets) {
        RegistryAuth::Basic(user, password) => {
            let mut h = Sha256::new();
            for part in [reference.resolve_registry(), &user, &password] {
                h.update((part.len() as u64).to_le_bytes());
                h.update(part.as_bytes());
            }
            hex::encode(h.finalize())
        }
        _ => ANONYMOUS.to_string(),
    }
}

impl Inner {
    fn pulled_path(&self, key: &str) -> PathBuf {
        self.modules_dir()
            .join("pulled")
            .join(sha256_hex(key.as_bytes()))
    }

    /// The credentials the registry served `key` as digest `hex` to.
    fn pulled_by(&self, key: &str, hex: &str) -> Vec<String> {
        let Ok(text) = std::fs::read_to_string(self.pulled_path(key)) else {
            return Vec::new();
        };
        let mut lines = text.lines();
        let digest = format!("sha256:{hex}");
        if lines.next() != Some(digest.as_str()) || lines.next() != Some(key) {
            return Vec::new();
        }
        lines.map(str::to_string).collect()
    }

    /// Whether a pod presenting `credential` may use the stored digest `hex` of `key`
    /// without asking the registry.
    pub(super) fn pull_verified(&self, key: &str, hex: &str, credential: &str) -> bool {
        self.pulled_by(key, hex)
            .iter()
            .any(|c| c == ANONYMOUS || c == credential)
    }

    /// Records that the registry served `key` as `hex` to `credential` (a new digest
    /// starts a new list).
    pub(super) fn record_pull(&self, key: &str, hex: &str, credential: &str) {
        let mut by = self.pulled_by(key, hex);
        if by.iter().any(|c| c == credential) {
            return;
        }
        by.push(credential.to_string());
        let path = self.pulled_path(key);
        let text = format!("sha256:{hex}\n{key}\n{}\n", by.join("\n"));
        if let Err(e) = write_atomic(&path, text.as_bytes()) {
            tracing::warn!(file = %path.display(), error = %e, "cannot record who pulled an image");
        }
    }
}
