//! The command line as a shell user meets it (issue 34 item 11): completion
//! scripts, and no hidden internal command offered anywhere.

use std::process::Command;

use anyhow::{Result, ensure};
use wasmlet_e2e::wasmlet_bin;

#[test]
fn completions_cover_the_commands_and_never_the_internal_one() -> Result<()> {
    for shell in ["bash", "zsh", "fish"] {
        let out = Command::new(wasmlet_bin())
            .args(["completions", shell])
            .output()?;
        ensure!(
            out.status.success(),
            "{shell}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let script = String::from_utf8(out.stdout)?;
        for command in ["up", "plugin", "datastore", "replay", "shadow-report"] {
            ensure!(script.contains(command), "{shell}: no {command}");
        }
        ensure!(
            !script.contains("compile-component"),
            "{shell} completes the internal compile-component"
        );
    }
    // A near miss suggests a real command, not the hidden one.
    let out = Command::new(wasmlet_bin()).arg("complete").output()?;
    let err = String::from_utf8_lossy(&out.stderr);
    ensure!(
        !out.status.success() && !err.contains("compile-component"),
        "{err}"
    );
    Ok(())
}
