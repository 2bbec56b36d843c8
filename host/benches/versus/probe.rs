//! What the versus benchmark reads about the processes it runs: CPU seconds
//! and peak RSS from /proc, and counters from Prometheus text.

use anyhow::Context;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Clock ticks per second of /proc/PID/stat's times.
pub fn clock_ticks() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100.0)
}

/// utime + stime of process `pid` and of its children it waited for (a
/// wasmlet host compiles components in child processes), in seconds.
pub fn cpu_seconds(pid: u32, ticks: f64) -> anyhow::Result<f64> {
    stat_seconds(pid, ticks, 11..=14)
}

/// The CPU seconds of the children `pid` waited for alone (a wasmlet host's
/// compiles).
pub fn children_cpu_seconds(pid: u32, ticks: f64) -> anyhow::Result<f64> {
    stat_seconds(pid, ticks, 13..=14)
}

fn stat_seconds(
    pid: u32,
    ticks: f64,
    fields: std::ops::RangeInclusive<usize>,
) -> anyhow::Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // The command name may hold spaces: fields count from after its ')'.
    let rest = stat
        .rsplit_once(')')
        .map(|(_, r)| r)
        .context("malformed /proc stat")?;
    let f: Vec<&str> = rest.split_whitespace().collect();
    // After ')': state is field 3, so utime (14), stime (15), cutime (16) and
    // cstime (17) are at 11..=14.
    let mut sum = 0.0;
    for i in fields {
        sum += f.get(i).context("no CPU times")?.parse::<f64>()?;
    }
    Ok(sum / ticks)
}

/// Peak resident set size (VmHWM) of process `pid`, in MiB.
pub fn peak_rss_mib(pid: u32) -> anyhow::Result<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let line = status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .context("no VmHWM")?;
    let kib: f64 = line
        .split_whitespace()
        .nth(1)
        .context("malformed VmHWM")?
        .parse()?;
    Ok(kib / 1024.0)
}

/// The sum of a Prometheus counter's samples whose labels include every one of
/// `labels` (`key="value"` strings).
pub fn counter_sum(text: &str, name: &str, labels: &[&str]) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            let (metric, rest) = series.split_once('{').unwrap_or((series, ""));
            (metric == name && labels.iter().all(|lab| rest.contains(lab)))
                .then(|| value.parse::<f64>().ok())
                .flatten()
        })
        .sum()
}

/// The API server's requests by verb and resource (`apiserver_request_total`),
/// most first, as `VERB resource count`.
pub fn requests_by_verb(text: &str) -> Vec<String> {
    let mut sums: std::collections::BTreeMap<(String, String), f64> = Default::default();
    let label = |rest: &str, key: &str| {
        let start = rest.find(&format!("{key}=\""))? + key.len() + 2;
        let len = rest[start..].find('"')?;
        Some(rest[start..start + len].to_string())
    };
    for l in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((series, value)) = l.rsplit_once(' ') else {
            continue;
        };
        let Some(("apiserver_request_total", rest)) = series.split_once('{') else {
            continue;
        };
        let key = (
            label(rest, "verb").unwrap_or_default(),
            label(rest, "resource").unwrap_or_default(),
        );
        *sums.entry(key).or_default() += value.parse::<f64>().unwrap_or(0.0);
    }
    let mut rows: Vec<_> = sums.into_iter().filter(|(_, n)| *n > 0.0).collect();
    rows.sort_by(|a, b| b.1.total_cmp(&a.1));
    rows.into_iter()
        .map(|((verb, resource), n)| format!("{verb} {resource} {n}"))
        .collect()
}

/// `GET /metrics` of a plain-HTTP endpoint (the wasmlet host's).
pub async fn scrape(addr: &str) -> anyhow::Result<String> {
    let mut s = tokio::net::TcpStream::connect(addr).await?;
    s.write_all(format!("GET /metrics HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())
        .await?;
    let mut out = String::new();
    s.read_to_string(&mut out).await?;
    Ok(out
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default())
}

/// `GET /metrics` of the API server, as its admin.
pub async fn scrape_plane(client: &kube::Client) -> anyhow::Result<String> {
    let req = http::Request::get("/metrics").body(Vec::new())?;
    Ok(client.request_text(req).await?)
}
