//! Module fetches cannot hurt the node (issue 8, finding 5): `file://` images come only
//! from configured module directories, and registry layers are checked against the size
//! limit before they are downloaded and unpacked within it. Runs Debian's
//! `docker-registry` when it is installed.
#![allow(clippy::unwrap_used)] // a bench or test: a failure should stop it loudly

use std::io::Read;
use std::path::Path;

use wasmlet::internals::workloads::*;
use wasmlet_e2e::registry::{self, Registry};

const WASM: (&str, &str) = ("application/wasm", "application/vnd.wasm.config.v0+json");
const IMAGE: (&str, &str) = (
    "application/vnd.oci.image.layer.v1.tar+gzip",
    "application/vnd.oci.image.config.v1+json",
);

fn manager(data: &Path, addr: &str, max: u64) -> WorkloadManager {
    let mut config = WorkloadConfig::new(data);
    config.insecure_registries = vec![addr.to_string()];
    config.max_module_bytes = max;
    let engine = WorkloadEngine::new(
        &Path::new(env!("CARGO_TARGET_TMPDIR")).join("pull-limits-engine-cache"),
    )
    .unwrap();
    WorkloadManager::new(config, engine).unwrap()
}

async fn pull(m: &WorkloadManager, image: &str) -> Result<ModuleRef, FetchError> {
    m.fetch_wait(&FetchRequest {
        image: image.into(),
        pull_policy: PullPolicy::Always,
        namespace: "default".into(),
        pull_secrets: vec![],
    })
    .await
}

/// A gzipped tar whose `name` holds `size` zero bytes: tiny packed, `size` unpacked.
fn gzip_bomb(name: &str, size: u64) -> Vec<u8> {
    let gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    let mut tar = tar::Builder::new(gz);
    let mut header = tar::Header::new_gnu();
    header.set_size(size);
    header.set_mode(0o644);
    header.set_cksum();
    tar.append_data(&mut header, name, std::io::repeat(0).take(size))
        .unwrap();
    tar.into_inner().unwrap().finish().unwrap()
}

fn registry_missing(test: &str) -> bool {
    let missing = !Path::new(registry::BIN).exists();
    if missing {
        eprintln!(
            "SKIPPED {test}: {} is missing (apt-get install -y docker-registry)",
            registry::BIN
        );
    }
    missing
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gzip_bomb_layer_is_refused_within_the_limit() {
    if registry_missing("a_gzip_bomb_layer_is_refused_within_the_limit") {
        return;
    }
    let registry = Registry::start().await.unwrap();
    let bomb = gzip_bomb("app/bomb.wasm", 64 << 20);
    assert!(bomb.len() < 1 << 20, "packed {} bytes", bomb.len());
    registry
        .push("images/bomb:v1", bomb, IMAGE.0, IMAGE.1)
        .await
        .unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let m = manager(tmp.path(), &registry.addr, 4 << 20);
    match pull(&m, &format!("{}/images/bomb:v1", registry.addr)).await {
        Err(FetchError::NotWasm(msg)) => {
            assert!(msg.contains("unpacks to more than 4194304 bytes"), "{msg}")
        }
        other => panic!("the bomb must be refused: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_layer_is_refused_by_its_descriptor() {
    if registry_missing("an_oversized_layer_is_refused_by_its_descriptor") {
        return;
    }
    let registry = Registry::start().await.unwrap();
    let mut big = b"\0asm\x01\0\0\0".to_vec();
    big.resize(2 << 20, 0x5a);
    registry
        .push("wasm/big:v1", big, WASM.0, WASM.1)
        .await
        .unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let m = manager(tmp.path(), &registry.addr, 1 << 20);
    match pull(&m, &format!("{}/wasm/big:v1", registry.addr)).await {
        Err(FetchError::NotWasm(msg)) => assert!(
            msg.contains("(declaring 2097152 bytes) is larger than the limit of 1048576 bytes"),
            "{msg}"
        ),
        other => panic!("the layer must be refused: {other:?}"),
    }
}

/// A pod naming a file of the node outside the module directories is refused with the
/// same message whether the file exists, is a valid module, or is missing; a symlink in
/// a module directory does not lead out of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_images_come_only_from_module_directories() {
    let tmp = tempfile::tempdir().unwrap();
    let modules = tmp.path().join("modules");
    let outside = tmp.path().join("outside");
    std::fs::create_dir_all(&modules).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    let hello = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/workloads/hello.wasm");
    assert!(hello.is_file(), "run scripts/build-workloads first");
    std::fs::copy(&hello, modules.join("hello.wasm")).unwrap();
    std::fs::copy(&hello, outside.join("hello.wasm")).unwrap();
    std::os::unix::fs::symlink(outside.join("hello.wasm"), modules.join("link.wasm")).unwrap();
    let mut config = WorkloadConfig::new(tmp.path().join("data"));
    config.file_image_dirs = vec![modules.clone()];
    let engine = WorkloadEngine::new(
        &Path::new(env!("CARGO_TARGET_TMPDIR")).join("pull-limits-engine-cache"),
    )
    .unwrap();
    let m = WorkloadManager::new(config, engine).unwrap();

    pull(
        &m,
        &format!("file://{}", modules.join("hello.wasm").display()),
    )
    .await
    .expect("a module in the module directory runs");
    let refusal = |r: Result<ModuleRef, FetchError>, path: &Path| match r {
        Err(FetchError::Unauthorized(msg)) => msg.replace(&path.display().to_string(), "PATH"),
        other => panic!("file://{} must be refused: {other:?}", path.display()),
    };
    let existing = outside.join("hello.wasm");
    let missing = outside.join("missing.wasm");
    let a = refusal(
        pull(&m, &format!("file://{}", existing.display())).await,
        &existing,
    );
    let b = refusal(
        pull(&m, &format!("file://{}", missing.display())).await,
        &missing,
    );
    assert_eq!(a, b, "the refusal must not tell whether the file exists");
    assert!(a.contains("--allow-file-images"), "{a}");
    let etc = Path::new("/etc/passwd.wasm");
    assert_eq!(refusal(pull(&m, "file:///etc/passwd.wasm").await, etc), a);
    match pull(
        &m,
        &format!("file://{}", modules.join("link.wasm").display()),
    )
    .await
    {
        Err(FetchError::NotWasm(msg)) => assert!(msg.contains("symbolic link"), "{msg}"),
        other => panic!("a symlink out of the module directory must be refused: {other:?}"),
    }
}
