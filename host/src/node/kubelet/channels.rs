//! The kubelet's streaming protocol for exec and attach over a websocket
//! (`v5.channel.k8s.io`, and `v4.channel.k8s.io` for older clients): every
//! binary message starts with its channel byte, stdin 0, stdout 1, stderr 2,
//! error 3 (a `v1.Status` as JSON, how the exit code reaches `kubectl`),
//! resize 4, and in v5 close 255 (`[255, channel]`: the client closed that
//! stream, how `kubectl exec -i` ends stdin). SPDY, which `kubectl` falls back
//! to when a websocket upgrade fails, is not spoken.

use serde_json::{Value, json};

use super::super::workloads::{RunState, WorkloadStatus};

/// The subprotocols served, preferred first.
pub(super) const PROTOCOLS: [&str; 2] = ["v5.channel.k8s.io", "v4.channel.k8s.io"];

pub(super) const STDIN: u8 = 0;
pub(super) const STDOUT: u8 = 1;
pub(super) const STDERR: u8 = 2;
pub(super) const ERROR: u8 = 3;
pub(super) const RESIZE: u8 = 4;
/// v5: `[255, channel]` closes that channel.
pub(super) const CLOSE: u8 = 255;

/// The streams a request asks for (`stdin`, `stdout`, `stderr`, `tty`; the
/// `command` argv for exec), read as the kubelet reads them.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct StreamOptions {
    pub(super) command: Vec<String>,
    pub(super) stdin: bool,
    pub(super) stdout: bool,
    pub(super) stderr: bool,
    pub(super) tty: bool,
}

impl StreamOptions {
    /// From the raw query: `command` repeats, one value per argument.
    pub(super) fn parse(raw: Option<&str>) -> Result<StreamOptions, String> {
        let mut o = StreamOptions::default();
        for (k, v) in url::form_urlencoded::parse(raw.unwrap_or("").as_bytes()) {
            // Go's strconv.ParseBool, which the kubelet's query decoding uses.
            let flag = || matches!(&*v, "1" | "t" | "T" | "true" | "TRUE" | "True");
            match &*k {
                "command" => o.command.push(v.into_owned()),
                "input" | "stdin" => o.stdin = flag(),
                "output" | "stdout" => o.stdout = flag(),
                "error" | "stderr" => o.stderr = flag(),
                "tty" => o.tty = flag(),
                _ => {}
            }
        }
        // As upstream's: a tty has one output stream.
        if o.tty {
            o.stderr = false;
        }
        if !(o.stdin || o.stdout || o.stderr) {
            return Err("you must specify at least 1 of stdin, stdout, stderr".into());
        }
        Ok(o)
    }
}

/// One message on `channel`.
pub(super) fn frame(channel: u8, data: &[u8]) -> Vec<u8> {
    let mut m = Vec::with_capacity(data.len() + 1);
    m.push(channel);
    m.extend_from_slice(data);
    m
}

/// The error channel's `v1.Status` for how the command ended, as the
/// kubelet writes it: Success, or `NonZeroExitCode` with the code in
/// `details.causes` (what `kubectl` exits with).
pub(super) fn exit_status(status: &WorkloadStatus) -> Value {
    match &status.state {
        RunState::Exited(0) | RunState::Running => {
            json!({"metadata": {}, "status": "Success"})
        }
        RunState::Exited(code) => json!({
            "metadata": {},
            "status": "Failure",
            "message": format!("command terminated with non-zero exit code: exit status {code}"),
            "reason": "NonZeroExitCode",
            "details": {"causes": [{"reason": "ExitCode", "message": code.to_string()}]},
        }),
        RunState::Failed(why) => failure(why),
    }
}

/// An error that ends the stream (the command could not run to its end).
pub(super) fn failure(message: &str) -> Value {
    json!({
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": "InternalError",
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_repeats_and_tty_merges_stderr() {
        let o = StreamOptions::parse(Some(
            "command=echo&command=a%20b&stdin=1&stdout=true&stderr=1&tty=1",
        ))
        .unwrap();
        assert_eq!(o.command, ["echo", "a b"]);
        assert!(o.stdin && o.stdout && o.tty && !o.stderr);
        assert!(StreamOptions::parse(Some("command=ls")).is_err());
    }

    #[test]
    fn a_non_zero_exit_carries_its_code() {
        let s = exit_status(&WorkloadStatus {
            state: RunState::Exited(3),
            started_at_ms: 0,
            finished_at_ms: None,
        });
        assert_eq!(s["reason"], "NonZeroExitCode");
        assert_eq!(s["details"]["causes"][0]["message"], "3");
        assert_eq!(frame(ERROR, b"x"), [3, b'x']);
    }
}
