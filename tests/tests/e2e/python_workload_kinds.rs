//! The official Python kubernetes client on DaemonSets, ReplicationControllers
//! (scale included), SelfSubjectReview and SelfSubjectRulesReview: the checks
//! in `tests/python/workload_kinds.py`.

use std::path::PathBuf;
use std::process::Command;

use wasmlet_e2e::Plane;

#[tokio::test]
async fn the_python_client_reads_the_new_kinds_as_against_upstream() -> anyhow::Result<()> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let py = root.join("../target/python/bin/python");
    assert!(
        py.exists(),
        "{} is missing: run scripts/setup (it installs the Python kubernetes client)",
        py.display()
    );
    let plane = Plane::start(&[]).await?;
    let out = Command::new(&py)
        .arg(root.join("python/workload_kinds.py"))
        .env("KUBECONFIG", plane.kubeconfig())
        .output()?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the Python client's checks failed:\n{stdout}\n{stderr}"
    );
    assert!(stdout.contains("all passed"), "{stdout}");
    Ok(())
}
