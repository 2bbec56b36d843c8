//! The host's own logs as a deployed agent's `kubectl logs` shows them
//! (issue 34 item 8): no colour codes when stderr is not a terminal,
//! `--log-format json` one JSON object a line, `--log-level` filters, and a
//! bad filter is an error that names the flag.

use anyhow::Result;
use wasmlet_e2e::{Plane, wasmlet_bin};

#[tokio::test]
async fn logs_are_plain_text_or_json_lines_and_filtered() -> Result<()> {
    let plane = Plane::start(&[]).await?;
    let text = plane.log();
    assert!(text.contains("INFO"), "{text}");
    assert!(
        !text.contains('\u{1b}'),
        "colour codes in a log that is not a terminal:\n{text}"
    );

    let plane = Plane::start(&["--log-format", "json", "--log-level", "debug"]).await?;
    let text = plane.log();
    let lines: Vec<serde_json::Value> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).map_err(|e| anyhow::anyhow!("{e}: {l}")))
        .collect::<Result<_>>()?;
    assert!(lines.iter().any(|l| l["level"] == "DEBUG"), "{text}");
    assert!(
        lines
            .iter()
            .all(|l| l["timestamp"].is_string() && l["fields"].is_object())
    );

    let plane = Plane::start(&["--log-level", "warn"]).await?;
    assert!(!plane.log().contains("INFO"), "{}", plane.log());

    let out = std::process::Command::new(wasmlet_bin())
        .args(["apiserver", "--log-level", "info,=x=y"])
        .output()?;
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("--log-level (or WASMLET_LOG)"), "{err}");
    Ok(())
}
