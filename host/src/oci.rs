//! OCI registry credentials, shared by the node's image pulls and plugin
//! artifacts: docker config files and `imagePullSecrets` read into
//! [`PullSecret`]s, and the one that applies to a reference; [`capped`]: the
//! size-capped reads both pull through; [`clients`]: the registry clients,
//! made in one place. (Pushing workload modules as pod images is the
//! `module push` command's, `cli/registry/module.rs`: it goes through
//! [`crate::plugin::distribution`], which is above this module.)

pub(crate) mod capped;
pub(crate) mod clients;
pub(crate) mod token;

/// A transport error's text, with a hint when the TLS handshake met plain
/// HTTP (rustls' "corrupt message of type InvalidContentType"): the usual
/// cause is a local registry without TLS.
pub(crate) fn transport_message(e: &(dyn std::error::Error + 'static)) -> String {
    let text = crate::causes::text(e);
    if text.contains("InvalidContentType") {
        format!(
            "{text} (the registry seems to speak plain HTTP: pass --insecure to `plugin push/pull` or `module push`, or --insecure-registry HOST:PORT to the node)"
        )
    } else {
        text
    }
}

use oci_client::Reference;
use oci_client::secrets::RegistryAuth;

/// Registry credentials from an `imagePullSecrets` secret; see
/// [`PullSecret::from_docker_config`] to read a `.dockerconfigjson`.
#[derive(Clone, PartialEq, Eq)]
pub struct PullSecret {
    /// The registry as written in the docker config: `registry.example:5000`,
    /// `https://index.docker.io/v1/`, ...
    pub registry: String,
    pub username: String,
    pub password: String,
}

impl std::fmt::Debug for PullSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PullSecret")
            .field("registry", &self.registry)
            .field("username", &self.username)
            .finish_non_exhaustive()
    }
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

/// The credential in `secrets` for `reference`'s registry (anonymous when none).
pub(crate) fn auth_for(reference: &Reference, secrets: &[PullSecret]) -> RegistryAuth {
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

/// The credentials of the docker config file a registry CLI would use:
/// `$DOCKER_CONFIG/config.json`, else `~/.docker/config.json` (none when
/// neither exists; an unreadable one is an error naming it).
pub(crate) fn docker_config_credentials() -> Result<Vec<PullSecret>, String> {
    let path = match std::env::var_os("DOCKER_CONFIG") {
        Some(d) => std::path::PathBuf::from(d).join("config.json"),
        None => match std::env::var_os("HOME") {
            Some(h) => std::path::PathBuf::from(h).join(".docker/config.json"),
            None => return Ok(Vec::new()),
        },
    };
    match std::fs::read(&path) {
        Ok(bytes) => {
            PullSecret::from_docker_config(&bytes).map_err(|e| format!("{}: {e}", path.display()))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
}
