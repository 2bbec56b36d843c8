//! The node agent's workloads (`wasmlet::internals::workloads`) with real WASI programs:
//! the crates under `guests/workloads/`, built by `scripts/build-workloads` into
//! `target/workloads/` (NAME.wasm: wasip2 command components, NAME.p1.wasm: wasip1
//! core modules). The OCI test runs Debian's `docker-registry` when it is installed.
#![allow(clippy::unwrap_used)] // a bench or test: a failure should stop it loudly

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use wasmlet::internals::workloads::*;
use wasmlet_e2e::eventually;
use wasmlet_e2e::registry::{self, Registry};

fn workloads_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/workloads");
    assert!(
        dir.join("hello.wasm").is_file() && dir.join("hello.p1.wasm").is_file(),
        "{} has no test workloads: run scripts/build-workloads first",
        dir.display()
    );
    dir
}

fn workload(name: &str) -> PathBuf {
    workloads_dir().join(name)
}

/// One engine for all tests (its pooling allocator reserves a lot of address space);
/// its compile cache persists between runs.
fn engine() -> WorkloadEngine {
    static ENGINE: OnceLock<WorkloadEngine> = OnceLock::new();
    ENGINE
        .get_or_init(|| {
            WorkloadEngine::new(
                &Path::new(env!("CARGO_TARGET_TMPDIR")).join("workloads-engine-cache"),
            )
            .unwrap()
        })
        .clone()
}

fn manager(data: &Path) -> WorkloadManager {
    let mut config = WorkloadConfig::new(data);
    config.file_image_dirs = vec![workloads_dir()];
    WorkloadManager::new(config, engine()).unwrap()
}

/// A manager that reads `file://` images from `dir` only.
fn manager_reading(data: &Path, dir: &Path) -> WorkloadManager {
    let mut config = WorkloadConfig::new(data);
    config.file_image_dirs = vec![dir.to_path_buf()];
    WorkloadManager::new(config, engine()).unwrap()
}

fn file_url(p: &Path) -> String {
    format!("file://{}", p.display())
}

fn req(image: &str, policy: PullPolicy) -> FetchRequest {
    FetchRequest {
        image: image.into(),
        pull_policy: policy,
        namespace: "default".into(),
        pull_secrets: vec![],
    }
}

async fn fetch(m: &WorkloadManager, name: &str) -> ModuleRef {
    m.fetch_wait(&req(&file_url(&workload(name)), PullPolicy::IfNotPresent))
        .await
        .unwrap()
}

fn target(uid: &str, container: &str, attempt: u32) -> LogTarget {
    LogTarget {
        pod_namespace: "default".into(),
        pod_name: "p".into(),
        pod_uid: uid.into(),
        container: container.into(),
        attempt,
    }
}

fn spec(module: &str, uid: &str, container: &str, args: &[&str]) -> SpawnSpec {
    SpawnSpec {
        module: module.into(),
        args: args.iter().map(|s| s.to_string()).collect(),
        env: vec![],
        mounts: vec![],
        memory_limit: None,
        logs: target(uid, container, 0),
    }
}

async fn run(m: &WorkloadManager, s: SpawnSpec) -> (WorkloadStatus, String) {
    let (uid, container, attempt) = (
        s.logs.pod_uid.clone(),
        s.logs.container.clone(),
        s.logs.attempt,
    );
    let h = m.spawn(s).unwrap();
    let status = tokio::time::timeout(Duration::from_secs(60), m.wait(h))
        .await
        .expect("workload did not finish")
        .unwrap();
    (status, log_text(m, &uid, &container, attempt))
}

/// The text of an attempt's log (CRI records checked and stripped), one line per record.
fn log_text(m: &WorkloadManager, uid: &str, container: &str, attempt: u32) -> String {
    let mut out = String::new();
    for f in m.log_files(uid, container, attempt) {
        let bytes = std::fs::read(&f).unwrap();
        for line in bytes.split_inclusive(|&b| b == b'\n') {
            let rec = parse_cri_line(line)
                .unwrap_or_else(|| panic!("not a CRI record: {:?}", String::from_utf8_lossy(line)));
            chrono::DateTime::parse_from_rfc3339(rec.timestamp).expect("RFC 3339 timestamp");
            assert!(
                rec.timestamp.ends_with('Z') && rec.timestamp.len() == 30,
                "nanosecond UTC timestamp: {}",
                rec.timestamp
            );
            assert!(rec.stream == "stdout" || rec.stream == "stderr");
            out.push_str(&format!(
                "{} {} {}\n",
                rec.stream,
                if rec.partial { "P" } else { "F" },
                String::from_utf8_lossy(rec.text)
            ));
        }
    }
    out
}

async fn wait_for_log(m: &WorkloadManager, uid: &str, container: &str, needle: &str) {
    let what = format!("{needle:?} in the log");
    eventually(Duration::from_secs(30), &what, || {
        std::future::ready(
            log_text(m, uid, container, 0)
                .contains(needle)
                .then_some(()),
        )
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hello_output_lands_in_a_cri_log() {
    let tmp = tempfile::tempdir().unwrap();
    let m = manager(tmp.path());
    let module = fetch(&m, "hello.wasm").await;
    let mut exits = m.subscribe_exits();
    let mut s = spec(&module, "uid-1", "main", &["hello", "a", "b"]);
    s.env = vec![("GREETING".into(), "hi there".into())];
    let h = m.spawn(s).unwrap();
    let st = m.wait(h).await.unwrap();
    assert_eq!(st.state, RunState::Exited(0));
    assert!(st.finished_at_ms.unwrap() >= st.started_at_ms);
    // Generous: the exit is announced right after the final status `wait`
    // saw; the bound only turns a lost announcement into a failure.
    assert_eq!(
        tokio::time::timeout(Duration::from_secs(60), exits.recv())
            .await
            .expect("the exit was announced")
            .unwrap(),
        h
    );

    let path = m.log_path("default", "p", "uid-1", "main", 0);
    assert_eq!(path, tmp.path().join("pods/uid-1/logs/main/0.log"));
    assert_eq!(m.workload_log_path(h).unwrap(), path);
    let raw = std::fs::read_to_string(&path).unwrap();
    let first = raw.lines().next().unwrap();
    let (ts, rest) = first.split_at(30);
    assert_eq!(rest, " stdout F hello from hello", "{first}");
    assert!(
        chrono::NaiveDateTime::parse_from_str(ts, "%Y-%m-%dT%H:%M:%S%.9fZ").is_ok()
            && ts.as_bytes()[19] == b'.',
        "{first}"
    );
    let text = log_text(&m, "uid-1", "main", 0);
    for want in [
        "stdout F hello from hello\n",
        "stdout F args: a b\n",
        "stdout F GREETING=hi there\n",
        "stdout F env count: 1\n", // nothing inherited from the host
        "stderr F a line on stderr\n",
        "stdout F no newline at the end\n", // flushed as a full line at exit
    ] {
        assert!(text.contains(want), "{want:?} missing from:\n{text}");
    }
    let tail = String::from_utf8(m.read_logs(h, 21).unwrap()).unwrap();
    assert_eq!(tail, "no newline at the end");

    // argv defaults to the container name.
    let (st, text) = run(&m, spec(&module, "uid-1", "second", &[])).await;
    assert_eq!(st.state, RunState::Exited(0));
    assert!(text.contains("hello from second"), "{text}");
    assert_eq!(m.log_attempts("uid-1", "main"), vec![0]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exit_codes() {
    let tmp = tempfile::tempdir().unwrap();
    let m = manager(tmp.path());
    let module = fetch(&m, "exitcode.wasm").await;
    // WASI 0.2's `exit` carries only success/failure and Rust's std uses it (not the
    // newer `exit-with-code`), so `std::process::exit(3)` in a component arrives as 1.
    for (arg, code) in [("0", 0), ("1", 1), ("3", 1), ("err", 1)] {
        let (st, text) = run(
            &m,
            spec(
                &module,
                "uid-x",
                &format!("c{code}-{arg}"),
                &["exitcode", arg],
            ),
        )
        .await;
        assert_eq!(
            st.state,
            RunState::Exited(code),
            "exitcode {arg}; log:\n{text}"
        );
        assert!(text.contains(&format!("exiting with {arg}")));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preview1_core_module() {
    let tmp = tempfile::tempdir().unwrap();
    let m = manager(tmp.path());
    let module = fetch(&m, "hello.p1.wasm").await;
    let (st, text) = run(&m, spec(&module, "uid-p1", "main", &["hello", "x"])).await;
    assert_eq!(st.state, RunState::Exited(0), "{text}");
    assert!(
        text.contains("stdout F hello from hello\n")
            && text.contains("stderr F a line on stderr\n"),
        "{text}"
    );
    let (st, _) = run(&m, spec(&module, "uid-p1", "seven", &["hello", "exit=7"])).await;
    assert_eq!(st.state, RunState::Exited(7));
    let module = fetch(&m, "exitcode.p1.wasm").await;
    let (st, _) = run(&m, spec(&module, "uid-p1", "three", &["exitcode", "3"])).await;
    assert_eq!(st.state, RunState::Exited(3));
}

/// The grace period on paused time: how long the workload runs on is read off
/// tokio's clock, which only moves when the runtime has nothing else to do.
#[tokio::test]
async fn kill_respects_grace_then_interrupts() {
    let tmp = tempfile::tempdir().unwrap();
    let m = manager(tmp.path());
    let module = fetch(&m, "sleeper.wasm").await;

    // Sleeping in the host: killed when the grace period ends.
    let h = m
        .spawn(spec(&module, "uid-k", "sleeper", &["sleeper"]))
        .unwrap();
    wait_for_log(&m, "uid-k", "sleeper", "tick 2").await;
    tokio::time::pause();
    let t = tokio::time::Instant::now();
    // Returns at once (it is not async): the workload is still running.
    m.kill(h, 400).unwrap();
    assert_eq!(
        m.status(h).unwrap().state,
        RunState::Running,
        "still running during its grace period"
    );
    tokio::time::sleep(Duration::from_millis(390)).await;
    assert_eq!(
        m.status(h).unwrap().state,
        RunState::Running,
        "still running 390 ms into a 400 ms grace period"
    );
    let st = tokio::time::timeout(Duration::from_secs(5), m.wait(h))
        .await
        .expect("not killed")
        .unwrap();
    let took = t.elapsed();
    assert_eq!(st.state, RunState::Exited(KILLED_EXIT_CODE));
    assert!(
        took >= Duration::from_millis(400) && took < Duration::from_secs(1),
        "killed after {took:?} of a 400 ms grace period"
    );
    m.kill(h, 0).unwrap(); // finished: a no-op
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_interrupts_a_workload_burning_cpu() {
    let tmp = tempfile::tempdir().unwrap();
    let m = manager(tmp.path());
    let module = fetch(&m, "sleeper.wasm").await;

    // Burning CPU without host calls: the epoch check stops it (bounded wait,
    // no time measured).
    let h = m
        .spawn(spec(&module, "uid-k", "spinner", &["sleeper", "spin"]))
        .unwrap();
    wait_for_log(&m, "uid-k", "spinner", "spinning").await;
    assert_eq!(m.status(h).unwrap().state, RunState::Running);
    m.kill(h, 0).unwrap();
    // Generous: a loaded machine may take a while to get to the epoch check.
    let st = tokio::time::timeout(Duration::from_secs(60), m.wait(h))
        .await
        .expect("spinner not killed")
        .unwrap();
    assert_eq!(st.state, RunState::Exited(KILLED_EXIT_CODE));

    assert_eq!(m.kill(999_999, 0), Err(WorkloadError::UnknownHandle));
    assert_eq!(m.status(999_999), Err(WorkloadError::UnknownHandle));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spinning_workload_does_not_starve_others() {
    let tmp = tempfile::tempdir().unwrap();
    let m = manager(tmp.path());
    let sleeper = fetch(&m, "sleeper.wasm").await;
    let hello = fetch(&m, "hello.wasm").await;
    // More spinners than worker threads: they must yield to the runtime.
    let spinners: Vec<_> = (0..3)
        .map(|i| {
            m.spawn(spec(&sleeper, "uid-s", &format!("spin{i}"), &["s", "spin"]))
                .unwrap()
        })
        .collect();
    for i in 0..3 {
        wait_for_log(&m, "uid-s", &format!("spin{i}"), "spinning").await;
    }
    // `run` gives hello a bounded time (no duration measured): it finishes
    // while every spinner still runs.
    let (st, _) = run(&m, spec(&hello, "uid-s", "hello", &["hello"])).await;
    assert_eq!(st.state, RunState::Exited(0));
    for &h in &spinners {
        assert_eq!(
            m.status(h).unwrap().state,
            RunState::Running,
            "a spinner stopped"
        );
    }
    m.release_pod("uid-s").await.unwrap();
    for h in spinners {
        assert_eq!(m.status(h), Err(WorkloadError::UnknownHandle));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn volumes_are_the_only_files_and_there_are_no_sockets() {
    let tmp = tempfile::tempdir().unwrap();
    let allowed = tmp.path().join("allowed");
    std::fs::create_dir_all(allowed.join("shared")).unwrap();
    std::fs::write(allowed.join("shared/host.txt"), "from the host").unwrap();
    std::fs::write(tmp.path().join("outside.txt"), "outside").unwrap();
    let mut config = WorkloadConfig::new(tmp.path().join("data"));
    config.host_path_allow = vec![allowed.clone()];
    config.file_image_dirs = vec![workloads_dir()];
    let m = WorkloadManager::new(config, engine()).unwrap();
    let module = fetch(&m, "reader.wasm").await;
    let uid = "uid-v";

    let files = |files: Vec<(&str, &str, u32)>| VolumeRequest {
        pod_uid: uid.into(),
        name: "config".into(),
        source: VolumeSource::Files(
            files
                .into_iter()
                .map(|(p, c, mode)| VolumeFile {
                    path: p.into(),
                    contents: c.as_bytes().to_vec(),
                    mode,
                })
                .collect(),
        ),
    };
    let config = m
        .prepare_volume(&files(vec![
            ("a.txt", "alpha", 0o640),
            ("sub/b.txt", "beta", 0o400),
        ]))
        .unwrap();
    let dir = tmp.path().join("data/pods/uid-v/volumes/config");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(dir.join("a.txt"))
            .unwrap()
            .permissions()
            .mode()
            & 0o777,
        0o640
    );
    assert_eq!(
        std::fs::metadata(dir.join("sub/b.txt"))
            .unwrap()
            .permissions()
            .mode()
            & 0o777,
        0o400
    );
    // Same name again: same id, files rewritten, stale ones removed.
    assert_eq!(
        m.prepare_volume(&files(vec![
            ("a.txt", "alpha2", 0o644),
            ("sub/b.txt", "beta", 0o400)
        ]))
        .unwrap(),
        config
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("a.txt")).unwrap(),
        "alpha2"
    );
    for bad in ["../x", "/etc/x", "a/../../x", ""] {
        match m.prepare_volume(&files(vec![(bad, "x", 0o644)])) {
            Err(WorkloadError::Invalid(_)) => {}
            other => panic!("{bad:?}: {other:?}"),
        }
    }
    assert!(!tmp.path().join("data/pods/uid-v/x").exists());

    let scratch = m
        .prepare_volume(&VolumeRequest {
            pod_uid: uid.into(),
            name: "scratch".into(),
            source: VolumeSource::EmptyDir(EmptyDir::default()),
        })
        .unwrap();
    let scratch_dir = tmp.path().join("data/pods/uid-v/volumes/scratch");
    std::os::unix::fs::symlink("/etc/passwd", scratch_dir.join("passwd")).unwrap();
    std::os::unix::fs::symlink("/etc", scratch_dir.join("etc")).unwrap();
    std::os::unix::fs::symlink(tmp.path().join("outside.txt"), scratch_dir.join("outside"))
        .unwrap();
    std::os::unix::fs::symlink("../config", scratch_dir.join("sibling")).unwrap();

    let host_path = |p: &Path, create: bool| VolumeRequest {
        pod_uid: uid.into(),
        name: format!("host{}", p.display().to_string().len()),
        source: VolumeSource::HostPath(HostPath {
            path: p.display().to_string(),
            create,
        }),
    };
    let shared = m
        .prepare_volume(&host_path(&allowed.join("shared"), false))
        .unwrap();
    match m.prepare_volume(&host_path(&tmp.path().join("data"), false)) {
        Err(WorkloadError::Invalid(msg)) => {
            assert!(
                msg.contains(&tmp.path().join("data").display().to_string()),
                "{msg}"
            )
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        m.prepare_volume(&host_path(Path::new("/etc"), false)),
        Err(WorkloadError::Invalid(_))
    ));
    m.prepare_volume(&host_path(&allowed.join("made/here"), true))
        .unwrap();
    assert!(allowed.join("made/here").is_dir());

    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let mut s = spec(
        &module,
        uid,
        "reader",
        &[
            "reader",
            "read:/config/a.txt",
            "read:/config/sub/b.txt",
            "read:/host/host.txt",
            "read:/config/../scratch/x",
            "read:/config/../../outside.txt",
            "read:/config/../../../../../../etc/hostname",
            "read:/etc/passwd",
            "read:/scratch/passwd",
            "read:/scratch/etc/passwd",
            "read:/scratch/outside",
            "read:/scratch/sibling/a.txt",
            "write:/scratch/new.txt=written by the guest",
            "write:/config/new.txt=nope",
            "write:/ro/new.txt=nope",
            "write:/new.txt=nope",
            "list:/scratch",
            "read:/sub/b.txt",
            &format!("connect:127.0.0.1:{port}"),
            "resolve:localhost",
        ],
    );
    s.mounts = vec![
        Mount {
            volume: config,
            guest_path: "/config".into(),
            sub_path: None,
            read_only: false,
        },
        Mount {
            volume: scratch,
            guest_path: "/scratch".into(),
            sub_path: None,
            read_only: false,
        },
        Mount {
            volume: scratch,
            guest_path: "/ro".into(),
            sub_path: None,
            read_only: true,
        },
        Mount {
            volume: shared,
            guest_path: "/host".into(),
            sub_path: None,
            read_only: true,
        },
        Mount {
            volume: config,
            guest_path: "/sub".into(),
            sub_path: Some("sub".into()),
            read_only: true,
        },
    ];
    let (st, text) = run(&m, s).await;
    assert_eq!(st.state, RunState::Exited(0), "{text}");
    let line = |prefix: &str| -> String {
        text.lines()
            .find(|l| l.starts_with(&format!("stdout F {prefix}")))
            .unwrap_or_else(|| panic!("no result for {prefix} in:\n{text}"))
            .to_string()
    };
    let ok = |prefix: &str, want: &str| {
        let l = line(prefix);
        assert!(
            l.contains(": OK ") && l.contains(want),
            "{prefix} should succeed with {want:?}: {l}"
        );
    };
    let refused = |prefix: &str| {
        let l = line(prefix);
        assert!(l.contains(": ERR "), "{prefix} must be refused: {l}");
    };
    ok("read /config/a.txt", "alpha2");
    ok("read /config/sub/b.txt", "beta");
    ok("read /host/host.txt", "from the host");
    ok("read /sub/b.txt", "beta");
    refused("read /config/../scratch/x");
    refused("read /config/../../outside.txt");
    refused("read /config/../../../../../../etc/hostname");
    refused("read /etc/passwd");
    refused("read /scratch/passwd");
    refused("read /scratch/etc/passwd");
    refused("read /scratch/outside");
    refused("read /scratch/sibling/a.txt");
    ok("write /scratch/new.txt", "written");
    refused("write /config/new.txt");
    refused("write /ro/new.txt");
    refused("write /new.txt");
    ok("list /scratch", "new.txt");
    refused(&format!("connect 127.0.0.1:{port}"));
    refused("resolve localhost");
    assert_eq!(
        std::fs::read_to_string(scratch_dir.join("new.txt")).unwrap(),
        "written by the guest"
    );
    assert!(!dir.join("new.txt").exists());

    // Mounts are checked: escapes through subPath, other pods' volumes, bad paths.
    let bad_mount = |m_: Mount| {
        let mut s = spec(&module, uid, "bad", &["reader"]);
        s.mounts = vec![m_];
        s
    };
    for (mount, what) in [
        (
            Mount {
                volume: scratch,
                guest_path: "/x".into(),
                sub_path: Some("../config".into()),
                read_only: false,
            },
            "sub ..",
        ),
        (
            Mount {
                volume: scratch,
                guest_path: "/x".into(),
                sub_path: Some("etc".into()),
                read_only: false,
            },
            "sub symlink out",
        ),
        (
            Mount {
                volume: scratch,
                guest_path: "/x".into(),
                sub_path: Some("sibling".into()),
                read_only: false,
            },
            "sub symlink sibling",
        ),
        (
            Mount {
                volume: scratch,
                guest_path: "x".into(),
                sub_path: None,
                read_only: false,
            },
            "relative guest path",
        ),
    ] {
        match m.spawn(bad_mount(mount)) {
            Err(WorkloadError::Invalid(_)) => {}
            other => panic!("{what}: {other:?}"),
        }
    }
    let mut s = bad_mount(Mount {
        volume: scratch,
        guest_path: "/x".into(),
        sub_path: None,
        read_only: false,
    });
    s.logs.pod_uid = "other-pod".into();
    assert!(matches!(m.spawn(s), Err(WorkloadError::Invalid(_))));
    let s = bad_mount(Mount {
        volume: 987_654,
        guest_path: "/x".into(),
        sub_path: None,
        read_only: false,
    });
    assert_eq!(m.spawn(s), Err(WorkloadError::UnknownHandle));

    // release_pod removes the pod's directory but never a hostPath.
    m.release_pod(uid).await.unwrap();
    assert!(!tmp.path().join("data/pods/uid-v").exists());
    assert!(allowed.join("shared/host.txt").is_file());
    let s = bad_mount(Mount {
        volume: scratch,
        guest_path: "/x".into(),
        sub_path: None,
        read_only: false,
    });
    assert_eq!(m.spawn(s), Err(WorkloadError::UnknownHandle));
    drop(listener);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_limit_is_enforced() {
    let tmp = tempfile::tempdir().unwrap();
    let m = manager(tmp.path());
    let module = fetch(&m, "reader.wasm").await;
    let mut s = spec(&module, "uid-m", "small", &["reader", "alloc:4"]);
    s.memory_limit = Some(32 << 20);
    let (st, text) = run(&m, s).await;
    assert_eq!(st.state, RunState::Exited(0), "{text}");
    assert!(text.contains("allocated 4194304 bytes"), "{text}");

    let mut s = spec(&module, "uid-m", "big", &["reader", "alloc:64"]);
    s.memory_limit = Some(32 << 20);
    let (st, text) = run(&m, s).await;
    match st.state {
        RunState::Failed(msg) => assert!(msg.starts_with("OOMKilled:"), "{msg}"),
        other => panic!("{other:?}; log:\n{text}"),
    }
    assert!(!text.contains("allocated"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_lines_are_split_and_logs_rotate() {
    let tmp = tempfile::tempdir().unwrap();
    let mut config = WorkloadConfig::new(tmp.path());
    config.log_max_bytes = 8192;
    config.file_image_dirs = vec![workloads_dir()];
    let m = WorkloadManager::new(config, engine()).unwrap();
    let module = fetch(&m, "reader.wasm").await;
    let vol = m
        .prepare_volume(&VolumeRequest {
            pod_uid: "uid-l".into(),
            name: "f".into(),
            source: VolumeSource::Files(vec![
                VolumeFile {
                    path: "long".into(),
                    contents: vec![b'x'; 40_000],
                    mode: 0o644,
                },
                VolumeFile {
                    path: "mid".into(),
                    contents: vec![b'y'; 3_000],
                    mode: 0o644,
                },
            ]),
        })
        .unwrap();
    let mut s = spec(
        &module,
        "uid-l",
        "long",
        &[
            "reader",
            "read:/f/long",
            "read:/f/mid",
            "read:/f/mid",
            "read:/f/mid",
        ],
    );
    s.mounts = vec![Mount {
        volume: vol,
        guest_path: "/f".into(),
        sub_path: None,
        read_only: true,
    }];
    let h = m.spawn(s).unwrap();
    assert_eq!(m.wait(h).await.unwrap().state, RunState::Exited(0));
    let files = m.log_files("uid-l", "long", 0);
    assert_eq!(files.len(), 2, "{files:?}");
    assert!(files[0].to_string_lossy().ends_with("0.log.1"));
    for f in &files {
        assert!(std::fs::metadata(f).unwrap().len() <= 8192 + MAX_LINE as u64 + 64);
    }
    // The current file holds the last records; the rotated one the ones before.
    let current = std::fs::read(&files[1]).unwrap();
    let recs: Vec<_> = current
        .split_inclusive(|&b| b == b'\n')
        .map(|l| parse_cri_line(l).unwrap())
        .collect();
    assert!(
        recs.iter().all(|r| !r.partial && r.text.ends_with(b"yyyy")),
        "current file: the mid reads"
    );
    assert_eq!(m.read_logs(h, 10).unwrap(), b"yyyyyyyyy\n");

    // Without rotation: a 40 000-byte line becomes P, P, F records.
    let m2 = manager(&tmp.path().join("second"));
    let module = fetch(&m2, "reader.wasm").await;
    let vol = m2
        .prepare_volume(&VolumeRequest {
            pod_uid: "uid-l".into(),
            name: "f".into(),
            source: VolumeSource::Files(vec![VolumeFile {
                path: "long".into(),
                contents: vec![b'x'; 40_000],
                mode: 0o644,
            }]),
        })
        .unwrap();
    let mut s = spec(&module, "uid-l", "long", &["reader", "read:/f/long"]);
    s.mounts = vec![Mount {
        volume: vol,
        guest_path: "/f".into(),
        sub_path: None,
        read_only: true,
    }];
    let (st, text) = run(&m2, s).await;
    assert_eq!(st.state, RunState::Exited(0));
    let kinds: Vec<&str> = text.lines().map(|l| &l[..8]).collect();
    assert_eq!(kinds, ["stdout P", "stdout P", "stdout F"]);
    let joined: String = text.lines().map(|l| &l[9..]).collect();
    assert_eq!(joined, format!("read /f/long: OK {}", "x".repeat(40_000)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_fetch_is_content_addressed_and_cached() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let m = manager_reading(&data, tmp.path());
    let copy = tmp.path().join("copy.wasm");
    let bytes = std::fs::read(workload("hello.wasm")).unwrap();
    std::fs::write(&copy, &bytes).unwrap();
    let digest = {
        use sha2::Digest;
        format!("sha256:{}", hex::encode(sha2::Sha256::digest(&bytes)))
    };
    let r = req(&file_url(&copy), PullPolicy::IfNotPresent);
    let mut done = m.subscribe_fetches();
    let id = match m.fetch_module(&r).unwrap() {
        FetchProgress::Pending(id) => id,
        other => panic!("first fetch: {other:?}"),
    };
    // Asking again while it runs joins the same fetch.
    if let FetchProgress::Pending(again) = m.fetch_module(&r).unwrap() {
        assert_eq!(again, id);
    }
    assert_eq!(
        tokio::time::timeout(Duration::from_secs(60), done.recv())
            .await
            .unwrap()
            .unwrap(),
        id
    );
    assert_eq!(m.poll_fetch(id), Some(Ok(digest.clone())));
    // Cached: ready at once, no new fetch.
    assert_eq!(
        m.fetch_module(&r).unwrap(),
        FetchProgress::Ready(digest.clone())
    );
    let stored = data.join(format!("modules/sha256/{}.wasm", &digest[7..]));
    assert_eq!(std::fs::read(&stored).unwrap(), bytes);
    assert_eq!(m.module_file(&digest), Some(stored));

    // Always: a new fetch, whose result the repeated request collects (no endless loop).
    let always = req(&file_url(&copy), PullPolicy::Always);
    assert!(matches!(
        m.fetch_module(&always).unwrap(),
        FetchProgress::Pending(_)
    ));
    assert_eq!(m.fetch_wait(&always).await.unwrap(), digest);
    assert_eq!(
        m.fetch_module(&always).unwrap(),
        FetchProgress::Ready(digest.clone())
    );

    // A restarted host: the reference index and the store survive; the source may be gone.
    std::fs::remove_file(&copy).unwrap();
    drop(m);
    let m = manager_reading(&data, tmp.path());
    assert_eq!(m.fetch_wait(&r).await.unwrap(), digest);
    assert_eq!(
        m.fetch_module(&r).unwrap(),
        FetchProgress::Ready(digest.clone())
    );
    let never = req(&file_url(&copy), PullPolicy::Never);
    assert_eq!(
        m.fetch_module(&never).unwrap(),
        FetchProgress::Ready(digest.clone())
    );
    // ... and a module-ref from before the restart spawns directly.
    let m = manager_reading(&data, tmp.path());
    let (st, text) = run(&m, spec(&digest, "uid-f", "main", &["hello"])).await;
    assert_eq!(st.state, RunState::Exited(0), "{text}");
    assert!(matches!(
        m.spawn(spec(
            &format!("sha256:{}", "0".repeat(64)),
            "uid-f",
            "x",
            &[]
        )),
        Err(WorkloadError::Invalid(_))
    ));
    assert!(matches!(
        m.spawn(spec("hello", "uid-f", "x", &[])),
        Err(WorkloadError::Invalid(_))
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_images() {
    let tmp = tempfile::tempdir().unwrap();
    let mut config = WorkloadConfig::new(tmp.path().join("data"));
    config.file_image_dirs = vec![tmp.path().to_path_buf()];
    let m = WorkloadManager::new(config, engine()).unwrap();
    let text = tmp.path().join("notes.wasm");
    std::fs::write(&text, "this is not wasm").unwrap();
    let r = m
        .fetch_wait(&req(&file_url(&text), PullPolicy::IfNotPresent))
        .await;
    assert!(matches!(r, Err(FetchError::NotWasm(_))), "{r:?}");
    // Valid wasm that is not a command: a core module without _start.
    let lib = tmp.path().join("lib.wasm");
    std::fs::write(&lib, b"\0asm\x01\0\0\0").unwrap();
    let r = m
        .fetch_wait(&req(&file_url(&lib), PullPolicy::IfNotPresent))
        .await;
    assert!(matches!(r, Err(FetchError::NotWasm(_))), "{r:?}");
    let broken = tmp.path().join("broken.wasm");
    std::fs::write(&broken, b"\0asm\x01\0\0\0\x01\xff").unwrap();
    let r = m
        .fetch_wait(&req(&file_url(&broken), PullPolicy::IfNotPresent))
        .await;
    assert!(matches!(r, Err(FetchError::NotWasm(_))), "{r:?}");
    let r = m
        .fetch_wait(&req(
            &file_url(&tmp.path().join("missing.wasm")),
            PullPolicy::IfNotPresent,
        ))
        .await;
    assert!(matches!(r, Err(FetchError::NotFound(_))), "{r:?}");
    for bad in [
        "file://relative/x.wasm",
        "file://otherhost/x.wasm",
        "http://example.com/x.wasm",
        "Not A Ref!!",
        "",
    ] {
        let r = m.fetch_module(&req(bad, PullPolicy::IfNotPresent));
        assert!(
            matches!(r, Err(FetchError::InvalidReference(_))),
            "{bad}: {r:?}"
        );
    }
    // Never, and not in the store: refused at once, without a pull.
    assert_eq!(
        m.fetch_module(&req("127.0.0.1:1/nothing/here:v1", PullPolicy::Never)),
        Err(FetchError::NeverPull)
    );
    // An unreachable registry is worth retrying.
    let r = m
        .fetch_wait(&req(
            "127.0.0.1:1/nothing/here:v1",
            PullPolicy::IfNotPresent,
        ))
        .await;
    assert!(matches!(r, Err(FetchError::Unavailable(_))), "{r:?}");
}

#[test]
fn docker_config_secrets() {
    let json = br#"{"auths": {
        "registry.example:5000": {"username": "u1", "password": "p1"},
        "https://index.docker.io/v1/": {"auth": "dTI6cDI6d2l0aDpjb2xvbnM="}
    }}"#;
    let secrets = PullSecret::from_docker_config(json).unwrap();
    assert_eq!(secrets.len(), 2);
    assert_eq!(
        (secrets[0].username.as_str(), secrets[0].password.as_str()),
        ("u1", "p1")
    );
    assert_eq!(
        (secrets[1].username.as_str(), secrets[1].password.as_str()),
        ("u2", "p2:with:colons")
    );
    assert!(
        !format!("{:?}", secrets[0]).contains("p1"),
        "Debug hides the password"
    );
    assert!(PullSecret::from_docker_config(b"nope").is_err());
}

#[test]
fn cri_lines_parse() {
    let rec = parse_cri_line(b"2026-01-01T00:00:00.000000000Z stderr P some text here\n").unwrap();
    assert_eq!(rec.timestamp, "2026-01-01T00:00:00.000000000Z");
    assert_eq!(rec.stream, "stderr");
    assert!(rec.partial);
    assert_eq!(rec.text, b"some text here");
    assert_eq!(
        parse_cri_line(b"2026-01-01T00:00:00.000000000Z stdout F ")
            .unwrap()
            .text,
        b""
    );
    assert!(parse_cri_line(b"garbage").is_none());
}

// ---- OCI: a real registry --------------------------------------------------------

fn tar_gz(name: &str, bytes: &[u8]) -> Vec<u8> {
    let mut builder = tar::Builder::new(flate2::write::GzEncoder::new(
        Vec::new(),
        flate2::Compression::fast(),
    ));
    let mut header = tar::Header::new_gnu();
    header.set_size(bytes.len() as u64);
    header.set_mode(0o644);
    header.set_cksum();
    builder.append_data(&mut header, name, bytes).unwrap();
    builder.into_inner().unwrap().finish().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pulls_from_a_real_oci_registry() {
    if !Path::new(registry::BIN).exists() {
        eprintln!(
            "SKIPPED pulls_from_a_real_oci_registry: {} is missing (apt-get install -y docker-registry)",
            registry::BIN
        );
        return;
    }
    let registry = Registry::start().await.unwrap();
    let addr = registry.addr.clone();
    let hello = std::fs::read(workload("hello.wasm")).unwrap();
    let digest = {
        use sha2::Digest;
        format!("sha256:{}", hex::encode(sha2::Sha256::digest(&hello)))
    };
    let wasm = ("application/wasm", "application/vnd.wasm.config.v0+json");
    registry
        .push("wasm/hello:v1", hello.clone(), wasm.0, wasm.1)
        .await
        .unwrap();
    let image = (
        "application/vnd.oci.image.layer.v1.tar+gzip",
        "application/vnd.oci.image.config.v1+json",
    );
    registry
        .push(
            "images/hello:v1",
            tar_gz("app/hello.wasm", &hello),
            image.0,
            image.1,
        )
        .await
        .unwrap();
    registry
        .push("wasm/text:v1", b"plain text".to_vec(), wasm.0, wasm.1)
        .await
        .unwrap();

    let tmp = tempfile::tempdir().unwrap();
    let mut config = WorkloadConfig::new(tmp.path());
    config.insecure_registries = vec![addr.clone()];
    config.file_image_dirs = vec![workloads_dir()];
    let m = WorkloadManager::new(config, engine()).unwrap();

    let artifact = req(&format!("{addr}/wasm/hello:v1"), PullPolicy::IfNotPresent);
    assert!(matches!(
        m.fetch_module(&artifact).unwrap(),
        FetchProgress::Pending(_)
    ));
    assert_eq!(m.fetch_wait(&artifact).await.unwrap(), digest);
    assert_eq!(
        m.fetch_module(&artifact).unwrap(),
        FetchProgress::Ready(digest.clone())
    );
    let (st, text) = run(&m, spec(&digest, "uid-oci", "main", &["hello"])).await;
    assert_eq!(st.state, RunState::Exited(0));
    assert!(text.contains("hello from hello"), "{text}");

    let image = req(&format!("{addr}/images/hello:v1"), PullPolicy::Always);
    assert_eq!(
        m.fetch_wait(&image).await.unwrap(),
        digest,
        "the .wasm in the image's tar layer"
    );

    let r = m
        .fetch_wait(&req(
            &format!("{addr}/wasm/hello:nope"),
            PullPolicy::IfNotPresent,
        ))
        .await;
    assert!(matches!(r, Err(FetchError::NotFound(_))), "{r:?}");
    let r = m
        .fetch_wait(&req(
            &format!("{addr}/wasm/missing:v1"),
            PullPolicy::IfNotPresent,
        ))
        .await;
    assert!(matches!(r, Err(FetchError::NotFound(_))), "{r:?}");
    let r = m
        .fetch_wait(&req(
            &format!("{addr}/wasm/text:v1"),
            PullPolicy::IfNotPresent,
        ))
        .await;
    assert!(matches!(r, Err(FetchError::NotWasm(_))), "{r:?}");
    // Never: what IfNotPresent pulled is present; an unpulled tag is not.
    assert_eq!(
        m.fetch_module(&req(&format!("{addr}/wasm/hello:v1"), PullPolicy::Never))
            .unwrap(),
        FetchProgress::Ready(digest.clone())
    );
    assert_eq!(
        m.fetch_module(&req(&format!("{addr}/wasm/other:v1"), PullPolicy::Never)),
        Err(FetchError::NeverPull)
    );
}
