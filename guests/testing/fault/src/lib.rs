//! Test guest: a reconciler whose object's `spec.fault` picks how the call goes wrong,
//! so one component covers every fault the host must contain (issue 8):
//!
//! | `spec.fault` | what the reconcile does |
//! |---|---|
//! | `none` (or absent) | returns status `{"echo": spec.value}`: a healthy reconcile |
//! | `trap` | executes `unreachable` |
//! | `panic` | panics (a wasm panic aborts: a trap) |
//! | `loop` | spins forever (the CPU deadline must stop it) |
//! | `oom` | allocates 1 MiB blocks until the memory cap refuses to grow |
//! | `bad-json` | returns a status that is not JSON |
//! | `not-object` | returns a status that is JSON but not an object |
//! | `huge` | returns a 4 MiB status (over the host's result size limit) |
//! | `requeue-max` | succeeds like `none`, asking to be requeued after `u64::MAX` ms |
//! | `requeue-zero` | succeeds like `none`, asking to be requeued after 0 ms, every time |
//! | `batch` | `create-all` of `N` ConfigMaps of `K` data keys each (`spec.value` = `"N:K"`); status `{"created", "refused", "error"}` |
//! | `transient` | returns a transient `Flaky` error carrying status `{"echo": spec.value}` |
//! | `terminal` | returns a terminal `Refused` error |
//! | `applied-previous` | succeeds like `none`, saying it applied the generation before `metadata.generation` (the SDK's `Action::applied_generation`, by hand) |
//!
//! Its `finalize` succeeds unless `spec.finalize` is `fail`: then it returns a
//! transient `CleanupBlocked` error carrying status `{"cleanup": "blocked"}` and a
//! `CleanedUp=False` condition (what the host must write even though it failed).
//!
//! It implements the raw contract: the typed SDK only returns well-formed results.

use serde_json::{Value, json};
use wasmlet_sdk::bindings::reconciler_exports::{
    Condition, ConditionStatus, ErrorKind, FinalizeOutcome, Guest, ReconcileError, ReconcileOutcome,
};

/// The size of the `huge` status's string.
const HUGE_BYTES: usize = 4 << 20;

struct Fault;

/// `{"blob": "xxx…"}` of [`HUGE_BYTES`], built in place (a `json!` value plus its
/// serialisation would need three times the memory).
fn huge() -> String {
    let mut s = String::with_capacity(HUGE_BYTES + 16);
    s.push_str("{\"blob\":\"");
    s.extend(std::iter::repeat_n('x', HUGE_BYTES));
    s.push_str("\"}");
    s
}

/// `create-all` of `"N:K"` ConfigMaps of K keys each, as one batch (a
/// plugin author's way to make the host parse a lot at once); the status
/// counts the answers.
fn batch(spec: &str) -> String {
    let (n, keys) = spec.split_once(':').unwrap_or(("0", "0"));
    let (n, keys): (usize, usize) = (n.parse().unwrap_or(0), keys.parse().unwrap_or(0));
    let objs: Vec<String> = (0..n)
        .map(|i| {
            let mut s = format!(
                "{{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\
                 \"metadata\":{{\"name\":\"batch-{i}\",\"namespace\":\"default\"}},\"data\":{{"
            );
            for k in 0..keys {
                if k > 0 {
                    s.push(',');
                }
                s.push_str(&format!("\"k{k}\":\"v\""));
            }
            s.push_str("}}");
            s
        })
        .collect();
    let (mut created, mut refused, mut error) = (0, 0, String::new());
    match wasmlet_sdk::bindings::client::create_all(&objs) {
        Ok(answers) => {
            for a in answers {
                match a {
                    Ok(_) => created += 1,
                    Err(e) => {
                        refused += 1;
                        if error.is_empty() {
                            error = format!("{e:?}");
                        }
                    }
                }
            }
        }
        Err(e) => error = format!("{e:?}"),
    }
    json!({"created": created, "refused": refused, "error": error}).to_string()
}

fn ok(status: String, requeue_after_ms: Option<u64>) -> ReconcileOutcome {
    ReconcileOutcome {
        status: Some(status),
        conditions: vec![],
        requeue_after_ms,
    }
}

impl Guest for Fault {
    fn declared_conditions() -> Vec<String> {
        vec![]
    }

    fn reconcile(obj: String) -> Result<ReconcileOutcome, ReconcileError> {
        let obj: Value = serde_json::from_str(&obj).map_err(|e| ReconcileError {
            kind: ErrorKind::Terminal,
            reason: "BadObject".into(),
            message: e.to_string(),
            status: None,
            conditions: vec![],
        })?;
        let value = obj.pointer("/spec/value").cloned().unwrap_or(Value::Null);
        let echo = json!({ "echo": value }).to_string();
        match obj.pointer("/spec/fault").and_then(Value::as_str) {
            None | Some("none") => Ok(ok(echo, None)),
            Some("trap") => core::arch::wasm32::unreachable(),
            Some("panic") => panic!("wasmlet-test-fault: panics by request"),
            Some("loop") => loop {
                std::hint::black_box(&obj);
            },
            Some("oom") => {
                let mut blocks: Vec<Vec<u8>> = Vec::new();
                loop {
                    blocks.push(std::hint::black_box(vec![0xA5u8; 1 << 20]));
                }
            }
            Some("bad-json") => Ok(ok("{\"echo\": ".into(), None)),
            Some("not-object") => Ok(ok("[\"not\", \"an\", \"object\"]".into(), None)),
            Some("huge") => Ok(ok(huge(), None)),
            Some("requeue-max") => Ok(ok(echo, Some(u64::MAX))),
            Some("requeue-zero") => Ok(ok(echo, Some(0))),
            Some("batch") => Ok(ok(batch(value.as_str().unwrap_or("")), None)),
            Some("transient") => Err(ReconcileError {
                kind: ErrorKind::Transient,
                reason: "Flaky".into(),
                message: "spec.fault is \"transient\"".into(),
                status: Some(echo),
                conditions: vec![],
            }),
            Some("terminal") => Err(ReconcileError {
                kind: ErrorKind::Terminal,
                reason: "Refused".into(),
                message: "spec.fault is \"terminal\"".into(),
                status: None,
                conditions: vec![],
            }),
            Some("applied-previous") => {
                let generation = obj.pointer("/metadata/generation").and_then(Value::as_i64);
                let applied = generation.unwrap_or(1) - 1;
                Ok(ok(
                    json!({ "echo": value, "wasmlet.dev/appliedGeneration": applied }).to_string(),
                    None,
                ))
            }
            Some(other) => Err(ReconcileError {
                kind: ErrorKind::Terminal,
                reason: "UnknownFault".into(),
                message: format!("spec.fault {other:?} is not a fault this guest knows"),
                status: None,
                conditions: vec![],
            }),
        }
    }

    fn finalize(obj: String) -> Result<FinalizeOutcome, ReconcileError> {
        let obj: Value = serde_json::from_str(&obj).unwrap_or(Value::Null);
        if obj.pointer("/spec/finalize").and_then(Value::as_str) != Some("fail") {
            return Ok(FinalizeOutcome::Done);
        }
        Err(ReconcileError {
            kind: ErrorKind::Transient,
            reason: "CleanupBlocked".into(),
            message: "spec.finalize is \"fail\"".into(),
            status: Some(json!({"cleanup": "blocked"}).to_string()),
            conditions: vec![Condition {
                type_: "CleanedUp".into(),
                status: ConditionStatus::False,
                reason: "CleanupBlocked".into(),
                message: "the cleanup is blocked".into(),
            }],
        })
    }
}

wasmlet_sdk::bindings::reconciler::export_reconciler!(Fault with_types_in wasmlet_sdk::bindings::reconciler);
