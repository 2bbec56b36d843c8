//! Attacks on pod volumes (issue 8, finding 1): a workload that can write to a hostPath
//! or an emptyDir swaps a directory for a symlink so that a later mount of it reaches
//! the host. Uses the `reader` test workload (`scripts/build-workloads`).
#![allow(clippy::unwrap_used)] // a bench or test: a failure should stop it loudly

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use wasmlet::internals::workloads::*;

fn workloads_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/workloads");
    assert!(
        dir.join("reader.wasm").is_file(),
        "{} has no test workloads: run scripts/build-workloads first",
        dir.display()
    );
    dir
}

fn engine() -> WorkloadEngine {
    static ENGINE: OnceLock<WorkloadEngine> = OnceLock::new();
    ENGINE
        .get_or_init(|| {
            WorkloadEngine::new(
                &Path::new(env!("CARGO_TARGET_TMPDIR")).join("volume-escape-engine-cache"),
            )
            .unwrap()
        })
        .clone()
}

struct Host {
    _tmp: tempfile::TempDir,
    root: PathBuf,
    m: WorkloadManager,
    reader: ModuleRef,
}

/// A manager whose hostPath allow-list is `ROOT/allowed`, and `ROOT/outside/marker.txt`
/// holding a secret no workload may read.
async fn host() -> Host {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().to_path_buf();
    std::fs::create_dir_all(root.join("allowed")).unwrap();
    std::fs::create_dir_all(root.join("outside")).unwrap();
    std::fs::write(root.join("outside/marker.txt"), "host secret").unwrap();
    let mut config = WorkloadConfig::new(root.join("data"));
    config.host_path_allow = vec![root.join("allowed")];
    config.file_image_dirs = vec![workloads_dir()];
    let m = WorkloadManager::new(config, engine()).unwrap();
    let image = format!("file://{}", workloads_dir().join("reader.wasm").display());
    let reader = m
        .fetch_wait(&FetchRequest {
            image,
            pull_policy: PullPolicy::IfNotPresent,
            namespace: "default".into(),
            pull_secrets: vec![],
        })
        .await
        .unwrap();
    Host {
        _tmp: tmp,
        root,
        m,
        reader,
    }
}

fn host_path(uid: &str, name: &str, path: &Path, create: bool) -> VolumeRequest {
    VolumeRequest {
        pod_uid: uid.into(),
        name: name.into(),
        source: VolumeSource::HostPath(HostPath {
            path: path.display().to_string(),
            create,
        }),
    }
}

/// Spawns `reader` with one mount at `/data` reading the marker and writing a file;
/// `Err` when the spawn is refused, else the log once it exited.
async fn try_mount(
    h: &Host,
    uid: &str,
    container: &str,
    volume: VolumeId,
    sub_path: Option<&str>,
) -> Result<String, WorkloadError> {
    let spec = SpawnSpec {
        module: h.reader.clone(),
        args: vec![
            "reader".into(),
            "read:/data/marker.txt".into(),
            "write:/data/pwned.txt=from the pod".into(),
        ],
        env: vec![],
        mounts: vec![Mount {
            volume,
            guest_path: "/data".into(),
            sub_path: sub_path.map(Into::into),
            read_only: false,
        }],
        memory_limit: None,
        logs: LogTarget {
            pod_namespace: "default".into(),
            pod_name: "p".into(),
            pod_uid: uid.into(),
            container: container.into(),
            attempt: 0,
        },
    };
    let handle = h.m.spawn(spec)?;
    tokio::time::timeout(Duration::from_secs(60), h.m.wait(handle))
        .await
        .expect("workload did not finish")
        .unwrap();
    let mut text = String::new();
    for f in h.m.log_files(uid, container, 0) {
        text.push_str(&String::from_utf8_lossy(&std::fs::read(f).unwrap()));
    }
    Ok(text)
}

fn assert_outside_untouched(h: &Host, log: &str) {
    assert!(
        !log.contains("host secret"),
        "the pod read the host's file:\n{log}"
    );
    assert!(
        !h.root.join("outside/pwned.txt").exists(),
        "the pod wrote outside its volume"
    );
}

/// An init container replaces the hostPath directory `x` (checked when the volume was
/// prepared) with a symlink out of the allow-list; the next container mounting `x`,
/// directly or as a subPath, must not get what the link points at.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_path_swapped_for_a_symlink_is_not_followed() {
    let h = host().await;
    let allowed = h.root.join("allowed");
    std::fs::create_dir_all(allowed.join("x")).unwrap();
    let direct =
        h.m.prepare_volume(&host_path("uid-a", "direct", &allowed.join("x"), false))
            .unwrap();
    let whole =
        h.m.prepare_volume(&host_path("uid-a", "whole", &allowed, false))
            .unwrap();

    // What an init container with write access to `allowed` can do.
    std::fs::remove_dir(allowed.join("x")).unwrap();
    std::os::unix::fs::symlink("../outside", allowed.join("x")).unwrap();

    match try_mount(&h, "uid-a", "direct", direct, None).await {
        Err(WorkloadError::Invalid(msg)) => {
            assert!(
                msg.contains("\"direct\"") && msg.contains("symbolic link"),
                "{msg}"
            );
            assert!(
                msg.contains(&allowed.join("x").display().to_string()),
                "{msg}"
            );
        }
        other => panic!("mounting the swapped hostPath must be refused: {other:?}"),
    }
    match try_mount(&h, "uid-a", "sub", whole, Some("x")).await {
        Err(WorkloadError::Invalid(msg)) => {
            assert!(msg.contains("\"whole\"") && msg.contains("\"x\""), "{msg}")
        }
        Ok(log) => {
            assert_outside_untouched(&h, &log);
            panic!("mounting subPath x must be refused:\n{log}");
        }
        Err(e) => panic!("{e:?}"),
    }
    assert_outside_untouched(&h, "");

    // A path through a symlink is refused before any directory is created: the
    // allow-list is checked on the walk, not after `create_dir_all`.
    match h.m.prepare_volume(&host_path(
        "uid-a",
        "made",
        &allowed.join("x/new-dir"),
        true,
    )) {
        Err(WorkloadError::Invalid(msg)) => assert!(msg.contains("symbolic link"), "{msg}"),
        other => panic!("{other:?}"),
    }
    assert!(!h.root.join("outside/new-dir").exists());
}

/// A sibling container flips an emptyDir subPath between a directory and a symlink to
/// the host while containers mounting that subPath start: none may get the host's
/// directory (each is refused or mounts the real directory).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn empty_dir_sub_path_raced_with_a_symlink_does_not_escape() {
    let h = host().await;
    let uid = "uid-b";
    let scratch =
        h.m.prepare_volume(&VolumeRequest {
            pod_uid: uid.into(),
            name: "scratch".into(),
            source: VolumeSource::EmptyDir(EmptyDir::default()),
        })
        .unwrap();
    let dir = h.root.join("data/pods").join(uid).join("volumes/scratch");
    std::fs::create_dir_all(dir.join("d")).unwrap();
    std::os::unix::fs::symlink(h.root.join("outside"), dir.join("alt")).unwrap();

    let stop = Arc::new(AtomicBool::new(false));
    let flipper = {
        let stop = stop.clone();
        let dir = dir.clone();
        std::thread::spawn(move || {
            let mut flips = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let swapped = rustix::fs::renameat_with(
                    rustix::fs::CWD,
                    dir.join("d"),
                    rustix::fs::CWD,
                    dir.join("alt"),
                    rustix::fs::RenameFlags::EXCHANGE,
                );
                // Gone only once the test has failed and removed its directory.
                if swapped.is_err() {
                    break;
                }
                flips += 1;
            }
            flips
        })
    };
    let (mut refused, mut mounted) = (0, 0);
    for i in 0..80 {
        match try_mount(&h, uid, &format!("c{i}"), scratch, Some("d")).await {
            Ok(log) => {
                mounted += 1;
                assert_outside_untouched(&h, &log);
            }
            Err(WorkloadError::Invalid(_)) => refused += 1,
            Err(e) => panic!("{e:?}"),
        }
    }
    stop.store(true, Ordering::Relaxed);
    let flips = flipper.join().unwrap();
    assert!(flips > 0);
    assert_eq!(refused + mounted, 80);
    assert_outside_untouched(&h, "");
}

/// A ConfigMap or Secret item's mode keeps its permission bits only: a pod cannot plant
/// a setuid, setgid or sticky file on the host.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn volume_files_drop_setuid_setgid_and_sticky_bits() {
    use std::os::unix::fs::PermissionsExt;
    let h = host().await;
    h.m.prepare_volume(&VolumeRequest {
        pod_uid: "uid-c".into(),
        name: "config".into(),
        source: VolumeSource::Files(vec![VolumeFile {
            path: "tool".into(),
            contents: b"#!/bin/sh\n".to_vec(),
            mode: 0o7755,
        }]),
    })
    .unwrap();
    let file = h.root.join("data/pods/uid-c/volumes/config/tool");
    let mode = std::fs::metadata(file).unwrap().permissions().mode();
    assert_eq!(mode & 0o7777, 0o755, "mode {mode:o}");
}
