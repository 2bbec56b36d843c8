//! Plugin runtime figures, printed side by side (run:
//! `cargo bench -p wasmlet --bench plugins`; needs `scripts/build-guests` first, for
//! `target/plugins/{echo,configmap-summary}.{wasm,toml}`). `BENCH_CALLS` sets the
//! number of calls in part 2 (default 5000).
//!
//! 1. end-to-end reconcile throughput, wasm vs native: in the controller benchmark;
//! 2. host overhead per call, 4 KiB object in and ~4 KiB status out, a fresh instance
//!    per call (`Loaded::reconcile` of the `echo` test guest), sequential and with 2
//!    concurrent callers, and with a tiny object (the fixed cost); against the same
//!    JSON work done natively (plain `Value`, and the guest's own typed steps); minor
//!    page faults per call (fresh linear memory is faulted in on every call);
//! 3. load from the precompiled cache (`PluginEngine::load` hit vs cold compile, and a
//!    whole `PluginSet::load_version`), with where that time goes;
//! 4. extra RSS per loaded idle plugin, 50 copies of configmap-summary: VmRSS, split
//!    into RssAnon / RssFile (every plugin mmaps the same cached .cwasm, which RSS
//!    counts once per mapping), and Pss (shared pages counted once).
//!
//! Figures are printed, never asserted. No API server is needed: echo makes no
//! calls, and `PluginSet` skips CRD applies without one.
#![allow(clippy::unwrap_used)] // a bench or test: a failure should stop it loudly

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use sha2::Digest;
use wasmlet::internals::PluginEngine;
use wasmlet::internals::ReconcilerPlugin;
use wasmlet::internals::State;
use wasmlet::internals::{Loaded, PluginSet};

fn built_plugins() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/plugins");
    for name in ["echo", "configmap-summary"] {
        assert!(
            dir.join(format!("{name}.wasm")).exists() && dir.join(format!("{name}.toml")).exists(),
            "{} has no {name} plugin: run scripts/build-guests first",
            dir.display()
        );
    }
    dir
}

fn pct(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// p50 / p99 / mean of per-call microseconds.
fn summary(mut samples: Vec<f64>) -> String {
    samples.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let mean = samples.iter().sum::<f64>() / samples.len() as f64;
    format!(
        "p50 {:>7.1} µs   p99 {:>7.1} µs   mean {:>7.1} µs",
        pct(&samples, 0.5),
        pct(&samples, 0.99),
        mean
    )
}

/// The median of `n` runs of `f`, in milliseconds.
fn median_ms(n: usize, mut f: impl FnMut() -> Duration) -> f64 {
    let mut v: Vec<f64> = (0..n).map(|_| ms(f())).collect();
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    pct(&v, 0.5)
}

/// VmRSS, RssAnon, RssFile of this process, in KiB.
fn rss_kib() -> (f64, f64, f64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let get = |key: &str| {
        status
            .lines()
            .find(|l| l.starts_with(key))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|kb| kb.parse::<f64>().ok())
            .unwrap_or(f64::NAN)
    };
    (get("VmRSS:"), get("RssAnon:"), get("RssFile:"))
}

/// A ConfigSummary for the echo guest whose JSON is about `bytes` long, mostly spec.
fn object(bytes: usize) -> String {
    let mut spec = serde_json::Map::new();
    let mut i = 0;
    loop {
        let obj = json!({
            "apiVersion": "examples.wasmlet.dev/v1", "kind": "ConfigSummary",
            "metadata": {
                "name": "bench", "namespace": "default", "uid": "6f1c7d2e-0b7a-4b8e-9a57-3f0c1d2e3f40",
                "resourceVersion": "12345", "generation": 1,
                "creationTimestamp": "2025-01-01T00:00:00Z",
                "labels": {"wasmlet.dev/test": "echo"},
            },
            "spec": spec,
        });
        let s = obj.to_string();
        if s.len() >= bytes {
            return s;
        }
        spec.insert(
            format!("field{i:03}"),
            json!("0123456789abcdef0123456789abcdef0123456789ab"),
        );
        i += 1;
    }
}

/// What echo does, natively: parse the object, build the status, serialise it; then
/// what the host does with a returned status (checks it parses as an object).
fn native_echo(obj: &str) -> String {
    let v: Value = serde_json::from_str(obj).unwrap();
    let status = json!({ "echo": v.get("spec").cloned().unwrap_or(Value::Null) }).to_string();
    let check: Value = serde_json::from_str(&status).unwrap();
    assert!(check.is_object());
    status
}

/// The echo guest's own steps, natively (its SDK decodes the typed object, with the
/// spec flattened into a map; `json!` and `Action::status` convert to `Value` twice;
/// the status is serialised), then the host's check of the returned status.
#[derive(serde::Deserialize)]
struct EchoObject {
    #[serde(rename = "apiVersion")]
    _api_version: String,
    #[serde(rename = "kind")]
    _kind: String,
    #[serde(rename = "metadata")]
    _metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    spec: EchoSpec,
}

#[derive(serde::Deserialize, serde::Serialize)]
struct EchoSpec {
    #[serde(flatten)]
    fields: serde_json::Map<String, Value>,
}

fn native_guest_steps(obj: &str) -> String {
    let o: EchoObject = serde_json::from_str(obj).unwrap();
    let status = serde_json::to_value(json!({ "echo": o.spec }))
        .unwrap()
        .to_string();
    let check: Value = serde_json::from_str(&status).unwrap();
    assert!(check.is_object());
    status
}

/// Minor page faults of this process so far.
fn minflt() -> u64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    stat.rsplit_once(") ")
        .and_then(|(_, rest)| rest.split_whitespace().nth(7))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// Proportional set size of this process (shared pages divided among their mappings), KiB.
fn pss_kib() -> f64 {
    let s = std::fs::read_to_string("/proc/self/smaps_rollup").unwrap_or_default();
    s.lines()
        .find(|l| l.starts_with("Pss:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kb| kb.parse::<f64>().ok())
        .unwrap_or(f64::NAN)
}

async fn call(echo: &Loaded, obj: &str) -> Duration {
    let started = Instant::now();
    let (result, _) = echo
        .reconcile("default/bench", obj)
        .await
        .expect("echo call");
    let took = started.elapsed();
    let outcome = result.expect("echo reconciles");
    assert!(outcome.status.is_some());
    took
}

/// Per-call latencies of `calls` calls by `callers` concurrent callers, and the wall time.
async fn run(
    echo: &Arc<Loaded>,
    obj: &Arc<String>,
    calls: usize,
    callers: usize,
) -> (Vec<f64>, Duration) {
    let started = Instant::now();
    let tasks: Vec<_> = (0..callers)
        .map(|_| {
            let (echo, obj) = (echo.clone(), obj.clone());
            tokio::spawn(async move {
                let mut v = Vec::with_capacity(calls / callers);
                for _ in 0..calls / callers {
                    v.push(us(call(&echo, &obj).await));
                }
                v
            })
        })
        .collect();
    let mut all = Vec::with_capacity(calls);
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    (all, started.elapsed())
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(bench());
}

async fn bench() {
    let src = built_plugins();
    let calls: usize = std::env::var("BENCH_CALLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5000);
    let work = tempfile::tempdir().unwrap();
    let cache = work.path().join("cache");
    let engine = PluginEngine::new(&cache).unwrap();
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);

    println!("wasmlet plugin runtime benchmark ({cores} CPUs, wasmtime 48)");
    println!("pooling allocator in use: {}", engine.pooling);
    println!();
    println!(
        "(1) end-to-end reconcile throughput, wasm vs native (goal ≥ 0.8×): see `cargo bench --bench throughput`"
    );
    println!();

    // --- (3) first, so that the cold compile really is cold -----------------------
    let echo_wasm = src.join("echo.wasm");
    let echo_toml = src.join("echo.toml");
    let bytes = std::fs::read(&echo_wasm).unwrap();
    let started = Instant::now();
    engine.load(&echo_wasm, &bytes).unwrap();
    let cold = started.elapsed();
    let hit = median_ms(30, || {
        let started = Instant::now();
        let c = engine.load(&echo_wasm, &bytes).unwrap();
        let t = started.elapsed();
        drop(c);
        t
    });
    let read = median_ms(30, || {
        let started = Instant::now();
        let b = std::fs::read(&echo_wasm).unwrap();
        std::hint::black_box(b);
        started.elapsed()
    });
    let sha = median_ms(30, || {
        let started = Instant::now();
        std::hint::black_box(sha2::Sha256::digest(&bytes));
        started.elapsed()
    });
    // The cache's files are sealed (plugin/artifact.rs): deserialise the
    // same artifact from memory instead, as the engine does after opening one.
    let artifact = engine.engine.precompile_component(&bytes).unwrap();
    let cwasm_len = artifact.len() as u64;
    let deser = median_ms(30, || {
        let started = Instant::now();
        // SAFETY: produced by this engine's `precompile_component` just above.
        let c = unsafe { wasmtime::component::Component::deserialize(&engine.engine, &artifact) }
            .unwrap();
        let t = started.elapsed();
        drop(c);
        t
    });
    let (component, _) = engine.load(&echo_wasm, &bytes).unwrap();
    let link = median_ms(30, || {
        let started = Instant::now();
        let mut linker: wasmtime::component::Linker<State> =
            wasmtime::component::Linker::new(&engine.engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker).unwrap();
        ReconcilerPlugin::add_to_linker::<State, wasmtime::component::HasSelf<State>>(
            &mut linker,
            |s| s,
        )
        .unwrap();
        let pre = linker.instantiate_pre(&component).unwrap();
        let t = started.elapsed();
        drop(pre);
        t
    });
    let set = PluginSet::new(engine.clone(), &src, None);
    let mut versions = Vec::new();
    for _ in 0..30 {
        let started = Instant::now();
        let loaded = set
            .load_version("echo", &echo_wasm, &echo_toml)
            .await
            .unwrap();
        versions.push(ms(started.elapsed()));
        drop(loaded);
    }
    versions.sort_by(|a, b| a.partial_cmp(b).unwrap());

    // --- (2) ------------------------------------------------------------------------
    let echo = Arc::new(
        set.load_version("echo", &echo_wasm, &echo_toml)
            .await
            .unwrap(),
    );
    let obj = Arc::new(object(4096));
    let small = Arc::new(object(0));
    let out_len = echo
        .reconcile("default/bench", &obj)
        .await
        .unwrap()
        .0
        .unwrap()
        .status
        .unwrap()
        .to_string()
        .len();
    let native_out = native_echo(&obj);
    assert_eq!(
        serde_json::from_str::<Value>(&native_out).unwrap()["echo"]
            .as_object()
            .unwrap()
            .len(),
        {
            let v: Value = serde_json::from_str(&obj).unwrap();
            v["spec"].as_object().unwrap().len()
        }
    );
    // Warm up: pool slots, allocator, caches.
    for _ in 0..300 {
        call(&echo, &obj).await;
    }
    let faults = minflt();
    let (seq, seq_wall) = run(&echo, &obj, calls, 1).await;
    let faults_per_call = (minflt() - faults) as f64 / calls as f64;
    let (par, par_wall) = run(&echo, &obj, calls, 2).await;
    let (tiny, _) = run(&echo, &small, calls, 1).await;
    // The same guest with `limits.reuse-instances`: warm instances.
    let reuse_toml = work.path().join("echo-reuse.toml");
    std::fs::write(
        &reuse_toml,
        std::fs::read_to_string(&echo_toml)
            .unwrap()
            .replace("[limits]", "[limits]\nreuse-instances = true"),
    )
    .unwrap();
    let reused = Arc::new(
        set.load_version("echo-reuse", &echo_wasm, &reuse_toml)
            .await
            .unwrap(),
    );
    for _ in 0..300 {
        call(&reused, &obj).await;
    }
    let (reuse_big, reuse_wall) = run(&reused, &obj, calls, 1).await;
    let (reuse_tiny, _) = run(&reused, &small, calls, 1).await;
    let native: Vec<f64> = (0..calls)
        .map(|_| {
            let started = Instant::now();
            std::hint::black_box(native_echo(std::hint::black_box(&obj)));
            us(started.elapsed())
        })
        .collect();
    let native_wall: f64 = native.iter().sum::<f64>() / 1e6;
    let steps: Vec<f64> = (0..calls)
        .map(|_| {
            let started = Instant::now();
            std::hint::black_box(native_guest_steps(std::hint::black_box(&obj)));
            us(started.elapsed())
        })
        .collect();
    let steps_wall: f64 = steps.iter().sum::<f64>() / 1e6;

    println!("(2) host overhead per call, fresh instance per call (goal ≤ 100 µs)");
    println!(
        "    object in: {} bytes, status out: {} bytes, {calls} calls each",
        obj.len(),
        out_len
    );
    println!(
        "    wasm echo, sequential          {}   {:>8.0} calls/s",
        summary(seq),
        calls as f64 / seq_wall.as_secs_f64()
    );
    println!(
        "    wasm echo, 2 concurrent        {}   {:>8.0} calls/s",
        summary(par),
        calls as f64 / par_wall.as_secs_f64()
    );
    println!(
        "    wasm echo, {:>4}-byte object   {}   (fixed cost: instantiate + call + drop)",
        small.len(),
        summary(tiny)
    );
    println!(
        "    wasm echo, reused instance     {}   {:>8.0} calls/s   (limits.reuse-instances)",
        summary(reuse_big),
        calls as f64 / reuse_wall.as_secs_f64()
    );
    println!(
        "    wasm echo, reused, {:>4} bytes  {}   (fixed cost on a warm instance; goal ≤ 20 µs)",
        small.len(),
        summary(reuse_tiny)
    );
    println!(
        "    native, Value parse+build+ser  {}   {:>8.0} calls/s",
        summary(native),
        calls as f64 / native_wall
    );
    println!(
        "    native, the guest's own steps  {}   {:>8.0} calls/s   (typed decode w/ flatten, 2× to_value, ser, host check)",
        summary(steps),
        calls as f64 / steps_wall
    );
    println!("    minor page faults per wasm call (sequential, 4 KiB): {faults_per_call:.1}");
    println!();

    println!(
        "(3) load from the precompiled cache (goal ≤ 10 ms), echo.wasm {} KiB, .cwasm {} KiB",
        bytes.len() / 1024,
        cwasm_len / 1024
    );
    println!(
        "    PluginEngine::load, cold (compile + write .cwasm)   {:>8.2} ms",
        ms(cold)
    );
    println!(
        "    PluginEngine::load, cache hit (median of 30)        {:>8.2} ms",
        hit
    );
    println!(
        "      of which sha256 of the .wasm                     {:>8.2} ms",
        sha
    );
    println!(
        "      of which Component::deserialize_file             {:>8.2} ms",
        deser
    );
    println!(
        "    read the .wasm from disk                            {:>8.2} ms",
        read
    );
    println!(
        "    linker (WASI + contract) + instantiate_pre          {:>8.2} ms",
        link
    );
    println!(
        "    PluginSet::load_version from cache (median of 30)   {:>8.2} ms   (p90 {:.2} ms; manifest, read, load, link, first call)",
        pct(&versions, 0.5),
        pct(&versions, 0.9)
    );
    println!();
    drop(echo);

    // --- (4) ------------------------------------------------------------------------
    let n = 50;
    let dir = work.path().join("plugins");
    std::fs::create_dir_all(&dir).unwrap();
    let cs_wasm = src.join("configmap-summary.wasm");
    let cs_toml = src.join("configmap-summary.toml");
    // Compile it into the cache first, so the scan measures loads from the cache.
    drop(
        set.load_version("configmap-summary", &cs_wasm, &cs_toml)
            .await
            .unwrap(),
    );
    for i in 0..n {
        std::fs::copy(&cs_wasm, dir.join(format!("cs-{i:02}.wasm"))).unwrap();
        std::fs::copy(&cs_toml, dir.join(format!("cs-{i:02}.toml"))).unwrap();
    }
    for e in std::fs::read_dir(&src).unwrap().flatten() {
        if e.file_name().to_string_lossy().ends_with(".yaml") {
            std::fs::copy(e.path(), dir.join(e.file_name())).unwrap();
        }
    }
    let many = PluginSet::new(engine.clone(), &dir, None);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let before = rss_kib();
    let pss_before = pss_kib();
    let started = Instant::now();
    let failures = many.scan().await;
    let scan = started.elapsed();
    assert!(failures.is_empty(), "{failures:?}");
    assert_eq!(many.names().len(), n);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let after = rss_kib();
    let pss_after = pss_kib();
    let per = |b: f64, a: f64| (a - b) / 1024.0 / n as f64;
    println!(
        "(4) extra RSS per loaded idle plugin (goal ≤ 2 MiB): {n} copies of configmap-summary, one PluginSet::scan"
    );
    println!(
        "    VmRSS   {:>7.1} MiB -> {:>7.1} MiB   {:>6.2} MiB per plugin",
        before.0 / 1024.0,
        after.0 / 1024.0,
        per(before.0, after.0)
    );
    println!(
        "      RssAnon {:>5.1} MiB -> {:>7.1} MiB   {:>6.2} MiB per plugin",
        before.1 / 1024.0,
        after.1 / 1024.0,
        per(before.1, after.1)
    );
    println!(
        "      RssFile {:>5.1} MiB -> {:>7.1} MiB   {:>6.2} MiB per plugin",
        before.2 / 1024.0,
        after.2 / 1024.0,
        per(before.2, after.2)
    );
    println!(
        "    Pss     {:>7.1} MiB -> {:>7.1} MiB   {:>6.2} MiB per plugin   (pages shared between mappings counted once)",
        pss_before / 1024.0,
        pss_after / 1024.0,
        per(pss_before, pss_after)
    );
    println!(
        "    scan of {n} plugins from the cache: {:.1} ms ({:.2} ms per plugin)",
        ms(scan),
        ms(scan) / n as f64
    );
    drop(many);
}
