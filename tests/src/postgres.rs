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

    pub fn port(&self) -> u16 {
        self.port
    }

    /// The connection URL the host is given.
    pub fn url(&self) -> String {
        format!("postgres://{USER}@127.0.0.1:{}/postgres", self.port)
    }

    /// The server's log.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("postgres.log")).unwrap_or_default()
    }

    /// A connection of the test's own.
    pub async fn client(&self) -> Result<tokio_postgres::Client> {
        let (client, connection) =
            tokio_postgres::connect(&self.url(), tokio_postgres::NoTls).await?;
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
