//! The reconciler world's exports as typed methods on [`Loaded`], each one
//! sandboxed call handed to one [`CallObserver`]: a live call to its
//! version's watchers (recording, a shadow candidate; [`Live`]), a call made
//! again (`run_again`: a replay of any record, a provider's too, or a shadow
//! candidate's call) to [`Replaying`]. The provider world's exports are in
//! `provider_calls`.

use std::sync::Arc;

use super::{CallError, Instance, Loaded};
use crate::plugin::bindings::provider::ProviderPlugin;
use crate::plugin::bindings::reconciler::ReconcilerPlugin;
use crate::plugin::in_flight;
use crate::plugin::observe::{
    Again, AgainFuture, CallObserver, Live, Observed, PendingRecord, Replaying, RunAgain,
};
use crate::plugin::outcome::{CallKind, Finalized, GuestError, Outcome, ProviderCall, Reconciled};
use crate::plugin::sandbox::CallReport;
use crate::plugin::tape::Taped;

/// A reconciler export's result and what the call did besides.
type CallResult<T> = Result<(Result<T, GuestError>, CallReport), CallError>;

/// What a call was about, for its observer.
pub(super) struct About<'a> {
    pub(crate) call: CallKind,
    pub(crate) key: &'a str,
    pub(crate) obj: &'a str,
    /// Provider calls: the export and its arguments besides the pod.
    pub(crate) provider: Option<&'a ProviderCall>,
}

impl Loaded {
    /// `reconcile` on a fresh instance. Returns the guest's result and the
    /// writes it made (and, recording, the call's record). With a shadow
    /// candidate beside this version, the call is taped and offered to it.
    /// Bindings the call left in flight have landed (or failed it) when
    /// this returns; its instance was free for the next call meanwhile.
    pub async fn reconcile(&self, key: &str, obj: &str) -> CallResult<Reconciled> {
        let r = self.reconcile_observed(key, obj, &mut self.live()).await;
        self.landed(key, r).await
    }

    pub(crate) async fn finalize(&self, key: &str, obj: &str) -> CallResult<Finalized> {
        let r = self.finalize_observed(key, obj, &mut self.live()).await;
        self.landed(key, r).await
    }

    /// `r` once the bindings its call left in flight have landed: theirs
    /// join its writes; a failed one fails it (see [`in_flight`]).
    async fn landed<T>(&self, key: &str, mut r: CallResult<T>) -> CallResult<T> {
        let Ok((result, report)) = &mut r else {
            return r;
        };
        if report.in_flight.is_empty() {
            return r;
        }
        let landed = in_flight::land(std::mem::take(&mut report.in_flight)).await;
        if let Some(message) = settle(result, report, landed) {
            tracing::info!(plugin = %self.name, %key, %message, "a binding the call left in flight failed");
        }
        r
    }

    /// A live call's observer: this version's recording and shadow candidate.
    pub(super) fn live(&self) -> Live<'_> {
        Live::new(self.ctx.recording.as_ref(), self.ctx.shadow.as_ref())
    }

    /// Hands a call that returned to its observer: what it was about, what
    /// its tape held and its outcome. Returns what the host's own writes for
    /// the call join, if anything waits for them.
    pub(super) fn observed(
        &self,
        observer: &mut dyn CallObserver,
        about: About<'_>,
        taped: Taped,
        outcome: Outcome,
    ) -> Option<Arc<PendingRecord>> {
        observer.after_call(Observed {
            plugin: &self.name,
            digest: &self.digest,
            call: about.call,
            key: about.key,
            obj: about.obj,
            provider: about.provider,
            taped,
            outcome,
            redaction: self.live_redaction(),
        })
    }

    /// Runs a call again on this version, every import answered from
    /// `again`'s tape (the plugin must have been loaded for replay, or as a
    /// shadow candidate).
    pub(crate) async fn run_again(&self, again: Again) -> (Outcome, Taped) {
        let mut observer = Replaying::new(again.taping);
        let (key, obj) = (again.key.as_str(), again.obj.as_str());
        match (again.provider, again.call) {
            (Some(call), _) => {
                self.provider_observed(key, obj, &call, &mut observer).await;
            }
            (None, CallKind::Reconcile) => {
                let _ = self.reconcile_observed(key, obj, &mut observer).await;
            }
            (None, CallKind::Finalize) => {
                let _ = self.finalize_observed(key, obj, &mut observer).await;
            }
            (None, call @ (CallKind::Init | CallKind::Handle | CallKind::Status)) => {
                let error = format!("a {call:?} call has no reconciler export to run");
                return (Outcome::Failed { error }, Taped::default());
            }
        }
        observer.seen().unwrap_or_else(|| {
            let error = "the call was not taped".to_string();
            (Outcome::Failed { error }, Taped::default())
        })
    }

    async fn reconcile_observed(
        &self,
        key: &str,
        obj: &str,
        observer: &mut dyn CallObserver,
    ) -> CallResult<Reconciled> {
        let taping = observer.before_call();
        let watched = taping.on();
        let owned = obj.to_string();
        let (result, taped) = self
            .call_taped(key, taping, move |inst, s| {
                Box::pin(async move {
                    reconciler(inst)?
                        .wasmlet_plugin_reconciler()
                        .call_reconcile(s, &owned)
                        .await
                })
            })
            .await;
        let mut r = result.and_then(|(result, report)| {
            let result = match result {
                Ok(o) => Reconciled::try_from(o).map(Ok),
                Err(e) => GuestError::try_from(e).map(Err),
            };
            match result {
                Ok(result) => Ok((result, report)),
                Err(bad) => Err(self.refused(bad)),
            }
        });
        if watched {
            let about = About {
                call: CallKind::Reconcile,
                key,
                obj,
                provider: None,
            };
            let pending = self.observed(observer, about, taped, Outcome::of_reconcile(&r));
            keep_pending(&mut r, pending);
        }
        r
    }

    async fn finalize_observed(
        &self,
        key: &str,
        obj: &str,
        observer: &mut dyn CallObserver,
    ) -> CallResult<Finalized> {
        let taping = observer.before_call();
        let watched = taping.on();
        let owned = obj.to_string();
        let (result, taped) = self
            .call_taped(key, taping, move |inst, s| {
                Box::pin(async move {
                    reconciler(inst)?
                        .wasmlet_plugin_reconciler()
                        .call_finalize(s, &owned)
                        .await
                })
            })
            .await;
        let mut r = result.and_then(|(result, report)| {
            let result = match result {
                Ok(o) => Ok(Finalized::from(o)),
                Err(e) => match GuestError::try_from(e) {
                    Ok(e) => Err(e),
                    Err(bad) => return Err(self.refused(bad)),
                },
            };
            Ok((result, report))
        });
        if watched {
            let about = About {
                call: CallKind::Finalize,
                key,
                obj,
                provider: None,
            };
            let pending = self.observed(observer, about, taped, Outcome::of_finalize(&r));
            keep_pending(&mut r, pending);
        }
        r
    }
}

/// A loaded version runs calls again for replay and for the shadow.
impl RunAgain for Loaded {
    fn digest(&self) -> &str {
        &self.digest
    }

    fn run_again(&self, again: Again) -> AgainFuture<'_> {
        Box::pin(Loaded::run_again(self, again))
    }
}

/// Hands a call's pending record to its report, where the host adds its
/// writes before it is written; a failed call has no host writes to wait
/// for, so its record goes now (when `pending` drops).
fn keep_pending<T>(r: &mut CallResult<T>, pending: Option<Arc<PendingRecord>>) {
    if let Ok((_, report)) = r {
        report.record = pending;
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

/// Joins what a call's bindings in flight came to to its result and report:
/// the landed ones' writes, a retry soon, and the first failure as the
/// call's error (unless it failed already). Returns that failure.
fn settle<T>(
    result: &mut Result<T, GuestError>,
    report: &mut CallReport,
    landed: in_flight::Landed<crate::plugin::sandbox::Write>,
) -> Option<String> {
    report.writes.extend(landed.writes);
    report.retry_soon |= landed.retry_soon;
    let message = landed.failed?;
    if result.is_ok() {
        *result = Err(GuestError {
            terminal: false,
            reason: "BindingFailed".into(),
            message: message.clone(),
            status: None,
            conditions: vec![],
        });
    }
    Some(message)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugin::in_flight::Landed;
    use crate::plugin::sandbox::Write;

    fn bound(name: &str) -> Write {
        Write::Updated {
            api_version: "v1".into(),
            kind: "Pod".into(),
            namespace: Some("default".into()),
            name: name.into(),
            resource_version: "7".into(),
        }
    }

    /// A landed binding is one of the call's writes; a failed one fails a
    /// call that succeeded (not retried as a success), naming the pod; a
    /// conflict only asks for a retry soon.
    #[test]
    fn bindings_in_flight_settle_into_the_calls_result() {
        let mut result: Result<(), GuestError> = Ok(());
        let mut report = CallReport::default();
        let landed = Landed {
            writes: vec![bound("a")],
            retry_soon: true,
            failed: None,
        };
        assert_eq!(settle(&mut result, &mut report, landed), None);
        assert!(result.is_ok() && report.retry_soon);
        assert_eq!(report.writes, [bound("a")]);

        let landed = Landed {
            writes: vec![bound("b")],
            retry_soon: false,
            failed: Some("binding pod default/c to node n1: unavailable: x".into()),
        };
        assert!(settle(&mut result, &mut report, landed).is_some());
        let e = result.unwrap_err();
        assert_eq!(e.reason, "BindingFailed");
        assert!(!e.terminal && e.message.contains("default/c"), "{e:?}");
        assert_eq!(report.writes, [bound("a"), bound("b")]);
    }
}
