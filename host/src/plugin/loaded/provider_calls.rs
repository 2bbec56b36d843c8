//! The provider world's exports (`init`, `handle`, `status`) as typed
//! methods on [`Loaded`], each one sandboxed call. With recording on, each
//! call is taped and written as one record (the pod, the state, state data
//! and wake event, every import with its answer, workloads included, and the
//! outcome), so a pod's life on a node can be replayed against another
//! provider build (`replay_provider`, `wasmlet replay`). The record waits
//! in the call's [`ProviderReply`] for the writes the host makes because of
//! it (a `status` call's patch, the pod's removal after the on-delete
//! state's last `handle`).

use std::sync::Arc;

use super::exports::{About, provider};
use super::{CallError, Loaded};
use crate::plugin::observe::{CallObserver, PendingRecord};
use crate::plugin::outcome::{Outcome, ProviderCall, ProviderResult};
use crate::plugin::provider::{HandlerOutcome, WakeEvent};

/// A provider call's result and, recording, its record: written when the
/// reply drops, after the host added the writes it made because of the call
/// ([`HostWrites::host_write`](crate::plugin::observe::HostWrites::host_write): the status patch, the pod's removal).
#[derive(Debug)]
pub(crate) struct ProviderReply<T> {
    pub(crate) result: Result<T, CallError>,
    pub(crate) record: Option<Arc<PendingRecord>>,
}

impl<T> ProviderReply<T> {
    fn map<U>(self, f: impl FnOnce(T) -> Result<U, CallError>) -> ProviderReply<U> {
        ProviderReply {
            result: self.result.and_then(f),
            record: self.record,
        }
    }

    /// Adds a host write to the call's record, when it is recorded.
    pub(crate) fn host_write(
        &self,
        op: &str,
        key: &str,
        body: &serde_json::Value,
        result: Result<Option<&str>, String>,
    ) {
        if let Some(r) = &self.record {
            r.host_write(op, key, body, result);
        }
    }
}

impl Loaded {
    /// Provider: the initial state data for a pod.
    pub(crate) async fn provider_init(
        &self,
        key: &str,
        pod: &str,
    ) -> Result<Result<String, String>, CallError> {
        // `init` causes no host write: its record goes at once.
        match self
            .provider_live(key, pod, ProviderCall::Init)
            .await
            .result?
        {
            ProviderResult::Init(r) => Ok(r),
            other => Err(mismatch("init", &other)),
        }
    }

    /// Provider: one handler run. Recording, the reply holds the call's
    /// record until it drops (the pod's removal after its teardown is added).
    pub(crate) async fn provider_handle(
        &self,
        key: &str,
        state: &str,
        pod: &str,
        data: &str,
        event: Option<WakeEvent>,
    ) -> ProviderReply<Result<HandlerOutcome, String>> {
        let call = ProviderCall::Handle {
            state: state.to_string(),
            data: data.to_string(),
            event,
        };
        self.provider_live(key, pod, call).await.map(|r| match r {
            ProviderResult::Handle(r) => Ok(r),
            other => Err(mismatch("handle", &other)),
        })
    }

    /// Provider: the status fragment for a state. Recording, the reply holds
    /// the call's record until it drops (the host's status patch is added).
    pub(crate) async fn provider_status(
        &self,
        key: &str,
        state: &str,
        pod: &str,
        data: &str,
    ) -> ProviderReply<String> {
        let call = ProviderCall::Status {
            state: state.to_string(),
            data: data.to_string(),
        };
        self.provider_live(key, pod, call).await.map(|r| match r {
            ProviderResult::Status(s) => Ok(s),
            other => Err(mismatch("status", &other)),
        })
    }

    /// A live provider call; recording, it is taped and its record made,
    /// written when the reply drops.
    async fn provider_live(
        &self,
        key: &str,
        pod: &str,
        call: ProviderCall,
    ) -> ProviderReply<ProviderResult> {
        self.provider_observed(key, pod, &call, &mut self.live())
            .await
    }

    /// A provider call handed to `observer`.
    pub(super) async fn provider_observed(
        &self,
        key: &str,
        pod: &str,
        call: &ProviderCall,
        observer: &mut dyn CallObserver,
    ) -> ProviderReply<ProviderResult> {
        let taping = observer.before_call();
        let watched = taping.on();
        let (owned, args) = (pod.to_string(), call.clone());
        let (result, taped) = self
            .call_taped(key, taping, move |inst, s| {
                Box::pin(async move {
                    let p = provider(inst)?.wasmlet_plugin_provider();
                    let pod = owned;
                    Ok(match args {
                        ProviderCall::Init => ProviderResult::Init(p.call_init(s, &pod).await?),
                        ProviderCall::Handle { state, data, event } => ProviderResult::Handle(
                            p.call_handle(s, &state, &pod, &data, event).await?,
                        ),
                        ProviderCall::Status { state, data } => {
                            ProviderResult::Status(p.call_status(s, &state, &pod, &data).await?)
                        }
                    })
                })
            })
            .await;
        let result = result.map(|(r, _)| r);
        let record = if watched {
            let about = About {
                call: call.kind(),
                key,
                obj: pod,
                provider: Some(call),
            };
            self.observed(observer, about, taped, Outcome::of_provider(&result))
        } else {
            None
        };
        ProviderReply { result, record }
    }
}

/// A result of another export than the one called (cannot happen: the call
/// and its result come from the same match).
fn mismatch(export: &str, got: &ProviderResult) -> CallError {
    CallError::Malformed(format!("provider {export} returned {got:?}"))
}
