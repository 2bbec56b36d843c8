//! Shadow mode (issue 15), end to end: `wasmlet plugin shadow` runs a
//! candidate beside the live configmap-summary on live calls, writes nothing,
//! reports where it decides differently, and `plugin promote` swaps it in.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams, WatchEvent, WatchParams};
use serde_json::{Value, json};
use wasmlet_e2e::summary::{create_configmap, create_summary, status_keys, summaries};
use wasmlet_e2e::{Plane, built_plugins, eventually, metric, wasmlet_bin};

fn plugin_cli(args: &[&str]) -> anyhow::Result<Output> {
    Ok(Command::new(wasmlet_bin())
        .arg("plugin")
        .args(args)
        .env("WASMLET_LOG", "warn")
        .output()?)
}

fn ok(out: Output) -> anyhow::Result<String> {
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    anyhow::ensure!(out.status.success(), "{text}");
    Ok(text)
}

/// `wasmlet plugin shadow-report NAME --json` against the plane's host.
async fn report(plane: &Plane, name: &str) -> anyhow::Result<Value> {
    let url = plane.metrics_url().await?;
    let host = url
        .trim_start_matches("http://")
        .trim_end_matches("/metrics");
    let out = ok(plugin_cli(&[
        "shadow-report",
        name,
        "--host",
        host,
        "--json",
    ])?)?;
    let json = &out[..out.rfind('}').map_or(0, |i| i + 1)];
    Ok(serde_json::from_str(json)?)
}

fn shadow(plane: &Plane, candidate: &Path) -> anyhow::Result<String> {
    let dir = plane.plugin_dir().display().to_string();
    ok(plugin_cli(&[
        "shadow",
        "configmap-summary",
        &candidate.display().to_string(),
        "--plugins",
        &dir,
    ])?)
}

/// Summaries s0..s(n-1), each with a ConfigMap of i keys, reconciled by the
/// live configmap-summary.
async fn summaries_with_keys(plane: &Plane, n: usize) -> anyhow::Result<kube::Client> {
    let client = plane.client().await?;
    // A deadline of 10 s, not 1 s: the live version's counters must show no
    // failure, and on a loaded 2-core machine a live call can be starved
    // past 1 s of wall time (its speed is not what is judged).
    wasmlet_e2e::install_plugin_with(&plane.plugin_dir(), "configmap-summary", |t| {
        assert!(t.contains("deadline-ms = 1000"), "{t}");
        t.replace("deadline-ms = 1000", "deadline-ms = 10000")
    })?;
    summaries_ready(&client, n).await?;
    Ok(client)
}

/// Creates the summaries s0..s{n} and their ConfigMaps (i keys each), and
/// waits until each reports its count.
async fn summaries_ready(client: &kube::Client, n: usize) -> anyhow::Result<()> {
    let api = summaries(client);
    eventually(Duration::from_secs(30), "the ConfigSummary CRD", || async {
        api.list(&Default::default()).await.ok()
    })
    .await?;
    for i in 0..n {
        create_summary(&api, &format!("s{i}"), json!({})).await?;
        create_configmap(client, &format!("cm{i}"), &format!("s{i}"), i).await?;
    }
    wait_keys(client, n, |i| i as i64).await
}

/// Waits until every summary s{i} reports `keys(i)`.
async fn wait_keys(
    client: &kube::Client,
    n: usize,
    keys: impl Fn(usize) -> i64,
) -> anyhow::Result<()> {
    let api = summaries(client);
    for i in 0..n {
        let want = keys(i);
        eventually(
            Duration::from_secs(30),
            &format!("s{i} keys={want}"),
            || async {
                let o = api.get(&format!("s{i}")).await.ok()?;
                (status_keys(&o) == Some(want)).then_some(())
            },
        )
        .await?;
    }
    Ok(())
}

/// Adds a key to every ConfigMap: each summary is reconciled again.
async fn add_a_key(client: &kube::Client, n: usize, key: &str) -> anyhow::Result<()> {
    let cms = Api::<ConfigMap>::namespaced(client.clone(), "default");
    for i in 0..n {
        cms.patch(
            &format!("cm{i}"),
            &PatchParams::default(),
            &Patch::Merge(json!({ "data": { key: "1" } })),
        )
        .await?;
    }
    Ok(())
}

fn keys_of(report: &Value) -> BTreeSet<String> {
    report["differences"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|d| d["key"].as_str().map(str::to_string))
        .collect()
}

#[tokio::test]
async fn a_shadow_candidate_is_judged_on_live_calls_writes_nothing_and_can_be_promoted()
-> anyhow::Result<()> {
    let plane = Plane::start_up(&[]).await?;
    let n = 8;
    // The candidate runs under the live plugin's limits: a deadline of 10 s,
    // not 1 s, as what is judged here is its decisions, not its speed (on a
    // loaded 2-core machine a call was once starved past 1 s of wall time).
    let client = plane.client().await?;
    wasmlet_e2e::install_plugin_with(&plane.plugin_dir(), "configmap-summary", |t| {
        assert!(t.contains("deadline-ms = 1000"), "{t}");
        t.replace("deadline-ms = 1000", "deadline-ms = 10000")
    })?;
    summaries_ready(&client, n).await?;
    let api = summaries(&client);

    // The variant caps a summary at 3 keys: beside the live version it must
    // differ on exactly the summaries that count more, and write nothing.
    let said = shadow(&plane, &built_plugins().join("summary-variant.wasm"))?;
    assert!(said.contains("configmap-summary.shadow.wasm"), "{said}");
    eventually(Duration::from_secs(30), "the candidate running", || async {
        let r = report(&plane, "configmap-summary").await.ok()?;
        r["candidate"].is_string().then_some(())
    })
    .await?;
    let from = api
        .list(&Default::default())
        .await?
        .metadata
        .resource_version
        .unwrap_or_default();
    add_a_key(&client, n, "extra").await?;
    // Live decisions only: every summary counts i + 1, none capped at 3.
    wait_keys(&client, n, |i| i as i64 + 1).await?;
    let want: BTreeSet<String> = (0..n)
        .filter(|i| i + 1 > 3)
        .map(|i| format!("default/s{i}"))
        .collect();
    let r = eventually(
        Duration::from_secs(30),
        "the candidate's differences",
        || async {
            let r = report(&plane, "configmap-summary").await.ok()?;
            (keys_of(&r) == want && r["same"].as_u64()? >= 3).then_some(r)
        },
    )
    .await?;
    assert_eq!(r["error"], 0, "{r:#}");
    let d = r["differences"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["key"] == "default/s7")
        .expect("s7 differs");
    assert_eq!(d["result"], "different");
    assert!(
        d["changes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["path"] == "/outcome/status/keys" && c["live"] == 8 && c["candidate"] == 3),
        "{d:#}"
    );
    let metrics = plane.metrics().await?;
    let count = |result: &str| {
        metric(
            &metrics,
            "wasmlet_shadow_calls_total",
            &format!("plugin=\"configmap-summary\",result=\"{result}\""),
        )
    };
    assert!(count("different") >= want.len() as f64, "{metrics}");
    assert!(count("same") >= 3.0, "{metrics}");
    assert_eq!(count("error"), 0.0);

    // Nothing the candidate decided reached the API server: every status
    // written since the shadow started is the live count (the watch replays
    // each write from before the ConfigMaps changed).
    let mut seen = std::collections::BTreeMap::<String, BTreeSet<i64>>::new();
    let stream = api.watch(&WatchParams::default().timeout(3), &from).await?;
    futures::pin_mut!(stream);
    while let Some(event) = stream.next().await {
        if let WatchEvent::Modified(o) = event? {
            let keys = status_keys(&o).unwrap_or(-1);
            seen.entry(o.metadata.name.unwrap_or_default())
                .or_default()
                .insert(keys);
        }
    }
    // (s4.. count 5 keys or more: the candidate would have written 3.)
    for i in 4..n {
        let name = format!("s{i}");
        let live = BTreeSet::from([i as i64, i as i64 + 1]);
        let written = seen.get(&name).cloned().unwrap_or_default();
        assert!(
            written.contains(&(i as i64 + 1)) && written.is_subset(&live),
            "{name}: statuses written {seen:?}"
        );
    }
    let text = plane.log();
    assert!(
        text.contains("shadow: the candidate decided differently"),
        "{text}"
    );

    // Promotion is the normal hot swap: the variant becomes the live version.
    let swaps = || async {
        plane
            .plugin_counter("swaps", "configmap-summary")
            .await
            .ok()
    };
    let swapped_before = swaps().await.unwrap_or(0.0);
    let dir = plane.plugin_dir().display().to_string();
    ok(plugin_cli(&[
        "promote",
        "configmap-summary",
        "--plugins",
        &dir,
    ])?)?;
    assert!(
        !plane
            .plugin_dir()
            .join("configmap-summary.shadow.wasm")
            .exists()
    );
    eventually(Duration::from_secs(30), "the candidate stopped", || async {
        let r = report(&plane, "configmap-summary").await.ok()?;
        r["candidate"].is_null().then_some(())
    })
    .await?;
    // Changes made before the swap is done would be reconciled by the old version.
    eventually(Duration::from_secs(30), "the variant live", || async {
        (swaps().await? > swapped_before).then_some(())
    })
    .await?;
    add_a_key(&client, n, "more").await?;
    wait_keys(&client, n, |i| (i as i64 + 2).min(3)).await?;
    Ok(())
}

#[tokio::test]
async fn a_trapping_candidate_has_no_effect_on_live_reconciles_and_can_be_abandoned()
-> anyhow::Result<()> {
    a_failing_candidate_has_no_effect("trap", "trapped").await
}

/// The `spin` guest loops forever: each candidate call runs to the live
/// manifest's deadline (10 s here) on the candidate's own thread, while live
/// calls go on at their pace.
#[tokio::test]
async fn a_hanging_candidate_has_no_effect_on_live_reconciles_and_can_be_abandoned()
-> anyhow::Result<()> {
    a_failing_candidate_has_no_effect("spin", "deadline").await
}

/// A candidate built from test guest `guest` fails every call with an error
/// whose text holds `words`; live reconciles, the live version's counters and
/// abandoning it are unaffected.
async fn a_failing_candidate_has_no_effect(guest: &str, words: &str) -> anyhow::Result<()> {
    let plane = Plane::start_up(&[]).await?;
    let n = 4;
    let client = summaries_with_keys(&plane, n).await?;
    shadow(&plane, &built_plugins().join(format!("{guest}.wasm")))?;
    eventually(Duration::from_secs(30), "the candidate running", || async {
        let r = report(&plane, "configmap-summary").await.ok()?;
        r["candidate"].is_string().then_some(())
    })
    .await?;
    add_a_key(&client, n, "extra").await?;
    wait_keys(&client, n, |i| i as i64 + 1).await?;
    // Every live call is judged an error or, once a hanging candidate has
    // spent its CPU share on deadlines, skipped.
    let r = eventually(
        Duration::from_secs(120),
        "the candidate's errors",
        || async {
            let r = report(&plane, "configmap-summary").await.ok()?;
            let (errors, skipped) = (r["error"].as_u64()?, r["skipped"].as_u64()?);
            (errors >= 1 && errors + skipped >= n as u64).then_some(r)
        },
    )
    .await?;
    assert_eq!(r["same"], 0, "{r:#}");
    let first = &r["differences"][0];
    assert_eq!(first["result"], "error", "{r:#}");
    assert!(
        first["changes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["path"] == "/outcome/kind" && c["candidate"] == "failed"),
        "{r:#}"
    );
    assert!(first.to_string().contains(words), "{r:#}");
    // The live version's own counters saw no failure.
    let metrics = plane.metrics().await?;
    for failures in [
        "wasmlet_plugin_traps_total",
        "wasmlet_plugin_timeouts_total",
    ] {
        let live = metric(&metrics, failures, "plugin=\"configmap-summary\"");
        assert_eq!(live, 0.0, "{failures}: {metrics}");
    }
    let dir = plane.plugin_dir().display().to_string();
    ok(plugin_cli(&[
        "abandon",
        "configmap-summary",
        "--plugins",
        &dir,
    ])?)?;
    // (A spinning candidate may be up to 10 s into a call.)
    eventually(Duration::from_secs(60), "the candidate stopped", || async {
        let r = report(&plane, "configmap-summary").await.ok()?;
        r["candidate"].is_null().then_some(())
    })
    .await?;
    // Live work goes on.
    add_a_key(&client, n, "more").await?;
    wait_keys(&client, n, |i| i as i64 + 2).await?;
    Ok(())
}
