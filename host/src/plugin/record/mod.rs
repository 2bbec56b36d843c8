//! Recording guest calls, and replaying them against any build of a plugin
//! with no cluster (issue 15).
//!
//! The host owns every input of a guest call: the object (a provider's pod,
//! state and state data), each import's answer (a provider's workloads
//! too), the WASI clocks and random. A recording plugin (manifest
//! `[record]`, or `wasmlet up|run --record NAME`), reconciler or provider,
//! gets a [`Tape`] in each call's store; the imports ([`super::imports`])
//! and the tape's clocks and random sources ([`tape`](crate::plugin::tape)) write every request
//! and its answer to it, so a call can be run again with each answer taken
//! from the tape ([`replay`], `wasmlet replay`).
//!
//! # The record format, version 2
//!
//! Version 2 (written since issue 15's provider recording) adds provider
//! calls: the `init`, `handle` and `status` call kinds, the `state`,
//! `state-data` and `event` fields, the `workloads.*` imports and the
//! provider outcomes. A reconciler's call is written exactly as in version
//! 1, and version-1 files (reconciler calls only) are read as they are.
//!
//! JSON lines, one file per plugin: `DATA_DIR/records/NAME.jsonl`, rotated to
//! `NAME.jsonl.1` .. `NAME.jsonl.N` when it would pass its size
//! (`[record] max-file-mib`, default 16; `max-files`, default 3). Each file
//! starts with a **header** line, which is repeated before the first record of
//! another plugin version (digest) or manifest:
//!
//! ```json
//! {"format":"wasmlet-record","version":2,"plugin":"configmap-summary",
//!  "digest":"<sha256 of the .wasm>","manifest":"<the manifest's TOML>","redacted":true}
//! ```
//!
//! Every other line is one **call**:
//!
//! ```json
//! {"seq":1,"at":"2026-11-25T02:10:00.123Z","plugin":"configmap-summary","digest":"...",
//!  "call":"reconcile","key":"default/s1","input":{...the object...},
//!  "insecure-seed":"<u128, hex>",
//!  "imports":[{"op":"client.list","args":{...},"result":{"ok":[...]}},
//!             {"op":"clock.wall","result":1764036600123000000}, ...],
//!  "outcome":{"kind":"reconciled","status":{...},"conditions":[...],"requeue-after-ms":null},
//!  "host-writes":[{"op":"patch-status","key":"default/s1","body":{...},"result":{"ok":"123"}}]}
//! ```
//!
//! A provider's call (one per export call, `key` the pod's `namespace/name`,
//! `input` the pod):
//!
//! ```json
//! {"seq":7,"at":"...","plugin":"wasi-runner","digest":"...","call":"handle","key":"default/p1",
//!  "input":{...the pod...},"state":"Running","state-data":{...},"event":{"workload-exited":3},
//!  "insecure-seed":"...",
//!  "imports":[{"op":"workloads.status","args":{"handle":3},
//!              "result":{"ok":{"state":{"Exited":0},"started_at_ms":...,"finished_at_ms":...}}},
//!             {"op":"clock.wall","result":...}, ...],
//!  "outcome":{"kind":"transition","to":"Completed","state-data":{...}}}
//! ```
//!
//! - `call`: `reconcile` or `finalize` (reconcilers); `init`, `handle` or
//!   `status` (providers). `seq` counts the plugin's records since the host
//!   started.
//! - `state` (`handle`, `status`): the pod's state; `state-data`: the state
//!   data the call was given, as the JSON it holds (text that is not JSON as
//!   a string); `event` (`handle`, absent on entering a state): the wake event
//!   in the WIT's spelling, `"timer-elapsed"`, `"pod-changed"`,
//!   `{"workload-exited": HANDLE}` or `{"fetch-done": ID}`.
//! - `imports`, in the order the guest made them. `op` is the WIT interface
//!   and function (`client.get`, `client.list`, `client.create`,
//!   `client.update`, `client.patch`, `client.patch-status`, `client.delete`,
//!   `client.evict`, `client.bind`, `client.record-event`; the named clusters'
//!   `clusters.get`, `clusters.list`, `clusters.create`, `clusters.update`,
//!   `clusters.patch`, `clusters.patch-status`, `clusters.delete`, whose
//!   `args` add `"cluster": NAME` to `client`'s; `http.fetch`,
//!   `log.enabled`, `log.log`; a provider's `workloads.fetch-module`,
//!   `workloads.prepare-volume`, `workloads.spawn`, `workloads.status`,
//!   `workloads.kill`, `workloads.read-logs` (logs as `{"text":..}` or
//!   `{"base64":..}`), `workloads.release-pod`) or a WASI read (`clock.wall` and
//!   `clock.monotonic`: nanoseconds; `random.secure` and `random.insecure`:
//!   `args.len` bytes, hex). `args` are the contract's arguments (records in
//!   their Rust field names, variants as serde's externally tagged enums;
//!   objects and patch bodies as JSON values; HTTP bodies as `{"text":..}` or
//!   `{"base64":..}`). `result` is `{"ok": ...}` or `{"err": <the contract's
//!   error variant>}` for fallible calls, the plain value otherwise.
//! - `outcome.kind`: `reconciled` (status, conditions, requeue-after-ms),
//!   `finalized` (done, retry-after-ms), `guest-error` (terminal, reason,
//!   message, status, conditions) or `failed` (error: a trap, timeout,
//!   out-of-memory or refused result). Providers: `initialized` (`init`:
//!   state-data), `transition` (to, state-data), `wait` (on: `{"workload-exited":
//!   H}`, `{"timer": MS}`, `"pod-changed"`, `{"fetch-done": ID}`; state-data),
//!   `handler-error` (message; `init` or `handle` returned an error),
//!   `pod-status` (`status`: the PodStatus fragment) or `failed`.
//! - `host-writes`: what the host wrote because of the outcome (the status
//!   patch, the finalizer's removal), with the resourceVersion stored or the
//!   error. Providers: a `status` call's record has the pod status patch the
//!   host made of its fragment (`patch-status`), and the on-delete state's
//!   last `handle` (a `wait` on nothing) the pod's removal (`delete`, grace
//!   0, the pod's uid as precondition); other provider calls cause none.
//! - A replay's writes (compared besides the outcome) are the requests of
//!   `client.create`, `update`, `patch`, `patch-status`, `delete`, `evict`,
//!   `bind`, and a provider's `workloads.prepare-volume`, `spawn`, `kill` and
//!   `release-pod`.
//!
//! Redaction (unless `[record] keep-secrets = true`; the header says
//! `"redacted"`): every value of a Secret's `data` and `stringData` and its
//! `last-applied-configuration` annotation, wherever a Secret appears (the
//! input, read results, write arguments and results), becomes `"<redacted>"`;
//! so do the values of `authorization`, `proxy-authorization`, `cookie` and
//! `set-cookie` headers, and the request and response bodies of HTTP calls to
//! the hosts in `[record] sensitive-http-hosts`; and, in a provider's
//! records, every environment value of `workloads.spawn` and the contents of
//! every file of a `workloads.prepare-volume` (either may hold a Secret's
//! values, and the host cannot tell which do). A replay sees the redacted
//! values, and redacts the guest's requests alike before matching them.
//! Workload logs a provider reads (`workloads.read-logs`, for a termination
//! message) are recorded as they are: a workload that prints a secret puts
//! it there.

pub(crate) mod provider;
pub(crate) mod replay;
mod writer;

use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

pub(crate) use crate::plugin::observe::PendingRecord;
use crate::plugin::observe::{HostWrites, Observed, Watcher};
pub(crate) use crate::plugin::outcome::{CallKind, Outcome};
pub(crate) use crate::plugin::tape::{Entry, Redaction, TapeMode, Taped};
use wasmlet_apimachinery::time::now_rfc3339_millis;
pub(crate) use writer::{RecordSettings, RecordWriter};

/// The `format` of a header line.
pub(crate) const FORMAT: &str = "wasmlet-record";
/// The format version this host writes.
pub(crate) const FORMAT_VERSION: u32 = 2;
/// The format versions this host reads (version 1: reconciler calls only,
/// each of which reads the same in version 2).
pub(crate) const READS_VERSIONS: [u32; 2] = [1, 2];

/// The first line of a record file, repeated when the plugin version changes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(crate) struct Header {
    pub(crate) format: String,
    pub(crate) version: u32,
    pub(crate) plugin: String,
    /// The plugin version: sha256 of its `.wasm`.
    pub(crate) digest: String,
    /// The manifest's TOML, as loaded.
    pub(crate) manifest: String,
    pub(crate) redacted: bool,
}

/// One guest call, complete.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(crate) struct CallRecord {
    pub(crate) seq: u64,
    pub(crate) at: String,
    pub(crate) plugin: String,
    pub(crate) digest: String,
    pub(crate) call: CallKind,
    pub(crate) key: String,
    pub(crate) input: Value,
    /// Provider `handle` and `status`: the pod's state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) state: Option<String>,
    /// Provider `handle` and `status`: the state data the call was given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) state_data: Option<Value>,
    /// Provider `handle`: the wake event (absent on entering the state).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) event: Option<Value>,
    /// `wasi:random/insecure-seed`'s answer for this call's store, hex.
    pub(crate) insecure_seed: String,
    pub(crate) imports: Vec<Entry>,
    pub(crate) outcome: Outcome,
    #[serde(default)]
    pub(crate) host_writes: Vec<HostWrite>,
}

/// A write the host made because of a call's outcome.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct HostWrite {
    /// `patch-status` (the host-owned status), `patch` (finalizers) or
    /// `delete` (a provider's pod, removed after its teardown).
    pub(crate) op: String,
    pub(crate) key: String,
    pub(crate) body: Value,
    /// `{"ok": resourceVersion}` or `{"err": message}`.
    pub(crate) result: Value,
}

/// One plugin version's recording: where its records go and how they are redacted.
pub(crate) struct Recording {
    pub(crate) writer: Arc<RecordWriter>,
    pub(crate) manifest_text: Arc<str>,
    pub(crate) redaction: Redaction,
}

impl Recording {
    /// Holds `record` until the host has made its writes (or the call's report
    /// is dropped), then writes it.
    pub(crate) fn pending(&self, record: CallRecord) -> Arc<PendingRecord> {
        Arc::new(Waiting {
            record: Mutex::new(Some(record)),
            writer: self.writer.clone(),
            manifest: self.manifest_text.clone(),
            redacted: self.redaction.redacts(),
        })
    }

    /// The record of a call that just ran.
    fn record_of(&self, call: Observed<'_>) -> CallRecord {
        let mut input = serde_json::from_str(call.obj).unwrap_or(Value::Null);
        self.redaction.object(&mut input);
        let (state, state_data, event) = call
            .provider
            .map(provider::record_fields)
            .unwrap_or_default();
        CallRecord {
            seq: self.writer.next_seq(),
            at: now_rfc3339_millis(),
            plugin: call.plugin.to_string(),
            digest: call.digest.to_string(),
            call: call.call,
            key: call.key.to_string(),
            input,
            state,
            state_data,
            event,
            insecure_seed: format!("{:x}", call.taped.seed),
            imports: call.taped.entries,
            outcome: call.outcome,
            host_writes: Vec::new(),
        }
    }
}

/// A recording watches every live call of its version: each one's record
/// waits for the host's writes for it, then is written.
impl Watcher for Recording {
    fn watches(&self) -> bool {
        true
    }

    fn seen(&self, call: Observed<'_>) -> Option<Arc<PendingRecord>> {
        Some(self.pending(self.record_of(call)))
    }

    fn redaction(&self) -> Option<&Redaction> {
        Some(&self.redaction)
    }
}

/// A call's record, waiting for the host writes the outcome causes; written
/// when the last holder drops it.
struct Waiting {
    record: Mutex<Option<CallRecord>>,
    writer: Arc<RecordWriter>,
    manifest: Arc<str>,
    redacted: bool,
}

impl std::fmt::Debug for Waiting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PendingRecord")
    }
}

impl HostWrites for Waiting {
    fn host_write(&self, op: &str, key: &str, body: &Value, result: Result<Option<&str>, String>) {
        let result = match result {
            Ok(rv) => json!({ "ok": rv }),
            Err(e) => json!({ "err": e }),
        };
        let mut r = self.record.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(r) = r.as_mut() {
            r.host_writes.push(HostWrite {
                op: op.into(),
                key: key.into(),
                body: body.clone(),
                result,
            });
        }
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        let record = self
            .record
            .get_mut()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(r) = record {
            self.writer.write(r, self.manifest.clone(), self.redacted);
        }
    }
}
