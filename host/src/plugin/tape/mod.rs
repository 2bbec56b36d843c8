//! One call's tape: while recording, every import and WASI clock or random
//! read is appended with its answer; while replaying, each is answered from
//! the recorded entries instead, and the first request the record cannot
//! answer is kept as the divergence.
//!
//! The tape sits below recording (`record`), shadowing (`shadow`) and the
//! live call (`loaded`): the store holds it and the imports write to it,
//! whoever watches the call ([`super::observe`]) chooses its [`TapeMode`] and
//! takes what it holds afterwards ([`Taped`]).
//!
//! A store keeps its tape for its lifetime (its WASI context holds the
//! clocks), so a reused instance is taped call by call: [`Tape::start`] and
//! [`Tape::finish`] bracket each call; between calls the tape is off and reads
//! go straight to the real clocks and generators.

mod answer;
mod redact;

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use wasmtime_wasi::{HostMonotonicClock, HostWallClock};

pub(crate) use answer::{json_string_answer, json_string_result, result_answer, result_json};
pub(crate) use redact::Redaction;

/// One import call with its answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Entry {
    pub(crate) op: String,
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub(crate) args: Value,
    #[serde(default)]
    pub(crate) result: Value,
}

/// What a call's tape does.
#[derive(Debug, Clone)]
pub(crate) enum TapeMode {
    Off,
    Record,
    /// Answer from these entries.
    Replay(Vec<Entry>),
    /// A shadow candidate's call, answered from the live call's entries
    /// (redacted as those were): cluster reads the live call did not make are
    /// read live, and clock or random reads past the record's are real
    /// instead of divergences; any other request the record cannot answer is
    /// held back and is the divergence.
    Shadow {
        entries: Vec<Entry>,
        redaction: Redaction,
    },
}

/// What a call left on its tape.
#[derive(Debug, Default, Clone)]
pub(crate) struct Taped {
    /// Recording: every entry, in order.
    pub(crate) entries: Vec<Entry>,
    /// Replaying: the first request the record had no answer for.
    pub(crate) diverged: Option<Entry>,
    /// Replaying: the writes the guest asked for, in order (as recorded entries).
    pub(crate) writes: Vec<Entry>,
    pub(crate) seed: u128,
}

#[derive(Default)]
struct Inner {
    recording: bool,
    replaying: bool,
    shadowing: bool,
    entries: Vec<Entry>,
    used: Vec<bool>,
    diverged: Option<Entry>,
    writes: Vec<Entry>,
}

pub(crate) struct Tape {
    inner: Mutex<Inner>,
    /// `wasi:random/insecure-seed` of the store (fixed per WASI context).
    pub(crate) seed: u128,
    pub(crate) redaction: Redaction,
}

/// Import functions that change the cluster, or (a provider's) the node:
/// their requests make up a call's writes. A cluster function is named once
/// for `client` and `clusters` alike.
pub(crate) fn is_write(op: &str) -> bool {
    match op.split_once('.') {
        Some(("client" | "clusters", function)) => matches!(
            function,
            "create" | "update" | "patch" | "patch-status" | "delete" | "evict" | "bind"
        ),
        Some(("workloads", function)) => matches!(
            function,
            "prepare-volume" | "spawn" | "kill" | "release-pod"
        ),
        _ => false,
    }
}

impl Tape {
    pub(crate) fn new(redaction: Redaction, seed: u128) -> Arc<Tape> {
        Arc::new(Tape {
            inner: Mutex::new(Inner::default()),
            seed,
            redaction,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn start(&self, mode: TapeMode) {
        let mut i = self.lock();
        *i = Inner::default();
        match mode {
            TapeMode::Off => {}
            TapeMode::Record => i.recording = true,
            TapeMode::Replay(entries) => {
                i.replaying = true;
                i.used = vec![false; entries.len()];
                i.entries = entries;
            }
            TapeMode::Shadow { entries, .. } => {
                i.replaying = true;
                i.shadowing = true;
                i.used = vec![false; entries.len()];
                i.entries = entries;
            }
        }
    }

    pub(crate) fn finish(&self) -> Taped {
        let mut i = std::mem::take(&mut *self.lock());
        Taped {
            entries: if i.recording {
                std::mem::take(&mut i.entries)
            } else {
                Vec::new()
            },
            diverged: i.diverged,
            writes: i.writes,
            seed: self.seed,
        }
    }

    pub(crate) fn replaying(&self) -> bool {
        self.lock().replaying
    }

    pub(crate) fn recording(&self) -> bool {
        self.lock().recording
    }

    /// Whether this call is a shadow candidate's (see [`TapeMode::Shadow`]).
    pub(crate) fn shadowing(&self) -> bool {
        self.lock().shadowing
    }

    /// Appends an import and its answer (redacted), when recording.
    pub(crate) fn record(&self, op: &str, args: Value, result: Value) {
        let mut i = self.lock();
        if !i.recording {
            return;
        }
        let mut e = Entry {
            op: op.into(),
            args,
            result,
        };
        self.redaction.entry(&mut e);
        i.entries.push(e);
    }

    /// Replaying: the answer of the first unused entry for the same request
    /// (`op` and `args`, compared as the record holds them: redacted). `None`
    /// when the record has none; the first such request is the divergence.
    /// `optional` requests (log lines) never diverge.
    pub(crate) fn answer(&self, op: &str, args: Value, optional: bool) -> Option<Value> {
        let mut asked = Entry {
            op: op.into(),
            args,
            result: Value::Null,
        };
        self.redaction.entry(&mut asked);
        let mut i = self.lock();
        if is_write(op) {
            i.writes.push(asked.clone());
        }
        let found = (0..i.entries.len()).find(|&n| {
            !i.used[n] && i.entries[n].op == asked.op && i.entries[n].args == asked.args
        });
        match found {
            Some(n) => {
                i.used[n] = true;
                Some(i.entries[n].result.clone())
            }
            None => {
                if !optional && i.diverged.is_none() {
                    i.diverged = Some(asked);
                }
                None
            }
        }
    }

    /// A clock read: the real one (taped when recording) or, replaying, the recorded one.
    fn clock(&self, op: &str, real: impl FnOnce() -> u64) -> u64 {
        if self.replaying() {
            return self
                .answer(op, Value::Null, self.shadowing())
                .and_then(|v| v.as_u64())
                .unwrap_or_else(real);
        }
        let now = real();
        self.record(op, Value::Null, json!(now));
        now
    }

    /// Random bytes: the real generator's (taped when recording) or,
    /// replaying, the recorded ones.
    fn random(&self, op: &str, dst: &mut [u8], real: &mut dyn wasmtime_wasi::Rng) {
        let args = json!({ "len": dst.len() });
        if self.replaying() {
            let bytes = self
                .answer(op, args, self.shadowing())
                .and_then(|v| hex::decode(v.as_str()?).ok())
                .filter(|b| b.len() == dst.len());
            match bytes {
                Some(b) => dst.copy_from_slice(&b),
                None => real.fill_bytes(dst),
            }
            return;
        }
        real.fill_bytes(dst);
        if self.recording() {
            self.record(op, args, json!(hex::encode(&*dst)));
        }
    }
}

/// `wasi:clocks/wall-clock` through a tape.
pub(crate) struct TapeWallClock(pub Arc<Tape>);

impl HostWallClock for TapeWallClock {
    fn resolution(&self) -> Duration {
        wasmtime_wasi::clocks::WallClock::new().resolution()
    }

    fn now(&self) -> Duration {
        let ns = self.0.clock("clock.wall", || {
            wasmtime_wasi::clocks::WallClock::new().now().as_nanos() as u64
        });
        Duration::from_nanos(ns)
    }
}

/// `wasi:clocks/monotonic-clock` through a tape.
pub(crate) struct TapeMonotonicClock {
    pub(crate) tape: Arc<Tape>,
    pub(crate) real: wasmtime_wasi::clocks::MonotonicClock,
}

impl HostMonotonicClock for TapeMonotonicClock {
    fn resolution(&self) -> u64 {
        self.real.resolution()
    }

    fn now(&self) -> u64 {
        self.tape.clock("clock.monotonic", || self.real.now())
    }
}

/// `wasi:random/random` or `wasi:random/insecure` through a tape.
pub(crate) struct TapeRng {
    pub(crate) tape: Arc<Tape>,
    /// `random.secure` or `random.insecure`.
    pub(crate) op: &'static str,
    pub(crate) real: Box<dyn wasmtime_wasi::Rng + Send>,
}

impl rand_core::TryRng for TapeRng {
    type Error = Infallible;

    fn try_next_u32(&mut self) -> Result<u32, Infallible> {
        let mut b = [0u8; 4];
        self.try_fill_bytes(&mut b)?;
        Ok(u32::from_le_bytes(b))
    }

    fn try_next_u64(&mut self) -> Result<u64, Infallible> {
        let mut b = [0u8; 8];
        self.try_fill_bytes(&mut b)?;
        Ok(u64::from_le_bytes(b))
    }

    fn try_fill_bytes(&mut self, dst: &mut [u8]) -> Result<(), Infallible> {
        self.tape.random(self.op, dst, &mut *self.real);
        Ok(())
    }
}

/// Puts `tape`'s clocks and random sources into a WASI context being built.
pub(crate) fn install(builder: &mut wasmtime_wasi::WasiCtxBuilder, tape: &Arc<Tape>) {
    builder
        .wall_clock(TapeWallClock(tape.clone()))
        .monotonic_clock(TapeMonotonicClock {
            tape: tape.clone(),
            real: wasmtime_wasi::clocks::MonotonicClock::new(),
        })
        .secure_random(TapeRng {
            tape: tape.clone(),
            op: "random.secure",
            real: wasmtime_wasi::thread_rng(),
        })
        .insecure_random(TapeRng {
            tape: tape.clone(),
            op: "random.insecure",
            real: wasmtime_wasi::thread_rng(),
        })
        .insecure_random_seed(tape.seed);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cluster_write_is_a_write_in_either_interface() {
        for f in ["create", "update", "patch", "patch-status", "delete"] {
            assert!(is_write(&format!("client.{f}")), "client.{f}");
            assert!(is_write(&format!("clusters.{f}")), "clusters.{f}");
        }
        for op in [
            "client.evict",
            "client.bind",
            "workloads.spawn",
            "workloads.prepare-volume",
            "workloads.kill",
            "workloads.release-pod",
        ] {
            assert!(is_write(op), "{op}");
        }
        for op in [
            "client.get",
            "clusters.list",
            "client.list-changes",
            "client.record-event",
            "http.fetch",
            "workloads.status",
            "log.log",
            "create",
        ] {
            assert!(!is_write(op), "{op}");
        }
    }

    #[test]
    fn replay_answers_each_recorded_request_once_and_names_the_first_it_cannot() {
        let t = Tape::new(Redaction::default(), 7);
        t.start(TapeMode::Record);
        t.record("client.get", json!({"name": "a"}), json!({"ok": 1}));
        t.record("client.get", json!({"name": "a"}), json!({"ok": 2}));
        let mut real = wasmtime_wasi::thread_rng();
        let mut buf = [0u8; 6];
        t.random("random.secure", &mut buf, &mut *real);
        let clock = t.clock("clock.wall", || 42);
        let taped = t.finish();
        assert_eq!(taped.entries.len(), 4);
        assert_eq!(clock, 42);

        t.start(TapeMode::Replay(taped.entries));
        assert_eq!(
            t.answer("client.get", json!({"name": "a"}), false),
            Some(json!({"ok": 1}))
        );
        assert_eq!(
            t.answer("client.get", json!({"name": "a"}), false),
            Some(json!({"ok": 2}))
        );
        let mut again = [0u8; 6];
        t.random("random.secure", &mut again, &mut *real);
        assert_eq!(again, buf);
        assert_eq!(t.clock("clock.wall", || 99), 42);
        assert_eq!(t.answer("log.log", json!({}), true), None);
        assert_eq!(t.answer("client.get", json!({"name": "b"}), false), None);
        assert_eq!(t.answer("client.get", json!({"name": "c"}), false), None);
        let out = t.finish();
        let d = out.diverged.expect("a divergence");
        assert_eq!(
            (d.op.as_str(), &d.args),
            ("client.get", &json!({"name": "b"}))
        );
    }

    #[test]
    fn a_shadow_reads_past_the_record_and_diverges_only_on_other_requests() {
        let t = Tape::new(Redaction::default(), 7);
        t.start(TapeMode::Record);
        t.record("client.list", json!({"of": "cm"}), json!({"ok": []}));
        let wall = t.clock("clock.wall", || 42);
        let entries = t.finish().entries;
        t.start(TapeMode::Shadow {
            entries,
            redaction: Redaction::default(),
        });
        assert!(t.shadowing() && t.replaying());
        assert_eq!(
            t.answer("client.list", json!({"of": "cm"}), true),
            Some(json!({"ok": []}))
        );
        // A read the live call did not make, and clocks read more often than
        // it did, are not divergences (the caller reads them live).
        assert_eq!(t.answer("client.get", json!({"name": "x"}), true), None);
        assert_eq!(t.clock("clock.wall", || 7), wall);
        assert_eq!(t.clock("clock.wall", || 99), 99);
        assert!(t.finish().diverged.is_none());

        t.start(TapeMode::Shadow {
            entries: Vec::new(),
            redaction: Redaction::default(),
        });
        assert_eq!(t.answer("client.create", json!({"obj": 1}), false), None);
        let out = t.finish();
        assert_eq!(out.diverged.map(|d| d.op), Some("client.create".into()));
        assert_eq!(out.writes.len(), 1);
    }
}
