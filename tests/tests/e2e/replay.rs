//! Record and replay (issue 15), end to end: `wasmlet up --record` writes a
//! record of every call, `wasmlet replay` runs them again without a cluster.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use wasmlet_e2e::summary::{create_configmap, create_summary, status_keys, summaries};
use wasmlet_e2e::workload_plane::{self, NODE, workload};
use wasmlet_e2e::{Plane, built_plugins, eventually, install_plugin_with, wasmlet_bin};

/// A built manifest with a call deadline of 10 s instead of its 1 s. A
/// deadline is wall-clock time from the call's start: on a loaded 2-core
/// machine a recorded call, or its replay (in its own process), can pass
/// 1 s, and a timeout on one side only is a difference the test did not make.
fn unhurried(toml: String) -> String {
    assert!(toml.contains("deadline-ms = 1000\n"), "{toml}");
    toml.replace("deadline-ms = 1000\n", "deadline-ms = 10000\n")
}

/// Every call line of a record file (header lines skipped).
fn calls(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v.get("format").is_none())
        .collect()
}

/// The last recorded `status.keys` of each key.
fn last_keys(calls: &[Value]) -> std::collections::BTreeMap<String, i64> {
    calls
        .iter()
        .filter_map(|c| {
            Some((
                c["key"].as_str()?.to_string(),
                c.pointer("/outcome/status/keys")?.as_i64()?,
            ))
        })
        .collect()
}

fn replay(args: &[&str]) -> anyhow::Result<Output> {
    Ok(Command::new(wasmlet_bin())
        .arg("replay")
        .args(args)
        .env("WASMLET_LOG", "warn")
        .output()?)
}

fn text(o: &Output) -> String {
    format!(
        "{}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// The keys of the calls a replay reported `verdict` for.
fn keys_reported(out: &Output, verdict: &str) -> BTreeSet<String> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.starts_with("call ") && l.ends_with(&format!(": {verdict}")))
        .filter_map(|l| {
            l.strip_suffix(&format!(": {verdict}"))?
                .rsplit(' ')
                .next()
                .map(str::to_string)
        })
        .collect()
}

#[tokio::test]
async fn a_busy_run_replays_the_same_and_a_changed_version_differs_on_exactly_its_keys()
-> anyhow::Result<()> {
    let plane = Plane::start_up(&["--record", "configmap-summary"]).await?;
    let client = plane.client().await?;
    install_plugin_with(&plane.plugin_dir(), "configmap-summary", unhurried)?;
    let api = summaries(&client);
    eventually(Duration::from_secs(30), "the ConfigSummary CRD", || async {
        api.list(&Default::default()).await.ok()
    })
    .await?;

    // Twelve summaries, each with a ConfigMap of i % 6 keys, then more keys
    // for some: s0..s2 end at 1..3 keys, s3 goes from 3 to 4.
    let n = 12;
    let mut expected = std::collections::BTreeMap::new();
    for i in 0..n {
        create_summary(&api, &format!("s{i}"), json!({})).await?;
        create_configmap(&client, &format!("cm{i}"), &format!("s{i}"), i % 6).await?;
        expected.insert(format!("default/s{i}"), (i % 6) as i64);
    }
    let cms = Api::<ConfigMap>::namespaced(client.clone(), "default");
    for i in 0..4 {
        cms.patch(
            &format!("cm{i}"),
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"extra": "1"}})),
        )
        .await?;
        *expected.get_mut(&format!("default/s{i}")).unwrap() += 1;
    }
    for (key, keys) in &expected {
        let name = key.trim_start_matches("default/");
        eventually(
            Duration::from_secs(30),
            &format!("{key} keys={keys}"),
            || async {
                let o = api.get(name).await.ok()?;
                (status_keys(&o) == Some(*keys)).then_some(())
            },
        )
        .await?;
    }
    // The status is written before the record is (the record holds the
    // status write's response): wait until the file shows every final count.
    let file = plane.data_dir().join("records/configmap-summary.jsonl");
    eventually(
        Duration::from_secs(60),
        "the final counts in the record",
        || async { (last_keys(&calls(&file)) == expected).then_some(()) },
    )
    .await?;

    // Replay a snapshot (beside the live file, so replay finds the data
    // directory's plugins and cache): late calls cannot change the counts.
    let snapshot = plane.data_dir().join("records/snapshot.jsonl");
    std::fs::copy(&file, &snapshot)?;
    let file = snapshot;
    let recorded = calls(&file);
    assert!(recorded.len() >= n, "{} calls", recorded.len());
    let first = std::fs::read_to_string(&file)?;
    let header: Value = serde_json::from_str(first.lines().next().unwrap())?;
    assert_eq!(header["format"], "wasmlet-record");
    assert_eq!(header["version"], 2);
    assert!(
        header["manifest"]
            .as_str()
            .unwrap()
            .contains("ConfigSummary")
    );
    for c in &recorded {
        assert_eq!(c["call"], "reconcile");
        let ops: Vec<&str> = c["imports"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|e| e["op"].as_str())
            .collect();
        assert!(ops.contains(&"client.list"), "{ops:?}");
    }
    assert!(
        recorded
            .iter()
            .any(|c| c["host-writes"][0]["op"] == "patch-status"
                && c["host-writes"][0]["result"]["ok"].is_string()),
        "no recorded status write"
    );

    // The recorded version on its own records: every call the same.
    let path = file.display().to_string();
    let out = replay(&[&path])?;
    assert!(out.status.success(), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains(&format!(
            "replayed {} calls: {} same, 0 different, 0 diverged",
            recorded.len(),
            recorded.len()
        )),
        "{}",
        text(&out)
    );

    // The changed version: exactly the summaries that counted more than 3 keys differ.
    let variant = built_plugins().join("summary-variant.wasm");
    let out = replay(&[&path, "--plugin", &variant.display().to_string()])?;
    assert!(!out.status.success(), "{}", text(&out));
    let want: BTreeSet<String> = expected
        .iter()
        .filter(|(_, k)| **k > 3)
        .map(|(key, _)| key.clone())
        .collect();
    assert_eq!(want.len(), 5, "s3, s4, s5, s10, s11");
    assert_eq!(keys_reported(&out, "different"), want, "{}", text(&out));
    assert!(!stdout_has(&out, ": diverged"), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("/outcome/status/keys: 5 -> 3"),
        "{}",
        text(&out)
    );

    // --key and --call pick calls.
    let out = replay(&[&path, "--key", "default/s4"])?;
    assert!(out.status.success(), "{}", text(&out));
    let lines: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.starts_with("call "))
        .map(str::to_string)
        .collect();
    assert!(
        !lines.is_empty() && lines.iter().all(|l| l.contains(" default/s4: ")),
        "{lines:?}"
    );
    let out = replay(&[&path, "--call", "2"])?;
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("replayed 1 calls"),
        "{}",
        text(&out)
    );
    Ok(())
}

fn stdout_has(o: &Output, s: &str) -> bool {
    String::from_utf8_lossy(&o.stdout).contains(s)
}

/// A malformed record file is refused naming its line and field.
#[tokio::test]
async fn a_malformed_record_file_is_refused_naming_line_and_field() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let p: PathBuf = dir.path().join("x.jsonl");
    std::fs::write(
        &p,
        "{\"format\":\"wasmlet-record\",\"version\":1,\"plugin\":\"p\",\"digest\":\"d\",\"manifest\":\"\",\"redacted\":true}\n{\"seq\":1}\n",
    )?;
    let out = replay(&[&p.display().to_string()])?;
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("{}:2: .: missing field `at`", p.display())),
        "{err}"
    );
    Ok(())
}

#[tokio::test]
async fn a_record_after_reading_a_secret_holds_no_secret_bytes() -> anyhow::Result<()> {
    let plane = Plane::start_up(&[]).await?;
    let client = plane.client().await?;
    // The changed guest reads the Secret a summary names; its manifest turns
    // recording on (no --record flag) and ships the example's CRD.
    install_plugin_with(&plane.plugin_dir(), "summary-variant", |toml| {
        let toml = unhurried(toml);
        format!("crds = [\"configsummary.crd.yaml\"]\n{toml}\n[record]\nmax-file-mib = 1\n")
    })?;
    let api = summaries(&client);
    eventually(Duration::from_secs(30), "the ConfigSummary CRD", || async {
        api.list(&Default::default()).await.ok()
    })
    .await?;
    let password = "hunter2-very-secret-bytes";
    let token = "tok-0123456789-secret";
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "creds"},
        "stringData": {"password": password, "token": token},
    }))?;
    Api::<Secret>::namespaced(client.clone(), "default")
        .create(&PostParams::default(), &secret)
        .await?;
    create_summary(&api, "sec", json!({})).await?;
    api.patch(
        "sec",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"annotations": {
            "wasmlet.dev/secret": "creds",
            // The guest's requeue then depends on the WASI clocks and random too.
            "wasmlet.dev/stamp": "",
        }}})),
    )
    .await?;
    // (The example CRD prunes `status.secretKeys`: the record shows it.)
    let file = plane.data_dir().join("records/summary-variant.jsonl");
    let read_secret = |c: &Value| {
        c["imports"].as_array().is_some_and(|is| {
            is.iter()
                .any(|e| e["op"] == "client.get" && e["args"]["target"]["kind"] == "Secret")
        }) && c.pointer("/outcome/status/secretKeys") == Some(&json!(2))
    };
    eventually(
        Duration::from_secs(30),
        "a recorded Secret read",
        || async { calls(&file).iter().any(read_secret).then_some(()) },
    )
    .await?;
    let bytes = std::fs::read(&file)?;
    let raw = String::from_utf8_lossy(&bytes);
    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD;
    for secret in [password, token] {
        for form in [secret.to_string(), b64.encode(secret)] {
            assert!(!raw.contains(&form), "{form} is in the record:\n{raw}");
        }
        // Nor any long piece of its base64 (a value cut differently).
        assert!(!raw.contains(&b64.encode(secret)[..12]), "{raw}");
    }
    assert!(raw.contains("PHJlZGFjdGVkPg=="), "{raw}");
    // The clock reads are recorded ...
    let stamped = calls(&file).into_iter().rfind(|c| read_secret(c)).unwrap();
    let ops: Vec<String> = stamped["imports"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["op"].as_str().map(str::to_string))
        .collect();
    assert!(
        ops.iter().any(|o| o == "clock.wall") && ops.iter().any(|o| o == "clock.monotonic"),
        "{ops:?}"
    );
    assert!(stamped["outcome"]["requeue-after-ms"].as_u64().unwrap() >= 600_000);
    // ... and answered in the replay: the redacted record replays the same
    // (the guest decodes the redacted Secret and counts its keys; its
    // clock- and random-derived requeue comes out as recorded).
    let out = replay(&[&file.display().to_string()])?;
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        stdout_has(&out, " 0 different, 0 diverged"),
        "{}",
        text(&out)
    );
    Ok(())
}

/// A pod bound to the workload node (tolerating its taints).
fn node_pod(name: &str, image: &str, args: &[&str], restart: &str) -> anyhow::Result<Pod> {
    Ok(serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {
            "nodeName": NODE,
            "restartPolicy": restart,
            "terminationGracePeriodSeconds": 1,
            "tolerations": [{"key": "kubernetes.io/arch", "operator": "Exists"}],
            "containers": [{"name": "main", "image": image, "args": args}],
        },
    }))?)
}

fn pod_phase(p: &Pod) -> String {
    p.status
        .as_ref()
        .and_then(|s| s.phase.clone())
        .unwrap_or_default()
}

/// The recorded outcome kinds of `key`'s `status` calls, by phase.
fn recorded_phases(calls: &[Value], key: &str) -> BTreeSet<String> {
    calls
        .iter()
        .filter(|c| c["key"] == key && c["call"] == "status")
        .filter_map(|c| {
            c.pointer("/outcome/status/phase")?
                .as_str()
                .map(str::to_string)
        })
        .collect()
}

/// The wasi-runner provider's busy run, recorded (`--record wasi-runner`):
/// pods whose WASI workloads run to completion (components and preview 1
/// modules; one given a Secret as environment and volume), one that exits 3,
/// and one deleted while it runs. The record holds no secret bytes; every
/// call of every pod's life replays the same with no workload run; a record
/// whose workload exit is changed replays as different, and only that call.
#[tokio::test]
async fn a_busy_node_replays_the_same_and_a_changed_exit_differs() -> anyhow::Result<()> {
    let (plane, client) =
        workload_plane::start_with("wasi-runner", &["--record", "wasi-runner"]).await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let (hello, hello_p1) = (workload("hello.wasm"), workload("hello.p1.wasm"));
    let exitcode = workload("exitcode.p1.wasm");
    let finishing = [
        ("hello-a", &hello, "a", "Succeeded"),
        ("hello-b", &hello, "b", "Succeeded"),
        ("hello-c", &hello_p1, "c", "Succeeded"),
        ("hello-d", &hello_p1, "d", "Succeeded"),
        ("fails", &exitcode, "3", "Failed"),
    ];
    for (name, image, arg, _) in &finishing {
        pods.create(
            &PostParams::default(),
            &node_pod(name, image, &[arg], "Never")?,
        )
        .await?;
    }
    // A pod given a Secret as an environment variable and as a volume: the
    // provider reads it and hands the values to the host.
    let token = "tok-provider-0123456789";
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "creds"}, "stringData": {"token": token},
    }))?;
    Api::<Secret>::namespaced(client.clone(), "default")
        .create(&PostParams::default(), &secret)
        .await?;
    let mut with_secret = node_pod("with-secret", &hello, &["s"], "Never")?;
    let mut spec = serde_json::to_value(&with_secret.spec)?;
    spec["containers"][0]["env"] = json!([{"name": "GREETING",
        "valueFrom": {"secretKeyRef": {"name": "creds", "key": "token"}}}]);
    spec["containers"][0]["volumeMounts"] = json!([{"name": "creds", "mountPath": "/creds"}]);
    spec["volumes"] = json!([{"name": "creds", "secret": {"secretName": "creds"}}]);
    with_secret.spec = Some(serde_json::from_value(spec)?);
    pods.create(&PostParams::default(), &with_secret).await?;
    let sleeper = workload("sleeper.wasm");
    pods.create(
        &PostParams::default(),
        &node_pod("sleeper", &sleeper, &[], "Always")?,
    )
    .await?;
    let finishing: Vec<_> = finishing
        .into_iter()
        .chain([("with-secret", &hello, "s", "Succeeded")])
        .collect();
    for (name, _, _, want) in finishing
        .iter()
        .chain([&("sleeper", &sleeper, "", "Running")])
    {
        let seen = eventually(
            Duration::from_secs(60),
            &format!("{name} {want}"),
            || async {
                let p = pods.get_opt(name).await.ok()??;
                (pod_phase(&p) == *want).then_some(())
            },
        )
        .await;
        if let Err(e) = seen {
            anyhow::bail!("{e}; log:\n{}", plane.log());
        }
    }
    // The sleeper's teardown: killed, released, the pod removed.
    pods.delete("sleeper", &DeleteParams::default()).await?;
    eventually(Duration::from_secs(30), "the sleeper gone", || async {
        pods.get_opt("sleeper").await.ok()?.is_none().then_some(())
    })
    .await?;

    // The host patches a status after its record is made; the writer thread
    // may lag: wait until the file shows each pod's final phase, and the
    // sleeper's last handler (waiting on nothing: the pod is removed).
    let file = plane.data_dir().join("records/wasi-runner.jsonl");
    eventually(
        Duration::from_secs(60),
        "every pod's life in the record",
        || async {
            let cs = calls(&file);
            let phases_in = finishing.iter().all(|(name, _, _, want)| {
                recorded_phases(&cs, &format!("default/{name}")).contains(*want)
            });
            let torn_down = cs.iter().any(|c| {
                c["key"] == "default/sleeper"
                    && c["outcome"]["kind"] == "wait"
                    && c["outcome"]["on"] == json!([])
                    && c["host-writes"][0]["op"] == "delete"
            });
            (phases_in && torn_down).then_some(())
        },
    )
    .await?;
    let snapshot = plane.data_dir().join("records/provider-snapshot.jsonl");
    std::fs::copy(&file, &snapshot)?;
    let recorded = calls(&snapshot);
    let header: Value =
        serde_json::from_str(std::fs::read_to_string(&snapshot)?.lines().next().unwrap())?;
    assert_eq!(
        (header["version"].as_u64(), header["plugin"].as_str()),
        (Some(2), Some("wasi-runner"))
    );
    // Every export, and every workloads request a pod's life makes, is in the record.
    let kinds: BTreeSet<&str> = recorded.iter().filter_map(|c| c["call"].as_str()).collect();
    assert_eq!(kinds, BTreeSet::from(["handle", "init", "status"]));
    let ops: BTreeSet<&str> = recorded
        .iter()
        .flat_map(|c| c["imports"].as_array().into_iter().flatten())
        .filter_map(|e| e["op"].as_str())
        .collect();
    for op in [
        "workloads.fetch-module",
        "workloads.spawn",
        "workloads.status",
        "workloads.kill",
        "workloads.release-pod",
        "clock.wall",
    ] {
        assert!(ops.contains(op), "no {op} in {ops:?}");
    }
    assert!(
        recorded
            .iter()
            .any(|c| c["call"] == "handle" && c["event"].get("workload-exited").is_some()),
        "no handle woken by a workload exit"
    );
    // The host's writes for the calls: each status patched, the torn-down pod removed.
    let host_writes = |key: &str, op: &str| {
        recorded
            .iter()
            .filter(|c| c["key"] == key)
            .flat_map(|c| c["host-writes"].as_array().into_iter().flatten())
            .filter(|w| w["op"] == op)
            .count()
    };
    for c in recorded.iter().filter(|c| c["call"] == "status") {
        let w = &c["host-writes"][0];
        assert!(
            w["op"] == "patch-status" && w["result"]["ok"].is_string(),
            "{c}"
        );
        assert_eq!(
            w["body"]["status"]["phase"],
            c["outcome"]["status"]["phase"]
        );
    }
    assert_eq!(host_writes("default/sleeper", "delete"), 1);
    assert_eq!(host_writes("default/hello-a", "delete"), 0);
    let pods_recorded: BTreeSet<&str> = recorded.iter().filter_map(|c| c["key"].as_str()).collect();
    assert_eq!(pods_recorded.len(), 7, "{pods_recorded:?}");

    // No secret bytes: not in the Secret read, nor in the workload's
    // environment or volume files (as text, base64 or bytes).
    let raw = std::fs::read_to_string(&snapshot)?;
    use base64::Engine;
    let bytes = token
        .bytes()
        .map(|b| b.to_string())
        .collect::<Vec<_>>()
        .join(",");
    for form in [
        token.to_string(),
        base64::engine::general_purpose::STANDARD.encode(token),
        bytes,
    ] {
        assert!(!raw.contains(&form), "{form} is in the record");
    }
    let imports_of = |op: &'static str| {
        recorded
            .iter()
            .filter(|c| c["key"] == "default/with-secret")
            .flat_map(|c| c["imports"].as_array().into_iter().flatten())
            .filter(move |e| e["op"] == op)
            .cloned()
            .collect::<Vec<Value>>()
    };
    let spawned = imports_of("workloads.spawn");
    assert!(
        spawned.iter().any(|e| e["args"]["spec"]["env"]
            .as_array()
            .is_some_and(|env| env.contains(&json!(["GREETING", "<redacted>"])))),
        "{spawned:?}"
    );
    let volumes = imports_of("workloads.prepare-volume");
    assert!(
        volumes
            .iter()
            .any(|e| e.pointer("/args/req/source/Files/0/contents") == Some(&json!("<redacted>"))),
        "{volumes:?}"
    );

    // The recorded provider on its own records: every call the same.
    let path = snapshot.display().to_string();
    let started = std::time::Instant::now();
    let out = replay(&[&path])?;
    let took = started.elapsed();
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        stdout_has(
            &out,
            &format!(
                "replayed {} calls: {} same, 0 different, 0 diverged",
                recorded.len(),
                recorded.len()
            )
        ),
        "{}",
        text(&out)
    );
    eprintln!("replayed {} provider calls in {took:?}", recorded.len());
    // The same build named with --plugin (its manifest beside it): the same.
    let built = built_plugins().join("wasi-runner.wasm");
    let out = replay(&[&path, "--plugin", &built.display().to_string()])?;
    assert!(
        out.status.success() && stdout_has(&out, " 0 different, 0 diverged"),
        "{}",
        text(&out)
    );
    // One pod's life alone.
    let out = replay(&[&path, "--key", "default/fails"])?;
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        stdout_has(&out, " handle Running default/fails: same"),
        "{}",
        text(&out)
    );

    // The failing workload's exit, changed to 0 where the provider first
    // learns it: that call (and only it) decides differently.
    let lines: Vec<String> = std::fs::read_to_string(&snapshot)?
        .lines()
        .map(str::to_string)
        .collect();
    let exited = |v: &Value| {
        v["imports"].as_array().into_iter().flatten().any(|e| {
            e["op"] == "workloads.status" && e.pointer("/result/ok/state/Exited") == Some(&json!(3))
        })
    };
    let at = lines
        .iter()
        .position(|l| {
            serde_json::from_str::<Value>(l)
                .is_ok_and(|v| v["key"] == "default/fails" && v["call"] == "handle" && exited(&v))
        })
        .expect("a handle call that read the exit");
    let mut changed: Value = serde_json::from_str(&lines[at])?;
    for e in changed["imports"].as_array_mut().unwrap() {
        if e.pointer("/result/ok/state/Exited") == Some(&json!(3)) {
            e["result"]["ok"]["state"]["Exited"] = json!(0);
        }
    }
    let mut tampered = lines.clone();
    tampered[at] = changed.to_string();
    let bad = plane.data_dir().join("records/provider-changed.jsonl");
    std::fs::write(&bad, tampered.join("\n") + "\n")?;
    let out = replay(&[&bad.display().to_string(), "--key", "default/fails"])?;
    assert!(!out.status.success(), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let verdicts: Vec<&str> = stdout.lines().filter(|l| l.starts_with("call ")).collect();
    let different: Vec<&&str> = verdicts.iter().filter(|l| !l.ends_with(": same")).collect();
    assert_eq!(different.len(), 1, "{}", text(&out));
    assert!(
        different[0].contains(&format!(":{}) handle ", at + 1))
            && different[0].ends_with(": different"),
        "{}",
        text(&out)
    );
    assert!(
        stdout.contains("/outcome/to: \"Error\" -> \"Completed\""),
        "{}",
        text(&out)
    );

    // A record that lost a pod's spawn answer: the call diverges, naming the request.
    let at = lines
        .iter()
        .position(|l| {
            serde_json::from_str::<Value>(l).is_ok_and(|v| {
                v["key"] == "default/hello-a"
                    && v["imports"]
                        .as_array()
                        .is_some_and(|is| is.iter().any(|e| e["op"] == "workloads.spawn"))
            })
        })
        .expect("a call that spawned hello-a");
    let mut cut: Value = serde_json::from_str(&lines[at])?;
    cut["imports"]
        .as_array_mut()
        .unwrap()
        .retain(|e| e["op"] != "workloads.spawn");
    let mut tampered = lines.clone();
    tampered[at] = cut.to_string();
    std::fs::write(&bad, tampered.join("\n") + "\n")?;
    let out = replay(&[&bad.display().to_string(), "--key", "default/hello-a"])?;
    assert!(!out.status.success(), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let not_same: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("call ") && !l.ends_with(": same"))
        .collect();
    assert_eq!(not_same.len(), 1, "{}", text(&out));
    assert!(
        not_same[0].contains(&format!(":{}) handle ", at + 1))
            && not_same[0].contains(": diverged: the guest asked workloads.spawn {"),
        "{}",
        text(&out)
    );
    Ok(())
}
