//! Attacks on the node's shared resources by pods' workloads (issue 8, finding 5):
//! memory (a default limit; workloads apart from the plugins' instance pool) and
//! disk (`emptyDir.sizeLimit`). The workloads are small WASI preview 1 modules
//! written here in WAT, run as `file://` images.
#![allow(clippy::unwrap_used)] // a bench or test: a failure should stop it loudly

use std::time::Duration;

use wasmlet::internals::PluginEngine;
use wasmlet::internals::workloads::*;
use wasmlet_e2e::eventually;

/// Blocks the workload in the host for an hour (`poll_oneoff` on a relative clock
/// subscription at 64); the test releases it.
const SLEEP: &str = r#"
    (i64.store (i32.const 64) (i64.const 0))
    (i32.store8 (i32.const 72) (i32.const 0))
    (i32.store (i32.const 80) (i32.const 1))
    (i64.store (i32.const 88) (i64.const 3600000000000))
    (i64.store (i32.const 96) (i64.const 0))
    (i32.store16 (i32.const 104) (i32.const 0))
    (drop (call $poll (i32.const 64) (i32.const 128) (i32.const 1) (i32.const 192)))
"#;

/// Prints `ready\n` (at 0 in memory 0) to stdout.
const READY: &str = r#"
    (i32.store (i32.const 16) (i32.const 0))
    (i32.store (i32.const 20) (i32.const 6))
    (drop (call $fd_write (i32.const 1) (i32.const 16) (i32.const 1) (i32.const 24)))
"#;

const IMPORTS: &str = r#"
    (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
    (import "wasi_snapshot_preview1" "poll_oneoff" (func $poll (param i32 i32 i32 i32) (result i32)))
    (import "wasi_snapshot_preview1" "path_open"
        (func $path_open (param i32 i32 i32 i32 i32 i64 i64 i32 i32) (result i32)))
"#;

struct Node {
    tmp: tempfile::TempDir,
    m: WorkloadManager,
}

impl Node {
    fn new(configure: impl FnOnce(&mut WorkloadConfig)) -> Node {
        let tmp = tempfile::tempdir().unwrap();
        let images = tmp.path().join("images");
        std::fs::create_dir_all(&images).unwrap();
        let mut config = WorkloadConfig::new(tmp.path().join("data"));
        config.file_image_dirs = vec![images];
        configure(&mut config);
        let engine = WorkloadEngine::new(&tmp.path().join("cache")).unwrap();
        let m = WorkloadManager::new(config, engine).unwrap();
        Node { tmp, m }
    }

    /// `wat` as a file image, fetched into the store.
    async fn module(&self, name: &str, wat: &str) -> ModuleRef {
        let path = self.tmp.path().join("images").join(format!("{name}.wasm"));
        std::fs::write(&path, wat::parse_str(wat).unwrap()).unwrap();
        self.m
            .fetch_wait(&FetchRequest {
                image: format!("file://{}", path.display()),
                pull_policy: PullPolicy::IfNotPresent,
                namespace: "default".into(),
                pull_secrets: vec![],
            })
            .await
            .unwrap()
    }
}

fn spec(module: &str, uid: &str, container: &str) -> SpawnSpec {
    SpawnSpec {
        module: module.into(),
        args: vec![],
        env: vec![],
        mounts: vec![],
        memory_limit: None,
        logs: LogTarget {
            pod_namespace: "default".into(),
            pod_name: uid.into(),
            pod_uid: uid.into(),
            container: container.into(),
            attempt: 0,
        },
    }
}

async fn finished(m: &WorkloadManager, h: WorkloadHandle) -> RunState {
    tokio::time::timeout(Duration::from_secs(60), m.wait(h))
        .await
        .expect("the workload did not finish")
        .unwrap()
        .state
}

/// Grows its memory 1 MiB at a time until refused, then traps (as a program
/// aborting on a failed allocation does).
const GROWER: &str = r#"(module
    (memory (export "memory") 1)
    (func (export "_start")
        (loop $grow
            (if (i32.eq (memory.grow (i32.const 16)) (i32.const -1)) (then unreachable))
            (br $grow))))"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workload_without_a_memory_limit_is_oom_killed_at_the_default() {
    let node = Node::new(|c| {
        c.default_memory_limit = 64 << 20;
        c.max_memory_limit = 256 << 20;
    });
    let grower = node.module("grower", GROWER).await;

    let h = node.m.spawn(spec(&grower, "uid-a", "nolimit")).unwrap();
    match finished(&node.m, h).await {
        RunState::Failed(msg) => {
            assert!(msg.starts_with("OOMKilled:"), "{msg}");
            assert!(msg.contains(&(64u64 << 20).to_string()), "{msg}");
        }
        other => panic!("{other:?}"),
    }

    // The pod's `resources.limits.memory` raises it, within the node's maximum...
    let mut s = spec(&grower, "uid-a", "raised");
    s.memory_limit = Some(128 << 20);
    match finished(&node.m, node.m.spawn(s).unwrap()).await {
        RunState::Failed(msg) => assert!(msg.contains(&(128u64 << 20).to_string()), "{msg}"),
        other => panic!("{other:?}"),
    }
    // ...and not past it.
    let mut s = spec(&grower, "uid-a", "huge");
    s.memory_limit = Some(1 << 30);
    match node.m.spawn(s) {
        Err(WorkloadError::Invalid(msg)) => assert!(msg.contains("maximum"), "{msg}"),
        other => panic!("{other:?}"),
    }
}

/// Holds 16 memories (the most a store may have), says `ready`, then sleeps.
fn hoarder() -> String {
    let memories: String = (0..15).map(|i| format!("(memory $m{i} 1)\n")).collect();
    format!(
        r#"(module {IMPORTS}
            (memory (export "memory") 1)
            {memories}
            (data (i32.const 0) "ready\n")
            (func (export "_start") {READY} {SLEEP}))"#
    )
}

/// Pods hold as many memories as they may: the plugins' pool must still
/// instantiate (on the old wiring, workloads shared the plugins' engine and its
/// 1024 memory slots, and 70 such pods left none for a reconciler).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workloads_cannot_exhaust_the_plugins_instance_pool() {
    let tmp = tempfile::tempdir().unwrap();
    let plugins = PluginEngine::new(&tmp.path().join("plugin-cache")).unwrap();
    if !plugins.pooling {
        eprintln!("SKIPPED: the pooling allocator is unavailable on this machine");
        return;
    }
    let node = Node::new(|_| {});
    let hoarder = node.module("hoarder", &hoarder()).await;
    let pods = 70;
    let handles: Vec<WorkloadHandle> = (0..pods)
        .map(|i| {
            node.m
                .spawn(spec(&hoarder, &format!("uid-{i}"), "hoard"))
                .unwrap()
        })
        .collect();
    // Every workload is instantiated (says ready) or has failed trying.
    let mut states = Vec::new();
    for &h in &handles {
        let what = format!("workload {h} ready or stopped");
        let state = eventually(Duration::from_secs(60), &what, || {
            let st = node.m.status(h).unwrap().state;
            let ready = node.m.read_logs(h, 64).unwrap().starts_with(b"ready");
            std::future::ready((ready || st != RunState::Running).then_some((ready, st)))
        })
        .await
        .unwrap();
        states.push(state);
    }

    // A plugin (a component with a memory) instantiates from its pool.
    let component = wasmtime::component::Component::new(
        &plugins.engine,
        wat::parse_str(
            r#"(component (core module $m (memory 1)) (core instance (instantiate $m)))"#,
        )
        .unwrap(),
    )
    .unwrap();
    let linker = wasmtime::component::Linker::<()>::new(&plugins.engine);
    let mut store = wasmtime::Store::new(&plugins.engine, ());
    store.set_epoch_deadline(1000);
    let plugin = linker.instantiate(&mut store, &component);
    assert!(
        plugin.is_ok(),
        "a plugin cannot instantiate while pods run: {:#}",
        plugin.err().unwrap()
    );
    let failed: Vec<_> = states.iter().filter(|(ready, _)| !ready).collect();
    assert!(failed.is_empty(), "workloads failed: {failed:?}");
    for i in 0..pods {
        node.m.release_pod(&format!("uid-{i}")).await.unwrap();
    }
}

/// Writes 2 MiB to `/data/f` (the first preopen, fd 3), says `ready`, then sleeps.
fn writer() -> String {
    format!(
        r#"(module {IMPORTS}
            (memory (export "memory") 64)
            (data (i32.const 0) "ready\n")
            (data (i32.const 200) "f")
            (func (export "_start") (local $fd i32)
                (if (call $path_open (i32.const 3) (i32.const 0) (i32.const 200) (i32.const 1)
                        (i32.const 1) (i64.const 0x1fffffff) (i64.const 0x1fffffff) (i32.const 0)
                        (i32.const 300))
                    (then unreachable))
                (local.set $fd (i32.load (i32.const 300)))
                (i32.store (i32.const 32) (i32.const 65536))
                (i32.store (i32.const 36) (i32.const 0x200000))
                (if (call $fd_write (local.get $fd) (i32.const 32) (i32.const 1) (i32.const 40))
                    (then unreachable))
                {READY} {SLEEP}))"#
    )
}

async fn spawn_writer(node: &Node, module: &str, uid: &str, limit: u64) -> WorkloadHandle {
    let volume = node
        .m
        .prepare_volume(&VolumeRequest {
            pod_uid: uid.into(),
            name: "scratch".into(),
            source: VolumeSource::EmptyDir(EmptyDir {
                size_limit: Some(limit),
            }),
        })
        .unwrap();
    let mut s = spec(module, uid, "writer");
    s.mounts = vec![Mount {
        volume,
        guest_path: "/data".into(),
        sub_path: None,
        read_only: false,
    }];
    node.m.spawn(s).unwrap()
}

async fn wait_ready(m: &WorkloadManager, h: WorkloadHandle) {
    // Ok once it wrote; Err(state) if it stopped first.
    let wrote = eventually(Duration::from_secs(60), "the writer writing", || {
        let ready = m.read_logs(h, 64).unwrap().starts_with(b"ready");
        let st = m.status(h).unwrap().state;
        std::future::ready((ready || st != RunState::Running).then_some(if ready {
            Ok(())
        } else {
            Err(st)
        }))
    })
    .await
    .unwrap();
    assert_eq!(wrote, Ok(()), "the writer stopped before writing");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_writing_past_its_empty_dir_size_limit_is_evicted() {
    let node = Node::new(|c| c.disk_check_interval = Duration::from_millis(50));
    let writer = node.module("writer", &writer()).await;

    // Within its limit: left running.
    let within = spawn_writer(&node, &writer, "uid-within", 4 << 20).await;
    wait_ready(&node.m, within).await;
    // 2 MiB into a 1 MiB emptyDir: evicted.
    let over = spawn_writer(&node, &writer, "uid-over", 1 << 20).await;
    match finished(&node.m, over).await {
        RunState::Failed(msg) => {
            assert!(msg.starts_with("Evicted:"), "{msg}");
            assert!(
                msg.contains("\"scratch\"") && msg.contains("1048576"),
                "{msg}"
            );
        }
        other => panic!("{other:?}"),
    }
    // Measured after the first pod wrote (the second wrote later): still running.
    assert_eq!(node.m.status(within).unwrap().state, RunState::Running);
    // An evicted pod starts nothing more.
    match node.m.spawn(spec(&writer, "uid-over", "again")) {
        Err(WorkloadError::Failed(msg)) => assert!(msg.contains("evicted"), "{msg}"),
        other => panic!("{other:?}"),
    }
    node.m.release_pod("uid-within").await.unwrap();
    node.m.release_pod("uid-over").await.unwrap();
}
