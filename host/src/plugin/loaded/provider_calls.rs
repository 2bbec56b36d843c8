//! The provider world's exports (`init`, `handle`, `status`) as typed
//! methods on [`Loaded`], each one sandboxed call. With recording on, each
//! call is taped and written as one record (the pod, the state, state data
//! and wake event, every import with its answer, workloads included, and the
//! outcome), so a pod's life on a node can be replayed against another
//! provider build (`replay_provider`, `wasmlet replay`).

use super::exports::{TapedCall, provider};
use super::{CallError, Loaded};
use crate::plugin::provider::{HandlerOutcome, WakeEvent};
use crate::plugin::record::provider::{ProviderCall, ProviderResult};
use crate::plugin::record::{Outcome, TapeMode, Taped};

impl Loaded {
    /// Provider: the initial state data for a pod.
    pub async fn provider_init(
        &self,
        key: &str,
        pod: &str,
    ) -> Result<Result<String, String>, CallError> {
        match self.provider_live(key, pod, ProviderCall::Init).await? {
            ProviderResult::Init(r) => Ok(r),
            other => Err(mismatch("init", &other)),
        }
    }

    /// Provider: one handler run.
    pub async fn provider_handle(
        &self,
        key: &str,
        state: &str,
        pod: &str,
        data: &str,
        event: Option<WakeEvent>,
    ) -> Result<Result<HandlerOutcome, String>, CallError> {
        let call = ProviderCall::Handle {
            state: state.to_string(),
            data: data.to_string(),
            event,
        };
        match self.provider_live(key, pod, call).await? {
            ProviderResult::Handle(r) => Ok(r),
            other => Err(mismatch("handle", &other)),
        }
    }

    /// Provider: the status fragment for a state.
    pub async fn provider_status(
        &self,
        key: &str,
        state: &str,
        pod: &str,
        data: &str,
    ) -> Result<String, CallError> {
        let call = ProviderCall::Status {
            state: state.to_string(),
            data: data.to_string(),
        };
        match self.provider_live(key, pod, call).await? {
            ProviderResult::Status(s) => Ok(s),
            other => Err(mismatch("status", &other)),
        }
    }

    /// A live provider call; recording, it is taped and its record written
    /// at once (the host's status patch and pod deletion are not part of a
    /// provider record: the `status` call's outcome is what the host patches).
    async fn provider_live(
        &self,
        key: &str,
        pod: &str,
        call: ProviderCall,
    ) -> Result<ProviderResult, CallError> {
        let Some(recording) = self.ctx.recording.as_deref() else {
            return self
                .provider_taped(key, pod, &call, TapeMode::Off, 0, &mut None)
                .await;
        };
        let mut taped = None;
        let r = self
            .provider_taped(key, pod, &call, TapeMode::Record, 0, &mut taped)
            .await;
        let record = self.call_record(
            recording,
            TapedCall {
                call: call.kind(),
                key,
                obj: pod,
                taped: taped.unwrap_or_default(),
                outcome: Outcome::of_provider(&r),
                provider: Some(&call),
            },
        );
        // Dropping the pending record writes it.
        drop(recording.pending(record));
        r
    }

    /// Runs a recorded provider call again, every import answered by `mode`.
    pub(super) async fn replay_provider(
        &self,
        key: &str,
        pod: &str,
        call: &ProviderCall,
        mode: TapeMode,
        seed: u128,
    ) -> (Outcome, Taped) {
        let mut taped = None;
        let r = self
            .provider_taped(key, pod, call, mode, seed, &mut taped)
            .await;
        (Outcome::of_provider(&r), taped.unwrap_or_default())
    }

    async fn provider_taped(
        &self,
        key: &str,
        pod: &str,
        call: &ProviderCall,
        mode: TapeMode,
        seed: u128,
        taped: &mut Option<Taped>,
    ) -> Result<ProviderResult, CallError> {
        let (pod, call) = (pod.to_string(), call.clone());
        self.call_taped(key, mode, seed, taped, move |inst, s| {
            Box::pin(async move {
                let p = provider(inst)?.wasmlet_plugin_provider();
                Ok(match call {
                    ProviderCall::Init => ProviderResult::Init(p.call_init(s, &pod).await?),
                    ProviderCall::Handle { state, data, event } => {
                        ProviderResult::Handle(p.call_handle(s, &state, &pod, &data, event).await?)
                    }
                    ProviderCall::Status { state, data } => {
                        ProviderResult::Status(p.call_status(s, &state, &pod, &data).await?)
                    }
                })
            })
        })
        .await
        .map(|(r, _)| r)
    }
}

/// A result of another export than the one called (cannot happen: the call
/// and its result come from the same match).
fn mismatch(export: &str, got: &ProviderResult) -> CallError {
    CallError::Malformed(format!("provider {export} returned {got:?}"))
}
