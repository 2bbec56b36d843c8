//! Reading record files, and judging a replayed call against its record.

use std::path::Path;
use std::sync::Arc;

use serde_json::{Value, json};

use super::{CallRecord, Entry, FORMAT, Header, Outcome, READS_VERSIONS, TapeMode, Taped};
use crate::plugin::observe::{Again, RunAgain, Taping};
use crate::plugin::tape::is_write;

/// A record file that cannot be read, naming where.
#[derive(Debug, thiserror::Error)]
#[error("{file}:{line}: {field}: {message}")]
pub(crate) struct ReadError {
    pub(crate) file: String,
    /// 1-based; 0 when the file itself cannot be read.
    pub(crate) line: usize,
    /// The JSON path of the bad field (`-`: the line as a whole).
    pub(crate) field: String,
    pub(crate) message: String,
}

/// One call read from a file, with the header it came under.
#[derive(Debug, Clone)]
pub(crate) struct Recorded {
    pub(crate) file: String,
    pub(crate) line: usize,
    pub(crate) header: Arc<Header>,
    pub(crate) record: CallRecord,
}

/// Every call in the record file at `path`. An incomplete last line (a file
/// still being written, or cut by a crash) is skipped; any other bad line is an error.
pub(crate) fn read_file(path: &Path) -> Result<Vec<Recorded>, ReadError> {
    let file = path.display().to_string();
    let err = |line: usize, field: &str, message: String| ReadError {
        file: file.clone(),
        line,
        field: field.into(),
        message,
    };
    let text = std::fs::read_to_string(path).map_err(|e| err(0, "-", e.to_string()))?;
    let complete = text.ends_with('\n');
    let lines: Vec<&str> = text.lines().collect();
    let mut header: Option<Arc<Header>> = None;
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let n = i + 1;
        if line.trim().is_empty() {
            continue;
        }
        let value: Value = match serde_json::from_str(line) {
            Ok(v) => v,
            Err(_) if !complete && n == lines.len() => {
                tracing::warn!(file = %file, line = n, "skipping an incomplete last line");
                break;
            }
            Err(e) => return Err(err(n, "-", format!("not JSON: {e}"))),
        };
        let is_header = value.get("format").is_some();
        if is_header {
            let h: Header = serde_path_to_error::deserialize(value)
                .map_err(|e| err(n, &e.path().to_string(), e.inner().to_string()))?;
            if h.format != FORMAT {
                return Err(err(
                    n,
                    "format",
                    format!(
                        "\"{}\" is not a wasmlet record file (\"{FORMAT}\")",
                        h.format
                    ),
                ));
            }
            if !READS_VERSIONS.contains(&h.version) {
                return Err(err(
                    n,
                    "version",
                    format!(
                        "format version {}; this wasmlet reads versions {READS_VERSIONS:?}",
                        h.version
                    ),
                ));
            }
            header = Some(Arc::new(h));
            continue;
        }
        let Some(h) = &header else {
            return Err(err(
                n,
                "-",
                "a call before any header line (the file must start with one)".into(),
            ));
        };
        let record: CallRecord = serde_path_to_error::deserialize(value)
            .map_err(|e| err(n, &e.path().to_string(), e.inner().to_string()))?;
        out.push(Recorded {
            file: file.clone(),
            line: n,
            header: h.clone(),
            record,
        });
    }
    Ok(out)
}

/// Runs `record`'s call again on `plugin` (loaded for replay), every import
/// answered from the record.
pub(crate) async fn replay(plugin: &dyn RunAgain, record: &CallRecord) -> (Outcome, Taped) {
    let provider = match super::provider::call_of(record).transpose() {
        Ok(p) => p,
        Err(bad) => {
            let error = bad.to_string();
            return (Outcome::Failed { error }, Taped::default());
        }
    };
    let again = Again {
        call: record.call,
        key: record.key.clone(),
        obj: record.input.to_string(),
        provider,
        taping: Taping {
            mode: TapeMode::Replay(record.imports.clone()),
            seed: u128::from_str_radix(&record.insecure_seed, 16).unwrap_or(0),
        },
    };
    plugin.run_again(again).await
}

/// How a replayed call compares with its record.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Verdict {
    Same,
    /// Outcome or writes differ: each difference with its JSON path.
    Different(Vec<Difference>),
    /// The guest asked for something the record has no answer for.
    Diverged(Entry),
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Difference {
    pub(crate) path: String,
    pub(crate) recorded: Value,
    pub(crate) replayed: Value,
}

/// The writes (requests only) among `entries`.
fn writes(entries: &[Entry]) -> Value {
    Value::Array(
        entries
            .iter()
            .filter(|e| is_write(&e.op))
            .map(|e| json!({ "op": e.op, "args": e.args }))
            .collect(),
    )
}

/// Judges the replay of `record` that ended in `outcome` with `taped`.
pub(crate) fn judge(record: &CallRecord, outcome: &Outcome, taped: &Taped) -> Verdict {
    if let Some(asked) = &taped.diverged {
        return Verdict::Diverged(asked.clone());
    }
    let recorded = json!({ "outcome": record.outcome, "writes": writes(&record.imports) });
    let replayed = json!({ "outcome": outcome, "writes": writes(&taped.writes) });
    let mut out = Vec::new();
    diff("", &recorded, &replayed, &mut out);
    if out.is_empty() {
        Verdict::Same
    } else {
        Verdict::Different(out)
    }
}

/// The paths (JSON pointers) where `a` and `b` differ, with both values.
pub(crate) fn diff(path: &str, a: &Value, b: &Value, out: &mut Vec<Difference>) {
    if a == b {
        return;
    }
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let mut keys: Vec<&String> = x.keys().chain(y.keys()).collect();
            keys.dedup();
            let mut seen = std::collections::BTreeSet::new();
            for k in keys {
                if !seen.insert(k) {
                    continue;
                }
                let p = format!("{path}/{}", k.replace('~', "~0").replace('/', "~1"));
                diff(
                    &p,
                    x.get(k).unwrap_or(&Value::Null),
                    y.get(k).unwrap_or(&Value::Null),
                    out,
                );
            }
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            for (i, (p, q)) in x.iter().zip(y).enumerate() {
                diff(&format!("{path}/{i}"), p, q, out);
            }
        }
        _ => out.push(Difference {
            path: if path.is_empty() {
                "/".into()
            } else {
                path.into()
            },
            recorded: a.clone(),
            replayed: b.clone(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugin::record::CallKind;

    const HEADER: &str = r#"{"format":"wasmlet-record","version":1,"plugin":"p","digest":"d","manifest":"","redacted":true}"#;

    fn call(seq: u64) -> String {
        serde_json::to_string(&CallRecord {
            seq,
            at: "t".into(),
            plugin: "p".into(),
            digest: "d".into(),
            call: CallKind::Reconcile,
            key: "ns/a".into(),
            input: json!({}),
            state: None,
            state_data: None,
            event: None,
            insecure_seed: "1".into(),
            imports: vec![],
            outcome: Outcome::Failed { error: "x".into() },
            host_writes: vec![],
        })
        .unwrap()
    }

    fn read(text: &str) -> Result<Vec<Recorded>, ReadError> {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("p.jsonl");
        std::fs::write(&p, text).unwrap();
        read_file(&p).map_err(|mut e| {
            e.file = "p.jsonl".into();
            e
        })
    }

    #[test]
    fn malformed_files_are_named_by_line_and_field() {
        let ok = read(&format!("{HEADER}\n{}\n{}\n", call(1), call(2))).unwrap();
        assert_eq!(ok.len(), 2);
        assert_eq!((ok[1].line, ok[1].record.seq), (3, 2));
        // An incomplete last line is skipped.
        let cut = format!("{HEADER}\n{}\n{}", call(1), &call(2)[..20]);
        assert_eq!(read(&cut).unwrap().len(), 1);

        let e = read(&format!("{}\n", call(1))).unwrap_err();
        assert_eq!((e.line, e.field.as_str()), (1, "-"), "{e}");
        let bad = call(1).replace("\"reconcile\"", "\"provide\"");
        let e = read(&format!("{HEADER}\n{bad}\n")).unwrap_err();
        assert_eq!((e.line, e.field.as_str()), (2, "call"), "{e}");
        let bad = call(1).replace(
            "\"outcome\":{\"kind\":\"failed\",\"error\":\"x\"}",
            "\"outcome\":{\"kind\":\"failed\"}",
        );
        let e = read(&format!("{HEADER}\n{bad}\n")).unwrap_err();
        assert_eq!(e.field, "outcome", "{e}");
        assert!(
            e.to_string()
                .starts_with("p.jsonl:2: outcome: missing field `error`"),
            "{e}"
        );
        let e = read(&format!(
            "{}\n",
            HEADER.replace("\"version\":1", "\"version\":9")
        ))
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "p.jsonl:1: version: format version 9; this wasmlet reads versions [1, 2]"
        );
        let e = read(&format!("{HEADER}\n{{\"seq\": \n{}\n", call(1))).unwrap_err();
        assert_eq!(e.line, 2, "{e}");
    }

    #[test]
    fn differences_are_listed_by_path() {
        let mut out = Vec::new();
        diff(
            "",
            &json!({"outcome": {"status": {"keys": 3, "same": 1}}, "writes": []}),
            &json!({"outcome": {"status": {"keys": 4, "same": 1}}, "writes": [{"op": "client.delete"}]}),
            &mut out,
        );
        let paths: Vec<&str> = out.iter().map(|d| d.path.as_str()).collect();
        assert_eq!(paths, ["/outcome/status/keys", "/writes"]);
        assert_eq!(out[0].replayed, json!(4));
    }

    #[test]
    fn version_1_and_provider_calls_of_version_2_read() {
        let v1 = read(&format!("{HEADER}\n{}\n", call(1))).unwrap();
        assert_eq!(v1[0].header.version, 1);
        let v2 = HEADER.replace("\"version\":1", "\"version\":2");
        let handle = r#"{"seq":2,"at":"t","plugin":"p","digest":"d","call":"handle","key":"ns/pod",
            "input":{"kind":"Pod"},"state":"Running","state-data":{"uid":"u"},
            "event":{"workload-exited":4},"insecure-seed":"1",
            "imports":[{"op":"workloads.status","args":{"handle":4},
                        "result":{"ok":{"state":{"Exited":0},"started_at_ms":1,"finished_at_ms":2}}}],
            "outcome":{"kind":"transition","to":"Completed","state-data":{"uid":"u"}}}"#
            .replace('\n', "");
        let got = read(&format!("{v2}\n{handle}\n")).unwrap();
        let r = &got[0].record;
        assert_eq!(
            (r.call, r.state.as_deref()),
            (CallKind::Handle, Some("Running"))
        );
        let call = crate::plugin::record::provider::call_of(r)
            .expect("a provider call")
            .expect("well formed");
        assert!(
            matches!(&call, crate::plugin::record::provider::ProviderCall::Handle {
                event: Some(crate::plugin::provider::WakeEvent::WorkloadExited(4)), data, ..
            } if data == r#"{"uid":"u"}"#),
            "{call:?}"
        );
        let bad = handle.replace(
            r#""kind":"transition","to":"Completed""#,
            r#""kind":"transition""#,
        );
        let e = read(&format!("{v2}\n{bad}\n")).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("p.jsonl:2: outcome: missing field `to`"),
            "{e}"
        );
    }

    #[test]
    fn a_provider_replay_that_spawns_less_differs_on_its_writes() {
        let spawn = Entry {
            op: "workloads.spawn".into(),
            args: json!({"spec": {"module": "sha256:ab"}}),
            result: json!({"ok": 3}),
        };
        let status = Entry {
            op: "workloads.status".into(),
            args: json!({"handle": 3}),
            result: json!({"ok": {"state": "Running"}}),
        };
        let outcome = Outcome::Transition {
            to: "Running".into(),
            state_data: json!({}),
        };
        let mut record: CallRecord = serde_json::from_str(&call(1)).unwrap();
        record.call = CallKind::Handle;
        record.imports = vec![spawn.clone(), status];
        record.outcome = outcome.clone();
        // The same spawn (a status read is no write): the same.
        let taped = Taped {
            writes: vec![spawn],
            ..Taped::default()
        };
        assert_eq!(judge(&record, &outcome, &taped), Verdict::Same);
        // No spawn at all: different, on the writes.
        let Verdict::Different(ds) = judge(&record, &outcome, &Taped::default()) else {
            panic!("not different");
        };
        assert_eq!(ds.len(), 1);
        assert_eq!(ds[0].path, "/writes");
    }
}
