//! The process, its ports and its manifest parsing, attacked from outside
//! (issue 30 rows 7, 8, 10, 11, 13, 15): a second host on a data directory in
//! use, SIGTERM and a second signal, random bearer tokens at the kubelet port,
//! log options at the edge of i64, `http-hosts` entries that do not parse,
//! and the status page seen from another address.

use std::path::Path;
use std::process::{Command, ExitStatus};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use kube::api::{Api, PostParams, WatchParams};
use serde_json::json;
use wasmlet_e2e::summary::{create_configmap, create_summary, ready, summaries};
use wasmlet_e2e::workload_plane::{self, workload};
use wasmlet_e2e::{Plane, built_plugins, eventually, install_plugin, wasmlet_bin};

/// Waits up to `secs` for `child` to exit (killed past it, and an error).
async fn wait_exit(mut child: std::process::Child, secs: u64) -> Result<ExitStatus> {
    let pid = child.id();
    let waiting = tokio::task::spawn_blocking(move || child.wait());
    match tokio::time::timeout(Duration::from_secs(secs), waiting).await {
        Ok(status) => Ok(status??),
        Err(_) => {
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
            bail!("pid {pid} still ran {secs} s later")
        }
    }
}

fn signal(pid: u32, sig: &str) -> Result<()> {
    let ok = Command::new("kill")
        .args([&format!("-{sig}"), &pid.to_string()])
        .status()?
        .success();
    ensure!(ok, "kill -{sig} {pid} failed");
    Ok(())
}

/// Another client writes a ConfigMap and reads it back: the plane serves.
async fn plane_serves(plane: &Plane, name: &str) -> Result<()> {
    let cms: Api<ConfigMap> = Api::namespaced(plane.client().await?, "default");
    cms.create(
        &PostParams::default(),
        &wasmlet_e2e::configmap(name, &[("k", "v")]),
    )
    .await
    .with_context(|| format!("writing {name}"))?;
    let back = cms.get(name).await?;
    ensure!(back.data.unwrap_or_default().get("k").map(String::as_str) == Some("v"));
    Ok(())
}

// ---- row 7: one host per data directory ------------------------------------------

#[tokio::test]
async fn a_second_host_on_a_data_directory_in_use_is_refused_and_the_first_keeps_serving()
-> Result<()> {
    let mut plane = Plane::start_up(&[]).await?;
    let first_pid = plane.child.as_ref().context("running")?.id();
    plane_serves(&plane, "before").await?;
    let dir = plane.data_dir().to_path_buf();
    let kubeconfigs = ["kubeconfig", "kubeconfig-controller", "kubeconfig-node"];
    let before: Vec<Vec<u8>> = kubeconfigs
        .iter()
        .map(|k| std::fs::read(dir.join(k)))
        .collect::<std::io::Result<_>>()?;

    let kubeconfig = plane.kubeconfig().display().to_string();
    let attempts: [&[&str]; 3] = [
        &[
            "up",
            "--port",
            "0",
            "--metrics-addr",
            "127.0.0.1:0",
            "--kubelet-port",
            "0",
        ],
        &["apiserver", "--port", "0"],
        &[
            "run",
            "--kubeconfig",
            &kubeconfig,
            "--metrics-addr",
            "127.0.0.1:0",
        ],
    ];
    for args in attempts {
        let run = tokio::process::Command::new(wasmlet_bin())
            .args(args)
            .arg("--data-dir")
            .arg(&dir)
            .kill_on_drop(true)
            .output();
        // Refused at start-up; the bound only ends one that kept running.
        let out = tokio::time::timeout(Duration::from_secs(60), run)
            .await
            .with_context(|| format!("wasmlet {args:?} on a directory in use kept running"))??;
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "wasmlet {args:?} started: {stderr}");
        assert!(
            stderr.contains(&format!(
                "data directory {} is in use by another wasmlet (pid {first_pid})",
                dir.display()
            )),
            "{args:?}: the error names the directory and the holder: {stderr}"
        );
    }
    for (k, was) in kubeconfigs.iter().zip(&before) {
        assert_eq!(&std::fs::read(dir.join(k))?, was, "{k} was rewritten");
    }
    // The first still takes writes (they failed with `UNIQUE constraint
    // failed: log.rv` once a second plane had opened the database).
    plane_serves(&plane, "after").await?;

    // The kernel drops the lock with the process: a crash leaves none behind.
    plane.kill9();
    plane.spawn().await?;
    let cms: Api<ConfigMap> = Api::namespaced(plane.client().await?, "default");
    for name in ["before", "after"] {
        cms.get(name)
            .await
            .with_context(|| format!("{name} lost"))?;
    }
    plane_serves(&plane, "restarted").await?;
    Ok(())
}

// ---- row 8: SIGTERM drains as SIGINT does ---------------------------------------

#[tokio::test]
async fn sigterm_drains_and_exits_zero_and_a_restart_keeps_every_object() -> Result<()> {
    let mut plane = Plane::start_up_with(&["--leader-elect"], &["configmap-summary"]).await?;
    let client = plane.client().await?;
    let api = summaries(&client);
    eventually(Duration::from_secs(60), "the ConfigSummary CRD", || async {
        api.list(&Default::default()).await.ok()
    })
    .await?;
    create_configmap(&client, "cm1", "s1", 3).await?;
    create_summary(&api, "s1", json!({})).await?;
    eventually(Duration::from_secs(60), "s1 Ready", || async {
        (ready(&api.get("s1").await.ok()?)? == "True").then_some(())
    })
    .await?;
    eventually(Duration::from_secs(30), "the leader lease", || async {
        plane.log().contains("became leader").then_some(())
    })
    .await?;

    let child = plane.child.take().context("running")?;
    signal(child.id(), "TERM")?;
    // The drain is bounded at 25 s; past it the process exits 1.
    let status = wait_exit(child, 60).await?;
    let log = plane.log();
    assert_eq!(
        status.code(),
        Some(0),
        "SIGTERM: {status} (rc 143 / killed by the signal before); log:\n{log}"
    );
    for step in [
        "SIGTERM: draining",
        "drain: reconciles stopped",
        "drain: leader lease released",
        "drain: node NotReady",
        "drained in",
    ] {
        assert!(log.contains(step), "the log lacks {step:?}:\n{log}");
    }

    plane.spawn().await?;
    let client = plane.client().await?;
    let api = summaries(&client);
    let s1 = api.get("s1").await.context("s1 lost")?;
    assert_eq!(ready(&s1).as_deref(), Some("True"), "{s1:?}");
    Api::<ConfigMap>::namespaced(client.clone(), "default")
        .get("cm1")
        .await
        .context("cm1 lost")?;
    plane_serves(&plane, "after-restart").await?;
    Ok(())
}

/// The kubelet's graceful node shutdown: each pod's workloads get
/// min(terminationGracePeriodSeconds, the shutdown bound), not one fixed
/// grace for all (the host gave every workload 10 s).
#[tokio::test]
async fn sigterm_gives_each_pods_workloads_its_own_grace_up_to_the_bound() -> Result<()> {
    let (mut plane, client) = workload_plane::start_with("scheduler,wasi-runner", &[]).await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    for (name, grace) in [("quick", 0), ("brief", 2), ("patient", 600)] {
        let mut spec = workload_plane::sleeper_spec();
        spec["terminationGracePeriodSeconds"] = json!(grace);
        let pod = serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec}))?;
        pods.create(&PostParams::default(), &pod).await?;
    }
    for name in ["quick", "brief", "patient"] {
        eventually(
            Duration::from_secs(90),
            &format!("{name} running"),
            || async {
                let p = pods.get(name).await.ok()?;
                workload_plane::is_ready(&p).then_some(())
            },
        )
        .await?;
    }
    let child = plane.child.take().context("running")?;
    signal(child.id(), "TERM")?;
    let status = wait_exit(child, 60).await?;
    let log = plane.log();
    assert_eq!(status.code(), Some(0), "{status}; log:\n{log}");
    let granted = |pod: &str| {
        log.lines()
            .find(|l| {
                l.contains("drain: stopping the pod's workloads")
                    && l.contains(&format!("pod=default/{pod} "))
            })
            .and_then(|l| l.split("grace=").nth(1))
            .map(|g| g.split_whitespace().next().unwrap_or("").to_string())
    };
    assert_eq!(granted("quick").as_deref(), Some("0ns"), "log:\n{log}");
    assert_eq!(granted("brief").as_deref(), Some("2s"), "log:\n{log}");
    // 600 s is past the host's 10 s bound (the drain itself ends within 25 s).
    assert_eq!(granted("patient").as_deref(), Some("10s"), "log:\n{log}");
    assert!(log.contains("drained in"), "{log}");
    Ok(())
}

#[tokio::test]
async fn a_second_signal_during_the_drain_exits_at_once() -> Result<()> {
    let mut plane = Plane::start_up(&[]).await?;
    let client = plane.client().await?;
    // An open watch holds the API server's drain (its connections get up to
    // 5 s to end), so the drain is still running when the second signal comes.
    let cms: Api<ConfigMap> = Api::namespaced(client, "default");
    let watch = cms.watch(&WatchParams::default(), "0").await?;
    let child = plane.child.take().context("running")?;
    let pid = child.id();
    signal(pid, "TERM")?;
    eventually(Duration::from_secs(30), "the drain to start", || async {
        plane.log().contains("SIGTERM: draining").then_some(())
    })
    .await?;
    signal(pid, "INT")?;
    let status = wait_exit(child, 60).await?;
    drop(watch);
    let log = plane.log();
    assert_eq!(
        status.code(),
        Some(128 + 2),
        "a second signal ends the process at once, as SIGINT would: {status}; log:\n{log}"
    );
    assert!(
        log.contains("SIGINT again: exiting without finishing the drain"),
        "{log}"
    );
    assert!(!log.contains("drained in"), "{log}");
    // Nothing stored is lost: every write was committed before it was answered.
    plane.spawn().await?;
    plane_serves(&plane, "after-second-signal").await?;
    Ok(())
}

// ---- row 10: random bearer tokens at the kubelet port ----------------------------

/// A client of the kubelet port (its serving certificate is the plane's;
/// not verified, as kube-apiserver does not by default) with no credentials
/// of its own: each request carries the bearer token it is given.
fn kubelet_client(port: u16) -> Result<kube::Client> {
    let mut config = kube::Config::new(format!("https://127.0.0.1:{port}").parse()?);
    config.accept_invalid_certs = true;
    config.default_retry = false;
    Ok(kube::Client::try_from(config)?)
}

async fn kubelet_get(client: &kube::Client, path: &str, token: &str) -> Result<(u16, String)> {
    let req = http::Request::get(path)
        .header("authorization", format!("Bearer {token}"))
        .body(Vec::new())?;
    match client.request_text(req).await {
        Ok(text) => Ok((200, text)),
        Err(kube::Error::Api(s)) => Ok((s.code, s.message.clone())),
        Err(e) => Err(e.into()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_bearer_tokens_at_the_kubelet_port_then_a_valid_one_still_works() -> Result<()> {
    let node = "node-tokens";
    let plane = Plane::start_up(&["--node-name", node]).await?;
    install_plugin(&plane.plugin_dir(), "wasi-runner")?;
    let nodes: Api<Node> = Api::all(plane.client().await?);
    let port = eventually(Duration::from_secs(30), "the kubelet port", || async {
        let n = nodes.get_opt(node).await.ok().flatten()?;
        Some(n.status?.daemon_endpoints?.kubelet_endpoint?.port)
    })
    .await?;
    let kubelet = kubelet_client(port.try_into()?)?;
    let path = "/containerLogs/default/nobody/main";
    // More random tokens than the cache holds (4096), from 8 callers at once.
    const TOKENS: usize = 6_000;
    let started = Instant::now();
    let mut callers = tokio::task::JoinSet::new();
    for c in 0..8 {
        let kubelet = kubelet.clone();
        callers.spawn(async move {
            for i in (c..TOKENS).step_by(8) {
                let token = format!("random-{i}-{}", rand::random::<u64>());
                let (code, body) = kubelet_get(&kubelet, path, &token).await?;
                ensure!(code == 401, "token {i}: {code} {body}");
            }
            anyhow::Ok(())
        });
    }
    while let Some(r) = callers.join_next().await {
        r??;
    }
    let took = started.elapsed();
    println!(
        "{TOKENS} random tokens refused in {:.2} s: {:.0} requests/s",
        took.as_secs_f64(),
        TOKENS as f64 / took.as_secs_f64()
    );
    // The admin's token: reviewed, then authorized, then the pod is looked up.
    let (_, admin) = plane.endpoint()?;
    let (code, body) = kubelet_get(&kubelet, path, &admin).await?;
    assert_eq!(code, 404, "a valid token after the flood: {body}");
    assert!(body.contains("pod default/nobody not found"), "{body}");
    plane_serves(&plane, "after-tokens").await?;
    Ok(())
}

// ---- row 11: log options at the edge of i64 --------------------------------------

/// `GET url` with the admin token: (status, body).
fn curl(plane: &Plane, path_and_query: &str) -> Result<(u16, String)> {
    let (server, token) = plane.endpoint()?;
    let out = Command::new("curl")
        .args(["-sk", "-w", "\n%{http_code}", "-H"])
        .arg(format!("Authorization: Bearer {token}"))
        .arg(format!("{server}{path_and_query}"))
        .output()?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').context("curl printed no status")?;
    Ok((code.trim().parse()?, body.to_string()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extreme_log_options_mean_everything_or_422_never_a_503() -> Result<()> {
    let (plane, client) = workload_plane::start_with("scheduler,wasi-runner", &[]).await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "hello"},
        "spec": {
            "nodeName": workload_plane::NODE, "restartPolicy": "Never",
            "tolerations": [{"key": "kubernetes.io/arch", "operator": "Exists"}],
            "containers": [{"name": "main", "image": workload("hello.wasm"), "args": ["a"]}]
        }
    }))?;
    pods.create(&PostParams::default(), &pod).await?;
    eventually(Duration::from_secs(60), "hello Succeeded", || async {
        let p = pods.get("hello").await.ok()?;
        (p.status?.phase? == "Succeeded").then_some(())
    })
    .await?;
    let all = plane.kubectl_ok(&["logs", "hello"])?;
    ensure!(all.contains("hello from main"), "{all}");
    let log = "/api/v1/namespaces/default/pods/hello/log";
    let max = i64::MAX;
    // Huge values: every line (sinceSeconds this large once panicked the
    // kubelet handler, and the plane answered 503).
    for q in [
        format!("sinceSeconds={max}"),
        format!("tailLines={max}"),
        format!("limitBytes={max}"),
        format!(
            "sinceSeconds={}&tailLines={max}&limitBytes={max}",
            max / 1000
        ),
        "sinceTime=0001-01-01T00:00:00Z".to_string(),
    ] {
        let (code, body) = curl(&plane, &format!("{log}?{q}"))?;
        assert_eq!(code, 200, "{q}: {body}");
        assert_eq!(body, all, "{q}");
    }
    // kubectl's own flags at their largest.
    let since = plane.kubectl_ok(&["logs", "hello", "--since=2562047h"])?;
    assert_eq!(since, all);
    let tail = plane.kubectl_ok(&["logs", "hello", &format!("--tail={max}")])?;
    assert_eq!(tail, all);
    // What upstream's ValidatePodLogOptions refuses: 422, naming the field.
    for (q, says) in [
        (
            "sinceSeconds=0",
            "sinceSeconds: Invalid value: 0: must be greater than 0",
        ),
        (
            "sinceSeconds=-9223372036854775808",
            "sinceSeconds: Invalid value: -9223372036854775808: must be greater than 0",
        ),
        (
            "tailLines=-1",
            "tailLines: Invalid value: -1: must be greater than or equal to 0",
        ),
        (
            "limitBytes=0",
            "limitBytes: Invalid value: 0: must be greater than 0",
        ),
        (
            "sinceSeconds=5&sinceTime=2026-01-01T00:00:00Z",
            "at most one of `sinceTime` or `sinceSeconds` may be specified",
        ),
    ] {
        let (code, body) = curl(&plane, &format!("{log}?{q}"))?;
        assert_eq!(code, 422, "{q}: {body}");
        assert!(
            body.contains("PodLogOptions \\\"hello\\\" is invalid") && body.contains(says),
            "{q}: {body}"
        );
    }
    // Not a number at all (past i64): 400.
    for q in ["sinceSeconds=9223372036854775808", "tailLines=many"] {
        let (code, body) = curl(&plane, &format!("{log}?{q}"))?;
        assert_eq!(code, 400, "{q}: {body}");
    }
    assert_eq!(plane.kubectl_ok(&["logs", "hello"])?, all);
    plane_serves(&plane, "after-logs").await?;
    Ok(())
}

// ---- row 13: http-hosts entries that do not parse --------------------------------

/// Copies the built configmap-summary as plugin `name` into `dir`, its
/// `http-hosts` set to `hosts`.
fn install_with_hosts(dir: &Path, name: &str, hosts: &str) -> Result<()> {
    let src = built_plugins();
    let toml = std::fs::read_to_string(src.join("configmap-summary.toml"))?;
    ensure!(toml.contains("http-hosts = []"), "{toml}");
    let toml = toml.replace("http-hosts = []", &format!("http-hosts = {hosts}"));
    std::fs::copy(
        src.join("configsummary.crd.yaml"),
        dir.join("configsummary.crd.yaml"),
    )?;
    std::fs::write(dir.join(format!("{name}.toml")), toml)?;
    std::fs::copy(
        src.join("configmap-summary.wasm"),
        dir.join(format!("{name}.wasm")),
    )?;
    Ok(())
}

#[tokio::test]
async fn an_http_host_whose_port_does_not_parse_is_a_manifest_error() -> Result<()> {
    let dir = tempfile::tempdir()?;
    for (hosts, field, says) in [
        (
            r#"["name:abc"]"#,
            "permissions.http-hosts[0]",
            r#"port "abc""#,
        ),
        (
            r#"["ok.example.com", "name:70000"]"#,
            "permissions.http-hosts[1]",
            r#"port "70000""#,
        ),
        (
            r#"[":443"]"#,
            "permissions.http-hosts[0]",
            "the host is empty",
        ),
    ] {
        install_with_hosts(dir.path(), "bad-hosts", hosts)?;
        let out = Command::new(wasmlet_bin())
            .args(["plugin", "check"])
            .arg(dir.path().join("bad-hosts.wasm"))
            .output()?;
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(!out.status.success(), "{hosts} passed the check: {text}");
        assert!(
            text.contains(&format!("bad-hosts.toml: {field}: ")) && text.contains(says),
            "{hosts}: {text}"
        );
    }
    // The host refuses that plugin and loads the others.
    let plane = Plane::start_up_with(&[], &["configmap-summary"]).await?;
    install_with_hosts(&plane.plugin_dir(), "bad-hosts", r#"["name:abc"]"#)?;
    eventually(Duration::from_secs(60), "bad-hosts refused", || async {
        let log = plane.log();
        (log.contains("bad-hosts") && log.contains("permissions.http-hosts[0]")).then_some(())
    })
    .await?;
    let client = plane.client().await?;
    let api = summaries(&client);
    eventually(Duration::from_secs(60), "the ConfigSummary CRD", || async {
        api.list(&Default::default()).await.ok()
    })
    .await?;
    create_configmap(&client, "cm1", "s1", 2).await?;
    create_summary(&api, "s1", json!({})).await?;
    eventually(Duration::from_secs(60), "s1 Ready", || async {
        (ready(&api.get("s1").await.ok()?)? == "True").then_some(())
    })
    .await?;
    let log = plane.log();
    assert!(
        !log.lines()
            .any(|l| l.contains("bad-hosts") && l.contains("plugin loaded")),
        "bad-hosts was loaded:\n{log}"
    );
    Ok(())
}

// ---- row 15: the status page from another address --------------------------------

/// `GET path` on `addr` from source address `from`, over a raw HTTP/1.1
/// connection: (status, body).
async fn get_from(
    from: &str,
    addr: &str,
    path: &str,
    token: Option<&str>,
) -> Result<(u16, String)> {
    get_from_as(from, addr, addr, path, token).await
}

/// [`get_from`] with `Host: host`.
async fn get_from_as(
    from: &str,
    addr: &str,
    host: &str,
    path: &str,
    token: Option<&str>,
) -> Result<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let socket = tokio::net::TcpSocket::new_v4()?;
    socket.bind(format!("{from}:0").parse()?)?;
    let mut conn = socket.connect(addr.parse()?).await?;
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    conn.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: {host}\r\n{auth}Connection: close\r\n\r\n")
            .as_bytes(),
    )
    .await?;
    let mut raw = Vec::new();
    conn.read_to_end(&mut raw).await?;
    let text = String::from_utf8_lossy(&raw).into_owned();
    let code = text.split(' ').nth(1).context("no status line")?.parse()?;
    let body = text.split_once("\r\n\r\n").map(|x| x.1).unwrap_or("");
    Ok((code, body.to_string()))
}

#[tokio::test]
async fn the_status_page_needs_loopback_or_a_token_allowed_the_path() -> Result<()> {
    let dir = tempfile::tempdir()?;
    std::fs::create_dir_all(dir.path().join("plugins"))?;
    let mut plane = Plane {
        args: [
            "up",
            "--metrics-addr",
            "127.0.0.2:0",
            "--kubelet-port",
            "0",
            "--builtin-plugins",
            "scheduler,wasi-runner",
            "--plugins",
        ]
        .iter()
        .map(|s| s.to_string())
        .chain([dir.path().join("plugins").display().to_string()])
        .collect(),
        dir,
        child: None,
        limits: Default::default(),
    };
    plane.spawn().await?;
    let url = plane.metrics_url().await?;
    let addr = url
        .strip_prefix("http://")
        .and_then(|u| u.strip_suffix("/metrics"))
        .context(url.clone())?
        .to_string();
    ensure!(addr.starts_with("127.0.0.2:"), "{addr}");

    let client = plane.client().await?;
    let admin = |yaml: serde_json::Value| -> Result<()> {
        let path = plane.data_dir().join("rbac.json");
        std::fs::write(&path, yaml.to_string())?;
        plane.kubectl_ok(&["apply", "-f", &path.display().to_string()])?;
        Ok(())
    };
    for sa in ["viewer", "nobody"] {
        plane.kubectl_ok(&["create", "serviceaccount", sa])?;
    }
    admin(json!({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
         "metadata": {"name": "wasmlet-status-viewer"},
         "rules": [{"nonResourceURLs": ["/", "/status", "/shadow/*"], "verbs": ["get"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": "viewer-status"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "wasmlet-status-viewer"},
         "subjects": [{"kind": "ServiceAccount", "name": "viewer", "namespace": "default"}]}
    ]}))?;
    let viewer = plane.kubectl_ok(&["create", "token", "viewer"])?;
    let nobody = plane.kubectl_ok(&["create", "token", "nobody"])?;
    let (viewer, nobody) = (viewer.trim(), nobody.trim());

    let remote = "127.0.0.3";
    for path in ["/", "/status", "/shadow/configmap-summary"] {
        let (code, body) = get_from(remote, &addr, path, None).await?;
        assert_eq!(code, 401, "{path} anonymous from {remote}: {body}");
        let (code, body) = get_from(remote, &addr, path, Some("not-a-token")).await?;
        assert_eq!(code, 401, "{path} with a bad token: {body}");
        let (code, body) = get_from(remote, &addr, path, Some(nobody)).await?;
        assert_eq!(code, 403, "{path} as nobody: {body}");
        assert!(
            body.contains("system:serviceaccount:default:nobody") && body.contains(path),
            "the refusal names the user and the path: {body}"
        );
    }
    let (code, body) = get_from(remote, &addr, "/", Some(viewer)).await?;
    assert_eq!(code, 200, "/ as viewer: {body}");
    assert!(
        body.contains("<html") || body.contains("<!DOCTYPE"),
        "{body}"
    );
    // `wasmlet status`'s JSON, as the page.
    let (code, body) = get_from(remote, &addr, "/status", Some(viewer)).await?;
    assert_eq!(code, 200, "/status as viewer: {body}");
    assert!(body.starts_with("{\"plugins\":["), "{body}");
    // Authorized, and then the plugin is looked for.
    let (code, body) = get_from(remote, &addr, "/shadow/none", Some(viewer)).await?;
    assert_eq!(code, 404, "/shadow/none as viewer: {body}");
    // Scrapers and probes need nothing.
    for path in ["/metrics", "/healthz"] {
        let (code, body) = get_from(remote, &addr, path, None).await?;
        assert_eq!(code, 200, "{path} from {remote}: {body}");
    }
    // Ready once the host has loaded its plugins (500 until then, as
    // kube-apiserver's failing /readyz; never 401).
    eventually(
        Duration::from_secs(60),
        "/readyz from 127.0.0.3",
        || async {
            let (code, _) = get_from(remote, &addr, "/readyz", None).await.ok()?;
            assert!(code == 200 || code == 500, "/readyz: {code}");
            (code == 200).then_some(())
        },
    )
    .await?;
    // The machine itself (127.0.0.1) needs no token.
    let (code, body) = get_from("127.0.0.1", &addr, "/", None).await?;
    assert_eq!(code, 200, "/ from 127.0.0.1: {body}");
    // ... when it names this server: a page on another name that resolves
    // to 127.0.0.1 (DNS rebinding) gets 421, unless it holds a token.
    let port = addr.rsplit_once(':').context("a port")?.1;
    for host in [format!("localhost:{port}"), "127.0.0.1:8001".into()] {
        let (code, body) = get_from_as("127.0.0.1", &addr, &host, "/status", None).await?;
        assert_eq!(code, 200, "Host {host}: {body}");
    }
    for path in ["/", "/status", "/shadow/configmap-summary"] {
        let (code, body) = get_from_as(
            "127.0.0.1",
            &addr,
            &format!("evil.example:{port}"),
            path,
            None,
        )
        .await?;
        assert_eq!(code, 421, "{path} for evil.example: {body}");
        assert!(
            body.contains("\"evil.example:") && body.contains("does not name this server"),
            "{body}"
        );
    }
    let (code, body) =
        get_from_as("127.0.0.1", &addr, "evil.example", "/status", Some(viewer)).await?;
    assert_eq!(code, 200, "a token from loopback, any Host: {body}");
    drop(client);
    plane_serves(&plane, "after-status").await?;
    Ok(())
}
