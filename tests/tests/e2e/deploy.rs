//! The deploy manifests (`deploy/`) and the monitoring files against the real
//! kubectl and a real host: the kustomize base passes a server-side dry run and
//! applies, the RBAC it grants is what the host and node agent need (checked
//! with `kubectl auth can-i --as`), the checked-in plugin RBAC is what
//! `wasmlet plugin rbac` prints, every metric the dashboard and alerts
//! query is on `/metrics`, and each agent, started from its manifest as a
//! kubelet starts its pod (args, env, user, volumes, read-only root, its
//! ServiceAccount's token), comes up and works.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{Result, ensure};
use kube::Api;
use serde_json::json;
use wasmlet_e2e::registry::Registry;
use wasmlet_e2e::summary::{create_configmap, create_summary, status_keys, summaries};
use wasmlet_e2e::workload_plane::{is_ready, workloads_dir};
use wasmlet_e2e::{Plane, built_plugins, eventually, install_plugin, wasmlet_bin};

fn deploy() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy")
}

#[tokio::test]
async fn the_kustomize_base_dry_runs_applies_and_grants_what_each_agent_needs() -> Result<()> {
    let plane = Plane::start(&[]).await?;
    let base = deploy().display().to_string();
    // As upstream, namespaced objects need their namespace to exist even in a
    // dry run: the namespace first.
    plane.kubectl_ok(&["apply", "-f", &format!("{base}/namespace.yaml")])?;
    let out = plane.kubectl_ok(&["apply", "-k", &base, "--dry-run=server"])?;
    ensure!(
        out.contains("deployment.apps/wasmlet-controller created (server dry run)"),
        "{out}"
    );
    ensure!(
        plane
            .kubectl(&[
                "get",
                "deployment",
                "-n",
                "wasmlet-system",
                "wasmlet-controller"
            ])?
            .status
            .code()
            != Some(0),
        "a dry run stored the Deployment"
    );
    plane.kubectl_ok(&["apply", "-k", &base])?;
    let replicas = plane.kubectl_ok(&[
        "get",
        "deployment",
        "-n",
        "wasmlet-system",
        "wasmlet-controller",
        "-o",
        "jsonpath={.spec.replicas}",
    ])?;
    assert_eq!(replicas, "2");

    // The plugin's CRD, as the host applies it when the plugin loads (so
    // kubectl can resolve the resource).
    let crd = built_plugins().join("configsummary.crd.yaml");
    plane.kubectl_ok(&["apply", "-f", &crd.display().to_string()])?;
    let can = |who: &str, args: &[&str]| -> Result<String> {
        let sa = format!("system:serviceaccount:wasmlet-system:{who}");
        let mut full = vec!["auth", "can-i", "--as", &sa];
        full.extend_from_slice(args);
        let out = plane.kubectl(&full)?;
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    };
    let controller = [
        (vec!["list", "configsummaries.examples.wasmlet.dev"], "yes"),
        (
            vec![
                "patch",
                "configsummaries.examples.wasmlet.dev",
                "--subresource=status",
            ],
            "yes",
        ),
        (vec!["watch", "configmaps", "-A"], "yes"),
        (
            vec!["create", "customresourcedefinitions.apiextensions.k8s.io"],
            "yes",
        ),
        (
            vec!["update", "leases/wasmlet-controller", "-n", "kube-system"],
            "yes",
        ),
        (vec!["update", "leases/other", "-n", "kube-system"], "no"),
        (vec!["delete", "configsummaries.examples.wasmlet.dev"], "no"),
        (vec!["get", "secrets", "-A"], "no"),
    ];
    for (args, want) in controller {
        assert_eq!(
            can("wasmlet-controller", &args)?,
            want,
            "controller: {args:?}"
        );
    }
    let node = [
        (vec!["create", "nodes"], "yes"),
        (vec!["patch", "nodes", "--subresource=status"], "yes"),
        (vec!["update", "leases", "-n", "kube-node-lease"], "yes"),
        (vec!["patch", "pods", "--subresource=status", "-A"], "yes"),
        (vec!["get", "secrets", "-A"], "yes"),
        (vec!["delete", "nodes"], "no"),
        (vec!["create", "deployments.apps"], "no"),
    ];
    for (args, want) in node {
        assert_eq!(can("wasmlet-node", &args)?, want, "node agent: {args:?}");
    }
    Ok(())
}

#[test]
fn the_checked_in_plugin_rbac_is_what_plugin_rbac_prints() -> Result<()> {
    let out = Command::new(wasmlet_bin())
        .args(["plugin", "rbac"])
        .arg(built_plugins().join("configmap-summary.toml"))
        .output()?;
    ensure!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let checked_in = std::fs::read_to_string(deploy().join("cluster-agent/plugin-rbac.yaml"))?;
    ensure!(
        String::from_utf8_lossy(&out.stdout) == checked_in,
        "deploy/cluster-agent/plugin-rbac.yaml is stale: regenerate it with \
         `wasmlet plugin rbac target/plugins/configmap-summary.toml`"
    );
    Ok(())
}

/// Metric names in PromQL expressions: identifiers of the host's families.
fn queried_metrics(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let start = i;
        while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
            i += 1;
        }
        if i > start {
            let word = &text[start..i];
            if [
                "controller_runtime_",
                "workqueue_",
                "wasmlet_",
                "leader_election_",
            ]
            .iter()
            .any(|p| word.starts_with(p))
            {
                names.insert(word.to_string());
            }
        } else {
            i += 1;
        }
    }
    names
}

#[tokio::test]
async fn every_metric_the_dashboard_and_alerts_query_is_exported() -> Result<()> {
    let dashboard = std::fs::read_to_string(deploy().join("monitoring/grafana-dashboard.json"))?;
    serde_json::from_str::<serde_json::Value>(&dashboard)?;
    let alerts = std::fs::read_to_string(deploy().join("monitoring/alerts.yaml"))?;
    let parsed: serde_yaml::Value = serde_yaml::from_str(&alerts)?;
    ensure!(
        parsed["groups"][0]["rules"]
            .as_sequence()
            .is_some_and(|r| r.len() >= 7)
    );
    let mut wanted = queried_metrics(&dashboard);
    wanted.extend(queried_metrics(&alerts));
    ensure!(wanted.len() >= 15, "{wanted:?}");

    // A host with a plugin, leader election and a node agent, briefly busy.
    let plane = Plane::start_up(&["--leader-elect"]).await?;
    install_plugin(&plane.plugin_dir(), "configmap-summary")?;
    let client = plane.client().await?;
    let api = summaries(&client);
    eventually(Duration::from_secs(60), "the CRD", || async {
        api.list(&Default::default()).await.ok()
    })
    .await?;
    create_summary(&api, "m", json!({})).await?;
    create_configmap(&client, "m-cm", "m", 1).await?;
    eventually(Duration::from_secs(60), "a reconcile", || async {
        (status_keys(&api.get("m").await.ok()?) == Some(1)).then_some(())
    })
    .await?;
    let exported: BTreeSet<String> = plane
        .metrics()
        .await?
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split(['{', ' ']).next())
        .map(str::to_string)
        .collect();
    let missing: Vec<&String> = wanted.iter().filter(|m| !exported.contains(*m)).collect();
    ensure!(missing.is_empty(), "queried but not exported: {missing:?}");
    Ok(())
}

// --- The agents started from their manifests, as a kubelet starts a pod -----

/// The deploy manifests bind fixed ports (`--metrics-addr=0.0.0.0:8080`, the
/// kubelet API's 10250): one agent at a time.
static FIXED_PORTS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// What the kubelet and the cluster fill in for a pod of a manifest.
struct PodEnv {
    /// `spec.nodeName` (the host the pod landed on).
    node_name: &'static str,
    /// `status.podIP`.
    pod_ip: &'static str,
    /// ConfigMap volumes' contents: ConfigMap name -> file -> text.
    configmaps: Vec<(&'static str, Vec<(&'static str, String)>)>,
    /// Flags the test adds after the manifest's (each one said why at the call).
    extra_args: Vec<String>,
}

/// A manifest's container running as in its pod; killed on drop.
struct PodProcess {
    child: std::process::Child,
    dir: tempfile::TempDir,
}

impl PodProcess {
    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("container.log")).unwrap_or_default()
    }

    /// The host directory behind volume `name`.
    fn volume(&self, name: &str) -> PathBuf {
        self.dir.path().join("volumes").join(name)
    }

    /// Whether the process has exited (a zombie not yet reaped counts), for
    /// waits that should stop at once when it does.
    fn exited(&self) -> bool {
        std::fs::read_to_string(format!("/proc/{}/stat", self.child.id())).map_or(true, |s| {
            s.rsplit_once(')')
                .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'))
        })
    }

    fn running(&mut self) -> Result<()> {
        if let Some(status) = self.child.try_wait()? {
            anyhow::bail!("the container exited ({status}); log:\n{}", self.log());
        }
        Ok(())
    }
}

impl Drop for PodProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Whether this test process may start pods as a kubelet does (root: mount
/// namespaces, other users); says why not on stderr.
fn can_run_pods() -> bool {
    let root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0");
    let tools = ["unshare", "setpriv", "mount"].iter().all(|t| {
        Command::new("sh")
            .args(["-c", &format!("command -v {t}")])
            .output()
            .is_ok_and(|o| o.status.success())
    });
    if !(root && tools) {
        eprintln!(
            "skipped: starting an agent as its pod would (uid 65532, its volumes mounted, a \
             read-only root) needs root and unshare/setpriv/mount, as a kubelet does"
        );
    }
    root && tools
}

fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// `$(VAR)` references expanded from the container's env, `$$` an escaped
/// `$`, unknown references kept as written: the kubelet's expansion.
fn expand(arg: &str, env: &[(String, String)]) -> String {
    let mut out = String::new();
    let mut rest = arg;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let tail = &rest[i..];
        if let Some(t) = tail.strip_prefix("$$") {
            out.push('$');
            rest = t;
        } else if let Some(end) = tail.strip_prefix("$(").and_then(|t| t.find(')')) {
            let name = &tail[2..2 + end];
            match env.iter().find(|(k, _)| k == name) {
                Some((_, v)) => out.push_str(v),
                None => out.push_str(&tail[..3 + end]),
            }
            rest = &tail[3 + end..];
        } else {
            out.push('$');
            rest = &tail[1..];
        }
    }
    out.push_str(rest);
    out
}

/// The directory a volume at `path` is mounted on can exist only under an
/// existing ancestor: the nearest one, which an overlay (private to the
/// pod's mount namespace) makes writable for the mount point.
fn existing_ancestor(path: &Path) -> PathBuf {
    let mut p = path.to_path_buf();
    while !p.exists() {
        p.pop();
    }
    p.canonicalize().unwrap_or(p)
}

/// Starts the first container of the Deployment in `manifest` as a kubelet
/// would: its args (with `$(VAR)` expanded) and env (downward-API fields from
/// `pod`), its pod's `runAsUser`/`runAsGroup` with the `fsGroup` as a
/// supplementary group, every volume mounted at its path in a mount namespace
/// of its own (an emptyDir as the kubelet makes one: root's, 0777, then the
/// fsGroup's with setgid; a ConfigMap's files; the ServiceAccount's token and
/// the cluster CA where a pod has them), a read-only root when the container
/// asks for it, no capabilities. Only the image is different: the binary
/// under test, finding its built-ins beside it as in the image.
async fn start_as_pod(plane: &Plane, manifest: &Path, pod: &PodEnv) -> Result<PodProcess> {
    use k8s_openapi::api::apps::v1::Deployment;
    use std::os::unix::fs::PermissionsExt;
    let deployment: Deployment = serde_yaml::from_str(&std::fs::read_to_string(manifest)?)?;
    let ns = deployment
        .metadata
        .namespace
        .clone()
        .unwrap_or_else(|| "default".into());
    let spec = deployment
        .spec
        .and_then(|s| s.template.spec)
        .ok_or_else(|| anyhow::anyhow!("{}: no pod template", manifest.display()))?;
    let container = &spec.containers[0];
    let psc = spec.security_context.clone().unwrap_or_default();
    let csc = container.security_context.clone().unwrap_or_default();
    let uid = csc.run_as_user.or(psc.run_as_user).unwrap_or(0);
    let gid = csc.run_as_group.or(psc.run_as_group).unwrap_or(0);
    ensure!(
        uid != 0 || psc.run_as_non_root != Some(true),
        "runAsNonRoot without runAsUser"
    );
    let fs_group = psc.fs_group;
    let read_only_root = csc.read_only_root_filesystem == Some(true);

    // The env: literal values and the downward-API fields a kubelet fills in.
    let mut env: Vec<(String, String)> = vec![];
    for e in container.env.iter().flatten() {
        let value = match (&e.value, &e.value_from) {
            (Some(v), _) => v.clone(),
            (None, Some(from)) => match from.field_ref.as_ref().map(|f| f.field_path.as_str()) {
                Some("spec.nodeName") => pod.node_name.into(),
                Some("status.podIP") => pod.pod_ip.into(),
                Some("metadata.namespace") => ns.clone(),
                other => anyhow::bail!("env {}: valueFrom {other:?} not emulated", e.name),
            },
            (None, None) => String::new(),
        };
        env.push((e.name.clone(), value));
    }
    let mut args: Vec<String> = container
        .args
        .iter()
        .flatten()
        .map(|a| expand(a, &env))
        .collect();
    args.extend(pod.extra_args.iter().cloned());

    let dir = tempfile::tempdir()?;
    let mut mounts: Vec<(PathBuf, PathBuf, bool)> = vec![];
    for m in container.volume_mounts.iter().flatten() {
        let volume = spec
            .volumes
            .iter()
            .flatten()
            .find(|v| v.name == m.name)
            .ok_or_else(|| anyhow::anyhow!("volumeMount {}: no such volume", m.name))?;
        let host = dir.path().join("volumes").join(&m.name);
        std::fs::create_dir_all(&host)?;
        if volume.empty_dir.is_some() {
            // The kubelet's emptyDir: 0777 root's; with an fsGroup, group-owned
            // by it, setgid, mode OR rw-rw---- (and x on directories).
            std::fs::set_permissions(&host, std::fs::Permissions::from_mode(0o777))?;
            if let Some(g) = fs_group {
                std::os::unix::fs::chown(&host, None, Some(g as u32))?;
                std::fs::set_permissions(&host, std::fs::Permissions::from_mode(0o2777))?;
            }
        } else if volume.host_path.is_some() {
            // A hostPath the kubelet creates (DirectoryOrCreate): root's, 0755,
            // no fsGroup applied.
            std::fs::set_permissions(&host, std::fs::Permissions::from_mode(0o755))?;
        } else if let Some(cm) = &volume.config_map {
            let (_, files) = pod
                .configmaps
                .iter()
                .find(|(n, _)| *n == cm.name)
                .ok_or_else(|| anyhow::anyhow!("ConfigMap {} not given", cm.name))?;
            for (file, text) in files {
                std::fs::write(host.join(file), text)?;
                std::fs::set_permissions(host.join(file), std::fs::Permissions::from_mode(0o644))?;
            }
        } else {
            anyhow::bail!(
                "volume {}: only emptyDir, hostPath and configMap are emulated",
                m.name
            );
        }
        mounts.push((
            host,
            PathBuf::from(&m.mount_path),
            m.read_only == Some(true),
        ));
    }
    // The ServiceAccount's token, as kube::Config::incluster() reads it.
    if spec.automount_service_account_token != Some(false) {
        let sa = spec
            .service_account_name
            .clone()
            .unwrap_or_else(|| "default".into());
        let token = plane.kubectl_ok(&["create", "token", &sa, "-n", &ns])?;
        let host = dir.path().join("serviceaccount");
        std::fs::create_dir_all(&host)?;
        std::fs::write(host.join("token"), token.trim())?;
        std::fs::write(host.join("namespace"), &ns)?;
        let kc = kube::config::Kubeconfig::read_from(plane.kubeconfig())?;
        let ca = kc.clusters[0]
            .cluster
            .as_ref()
            .and_then(|c| c.certificate_authority_data.clone())
            .ok_or_else(|| anyhow::anyhow!("the plane's kubeconfig names no CA"))?;
        use base64::Engine;
        std::fs::write(
            host.join("ca.crt"),
            base64::engine::general_purpose::STANDARD.decode(ca)?,
        )?;
        for f in ["token", "namespace", "ca.crt"] {
            std::fs::set_permissions(host.join(f), std::fs::Permissions::from_mode(0o644))?;
        }
        mounts.push((
            host,
            PathBuf::from("/var/run/secrets/kubernetes.io/serviceaccount"),
            true,
        ));
    }
    let (server, _) = plane.endpoint()?;
    let hostport = server.trim_start_matches("https://");
    let (host, port) = hostport.rsplit_once(':').unwrap_or((hostport, "443"));
    env.push(("KUBERNETES_SERVICE_HOST".into(), host.into()));
    env.push(("KUBERNETES_SERVICE_PORT".into(), port.into()));
    env.push(("PATH".into(), "/usr/local/bin:/usr/bin:/bin".into()));
    env.push(("HOME".into(), "/home/nonroot".into()));

    // The mount namespace: overlays where mount points must be made (their
    // upper layers on a tmpfs, which any root file system can carry), the
    // volumes bound, then the root (and the overlays) read-only.
    let scratch = dir.path().join("scratch");
    std::fs::create_dir_all(&scratch)?;
    let mut script = format!(
        "set -e\nmount -t tmpfs tmpfs {}\n",
        sh_quote(&scratch.display().to_string())
    );
    let mut overlays: Vec<PathBuf> = vec![];
    for (i, (_, at, _)) in mounts.iter().enumerate() {
        if at.exists() {
            continue;
        }
        let base = existing_ancestor(at);
        if !overlays.contains(&base) {
            let (upper, work) = (
                scratch.join(format!("overlay{i}/upper")),
                scratch.join(format!("overlay{i}/work")),
            );
            script.push_str(&format!(
                "mkdir -p {u} {w}\nmount -t overlay overlay -o lowerdir={b},upperdir={u},workdir={w} {b}\n",
                b = sh_quote(&base.display().to_string()),
                u = sh_quote(&upper.display().to_string()),
                w = sh_quote(&work.display().to_string()),
            ));
            overlays.push(base);
        }
        script.push_str(&format!(
            "mkdir -p {}\n",
            sh_quote(&at.display().to_string())
        ));
    }
    for (host, at, ro) in &mounts {
        let at = sh_quote(&at.display().to_string());
        script.push_str(&format!(
            "mount --bind {} {at}\n",
            sh_quote(&host.display().to_string())
        ));
        if *ro {
            script.push_str(&format!("mount -o remount,bind,ro {at}\n"));
        }
    }
    if read_only_root {
        script.push_str("mount -o remount,bind,ro /\n");
        for o in &overlays {
            script.push_str(&format!(
                "mount -o remount,bind,ro {}\n",
                sh_quote(&o.display().to_string())
            ));
        }
    }
    let groups = fs_group.map_or(String::from("--clear-groups"), |g| format!("--groups={g}"));
    script.push_str(&format!(
        "cd /\nexec setpriv --reuid={uid} --regid={gid} {groups} --inh-caps=-all --bounding-set=-all --no-new-privs env -i"
    ));
    for (k, v) in &env {
        script.push_str(&format!(" {}", sh_quote(&format!("{k}={v}"))));
    }
    script.push_str(&format!(
        " {}",
        sh_quote(&wasmlet_e2e::wasmlet_bin().display().to_string())
    ));
    for a in &args {
        script.push_str(&format!(" {}", sh_quote(a)));
    }
    script.push('\n');
    std::fs::write(dir.path().join("script.sh"), &script)?;

    let log = std::fs::File::create(dir.path().join("container.log"))?;
    let child = Command::new("unshare")
        .args([
            "--mount",
            "--propagation",
            "private",
            "--",
            "sh",
            "-c",
            &script,
        ])
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()?;
    Ok(PodProcess { child, dir })
}

/// The namespace, then the whole base (ServiceAccounts, RBAC, Deployments).
fn apply_base(plane: &Plane) -> Result<()> {
    let base = deploy().display().to_string();
    plane.kubectl_ok(&["apply", "-f", &format!("{base}/namespace.yaml")])?;
    plane.kubectl_ok(&["apply", "-k", &base])?;
    Ok(())
}

/// `GET http://127.0.0.1:8080PATH` (the manifests' probe port): the status code.
fn probe(path: &str) -> Option<u16> {
    let out = Command::new("curl")
        .args(["-s", "-o", "/dev/null", "-w", "%{http_code}"])
        .arg(format!("http://127.0.0.1:8080{path}"))
        .output()
        .ok()?;
    String::from_utf8_lossy(&out.stdout).trim().parse().ok()
}

/// The agent runs as its pod says (uid and groups 65532, a read-only root),
/// and made its data directory inside the kubelet's volume: its own, private.
fn assert_private_data_dir(agent: &PodProcess) -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    let pid = agent.child.id();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    for (field, want) in [("Uid:", "65532"), ("Gid:", "65532"), ("Groups:", "65532")] {
        let line = status.lines().find(|l| l.starts_with(field)).unwrap_or("");
        ensure!(line.split_whitespace().skip(1).all(|v| v == want), "{line}");
    }
    let mountinfo = std::fs::read_to_string(format!("/proc/{pid}/mountinfo"))?;
    let root = mountinfo
        .lines()
        .find(|l| l.split(' ').nth(4) == Some("/"))
        .unwrap_or("");
    ensure!(
        root.split(' ')
            .nth(5)
            .is_some_and(|o| o.split(',').any(|f| f == "ro")),
        "{root}"
    );
    let meta = std::fs::metadata(agent.volume("data").join("data"))?;
    ensure!(meta.uid() == 65532, "data dir owner {}", meta.uid());
    ensure!(
        meta.mode() & 0o077 == 0,
        "data dir mode {:o}",
        meta.mode() & 0o7777
    );
    Ok(())
}

#[tokio::test]
async fn the_node_agent_runs_a_pod_from_its_manifest_as_its_pod_would() -> Result<()> {
    use k8s_openapi::api::core::v1::{Node, Pod};
    if !can_run_pods() {
        return Ok(());
    }
    let _ports = FIXED_PORTS.lock().await;
    let plane = Plane::start(&[]).await?;
    apply_base(&plane)?;
    // A workload in a registry, pushed as the README says (`module push`).
    let registry = Registry::start().await?;
    let image = format!("{}/sleeper:v1", registry.addr);
    let sleeper = workloads_dir().join("sleeper.wasm");
    let out = Command::new(wasmlet_bin())
        .args(["module", "push"])
        .arg(&sleeper)
        .args([&image, "--insecure"])
        .output()?;
    ensure!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let pod = PodEnv {
        node_name: "deploy-host",
        pod_ip: "127.0.0.1",
        configmaps: vec![],
        // The one flag the manifest lacks: the test's registry is plain HTTP.
        extra_args: vec![format!("--insecure-registry={}", registry.addr)],
    };
    let mut agent =
        start_as_pod(&plane, &deploy().join("node-agent/deployment.yaml"), &pod).await?;
    let client = plane.client().await?;
    let nodes: Api<Node> = Api::all(client.clone());
    let ready = eventually(
        Duration::from_secs(90),
        "Node deploy-host-wasm Ready",
        || async {
            if agent.exited() {
                return Some(());
            }
            let n = nodes.get_opt("deploy-host-wasm").await.ok().flatten()?;
            n.status?
                .conditions?
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True")
                .then_some(())
        },
    )
    .await;
    agent.running()?;
    ready.map_err(|e| anyhow::anyhow!("{e}; log:\n{}", agent.log()))?;
    assert_private_data_dir(&agent)?;
    // The probes the manifest declares pass.
    eventually(Duration::from_secs(30), "/readyz 200", || async {
        (probe("/readyz") == Some(200)).then_some(())
    })
    .await?;
    ensure!(probe("/healthz") == Some(200));

    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let p: Pod = serde_json::from_value(json!({
        "metadata": {"name": "on-the-wasm-node"},
        "spec": {
            "nodeName": "deploy-host-wasm",
            "terminationGracePeriodSeconds": 1,
            "tolerations": [{"key": "kubernetes.io/arch", "operator": "Exists"}],
            "containers": [{"name": "main", "image": image}],
        },
    }))?;
    pods.create(&Default::default(), &p).await?;
    let running = eventually(Duration::from_secs(90), "the pod Ready", || async {
        let p = pods.get("on-the-wasm-node").await.ok()?;
        (agent.exited() || is_ready(&p)).then_some(())
    })
    .await;
    agent.running()?;
    running.map_err(|e| anyhow::anyhow!("{e}; log:\n{}", agent.log()))?;
    Ok(())
}

#[tokio::test]
async fn the_cluster_agent_pulls_and_reconciles_from_its_manifest_as_its_pod_would() -> Result<()> {
    if !can_run_pods() {
        return Ok(());
    }
    let _ports = FIXED_PORTS.lock().await;
    let plane = Plane::start(&[]).await?;
    apply_base(&plane)?;
    // A plugin built from this repository and pushed as plugins.toml says.
    let registry = Registry::start().await?;
    let reference = format!("{}/wasmlet/plugins/configmap-summary:0.1.0", registry.addr);
    let out = Command::new(wasmlet_bin())
        .args(["plugin", "push"])
        .arg(built_plugins().join("configmap-summary"))
        .args([&reference, "--insecure"])
        .output()?;
    ensure!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The ConfigMap kustomize generates, with the entry its comment shows.
    let list = std::fs::read_to_string(deploy().join("cluster-agent/plugins.toml"))?;
    let list = format!("{list}\n[[plugin]]\nsource = \"oci://{reference}\"\ninsecure = true\n");
    let pod = PodEnv {
        node_name: "deploy-host",
        pod_ip: "127.0.0.1",
        configmaps: vec![("wasmlet-plugins", vec![("plugins.toml", list)])],
        extra_args: vec![],
    };
    let mut agent = start_as_pod(
        &plane,
        &deploy().join("cluster-agent/deployment.yaml"),
        &pod,
    )
    .await?;
    let client = plane.client().await?;
    let api = summaries(&client);
    let served = eventually(Duration::from_secs(90), "the plugin's CRD", || async {
        (agent.exited() || api.list(&Default::default()).await.is_ok()).then_some(())
    })
    .await;
    agent.running()?;
    served.map_err(|e| anyhow::anyhow!("{e}; log:\n{}", agent.log()))?;
    create_summary(&api, "deployed", json!({})).await?;
    create_configmap(&client, "deployed-cm", "deployed", 2).await?;
    let reconciled = eventually(Duration::from_secs(90), "a reconcile", || async {
        (agent.exited() || status_keys(&api.get("deployed").await.ok()?) == Some(2)).then_some(())
    })
    .await;
    agent.running()?;
    reconciled.map_err(|e| anyhow::anyhow!("{e}; log:\n{}", agent.log()))?;
    assert_private_data_dir(&agent)?;
    // It leads (its Lease in kube-system) and its probes pass.
    let holder = plane.kubectl_ok(&[
        "get",
        "lease",
        "-n",
        "kube-system",
        "wasmlet-controller",
        "-o",
        "jsonpath={.spec.holderIdentity}",
    ])?;
    ensure!(!holder.is_empty(), "no leader");
    eventually(Duration::from_secs(30), "/readyz 200", || async {
        (probe("/readyz") == Some(200)).then_some(())
    })
    .await?;
    Ok(())
}
