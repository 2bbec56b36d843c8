//! A real OCI registry for pull tests: Debian's `docker-registry` on
//! 127.0.0.1, storing into a temporary directory, stopped on drop.

use std::time::Duration;

use anyhow::{Context, Result};

/// Where Debian's package puts it (`scripts/setup` installs it).
pub const BIN: &str = "/usr/bin/docker-registry";

pub struct Registry {
    child: std::process::Child,
    /// `127.0.0.1:PORT`, plain HTTP.
    pub addr: String,
    _dir: tempfile::TempDir,
    /// The credentials [`Registry::push`] uses (a registry started with users).
    push_auth: Option<(String, String)>,
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Registry {
    /// Starts one on a free port and waits until it listens.
    pub async fn start() -> Result<Registry> {
        Self::start_with_users(&[]).await
    }

    /// Like [`Registry::start`], but every request needs the basic-auth credentials
    /// of one of `users`: (name, password, bcrypt hash of the password as htpasswd
    /// writes it). Pushes use the first user.
    pub async fn start_with_users(users: &[(&str, &str, &str)]) -> Result<Registry> {
        let dir = tempfile::tempdir()?;
        let addr = format!("127.0.0.1:{}", crate::free_port());
        let config = dir.path().join("config.yml");
        let mut yaml = format!(
            "version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n    rootdirectory: {}\nhttp:\n  addr: {addr}\n",
            dir.path().join("storage").display()
        );
        if !users.is_empty() {
            let htpasswd = dir.path().join("htpasswd");
            let lines: String = users
                .iter()
                .map(|(name, _, hash)| format!("{name}:{hash}\n"))
                .collect();
            std::fs::write(&htpasswd, lines)?;
            yaml.push_str(&format!(
                "auth:\n  htpasswd:\n    realm: wasmlet-test\n    path: {}\n",
                htpasswd.display()
            ));
        }
        std::fs::write(&config, yaml)?;
        let child = std::process::Command::new(BIN)
            .arg("serve")
            .arg(&config)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .context("starting docker-registry")?;
        let registry = Registry {
            child,
            addr,
            _dir: dir,
            push_auth: users
                .first()
                .map(|(name, password, _)| (name.to_string(), password.to_string())),
        };
        // Generous: a process start on a loaded machine; listening ends the wait.
        crate::eventually(
            Duration::from_secs(60),
            "docker-registry to listen",
            || async {
                tokio::net::TcpStream::connect(&registry.addr)
                    .await
                    .ok()
                    .map(|_| ())
            },
        )
        .await?;
        Ok(registry)
    }

    /// Where the registry keeps its blobs (`docker/registry/v2/blobs/...`):
    /// tests tamper with them there.
    pub fn storage(&self) -> std::path::PathBuf {
        self._dir.path().join("storage")
    }

    /// Pushes one layer as `repo` (e.g. `hello:v1`) with an empty config.
    pub async fn push(
        &self,
        repo: &str,
        layer: Vec<u8>,
        layer_type: &str,
        config_type: &str,
    ) -> Result<()> {
        use oci_client::client::{ClientConfig, ClientProtocol, Config, ImageLayer};
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = oci_client::Client::new(ClientConfig {
            protocol: ClientProtocol::HttpsExcept(vec![self.addr.clone()]),
            ..Default::default()
        });
        let reference: oci_client::Reference = format!("{}/{repo}", self.addr).parse()?;
        client
            .push(
                &reference,
                &[ImageLayer::new(layer, layer_type.to_string(), None)],
                Config::new(b"{}".to_vec(), config_type.to_string(), None),
                &match &self.push_auth {
                    Some((u, p)) => oci_client::secrets::RegistryAuth::Basic(u.clone(), p.clone()),
                    None => oci_client::secrets::RegistryAuth::Anonymous,
                },
                None,
            )
            .await?;
        Ok(())
    }
}
