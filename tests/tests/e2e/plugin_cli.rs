//! `wasmlet plugin graph`: a real provider's declared state graph as DOT.

use std::process::Command;

use anyhow::{Result, ensure};
use wasmlet_e2e::{built_plugins, wasmlet_bin};

#[test]
fn graph_prints_the_providers_states_and_edges_as_dot() -> Result<()> {
    let out = Command::new(wasmlet_bin())
        .args(["plugin", "graph"])
        .arg(built_plugins().join("wasi-runner.toml"))
        .output()?;
    ensure!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let dot = String::from_utf8(out.stdout)?;
    ensure!(dot.starts_with("digraph \"wasi-runner\" {"), "{dot}");
    // Krustlet's pod lifecycle as wasi-runner declares it.
    for line in [
        "\"Registered\" [peripheries=2];",
        "\"Error\" [color=red];",
        "\"CrashLoopBackOff\" [style=\"rounded,dashed\"];",
        "\"Registered\" -> \"ImagePull\";",
        "\"Starting\" -> \"Running\";",
    ] {
        ensure!(dot.contains(line), "missing {line}:\n{dot}");
    }
    ensure!(dot.trim_end().ends_with('}'));

    // A reconciler has no graph: a clear error, not an empty one.
    let out = Command::new(wasmlet_bin())
        .args(["plugin", "graph"])
        .arg(built_plugins().join("configmap-summary.toml"))
        .output()?;
    let err = String::from_utf8_lossy(&out.stderr);
    ensure!(
        !out.status.success() && err.contains("not a provider"),
        "{err}"
    );
    Ok(())
}
