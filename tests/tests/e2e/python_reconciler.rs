//! Reconcilers written in Python (guests/examples/configmap-summary-py, built
//! with componentize-py: CPython inside a ~18 MB component) and in TypeScript
//! (guests/examples/configmap-summary-ts, built with componentize-js:
//! SpiderMonkey inside a ~12 MB component) in `wasmlet up`, against the Rust
//! configmap-summary they rewrite: one scenario gives the same status,
//! conditions, observedGeneration, events and (no) requeue for all three; and
//! one CRD's plugin is hot-swapped Rust → Python → TypeScript → Rust without a
//! restart.
//!
//! A debug host compiles these components in tens of seconds (a release host
//! in a few; the precompiled cache makes any later load a millisecond), hence
//! the long waits for a plugin's first load.

use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use serde_json::{Value, json};
use wasmlet_e2e::summary::{create_configmap, create_summary, ready, status_keys, summaries};
use wasmlet_e2e::{Plane, eventually, install_plugin_with, metric};

const RUST: &str = "configmap-summary";
const PYTHON: &str = "configmap-summary-py";
const TYPESCRIPT: &str = "configmap-summary-ts";

/// Long enough for a debug host to compile the CPython or SpiderMonkey component
/// on a busy machine.
const FIRST_LOAD: Duration = Duration::from_secs(300);

/// A built manifest with a call deadline of 10 s instead of its 1 s: a
/// deadline is wall-clock time from the call's start, and an interpreter's
/// call on a loaded 2-core machine can pass 1 s, fail as a timeout (an
/// error, an event, a Ready reason the other builds do not show) where the
/// scenario looks at what the reconciler decides.
fn unhurried(toml: String) -> String {
    assert!(toml.contains("deadline-ms = 1000\n"), "{toml}");
    toml.replace("deadline-ms = 1000\n", "deadline-ms = 10000\n")
}

/// Waits until the ConfigSummary CRD is served (applied when the plugin loads).
async fn crd_served(client: &kube::Client) -> anyhow::Result<()> {
    let api = summaries(client);
    eventually(FIRST_LOAD, "the ConfigSummary CRD", || async {
        api.list(&Default::default()).await.ok()
    })
    .await?;
    Ok(())
}

/// The status as a user compares it: the conditions without their times.
fn status_of(o: &DynamicObject) -> Value {
    let mut status = o.data.get("status").cloned().unwrap_or(Value::Null);
    if let Some(conds) = status.get_mut("conditions").and_then(Value::as_array_mut) {
        for c in conds.iter_mut() {
            if let Some(c) = c.as_object_mut() {
                c.remove("lastTransitionTime");
            }
        }
        conds.sort_by_key(|c| c["type"].as_str().unwrap_or_default().to_string());
    }
    status
}

/// The Events about ConfigSummary `name`, as (type, reason, note), sorted.
async fn events_about(client: &kube::Client, name: &str) -> anyhow::Result<Vec<Value>> {
    let list = Api::<Event>::namespaced(client.clone(), "default")
        .list(&ListParams::default())
        .await?;
    let mut out: Vec<Value> = list
        .items
        .iter()
        .filter(|e| {
            e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
                && e.regarding.as_ref().and_then(|r| r.kind.as_deref()) == Some("ConfigSummary")
        })
        .map(|e| json!([e.type_, e.reason, e.note]))
        .collect();
    out.sort_by_key(Value::to_string);
    Ok(out)
}

/// The controller test's scenario against plugin `name`; returns what a user
/// sees after each step, to be compared across implementations.
async fn scenario(name: &str) -> anyhow::Result<Vec<Value>> {
    let plane = Plane::start_up(&["--resync-seconds", "1"]).await?;
    let client = plane.client().await?;
    install_plugin_with(&plane.plugin_dir(), name, unhurried)?;
    crd_served(&client).await?;
    let api = summaries(&client);
    let mut seen = Vec::new();
    create_summary(&api, "s1", json!({})).await?;
    create_configmap(&client, "a", "s1", 2).await?;
    create_configmap(&client, "b", "s1", 3).await?;
    let o = eventually(FIRST_LOAD, "status.keys = 5, Ready", || async {
        let o = api.get("s1").await.ok()?;
        (status_keys(&o) == Some(5) && ready(&o).as_deref() == Some("True")).then_some(o)
    })
    .await
    .map_err(|e| anyhow::anyhow!("{name}: {e}; log:\n{}", plane.log()))?;
    seen.push(status_of(&o));

    // No requeue asked for: three resyncs later, nothing was written again.
    let reconciles = |m: &str| {
        metric(
            m,
            "controller_runtime_reconcile_total",
            &format!("controller=\"{name}\""),
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
        after.metadata.resource_version, o.metadata.resource_version,
        "{name}: an up-to-date object was written again"
    );

    // A watched ConfigMap changes: the status follows.
    Api::<ConfigMap>::namespaced(client.clone(), "default")
        .patch(
            "b",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"extra": "1"}})),
        )
        .await?;
    let o = eventually(Duration::from_secs(30), "status.keys = 6", || async {
        let o = api.get("s1").await.ok()?;
        (status_keys(&o) == Some(6)).then_some(o)
    })
    .await?;
    seen.push(status_of(&o));

    // A spec edit: only keys starting with k, observedGeneration 2.
    api.patch(
        "s1",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"keyPrefix": "k"}})),
    )
    .await?;
    let o = eventually(Duration::from_secs(30), "observedGeneration 2", || async {
        let o = api.get("s1").await.ok()?;
        (o.data.pointer("/status/observedGeneration") == Some(&json!(2))).then_some(o)
    })
    .await?;
    seen.push(status_of(&o));

    // The manifest stops granting `list configmaps`: the client's denial is a
    // terminal error, Ready=False with its reason and message.
    let swaps = plane.plugin_counter("swaps", name).await?;
    install_plugin_with(&plane.plugin_dir(), name, |toml| {
        unhurried(toml).replace(r#"verbs = ["get", "list"]"#, r#"verbs = ["get"]"#)
    })?;
    eventually(FIRST_LOAD, "the manifest without list", || async {
        let s = plane.plugin_counter("swaps", name).await.ok()?;
        (s > swaps).then_some(())
    })
    .await?;
    let o = eventually(Duration::from_secs(30), "Ready=False", || async {
        let o = api.get("s1").await.ok()?;
        (ready(&o).as_deref() == Some("False")).then_some(o)
    })
    .await
    .map_err(|e| anyhow::anyhow!("{name}: {e}; log:\n{}", plane.log()))?;
    seen.push(status_of(&o));
    seen.push(json!(events_about(&client, "s1").await?));
    // The denial names the plugin and its manifest's path, which differ.
    let text = serde_json::to_string(&seen)?
        .replace(&plane.plugin_dir().display().to_string(), "PLUGINS")
        .replace(name, "NAME");
    Ok(serde_json::from_str(&text)?)
}

/// Runs the scenario against plugin `name`, checks what it shows, then runs it
/// against the Rust example and requires the very same.
async fn does_what_the_rust_one_does(name: &str) -> anyhow::Result<()> {
    let seen = scenario(name).await?;
    let summarised = |keys: u32, maps: u32| {
        json!({
            "type": "Summarised", "status": "True", "reason": "Counted",
            "message": format!("{keys} keys in {maps} ConfigMaps labelled wasmlet.dev/summary=s1"),
        })
    };
    let first = &seen[0];
    assert_eq!(first["keys"], 5, "{first}");
    assert_eq!(first["configMaps"], 2, "{first}");
    assert_eq!(first["observedGeneration"], 1, "{first}");
    let conds = first["conditions"].as_array().cloned().unwrap_or_default();
    let mut want = summarised(5, 2);
    want["observedGeneration"] = json!(1);
    assert!(conds.contains(&want), "{first}");
    assert_eq!(seen[1]["keys"], 6);
    assert_eq!(seen[2]["keys"], 5, "k0,k1 + k0,k1,k2");
    let denied = seen[3]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == "Ready"))
        .cloned()
        .unwrap_or_default();
    assert_eq!(denied["reason"], "Forbidden", "{denied}");
    assert!(
        denied["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("denied by the plugin manifest: the manifest of plugin NAME does not grant \"list ConfigMap\"")),
        "{denied}"
    );

    let rust = scenario(RUST).await?;
    assert_eq!(
        seen, rust,
        "{name}'s status, conditions and events differ from the Rust one's"
    );
    Ok(())
}

#[tokio::test]
async fn the_python_reconciler_does_what_the_rust_one_does() -> anyhow::Result<()> {
    does_what_the_rust_one_does(PYTHON).await
}

#[tokio::test]
async fn the_typescript_reconciler_does_what_the_rust_one_does() -> anyhow::Result<()> {
    does_what_the_rust_one_does(TYPESCRIPT).await
}

#[tokio::test]
async fn one_crd_hot_swaps_rust_python_typescript_rust_without_a_restart() -> anyhow::Result<()> {
    let plane = Plane::start_up(&[]).await?;
    let client = plane.client().await?;
    install_plugin_with(&plane.plugin_dir(), RUST, unhurried)?;
    crd_served(&client).await?;
    let api = summaries(&client);
    let pid = plane.child.as_ref().map(|c| c.id());
    let built = wasmlet_e2e::built_plugins();
    let reconciles = |m: &str| {
        metric(
            m,
            "controller_runtime_reconcile_total",
            &format!("controller=\"{RUST}\""),
        )
    };

    // Each step: the plugin `configmap-summary` becomes `from`'s build (its
    // module and manifest, landing by rename as an operator would), the host
    // logs the replacement with that build's digest, and a ConfigSummary made
    // after it is summarised (by the only version serving: the new one).
    let steps = [(PYTHON, "py"), (TYPESCRIPT, "ts"), (RUST, "rust")];
    for (i, (from, tag)) in steps.iter().enumerate() {
        let before = reconciles(&plane.metrics().await?);
        let name = format!("{tag}{i}");
        let toml = unhurried(std::fs::read_to_string(built.join(format!("{from}.toml")))?);
        let dir = plane.plugin_dir();
        std::fs::write(dir.join(".swap.toml"), format!("{toml}\n# step {i}\n"))?;
        std::fs::rename(dir.join(".swap.toml"), dir.join(format!("{RUST}.toml")))?;
        std::fs::copy(built.join(format!("{from}.wasm")), dir.join(".swap.wasm"))?;
        std::fs::rename(dir.join(".swap.wasm"), dir.join(format!("{RUST}.wasm")))?;
        // Live once the host's last replacement names this module's digest (a
        // scan between the two renames may make a version of the new manifest
        // with the old module first).
        let digest = sha256_hex(&std::fs::read(built.join(format!("{from}.wasm")))?);
        eventually(FIRST_LOAD, &format!("{from} ({digest}) live"), || async {
            let log = plane.log();
            let last = log.lines().rfind(|l| l.contains("plugin replaced"))?;
            last.contains(&digest).then_some(())
        })
        .await
        .map_err(|e| anyhow::anyhow!("{e}; log:\n{}", plane.log()))?;

        create_summary(&api, &name, json!({})).await?;
        create_configmap(&client, &format!("{name}-cm"), &name, i + 2).await?;
        eventually(
            Duration::from_secs(60),
            "the new object summarised",
            || async {
                let o = api.get(&name).await.ok()?;
                (status_keys(&o) == Some(i as i64 + 2) && ready(&o).as_deref() == Some("True"))
                    .then_some(())
            },
        )
        .await
        .map_err(|e| anyhow::anyhow!("{from}: {e}; log:\n{}", plane.log()))?;
        let m = plane.metrics().await?;
        assert!(reconciles(&m) > before, "{from} reconciled nothing: {m}");
    }
    assert_eq!(
        plane.child.as_ref().map(|c| c.id()),
        pid,
        "the host restarted"
    );
    let m = plane.metrics().await?;
    assert_eq!(
        metric(&m, "controller_runtime_reconcile_errors_total", RUST),
        0.0,
        "{m}"
    );
    Ok(())
}

fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}
