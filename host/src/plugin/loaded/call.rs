//! One sandboxed call: a fresh `Store` (or, with `limits.reuse-instances`, a
//! warm one) with the manifest's memory cap and deadline (wall time), the tape set as
//! the call's observer asks, and a trap, timeout or out-of-memory classified,
//! counted and logged as that call's error.

use std::time::Instant;

use wasmtime::{Store, Trap};

use super::{CallError, Instance, Loaded, Pre};
use crate::plugin::engine::PluginEngine;
use crate::plugin::metrics::{CallTimer, PluginMetrics};
use crate::plugin::observe::Taping;
use crate::plugin::outcome::{BadResult, MAX_RESULT_BYTES};
use crate::plugin::sandbox::{CallReport, State};
use crate::plugin::tape::{Redaction, Tape, TapeMode, Taped};

/// An instance kept for the next call (`limits.reuse-instances`).
pub(super) struct Warm {
    store: Store<State>,
    instance: Instance,
}

pub(super) type CallFuture<'a, R> =
    std::pin::Pin<Box<dyn std::future::Future<Output = wasmtime::Result<R>> + Send + 'a>>;

impl Loaded {
    /// Runs `f` under the manifest's limits on a fresh instance — or, with
    /// `limits.reuse-instances`, on one that finished its last call cleanly
    /// (a trapped or failed instance is never reused).
    pub(super) async fn call<R: Send>(
        &self,
        key: &str,
        f: impl for<'a> FnOnce(&'a Instance, &'a mut Store<State>) -> CallFuture<'a, R>,
    ) -> Result<(R, CallReport), CallError> {
        self.call_taped(key, Taping::off(), f).await.0
    }

    /// [`Loaded::call`] with the store's tape as `taping` says; returns, with
    /// the result, what the tape held afterwards (whether the call succeeded
    /// or not).
    pub(super) async fn call_taped<R: Send>(
        &self,
        key: &str,
        taping: Taping,
        f: impl for<'a> FnOnce(&'a Instance, &'a mut Store<State>) -> CallFuture<'a, R>,
    ) -> (Result<(R, CallReport), CallError>, Taped) {
        let Taping { mode, seed } = taping;
        let _slot = match self.slots.acquire().await {
            Ok(slot) => slot,
            Err(_) => {
                let closed = CallError::Trap("plugin is shutting down".into());
                return (Err(closed), Taped::default());
            }
        };
        PluginMetrics::inc(&self.ctx.metrics.calls);
        let _timer = CallTimer::start(&self.ctx.metrics.call_nanos);
        // A replay never reuses: each call's store answers from its own record.
        let reuse = self.manifest.limits.reuse_instances && !self.ctx.replay;
        // A store made before a shadow started has no tape: a taped call
        // leaves it and makes one that has.
        let wants_tape = !matches!(mode, TapeMode::Off);
        let warm = if reuse {
            self.idle.lock().unwrap_or_else(|p| p.into_inner()).pop()
        } else {
            None
        }
        .filter(|w| !wants_tape || w.store.data().tape.is_some());
        let (mut store, instance) = match warm {
            Some(Warm {
                mut store,
                instance,
            }) => {
                let data = store.data_mut();
                data.key = key.to_string();
                data.writes.clear();
                data.in_flight.clear();
                data.retry_soon = false;
                data.limiter.hit = false;
                data.panic = None;
                (store, Some(instance))
            }
            None => {
                let tape = (self.ctx.taped() || wants_tape).then(|| {
                    let seed = if self.ctx.replay {
                        seed
                    } else {
                        rand::random::<u128>()
                    };
                    let redaction = self.tape_redaction(&mode);
                    Tape::new(redaction, seed)
                });
                let mut store = Store::new(
                    &self.engine.engine,
                    State::with_tape(self.ctx.clone(), key.to_string(), tape),
                );
                store.limiter(|s| &mut s.limiter);
                store.epoch_deadline_trap();
                (store, None)
            }
        };
        // The deadline (and the `http` import's budget) runs from this call's
        // start, also on a reused instance.
        store.data_mut().started = Instant::now();
        store.set_epoch_deadline(PluginEngine::ticks(self.deadline()));
        let tape = store.data().tape.clone();
        if let Some(t) = &tape {
            t.start(mode);
        }
        let result = self.run(&mut store, instance, f).await;
        let taped = tape.map(|t| t.finish()).unwrap_or_default();
        let (r, instance) = match result {
            Ok(done) => done,
            Err(e) => return (Err(e), taped),
        };
        let data = store.data_mut();
        let report = CallReport {
            writes: std::mem::take(&mut data.writes),
            in_flight: std::mem::take(&mut data.in_flight),
            retry_soon: data.retry_soon,
            record: None,
        };
        if reuse {
            self.idle
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(Warm { store, instance });
        }
        (Ok((r, report)), taped)
    }

    /// How a new store's tape redacts. A replay redacts the guest's requests
    /// as the recording host did (the manifest's `[record]`), and a shadow
    /// candidate as the live call's tape did, so that they compare alike.
    fn tape_redaction(&self, mode: &TapeMode) -> Redaction {
        if let TapeMode::Shadow { redaction, .. } = mode {
            return redaction.clone();
        }
        if self.ctx.replay && self.ctx.recording.is_none() {
            return self
                .manifest
                .record
                .as_ref()
                .map(|r| Redaction {
                    keep_secrets: r.keep_secrets,
                    sensitive_hosts: r.sensitive_http_hosts.clone(),
                })
                .unwrap_or_default();
        }
        self.live_redaction()
    }

    /// How this version's live calls are taped: as its recording redacts, or
    /// (taped only for a shadow, in memory) not at all.
    pub(super) fn live_redaction(&self) -> Redaction {
        match self.ctx.recording.as_ref().and_then(|r| r.redaction()) {
            Some(r) => r.clone(),
            None => Redaction {
                keep_secrets: true,
                sensitive_hosts: Vec::new(),
            },
        }
    }

    /// Instantiates (unless `instance` is a warm one) and runs `f`.
    async fn run<R: Send>(
        &self,
        store: &mut Store<State>,
        instance: Option<Instance>,
        f: impl for<'a> FnOnce(&'a Instance, &'a mut Store<State>) -> CallFuture<'a, R>,
    ) -> Result<(R, Instance), CallError> {
        let instance = match instance {
            Some(i) => i,
            None => {
                let made = match &self.pre {
                    Pre::Reconciler(p) => p
                        .instantiate_async(&mut *store)
                        .await
                        .map(Instance::Reconciler),
                    Pre::Provider(p) => p
                        .instantiate_async(&mut *store)
                        .await
                        .map(Instance::Provider),
                };
                match made {
                    Ok(i) => i,
                    Err(e) => return Err(self.classify(e, store.data_mut())),
                }
            }
        };
        let result = f(&instance, store).await;
        match result {
            Ok(r) => Ok((r, instance)),
            Err(e) => Err(self.classify(e, store.data_mut())),
        }
    }

    /// What a failed call is reported as. A guest panic the SDK handed over
    /// is its message (where it panicked and why), not wasmtime's
    /// `unreachable` trap with a backtrace of unnamed frames.
    fn classify(&self, e: wasmtime::Error, state: &mut State) -> CallError {
        let error = match e.downcast_ref::<Trap>() {
            Some(Trap::Interrupt) => CallError::Timeout(self.deadline()),
            _ if state.limiter.hit => CallError::OutOfMemory(self.manifest.limits.memory_mib),
            _ => match state.panic.take() {
                Some(message) => CallError::Trap(format!("guest panicked at {message}")),
                None => CallError::Trap(format!("{e:#}")),
            },
        };
        self.failed(error)
    }

    /// Counts a failed call by kind and logs it.
    fn failed(&self, error: CallError) -> CallError {
        let m = &self.ctx.metrics;
        match &error {
            CallError::Timeout(_) => PluginMetrics::inc(&m.timeouts),
            CallError::OutOfMemory(_) => PluginMetrics::inc(&m.out_of_memory),
            CallError::Trap(_) => PluginMetrics::inc(&m.traps),
            CallError::Malformed(_) => PluginMetrics::inc(&m.malformed),
            CallError::TooLarge { .. } => PluginMetrics::inc(&m.oversized),
        }
        tracing::warn!(plugin = %self.name, error = %error, "plugin call failed");
        error
    }

    /// A result the host refuses, as the call's error.
    pub(super) fn refused(&self, bad: BadResult) -> CallError {
        self.failed(match bad {
            BadResult::Status(s) => {
                CallError::Malformed(format!("status is not a JSON object: {}", truncate(&s)))
            }
            BadResult::TooLarge(bytes) => CallError::TooLarge {
                bytes,
                limit: MAX_RESULT_BYTES,
            },
        })
    }
}

fn truncate(s: &str) -> String {
    if s.len() <= 80 {
        s.to_string()
    } else {
        format!("{}...", &s[..s.floor_char_boundary(80)])
    }
}
