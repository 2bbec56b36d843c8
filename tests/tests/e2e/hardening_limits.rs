//! Issue 50's attacks, each against a plane that runs inside 4 GiB of
//! memory ([`Limits::ATTACK`]: an allocation past it aborts the process, so
//! an attack that used to exhaust memory now fails its test instead of
//! swapping the machine). Each attack is answered with a clear error or
//! bounded, and the plane goes on serving others.
//!
//! | attack (before the bound) | here |
//! |---|---|
//! | 16 parallel lists of a large collection, each copied whole (+1.16 GB) | [`unread_lists_of_a_large_collection_hold_no_copies`] |
//! | an unread watch kept 8,192 events (3.5 GB) | [`an_unread_watch_is_cut_off_past_its_byte_bound`] |
//! | deeply nested YAML parsed in quadratic time (117 KiB: 12.8 s) | [`deeply_nested_yaml_is_refused_before_it_is_parsed`] |
//! | `listType: map` updates matched in N² (10k items: 7 s) | [`a_map_list_of_60k_items_is_updated_in_linear_time`] |
//! | idle connections took every descriptor, the node went NotReady | [`idle_connections_leave_the_plane_its_own_connections`] |
//! | slow writes ran on the async workers, `/readyz` stalled | [`readyz_answers_while_four_of_the_heaviest_writes_run`] |
//! | a plugin's `create-all` of 100 MiB was parsed at once (+3.4 GB) | [`a_plugins_100_mib_batch_is_parsed_a_few_objects_at_a_time`] |
//!
//! The CEL attacks are in `cel.rs`, in the same limit.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, PostParams, WatchEvent};
use serde_json::{Value, json};
use wasmlet_e2e::{Limits, Plane, configmap, dynamic, eventually, install_crd, watch_from_now};

/// A plane inside [`Limits::ATTACK`] and its admin client.
async fn plane() -> Result<(Plane, kube::Client)> {
    let plane = Plane::start_limited(&[], Limits::ATTACK).await?;
    let client = plane.client().await?;
    Ok((plane, client))
}

/// The plane is alive and answers a write and a read; returns its peak RSS
/// in MiB (printed by the tests as their figure).
async fn still_serves(plane: &mut Plane, client: &kube::Client, name: &str) -> Result<u64> {
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    cms.create(&PostParams::default(), &configmap(name, &[("k", "v")]))
        .await
        .with_context(|| format!("creating {name} after the attack"))?;
    cms.get(name).await?;
    plane.proc_status_mib("VmHWM:")
}

/// ConfigMaps `PREFIX-0`.. of 1 MiB each.
async fn big_configmaps(cms: &Api<ConfigMap>, prefix: &str, n: usize) -> Result<()> {
    let data = "x".repeat(1 << 20);
    for i in 0..n {
        cms.create(
            &PostParams::default(),
            &configmap(&format!("{prefix}-{i}"), &[("blob", &data)]),
        )
        .await?;
    }
    Ok(())
}

/// 48 clients list a collection of 100 MiB (100 ConfigMaps of 1 MiB) at
/// once and read nothing. Each answer used to be built whole before it was
/// sent (4.8 GB here, past the limit); now each holds the stored items'
/// shared bytes and streams them as the client reads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unread_lists_of_a_large_collection_hold_no_copies() -> Result<()> {
    let (mut plane, client) = plane().await?;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    big_configmaps(&cms, "big", 100).await?;
    let before = plane.proc_status_mib("VmRSS:")?;
    let mut held = Vec::new();
    for _ in 0..48 {
        // Each its own client, so that each list has a connection of its own.
        let lister = plane.client().await?;
        let req = http::Request::get("/api/v1/namespaces/default/configmaps")
            .body(kube::client::Body::from(Vec::new()))?;
        held.push(tokio::spawn(async move { lister.send(req).await }));
    }
    let mut responses = Vec::new();
    for h in held {
        let resp = h.await?.context("a list")?;
        ensure!(resp.status() == 200, "a list answered {}", resp.status());
        let len: u64 = resp
            .headers()
            .get(http::header::CONTENT_LENGTH)
            .context("the list's Content-Length")?
            .to_str()?
            .parse()?;
        ensure!(len > 100 << 20, "the list is {len} bytes");
        responses.push(resp);
    }
    // Every answer is open and unread.
    let peak = still_serves(&mut plane, &client, "after-lists").await?;
    println!(
        "48 unread lists of 100 MiB: RSS {before} MiB before, peak {peak} MiB (4.8 GB if copied)"
    );
    ensure!(
        peak < before + 1024,
        "the plane's peak RSS grew from {before} MiB to {peak} MiB"
    );
    // One of them read to the end is the whole list.
    let bytes = responses
        .pop()
        .context("a response")?
        .into_body()
        .collect_bytes()
        .await?;
    let list: Value = serde_json::from_slice(&bytes)?;
    ensure!(
        list["items"].as_array().map(Vec::len) == Some(100),
        "100 items"
    );
    Ok(())
}

/// A watch that is never read while 64 objects of 1 MiB change: before the
/// byte bound it kept them all (one such watch held 3.5 GB); now it is cut
/// off once 8 MiB are queued, and its client, reading at last, sees the
/// stream end early and re-watches, as from any closed watch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unread_watch_is_cut_off_past_its_byte_bound() -> Result<()> {
    let (mut plane, client) = plane().await?;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let watched: Api<ConfigMap> = Api::namespaced(plane.client().await?, "default");
    let mut stream = watch_from_now(&watched).await?;
    big_configmaps(&cms, "w", 64).await?;
    let peak = still_serves(&mut plane, &client, "after-writes").await?;
    let mut seen = 0;
    let read_all = async {
        while let Some(ev) = stream.next().await {
            match ev {
                Ok(WatchEvent::Added(_)) => seen += 1,
                Ok(other) => anyhow::bail!("unexpected event {other:?}"),
                // An error ends the watch as well.
                Err(_) => break,
            }
        }
        Ok(())
    };
    tokio::time::timeout(Duration::from_secs(60), read_all)
        .await
        .context("the cut-off watch never ended")??;
    println!("an unread watch under 64 MiB of writes: delivered {seen} of 64; peak RSS {peak} MiB");
    ensure!(
        seen < 64,
        "the unread watch delivered all 64 events: it was never cut off"
    );
    Ok(())
}

/// 1 MiB of `[[[[...` as a YAML body. libyaml took quadratic time on deep
/// flow nesting before the depth was refused (117 KiB: 12.8 s of CPU; this
/// one would take about 16 minutes); now a streaming pre-scan refuses it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deeply_nested_yaml_is_refused_before_it_is_parsed() -> Result<()> {
    let (mut plane, client) = plane().await?;
    let depth = 512 * 1024;
    let body = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
    let req = http::Request::post("/api/v1/namespaces/default/configmaps")
        .header(http::header::CONTENT_TYPE, "application/yaml")
        .body(body.into_bytes())?;
    let answer = tokio::time::timeout(Duration::from_secs(120), client.request_text(req))
        .await
        .context("the nested YAML body was not answered in 120 s")?;
    let status = match answer {
        Err(kube::Error::Api(s)) => s,
        other => anyhow::bail!("expected a 400, got {other:?}"),
    };
    ensure!(status.code == 400, "{status:?}");
    ensure!(
        status.message.contains("nests deeper than 100 levels"),
        "{}",
        status.message
    );
    let peak = still_serves(&mut plane, &client, "after-yaml").await?;
    println!("1 MiB of nested YAML refused; peak RSS {peak} MiB");
    Ok(())
}

const GROUP: &str = "attacks.wasmlet.dev";

/// `Inventory`: `spec.items` is a map list keyed by `name` (up to 150,000).
/// No CEL rule: a rule's run-time deadline (5 s, wall clock) could refuse
/// these writes on a loaded machine; the rules' own attacks are in `cel.rs`.
fn inventory_crd() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("inventories.{GROUP}")},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {"plural": "inventories", "singular": "inventory", "kind": "Inventory"},
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "properties": {
                        "items": {
                            "type": "array",
                            "maxItems": 150_000,
                            "x-kubernetes-list-type": "map",
                            "x-kubernetes-list-map-keys": ["name"],
                            "items": {"type": "object", "required": ["name"], "properties": {
                                "name": {"type": "string", "maxLength": 16},
                                "v": {"type": "string", "maxLength": 16},
                            }},
                        },
                    }},
                }}},
            }],
        },
    })
}

fn inventory(name: &str, n: usize, v: &str) -> kube::core::DynamicObject {
    let items: Vec<Value> = (0..n)
        .map(|i| json!({"name": format!("i-{i}"), "v": v}))
        .collect();
    dynamic(json!({
        "apiVersion": format!("{GROUP}/v1"),
        "kind": "Inventory",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"items": items},
    }))
}

async fn inventories(client: &kube::Client) -> Result<Api<kube::core::DynamicObject>> {
    install_crd(client, inventory_crd()).await?;
    let ar = kube::core::ApiResource {
        group: GROUP.into(),
        version: "v1".into(),
        api_version: format!("{GROUP}/v1"),
        kind: "Inventory".into(),
        plural: "inventories".into(),
    };
    let api = Api::<kube::core::DynamicObject>::namespaced_with(client.clone(), "default", &ar);
    eventually(Duration::from_secs(60), "the CRD served", || async {
        api.list(&ListParams::default()).await.ok()
    })
    .await?;
    Ok(api)
}

/// An update of a 60,000-item map list (1.7 MB): its items were matched to
/// the old ones pairwise (10,000 items took 7 s, these about 4 minutes);
/// now by key, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_map_list_of_60k_items_is_updated_in_linear_time() -> Result<()> {
    let (mut plane, client) = plane().await?;
    let api = inventories(&client).await?;
    let n = 60_000;
    let created = api
        .create(&PostParams::default(), &inventory("inv", n, "a"))
        .await?;
    let mut changed = inventory("inv", n, "b");
    changed.metadata.resource_version = created.metadata.resource_version.clone();
    let started = Instant::now();
    let updated = tokio::time::timeout(
        Duration::from_secs(120),
        api.replace("inv", &PostParams::default(), &changed),
    )
    .await
    .context("the update of 60,000 map-list items was not answered in 120 s")??;
    let took = started.elapsed();
    ensure!(
        updated.data["spec"]["items"][n - 1]["v"] == "b",
        "the update is stored"
    );
    let peak = still_serves(&mut plane, &client, "after-map-list").await?;
    println!("an update of {n} map-list items: {took:?}; peak RSS {peak} MiB");
    Ok(())
}

/// Four clients write 100,000-item inventories (2.6 MB each, every item
/// checked by the schema, all of it tracked as managed fields) at once,
/// while another asks `/readyz` and a watch waits for a small write. Those
/// writes used to run on the async workers (two here), so nothing else was
/// answered until they ended; now they run beside them, and `/readyz` and
/// the watch answer while they are all still in flight.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_answers_while_four_of_the_heaviest_writes_run() -> Result<()> {
    let (mut plane, client) = plane().await?;
    let api = inventories(&client).await?;
    let cms: Api<ConfigMap> = Api::namespaced(plane.client().await?, "default");
    let mut watch = watch_from_now(&cms).await?;
    let mut writes = Vec::new();
    for w in 0..4 {
        let writer = plane.client().await?;
        let api = Api::<kube::core::DynamicObject>::namespaced_with(
            writer,
            "default",
            &kube::core::ApiResource::from_gvk_with_plural(
                &kube::core::GroupVersionKind::gvk(GROUP, "v1", "Inventory"),
                "inventories",
            ),
        );
        let obj = inventory(&format!("heavy-{w}"), 100_000, "x");
        writes.push(tokio::spawn(async move {
            let r = api.create(&PostParams::default(), &obj).await;
            (Instant::now(), r.map(|_| ()))
        }));
    }
    let prober = plane.client().await?;
    let mut answers = Vec::new();
    cms.create(&PostParams::default(), &configmap("small", &[("k", "v")]))
        .await?;
    let seen = tokio::time::timeout(Duration::from_secs(60), async {
        while let Some(ev) = watch.next().await {
            if let Ok(WatchEvent::Added(cm)) = ev
                && cm.metadata.name.as_deref() == Some("small")
            {
                return Some(Instant::now());
            }
        }
        None
    })
    .await
    .context("the watch did not deliver the small write in 60 s")?
    .context("the watch ended")?;
    while !writes.iter().any(|w| w.is_finished()) {
        let asked = Instant::now();
        let req = http::Request::get("/readyz").body(Vec::new())?;
        let text = tokio::time::timeout(Duration::from_secs(60), prober.request_text(req))
            .await
            .context("/readyz was not answered in 60 s")??;
        ensure!(text.trim() == "ok", "/readyz: {text}");
        answers.push((asked, Instant::now()));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut first_done = None;
    for w in writes {
        let (done, r) = w.await?;
        r.map_err(|e| anyhow::anyhow!("a heavy write: {e:?}"))?;
        first_done = Some(first_done.map_or(done, |f: Instant| f.min(done)));
    }
    let first_done = first_done.context("four writes")?;
    let during: Vec<Duration> = answers
        .iter()
        .filter(|(_, answered)| *answered < first_done)
        .map(|(asked, answered)| *answered - *asked)
        .collect();
    let slowest = during.iter().max().copied().unwrap_or_default();
    println!(
        "/readyz answered {} times while four 100,000-item writes ran; slowest {slowest:?}",
        during.len()
    );
    ensure!(
        during.len() >= 3,
        "/readyz answered {} times while the writes ran",
        during.len()
    );
    ensure!(
        seen < first_done,
        "the watch delivered the small write only after a heavy write ended"
    );
    api.get("heavy-0").await?;
    still_serves(&mut plane, &client, "after-heavy-writes").await?;
    Ok(())
}

/// 1,000 connections from ten other addresses that never start TLS, against
/// a plane allowed 1,024 descriptors. Before the connection bounds they took
/// every descriptor: the node could open no socket and went NotReady. Now
/// each address holds at most a quarter of the unauthenticated share, the
/// rest is closed at once, and the plane's certificate users (the host, the
/// node) and the health endpoints keep working throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_leave_the_plane_its_own_connections() -> Result<()> {
    let limits = Limits {
        open_files: Some(1024),
        ..Limits::ATTACK
    };
    let mut plane = Plane::start_up_limited(&[], &[], limits).await?;
    let controller = plane.identity_client("kubeconfig-controller").await?;
    let (server, _) = plane.endpoint()?;
    let addr: SocketAddr = server
        .trim_start_matches("https://")
        .parse()
        .context("the server's address")?;
    let mut attack = Vec::new();
    for i in 0..1000u32 {
        let source: SocketAddr = format!("127.0.0.{}:0", 2 + i % 10).parse()?;
        let socket = tokio::net::TcpSocket::new_v4()?;
        socket.bind(source)?;
        // The kernel completes the handshake whether or not the plane keeps
        // the connection.
        if let Ok(stream) = socket.connect(addr).await {
            attack.push(stream);
        }
    }
    println!("the attacker opened {} connections", attack.len());
    // Held open while the plane's own users work.
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::all(controller.clone());
    for _ in 0..5 {
        pods.list(&ListParams::default())
            .await
            .context("the controller's certificate client during the attack")?;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (code, body) = plane.http_get("/readyz").await?;
    ensure!(code == 200, "/readyz during the attack: {code} {body}");
    let fds = std::fs::read_dir(format!("/proc/{}/fd", plane.pid()?))?.count();
    println!("the plane holds {fds} descriptors of 1,024");
    ensure!(fds < 1000, "the plane holds {fds} descriptors");
    drop(attack);
    let client = plane.client().await?;
    still_serves(&mut plane, &client, "after-connections").await?;
    Ok(())
}

/// A plugin hands `create-all` 500 ConfigMaps of 16,000 keys each (about
/// 100 MiB of JSON, within its 512 MiB cap), none of which it may create.
/// The host parsed the whole batch before it answered the first (3.4 GB for
/// 103 MiB); now it parses each as a place among its 32 creates in flight
/// frees up, and answers every one: denied by its manifest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugins_100_mib_batch_is_parsed_a_few_objects_at_a_time() -> Result<()> {
    use crate::faults::{faults, install_fault_crd, install_fault_plugin, served};
    let mut plane = Plane::start_up_limited(&["--no-node"], &[], Limits::ATTACK).await?;
    let client = plane.client().await?;
    install_fault_crd(&client).await?;
    let api = faults(&client);
    served(&api).await?;
    install_fault_plugin(&plane.plugin_dir(), "batcher", 1, 512, 120_000)?;
    let before = plane.proc_status_mib("VmRSS:")?;
    let obj = dynamic(json!({
        "apiVersion": "testing.wasmlet.dev/v1", "kind": "Fault",
        "metadata": {"name": "batch", "namespace": "default",
            "labels": {"faults.wasmlet.dev/plugin": "batcher"}},
        "spec": {"fault": "batch", "value": "500:16000"},
    }));
    api.create(&PostParams::default(), &obj).await?;
    let status = eventually(Duration::from_secs(300), "the batch's answers", || async {
        let o = api.get("batch").await.ok()?;
        let s = o.data.get("status")?.clone();
        s.get("refused").is_some().then_some(s)
    })
    .await?;
    ensure!(
        status["refused"] == 500 && status["created"] == 0,
        "every object answered, none created: {status}"
    );
    let error = status["error"].as_str().unwrap_or_default();
    ensure!(
        error.contains("Denied") && error.contains("does not grant \\\"create ConfigMap\\\""),
        "{error}"
    );
    let peak = still_serves(&mut plane, &client, "after-batch").await?;
    println!("a 500-object batch of 100 MiB: RSS {before} MiB before, peak {peak} MiB");
    ensure!(
        peak < before + 1536,
        "the host's peak RSS grew from {before} MiB to {peak} MiB"
    );
    Ok(())
}
