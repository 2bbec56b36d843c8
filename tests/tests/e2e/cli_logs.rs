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

/// `wasmlet ARGS` with stderr on a terminal (`script` gives it a pty); returns
/// what the terminal showed.
fn on_a_terminal(args: &[&str], env: &[(&str, &str)]) -> Result<String> {
    let line = std::iter::once(wasmlet_bin().display().to_string())
        .chain(args.iter().map(|a| a.to_string()))
        .collect::<Vec<_>>()
        .join(" ");
    let out = std::process::Command::new("script")
        .args(["-qec", &line, "/dev/null"])
        .envs(env.iter().copied())
        .output()?;
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Colour is for terminals only, and `NO_COLOR` (no-color.org) turns it off
/// there too; `WASMLET_LOG` does what `--log-level` does; `--help` says so.
#[tokio::test]
async fn colour_on_a_terminal_unless_no_color_and_the_flags_in_help() -> Result<()> {
    let echo = wasmlet_e2e::built_plugins().join("echo.toml");
    let check = [
        "--log-level",
        "debug",
        "plugin",
        "check",
        echo.to_str().unwrap(),
    ];
    let shown = on_a_terminal(&check, &[])?;
    assert!(
        shown.contains("making the directory private") && shown.contains("\u{1b}["),
        "no colour on a terminal:\n{shown}"
    );
    let shown = on_a_terminal(&check, &[("NO_COLOR", "1")])?;
    assert!(
        shown.contains("making the directory private") && !shown.contains("\u{1b}["),
        "colour despite NO_COLOR:\n{shown}"
    );

    // WASMLET_LOG instead of the flag, stderr a pipe: the record, no colour.
    let run = |env: Option<&str>| -> Result<String> {
        let mut cmd = std::process::Command::new(wasmlet_bin());
        cmd.args(["plugin", "check", echo.to_str().unwrap()])
            .env_remove("WASMLET_LOG");
        if let Some(level) = env {
            cmd.env("WASMLET_LOG", level);
        }
        Ok(String::from_utf8_lossy(&cmd.output()?.stderr).into_owned())
    };
    let err = run(Some("debug"))?;
    assert!(
        err.contains("making the directory private") && !err.contains('\u{1b}'),
        "{err}"
    );
    assert!(!run(None)?.contains("making the directory private"));

    for cmd in [&["--help"][..], &["up", "--help"], &["run", "--help"]] {
        let out = std::process::Command::new(wasmlet_bin())
            .args(cmd)
            .output()?;
        let help = String::from_utf8_lossy(&out.stdout);
        for want in [
            "--log-level",
            "[env: WASMLET_LOG=]",
            "--log-format",
            "json",
            "[env: WASMLET_LOG_FORMAT=]",
            "NO_COLOR",
        ] {
            assert!(help.contains(want), "wasmlet {cmd:?} lacks {want}:\n{help}");
        }
    }
    Ok(())
}
