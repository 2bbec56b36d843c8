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

use std::path::Path;

use serde::de::DeserializeOwned;
use serde_json::Value;

use super::FakeHost;

/// One recorded call: its input, what it read and what it returned.
#[derive(Debug, Clone)]
pub struct RecordedCall {
    /// `namespace/name`.
    pub key: String,
    /// `reconcile` or `finalize`.
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
    /// `list` items), so the guest's reads answer as they did.
    pub fn host(&self) -> FakeHost {
        let host = FakeHost::new();
        for e in self.record["imports"].as_array().into_iter().flatten() {
            match e["op"].as_str() {
                Some("client.get") => {
                    if let Some(o) = e["result"].get("ok") {
                        host.insert(o.clone());
                    }
                }
                Some("client.list") => {
                    for o in e["result"]["ok"].as_array().into_iter().flatten() {
                        host.insert(o.clone());
                    }
                }
                _ => {}
            }
        }
        host
    }

    /// The recorded outcome (`kind`: `reconciled`, `finalized`, `guest-error` or `failed`).
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
            ]}}],
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
    }
}
