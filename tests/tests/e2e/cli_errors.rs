//! Errors that said too little or too much (issue 34 item 9): each names the
//! file or address and its real cause, once, in words.

use std::process::Command;

use anyhow::{Result, ensure};
use wasmlet_e2e::{built_plugins, wasmlet_bin};

/// Runs `wasmlet ARGS` in `dir`, which must fail; its stderr.
fn fails(dir: &std::path::Path, args: &[&str]) -> Result<String> {
    let out = Command::new(wasmlet_bin())
        .current_dir(dir)
        .args(args)
        .output()?;
    ensure!(!out.status.success(), "wasmlet {args:?} succeeded");
    Ok(String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn a_plugin_without_its_manifest_says_what_a_plugin_is() -> Result<()> {
    let dir = tempfile::tempdir()?;
    std::fs::write(dir.path().join("lonely.wasm"), b"\0asm")?;
    let err = fails(dir.path(), &["plugin", "check", "lonely.wasm"])?;
    // It said `lonely.toml: -: No such file or directory (os error 2)`.
    ensure!(
        err.contains("lonely.toml: no such manifest: a plugin is NAME.wasm with its manifest NAME.toml beside it")
            && !err.contains(": -:"),
        "{err}"
    );
    Ok(())
}

#[test]
fn a_file_that_is_not_wasm_is_said_so_in_words() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let manifest = std::fs::read_to_string(built_plugins().join("trap.toml"))?;
    std::fs::write(
        dir.path().join("corrupt.toml"),
        manifest.replace("\"trap\"", "\"corrupt\""),
    )?;
    std::fs::write(dir.path().join("corrupt.wasm"), b"garbage\n")?;
    let err = fails(dir.path(), &["plugin", "check", "corrupt.wasm"])?;
    // It printed both magic numbers as 13-line arrays of `0x..` bytes.
    ensure!(
        err.contains("corrupt.wasm: not a valid WebAssembly component: not WebAssembly")
            && err.contains("67 61 72 62")
            && !err.contains("0x")
            && err.lines().count() == 1,
        "{err}"
    );
    Ok(())
}

#[test]
fn a_missing_kubeconfig_says_its_cause_once() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let err = fails(
        dir.path(),
        &[
            "run",
            "--kubeconfig",
            "/nonexistent/kubeconfig",
            "--plugins",
            ".",
        ],
    )?;
    // It said `No such file or directory (os error 2)` twice.
    ensure!(
        err.contains("/nonexistent/kubeconfig")
            && err.matches("No such file or directory").count() == 1,
        "{err}"
    );
    Ok(())
}

#[test]
fn a_registry_that_refuses_the_connection_is_named_with_the_refusal() -> Result<()> {
    let dir = tempfile::tempdir()?;
    // A port nothing listens on (bound, then closed).
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let reference = format!("oci://127.0.0.1:{port}/demo:v1");
    let err = fails(dir.path(), &["plugin", "pull", &reference, "out"])?;
    // It said only `error sending request for url (https://127.0.0.1:PORT/v2/)`.
    ensure!(
        err.contains(&format!("127.0.0.1:{port}"))
            && err.to_lowercase().contains("connection refused"),
        "{err}"
    );
    Ok(())
}

#[test]
fn a_plain_http_registry_gets_a_hint_to_pass_insecure() -> Result<()> {
    let dir = tempfile::tempdir()?;
    // Anything that answers HTTP without TLS.
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    let port = listener.local_addr()?.port();
    std::thread::spawn(move || {
        use std::io::Write;
        for conn in listener.incoming().flatten().take(4) {
            let mut conn = conn;
            let _ = conn.write_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n");
        }
    });
    let reference = format!("oci://127.0.0.1:{port}/demo:v1");
    let err = fails(dir.path(), &["plugin", "pull", &reference, "out"])?;
    ensure!(err.contains("plain HTTP: pass --insecure"), "{err}");
    Ok(())
}
