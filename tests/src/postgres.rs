//! A private PostgreSQL server for the datastore tests: `initdb` into a
//! temporary directory, `postgres` on a free 127.0.0.1 port, run as a
//! non-root user (PostgreSQL refuses root: as root, the server runs as
//! `nobody` through `setpriv`), stopped when dropped.
//!
//! ```no_run
//! # async fn demo() -> anyhow::Result<()> {
//! let pg = wasmlet_e2e::postgres::Postgres::start().await?;
//! let client = pg.client().await?;
//! client.batch_execute("SELECT 1").await?;
//! println!("{}", pg.url());
//! # Ok(()) }
//! ```

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

/// The unprivileged account the server runs as when the tests run as root.
const NOBODY: u32 = 65534;
/// The database superuser initdb creates (trust authentication, local only).
pub const USER: &str = "wasmlet";

pub struct Postgres {
    dir: tempfile::TempDir,
    port: u16,
    child: Option<Child>,
    /// With [`Postgres::start_tls`]: the CA that signed the server's certificate.
    ca: Option<PathBuf>,
}

/// A test CA and a server certificate it signs, for `127.0.0.1` and `localhost`.
struct ServerTls {
    ca_pem: String,
    cert_pem: String,
    key_pem: String,
}

impl ServerTls {
    fn generate(ca_name: &str) -> Result<ServerTls> {
        let ca_key = rcgen::KeyPair::generate()?;
        let mut ca = rcgen::CertificateParams::new(Vec::<String>::new())?;
        ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca.distinguished_name
            .push(rcgen::DnType::CommonName, ca_name);
        let ca_cert = ca.self_signed(&ca_key)?;
        let issuer = rcgen::Issuer::new(ca, ca_key);
        let key = rcgen::KeyPair::generate()?;
        let mut server =
            rcgen::CertificateParams::new(vec!["127.0.0.1".into(), "localhost".into()])?;
        server
            .distinguished_name
            .push(rcgen::DnType::CommonName, "localhost");
        let cert = server.signed_by(&key, &issuer)?;
        Ok(ServerTls {
            ca_pem: ca_cert.pem(),
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }
}

/// A CA certificate (PEM) that signed nothing the server shows: the wrong CA.
pub fn unrelated_ca_pem() -> Result<String> {
    Ok(ServerTls::generate("another CA")?.ca_pem)
}

/// The newest installed server's binaries (`/usr/lib/postgresql/N/bin`).
pub fn bin_dir() -> Result<PathBuf> {
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .context("PostgreSQL is not installed (scripts/setup installs it)")?
        .flatten()
        .filter_map(|e| {
            let v = e.file_name().to_str()?.parse().ok()?;
            let bin = e.path().join("bin");
            bin.join("initdb").exists().then_some((v, bin))
        })
        .collect();
    versions.sort();
    versions
        .pop()
        .map(|(_, bin)| bin)
        .context("no /usr/lib/postgresql/*/bin/initdb (scripts/setup installs PostgreSQL)")
}

fn running_as_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|u| u.split_whitespace().nth(1).map(|e| e == "0"))
        })
        .unwrap_or(false)
}

/// `program` run as the server's user: itself, or `nobody` when root.
fn as_server_user(program: &Path) -> Command {
    if running_as_root() {
        let mut c = Command::new("setpriv");
        c.args([
            format!("--reuid={NOBODY}"),
            format!("--regid={NOBODY}"),
            "--clear-groups".into(),
            "--".into(),
        ])
        .arg(program);
        c
    } else {
        Command::new(program)
    }
}

impl Postgres {
    /// A fresh cluster, started and accepting connections.
    pub async fn start() -> Result<Postgres> {
        Postgres::launch(false).await
    }

    /// [`Postgres::start`] with `ssl = on` and TCP connections without TLS
    /// refused (`hostnossl ... reject`); the CA is [`Postgres::ca_file`].
    pub async fn start_tls() -> Result<Postgres> {
        Postgres::launch(true).await
    }

    async fn launch(tls: bool) -> Result<Postgres> {
        let bin = bin_dir()?;
        let dir = tempfile::tempdir()?;
        if running_as_root() {
            std::os::unix::fs::chown(dir.path(), Some(NOBODY), Some(NOBODY))?;
        }
        let data = dir.path().join("data");
        let out = as_server_user(&bin.join("initdb"))
            .arg("-D")
            .arg(&data)
            .args([
                "-U",
                USER,
                "-A",
                "trust",
                "-E",
                "UTF8",
                "--locale=C",
                "--no-sync",
            ])
            .output()
            .context("running initdb")?;
        if !out.status.success() {
            bail!(
                "initdb failed: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let ca = if tls {
            Some(Postgres::configure_tls(dir.path(), &data)?)
        } else {
            None
        };
        let port = crate::free_port();
        let log = std::fs::File::create(dir.path().join("postgres.log"))?;
        let child = as_server_user(&bin.join("postgres"))
            .arg("-D")
            .arg(&data)
            .args(["-p", &port.to_string(), "-h", "127.0.0.1", "-k"])
            .arg(dir.path())
            // A throwaway server: durability buys nothing here.
            .args(["-c", "fsync=off", "-c", "synchronous_commit=off"])
            .args(["-c", "full_page_writes=off"])
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("starting postgres")?;
        let mut pg = Postgres {
            dir,
            port,
            child: Some(child),
            ca,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if pg.client().await.is_ok() {
                return Ok(pg);
            }
            if let Some(status) = pg.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                bail!("postgres exited ({status}); log:\n{}", pg.log());
            }
            if Instant::now() > deadline {
                bail!(
                    "postgres did not accept connections in 30 s; log:\n{}",
                    pg.log()
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Writes the server's key and certificate into `data`, turns TLS on,
    /// and lets TCP in only over TLS; returns the CA file.
    fn configure_tls(dir: &Path, data: &Path) -> Result<PathBuf> {
        use std::os::unix::fs::PermissionsExt;
        let tls = ServerTls::generate("wasmlet test datastore CA")?;
        let ca = dir.join("ca.pem");
        std::fs::write(&ca, &tls.ca_pem)?;
        std::fs::write(data.join("server.crt"), &tls.cert_pem)?;
        let key = data.join("server.key");
        std::fs::write(&key, &tls.key_pem)?;
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600))?;
        std::fs::write(
            data.join("pg_hba.conf"),
            "local all all trust\nhostssl all all 127.0.0.1/32 trust\nhostnossl all all 127.0.0.1/32 reject\n",
        )?;
        let mut conf = std::fs::OpenOptions::new()
            .append(true)
            .open(data.join("postgresql.conf"))?;
        std::io::Write::write_all(
            &mut conf,
            b"ssl = on\nssl_cert_file = 'server.crt'\nssl_key_file = 'server.key'\n",
        )?;
        if running_as_root() {
            for f in ["server.crt", "server.key", "pg_hba.conf"] {
                std::os::unix::fs::chown(data.join(f), Some(NOBODY), Some(NOBODY))?;
            }
        }
        Ok(ca)
    }

    /// The CA that signed the server's certificate ([`Postgres::start_tls`]).
    pub fn ca_file(&self) -> Option<&Path> {
        self.ca.as_deref()
    }

    /// The TCP URL without TLS parameters (`sslmode` and `sslrootcert`
    /// are the caller's to add).
    pub fn base_url(&self) -> String {
        format!("postgres://{USER}@127.0.0.1:{}/postgres", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// The connection URL the host is given: plain TCP, which the host
    /// makes only when asked (`sslmode=disable`).
    pub fn url(&self) -> String {
        format!("{}?sslmode=disable", self.base_url())
    }

    /// The server's log.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("postgres.log")).unwrap_or_default()
    }

    /// A connection of the test's own, over the server's Unix socket (which
    /// a TLS-only server still lets in).
    pub async fn client(&self) -> Result<tokio_postgres::Client> {
        let local = format!(
            "host={} port={} user={USER} dbname=postgres",
            self.dir.path().display(),
            self.port
        );
        let (client, connection) = tokio_postgres::connect(&local, tokio_postgres::NoTls).await?;
        tokio::spawn(async move {
            let _ = connection.await;
        });
        Ok(client)
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        // SIGINT is PostgreSQL's fast shutdown: backends end, the postmaster
        // exits; SIGKILL would orphan the backends for a moment.
        let _ = Command::new("kill")
            .args(["-INT", &child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
    }
}
