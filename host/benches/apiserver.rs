//! Embedded API server figures, printed side by side (run:
//! `cargo bench -p wasmlet --bench apiserver`; `BENCH_OBJECTS` scales the
//! large-store part, default 100000).
//!
//! 1. creates/s of 1 KiB ConfigMaps through HTTPS + kube client, durability on;
//! 2. LIST of 10,000 objects (wall time of one request, JSON decoded);
//! 3. watch delivery latency with 100 watchers while writing 500 objects/s;
//! 4. RSS of a server process holding BENCH_OBJECTS 1 KiB objects;
//! 5. restart of that process on that directory until it answers /readyz;
//! 6. memory and disk given back: RSS and database size of a fresh server
//!    before a burst of BENCH_BURST (default 27000) 16 KiB objects, at its
//!    peak, and 60 s and 120 s after deleting them all (the watch history
//!    keeps events 75 s by default).
#![allow(clippy::unwrap_used)] // a bench or test: a failure should stop it loudly

use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, PostParams, WatchEvent, WatchParams};
use tokio::sync::Semaphore;

fn blob() -> String {
    "x".repeat(1000)
}

fn cm(name: &str, extra: Option<(&str, String)>) -> ConfigMap {
    let mut annotations = BTreeMap::new();
    if let Some((k, v)) = extra {
        annotations.insert(k.to_string(), v);
    }
    ConfigMap {
        metadata: kube::api::ObjectMeta {
            name: Some(name.into()),
            annotations: Some(annotations),
            labels: Some([("bench".to_string(), "yes".to_string())].into()),
            ..Default::default()
        },
        data: Some([("blob".to_string(), blob())].into()),
        ..Default::default()
    }
}

fn pct(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn rss_mib(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kb| kb.parse::<f64>().ok())
        .map(|kb| kb / 1024.0)
        .unwrap_or(f64::NAN)
}

struct Proc {
    child: std::process::Child,
    kubeconfig: std::path::PathBuf,
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn spawn(dir: &std::path::Path) -> anyhow::Result<(Proc, Duration)> {
    let kubeconfig = dir.join("kubeconfig");
    let _ = std::fs::remove_file(&kubeconfig);
    let start = Instant::now();
    let child = Command::new(env!("CARGO_BIN_EXE_wasmlet"))
        .args(["apiserver", "--port", "0", "--data-dir"])
        .arg(dir)
        .env("WASMLET_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()?;
    let proc = Proc { child, kubeconfig };
    while !proc.kubeconfig.exists() {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let client = client(&proc).await?;
    // Ready = answers a request.
    Api::<ConfigMap>::namespaced(client, "default")
        .list(&ListParams::default().limit(1))
        .await?;
    Ok((proc, start.elapsed()))
}

async fn client(p: &Proc) -> anyhow::Result<kube::Client> {
    let kc = kube::config::Kubeconfig::read_from(&p.kubeconfig)?;
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await?;
    Ok(kube::Client::try_from(config)?)
}

async fn create_many(
    api: &Api<ConfigMap>,
    prefix: &str,
    n: usize,
    concurrency: usize,
) -> anyhow::Result<Duration> {
    let sem = Arc::new(Semaphore::new(concurrency));
    let start = Instant::now();
    let mut tasks = Vec::with_capacity(n);
    for i in 0..n {
        let permit = sem.clone().acquire_owned().await?;
        let api = api.clone();
        let name = format!("{prefix}-{i}");
        tasks.push(tokio::spawn(async move {
            let r = api.create(&PostParams::default(), &cm(&name, None)).await;
            drop(permit);
            r
        }));
    }
    for t in tasks {
        t.await??;
    }
    Ok(start.elapsed())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let objects: usize = std::env::var("BENCH_OBJECTS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(100_000);
    let dir = tempfile::tempdir()?;
    let (proc, first_start) = spawn(dir.path()).await?;
    let client = client(&proc).await?;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    println!("wasmlet embedded API server, 2-core machine, fsync on every commit (group commit)");
    println!(
        "cold start on an empty dir: {:.0} ms",
        first_start.as_secs_f64() * 1e3
    );

    // 1. Creates/s.
    let n = 10_000;
    let took = create_many(&api, "c", n, 64).await?;
    println!(
        "creates: {n} x 1 KiB ConfigMaps, 64 in flight: {:.0}/s (goal >= 1000/s)",
        n as f64 / took.as_secs_f64()
    );

    // 2. LIST of 10,000.
    let mut times = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        let list = api.list(&ListParams::default()).await?;
        times.push(t.elapsed().as_secs_f64() * 1e3);
        assert_eq!(list.items.len(), n);
    }
    times.sort_by(f64::total_cmp);
    println!(
        "LIST 10,000 objects (HTTPS + JSON decode in kube): median {:.0} ms, best {:.0} ms (goal <= 200 ms)",
        pct(&times, 0.5),
        times[0]
    );

    // 3. Watch delivery with 100 watchers, 500 writes/s.
    let rv = api
        .list(&ListParams::default().limit(1))
        .await?
        .metadata
        .resource_version
        .unwrap_or_default();
    let watchers = 100;
    let writes = 2_500;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<f64>();
    for _ in 0..watchers {
        let api = api.clone();
        let tx = tx.clone();
        let rv = rv.clone();
        tokio::spawn(async move {
            let mut stream = api
                .watch(&WatchParams::default().labels("bench=lat"), &rv)
                .await?
                .boxed();
            let mut seen = 0;
            while let Some(ev) = stream.next().await {
                if let Ok(WatchEvent::Added(o)) = ev {
                    let sent: u128 = o.metadata.annotations.unwrap_or_default()["sent"]
                        .parse()
                        .unwrap_or(0);
                    let now = std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)?
                        .as_micros();
                    let _ = tx.send((now.saturating_sub(sent)) as f64 / 1e3);
                    seen += 1;
                    if seen == writes {
                        break;
                    }
                }
            }
            anyhow::Ok(())
        });
    }
    drop(tx);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let start = Instant::now();
    let mut handles = Vec::new();
    for i in 0..writes {
        let due = start + Duration::from_micros(i as u64 * 2_000);
        tokio::time::sleep_until(due.into()).await;
        let api = api.clone();
        handles.push(tokio::spawn(async move {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)?
                .as_micros();
            let mut o = cm(&format!("lat-{i}"), Some(("sent", now.to_string())));
            o.metadata.labels = Some([("bench".to_string(), "lat".to_string())].into());
            api.create(&PostParams::default(), &o).await?;
            anyhow::Ok(())
        }));
    }
    for h in handles {
        h.await??;
    }
    let achieved = writes as f64 / start.elapsed().as_secs_f64();
    let mut lat = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while lat.len() < watchers * writes && Instant::now() < deadline {
        match tokio::time::timeout(Duration::from_secs(5), rx.recv()).await {
            Ok(Some(ms)) => lat.push(ms),
            _ => break,
        }
    }
    lat.sort_by(f64::total_cmp);
    println!(
        "watch: {watchers} watchers, {writes} writes at {achieved:.0}/s: {} of {} deliveries, p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms (goal p99 <= 50 ms)",
        lat.len(),
        watchers * writes,
        pct(&lat, 0.5),
        pct(&lat, 0.99),
        lat.last().copied().unwrap_or(f64::NAN)
    );

    // 4. RSS with `objects` objects.
    let have = n + writes;
    if objects > have {
        create_many(&api, "bulk", objects - have, 64).await?;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    println!(
        "RSS with {objects} x 1 KiB objects stored: {:.0} MiB (goal <= 500 MiB)",
        rss_mib(proc.child.id())
    );

    // 5. Restart on that directory.
    drop(client);
    drop(proc);
    let (proc, took) = spawn(dir.path()).await?;
    let count = Api::<ConfigMap>::namespaced(client_of(&proc).await?, "default")
        .list(&ListParams::default().limit(1))
        .await?;
    println!(
        "restart on a {objects}-object dir until it answers a LIST: {:.0} ms (goal <= 3000 ms); RSS after restart {:.0} MiB; remaining={:?}",
        took.as_secs_f64() * 1e3,
        rss_mib(proc.child.id()),
        count.metadata.remaining_item_count
    );
    drop(proc);

    // 6. Give back after a burst.
    let burst: usize = std::env::var("BENCH_BURST")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(27_000);
    let dir = tempfile::tempdir()?;
    let (proc, _) = spawn(dir.path()).await?;
    let api = Api::<ConfigMap>::namespaced(client_of(&proc).await?, "default");
    let db_mib = || {
        ["state.db", "state.db-wal"]
            .iter()
            .filter_map(|f| std::fs::metadata(dir.path().join(f)).ok())
            .map(|m| m.len() as f64 / (1024.0 * 1024.0))
            .sum::<f64>()
    };
    let figures = |when: &str| {
        format!(
            "{when}: RSS {:.0} MiB, database {:.0} MiB",
            rss_mib(proc.child.id()),
            db_mib()
        )
    };
    let before = figures("before");
    let sem = Arc::new(Semaphore::new(32));
    let mut tasks = Vec::with_capacity(burst);
    for i in 0..burst {
        let permit = sem.clone().acquire_owned().await?;
        let api = api.clone();
        tasks.push(tokio::spawn(async move {
            let big = cm(
                &format!("burst-{i}"),
                Some(("bench/pad", "y".repeat(15 * 1024))),
            );
            let r = api.create(&PostParams::default(), &big).await;
            drop(permit);
            r
        }));
    }
    for t in tasks {
        t.await??;
    }
    let peak = figures("peak");
    api.delete_collection(
        &Default::default(),
        &ListParams::default().labels("bench=yes"),
    )
    .await?;
    let deleted = figures("just deleted");
    tokio::time::sleep(Duration::from_secs(60)).await;
    let later = figures("60 s later");
    tokio::time::sleep(Duration::from_secs(60)).await;
    println!(
        "give-back, {burst} x 16 KiB objects written then deleted: {before}; {peak}; {deleted}; {later}; {}",
        figures("120 s later")
    );
    Ok(())
}

async fn client_of(p: &Proc) -> anyhow::Result<kube::Client> {
    client(p).await
}
