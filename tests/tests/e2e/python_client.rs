//! The official Python kubernetes client (installed by `scripts/setup` into
//! `target/python`) against the embedded plane: the checks in
//! `tests/python/conformance.py` reproduce what broke that client.

use std::path::PathBuf;
use std::process::Command;

use wasmlet_e2e::*;

fn python() -> PathBuf {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    root.join("../target/python/bin/python")
}

#[tokio::test]
async fn the_python_client_works_as_against_upstream() -> anyhow::Result<()> {
    let py = python();
    assert!(
        py.exists(),
        "{} is missing: run scripts/setup (it installs the Python kubernetes client)",
        py.display()
    );
    let plane = Plane::start(&[]).await?;
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("python/conformance.py");
    let out = Command::new(&py)
        .arg(&script)
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
