//! The controller engine end to end: `wasmlet up` with the real
//! configmap-summary plugin, objects written through the kube client.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use serde_json::{Value, json};
use wasmlet_e2e::summary::{create_configmap, create_summary, ready, status_keys, summaries};
use wasmlet_e2e::{Plane, eventually, install_plugin, install_plugin_with, metric};

/// Waits until the plugin's CRD is served (it is applied when the plugin loads).
/// A built manifest with a call deadline of 10 s instead of its 1 s, for a
/// plugin whose deadline a test is not about. A deadline is wall-clock time
/// from the call's start: on a loaded 2-core machine a trivial call can pass
/// 1 s, and count as a reconcile error or report a timeout instead of the
/// guest's own failure.
fn unhurried(toml: String) -> String {
    assert!(toml.contains("deadline-ms = 1000\n"), "{toml}");
    toml.replace("deadline-ms = 1000\n", "deadline-ms = 10000\n")
}

async fn plugin_ready(plane: &Plane, client: &kube::Client) -> anyhow::Result<()> {
    install_plugin_with(&plane.plugin_dir(), "configmap-summary", unhurried)?;
    let api = summaries(client);
    eventually(Duration::from_secs(30), "the ConfigSummary CRD", || async {
        api.list(&Default::default()).await.ok()
    })
    .await?;
    Ok(())
}

#[tokio::test]
async fn status_follows_changes_and_is_not_rewritten_when_nothing_changed() -> anyhow::Result<()> {
    // Resync every second: resyncs of up-to-date objects must cost no writes.
    let plane = Plane::start_up(&["--resync-seconds", "1"]).await?;
    let client = plane.client().await?;
    plugin_ready(&plane, &client).await?;
    let api = summaries(&client);
    create_summary(&api, "s1", json!({})).await?;
    create_configmap(&client, "a", "s1", 2).await?;
    create_configmap(&client, "b", "s1", 3).await?;
    let o = eventually(Duration::from_secs(60), "status.keys = 5", || async {
        let o = api.get("s1").await.ok()?;
        (status_keys(&o) == Some(5) && ready(&o).as_deref() == Some("True")).then_some(o)
    })
    .await?;
    assert_eq!(
        o.data
            .pointer("/status/observedGeneration")
            .and_then(Value::as_i64),
        o.metadata.generation
    );
    let conds = o
        .data
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    for c in &conds {
        assert_eq!(
            c["observedGeneration"].as_i64(),
            o.metadata.generation,
            "{c}"
        );
    }

    // Quiet: three reconciles later (resyncs), still the same resourceVersion
    // (zero writes).
    let rv = o.metadata.resource_version.clone();
    let reconciles = |m: &str| {
        metric(
            m,
            "controller_runtime_reconcile_total",
            "controller=\"configmap-summary\"",
        )
    };
    let start = reconciles(&plane.metrics().await?);
    eventually(Duration::from_secs(30), "three more reconciles", || async {
        let m = plane.metrics().await.ok()?;
        (reconciles(&m) >= start + 3.0).then_some(())
    })
    .await?;
    let after = api.get("s1").await?;
    assert_eq!(
        after.metadata.resource_version, rv,
        "an up-to-date object was written again"
    );

    // A watched ConfigMap changes: status follows, Ready's transition time stays.
    let ready_time = |o: &DynamicObject| {
        o.data
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .and_then(|cs| {
                cs.iter()
                    .find(|c| c["type"] == "Ready")
                    .map(|c| c["lastTransitionTime"].clone())
            })
    };
    let t0 = ready_time(&after);
    Api::<ConfigMap>::namespaced(client.clone(), "default")
        .patch(
            "b",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"extra": "1"}})),
        )
        .await?;
    let o = eventually(Duration::from_secs(60), "status.keys = 6", || async {
        let o = api.get("s1").await.ok()?;
        (status_keys(&o) == Some(6)).then_some(o)
    })
    .await?;
    assert_eq!(
        ready_time(&o),
        t0,
        "Ready did not change status, so its lastTransitionTime must not move"
    );

    // A spec edit bumps generation; observedGeneration follows.
    api.patch(
        "s1",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"keyPrefix": "k"}})),
    )
    .await?;
    let o = eventually(
        Duration::from_secs(60),
        "observedGeneration = 2",
        || async {
            let o = api.get("s1").await.ok()?;
            (o.data
                .pointer("/status/observedGeneration")
                .and_then(Value::as_i64)
                == Some(2))
            .then_some(o)
        },
    )
    .await?;
    assert_eq!(o.metadata.generation, Some(2));
    assert_eq!(
        status_keys(&o),
        Some(5),
        "only keys starting with k: k0,k1 + k0,k1,k2"
    );
    Ok(())
}

#[tokio::test]
async fn hot_swap_under_steady_writes_misses_no_reconcile() -> anyhow::Result<()> {
    let plane = Plane::start_up(&[]).await?;
    let client = plane.client().await?;
    plugin_ready(&plane, &client).await?;
    let api = summaries(&client);
    let swaps = || async {
        plane
            .plugin_counter("swaps", "configmap-summary")
            .await
            .ok()
    };
    // A steady writer (one object and its ConfigMap every 50 ms: the pace,
    // not a synchronisation) that counts what it wrote and runs until told
    // to stop.
    let (written_tx, written) = tokio::sync::watch::channel(0usize);
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (api, client, stop) = (api.clone(), client.clone(), stop.clone());
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(50));
            let mut i = 0;
            while !stop.load(Ordering::Relaxed) {
                tick.tick().await;
                create_summary(&api, &format!("w{i}"), json!({})).await?;
                create_configmap(&client, &format!("w{i}-cm"), &format!("w{i}"), i % 5 + 1).await?;
                i += 1;
                written_tx.send_replace(i);
            }
            anyhow::Ok(i)
        })
    };
    // Waits until the writer wrote `n` objects in all.
    let wrote = |n: usize| {
        let mut written = written.clone();
        async move {
            tokio::time::timeout(Duration::from_secs(60), written.wait_for(|w| *w >= n))
                .await
                .map_err(|_| anyhow::anyhow!("the writer did not reach {n} objects in 60 s"))?
                .map_err(|_| anyhow::anyhow!("the writer stopped before {n} objects"))?;
            anyhow::Ok(())
        }
    };
    // Mid-stream, replace the plugin (a new manifest makes it a new version)
    // twice, the second time with the same module again. Each swap is
    // waited for on the swap counter, with objects written before and after
    // it while the writer never pauses.
    let toml = plane.plugin_dir().join("configmap-summary.toml");
    let text = std::fs::read_to_string(&toml)?;
    let installed = swaps()
        .await
        .ok_or_else(|| anyhow::anyhow!("the host serves no /metrics"))?;
    let mut marks = Vec::new();
    for (n, version) in [(installed + 1.0, "v2"), (installed + 2.0, "v3")] {
        // (Each borrow ends before an await: the writer needs the lock.)
        let so_far = *written.borrow();
        wrote(so_far + 5).await?;
        let before = *written.borrow();
        std::fs::write(&toml, format!("{text}\n# {version}\n"))?;
        eventually(
            Duration::from_secs(60),
            &format!("swap to {version}"),
            || async { swaps().await.filter(|s| *s >= n) },
        )
        .await?;
        let swapped = *written.borrow();
        marks.push((before, swapped));
    }
    let swapped = *written.borrow();
    wrote(swapped + 5).await?;
    stop.store(true, Ordering::Relaxed);
    let total = writer.await??;
    eprintln!("{total} objects; written (before, at) each swap: {marks:?}");
    eventually(
        Duration::from_secs(60),
        "every object summarised",
        || async {
            let list = api.list(&Default::default()).await.ok()?;
            let done = list
                .items
                .iter()
                .filter(|o| {
                    let i: Option<usize> = o
                        .metadata
                        .name
                        .as_deref()
                        .and_then(|n| n.trim_start_matches('w').parse().ok());
                    i.is_some_and(|i| {
                        status_keys(o) == Some((i % 5 + 1) as i64)
                            && ready(o).as_deref() == Some("True")
                    })
                })
                .count();
            (done == total).then_some(())
        },
    )
    .await?;
    let m = plane.metrics().await?;
    assert!(
        metric(
            &m,
            "wasmlet_plugin_swaps_total",
            "plugin=\"configmap-summary\""
        ) >= 2.0,
        "{m}"
    );
    assert_eq!(
        metric(
            &m,
            "controller_runtime_reconcile_errors_total",
            "configmap-summary"
        ),
        0.0,
        "{m}"
    );
    Ok(())
}

#[tokio::test]
async fn failing_plugins_are_contained_next_to_a_healthy_one() -> anyhow::Result<()> {
    let plane = Plane::start_up(&[]).await?;
    let client = plane.client().await?;
    plugin_ready(&plane, &client).await?;
    // Two reconcilers of one object would fight over its status: the healthy
    // plugin leaves the test guests' objects alone.
    let toml = plane.plugin_dir().join("configmap-summary.toml");
    let text = std::fs::read_to_string(&toml)?.replace(
        "[reconciles]",
        "[reconciles]\nlabel-selector = \"!wasmlet.dev/test\"",
    );
    std::fs::write(&toml, text)?;
    // Only spin's deadline (200 ms) is under test.
    install_plugin(&plane.plugin_dir(), "spin")?;
    for name in ["trap", "hog", "denied"] {
        install_plugin_with(&plane.plugin_dir(), name, unhurried)?;
    }
    std::fs::write(
        plane.plugin_dir().join("corrupt.wasm"),
        b"\0asm not a component",
    )?;
    std::fs::copy(
        plane.plugin_dir().join("trap.toml"),
        plane.plugin_dir().join("corrupt.toml"),
    )?;
    let api = summaries(&client);
    for name in ["trap", "spin", "hog", "denied"] {
        create_summary(
            &api,
            &format!("bad-{name}"),
            json!({"wasmlet.dev/test": name}),
        )
        .await?;
    }
    for i in 0..10 {
        create_summary(&api, &format!("good-{i}"), json!({})).await?;
        create_configmap(&client, &format!("good-{i}-cm"), &format!("good-{i}"), 1).await?;
    }
    // The healthy plugin summarises its objects.
    eventually(
        Duration::from_secs(30),
        "healthy objects summarised",
        || async {
            let list = api.list(&Default::default()).await.ok()?;
            let n = list
                .items
                .iter()
                .filter(|o| {
                    o.metadata
                        .name
                        .as_deref()
                        .is_some_and(|n| n.starts_with("good-"))
                        && status_keys(o) == Some(1)
                })
                .count();
            (n == 10).then_some(())
        },
    )
    .await?;
    // Each bad plugin's object carries Ready=False with the reason.
    for (name, reason) in [
        ("trap", "PluginFailed"),
        ("spin", "PluginFailed"),
        ("hog", "PluginFailed"),
        ("denied", "Forbidden"),
    ] {
        let o = eventually(
            Duration::from_secs(30),
            &format!("{name} reported"),
            || async {
                let o = api.get(&format!("bad-{name}")).await.ok()?;
                (ready(&o).as_deref() == Some("False")).then_some(o)
            },
        )
        .await?;
        let cond = o
            .data
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .unwrap()
            .iter()
            .find(|c| c["type"] == "Ready")
            .cloned()
            .unwrap();
        assert_eq!(cond["reason"], reason, "{name}: {cond}");
        if name == "trap" {
            // The panic's own words and place (the SDK's panic hook), not
            // `unreachable` and a backtrace of unnamed frames.
            let message = cond["message"].as_str().unwrap_or_default();
            assert!(
                message.contains("guests/testing/trap/src/lib.rs:")
                    && message.contains("reconcile of Some(\"bad-trap\") panics by design")
                    && !message.contains("backtrace"),
                "{message}"
            );
        }
    }
    let m = plane.metrics().await?;
    assert!(
        metric(&m, "wasmlet_plugin_traps_total", "plugin=\"trap\"") >= 1.0,
        "{m}"
    );
    assert!(
        metric(&m, "wasmlet_plugin_timeouts_total", "plugin=\"spin\"") >= 1.0,
        "{m}"
    );
    assert!(
        metric(&m, "wasmlet_plugin_out_of_memory_total", "plugin=\"hog\"") >= 1.0,
        "{m}"
    );
    assert!(
        metric(&m, "wasmlet_plugin_denied_total", "plugin=\"denied\"") >= 1.0,
        "{m}"
    );
    assert!(
        metric(
            &m,
            "wasmlet_plugin_load_failures_total",
            "plugin=\"corrupt\""
        ) >= 1.0,
        "{m}"
    );
    assert!(
        plane
            .log()
            .contains("corrupt.wasm: not a valid WebAssembly component"),
        "the log names the corrupt file"
    );
    Ok(())
}

/// "I fixed it and shipped it": a new version of a plugin re-runs every
/// object it reconciles at once (the resync is 600 s away and no object
/// changes). The variant caps a summary at 3 keys.
#[tokio::test]
async fn a_new_version_reruns_every_existing_object() -> anyhow::Result<()> {
    let plane = Plane::start_up(&[]).await?;
    let client = plane.client().await?;
    plugin_ready(&plane, &client).await?;
    let api = summaries(&client);
    for n in ["big", "bigger"] {
        create_summary(&api, n, json!({})).await?;
        create_configmap(&client, &format!("{n}-cm"), n, 5).await?;
    }
    for n in ["big", "bigger"] {
        eventually(Duration::from_secs(30), "5 keys summarised", || async {
            (status_keys(&api.get(n).await.ok()?) == Some(5)).then_some(())
        })
        .await?;
    }
    let wasm = plane.plugin_dir().join("configmap-summary.wasm");
    let staged = plane.plugin_dir().join(".configmap-summary.wasm");
    std::fs::copy(
        wasmlet_e2e::built_plugins().join("summary-variant.wasm"),
        &staged,
    )?;
    std::fs::rename(&staged, &wasm)?;
    for n in ["big", "bigger"] {
        eventually(
            Duration::from_secs(60),
            "the new version's summary",
            || async { (status_keys(&api.get(n).await.ok()?) == Some(3)).then_some(()) },
        )
        .await
        .map_err(|e| anyhow::anyhow!("{e}; log:\n{}", plane.log()))?;
    }
    assert!(
        plane
            .log()
            .contains("new version: every object queued for it")
    );
    Ok(())
}
