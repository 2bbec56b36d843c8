//! Harness for the end-to-end tests: start the real `wasmlet` binary on a
//! fresh data directory, wait until it serves, and hand out real clients
//! (`kube::Client`, `kubectl`).
//!
//! ```no_run
//! # async fn demo() -> anyhow::Result<()> {
//! let plane = wasmlet_e2e::Plane::start(&[]).await?;
//! let client = plane.client().await?;
//! let out = plane.kubectl(&["get", "namespaces"])?;
//! # Ok(()) }
//! ```

pub mod postgres;
pub mod registry;
pub mod sroll;
pub mod summary;
pub mod workload_plane;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

/// The `wasmlet` binary under test: `$WASMLET_BIN`, else the workspace's
/// debug build (the test script builds it first).
pub fn wasmlet_bin() -> PathBuf {
    if let Ok(p) = std::env::var("WASMLET_BIN") {
        return PathBuf::from(p);
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ sits in the workspace");
    let target = std::env::var("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| root.join("target"));
    target.join("debug").join("wasmlet")
}

/// A running `wasmlet` process with its own data directory.
pub struct Plane {
    pub dir: tempfile::TempDir,
    pub child: Option<Child>,
    /// Subcommand and flags after `--data-dir DIR --port 0`.
    pub args: Vec<String>,
    /// What the process may take (`prlimit` before it starts).
    pub limits: Limits,
}

/// Resource limits a plane runs under, set with `prlimit` before the binary
/// starts: an attack that exhausts them kills or stalls the plane, so a test
/// sees it fail instead of a machine that swaps.
#[derive(Debug, Clone, Copy, Default)]
pub struct Limits {
    /// `RLIMIT_DATA`: writable private memory (the heap, wasm memories,
    /// thread stacks). An allocation past it fails and the process aborts.
    pub data_bytes: Option<u64>,
    /// `RLIMIT_NOFILE`, soft and hard.
    pub open_files: Option<u64>,
}

impl Limits {
    /// The memory the hardening issues attack a plane in: 4 GiB.
    pub const ATTACK: Limits = Limits {
        data_bytes: Some(4 << 30),
        open_files: None,
    };

    fn prlimit_args(&self) -> Vec<String> {
        let mut args = Vec::new();
        if let Some(b) = self.data_bytes {
            args.push(format!("--data={b}"));
        }
        if let Some(n) = self.open_files {
            args.push(format!("--nofile={n}"));
        }
        args
    }
}

impl Plane {
    /// `wasmlet apiserver --data-dir TMP --port 0 EXTRA...`
    pub async fn start(extra: &[&str]) -> Result<Plane> {
        Plane::start_limited(extra, Limits::default()).await
    }

    /// [`Plane::start`] inside `limits`.
    pub async fn start_limited(extra: &[&str], limits: Limits) -> Result<Plane> {
        let mut args = vec!["apiserver".to_string()];
        args.extend(extra.iter().map(|s| s.to_string()));
        Plane::launch(args, &[], limits).await
    }

    /// `wasmlet up --plugins DATA/plugins --metrics-addr 127.0.0.1:0 EXTRA...`:
    /// the control plane with the host. Put plugins into [`Plane::plugin_dir`].
    pub async fn start_up(extra: &[&str]) -> Result<Plane> {
        Plane::start_up_with(extra, &[]).await
    }

    /// [`Plane::start_up`] with the built `plugins` (by name) already in the
    /// plugin directory when the host starts, so that its first scan loads them.
    pub async fn start_up_with(extra: &[&str], plugins: &[&str]) -> Result<Plane> {
        Plane::start_up_limited(extra, plugins, Limits::default()).await
    }

    /// [`Plane::start_up_with`] inside `limits`.
    pub async fn start_up_limited(
        extra: &[&str],
        plugins: &[&str],
        limits: Limits,
    ) -> Result<Plane> {
        let mut args = vec![
            "up".to_string(),
            "--metrics-addr".into(),
            "127.0.0.1:0".into(),
            "--kubelet-port".into(),
            "0".into(),
        ];
        // Only the built-ins most tests need: compiling every built-in
        // controller at each start would cost seconds per plane. Tests of a
        // controller name it (`--builtin-plugins scheduler,...`).
        if !extra.iter().any(|a| a.starts_with("--builtin-plugins")) {
            args.extend(["--builtin-plugins".into(), "scheduler,wasi-runner".into()]);
        }
        args.extend(extra.iter().map(|s| s.to_string()));
        Plane::launch(args, plugins, limits).await
    }

    async fn launch(mut args: Vec<String>, plugins: &[&str], limits: Limits) -> Result<Plane> {
        let dir = tempfile::tempdir()?;
        if args[0] == "up" {
            let pdir = dir.path().join("plugins");
            std::fs::create_dir_all(&pdir)?;
            for name in plugins {
                install_plugin(&pdir, name)?;
            }
            args.push("--plugins".into());
            args.push(pdir.display().to_string());
        }
        let mut plane = Plane {
            dir,
            child: None,
            args,
            limits,
        };
        plane.spawn().await?;
        Ok(plane)
    }

    pub fn plugin_dir(&self) -> PathBuf {
        self.dir.path().join("plugins")
    }

    /// The host's `wasmlet_plugin_<counter>_total{plugin="PLUGIN"}` now.
    pub async fn plugin_counter(&self, counter: &str, plugin: &str) -> Result<f64> {
        Ok(metric(
            &self.metrics().await?,
            &format!("wasmlet_plugin_{counter}_total"),
            &format!("plugin=\"{plugin}\""),
        ))
    }

    /// `http://ADDR/metrics` of a plane started with [`Plane::start_up`].
    pub async fn metrics_url(&self) -> Result<String> {
        eventually(Duration::from_secs(30), "the metrics address", || async {
            let out = std::fs::read_to_string(self.dir.path().join("wasmlet.out")).ok()?;
            out.lines().find_map(|l| {
                l.strip_prefix("wasmlet: metrics on ")
                    .map(|u| u.trim().to_string())
            })
        })
        .await
    }

    /// `GET PATH` on the metrics address of a plane started with
    /// [`Plane::start_up`] (`/readyz?verbose`, `/healthz`): (status, body).
    pub async fn http_get(&self, path: &str) -> Result<(u16, String)> {
        let url = self.metrics_url().await?;
        let base = url.strip_suffix("/metrics").context("the metrics URL")?;
        let out = Command::new("curl")
            .args(["-s", "-w", "\n%{http_code}", &format!("{base}{path}")])
            .output()?;
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let (body, code) = text.rsplit_once('\n').context("curl's status line")?;
        Ok((code.parse()?, body.to_string()))
    }

    /// The metrics text exposition.
    pub async fn metrics(&self) -> Result<String> {
        let url = self.metrics_url().await?;
        let out = Command::new("curl").args(["-sf", &url]).output()?;
        if !out.status.success() {
            bail!("GET {url} failed");
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    pub fn data_dir(&self) -> &Path {
        self.dir.path()
    }

    pub fn kubeconfig(&self) -> PathBuf {
        self.dir.path().join("kubeconfig")
    }

    /// Starts the process (again) on the same data directory.
    pub async fn spawn(&mut self) -> Result<()> {
        let bin = wasmlet_bin();
        if !bin.exists() {
            bail!(
                "{} does not exist: build it first (cargo build -p wasmlet)",
                bin.display()
            );
        }
        let _ = std::fs::remove_file(self.kubeconfig());
        let log = std::fs::File::create(self.dir.path().join("wasmlet.log"))?;
        let out = std::fs::File::create(self.dir.path().join("wasmlet.out"))?;
        // prlimit sets the limits on itself and execs the binary: the child's
        // pid is the plane's.
        let limits = self.limits.prlimit_args();
        let mut cmd = if limits.is_empty() {
            Command::new(&bin)
        } else {
            let mut c = Command::new("prlimit");
            c.args(&limits).arg("--").arg(&bin);
            c
        };
        cmd.arg(&self.args[0])
            .arg("--data-dir")
            .arg(self.dir.path());
        // A test that needs a stable address (restarts) passes its own --port.
        if !self.args.iter().any(|a| a == "--port") {
            cmd.arg("--port").arg("0");
        }
        // Every plane reads the components `scripts/test` precompiled once
        // (`wasmlet plugin precompile target/plugins`), as an installed host
        // reads its built-ins' seed: a plane then spends no minute compiling
        // the Python or TypeScript guests again. A test of the compile path
        // passes its own `--precompiled` (which wins over the variable).
        let seed = built_plugins().join(".precompiled");
        if std::env::var_os("WASMLET_PRECOMPILED").is_none() && seed.is_dir() {
            cmd.env("WASMLET_PRECOMPILED", &seed);
        }
        let child = cmd
            .args(&self.args[1..])
            .env(
                "WASMLET_LOG",
                std::env::var("WASMLET_LOG").unwrap_or_else(|_| "info".into()),
            )
            .stdout(out)
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(30);
        while !self.kubeconfig().exists() {
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                bail!("wasmlet exited early ({status}); log:\n{}", self.log());
            }
            if Instant::now() > deadline {
                bail!(
                    "wasmlet did not write its kubeconfig in 30 s; log:\n{}",
                    self.log()
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(())
    }

    pub fn log(&self) -> String {
        read_log(self.dir.path())
    }

    /// The process's id, while it runs.
    pub fn pid(&self) -> Result<u32> {
        self.child
            .as_ref()
            .map(Child::id)
            .context("the plane is not running")
    }

    /// A field of the process's `/proc/PID/status` in MiB (`VmHWM:`, its
    /// peak resident set; `VmRSS:`, now). Fails once the process is gone, so
    /// that a test reading it after an attack sees a plane that died.
    pub fn proc_status_mib(&mut self, field: &str) -> Result<u64> {
        if let Some(status) = self
            .child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
        {
            bail!("the plane exited ({status}); log:\n{}", self.log());
        }
        proc_status_kib(self.pid()?, field).map(|kib| kib >> 10)
    }

    /// `kill -9`: no shutdown path runs.
    pub fn kill9(&mut self) {
        kill9(&mut self.child);
    }

    pub async fn client(&self) -> Result<kube::Client> {
        let kc = kube::config::Kubeconfig::read_from(self.kubeconfig())?;
        let config = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await?;
        Ok(kube::Client::try_from(config)?)
    }

    /// A client that reports 429/503/504 at once instead of retrying them
    /// (kube's default policy retries them up to 15 times with backoff).
    pub async fn client_without_retries(&self) -> Result<kube::Client> {
        let kc = kube::config::Kubeconfig::read_from(self.kubeconfig())?;
        let mut config = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await?;
        config.default_retry = false;
        Ok(kube::Client::try_from(config)?)
    }

    /// The API server's base URL and bearer token (for raw HTTP checks).
    pub fn endpoint(&self) -> Result<(String, String)> {
        let text = std::fs::read_to_string(self.kubeconfig())?;
        let field = |k: &str| {
            text.lines()
                .find_map(|l| l.trim().strip_prefix(k).map(|v| v.trim().to_string()))
                .with_context(|| format!("kubeconfig has no {k}"))
        };
        Ok((field("server:")?, field("token:")?))
    }

    /// Runs `kubectl --kubeconfig ...` with the given arguments.
    /// A client acting as `user` (the admin impersonates, as `kubectl --as`
    /// does): its groups are `system:authenticated` only.
    pub async fn client_as(&self, user: &str) -> Result<kube::Client> {
        let kc = kube::config::Kubeconfig::read_from(self.kubeconfig())?;
        let mut config = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await?;
        config.auth_info.impersonate = Some(user.to_string());
        Ok(kube::Client::try_from(config)?)
    }

    /// A client from one of `wasmlet up`'s identity kubeconfigs
    /// (`kubeconfig-node`, `kubeconfig-controller`), waiting for the file.
    pub async fn identity_client(&self, file: &str) -> Result<kube::Client> {
        let path = self.data_dir().join(file);
        eventually(
            Duration::from_secs(30),
            "the identity kubeconfig",
            || async { path.exists().then_some(()) },
        )
        .await?;
        let kc = kube::config::Kubeconfig::read_from(&path)?;
        let config = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await?;
        Ok(kube::Client::try_from(config)?)
    }

    pub fn kubectl(&self, args: &[&str]) -> Result<Output> {
        let out = Command::new(kubectl_bin())
            .arg("--kubeconfig")
            .arg(self.kubeconfig())
            .args(args)
            .env("HOME", self.dir.path())
            .output()
            .context("running kubectl")?;
        Ok(out)
    }

    /// `kubectl` output (stdout and stderr) of a command that must fail.
    pub fn kubectl_fails(&self, args: &[&str]) -> Result<String> {
        let out = self.kubectl(args)?;
        if out.status.success() {
            bail!("kubectl {} succeeded", args.join(" "));
        }
        Ok(format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }

    /// `kubectl`, failing unless it succeeds; returns stdout.
    pub fn kubectl_ok(&self, args: &[&str]) -> Result<String> {
        let out = self.kubectl(args)?;
        if !out.status.success() {
            bail!(
                "kubectl {} failed: {}{}",
                args.join(" "),
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }
}

impl Drop for Plane {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// Where `scripts/build-guests` put the guest components.
pub fn built_plugins() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ sits in the workspace");
    root.join("target").join("plugins")
}

/// Copies plugin NAME (wasm + toml + the CRD files) from the guest build into `dir`,
/// manifest first and module last, as an operator would.
pub fn install_plugin(dir: &Path, name: &str) -> Result<()> {
    install_plugin_with(dir, name, |toml| toml)
}

/// [`install_plugin`] with its manifest passed through `edit`. Each file
/// lands by rename, manifest first: the host never loads half a plugin.
pub fn install_plugin_with(dir: &Path, name: &str, edit: impl Fn(String) -> String) -> Result<()> {
    let src = built_plugins();
    if !src.join(format!("{name}.wasm")).exists() {
        bail!(
            "{} has no {name}.wasm: run scripts/build-guests first",
            src.display()
        );
    }
    for e in std::fs::read_dir(&src)?.flatten() {
        if e.file_name().to_string_lossy().ends_with(".yaml") {
            std::fs::copy(e.path(), dir.join(e.file_name()))?;
        }
    }
    let toml = edit(std::fs::read_to_string(src.join(format!("{name}.toml")))?);
    std::fs::write(dir.join(format!(".{name}.toml")), toml)?;
    std::fs::rename(
        dir.join(format!(".{name}.toml")),
        dir.join(format!("{name}.toml")),
    )?;
    std::fs::copy(
        src.join(format!("{name}.wasm")),
        dir.join(format!(".{name}.wasm")),
    )?;
    std::fs::rename(
        dir.join(format!(".{name}.wasm")),
        dir.join(format!("{name}.wasm")),
    )?;
    Ok(())
}

/// The stderr log of a wasmlet process started in `dir`.
fn read_log(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("wasmlet.log")).unwrap_or_default()
}

/// A watch of `api`'s objects from now on (the resourceVersion of a list
/// made first), without bookmarks.
pub async fn watch_from_now<K>(
    api: &kube::Api<K>,
) -> Result<futures::stream::BoxStream<'static, kube::Result<kube::api::WatchEvent<K>>>>
where
    K: Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + 'static,
{
    use futures::StreamExt;
    let rv = api
        .list(&kube::api::ListParams::default())
        .await?
        .metadata
        .resource_version
        .unwrap_or_default();
    Ok(api
        .watch(&kube::api::WatchParams::default().disable_bookmarks(), &rv)
        .await?
        .boxed())
}

/// A field of `/proc/PID/status` in KiB (`VmHWM:`: the peak resident set).
pub fn proc_status_kib(pid: u32, field: &str) -> Result<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("process {pid} is gone"))?;
    text.lines()
        .find_map(|l| {
            l.strip_prefix(field)?
                .trim()
                .strip_suffix("kB")?
                .trim()
                .parse()
                .ok()
        })
        .with_context(|| format!("/proc/{pid}/status has no {field}"))
}

/// Kills and reaps a child, if it is still ours.
fn kill9(child: &mut Option<Child>) {
    if let Some(mut c) = child.take() {
        let _ = c.kill();
        let _ = c.wait();
    }
}

pub fn kubectl_bin() -> PathBuf {
    std::env::var("KUBECTL")
        .map(PathBuf::from)
        .unwrap_or_else(|_| PathBuf::from("kubectl"))
}

/// Polls `f` until it returns `Some`, or fails after `timeout`.
pub async fn eventually<T, F, Fut>(timeout: Duration, what: &str, f: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    eventually_every(Duration::from_millis(25), timeout, what, f).await
}

/// As [`eventually`], polling every `every`: for a probe that costs (a
/// metrics scrape is a `curl` process).
pub async fn eventually_every<T, F, Fut>(
    every: Duration,
    timeout: Duration,
    what: &str,
    mut f: F,
) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f().await {
            return Ok(v);
        }
        if Instant::now() > deadline {
            bail!("timed out after {timeout:?} waiting for {what}");
        }
        tokio::time::sleep(every).await;
    }
}

/// A port that was free a moment ago, for a plane that must keep its address
/// across restarts (`Plane::start(&["--port", &port])`).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or(0)
}

/// Creates the object `v` (JSON) through `api`, as a typed client would;
/// the API's answer as it came (for tests that expect a refusal).
pub async fn create_json<K>(
    api: &kube::Api<K>,
    v: serde_json::Value,
) -> std::result::Result<K, kube::Error>
where
    K: Clone + std::fmt::Debug + serde::Serialize + serde::de::DeserializeOwned,
{
    let obj: K = serde_json::from_value(v).expect("a valid object");
    api.create(&kube::api::PostParams::default(), &obj).await
}

/// The `Status` of a failed kube call, or a panic naming what came back instead.
pub fn api_error<T: std::fmt::Debug>(
    r: std::result::Result<T, kube::Error>,
) -> Box<kube::core::Status> {
    match r {
        Err(kube::Error::Api(s)) => s,
        other => panic!("expected an API error Status, got {other:?}"),
    }
}

/// Asserts a kube call failed with this HTTP code and `reason`; returns the Status.
#[track_caller]
pub fn expect_status<T: std::fmt::Debug>(
    r: std::result::Result<T, kube::Error>,
    code: u16,
    reason: &str,
) -> Box<kube::core::Status> {
    let s = api_error(r);
    assert_eq!(
        (s.code, s.reason.as_str()),
        (code, reason),
        "unexpected Status: {s:?}"
    );
    s
}

impl Plane {
    /// One raw HTTPS request with the bearer token (through `curl`, so the
    /// body and headers are exactly what is given). Returns the HTTP code and
    /// the body parsed as JSON (`Null` when it is not JSON).
    pub fn raw(
        &self,
        method: &str,
        path: &str,
        content_type: Option<&str>,
        body: Option<&[u8]>,
    ) -> Result<(u16, serde_json::Value)> {
        let (server, token) = self.endpoint()?;
        let out_file = tempfile::NamedTempFile::new()?;
        let mut cmd = Command::new("curl");
        cmd.args(["-sk", "-X", method, "-o"])
            .arg(out_file.path())
            .args([
                "-w",
                "%{http_code}",
                "-H",
                &format!("Authorization: Bearer {token}"),
            ]);
        if let Some(ct) = content_type {
            cmd.args(["-H", &format!("Content-Type: {ct}")]);
        }
        let body_file = tempfile::NamedTempFile::new()?;
        if let Some(b) = body {
            std::fs::write(body_file.path(), b)?;
            cmd.arg("--data-binary")
                .arg(format!("@{}", body_file.path().display()));
        }
        cmd.arg(format!("{server}{path}"));
        let out = cmd.output().context("running curl")?;
        let code: u16 = String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .with_context(|| {
                format!(
                    "curl gave no status: {}",
                    String::from_utf8_lossy(&out.stderr)
                )
            })?;
        let text = std::fs::read(out_file.path())?;
        Ok((
            code,
            serde_json::from_slice(&text).unwrap_or(serde_json::Value::Null),
        ))
    }
}

/// The custom resource the tests use: `widgets.test.wasmlet.dev`, namespaced
/// (or `gadgets`, cluster-scoped), versions v1 (storage) and v1beta1 (served),
/// status and scale subresources, and a schema with types, `required`, `enum`,
/// `minimum`/`maximum` and a default.
pub fn widget_crd(plural: &str, kind: &str, scope: &str) -> serde_json::Value {
    let schema = serde_json::json!({
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "required": ["size"],
                "properties": {
                    "size": {"type": "integer", "minimum": 1, "maximum": 10},
                    "color": {"type": "string", "enum": ["red", "green", "blue"]},
                    "mode": {"type": "string", "default": "fast"},
                    "replicas": {"type": "integer"},
                    "selector": {"type": "string"},
                    "tags": {"type": "array", "items": {"type": "string"}},
                },
            },
            "status": {
                "type": "object",
                "properties": {
                    "phase": {"type": "string"},
                    "replicas": {"type": "integer"},
                    "selector": {"type": "string"},
                },
            },
        },
    });
    let version = |name: &str, storage: bool| {
        serde_json::json!({
            "name": name, "served": true, "storage": storage,
            "schema": {"openAPIV3Schema": schema},
            "subresources": {
                "status": {},
                "scale": {
                    "specReplicasPath": ".spec.replicas",
                    "statusReplicasPath": ".status.replicas",
                    "labelSelectorPath": ".status.selector",
                },
            },
        })
    };
    serde_json::json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.test.wasmlet.dev")},
        "spec": {
            "group": "test.wasmlet.dev",
            "scope": scope,
            "names": {"plural": plural, "singular": kind.to_lowercase(), "kind": kind, "listKind": format!("{kind}List")},
            "versions": [version("v1", true), version("v1beta1", false)],
        },
    })
}

/// The `ApiResource` of a custom resource made by [`widget_crd`].
pub fn widget_resource(plural: &str, kind: &str, version: &str) -> kube::core::ApiResource {
    kube::core::ApiResource {
        group: "test.wasmlet.dev".into(),
        version: version.into(),
        api_version: format!("test.wasmlet.dev/{version}"),
        kind: kind.into(),
        plural: plural.into(),
    }
}

/// Creates the `widgets` CRD (namespaced) and returns the v1 `ApiResource`.
pub async fn install_widgets(client: &kube::Client) -> Result<kube::core::ApiResource> {
    install_crd(client, widget_crd("widgets", "Widget", "Namespaced")).await?;
    Ok(widget_resource("widgets", "Widget", "v1"))
}

pub async fn install_crd(client: &kube::Client, crd: serde_json::Value) -> Result<()> {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let crd: CustomResourceDefinition = serde_json::from_value(crd)?;
    kube::Api::<CustomResourceDefinition>::all(client.clone())
        .create(&Default::default(), &crd)
        .await?;
    Ok(())
}

/// A DynamicObject from JSON (apiVersion, kind, metadata, and the rest).
pub fn dynamic(v: serde_json::Value) -> kube::core::DynamicObject {
    serde_json::from_value(v).expect("a valid object")
}

/// A minimal pod.
pub fn pod(name: &str) -> k8s_openapi::api::core::v1::Pod {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "main", "image": "busybox"}]},
    }))
    .expect("a valid pod")
}

pub fn configmap(name: &str, data: &[(&str, &str)]) -> k8s_openapi::api::core::v1::ConfigMap {
    k8s_openapi::api::core::v1::ConfigMap {
        metadata: kube::core::ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        data: Some(
            data.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        ),
        ..Default::default()
    }
}

/// A resourceVersion as a number (this server's are integers).
pub fn rv_of<K: kube::Resource>(o: &K) -> u64 {
    o.meta()
        .resource_version
        .as_deref()
        .and_then(|r| r.parse().ok())
        .expect("a numeric resourceVersion")
}

/// The sum of a metric's samples whose line contains `labels` (e.g.
/// `controller="trap"`), from a Prometheus text exposition.
pub fn metric(text: &str, name: &str, labels: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(name) && l.contains(labels))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// `wasmlet run --kubeconfig KC --data-dir TMP --plugins TMP/plugins
/// --metrics-addr 127.0.0.1:0 EXTRA...`: the host alone, against a plane
/// started separately (`Plane::start`). Put plugins into [`Host::plugin_dir`].
pub struct Host {
    pub dir: tempfile::TempDir,
    pub child: Option<Child>,
}

impl Host {
    pub async fn start(kubeconfig: &Path, extra: &[&str]) -> Result<Host> {
        let bin = wasmlet_bin();
        if !bin.exists() {
            bail!(
                "{} does not exist: build it first (cargo build -p wasmlet)",
                bin.display()
            );
        }
        let dir = tempfile::tempdir()?;
        std::fs::create_dir_all(dir.path().join("plugins"))?;
        let log = std::fs::File::create(dir.path().join("wasmlet.log"))?;
        let out = std::fs::File::create(dir.path().join("wasmlet.out"))?;
        let child = Command::new(&bin)
            .arg("run")
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .arg("--data-dir")
            .arg(dir.path())
            .arg("--plugins")
            .arg(dir.path().join("plugins"))
            .args(["--metrics-addr", "127.0.0.1:0"])
            .args(extra)
            .env(
                "WASMLET_LOG",
                std::env::var("WASMLET_LOG").unwrap_or_else(|_| "info".into()),
            )
            .stdout(out)
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        let mut host = Host {
            dir,
            child: Some(child),
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while host.metrics_url_now().is_none() {
            if let Some(status) = host
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                bail!("wasmlet run exited early ({status}); log:\n{}", host.log());
            }
            if Instant::now() > deadline {
                bail!(
                    "wasmlet run did not serve metrics in 30 s; log:\n{}",
                    host.log()
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(host)
    }

    pub fn plugin_dir(&self) -> PathBuf {
        self.dir.path().join("plugins")
    }

    /// Ctrl-C (SIGINT): the graceful shutdown path. Waits up to `timeout` for
    /// the process to exit and returns whether it did.
    pub async fn interrupt(&mut self, timeout: Duration) -> Result<bool> {
        let Some(child) = self.child.as_mut() else {
            return Ok(true);
        };
        Command::new("kill")
            .args(["-INT", &child.id().to_string()])
            .status()?;
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if child.try_wait()?.is_some() {
                self.child = None;
                return Ok(true);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(false)
    }

    fn metrics_url_now(&self) -> Option<String> {
        let out = std::fs::read_to_string(self.dir.path().join("wasmlet.out")).ok()?;
        out.lines().find_map(|l| {
            l.strip_prefix("wasmlet: metrics on ")
                .map(|u| u.trim().to_string())
        })
    }

    /// The metrics text exposition.
    pub fn metrics(&self) -> Result<String> {
        let url = self.metrics_url_now().context("no metrics address yet")?;
        let out = Command::new("curl").args(["-sf", &url]).output()?;
        if !out.status.success() {
            bail!("GET {url} failed");
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    pub fn log(&self) -> String {
        read_log(self.dir.path())
    }

    /// `kill -9`: no shutdown path runs (no lease release, nothing flushed).
    pub fn kill9(&mut self) {
        kill9(&mut self.child);
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// The crate an offline cargo found missing from its cache, from its output:
/// a download refused (`failed to download `ryu v1.0.23``, the crate file
/// absent) or a resolution that found nothing (`no matching package named
/// `serde_yaml``, the crate's index entry absent).
fn missing_crate(out: &str) -> Option<String> {
    if !out.contains("--offline") {
        return None;
    }
    let quoted = |before: &str| Some(out.split(before).nth(1)?.split('`').next()?.to_owned());
    quoted("failed to download `")
        .or_else(|| quoted("no matching package named `"))
        .or_else(|| quoted("failed to select a version for the requirement `"))
        .or_else(|| quoted("failed to get `"))
}

/// An offline cargo run's failure in a scaffolded crate: when a crate was
/// missing from the cache, an error that names it and what to run, with
/// cargo's own words under it; else the failure as it was.
pub fn offline_error(e: anyhow::Error) -> anyhow::Error {
    let Some(krate) = missing_crate(&format!("{e:#}")) else {
        return e;
    };
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cargo")))
        .unwrap_or_default();
    e.context(format!(
        "`{krate}` is not in the cargo cache ({}/registry), and the scaffolded crate builds \
         offline on the versions this workspace's Cargo.lock pins: run `cargo fetch` at the \
         workspace root ({}) with this CARGO_HOME, which downloads all of them, then rerun",
        home.display(),
        workspace
            .canonicalize()
            .unwrap_or(workspace.clone())
            .display()
    ))
}

/// `cargo ARGS --offline` in `dir`, a crate `wasmlet plugin new` wrote, with
/// one target directory (`target/scaffold`) shared by every scaffold test and
/// run, so only the first builds the dependencies. A crate missing from the
/// cargo cache is named ([`offline_error`]).
pub fn scaffold_cargo(dir: &std::path::Path, args: &[&str]) -> Result<()> {
    let out = Command::new(env!("CARGO"))
        .args(args)
        .arg("--offline")
        .current_dir(dir)
        .env(
            "CARGO_TARGET_DIR",
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/scaffold"),
        )
        .output()?;
    if !out.status.success() {
        return Err(offline_error(anyhow::anyhow!(
            "cargo {args:?} in {}: {}{}",
            dir.display(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    Ok(())
}
