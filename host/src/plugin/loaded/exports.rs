//! The reconciler world's exports as typed methods on [`Loaded`], each one
//! sandboxed call; with recording on, `reconcile` and `finalize` also make
//! the call's record, and with a shadow candidate they offer the call to it;
//! `replay` (of any record, a provider's too) and `shadow_call` run a call
//! again. The provider world's exports are in `provider_calls`.

use std::sync::Arc;

use super::{CallError, Instance, Loaded};
use crate::plugin::bindings::provider::ProviderPlugin;
use crate::plugin::bindings::reconciler::ReconcilerPlugin;
use crate::plugin::outcome::{Finalized, GuestError, Reconciled};
use crate::plugin::record::provider::ProviderCall;
use crate::plugin::record::{CallKind, CallRecord, Outcome, Recording, TapeMode, Taped};
use crate::plugin::sandbox::CallReport;
use crate::plugin::shadow::{Shadow, ShadowJob};

/// A live call that was taped, as it ended.
pub(super) struct TapedCall<'a> {
    pub call: CallKind,
    pub key: &'a str,
    pub obj: &'a str,
    pub taped: Taped,
    pub outcome: Outcome,
    /// Provider calls: the state, state data and wake event (see [`ProviderCall::record_fields`]).
    pub provider: Option<&'a ProviderCall>,
}

impl Loaded {
    /// `reconcile` on a fresh instance. Returns the guest's result and the
    /// writes it made (and, recording, the call's record). With a shadow
    /// candidate beside this version, the call is taped and offered to it.
    pub async fn reconcile(
        &self,
        key: &str,
        obj: &str,
    ) -> Result<(Result<Reconciled, GuestError>, CallReport), CallError> {
        let shadow = self.shadow_now();
        if self.ctx.recording.is_none() && shadow.is_none() {
            return self
                .reconcile_taped(key, obj, TapeMode::Off, 0, &mut None)
                .await;
        }
        let mut taped = None;
        let mut r = self
            .reconcile_taped(key, obj, TapeMode::Record, 0, &mut taped)
            .await;
        let outcome = Outcome::of_reconcile(&r);
        let call = TapedCall {
            call: CallKind::Reconcile,
            key,
            obj,
            taped: taped.unwrap_or_default(),
            outcome,
            provider: None,
        };
        self.after_taped_call(call, shadow, &mut r);
        r
    }

    /// The shadow candidate running beside this version now, if any, and
    /// if it takes a call now: one it would skip (out of CPU, queue full) is
    /// counted as skipped here, so the live call is not taped for nothing.
    fn shadow_now(&self) -> Option<Arc<Shadow>> {
        self.ctx
            .shadow
            .as_ref()?
            .current()
            .filter(|s| s.accepting())
    }

    /// Offers a taped call to the shadow candidate, and hands its record to
    /// the report, where the host adds its writes before it is written; a
    /// failed call has no host writes to wait for, so its record goes now
    /// (when the pending record drops).
    fn after_taped_call<T>(
        &self,
        mut call: TapedCall<'_>,
        shadow: Option<Arc<Shadow>>,
        r: &mut Result<(Result<T, GuestError>, CallReport), CallError>,
    ) {
        let recording = self.ctx.recording.as_deref();
        if let Some(shadow) = shadow {
            let entries = match recording {
                Some(_) => call.taped.entries.clone(),
                None => std::mem::take(&mut call.taped.entries),
            };
            shadow.offer(ShadowJob {
                call: call.call,
                key: call.key.to_string(),
                obj: call.obj.to_string(),
                entries,
                seed: call.taped.seed,
                outcome: call.outcome.clone(),
                redaction: self.live_redaction(),
            });
        }
        let Some(recording) = recording else {
            return;
        };
        let record = self.call_record(recording, call);
        let pending = recording.pending(record);
        if let Ok((_, report)) = r {
            report.record = Some(pending);
        }
    }

    /// The record of a call that just ran.
    pub(super) fn call_record(&self, recording: &Recording, call: TapedCall<'_>) -> CallRecord {
        let mut input = serde_json::from_str(call.obj).unwrap_or(serde_json::Value::Null);
        recording.redaction.object(&mut input);
        let (state, state_data, event) = call
            .provider
            .map(ProviderCall::record_fields)
            .unwrap_or_default();
        CallRecord {
            seq: recording.writer.next_seq(),
            at: crate::plugin::record::now_rfc3339(),
            plugin: self.name.clone(),
            digest: self.digest.clone(),
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

    /// Runs one recorded call again on this version, every import answered
    /// from `record` (the plugin must have been loaded for replay).
    pub async fn replay(&self, record: &CallRecord) -> (Outcome, Taped) {
        let seed = u128::from_str_radix(&record.insecure_seed, 16).unwrap_or(0);
        let mode = TapeMode::Replay(record.imports.clone());
        let obj = record.input.to_string();
        match ProviderCall::of_record(record) {
            None => {
                self.run_again(record.call, &record.key, &obj, mode, seed)
                    .await
            }
            Some(Ok(call)) => {
                self.replay_provider(&record.key, &obj, &call, mode, seed)
                    .await
            }
            Some(Err(bad)) => (
                Outcome::Failed {
                    error: bad.to_string(),
                },
                Taped::default(),
            ),
        }
    }

    /// Runs a live version's call again on this shadow candidate, on the
    /// live call's inputs (see [`TapeMode::Shadow`]).
    pub async fn shadow_call(&self, job: &ShadowJob) -> (Outcome, Taped) {
        let mode = TapeMode::Shadow {
            entries: job.entries.clone(),
            redaction: job.redaction.clone(),
        };
        self.run_again(job.call, &job.key, &job.obj, mode, job.seed)
            .await
    }

    async fn run_again(
        &self,
        call: CallKind,
        key: &str,
        obj: &str,
        mode: TapeMode,
        seed: u128,
    ) -> (Outcome, Taped) {
        let mut taped = None;
        let outcome = match call {
            CallKind::Reconcile => {
                Outcome::of_reconcile(&self.reconcile_taped(key, obj, mode, seed, &mut taped).await)
            }
            CallKind::Finalize => {
                Outcome::of_finalize(&self.finalize_taped(key, obj, mode, seed, &mut taped).await)
            }
            // Providers are not shadowed; their replays go through `replay_provider`.
            CallKind::Init | CallKind::Handle | CallKind::Status => Outcome::Failed {
                error: format!("a {call:?} call has no reconciler export to run"),
            },
        };
        (outcome, taped.unwrap_or_default())
    }

    async fn reconcile_taped(
        &self,
        key: &str,
        obj: &str,
        mode: TapeMode,
        seed: u128,
        taped: &mut Option<Taped>,
    ) -> Result<(Result<Reconciled, GuestError>, CallReport), CallError> {
        let obj = obj.to_string();
        let (result, report) = self
            .call_taped(key, mode, seed, taped, move |inst, s| {
                Box::pin(async move {
                    reconciler(inst)?
                        .wasmlet_plugin_reconciler()
                        .call_reconcile(s, &obj)
                        .await
                })
            })
            .await?;
        let result = match result {
            Ok(o) => Reconciled::try_from(o).map(Ok),
            Err(e) => GuestError::try_from(e).map(Err),
        };
        match result {
            Ok(result) => Ok((result, report)),
            Err(bad) => Err(self.refused(bad)),
        }
    }

    pub async fn finalize(
        &self,
        key: &str,
        obj: &str,
    ) -> Result<(Result<Finalized, GuestError>, CallReport), CallError> {
        let shadow = self.shadow_now();
        if self.ctx.recording.is_none() && shadow.is_none() {
            return self
                .finalize_taped(key, obj, TapeMode::Off, 0, &mut None)
                .await;
        }
        let mut taped = None;
        let mut r = self
            .finalize_taped(key, obj, TapeMode::Record, 0, &mut taped)
            .await;
        let outcome = Outcome::of_finalize(&r);
        let call = TapedCall {
            call: CallKind::Finalize,
            key,
            obj,
            taped: taped.unwrap_or_default(),
            outcome,
            provider: None,
        };
        self.after_taped_call(call, shadow, &mut r);
        r
    }

    async fn finalize_taped(
        &self,
        key: &str,
        obj: &str,
        mode: TapeMode,
        seed: u128,
        taped: &mut Option<Taped>,
    ) -> Result<(Result<Finalized, GuestError>, CallReport), CallError> {
        let obj = obj.to_string();
        let (result, report) = self
            .call_taped(key, mode, seed, taped, move |inst, s| {
                Box::pin(async move {
                    reconciler(inst)?
                        .wasmlet_plugin_reconciler()
                        .call_finalize(s, &obj)
                        .await
                })
            })
            .await?;
        let result = match result {
            Ok(o) => Ok(Finalized::from(o)),
            Err(e) => match GuestError::try_from(e) {
                Ok(e) => Err(e),
                Err(bad) => return Err(self.refused(bad)),
            },
        };
        Ok((result, report))
    }
}

pub(super) fn reconciler(inst: &Instance) -> wasmtime::Result<&ReconcilerPlugin> {
    match inst {
        Instance::Reconciler(p) => Ok(p),
        Instance::Provider(_) => Err(wasmtime::Error::msg("a provider has no reconciler exports")),
    }
}

pub(super) fn provider(inst: &Instance) -> wasmtime::Result<&ProviderPlugin> {
    match inst {
        Instance::Provider(p) => Ok(p),
        Instance::Reconciler(_) => {
            Err(wasmtime::Error::msg("a reconciler has no provider exports"))
        }
    }
}
