//! The plugin runtime with real guest components (built by
//! `scripts/build-guests` into `target/plugins`) against the embedded API
//! server: healthy reconciles, containment of a trapping guest, an endless
//! loop, a memory hog, a denied call and a corrupt file, and hot swap with
//! rollback.
#![allow(clippy::unwrap_used)] // a bench or test: a failure should stop it loudly

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use wasmlet::internals::Cluster;
use wasmlet::internals::PluginEngine;
use wasmlet::internals::PluginMetrics;
use wasmlet::internals::{CallError, PluginSet};
use wasmlet_apiserver::testing::test_server_with;
use wasmlet_e2e::eventually;

fn built_plugins() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/plugins");
    assert!(
        dir.join("configmap-summary.wasm").exists(),
        "{} has no guests: run scripts/build-guests first",
        dir.display()
    );
    dir
}

/// Copies plugin NAME (wasm + toml + CRDs) from the build output into `dir`.
fn install(dir: &Path, name: &str) {
    let src = built_plugins();
    std::fs::copy(
        src.join(format!("{name}.wasm")),
        dir.join(format!("{name}.wasm")),
    )
    .unwrap();
    std::fs::copy(
        src.join(format!("{name}.toml")),
        dir.join(format!("{name}.toml")),
    )
    .unwrap();
    for e in std::fs::read_dir(&src).unwrap().flatten() {
        if e.file_name().to_string_lossy().ends_with(".yaml") {
            std::fs::copy(e.path(), dir.join(e.file_name())).unwrap();
        }
    }
}

/// The call deadline (`limits.deadline-ms`) given to an installed plugin
/// whose deadline a test is not about. The deadline is wall-clock time from
/// the call's start (epoch ticks run on while the guest waits on the host),
/// so the built manifests' 500 ms or 1 s can pass on a loaded 2-core machine
/// before a trivial call returns: a call that should trap, fail or succeed
/// would be reported as `Timeout` instead. Never waited for when the call
/// behaves.
const UNHURRIED_DEADLINE_MS: u64 = 60_000;

/// Sets `key = value` in the `[limits]` of installed plugin NAME's manifest,
/// in place of the line the manifest has for `key`, if any.
fn set_limit(dir: &Path, name: &str, key: &str, value: impl std::fmt::Display) {
    let toml = dir.join(format!("{name}.toml"));
    let text = std::fs::read_to_string(&toml).unwrap();
    let line = format!("{key} =");
    let kept: Vec<&str> = text
        .lines()
        .filter(|l| !l.trim_start().starts_with(&line))
        .collect();
    let text = kept.join("\n");
    assert!(
        text.contains("[limits]"),
        "{} has no [limits]",
        toml.display()
    );
    let text = text.replacen("[limits]", &format!("[limits]\n{key} = {value}"), 1);
    std::fs::write(&toml, text + "\n").unwrap();
}

struct Env {
    _data: tempfile::TempDir,
    plugins: tempfile::TempDir,
    set: Arc<PluginSet>,
    client: kube::Client,
}

async fn env() -> Env {
    let (data, _server, client) = test_server_with(|c| c.history = 10_000).await;
    let plugins = tempfile::tempdir().unwrap();
    // scripts/test's seed: the guests are compiled once per run, not per test.
    let engine = PluginEngine::new(&data.path().join("cache"))
        .unwrap()
        .with_seeds(&[built_plugins().join(".precompiled")]);
    let set = PluginSet::new(
        engine,
        plugins.path(),
        Some(Arc::new(Cluster::uncached(client.clone()))),
    );
    Env {
        _data: data,
        plugins,
        set,
        client,
    }
}

async fn create_summary(client: &kube::Client, name: &str, labels: Value) -> String {
    let ar = kube::api::ApiResource::from_gvk_with_plural(
        &kube::api::GroupVersionKind::gvk("examples.wasmlet.dev", "v1", "ConfigSummary"),
        "configsummaries",
    );
    let api: kube::Api<kube::api::DynamicObject> =
        kube::Api::namespaced_with(client.clone(), "default", &ar);
    let obj: kube::api::DynamicObject = serde_json::from_value(json!({
        "apiVersion": "examples.wasmlet.dev/v1", "kind": "ConfigSummary",
        "metadata": {"name": name, "namespace": "default", "labels": labels}, "spec": {}
    }))
    .unwrap();
    let created = api.create(&Default::default(), &obj).await.unwrap();
    serde_json::to_string(&created).unwrap()
}

async fn configmap(client: &kube::Client, name: &str, summary: &str, keys: usize) {
    let api: kube::Api<k8s_openapi::api::core::v1::ConfigMap> =
        kube::Api::namespaced(client.clone(), "default");
    let data: serde_json::Map<String, Value> =
        (0..keys).map(|i| (format!("k{i}"), json!("v"))).collect();
    let cm = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"wasmlet.dev/summary": summary}}, "data": data
    }))
    .unwrap();
    api.create(&Default::default(), &cm).await.unwrap();
}

/// The host starts the reconciled kinds' watches while the plugins compile:
/// the kinds come from the manifests on disk, before anything loads, and a
/// manifest that does not parse names none.
#[tokio::test]
async fn the_reconciled_kinds_are_read_from_the_manifests_before_loading() {
    let env = env().await;
    install(env.plugins.path(), "configmap-summary");
    install(env.plugins.path(), "trap");
    std::fs::write(env.plugins.path().join("broken.toml"), "[reconciles\n").unwrap();
    std::fs::write(env.plugins.path().join("broken.wasm"), b"").unwrap();
    let kinds = env.set.reconciled_kinds();
    assert!(
        kinds.contains(&(
            "examples.wasmlet.dev/v1".to_string(),
            "ConfigSummary".to_string()
        )),
        "{kinds:?}"
    );
    let trap = wasmlet::internals::Manifest::load(&env.plugins.path().join("trap.toml")).unwrap();
    let trap = trap.reconciles.unwrap();
    assert!(kinds.contains(&(trap.api_version, trap.kind)), "{kinds:?}");
    assert!(kinds.len() <= 2, "{kinds:?}");
    assert!(
        env.set.names().is_empty(),
        "nothing loaded: {:?}",
        env.set.names()
    );
}

/// A watched directory is scanned when it changes, and only then: the scan's
/// own reads of the plugin files are no change (they once had an idle host
/// rescan, reading and hashing every plugin, several times a second).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unchanged_plugin_directory_is_not_scanned_again() {
    let env = env().await;
    install(env.plugins.path(), "configmap-summary");
    tokio::spawn(env.set.clone().watch());
    eventually(Duration::from_secs(60), "configmap-summary loaded", || {
        std::future::ready((!env.set.names().is_empty()).then_some(()))
    })
    .await
    .unwrap();
    // The watch's first scan is counted (it loaded the plugin). Its own
    // reads of the files must not start another: read a plugin file as a
    // scan does and wait until the watch has seen that read (events come in
    // order, so it has seen the scan's own reads too); none of what it saw
    // may have been passed on to a scan.
    let settled = env.set.scans();
    let seen = |(ignored, passed): (u64, u64)| ignored + passed;
    let before = seen(env.set.dir_events());
    std::fs::read(env.plugins.path().join("configmap-summary.wasm")).unwrap();
    eventually(Duration::from_secs(60), "the watch seeing the read", || {
        std::future::ready((seen(env.set.dir_events()) != before).then_some(()))
    })
    .await
    .unwrap();
    assert_eq!(
        env.set.dir_events().1,
        0,
        "a read of the plugin files was taken for a change"
    );
    assert_eq!(
        env.set.scans(),
        settled,
        "the directory was scanned again with nothing changed"
    );
    // A real change is still seen.
    let toml = env.plugins.path().join("configmap-summary.toml");
    let text = std::fs::read_to_string(&toml).unwrap();
    std::fs::write(&toml, format!("{text}\n")).unwrap();
    eventually(
        Duration::from_secs(60),
        "a scan of the changed manifest",
        || std::future::ready((env.set.scans() != settled).then_some(())),
    )
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthy_plugin_reconciles_and_failures_stay_contained() {
    let env = env().await;
    for name in ["configmap-summary", "trap", "spin", "hog", "denied"] {
        install(env.plugins.path(), name);
    }
    // Only spin's deadline is under test.
    for name in ["configmap-summary", "trap", "hog", "denied"] {
        set_limit(
            env.plugins.path(),
            name,
            "deadline-ms",
            UNHURRIED_DEADLINE_MS,
        );
    }
    std::fs::write(
        env.plugins.path().join("corrupt.wasm"),
        b"\0asm this is not a component",
    )
    .unwrap();
    std::fs::copy(
        env.plugins.path().join("trap.toml"),
        env.plugins.path().join("corrupt.toml"),
    )
    .unwrap();

    let failures = env.set.scan().await;
    assert_eq!(
        failures.len(),
        1,
        "only the corrupt plugin fails: {failures:?}"
    );
    let (name, err) = &failures[0];
    assert_eq!(name, "corrupt");
    let msg = err.to_string();
    assert!(
        msg.contains("corrupt.wasm") && msg.contains("not a valid WebAssembly component"),
        "{msg}"
    );
    assert_eq!(
        PluginMetrics::get(&env.set.metrics("corrupt").load_failures),
        1
    );
    assert_eq!(
        env.set.names(),
        ["configmap-summary", "denied", "hog", "spin", "trap"]
    );

    // The example's CRD was applied when it loaded.
    let obj = create_summary(&env.client, "s1", json!({})).await;
    configmap(&env.client, "cm-a", "s1", 2).await;
    configmap(&env.client, "cm-b", "s1", 3).await;
    let healthy = env.set.get("configmap-summary").unwrap();
    let (result, _) = healthy.reconcile("default/s1", &obj).await.unwrap();
    let outcome = result.expect("the example reconciles");
    let status: Value = outcome.status.unwrap();
    assert_eq!(status["keys"], 5);
    assert_eq!(status["configMaps"], 2);

    // Trap.
    let trap = env.set.get("trap").unwrap();
    let e = trap.reconcile("default/t", &obj).await.unwrap_err();
    assert!(matches!(e, CallError::Trap(_)), "{e}");
    assert_eq!(PluginMetrics::get(&env.set.metrics("trap").traps), 1);

    // Endless loop: stopped at its 200 ms deadline (the call returns at all,
    // as Timeout; how soon after 200 ms depends on the machine's load).
    let spin = env.set.get("spin").unwrap();
    let e = spin.reconcile("default/s", &obj).await.unwrap_err();
    assert!(
        matches!(e, CallError::Timeout(d) if d == Duration::from_millis(200)),
        "{e}"
    );
    assert_eq!(PluginMetrics::get(&env.set.metrics("spin").timeouts), 1);

    // Memory hog: capped at 16 MiB.
    let hog = env.set.get("hog").unwrap();
    let e = hog.reconcile("default/h", &obj).await.unwrap_err();
    assert!(matches!(e, CallError::OutOfMemory(16)), "{e}");
    assert_eq!(PluginMetrics::get(&env.set.metrics("hog").out_of_memory), 1);

    // Denied: the call is refused, the guest sees `denied` and fails terminally.
    let denied = env.set.get("denied").unwrap();
    let (result, _) = denied.reconcile("default/d", &obj).await.unwrap();
    let err = result.unwrap_err();
    assert!(err.terminal, "{err:?}");
    assert!(
        err.message.contains("does not grant \"list secrets\""),
        "{}",
        err.message
    );
    assert_eq!(PluginMetrics::get(&env.set.metrics("denied").denied), 1);

    // Every failure again, concurrently, while the healthy plugin keeps working.
    let mut bad = Vec::new();
    for _ in 0..3 {
        for p in [&trap, &spin, &hog] {
            let p = p.clone();
            let obj = obj.clone();
            bad.push(tokio::spawn(async move {
                p.reconcile("default/x", &obj).await.is_err()
            }));
        }
    }
    // The healthy plugin is called until every bad call has ended (and at
    // least 5 times): each of its calls succeeds, however long that takes.
    let mut ok = 0;
    while ok < 5 || !bad.iter().all(|b| b.is_finished()) {
        let (r, _) = healthy.reconcile("default/s1", &obj).await.unwrap();
        assert!(r.is_ok(), "healthy call {ok} next to failing ones: {r:?}");
        ok += 1;
    }
    for b in bad {
        assert!(b.await.unwrap(), "every bad call fails");
    }
    println!("{ok} healthy reconciles while the bad calls ran");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hot_swap_keeps_working_version_and_rolls_back() {
    let env = env().await;
    install(env.plugins.path(), "configmap-summary");
    set_limit(
        env.plugins.path(),
        "configmap-summary",
        "deadline-ms",
        UNHURRIED_DEADLINE_MS,
    );
    assert!(env.set.scan().await.is_empty());
    let v1 = env.set.get("configmap-summary").unwrap();
    let mut events = env.set.subscribe();

    // A broken new version never replaces the working one.
    let wasm = env.plugins.path().join("configmap-summary.wasm");
    std::fs::write(&wasm, b"garbage").unwrap();
    let failures = env.set.scan().await;
    assert_eq!(failures.len(), 1);
    assert_eq!(env.set.get("configmap-summary").unwrap().digest, v1.digest);
    assert!(matches!(
        events.recv().await.unwrap(),
        wasmlet::internals::PluginEvent::Rejected(..)
    ));

    // A valid new version (another component under the same manifest) swaps in.
    std::fs::copy(built_plugins().join("denied.wasm"), &wasm).unwrap();
    let f = env.set.scan().await;
    assert!(f.is_empty(), "{f:?}");
    let v2 = env.set.get("configmap-summary").unwrap();
    assert_ne!(v2.digest, v1.digest);
    assert_eq!(
        PluginMetrics::get(&env.set.metrics("configmap-summary").swaps),
        1
    );
    // An in-flight holder of v1 still calls v1.
    let obj = create_summary(&env.client, "s2", json!({})).await;
    let (r1, _) = v1.reconcile("default/s2", &obj).await.unwrap();
    assert!(r1.is_ok(), "v1 still serves its caller");

    // Rollback brings v1 back.
    assert!(env.set.rollback("configmap-summary"));
    assert_eq!(env.set.get("configmap-summary").unwrap().digest, v1.digest);

    // Removing the files stops the plugin.
    std::fs::remove_file(&wasm).unwrap();
    env.set.scan().await;
    assert!(env.set.get("configmap-summary").is_none());
}

/// `obj` (a ConfigSummary as JSON) with the fetcher's annotations set.
fn fetch_target(obj: &str, url: &str, timeout_ms: Option<u32>) -> String {
    let mut v: Value = serde_json::from_str(obj).unwrap();
    let mut a = json!({"wasmlet.dev/url": url});
    if let Some(ms) = timeout_ms {
        a["wasmlet.dev/timeout-ms"] = json!(ms.to_string());
    }
    v["metadata"]["annotations"] = a;
    v.to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outbound_http_reaches_allowed_hosts_only_within_limits() {
    use axum::routing::get;
    let app = axum::Router::new()
        .route("/hello", get(|| async { "hello plugin" }))
        .route(
            "/slow",
            get(|| async {
                tokio::time::sleep(Duration::from_secs(3)).await;
                "too late"
            }),
        )
        .route(
            "/moved",
            get(|| async { axum::response::Redirect::temporary("http://localhost/elsewhere") }),
        )
        .route("/big", get(|| async { "x".repeat(5 << 20) }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };

    let env = env().await;
    for name in ["configmap-summary", "fetcher"] {
        install(env.plugins.path(), name);
    }
    // The call deadline is under test only where a request is cut by it
    // (below, with a version of the plugin loaded for that alone).
    let unhurried = || {
        set_limit(
            env.plugins.path(),
            "fetcher",
            "deadline-ms",
            UNHURRIED_DEADLINE_MS,
        )
    };
    unhurried();
    assert!(env.set.scan().await.is_empty());
    let fetcher = env.set.get("fetcher").unwrap();
    let obj = create_summary(&env.client, "f1", json!({"wasmlet.dev/test": "fetcher"})).await;
    let metrics = env.set.metrics("fetcher");

    let status = |r: Result<_, CallError>| -> Value {
        let (result, _): (Result<wasmlet::internals::Reconciled, _>, _) =
            r.expect("the call completes");
        let outcome = result.expect("the reconcile succeeds");
        outcome.status.unwrap()
    };
    let failure = |r: Result<_, CallError>| -> String {
        let (result, _): (Result<_, wasmlet::internals::GuestError>, _) =
            r.expect("the call completes");
        let err = result.expect_err("the reconcile fails");
        assert!(err.terminal, "{err:?}");
        err.message
    };

    // An allowed host: the response comes back.
    let hello = fetch_target(&obj, &format!("http://127.0.0.1:{port}/hello"), None);
    let s = status(fetcher.reconcile("default/f1", &hello).await);
    assert_eq!(s, json!({"httpStatus": 200, "body": "hello plugin"}));

    // A redirect is a response, not followed (its target is not even allowed).
    let s = status(
        fetcher
            .reconcile(
                "default/f1",
                &fetch_target(&obj, &format!("http://127.0.0.1:{port}/moved"), None),
            )
            .await,
    );
    assert_eq!(s["httpStatus"], 307, "{s}");
    assert_eq!(PluginMetrics::get(&metrics.denied), 0);

    // The same server by another name is not in http-hosts: denied, counted.
    let msg = failure(
        fetcher
            .reconcile(
                "default/f1",
                &fetch_target(&obj, &format!("http://localhost:{port}/hello"), None),
            )
            .await,
    );
    assert!(msg.contains("denied") && msg.contains("localhost"), "{msg}");
    assert_eq!(PluginMetrics::get(&metrics.denied), 1);

    // Credentials in the URL are refused before anything is sent.
    let msg = failure(
        fetcher
            .reconcile(
                "default/f1",
                &fetch_target(&obj, &format!("http://u:p@127.0.0.1:{port}/hello"), None),
            )
            .await,
    );
    assert!(msg.contains("invalid request"), "{msg}");

    // Nothing listens: a connection error.
    let msg = failure(
        fetcher
            .reconcile(
                "default/f1",
                &fetch_target(&obj, &format!("http://127.0.0.1:{closed}/"), None),
            )
            .await,
    );
    assert!(msg.contains("connection failed"), "{msg}");

    // Larger than the host's 4 MiB response cap.
    let msg = failure(
        fetcher
            .reconcile(
                "default/f1",
                &fetch_target(&obj, &format!("http://127.0.0.1:{port}/big"), None),
            )
            .await,
    );
    assert!(msg.contains("too large"), "{msg}");

    // A slow endpoint with the request's own timeout (below the deadline):
    // the guest sees `timeout`.
    let slow = format!("http://127.0.0.1:{port}/slow");
    let started = Instant::now();
    let msg = failure(
        fetcher
            .reconcile("default/f1", &fetch_target(&obj, &slow, Some(200)))
            .await,
    );
    assert!(msg.contains("timed out"), "{msg}");
    // Which wait applies (its own 200 ms, not the deadline) is checked on
    // paused time in `plugin::http`; here the figure is printed only.
    println!(
        "a fetch with its own 200 ms timeout: the guest had its answer after {:?}",
        started.elapsed()
    );

    // With no timeout of its own the request is cut at the call's 500 ms deadline:
    // the guest sees `timeout`, or its call is stopped at the deadline if the epoch
    // tick lands first (either is a cut; a loaded machine may even spend the
    // deadline before the request is sent).
    set_limit(env.plugins.path(), "fetcher", "deadline-ms", 500);
    assert!(env.set.scan().await.is_empty());
    let cut = env.set.get("fetcher").unwrap();
    assert_eq!(cut.deadline(), Duration::from_millis(500));
    let started = Instant::now();
    match cut
        .reconcile("default/f1", &fetch_target(&obj, &slow, None))
        .await
    {
        Err(e) => assert!(
            matches!(e, CallError::Timeout(d) if d == Duration::from_millis(500)),
            "{e}"
        ),
        Ok((Ok(o), _)) => panic!("the slow request succeeded: {o:?}"),
        Ok((Err(e), _)) => assert!(e.message.contains("timed out"), "{e:?}"),
    }
    // Cut, not answered after the server's 3 s (the outcome says so); the
    // budget the deadline leaves is checked on paused time in `plugin::http`.
    println!(
        "a fetch under the call's 500 ms deadline: cut after {:?}",
        started.elapsed()
    );

    // The shared client (one per host process, whichever version of the
    // plugin calls it) still works after all that.
    unhurried();
    assert!(env.set.scan().await.is_empty());
    let fetcher = env.set.get("fetcher").unwrap();
    assert_eq!(
        fetcher.deadline(),
        Duration::from_millis(UNHURRIED_DEADLINE_MS)
    );
    assert_eq!(
        status(fetcher.reconcile("default/f1", &hello).await)["body"],
        "hello plugin"
    );
    assert_eq!(PluginMetrics::get(&metrics.denied), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reused_instances_serve_calls_and_a_trap_is_not_reused() {
    let env = env().await;
    for name in ["configmap-summary", "trap"] {
        install(env.plugins.path(), name);
        set_limit(env.plugins.path(), name, "reuse-instances", true);
        set_limit(
            env.plugins.path(),
            name,
            "deadline-ms",
            UNHURRIED_DEADLINE_MS,
        );
    }
    assert!(env.set.scan().await.is_empty());
    let obj = create_summary(&env.client, "r1", json!({})).await;
    configmap(&env.client, "r1-cm", "r1", 3).await;
    let healthy = env.set.get("configmap-summary").unwrap();
    assert!(healthy.manifest.limits.reuse_instances);
    for _ in 0..5 {
        let (r, _) = healthy.reconcile("default/r1", &obj).await.unwrap();
        let status: Value = r.unwrap().status.unwrap();
        assert_eq!(status["keys"], 3);
    }
    // A trapped instance is dropped: the next call traps again on a fresh one
    // (not "instance poisoned" or a hang).
    let trap = env.set.get("trap").unwrap();
    for _ in 0..3 {
        assert!(matches!(
            trap.reconcile("default/t", &obj).await,
            Err(CallError::Trap(_))
        ));
    }
    assert_eq!(PluginMetrics::get(&env.set.metrics("trap").traps), 3);
}

/// A reused instance gets each call's full HTTP budget: after calls that
/// together ran longer than the call deadline, a fast request still succeeds
/// (it timed out at once when the budget ran from the instance's first call).
///
/// The deadline is wall-clock time from each call's start, so every call here
/// must finish well within it however loaded the machine is, while the calls
/// together must outlast it: six calls that each wait out their own 1 s
/// request timeout (6 s in all) under a 5 s deadline, which leaves each call
/// 4 s for everything besides that wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reused_instance_gets_a_fresh_http_budget_per_call() {
    use axum::routing::get;
    let app = axum::Router::new()
        .route("/hello", get(|| async { "hello plugin" }))
        .route("/slow", get(std::future::pending::<&'static str>));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

    let env = env().await;
    for name in ["configmap-summary", "fetcher"] {
        install(env.plugins.path(), name);
    }
    const DEADLINE_MS: u64 = 5_000;
    const REQUEST_TIMEOUT_MS: u32 = 1_000;
    const SLOW_CALLS: u32 = 6;
    const _: () = assert!(SLOW_CALLS as u64 * REQUEST_TIMEOUT_MS as u64 > DEADLINE_MS);
    set_limit(env.plugins.path(), "fetcher", "reuse-instances", true);
    set_limit(env.plugins.path(), "fetcher", "deadline-ms", DEADLINE_MS);
    assert!(env.set.scan().await.is_empty());
    let fetcher = env.set.get("fetcher").unwrap();
    assert!(fetcher.manifest.limits.reuse_instances);
    assert_eq!(fetcher.deadline(), Duration::from_millis(DEADLINE_MS));
    let obj = create_summary(&env.client, "h1", json!({"wasmlet.dev/test": "fetcher"})).await;

    // Requests that each wait out their own timeout: longer than the deadline
    // in all, on the one reused instance (each wait is at least the timeout).
    let slow = fetch_target(
        &obj,
        &format!("http://127.0.0.1:{port}/slow"),
        Some(REQUEST_TIMEOUT_MS),
    );
    for _ in 0..SLOW_CALLS {
        let (r, _) = fetcher.reconcile("default/h1", &slow).await.unwrap();
        let e = r.expect_err("the slow request fails");
        assert!(e.message.contains("timed out"), "{e:?}");
    }
    let hello = fetch_target(&obj, &format!("http://127.0.0.1:{port}/hello"), None);
    let (r, _) = fetcher.reconcile("default/h1", &hello).await.unwrap();
    let outcome = r.expect("the fast request succeeds on the reused instance");
    let status: Value = outcome.status.clone().unwrap();
    assert_eq!(status, json!({"httpStatus": 200, "body": "hello plugin"}));
}

/// A CRD another field manager created is not taken over by a plugin that
/// ships the same CRD: the load fails naming that manager, the CRD is unchanged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shipped_crd_never_takes_over_a_foreign_one() {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let env = env().await;
    let yaml = built_plugins().join("configsummary.crd.yaml");
    let mut doc = wasmlet::internals::read_yaml_documents(&yaml)
        .unwrap()
        .remove(0);
    doc["metadata"]["annotations"] = json!({"owner": "someone-else"});
    let crds: kube::Api<CustomResourceDefinition> = kube::Api::all(env.client.clone());
    let pp = kube::api::PostParams {
        field_manager: Some("someone-else".into()),
        ..Default::default()
    };
    let name = doc["metadata"]["name"].as_str().unwrap().to_string();
    let before = crds
        .create(&pp, &serde_json::from_value(doc).unwrap())
        .await
        .unwrap();

    install(env.plugins.path(), "configmap-summary");
    let failures = env.set.scan().await;
    assert_eq!(failures.len(), 1, "{failures:?}");
    let msg = failures[0].1.to_string();
    assert!(
        msg.contains("\"someone-else\"") && msg.contains(&name),
        "{msg}"
    );
    assert!(env.set.get("configmap-summary").is_none());
    // (The server's own controller may have written the CRD's status since.)
    let after = crds.get(&name).await.unwrap();
    assert_eq!(after.spec, before.spec);
    assert_eq!(after.metadata.annotations, before.metadata.annotations);
    let managers: Vec<_> = after
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .filter_map(|m| m.manager.as_deref())
        .collect();
    assert!(
        !managers.iter().any(|m| m.starts_with("wasmlet-plugin-")),
        "{managers:?}"
    );
}

/// DNS rebinding / SSRF: a name in http-hosts that resolves to a loopback
/// address is refused; the manifest can allow it explicitly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_resolving_to_a_private_address_is_refused_unless_allowed() {
    use axum::routing::get;
    let app = axum::Router::new().route("/hello", get(|| async { "hello plugin" }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

    let env = env().await;
    for name in ["configmap-summary", "fetcher"] {
        install(env.plugins.path(), name);
    }
    set_limit(
        env.plugins.path(),
        "fetcher",
        "deadline-ms",
        UNHURRIED_DEADLINE_MS,
    );
    let toml = env.plugins.path().join("fetcher.toml");
    let original = std::fs::read_to_string(&toml).unwrap();
    let named = original.replace(
        "http-hosts = [\"127.0.0.1\"]",
        "http-hosts = [\"127.0.0.1\", \"localhost\"]",
    );
    assert_ne!(named, original);
    std::fs::write(&toml, &named).unwrap();
    assert!(env.set.scan().await.is_empty());
    let obj = create_summary(&env.client, "p1", json!({"wasmlet.dev/test": "fetcher"})).await;
    let via_name = fetch_target(&obj, &format!("http://localhost:{port}/hello"), None);
    let via_ip = fetch_target(&obj, &format!("http://127.0.0.1:{port}/hello"), None);

    let fetcher = env.set.get("fetcher").unwrap();
    let (r, _) = fetcher.reconcile("default/p1", &via_name).await.unwrap();
    let e = r.expect_err("localhost is loopback: refused");
    assert!(e.message.contains("non-public"), "{e:?}");
    // The literal IP named in http-hosts is the explicit allowance.
    let (r, _) = fetcher.reconcile("default/p1", &via_ip).await.unwrap();
    r.expect("127.0.0.1 is named in http-hosts");

    // Opting in lets the name reach it.
    std::fs::write(
        &toml,
        named.replace(
            "http-hosts = [",
            "http-private-addresses = true\nhttp-hosts = [",
        ),
    )
    .unwrap();
    assert!(env.set.scan().await.is_empty());
    let fetcher = env.set.get("fetcher").unwrap();
    assert!(fetcher.manifest.permissions.http_private_addresses);
    let (r, _) = fetcher.reconcile("default/p1", &via_name).await.unwrap();
    let outcome = r.expect("allowed explicitly");
    let status: Value = outcome.status.clone().unwrap();
    assert_eq!(status["body"], "hello plugin");
}

/// The host compiles components in a child (`wasmlet compile-component`):
/// its artifact loads in the host's engine and is cached for the next start,
/// a component it refuses is named with the child's reason, a child that
/// dies is an error (never a retry in the host, where a hostile component
/// could take the host down), and a child that cannot be started leaves the
/// compile to the host.
#[test]
fn components_compile_in_a_child_process() {
    use wasmlet::internals::CompileError;
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("components");
    let exe = PathBuf::from(env!("CARGO_BIN_EXE_wasmlet"));
    let component =
        wat::parse_str(r#"(component (import "wasmlet:plugin/log@0.1.0" (instance)))"#).unwrap();
    let imports = |engine: &PluginEngine, c: &wasmtime::component::Component| {
        c.component_type()
            .imports(&engine.engine)
            .map(|(n, _)| n.to_string())
            .collect::<Vec<_>>()
    };

    let engine = PluginEngine::new(&cache)
        .unwrap()
        .compile_in_child(exe.clone());
    let (c, _) = engine.load(Path::new("log.wasm"), &component).unwrap();
    assert_eq!(imports(&engine, &c), ["wasmlet:plugin/log@0.1.0"]);
    // Cached: an engine whose child could only fail loads it all the same.
    let failing = PluginEngine::new(&cache)
        .unwrap()
        .compile_in_child("/bin/false".into());
    let (c, _) = failing.load(Path::new("log.wasm"), &component).unwrap();
    assert_eq!(imports(&failing, &c), ["wasmlet:plugin/log@0.1.0"]);

    let refused = engine
        .load(Path::new("bad.wasm"), b"\0asm\x0d\0\x01\0garbage")
        .unwrap_err();
    let CompileError::Invalid { path, message } = &refused else {
        panic!("{refused}");
    };
    assert_eq!(path, "bad.wasm");
    assert!(
        !message.is_empty() && !message.contains("compiler process"),
        "{message}"
    );

    let other = wat::parse_str(
        r#"(component (import "wasmlet:plugin/log@0.1.0" (instance)) (core module))"#,
    )
    .unwrap();
    let died = failing.load(Path::new("other.wasm"), &other).unwrap_err();
    assert!(
        died.to_string().contains("the compiler process failed"),
        "{died}"
    );

    let missing = PluginEngine::new(&dir.path().join("c2"))
        .unwrap()
        .compile_in_child(dir.path().join("no-such-wasmlet"));
    let (c, _) = missing.load(Path::new("other.wasm"), &other).unwrap();
    assert_eq!(imports(&missing, &c), ["wasmlet:plugin/log@0.1.0"]);
}
