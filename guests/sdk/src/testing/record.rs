//! A call the wasmlet host recorded (`wasmlet up --record NAME`, or a manifest
//! `[record]`: `DATA_DIR/records/NAME.jsonl`) as the fixture of a native unit test.
//!
//! ```no_run
//! # use wasmlet_sdk::testing::RecordedCall;
//! let call = RecordedCall::load("tests/records/summary.jsonl", 3).unwrap();
//! let _guard = call.host().install(); // every object the call read, in a FakeHost
//! let input: serde_json::Value = call.input();
//! // run the reconcile function on `input`, compare with `call.status()`
//! ```
//!
//! A provider's calls (`init`, `handle`, `status`) load the same way: the pod
//! is the input, and [`RecordedCall::state`], [`RecordedCall::state_data`],
//! [`RecordedCall::event`] and [`RecordedCall::workload_calls`] give what the
//! state handler was given and what it asked the node's workloads.

use std::path::Path;

use serde::de::DeserializeOwned;
use serde_json::Value;

use super::FakeHost;

/// One recorded call: its input, what it read and what it returned.
#[derive(Debug, Clone)]
pub struct RecordedCall {
    /// `namespace/name`.
    pub key: String,
    /// `reconcile` or `finalize`; a provider's `init`, `handle` or `status`.
    pub call: String,
    record: Value,
}

impl RecordedCall {
    /// The `n`th call (1-based, header lines not counted, as `wasmlet replay`
    /// counts) of the record file at `path`.
    pub fn load(path: impl AsRef<Path>, n: usize) -> Result<RecordedCall, String> {
        Self::find(path.as_ref(), |i, _| i == n)
    }

    /// The last recorded call for `key` (`namespace/name`).
    pub fn last_for(path: impl AsRef<Path>, key: &str) -> Result<RecordedCall, String> {
        let path = path.as_ref();
        let calls = Self::all(path)?;
        calls
            .into_iter()
            .rev()
            .find(|c| c.key == key)
            .ok_or_else(|| format!("{}: no call for {key}", path.display()))
    }

    fn find(
        path: &Path,
        want: impl Fn(usize, &RecordedCall) -> bool,
    ) -> Result<RecordedCall, String> {
        Self::all(path)?
            .into_iter()
            .enumerate()
            .find(|(i, c)| want(i + 1, c))
            .map(|(_, c)| c)
            .ok_or_else(|| format!("{}: no such call", path.display()))
    }

    /// Every call in the file, in order.
    pub fn all(path: &Path) -> Result<Vec<RecordedCall>, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let mut out = Vec::new();
        for (i, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let v: Value = serde_json::from_str(line)
                .map_err(|e| format!("{}:{}: not JSON: {e}", path.display(), i + 1))?;
            if v.get("format").is_some() {
                // Version 2 added provider calls; reconciler calls read the same in both.
                if v["version"] != 1 && v["version"] != 2 {
                    return Err(format!(
                        "{}:{}: version: record format {} (this SDK reads 1 and 2)",
                        path.display(),
                        i + 1,
                        v["version"]
                    ));
                }
                continue;
            }
            let field = |f: &str| {
                v.get(f)
                    .and_then(Value::as_str)
                    .map(str::to_owned)
                    .ok_or_else(|| format!("{}:{}: {f}: missing", path.display(), i + 1))
            };
            out.push(RecordedCall {
                key: field("key")?,
                call: field("call")?,
                record: v,
            });
        }
        Ok(out)
    }

    /// The object the call was given, deserialised.
    pub fn input<K: DeserializeOwned>(&self) -> K {
        serde_json::from_value(self.record["input"].clone())
            .expect("the recorded input deserialises as the requested type")
    }

    /// A fake host holding every object the call read (`get` results and
    /// `list` items), so the guest's reads answer as they did; what it read in
    /// a named cluster is in that cluster's fake ([`FakeHost::cluster`]).
    pub fn host(&self) -> FakeHost {
        let host = FakeHost::new();
        for e in self.record["imports"].as_array().into_iter().flatten() {
            let Some((interface, function)) = e["op"].as_str().and_then(|op| op.split_once('.'))
            else {
                continue;
            };
            let at = match (interface, e["args"]["cluster"].as_str()) {
                ("client", _) => host.clone(),
                ("clusters", Some(name)) => host.cluster(name),
                _ => continue,
            };
            match function {
                "get" => {
                    if let Some(o) = e["result"].get("ok") {
                        at.insert(o.clone());
                    }
                }
                "list" => {
                    for o in e["result"]["ok"].as_array().into_iter().flatten() {
                        at.insert(o.clone());
                    }
                }
                _ => {}
            }
        }
        host
    }

    /// A provider call's pod state (`handle`, `status`), e.g. `Running`.
    pub fn state(&self) -> Option<&str> {
        self.record.get("state").and_then(Value::as_str)
    }

    /// The state data a provider call was given (`handle`, `status`).
    pub fn state_data(&self) -> Option<&Value> {
        self.record.get("state-data").filter(|v| !v.is_null())
    }

    /// What woke a `handle` call (`{"workload-exited": 3}`, `{"timer": 1000}`,
    /// `"pod-changed"`, `{"fetch-done": 1}`); `None` for a first look.
    pub fn event(&self) -> Option<&Value> {
        self.record.get("event").filter(|v| !v.is_null())
    }

    /// The `workloads` import calls a provider call made, in order: the
    /// operation (`spawn`, `status`, `kill`, ...), its arguments and its result.
    pub fn workload_calls(&self) -> Vec<(&str, &Value, &Value)> {
        self.record["imports"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|e| {
                let op = e["op"].as_str()?.strip_prefix("workloads.")?;
                Some((op, &e["args"], &e["result"]))
            })
            .collect()
    }

    /// The recorded outcome (`kind`: `reconciled`, `finalized`, `guest-error`
    /// or `failed`; a provider's `initialized`, `transition`, `wait`, `status`, ...).
    pub fn outcome(&self) -> &Value {
        &self.record["outcome"]
    }

    /// The status the call returned, if any.
    pub fn status(&self) -> Option<&Value> {
        self.record["outcome"]
            .get("status")
            .filter(|s| !s.is_null())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::{Client, ListParams};
    use k8s_openapi::api::core::v1::ConfigMap;

    #[test]
    fn a_recorded_call_gives_its_input_reads_and_outcome() {
        let path =
            std::env::temp_dir().join(format!("wasmlet-sdk-record-{}.jsonl", std::process::id()));
        let header = r#"{"format":"wasmlet-record","version":1,"plugin":"p","digest":"d","manifest":"","redacted":true}"#;
        let call = serde_json::json!({
            "seq": 1, "at": "t", "plugin": "p", "digest": "d", "call": "reconcile",
            "key": "ns/s1", "insecure-seed": "0",
            "input": {"apiVersion": "examples.wasmlet.dev/v1", "kind": "ConfigSummary",
                      "metadata": {"name": "s1", "namespace": "ns"}, "spec": {}},
            "imports": [{"op": "client.list", "args": {}, "result": {"ok": [
                {"apiVersion": "v1", "kind": "ConfigMap",
                 "metadata": {"name": "a", "namespace": "ns", "labels": {"x": "s1"}}, "data": {"k": "v"}}
            ]}}, {"op": "clusters.get", "args": {"cluster": "eu-west", "target": {}}, "result": {"ok":
                {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "r", "namespace": "ns"}}
            }}],
            "outcome": {"kind": "reconciled", "status": {"keys": 1}, "conditions": [], "requeue-after-ms": null},
        });
        // Version 2 (provider calls added) reads alike; another does not.
        let v2 = header.replace("\"version\":1", "\"version\":2");
        std::fs::write(&path, format!("{v2}\n{call}\n")).unwrap();
        assert_eq!(RecordedCall::all(&path).unwrap().len(), 1);
        let v3 = header.replace("\"version\":1", "\"version\":3");
        std::fs::write(&path, format!("{v3}\n{call}\n")).unwrap();
        let e = RecordedCall::all(&path).unwrap_err();
        assert!(
            e.contains("record format 3 (this SDK reads 1 and 2)"),
            "{e}"
        );
        std::fs::write(&path, format!("{header}\n{call}\n")).unwrap();
        let c = RecordedCall::load(&path, 1).unwrap();
        let _ = std::fs::remove_file(&path);
        assert_eq!((c.key.as_str(), c.call.as_str()), ("ns/s1", "reconcile"));
        let input: Value = c.input();
        assert_eq!(input["metadata"]["name"], "s1");
        assert_eq!(c.status(), Some(&serde_json::json!({"keys": 1})));
        let _guard = c.host().install();
        let cms: Vec<ConfigMap> = Client::new()
            .list(&ListParams::namespaced("ns").labels("x=s1"))
            .unwrap();
        assert_eq!(cms.len(), 1);
        // A named cluster's reads seed that cluster's fake, and only it.
        let remote: Option<ConfigMap> =
            Client::new().cluster("eu-west").get_opt("ns", "r").unwrap();
        assert!(remote.is_some());
        let own: Option<ConfigMap> = Client::new().get_opt("ns", "r").unwrap();
        assert!(own.is_none());
    }

    #[test]
    fn a_recorded_provider_call_gives_its_state_event_and_workload_calls() {
        let path = std::env::temp_dir().join(format!(
            "wasmlet-sdk-provider-record-{}.jsonl",
            std::process::id()
        ));
        let header = r#"{"format":"wasmlet-record","version":2,"plugin":"wasi-runner","digest":"d","manifest":"","redacted":true}"#;
        let call = serde_json::json!({
            "seq": 1, "at": "t", "plugin": "wasi-runner", "digest": "d", "call": "handle",
            "key": "default/hello", "insecure-seed": "0",
            "input": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "hello", "namespace": "default"}},
            "state": "Running", "state-data": {"handle": 3}, "event": {"workload-exited": 3},
            "imports": [
                {"op": "workloads.status", "args": {"handle": 3},
                 "result": {"ok": {"state": {"Exited": 0}}}},
                {"op": "client.get", "args": {}, "result": {"ok": null}},
            ],
            "outcome": {"kind": "transition", "to": "Completed", "state-data": {}},
        });
        std::fs::write(&path, format!("{header}\n{call}\n")).unwrap();
        let c = RecordedCall::last_for(&path, "default/hello").unwrap();
        let _ = std::fs::remove_file(&path);
        assert_eq!(c.call, "handle");
        assert_eq!(c.state(), Some("Running"));
        assert_eq!(c.state_data(), Some(&serde_json::json!({"handle": 3})));
        assert_eq!(c.event(), Some(&serde_json::json!({"workload-exited": 3})));
        let calls = c.workload_calls();
        assert_eq!(calls.len(), 1);
        assert_eq!(calls[0].0, "status");
        assert_eq!(calls[0].2["ok"]["state"]["Exited"], 0);
        assert_eq!(c.outcome()["to"], "Completed");
    }
}
