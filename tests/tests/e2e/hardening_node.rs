//! The node agent and its WASI workloads under attack (issue 30 rows 3, 5, 6,
//! 16), against the real `wasmlet up` binary: a pod holding its mounted
//! Secret open thousands of times, registries serving oversized manifests
//! and blobs, pods bound to the node past its capacity, and a swapped
//! compiled-module artifact. Each test also checks that the plane keeps
//! serving other users (a write, a read and a watch from a fresh client, and
//! kubectl) and that what was stored before is still there.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod, Secret};
use kube::api::{Api, DeleteParams, PostParams, WatchEvent, WatchParams};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use wasmlet_e2e::workload_plane::{self, NODE, workload};
use wasmlet_e2e::{Plane, eventually, proc_status_kib, wasmlet_bin};

// ---- helpers ---------------------------------------------------------------------

/// `wasmlet up` with the scheduler and wasi-runner and one node, `extra` flags.
async fn plane(extra: &[&str]) -> Result<(Plane, kube::Client)> {
    workload_plane::start_with("scheduler,wasi-runner", extra).await
}

fn node_pod(name: &str, mut spec: Value) -> Pod {
    spec["nodeName"] = json!(NODE);
    spec["tolerations"] = json!([{"key": "kubernetes.io/arch", "operator": "Exists"}]);
    spec["terminationGracePeriodSeconds"] = json!(1);
    serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).expect("a pod")
}

fn phase(p: &Pod) -> String {
    p.status
        .as_ref()
        .and_then(|s| s.phase.clone())
        .unwrap_or_default()
}

fn status_of(p: &Pod) -> Value {
    serde_json::to_value(p.status.as_ref()).unwrap_or(Value::Null)
}

/// Polls pod `name` until `pred` holds (the last status and the log tail on time-out).
async fn wait_pod(
    plane: &Plane,
    pods: &Api<Pod>,
    name: &str,
    what: &str,
    pred: impl Fn(&Pod) -> bool,
) -> Result<Pod> {
    workload_plane::wait_pod(plane, pods, name, Duration::from_secs(90), what, pred).await
}

/// Writes the ConfigMap `before`, which [`serves_others`] checks is kept.
async fn write_before(client: &kube::Client) -> Result<()> {
    Api::<ConfigMap>::namespaced(client.clone(), "default")
        .create(
            &PostParams::default(),
            &wasmlet_e2e::configmap("before", &[("k", "v")]),
        )
        .await?;
    Ok(())
}

/// The plane serves another user: a fresh client (its own TLS connection)
/// watches ConfigMaps, writes `name`, sees it arrive on the watch and reads it
/// back; kubectl (another process) reads it too; and the objects of `kept`
/// are all still stored.
async fn serves_others(plane: &Plane, name: &str, kept: &[&str]) -> Result<()> {
    let client = plane.client().await?;
    let cms: Api<ConfigMap> = Api::namespaced(client, "default");
    let list = cms.list(&Default::default()).await.context("list")?;
    let rv = list.metadata.resource_version.unwrap_or_default();
    // Generous: the watch must still be open when the write's event comes,
    // on a machine loaded by the attack as well.
    let mut watch = cms
        .watch(&WatchParams::default().timeout(120), &rv)
        .await
        .context("watch")?
        .boxed();
    cms.create(
        &PostParams::default(),
        &wasmlet_e2e::configmap(name, &[("written", "while attacked")]),
    )
    .await
    .context("write")?;
    let seen = tokio::time::timeout(Duration::from_secs(60), async {
        while let Some(ev) = watch.try_next().await? {
            if let WatchEvent::Added(cm) = ev
                && cm.metadata.name.as_deref() == Some(name)
            {
                return anyhow::Ok(true);
            }
        }
        Ok(false)
    })
    .await
    .context("the watch event")??;
    ensure!(seen, "the watch ended without {name}");
    cms.get(name).await.context("read")?;
    let out = plane.kubectl_ok(&["get", "configmap", name, "-o", "name"])?;
    ensure!(out.trim() == format!("configmap/{name}"), "kubectl: {out}");
    for k in kept {
        cms.get(k)
            .await
            .with_context(|| format!("{k} stored before is gone"))?;
    }
    Ok(())
}

fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0)
}

/// (type, reason, message) of the core/v1 and events.k8s.io/v1 Events about `name`.
async fn events_about(client: &kube::Client, name: &str) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    let core: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(client.clone(), "default");
    for e in core
        .list(&Default::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default()
    {
        if e.involved_object.name.as_deref() == Some(name) {
            out.push((
                e.type_.unwrap_or_default(),
                e.reason.unwrap_or_default(),
                e.message.unwrap_or_default(),
            ));
        }
    }
    let v1: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(client.clone(), "default");
    for e in v1
        .list(&Default::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default()
    {
        if e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name) {
            out.push((
                e.type_.unwrap_or_default(),
                e.reason.unwrap_or_default(),
                e.note.unwrap_or_default(),
            ));
        }
    }
    out
}

async fn event_containing(client: &kube::Client, name: &str, texts: &[&str]) -> Result<String> {
    let found = eventually(
        Duration::from_secs(60),
        &format!("an event about {name}"),
        || async {
            events_about(client, name)
                .await
                .into_iter()
                .map(|(_, _, m)| m)
                .find(|m| texts.iter().all(|t| m.contains(t)))
        },
    )
    .await;
    match found {
        Ok(m) => Ok(m),
        Err(e) => bail!("{e}: {:?}", events_about(client, name).await),
    }
}

// ---- a registry serving what it likes ----------------------------------------------

/// A body served: `prefix`, then filler up to `total` bytes, with
/// `Content-Length: declared` when set (else until the connection closes);
/// `status` and `headers` (lines ending in CRLF) go in the response head.
#[derive(Clone)]
struct Reply {
    content_type: &'static str,
    declared: Option<u64>,
    prefix: Vec<u8>,
    total: u64,
    status: &'static str,
    headers: String,
}

impl Default for Reply {
    fn default() -> Reply {
        Reply {
            content_type: "application/json",
            declared: None,
            prefix: vec![],
            total: 0,
            status: "200 OK",
            headers: String::new(),
        }
    }
}

impl Reply {
    fn json(v: Value) -> Reply {
        let body = serde_json::to_vec(&v).unwrap();
        Reply {
            declared: Some(body.len() as u64),
            total: body.len() as u64,
            prefix: body,
            ..Reply::default()
        }
    }
}

/// A one-request-per-connection HTTP/1.1 server answering GETs from `route`
/// (404 where it has nothing); counts the body bytes it managed to send.
struct FakeRegistry {
    addr: String,
    sent: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FakeRegistry {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FakeRegistry {
    async fn start(
        route: impl Fn(&str) -> Option<Reply> + Send + Sync + 'static,
    ) -> Result<FakeRegistry> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?.to_string();
        let sent = Arc::new(AtomicU64::new(0));
        let route = Arc::new(route);
        let counter = sent.clone();
        let task = tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                let (route, sent) = (route.clone(), counter.clone());
                tokio::spawn(async move {
                    let mut head = Vec::new();
                    let mut buf = [0u8; 4096];
                    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 65536 {
                        match conn.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => head.extend_from_slice(&buf[..n]),
                        }
                    }
                    let text = String::from_utf8_lossy(&head);
                    let mut first = text.lines().next().unwrap_or("").split(' ');
                    let (method, path) = (first.next().unwrap_or(""), first.next().unwrap_or(""));
                    let Some(reply) = route(path) else {
                        let _ = conn
                            .write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                            .await;
                        return;
                    };
                    let mut header = format!(
                        "HTTP/1.1 {}\r\nContent-Type: {}\r\nConnection: close\r\n{}",
                        reply.status, reply.content_type, reply.headers
                    );
                    if let Some(n) = reply.declared {
                        header.push_str(&format!("Content-Length: {n}\r\n"));
                    }
                    header.push_str("\r\n");
                    if conn.write_all(header.as_bytes()).await.is_err() || method == "HEAD" {
                        return;
                    }
                    let filler = vec![b' '; 64 << 10];
                    let mut left = reply.total;
                    let mut chunks = std::iter::once(reply.prefix.as_slice())
                        .chain(std::iter::repeat(filler.as_slice()));
                    while left > 0 {
                        let c = chunks.next().unwrap();
                        let c = &c[..c.len().min(left as usize)];
                        if c.is_empty() {
                            continue;
                        }
                        if conn.write_all(c).await.is_err() {
                            return;
                        }
                        sent.fetch_add(c.len() as u64, Ordering::Relaxed);
                        left -= c.len() as u64;
                    }
                    let _ = conn.shutdown().await;
                });
            }
        });
        Ok(FakeRegistry { addr, sent, task })
    }

    fn sent_mib(&self) -> u64 {
        self.sent.load(Ordering::Relaxed) >> 20
    }
}

const HUGE: u64 = 512 << 20;
const MANIFEST_LIMIT: &str = "4194304";

// ---- row 3: a workload opening its mounted Secret 30,000 times --------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workload_opening_its_secret_thirty_thousand_times_is_capped() -> Result<()> {
    hog_is_capped("reader.wasm").await
}

/// The same as a preview 1 core module, whose descriptor table wasmtime-wasi
/// keeps private: its resource table is capped, and it traps at the cap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_preview1_workload_opening_its_secret_thirty_thousand_times_is_capped() -> Result<()> {
    hog_is_capped("reader.p1.wasm").await
}

/// A pod running `module` holds its mounted Secret open 30,000 times: its
/// opens fail inside it at the cap of 32 (a preview 1 module traps there),
/// the host keeps its descriptors and serves, and a neighbour pod runs.
async fn hog_is_capped(module: &str) -> Result<()> {
    let (plane, client) = plane(&["--workload-max-open-files", "32"]).await?;
    let host = plane.pid()?;
    write_before(&client).await?;
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "sec"}, "data": {"key": "czNjcmV0"},
    }))?;
    Api::<Secret>::namespaced(client.clone(), "default")
        .create(&PostParams::default(), &secret)
        .await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let spec = json!({
        "restartPolicy": "Never",
        "volumes": [{"name": "sec", "secret": {"secretName": "sec"}}],
        "containers": [{
            "name": "main", "image": workload(module),
            "args": ["hold:/sec/key=30000", "sleep:600"],
            "volumeMounts": [{"name": "sec", "mountPath": "/sec"}],
        }],
    });
    pods.create(&PostParams::default(), &node_pod("hog", spec))
        .await?;
    if module.ends_with(".p1.wasm") {
        // Preview 1: the open past the cap traps the workload, with a reason.
        let p = wait_pod(&plane, &pods, "hog", "Failed", |p| {
            phase(p) != "Pending" && phase(p) != "Running"
        })
        .await?;
        let term = &status_of(&p)["containerStatuses"][0]["state"]["terminated"];
        ensure!(
            phase(&p) == "Failed"
                && term["reason"] == "Error"
                && term["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("too many open files")),
            "{}",
            status_of(&p)
        );
    } else {
        // WASI 0.2: its opens stop at the cap with an error inside the workload.
        let line = eventually(Duration::from_secs(90), "the hog's report", || async {
            let out = plane.kubectl(&["logs", "hog"]).ok()?;
            let text = String::from_utf8_lossy(&out.stdout).into_owned();
            text.lines()
                .find(|l| l.starts_with("hold "))
                .map(str::to_string)
        })
        .await?;
        let opened: usize = line
            .split("ERR opened ")
            .nth(1)
            .and_then(|r| r.split(',').next())
            .and_then(|n| n.parse().ok())
            .with_context(|| format!("the open did not fail in the workload: {line}"))?;
        ensure!(
            opened > 0 && opened < 32,
            "opened {opened} (cap 32): {line}"
        );
        // Its log can be read before its Running status is written: wait
        // for the status to leave Pending, then it must still be running.
        let p = wait_pod(&plane, &pods, "hog", "past Pending", |p| {
            phase(p) != "Pending"
        })
        .await?;
        ensure!(phase(&p) == "Running", "the hog stopped: {}", status_of(&p));
    }
    // The host has descriptors to spare, and serves.
    let fds = open_fds(host);
    ensure!(fds < 2000, "the host holds {fds} descriptors");
    serves_others(&plane, "during-hog", &["before"]).await?;
    // A module loads and runs beside it (a compile and a spawn need descriptors).
    let spec = json!({"restartPolicy": "Never", "containers": [{"name": "main", "image": workload("hello.wasm")}]});
    pods.create(&PostParams::default(), &node_pod("neighbour", spec))
        .await?;
    let p = wait_pod(&plane, &pods, "neighbour", "Succeeded", |p| {
        matches!(phase(p).as_str(), "Succeeded" | "Failed")
    })
    .await?;
    ensure!(phase(&p) == "Succeeded", "{}", status_of(&p));
    Ok(())
}

// ---- row 5: oversized manifests and blobs -----------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_manifest_is_refused_before_it_is_read() -> Result<()> {
    let registry = FakeRegistry::start(|path| match path {
        "/v2/" => Some(Reply::json(json!({}))),
        // 512 MiB until the connection closes, and 700 MiB declared.
        "/v2/endless/manifests/v1" | "/v2/declared/manifests/v1" => Some(Reply {
            content_type: "application/vnd.oci.image.manifest.v1+json",
            declared: path.contains("declared").then_some(700 << 20),
            prefix: br#"{"schemaVersion":2,"layers":["#.to_vec(),
            total: HUGE,
            ..Reply::default()
        }),
        _ => None,
    })
    .await?;
    pulls_fail_unread(
        &registry,
        &[
            ("endless", &["manifest", MANIFEST_LIMIT]),
            ("declared", &["manifest", MANIFEST_LIMIT]),
        ],
    )
    .await
}

/// A registry that makes the node authenticate, then answers the token
/// request with 512 MiB: `oci-client` read it whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endless_token_answer_is_refused_before_it_is_read() -> Result<()> {
    let realm = Arc::new(std::sync::OnceLock::<String>::new());
    let at = realm.clone();
    let registry = FakeRegistry::start(move |path| match path {
        "/v2/" => Some(Reply {
            status: "401 Unauthorized",
            headers: format!(
                "WWW-Authenticate: Bearer realm=\"http://{}/token\",service=\"fake\"\r\n",
                at.get()?
            ),
            ..Reply::default()
        }),
        p if p.starts_with("/token?") => Some(Reply {
            prefix: br#"{"token":""#.to_vec(),
            total: HUGE,
            ..Reply::default()
        }),
        _ => None,
    })
    .await?;
    realm.set(registry.addr.clone()).ok();
    pulls_fail_unread(&registry, &[("tokened", &["token endpoint", "65536"])]).await
}

/// Pods of images `registry` serves (name, texts their pull error holds) fail
/// with those texts while the node's peak RSS grows by less than 100 MiB and
/// under 64 MiB are read, and the plane goes on serving.
async fn pulls_fail_unread(registry: &FakeRegistry, images: &[(&str, &[&str])]) -> Result<()> {
    let addr = registry.addr.clone();
    let (plane, client) = plane(&["--insecure-registry", &addr]).await?;
    let host = plane.pid()?;
    write_before(&client).await?;
    let peak_before = proc_status_kib(host, "VmHWM:")?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    for (name, _) in images {
        let image = format!("{addr}/{name}:v1");
        let spec =
            json!({"restartPolicy": "Never", "containers": [{"name": "main", "image": image}]});
        pods.create(&PostParams::default(), &node_pod(name, spec))
            .await?;
    }
    for (name, texts) in images {
        let image = format!("{addr}/{name}:v1");
        let mut wanted = vec![image.as_str()];
        wanted.extend_from_slice(texts);
        event_containing(&client, name, &wanted).await?;
    }
    serves_others(&plane, "after-pulls", &["before"]).await?;
    let peak_after = proc_status_kib(host, "VmHWM:")?;
    let grown = (peak_after.saturating_sub(peak_before)) >> 10;
    println!(
        "peak RSS {} MiB -> {} MiB; the registry sent {} MiB",
        peak_before >> 10,
        peak_after >> 10,
        registry.sent_mib()
    );
    ensure!(grown < 100, "the node's peak RSS grew by {grown} MiB");
    ensure!(
        registry.sent_mib() < 64,
        "{} MiB were read",
        registry.sent_mib()
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plugin_pull_stops_reading_a_blob_at_its_declared_size() -> Result<()> {
    let layer = format!("sha256:{}", "a".repeat(64));
    let manifest = json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.wasm.config.v0+json", "digest": format!("sha256:{}", "0".repeat(64)), "size": 2},
        "layers": [{"mediaType": "application/wasm", "digest": layer, "size": 1000}],
    });
    let blob = format!("/v2/liar/blobs/{layer}");
    let registry = FakeRegistry::start(move |path| match path {
        "/v2/" => Some(Reply::json(json!({}))),
        "/v2/liar/manifests/v1" => {
            let mut r = Reply::json(manifest.clone());
            r.content_type = "application/vnd.oci.image.manifest.v1+json";
            Some(r)
        }
        p if p == blob => Some(Reply {
            content_type: "application/octet-stream",
            declared: None,
            prefix: b"\0asm".to_vec(),
            total: HUGE,
            ..Reply::default()
        }),
        _ => None,
    })
    .await?;
    let dir = tempfile::tempdir()?;
    let reference = format!("oci://{}/liar:v1", registry.addr);
    let out_dir = dir.path().to_path_buf();
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(wasmlet_bin())
            .args(["plugin", "pull", &reference])
            .arg(&out_dir)
            .arg("--insecure")
            .env("HOME", &out_dir)
            .output()
    })
    .await??;
    let err = String::from_utf8_lossy(&out.stderr);
    println!(
        "plugin pull: {err}; the registry sent {} MiB",
        registry.sent_mib()
    );
    ensure!(!out.status.success(), "the pull succeeded");
    ensure!(err.contains("1000") && err.contains("liar"), "{err}");
    ensure!(
        registry.sent_mib() < 64,
        "{} MiB were read",
        registry.sent_mib()
    );
    ensure!(
        !dir.path().join("liar.wasm").exists(),
        "a plugin was written"
    );
    Ok(())
}

// ---- row 6: node admission -------------------------------------------------------

fn resources(requests: Value) -> Value {
    json!({"name": "main", "image": workload("sleeper.wasm"), "resources": {"requests": requests}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_past_the_nodes_capacity_are_rejected_as_the_kubelet_rejects_them() -> Result<()> {
    let (plane, client) = plane(&[
        "--workload-memory-budget",
        "1Gi",
        "--workload-memory-limit",
        "600Mi",
        "--workload-max-memory",
        "1Gi",
    ])
    .await?;
    write_before(&client).await?;
    let node = Api::<Node>::all(client.clone()).get(NODE).await?;
    let alloc = node.status.and_then(|s| s.allocatable).unwrap_or_default();
    ensure!(
        alloc.get("memory").map(|q| q.0.as_str()) == Some("1073741824"),
        "allocatable: {alloc:?}"
    );
    let cpu: i64 = alloc
        .get("cpu")
        .and_then(|q| q.0.parse().ok())
        .context("cpu")?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    // spec.nodeName set by the author: the scheduler never saw these.
    let huge = json!({"containers": [resources(json!({"cpu": "500", "memory": "1000Gi"}))]});
    pods.create(&PostParams::default(), &node_pod("huge", huge))
        .await?;
    let greedy = json!({"containers": [resources(json!({"memory": "2Gi"}))]});
    pods.create(&PostParams::default(), &node_pod("greedy", greedy))
        .await?;
    let p = wait_pod(&plane, &pods, "huge", "rejection", |p| phase(p) == "Failed").await?;
    let s = status_of(&p);
    ensure!(s["reason"] == "OutOfcpu", "{s}");
    ensure!(
        s["message"]
            == format!(
                "Pod was rejected: Node didn't have enough resource: cpu, requested: 500000, used: 0, capacity: {}",
                cpu * 1000
            ),
        "{s}"
    );
    let p = wait_pod(&plane, &pods, "greedy", "rejection", |p| {
        phase(p) == "Failed"
    })
    .await?;
    let s = status_of(&p);
    ensure!(s["reason"] == "OutOfmemory", "{s}");
    ensure!(
        s["message"]
            == "Pod was rejected: Node didn't have enough resource: memory, requested: 2147483648, used: 0, capacity: 1073741824",
        "{s}"
    );
    event_containing(
        &client,
        "greedy",
        &["Node didn't have enough resource: memory"],
    )
    .await?;
    ensure!(
        !s.to_string().contains("containerStatuses")
            || s["containerStatuses"][0]["state"].get("running").is_none(),
        "a rejected pod ran: {s}"
    );
    // Requests that fit are admitted; the next one is measured against them.
    let fits = json!({"containers": [resources(json!({"memory": "700Mi"}))]});
    pods.create(&PostParams::default(), &node_pod("fits", fits.clone()))
        .await?;
    wait_pod(&plane, &pods, "fits", "Running", |p| phase(p) == "Running").await?;
    pods.create(&PostParams::default(), &node_pod("second", fits))
        .await?;
    let p = wait_pod(&plane, &pods, "second", "rejection", |p| {
        phase(p) == "Failed"
    })
    .await?;
    let s = status_of(&p);
    ensure!(
        s["message"]
            == format!(
                "Pod was rejected: Node didn't have enough resource: memory, requested: {}, used: {}, capacity: 1073741824",
                700u64 << 20,
                700u64 << 20
            ),
        "{s}"
    );
    // Without requests or a limit, a pod is admitted as the kubelet admits it:
    // its default memory cap (600Mi, more than the 324Mi the 700Mi one left)
    // bounds the workload and reserves nothing (issue 45: it used to be refused
    // at each start, crash-looping).
    let none = json!({"containers": [{"name": "main", "image": workload("sleeper.wasm")}]});
    pods.create(&PostParams::default(), &node_pod("unbounded", none))
        .await?;
    wait_pod(&plane, &pods, "unbounded", "Running", |p| {
        phase(p) == "Running"
    })
    .await?;
    // A rejected pod is deleted at once; the admitted one frees its requests.
    for name in ["huge", "fits", "unbounded"] {
        pods.delete(name, &DeleteParams::default()).await?;
    }
    eventually(Duration::from_secs(60), "the pods to go", || async {
        let names: BTreeSet<String> = pods
            .list(&Default::default())
            .await
            .ok()?
            .items
            .into_iter()
            .filter_map(|p| p.metadata.name)
            .collect();
        ["huge", "fits", "unbounded"]
            .iter()
            .all(|n| !names.contains(*n))
            .then_some(())
    })
    .await?;
    let again = json!({"containers": [resources(json!({"memory": "700Mi"}))]});
    pods.create(&PostParams::default(), &node_pod("third", again))
        .await?;
    wait_pod(&plane, &pods, "third", "Running", |p| phase(p) == "Running").await?;
    serves_others(&plane, "after-admission", &["before"]).await?;
    Ok(())
}

// ---- row 16: a swapped compiled-module artifact ------------------------------------

fn cwasm_files(root: &Path) -> BTreeSet<PathBuf> {
    let mut out = BTreeSet::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "cwasm") {
                out.insert(p);
            }
        }
    }
    out
}

async fn run_to_end(plane: &Plane, pods: &Api<Pod>, name: &str, image: &str) -> Result<String> {
    let spec = json!({"restartPolicy": "Never", "containers": [{"name": "main", "image": image}]});
    pods.create(&PostParams::default(), &node_pod(name, spec))
        .await?;
    wait_pod(plane, pods, name, "a terminal phase", |p| {
        matches!(phase(p).as_str(), "Succeeded" | "Failed")
    })
    .await?;
    plane.kubectl_ok(&["logs", name])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_swapped_compiled_module_is_recompiled_not_run() -> Result<()> {
    let (mut plane, client) = plane(&[]).await?;
    write_before(&client).await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let data = plane.data_dir().to_path_buf();
    // The victim's module (a WASI preview 1 core module), then the attacker's.
    let before = cwasm_files(&data);
    let logs = run_to_end(&plane, &pods, "victim", &workload("hello.p1.wasm")).await?;
    ensure!(logs.contains("hello from"), "{logs}");
    let victims: BTreeSet<PathBuf> = cwasm_files(&data).difference(&before).cloned().collect();
    let logs = run_to_end(&plane, &pods, "attacker", &workload("exitcode.p1.wasm")).await?;
    ensure!(logs.contains("exiting with"), "{logs}");
    let attackers: Vec<PathBuf> = cwasm_files(&data)
        .difference(&before)
        .filter(|p| !victims.contains(*p))
        .cloned()
        .collect();
    ensure!(
        !victims.is_empty() && !attackers.is_empty(),
        "no compiled artifacts: {victims:?} {attackers:?}"
    );
    // Whoever can write the cache puts the attacker's artifact in the victim's place.
    let mut swapped = 0;
    for v in &victims {
        if let Some(a) = attackers.iter().find(|a| a.parent() == v.parent()) {
            std::fs::copy(a, v)?;
            swapped += 1;
        }
    }
    ensure!(
        swapped > 0,
        "no artifacts to swap: {victims:?} {attackers:?}"
    );
    // After a restart the victim's image runs its own code.
    plane.kill9();
    plane.spawn().await?;
    let client = plane.client().await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let logs = run_to_end(&plane, &pods, "victim-again", &workload("hello.p1.wasm")).await?;
    ensure!(
        logs.contains("hello from") && !logs.contains("exiting with"),
        "the swapped artifact ran: {logs}"
    );
    serves_others(&plane, "after-swap", &["before"]).await?;
    Ok(())
}
