//! `kubectl exec` and `kubectl attach` into WASI pods, and exec probes (issue
//! 45 point 6): a command runs as another instance of the pod's module with
//! its environment and volumes, over the websocket protocol kubectl speaks
//! (`v5.channel.k8s.io`) through the API server to the node's kubelet port;
//! readiness, startup and liveness probes of the exec kind gate `Ready` and
//! restart containers as upstream's do.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use k8s_openapi::api::core::v1::{Event, Pod};
use kube::api::{Api, ListParams};
use serde_json::{Value, json};
use wasmlet_e2e::workload_plane::{self, is_ready, workload};
use wasmlet_e2e::{Plane, create_json, eventually, kubectl_bin};

const WAIT: Duration = Duration::from_secs(120);

/// A pod running `toolbox` (the WASI 0.2 component) as its container `main`
/// (ticking), with `FOO=bar` and an emptyDir at `/data`; `extra` is merged
/// into the container.
fn toolbox_pod(name: &str, extra: Value) -> Value {
    let mut container = json!({
        "name": "main",
        "image": workload("toolbox.wasm"),
        "env": [{"name": "FOO", "value": "bar"}],
        "volumeMounts": [{"name": "data", "mountPath": "/data"}],
    });
    if let (Some(c), Some(e)) = (container.as_object_mut(), extra.as_object()) {
        for (k, v) in e {
            c.insert(k.clone(), v.clone());
        }
    }
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "tolerations": [{"key": "kubernetes.io/arch", "operator": "Exists"}],
            "volumes": [{"name": "data", "emptyDir": {}}],
            "containers": [container],
        },
    })
}

fn running(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|c| c.first())
        .and_then(|c| c.state.as_ref())
        .is_some_and(|s| s.running.is_some())
}

async fn wait_running(pods: &Api<Pod>, name: &str) -> Result<Pod> {
    eventually(WAIT, &format!("pod {name} running"), || async {
        pods.get_opt(name).await.ok().flatten().filter(running)
    })
    .await
}

/// `kubectl` with stdin piped from `input`.
fn kubectl_with_stdin(plane: &Plane, args: &[&str], input: &[u8]) -> Result<Output> {
    let mut child = kubectl_child(plane, args, Stdio::piped())?;
    child.stdin.take().context("stdin")?.write_all(input)?;
    Ok(child.wait_with_output()?)
}

fn kubectl_child(plane: &Plane, args: &[&str], stdin: Stdio) -> Result<Child> {
    Ok(Command::new(kubectl_bin())
        .arg("--kubeconfig")
        .arg(plane.kubeconfig())
        .args(args)
        .env("HOME", plane.data_dir())
        .stdin(stdin)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?)
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[tokio::test]
async fn kubectl_exec_runs_the_command_with_the_pods_env_volumes_stdin_and_exit_code() -> Result<()>
{
    let (plane, client) = workload_plane::start_with("scheduler,wasi-runner", &[]).await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    // The preview 1 build: its `proc_exit` carries any code (a WASI 0.2
    // command built by Rust's std exits 0 or 1).
    let image = workload("toolbox.p1.wasm");
    create_json(&pods, toolbox_pod("box", json!({"image": image}))).await?;
    wait_running(&pods, "box").await?;

    let out = plane.kubectl(&["exec", "box", "--", "echo", "hello", "world"])?;
    assert!(out.status.success(), "exec echo: {}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "hello world\n");

    let env = plane.kubectl_ok(&["exec", "box", "--", "env"])?;
    assert!(env.lines().any(|l| l == "FOO=bar"), "the pod's env: {env}");

    // The pod's volume: what one exec instance writes, the next one sees.
    plane.kubectl_ok(&["exec", "box", "--", "touch", "/data/made-by-exec"])?;
    let out = plane.kubectl(&["exec", "box", "--", "test-file", "/data/made-by-exec"])?;
    assert!(
        out.status.success(),
        "the file is in the pod's volume: {}",
        text(&out.stdout)
    );

    // The exit code reaches kubectl's own, stderr its stderr.
    let out = plane.kubectl(&["exec", "box", "--", "exit", "3"])?;
    assert_eq!(out.status.code(), Some(3), "stderr: {}", text(&out.stderr));
    let out = plane.kubectl(&["exec", "box", "--", "warn", "to", "stderr"])?;
    assert!(out.status.success());
    assert_eq!(text(&out.stdout), "");
    assert!(
        text(&out.stderr).contains("to stderr"),
        "{}",
        text(&out.stderr)
    );

    // stdin, to its end (the v5 protocol's close signal).
    let input = b"first line\nsecond line\n";
    let out = kubectl_with_stdin(&plane, &["exec", "-i", "box", "--", "cat"], input)?;
    assert!(out.status.success(), "exec -i cat: {}", text(&out.stderr));
    assert_eq!(out.stdout, input);

    // Output larger than the instance's window arrives whole (writes wait for reads).
    let out = plane.kubectl(&["exec", "box", "--", "flood", "3000000"])?;
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(out.stdout.len(), 3_000_000);

    // A container that is not there.
    let out = plane.kubectl(&["exec", "box", "-c", "nope", "--", "echo"])?;
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("nope"), "{}", text(&out.stderr));
    Ok(())
}

#[tokio::test]
async fn exec_sessions_per_pod_are_bounded() -> Result<()> {
    let (plane, client) = workload_plane::start_with("scheduler,wasi-runner", &[]).await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    create_json(&pods, toolbox_pod("busy", json!({}))).await?;
    wait_running(&pods, "busy").await?;
    // Four sessions that wait on stdin the test holds open, each seen to run
    // (it echoes a line back) before the next starts.
    let mut held = Vec::new();
    for i in 0..4 {
        let mut c = kubectl_child(&plane, &["exec", "-i", "busy", "--", "cat"], Stdio::piped())?;
        let line = format!("session {i}\n");
        c.stdin
            .as_mut()
            .context("stdin")?
            .write_all(line.as_bytes())?;
        let mut out = BufReader::new(c.stdout.take().context("stdout")?);
        let mut echoed = String::new();
        out.read_line(&mut echoed)?;
        if echoed != line {
            let out = c.wait_with_output()?;
            bail!("session {i} did not run: {}", text(&out.stderr));
        }
        held.push((c, out));
    }
    let refused = eventually(WAIT, "a fifth session refused", || async {
        let out = plane
            .kubectl(&["exec", "busy", "--", "echo", "fifth"])
            .ok()?;
        (!out.status.success()).then(|| text(&out.stderr))
    })
    .await;
    let refused = match refused {
        Ok(r) => r,
        Err(e) => {
            let mut why = String::new();
            for (c, _) in &mut held {
                if let Ok(Some(s)) = c.try_wait() {
                    let mut err = String::new();
                    if let Some(mut e) = c.stderr.take() {
                        let _ = std::io::Read::read_to_string(&mut e, &mut err);
                    }
                    why.push_str(&format!("a held session ended ({s}): {err}\n"));
                }
            }
            bail!("{e}: {why}; log:\n{}", plane.log());
        }
    };
    assert!(refused.contains("too many exec sessions"), "{refused}");
    for (mut c, mut out) in held {
        drop(c.stdin.take());
        let mut rest = String::new();
        std::io::Read::read_to_string(&mut out, &mut rest)?;
        let status = c.wait_with_output()?;
        assert!(status.status.success(), "{}", text(&status.stderr));
    }
    let again = plane.kubectl_ok(&["exec", "busy", "--", "echo", "again"])?;
    assert_eq!(again, "again\n");
    Ok(())
}

#[tokio::test]
async fn kubectl_attach_streams_the_running_instances_output() -> Result<()> {
    let (plane, client) = workload_plane::start_with("scheduler,wasi-runner", &[]).await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    create_json(&pods, toolbox_pod("ticker", json!({}))).await?;
    wait_running(&pods, "ticker").await?;
    let mut child = kubectl_child(&plane, &["attach", "ticker", "-c", "main"], Stdio::null())?;
    let stdout = child.stdout.take().context("stdout")?;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    let line = rx.recv_timeout(WAIT);
    let _ = child.kill();
    let out = child.wait_with_output()?;
    match line {
        Ok(l) => assert!(l.starts_with("tick "), "attached output: {l}"),
        Err(_) => bail!("kubectl attach printed nothing: {}", text(&out.stderr)),
    }
    Ok(())
}

fn probe(command: &[&str]) -> Value {
    json!({"exec": {"command": command}, "periodSeconds": 1, "timeoutSeconds": 10, "failureThreshold": 1})
}

async fn events_about(client: &kube::Client, pod: &str, reason: &str) -> Vec<String> {
    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    let lp = ListParams::default().fields(&format!("involvedObject.name={pod}"));
    events
        .list(&lp)
        .await
        .map(|l| l.items)
        .unwrap_or_default()
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some(reason))
        .filter_map(|e| e.message)
        .collect()
}

fn container_flags(p: &Pod) -> (Option<bool>, bool) {
    let c = p
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|c| c.first());
    (c.and_then(|c| c.started), c.is_some_and(|c| c.ready))
}

#[tokio::test]
async fn a_readiness_probe_gates_ready_and_the_statefulsets_next_pod() -> Result<()> {
    let (plane, client) =
        workload_plane::start_with("scheduler,wasi-runner,statefulset-controller", &[]).await?;
    let pod = toolbox_pod(
        "unused",
        json!({"readinessProbe": probe(&["test-file", "/data/ready"])}),
    );
    let sts = json!({
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": "web"},
        "spec": {
            "replicas": 2,
            "serviceName": "web",
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}}, "spec": pod["spec"]},
        },
    });
    let sets: Api<k8s_openapi::api::apps::v1::StatefulSet> =
        Api::namespaced(client.clone(), "default");
    create_json(&sets, sts).await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    wait_running(&pods, "web-0").await?;
    // The probe has run and failed: the container runs but is not ready.
    eventually(WAIT, "a failed readiness probe on web-0", || async {
        let e = events_about(&client, "web-0", "Unhealthy").await;
        e.iter()
            .any(|m| m.contains("Readiness probe failed"))
            .then_some(())
    })
    .await?;
    let p = pods.get("web-0").await?;
    assert!(
        !is_ready(&p),
        "web-0 is Ready before its probe passed: {:?}",
        p.status
    );
    assert_eq!(container_flags(&p), (Some(true), false));
    assert!(
        pods.get_opt("web-1").await?.is_none(),
        "web-1 was created before web-0 was Ready"
    );

    plane.kubectl_ok(&["exec", "web-0", "--", "touch", "/data/ready"])?;
    let p = eventually(WAIT, "web-0 Ready", || async {
        pods.get_opt("web-0").await.ok().flatten().filter(is_ready)
    })
    .await?;
    assert_eq!(container_flags(&p), (Some(true), true));
    // Only now does the StatefulSet go on.
    wait_running(&pods, "web-1").await?;
    let p = pods.get("web-1").await?;
    assert!(!is_ready(&p), "web-1 has its own probe and file");
    Ok(())
}

#[tokio::test]
async fn startup_and_liveness_probes_restart_a_failing_container() -> Result<()> {
    let (plane, client) = workload_plane::start_with("scheduler,wasi-runner", &[]).await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    // Started once /data/started exists; alive while /data/alive does.
    let extra = json!({
        "startupProbe": probe(&["test-file", "/data/started"]),
        "livenessProbe": probe(&["test-file", "/data/alive"]),
    });
    let mut pod = toolbox_pod("lively", extra);
    pod["spec"]["containers"][0]["startupProbe"]["failureThreshold"] = json!(1000);
    create_json(&pods, pod).await?;
    wait_running(&pods, "lively").await?;
    let p = pods.get("lively").await?;
    assert_eq!(
        container_flags(&p),
        (Some(false), false),
        "not started before its startup probe passes"
    );
    assert!(!is_ready(&p));

    plane.kubectl_ok(&["exec", "lively", "--", "touch", "/data/alive"])?;
    plane.kubectl_ok(&["exec", "lively", "--", "touch", "/data/started"])?;
    eventually(WAIT, "lively started and Ready", || async {
        let p = pods.get_opt("lively").await.ok().flatten()?;
        (container_flags(&p) == (Some(true), true) && is_ready(&p)).then_some(())
    })
    .await?;

    // The liveness probe fails: the container is killed and restarted.
    let restarts = |p: &Pod| {
        p.status
            .as_ref()
            .and_then(|s| s.container_statuses.as_ref())
            .and_then(|c| c.first())
            .map_or(0, |c| c.restart_count)
    };
    assert_eq!(restarts(&pods.get("lively").await?), 0);
    plane.kubectl_ok(&["exec", "lively", "--", "rm", "/data/alive"])?;
    eventually(WAIT, "lively restarted", || async {
        let p = pods.get_opt("lively").await.ok().flatten()?;
        (restarts(&p) >= 1).then_some(())
    })
    .await?;
    let killed = events_about(&client, "lively", "Killing").await;
    assert!(
        killed.iter().any(|m| m.contains("failed liveness probe")),
        "the kill is explained: {killed:?}"
    );
    Ok(())
}

#[tokio::test]
async fn exec_needs_create_on_pods_exec() -> Result<()> {
    let (plane, client) = workload_plane::start_with("scheduler,wasi-runner", &[]).await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    create_json(&pods, toolbox_pod("guarded", json!({}))).await?;
    wait_running(&pods, "guarded").await?;
    let role = |verbs: &[&str]| {
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": "exec"},
            "rules": [
                {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]},
                {"apiGroups": [""], "resources": ["pods/exec"], "verbs": verbs},
            ],
        })
    };
    let roles: Api<k8s_openapi::api::rbac::v1::Role> = Api::namespaced(client.clone(), "default");
    create_json(&roles, role(&["get"])).await?;
    let bindings: Api<k8s_openapi::api::rbac::v1::RoleBinding> =
        Api::namespaced(client.clone(), "default");
    create_json(
        &bindings,
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "exec"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "exec"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "alice"}],
        }),
    )
    .await?;
    // `get` on pods/exec is not enough: the websocket's GET opens a session.
    let out = plane.kubectl(&["--as", "alice", "exec", "guarded", "--", "echo", "hi"])?;
    assert!(!out.status.success(), "alice exec'd with get only");
    let err = text(&out.stderr);
    assert!(err.contains("create") && err.contains("pods/exec"), "{err}");

    roles
        .replace(
            "exec",
            &Default::default(),
            &serde_json::from_value(role(&["create"]))?,
        )
        .await?;
    let out = eventually(WAIT, "alice may exec", || async {
        let out = plane
            .kubectl(&["--as", "alice", "exec", "guarded", "--", "echo", "hi"])
            .ok()?;
        out.status.success().then_some(out)
    })
    .await?;
    assert_eq!(text(&out.stdout), "hi\n");
    Ok(())
}

#[tokio::test]
async fn socket_probes_are_refused_with_their_reason() -> Result<()> {
    let (_plane, client) = workload_plane::start_with("scheduler,wasi-runner", &[]).await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let probe = json!({"readinessProbe": {"httpGet": {"path": "/", "port": 8080}}});
    create_json(&pods, toolbox_pod("web", probe)).await?;
    let p = eventually(WAIT, "web refused", || async {
        let p = pods.get_opt("web").await.ok().flatten()?;
        (p.status.as_ref()?.phase.as_deref() == Some("Failed")).then_some(p)
    })
    .await?;
    let status = p.status.unwrap_or_default();
    assert_eq!(status.reason.as_deref(), Some("Unsupported"), "{status:?}");
    let message = status.message.unwrap_or_default();
    assert!(
        message.contains("readinessProbe.httpGet") && message.contains("no sockets"),
        "{message}"
    );
    Ok(())
}

#[tokio::test]
async fn a_probe_past_its_timeout_is_killed_and_fails() -> Result<()> {
    let (_plane, client) = workload_plane::start_with("scheduler,wasi-runner", &[]).await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let spin = json!({"exec": {"command": ["spin"]}, "periodSeconds": 5, "timeoutSeconds": 1});
    create_json(&pods, toolbox_pod("slow", json!({"readinessProbe": spin}))).await?;
    wait_running(&pods, "slow").await?;
    let failed = eventually(WAIT, "a timed-out readiness probe", || async {
        let e = events_about(&client, "slow", "Unhealthy").await;
        e.into_iter().find(|m| m.contains("timed out after 1s"))
    })
    .await?;
    assert!(failed.starts_with("Readiness probe failed"), "{failed}");
    let p = pods.get("slow").await?;
    assert!(!is_ready(&p), "a probe that never ends never passes");
    Ok(())
}

/// `kubectl exec POD -- echo` round trips (kubectl → API server → kubelet
/// port → a new instance of the pod's module → back), printed, not asserted:
/// `cargo nextest run --test e2e --run-ignored only -E 'test(/^exec::bench_/)' --no-capture`.
#[tokio::test]
#[ignore]
async fn bench_exec_round_trip() -> Result<()> {
    let (plane, client) = workload_plane::start_with("scheduler,wasi-runner", &[]).await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    create_json(&pods, toolbox_pod("bench", json!({}))).await?;
    wait_running(&pods, "bench").await?;
    plane.kubectl_ok(&["exec", "bench", "--", "echo", "warm"])?;
    let mut times = Vec::new();
    for _ in 0..20 {
        let t = std::time::Instant::now();
        plane.kubectl_ok(&["exec", "bench", "--", "echo", "hi"])?;
        times.push(t.elapsed());
    }
    times.sort();
    println!(
        "kubectl exec round trip over 20 runs: median {:?}, min {:?}, max {:?}",
        times[times.len() / 2],
        times[0],
        times[times.len() - 1]
    );
    Ok(())
}
