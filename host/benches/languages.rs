//! The same reconcile in Rust, Python and TypeScript, side by side: the ConfigMap
//! summary of `configmap-summary` (Rust, wasmlet-sdk), `configmap-summary-py`
//! (Python, componentize-py: CPython inside the component) and
//! `configmap-summary-ts` (TypeScript, componentize-js: SpiderMonkey inside).
//! Run: `cargo bench -p wasmlet --bench languages` (release host), or
//! `cargo test -p wasmlet --bench languages` for a debug host's figures; needs
//! `scripts/build-guests` first. `BENCH_CALLS` sets the calls per arm (default 300).
//!
//! Per language: component size; compile time (cold `PluginEngine::load`) and a
//! load from the precompiled cache; a whole `PluginSet::load_version` (manifest,
//! link, first call); per-call time of the real reconcile (decode the object, one
//! `list` of two ConfigMaps from the host's cache, build the status) with a fresh
//! instance per call (the default) and with `reuse-instances`, whose difference
//! is the instantiation (instantiate, the guest's start-up, drop); the smallest
//! `limits.memory-mib` the load and a reconcile run under, found by bisection
//! (linear memory per instance); and the process's RSS and PSS growth per
//! loaded idle version (code mapped, pool slots touched). Figures are printed,
//! never asserted. An embedded API server serves the ConfigMaps.
#![allow(clippy::unwrap_used)] // a bench or test: a failure should stop it loudly

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::api::{Api, PostParams};
use serde_json::json;
use wasmlet::internals::Caches;
use wasmlet::internals::PluginEngine;
use wasmlet::internals::{Cluster, Resolver};
use wasmlet::internals::{Loaded, PluginSet};
use wasmlet_apiserver::{ApiServer, Config};

const ARMS: [(&str, &str); 3] = [
    ("Rust", "configmap-summary"),
    ("Python", "configmap-summary-py"),
    ("TypeScript", "configmap-summary-ts"),
];

/// Loaded idle versions per language for the RSS / PSS figure.
const IDLE_VERSIONS: usize = 10;

/// A line of /proc/self/{file} as KiB (`VmRSS:` of status, `Pss:` of smaps_rollup).
fn proc_kib(file: &str, key: &str) -> f64 {
    std::fs::read_to_string(format!("/proc/self/{file}"))
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with(key))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kb| kb.parse().ok())
        .unwrap_or(f64::NAN)
}

fn p50(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    pct(&v, 0.5)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn pct(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

/// p50 / p99 of per-call microseconds.
fn summary(mut v: Vec<f64>) -> String {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    format!(
        "p50 {:>9.1} µs   p99 {:>9.1} µs",
        pct(&v, 0.5),
        pct(&v, 0.99)
    )
}

const OBJECT: &str = r#"{"apiVersion":"examples.wasmlet.dev/v1","kind":"ConfigSummary","metadata":{"name":"bench","namespace":"default","uid":"6f1c7d2e-0b7a-4b8e-9a57-3f0c1d2e3f40","resourceVersion":"1","generation":1},"spec":{}}"#;

/// One reconcile; `Err` names why it did not give the expected summary.
async fn reconcile(p: &Loaded) -> Result<Duration, String> {
    let started = Instant::now();
    let (r, _) = p
        .reconcile("default/bench", OBJECT)
        .await
        .map_err(|e| e.to_string())?;
    let took = started.elapsed();
    let r = r.map_err(|e| format!("{}: {}", e.reason, e.message))?;
    let want = json!({"keys": 5, "configMaps": 2});
    if r.status.as_ref() != Some(&want) {
        return Err(format!("status {:?}", r.status));
    }
    Ok(took)
}

/// A version of plugin `name` with `edit` applied to its manifest (a file of its
/// own in `dir`, so versions never share a manifest).
async fn version(
    set: &PluginSet,
    src: &Path,
    dir: &Path,
    name: &str,
    tag: &str,
    edit: impl Fn(String) -> String,
) -> Result<Loaded, String> {
    let toml = dir.join(format!("{name}-{tag}.toml"));
    std::fs::write(
        &toml,
        edit(std::fs::read_to_string(src.join(format!("{name}.toml"))).unwrap()),
    )
    .unwrap();
    set.load_version(name, &src.join(format!("{name}.wasm")), &toml)
        .await
        .map_err(|e| e.to_string())
}

fn with_limit(key: &str, value: &str) -> impl Fn(String) -> String {
    let line = format!("[limits]\n{key} = {value}");
    let key = format!("{key} =");
    move |t: String| {
        let kept: Vec<&str> = t.lines().filter(|l| !l.starts_with(&key)).collect();
        kept.join("\n").replace("[limits]", &line)
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let src: PathBuf = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/plugins");
    for (_, name) in ARMS {
        anyhow::ensure!(
            src.join(format!("{name}.wasm")).exists(),
            "{} has no {name}.wasm: run scripts/build-guests first",
            src.display()
        );
    }
    let calls: usize = std::env::var("BENCH_CALLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300);
    let data = tempfile::tempdir()?;
    let server = ApiServer::start(Config {
        data_dir: data.path().into(),
        listen: ([127, 0, 0, 1], 0).into(),
        ..Default::default()
    })
    .await?;
    let client = kube::Client::try_from(server.kube_config().await?)?;
    let cms: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(client.clone(), "default");
    for (name, keys) in [("a", 2), ("b", 3)] {
        let data: serde_json::Map<String, serde_json::Value> =
            (0..keys).map(|i| (format!("k{i}"), json!("v"))).collect();
        cms.create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": name, "labels": {"wasmlet.dev/summary": "bench"}},
                "data": data,
            }))?,
        )
        .await?;
    }
    let resolver = Arc::new(Resolver::new(client.clone()));
    let api = Arc::new(Cluster::new(resolver.clone(), Some(Caches::new(resolver))));
    let engine = PluginEngine::new(&data.path().join("cache"))?;
    let dir = data.path().join("manifests");
    std::fs::create_dir_all(&dir)?;
    std::fs::copy(
        src.join("configsummary.crd.yaml"),
        dir.join("configsummary.crd.yaml"),
    )?;
    let set = PluginSet::new(engine.clone(), &dir, Some(api));
    let build = if cfg!(debug_assertions) {
        "debug"
    } else {
        "release"
    };
    println!(
        "the same reconcile in Rust, Python and TypeScript ({build} host, wasmtime 48, pooling {}, {calls} calls per arm)",
        engine.pooling
    );

    for (lang, name) in ARMS {
        let wasm = src.join(format!("{name}.wasm"));
        let bytes = std::fs::read(&wasm)?;
        let started = Instant::now();
        engine.load(&wasm, &bytes)?;
        let compile = started.elapsed();
        let started = Instant::now();
        engine.load(&wasm, &bytes)?;
        let hit = started.elapsed();
        let started = Instant::now();
        let fresh = version(&set, &src, &dir, name, "fresh", |t| t)
            .await
            .map_err(anyhow::Error::msg)?;
        let load = started.elapsed();
        // The caches fill on first use: the first calls may find them unsynced.
        let deadline = Instant::now() + Duration::from_secs(30);
        while let Err(e) = reconcile(&fresh).await {
            anyhow::ensure!(Instant::now() < deadline, "{name}: {e}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let mut fresh_calls = Vec::with_capacity(calls);
        for _ in 0..calls {
            fresh_calls.push(
                reconcile(&fresh)
                    .await
                    .map_err(anyhow::Error::msg)?
                    .as_secs_f64()
                    * 1e6,
            );
        }
        let reused = version(
            &set,
            &src,
            &dir,
            name,
            "reused",
            with_limit("reuse-instances", "true"),
        )
        .await
        .map_err(anyhow::Error::msg)?;
        reconcile(&reused).await.map_err(anyhow::Error::msg)?;
        let mut reused_calls = Vec::with_capacity(calls);
        for _ in 0..calls {
            reused_calls.push(
                reconcile(&reused)
                    .await
                    .map_err(anyhow::Error::msg)?
                    .as_secs_f64()
                    * 1e6,
            );
        }
        // The smallest memory cap (MiB) the load and a reconcile fit in.
        let (mut lo, mut hi) = (0u32, 256u32);
        while hi - lo > 1 {
            let mid = (lo + hi) / 2;
            let ok = match version(
                &set,
                &src,
                &dir,
                name,
                &format!("m{mid}"),
                with_limit("memory-mib", &mid.to_string()),
            )
            .await
            {
                Ok(p) => reconcile(&p).await.is_ok(),
                Err(_) => false,
            };
            if ok {
                hi = mid;
            } else {
                lo = mid;
            }
        }
        // Memory of loaded idle versions (each a reused instance kept warm
        // after one call, as a reuse-instances plugin sits between events).
        let (rss, pss) = (
            proc_kib("status", "VmRSS:"),
            proc_kib("smaps_rollup", "Pss:"),
        );
        let mut idle = Vec::with_capacity(IDLE_VERSIONS);
        for i in 0..IDLE_VERSIONS {
            let p = version(
                &set,
                &src,
                &dir,
                name,
                &format!("idle{i}"),
                with_limit("reuse-instances", "true"),
            )
            .await
            .map_err(anyhow::Error::msg)?;
            reconcile(&p).await.map_err(anyhow::Error::msg)?;
            idle.push(p);
        }
        let per = |before: f64, after: f64| (after - before) / 1024.0 / IDLE_VERSIONS as f64;
        let rss_per = per(rss, proc_kib("status", "VmRSS:"));
        let pss_per = per(pss, proc_kib("smaps_rollup", "Pss:"));
        drop(idle);
        let instantiate = p50(&fresh_calls) - p50(&reused_calls);
        let deadline_ms = fresh.deadline().as_secs_f64() * 1e3;
        let fresh_p99 = {
            let mut v = fresh_calls.clone();
            v.sort_by(|a, b| a.partial_cmp(b).unwrap());
            pct(&v, 0.99)
        };
        println!();
        println!("{lang} ({name}.wasm)");
        println!(
            "  component size                      {:>9.1} MiB",
            bytes.len() as f64 / (1 << 20) as f64
        );
        println!(
            "  compile (cold PluginEngine::load)   {:>9.1} ms",
            ms(compile)
        );
        println!("  load from the precompiled cache     {:>9.2} ms", ms(hit));
        println!("  load_version (link + first call)    {:>9.2} ms", ms(load));
        println!(
            "  reconcile, fresh instance per call  {}",
            summary(fresh_calls)
        );
        println!(
            "  reconcile, reused instance          {}",
            summary(reused_calls)
        );
        println!(
            "  instantiate (fresh p50 - reused p50) {:>8.1} µs",
            instantiate
        );
        println!(
            "  smallest memory-mib that runs it    {hi:>9} MiB   (the manifest's cap: {} MiB)",
            fresh.manifest.limits.memory_mib
        );
        println!(
            "  per loaded idle version: RSS {rss_per:>6.2} MiB, PSS {pss_per:>6.2} MiB   (warm instance after one call)"
        );
        println!(
            "  call deadline {deadline_ms:.0} ms; the fresh-instance p99 uses {:.1}% of it",
            fresh_p99 / 1e3 / deadline_ms * 100.0
        );
    }
    Ok(())
}
