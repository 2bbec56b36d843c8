//! Honest health end to end (issue 33): the host's `/readyz`, `/livez` and
//! `/healthz` on its metrics address in kube-apiserver's per-check format, and
//! the Node's Ready condition, while the provider plugin is missing, then
//! rejected (a module that does not compile), then good; and the pod-state
//! and `process_*` metrics after a WASI pod runs. Raw HTTP (curl) for the
//! endpoints, the kube client for the Node and the pod.

use std::io::{BufRead, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail, ensure};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;
use wasmlet_e2e::workload_plane::{workload, workloads_dir};
use wasmlet_e2e::{Plane, eventually, install_plugin, metric};

/// `GET PATH` on the host's metrics address: (status, body).
async fn get(plane: &Plane, path: &str) -> Result<(u16, String)> {
    plane.http_get(path).await
}

/// The Node's condition `type_`: (status, reason, message).
async fn condition(nodes: &Api<Node>, node: &str, type_: &str) -> Option<(String, String, String)> {
    let n = nodes.get_opt(node).await.ok()??;
    let c = n
        .status?
        .conditions?
        .into_iter()
        .find(|c| c.type_ == type_)?;
    Some((
        c.status,
        c.reason.unwrap_or_default(),
        c.message.unwrap_or_default(),
    ))
}

/// Waits until the Node's Ready condition has `status` and `reason`; returns its message.
async fn wait_ready(
    plane: &Plane,
    nodes: &Api<Node>,
    node: &str,
    status: &str,
    reason: &str,
) -> Result<String> {
    wait_condition(plane, nodes, node, "Ready", status, reason).await
}

/// Waits until the Node's condition `type_` has `status` and `reason`; returns its message.
async fn wait_condition(
    plane: &Plane,
    nodes: &Api<Node>,
    node: &str,
    type_: &str,
    status: &str,
    reason: &str,
) -> Result<String> {
    let last = std::sync::Mutex::new(None);
    let found = eventually(
        Duration::from_secs(60),
        &format!("Node {node} {type_}={status} ({reason})"),
        || async {
            let r = condition(nodes, node, type_).await;
            *last.lock().unwrap() = r.clone();
            r.filter(|(s, why, _)| s == status && why == reason)
                .map(|(_, _, m)| m)
        },
    )
    .await;
    match found {
        Ok(m) => Ok(m),
        Err(e) => bail!(
            "{e}; last {type_}: {:?}\nlog:\n{}",
            last.lock().unwrap(),
            plane.log()
        ),
    }
}

/// Waits until `/readyz?verbose` answers `code` with every line of `lines`.
async fn wait_readyz(plane: &Plane, code: u16, lines: &[&str]) -> Result<String> {
    eventually(
        Duration::from_secs(60),
        &format!("/readyz?verbose {code} with {lines:?}"),
        || async {
            let (c, body) = get(plane, "/readyz?verbose").await.ok()?;
            (c == code && lines.iter().all(|l| body.lines().any(|b| b == *l))).then_some(body)
        },
    )
    .await
}

#[tokio::test]
async fn readyz_and_the_node_report_a_missing_then_rejected_provider_until_a_good_one_loads()
-> Result<()> {
    let node = "health-node";
    let modules = workloads_dir().display().to_string();
    // The scheduler only: the provider (wasi-runner) is in no plugin directory.
    let plane = Plane::start_up(&[
        "--node-name",
        node,
        "--builtin-plugins",
        "scheduler",
        "--allow-file-images",
        &modules,
    ])
    .await?;
    let client = plane.client().await?;
    let nodes: Api<Node> = Api::all(client.clone());

    // Missing.
    let message = wait_ready(&plane, &nodes, node, "False", "ProviderMissing").await?;
    ensure!(message.contains("wasi-runner"), "{message}");
    let body = wait_readyz(
        &plane,
        500,
        &[
            "[+]ping ok",
            "[+]store ok",
            "[+]caches-synced ok",
            "[+]plugin-set ok",
            "[-]node-agent failed: reason withheld",
            "[+]shutdown ok",
            "readyz check failed",
        ],
    )
    .await?;
    ensure!(!body.contains("leader-lease"), "no --leader-elect:\n{body}");
    assert_eq!(
        get(&plane, "/readyz?exclude=node-agent").await?,
        (200, "ok".to_string())
    );
    let (code, why) = get(&plane, "/readyz/node-agent").await?;
    ensure!(
        code == 500 && why.contains("ProviderMissing") && why.contains("wasi-runner"),
        "{code} {why}"
    );
    assert_eq!(get(&plane, "/healthz").await?, (200, "ok".to_string()));
    let (code, live) = get(&plane, "/livez?verbose").await?;
    ensure!(
        code == 200 && live.ends_with("livez check passed\n") && !live.contains("node-agent"),
        "{code} {live}"
    );

    // Rejected: a manifest with a module that does not compile.
    let dir = plane.plugin_dir();
    let toml = std::fs::read_to_string(wasmlet_e2e::built_plugins().join("wasi-runner.toml"))?;
    std::fs::write(dir.join("wasi-runner.toml"), toml)?;
    std::fs::write(
        dir.join(".wasi-runner.wasm"),
        b"\0asm but not really a component",
    )?;
    std::fs::rename(dir.join(".wasi-runner.wasm"), dir.join("wasi-runner.wasm"))?;
    let message = wait_ready(&plane, &nodes, node, "False", "ProviderRejected").await?;
    ensure!(
        message.contains("provider plugin wasi-runner was rejected"),
        "{message}"
    );
    wait_readyz(
        &plane,
        500,
        &[
            "[-]plugin-set failed: reason withheld",
            "[-]node-agent failed: reason withheld",
            "readyz check failed",
        ],
    )
    .await?;
    let (code, why) = get(&plane, "/readyz/plugin-set").await?;
    ensure!(
        code == 500 && why.contains("wasi-runner (rejected: "),
        "{code} {why}"
    );
    assert_eq!(get(&plane, "/healthz").await?, (200, "ok".to_string()));
    // A pod bound meanwhile waits for the provider: Pending, not failed.
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    pods.create(&PostParams::default(), &hello_pod("before-fix", node))
        .await?;

    // Fixed: the good version loads; the Node and /readyz recover.
    install_plugin(&dir, "wasi-runner")?;
    let message = wait_ready(&plane, &nodes, node, "True", "KubeletReady").await?;
    ensure!(message == "wasmlet is posting ready status", "{message}");
    wait_readyz(
        &plane,
        200,
        &[
            "[+]plugin-set ok",
            "[+]node-agent ok",
            "readyz check passed",
        ],
    )
    .await?;
    assert_eq!(get(&plane, "/readyz").await?, (200, "ok".to_string()));
    assert_eq!(get(&plane, "/healthz").await?, (200, "ok".to_string()));

    // The node runs pods again: the one that waited, and a new one.
    pods.create(&PostParams::default(), &hello_pod("after-fix", node))
        .await?;
    for name in ["before-fix", "after-fix"] {
        eventually(
            Duration::from_secs(60),
            &format!("pod {name} Succeeded"),
            || async {
                let p = pods.get_opt(name).await.ok()??;
                (p.status?.phase? == "Succeeded").then_some(())
            },
        )
        .await
        .with_context(|| plane.log())?;
    }
    Ok(())
}

fn hello_pod(name: &str, node: &str) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {
            "nodeName": node,
            "restartPolicy": "Never",
            "tolerations": [{"key": "kubernetes.io/arch", "operator": "Exists"}],
            "containers": [{"name": "main", "image": workload("hello.wasm"), "args": ["a"]}],
        },
    }))
    .expect("a valid pod")
}

#[tokio::test]
async fn pod_state_and_process_metrics_appear_after_a_wasi_pod_runs() -> Result<()> {
    let node = "metrics-node";
    let modules = workloads_dir().display().to_string();
    let before = SystemTime::now().duration_since(UNIX_EPOCH)?.as_secs_f64();
    let plane = Plane::start_up(&["--node-name", node, "--allow-file-images", &modules]).await?;
    let client = plane.client().await?;
    let pods: Api<Pod> = Api::namespaced(client, "default");
    pods.create(&PostParams::default(), &hello_pod("counted", node))
        .await?;
    eventually(Duration::from_secs(60), "pod counted Succeeded", || async {
        let p = pods.get_opt("counted").await.ok()??;
        (p.status?.phase? == "Succeeded").then_some(())
    })
    .await
    .with_context(|| plane.log())?;

    let provider = "provider=\"wasi-runner\"";
    let text = eventually(
        Duration::from_secs(30),
        "the pod counted in state Completed",
        || async {
            let text = plane.metrics().await.ok()?;
            (metric(
                &text,
                "wasmlet_node_pods{",
                &format!("{provider},state=\"Completed\""),
            ) == 1.0)
                .then_some(text)
        },
    )
    .await?;
    // One pod, in one state.
    assert_eq!(metric(&text, "wasmlet_node_pods{", provider), 1.0, "{text}");
    // It came to Completed once, from the state it rested in before, and
    // the time it spent there was observed.
    ensure!(
        metric(
            &text,
            "wasmlet_node_pod_transitions_total{",
            &format!("{provider},from=\"")
        ) >= 1.0
            && text
                .lines()
                .any(|l| l.starts_with("wasmlet_node_pod_transitions_total{")
                    && l.contains("to=\"Completed\"")
                    && l.ends_with(" 1")),
        "{text}"
    );
    ensure!(
        metric(
            &text,
            "wasmlet_node_pod_state_duration_seconds_count{",
            provider
        ) >= 1.0,
        "{text}"
    );
    // No handler failed.
    assert_eq!(
        metric(&text, "wasmlet_node_provider_faults_total{", provider),
        0.0
    );

    // The host's process figures, as client libraries name them.
    let rss = metric(&text, "process_resident_memory_bytes ", "");
    ensure!(
        rss > f64::from(1u32 << 20) && rss < 64.0 * f64::from(1u32 << 30),
        "RSS {rss}"
    );
    let cpu = metric(&text, "process_cpu_seconds_total ", "");
    ensure!(cpu > 0.0, "CPU {cpu}");
    let (open, max) = (
        metric(&text, "process_open_fds ", ""),
        metric(&text, "process_max_fds ", ""),
    );
    ensure!(open >= 3.0 && max >= open, "fds {open} of {max}");
    let started = metric(&text, "process_start_time_seconds ", "");
    let now = SystemTime::now().duration_since(UNIX_EPOCH)?.as_secs_f64();
    ensure!(
        started >= before - 2.0 && started <= now + 2.0,
        "start time {started} not in [{before}, {now}]"
    );
    ensure!(
        metric(&text, "process_virtual_memory_bytes ", "") >= rss,
        "{text}"
    );

    // Deleted: its machine ends and the gauge comes back to zero.
    pods.delete("counted", &DeleteParams::default()).await?;
    eventually(Duration::from_secs(60), "no pod counted", || async {
        let text = plane.metrics().await.ok()?;
        (metric(&text, "wasmlet_node_pods{", provider) == 0.0).then_some(())
    })
    .await
    .with_context(|| plane.log())?;
    Ok(())
}

#[tokio::test]
async fn memory_pressure_follows_the_workload_memory_budget() -> Result<()> {
    let node = "pressure-node";
    let modules = workloads_dir().display().to_string();
    // Room for one container of the default cap (256Mi), not two: a workload
    // that holds 200Mi leaves less than that.
    let plane = Plane::start_up(&[
        "--node-name",
        node,
        "--allow-file-images",
        &modules,
        "--workload-memory-budget",
        "300Mi",
    ])
    .await?;
    let client = plane.client().await?;
    let nodes: Api<Node> = Api::all(client.clone());
    wait_condition(
        &plane,
        &nodes,
        node,
        "MemoryPressure",
        "False",
        "KubeletHasSufficientMemory",
    )
    .await?;
    let pods: Api<Pod> = Api::namespaced(client, "default");
    let sleeper: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "sleeper"},
        "spec": {
            "nodeName": node,
            "tolerations": [{"key": "kubernetes.io/arch", "operator": "Exists"}],
            "containers": [{"name": "main", "image": workload("reader.wasm"),
                "args": ["alloc:200", "sleep:3600"]}],
        },
    }))?;
    pods.create(&PostParams::default(), &sleeper).await?;
    let message = wait_condition(
        &plane,
        &nodes,
        node,
        "MemoryPressure",
        "True",
        "KubeletHasInsufficientMemory",
    )
    .await?;
    ensure!(
        message.contains("workload memory budget has")
            && message.contains(&format!("of {} bytes left", 300u64 << 20)),
        "{message}"
    );
    // The other pressures stay off; Ready stays True.
    wait_condition(
        &plane,
        &nodes,
        node,
        "PIDPressure",
        "False",
        "KubeletHasSufficientPID",
    )
    .await?;
    wait_ready(&plane, &nodes, node, "True", "KubeletReady").await?;
    pods.delete("sleeper", &DeleteParams::default()).await?;
    wait_condition(
        &plane,
        &nodes,
        node,
        "MemoryPressure",
        "False",
        "KubeletHasSufficientMemory",
    )
    .await?;
    Ok(())
}

/// The workload runtime cannot start workloads while the data directory's
/// `node/pods` (where every start opens its log and volumes) cannot take a
/// file: here it is replaced by a regular file, as a broken data directory
/// has it (the tests run as root, whom permission bits do not stop; a
/// read-only or full file system fails the same write). The Node is
/// Ready=False `WorkloadRuntimeUnavailable` and `/readyz` fails
/// `node-agent` while it lasts; a pod bound meanwhile fails to start and
/// backs off, and runs once the directory is back.
#[tokio::test]
async fn the_node_reports_a_workload_runtime_that_cannot_start_workloads_until_fixed() -> Result<()>
{
    let node = "runtime-node";
    let modules = workloads_dir().display().to_string();
    let plane = Plane::start_up(&["--node-name", node, "--allow-file-images", &modules]).await?;
    let client = plane.client().await?;
    let nodes: Api<Node> = Api::all(client.clone());
    wait_ready(&plane, &nodes, node, "True", "KubeletReady").await?;

    let pods_dir = plane.data_dir().join("node").join("pods");
    let away = plane.data_dir().join("node").join("pods.away");
    std::fs::rename(&pods_dir, &away)?;
    std::fs::write(&pods_dir, b"not a directory")?;
    let message = wait_ready(&plane, &nodes, node, "False", "WorkloadRuntimeUnavailable").await?;
    ensure!(
        message.contains(&pods_dir.display().to_string())
            && message.contains("no workload can start"),
        "{message}"
    );
    wait_readyz(
        &plane,
        500,
        &[
            "[-]node-agent failed: reason withheld",
            "readyz check failed",
        ],
    )
    .await?;
    let (code, why) = get(&plane, "/readyz/node-agent").await?;
    ensure!(
        code == 500 && why.contains("WorkloadRuntimeUnavailable"),
        "{code} {why}"
    );
    // Restarting the process would not fix the disk: live, not ready.
    assert_eq!(get(&plane, "/livez").await?, (200, "ok".to_string()));

    // A pod bound now cannot start (its log cannot be opened) and backs off.
    let pods: Api<Pod> = Api::namespaced(client, "default");
    let sleeper: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "waits"},
        "spec": {
            "nodeName": node,
            "tolerations": [{"key": "kubernetes.io/arch", "operator": "Exists"}],
            "containers": [{"name": "main", "image": workload("sleeper.wasm")}],
        },
    }))?;
    pods.create(&PostParams::default(), &sleeper).await?;
    let last = std::sync::Mutex::new(String::new());
    eventually(
        Duration::from_secs(60),
        "pod waits failing to start (StartError)",
        || async {
            let p = pods.get_opt("waits").await.ok()??;
            let c = serde_json::to_value(p.status?.container_statuses?.first()?).ok()?;
            *last.lock().unwrap() = c.to_string();
            let reason = |at: &str| c.pointer(at).and_then(|r| r.as_str()).map(str::to_string);
            (reason("/state/terminated/reason").as_deref() == Some("StartError")
                || reason("/lastState/terminated/reason").as_deref() == Some("StartError"))
            .then_some(())
        },
    )
    .await
    .with_context(|| format!("last container status: {}", last.lock().unwrap()))?;

    // Fixed: Ready again, and the pod runs.
    std::fs::remove_file(&pods_dir)?;
    std::fs::rename(&away, &pods_dir)?;
    wait_ready(&plane, &nodes, node, "True", "KubeletReady").await?;
    wait_readyz(&plane, 200, &["[+]node-agent ok", "readyz check passed"]).await?;
    eventually(
        Duration::from_secs(120),
        "pod waits Running after the fix",
        || async {
            let p = pods.get_opt("waits").await.ok()??;
            (p.status?.phase? == "Running").then_some(())
        },
    )
    .await
    .with_context(|| plane.log())?;
    Ok(())
}

/// Another process holds the store's SQLite database in a write
/// transaction (`sqlite3` with `BEGIN IMMEDIATE`, as a backup or an
/// operator's session might): the store cannot commit, writes fail, and
/// `/livez`, `/healthz` and `/readyz` fail `store` (kube-apiserver's `etcd`
/// check is in all three) until the lock is released and a write commits.
#[tokio::test]
async fn the_health_endpoints_fail_while_the_store_cannot_commit() -> Result<()> {
    let plane = Plane::start_up(&["--no-node"]).await?;
    let client = plane.client().await?;
    let cms: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(client.clone(), "default");
    cms.create(
        &PostParams::default(),
        &wasmlet_e2e::configmap("before", &[]),
    )
    .await?;
    // Everything ready first (the built-in plugins loaded): the store is
    // then the only check to fail.
    wait_readyz(&plane, 200, &["readyz check passed"]).await?;
    assert_eq!(get(&plane, "/healthz").await?, (200, "ok".to_string()));

    let db = plane.data_dir().join("state.db");
    let mut holder = Command::new("sqlite3")
        .arg("-bail")
        .arg(&db)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("sqlite3 (the sqlite3 command-line shell)")?;
    let mut stdin = holder.stdin.take().context("sqlite3's stdin")?;
    // Waits its turn if the host is committing; an error ends it (-bail).
    writeln!(stdin, ".timeout 10000\nBEGIN IMMEDIATE;\nSELECT 'locked';")?;
    stdin.flush()?;
    let stdout = holder.stdout.take().context("sqlite3's stdout")?;
    let line = tokio::task::spawn_blocking(move || {
        let mut line = String::new();
        std::io::BufReader::new(stdout)
            .read_line(&mut line)
            .map(|_| line)
    })
    .await??;
    ensure!(line.trim() == "locked", "sqlite3 said {line:?}");

    // A write now cannot commit.
    let err = cms
        .create(
            &PostParams::default(),
            &wasmlet_e2e::configmap("during", &[]),
        )
        .await
        .expect_err("a write while the database is locked");
    ensure!(
        matches!(&err, kube::Error::Api(e) if e.code == 500),
        "{err}"
    );
    for (path, last) in [
        ("/livez?verbose", "livez check failed"),
        ("/healthz?verbose", "healthz check failed"),
        ("/readyz?verbose", "readyz check failed"),
    ] {
        let (code, body) = get(&plane, path).await?;
        ensure!(
            code == 500
                && body
                    .lines()
                    .any(|l| l == "[-]store failed: reason withheld")
                && body.lines().any(|l| l == last),
            "{path}: {code}\n{body}"
        );
    }
    let (code, why) = get(&plane, "/readyz/store").await?;
    ensure!(
        code == 500 && why.contains("the last commit failed") && why.contains("locked"),
        "{code} {why}"
    );

    // Released: the next write commits and the checks pass again.
    writeln!(stdin, "ROLLBACK;")?;
    drop(stdin);
    let status = tokio::task::spawn_blocking(move || holder.wait()).await??;
    ensure!(status.success(), "sqlite3: {status}");
    eventually(
        Duration::from_secs(30),
        "a write committing again",
        || async {
            cms.create(
                &PostParams::default(),
                &wasmlet_e2e::configmap("after", &[]),
            )
            .await
            .ok()
        },
    )
    .await?;
    for path in ["/livez", "/healthz", "/readyz"] {
        let verbose = get(&plane, &format!("{path}?verbose")).await?;
        assert_eq!(
            get(&plane, path).await?,
            (200, "ok".to_string()),
            "{verbose:?}"
        );
    }
    let (code, body) = get(&plane, "/healthz?verbose").await?;
    ensure!(
        code == 200 && body.lines().any(|l| l == "[+]store ok"),
        "{code}\n{body}"
    );
    Ok(())
}
