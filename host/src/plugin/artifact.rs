//! Integrity of the compiled-component cache. Deserializing a compiled
//! artifact runs its machine code, so a file another local user (or anything
//! that can write the cache) planted must never be loaded: the cache
//! directories are 0700 and must belong to this user, and every artifact is
//! sealed with an HMAC-SHA256 under a per-install random key (0600, in the
//! cache root), bound to the digest of the `.wasm` it was compiled from.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use hmac::{Hmac, Mac};
use sha2::Sha256;

const TAG_LEN: usize = 32;

/// The per-install sealing key.
pub(crate) struct CacheKey([u8; 32]);

impl CacheKey {
    /// The key in `root/cache.key`, created (0600, random) on first use. A key
    /// file others may read or that is not this user's is refused.
    pub(crate) fn load_or_create(root: &Path) -> std::io::Result<CacheKey> {
        let path = root.join("cache.key");
        let mut key = [0u8; 32];
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
        {
            Ok(mut f) => {
                rand::fill(&mut key);
                f.write_all(&key)?;
                f.sync_all()?;
                return Ok(CacheKey(key));
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
        Self::read(&path)
    }

    /// The key of an existing cache at `root` (a seed cache, read-only): the
    /// directory and the key must be this user's and closed to others.
    pub(crate) fn load_existing(root: &Path) -> std::io::Result<CacheKey> {
        wasmlet_apiserver::private_dir::check_private_dir(root)?;
        Self::read(&root.join("cache.key"))
    }

    fn read(path: &Path) -> std::io::Result<CacheKey> {
        wasmlet_apiserver::private_dir::check_private_file(path)?;
        let bytes = std::fs::read(path)?;
        let key = bytes.as_slice().try_into().map_err(|_| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("{} is not a 32-byte key", path.display()),
            )
        })?;
        Ok(CacheKey(key))
    }

    /// `tag || artifact`, the tag covering the source digest and the artifact.
    pub(crate) fn seal(&self, digest: &str, artifact: &[u8]) -> Vec<u8> {
        let mut mac = self.mac(digest);
        mac.update(artifact);
        let mut out = mac.finalize().into_bytes().to_vec();
        out.extend_from_slice(artifact);
        out
    }

    /// The artifact in `sealed` if its tag is right for `digest`.
    pub(crate) fn open<'a>(&self, digest: &str, sealed: &'a [u8]) -> Option<&'a [u8]> {
        if sealed.len() < TAG_LEN {
            return None;
        }
        let (tag, artifact) = sealed.split_at(TAG_LEN);
        let mut mac = self.mac(digest);
        mac.update(artifact);
        // verify_slice compares in constant time.
        mac.verify_slice(tag).ok().map(|()| artifact)
    }

    /// HMAC-SHA256 over `digest` (length-prefixed) and `artifact`.
    fn mac(&self, digest: &str) -> Hmac<Sha256> {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.0).expect("HMAC takes any key length");
        mac.update(&(digest.len() as u64).to_be_bytes());
        mac.update(digest.as_bytes());
        mac
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::MetadataExt;

    use super::*;

    #[test]
    fn a_seal_binds_key_digest_and_artifact() {
        let dir = tempfile::tempdir().unwrap();
        let key = CacheKey::load_or_create(dir.path()).unwrap();
        let mode = std::fs::metadata(dir.path().join("cache.key"))
            .unwrap()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        let sealed = key.seal("aa", b"code");
        assert_eq!(key.open("aa", &sealed), Some(&b"code"[..]));
        assert_eq!(key.open("bb", &sealed), None);
        let mut flipped = sealed.clone();
        *flipped.last_mut().unwrap() ^= 1;
        assert_eq!(key.open("aa", &flipped), None);
        // The same install reads the same key back; another install's key differs.
        let again = CacheKey::load_or_create(dir.path()).unwrap();
        assert!(again.open("aa", &sealed).is_some());
        let other = CacheKey::load_or_create(tempfile::tempdir().unwrap().path()).unwrap();
        assert!(other.open("aa", &sealed).is_none());
    }
}
