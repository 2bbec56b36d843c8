//! The observer a plugin call is handed: recording and shadowing see the
//! live call only through it, and it sees neither, so that imports run one
//! way: `loaded` → `observe` ← `record`, `shadow` (checked by `layers`).
//!
//! A call ([`crate::plugin::Loaded`]'s exports) asks its [`CallObserver`] how
//! its store's tape runs ([`CallObserver::before_call`]) and, once it
//! returned, hands it what the tape holds and the outcome
//! ([`CallObserver::after_call`]). The observers:
//!
//! - [`Live`]: a live call of a version that is recorded or has a shadow
//!   candidate beside it, each a [`Watcher`] (`record::Recording`,
//!   `shadow::ShadowSlot`) the call is offered to once it returned;
//! - [`Replaying`]: a call made again from a tape ([`Again`]: a recorded
//!   call replayed, a live call run on a shadow candidate), which keeps what
//!   became of it for the caller to compare.
//!
//! A plugin version that runs calls again is a [`RunAgain`], so that a shadow
//! candidate is run without the shadow knowing the loaded plugin.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use serde_json::Value;

use super::outcome::{CallKind, Outcome, ProviderCall};
use super::tape::{Redaction, TapeMode, Taped};

/// How a call's tape runs.
#[derive(Debug, Clone)]
pub(crate) struct Taping {
    pub(crate) mode: TapeMode,
    /// A replayed store's `wasi:random/insecure-seed` (a live store's is random).
    pub(crate) seed: u128,
}

impl Taping {
    /// No tape for this call.
    pub(crate) fn off() -> Taping {
        Taping {
            mode: TapeMode::Off,
            seed: 0,
        }
    }

    /// Whether the call is taped (and so observed once it returned).
    pub(crate) fn on(&self) -> bool {
        !matches!(self.mode, TapeMode::Off)
    }
}

/// A call as its observer sees it once it returned.
#[derive(Debug, Clone)]
pub(crate) struct Observed<'a> {
    /// The plugin's name and the version's digest (sha256 of its `.wasm`).
    pub(crate) plugin: &'a str,
    pub(crate) digest: &'a str,
    pub(crate) call: CallKind,
    pub(crate) key: &'a str,
    /// The object the call was given (a provider's pod), as JSON text.
    pub(crate) obj: &'a str,
    /// Provider calls: the export and its arguments besides the pod.
    pub(crate) provider: Option<&'a ProviderCall>,
    /// What the call's tape held, whether the call succeeded or not.
    pub(crate) taped: Taped,
    pub(crate) outcome: Outcome,
    /// How the call's tape redacted what it holds.
    pub(crate) redaction: Redaction,
}

/// What the host's own writes because of a call join: the call's record,
/// while recording, kept until the host's writes for it are in (written when
/// the last holder drops it).
pub(crate) trait HostWrites: Send + Sync + std::fmt::Debug {
    /// Adds a host write and its response (the stored resourceVersion, or the error).
    fn host_write(&self, op: &str, key: &str, body: &Value, result: Result<Option<&str>, String>);
}

/// A call's record waiting for the host's writes (see [`HostWrites`]).
pub(crate) type PendingRecord = dyn HostWrites;

/// Sees one call: sets its tape before it runs, and takes what the tape and
/// the outcome hold after.
pub(crate) trait CallObserver: Send {
    /// How the call's tape runs; [`TapeMode::Off`]: the call is not
    /// observed, and [`CallObserver::after_call`] not called.
    fn before_call(&mut self) -> Taping;

    /// The call, once it returned (succeeded or failed). Returns what the
    /// host's own writes for the call join, if anything waits for them.
    fn after_call(&mut self, call: Observed<'_>) -> Option<Arc<PendingRecord>>;
}

/// Something that watches a plugin version's live calls: its recording, a
/// shadow candidate beside it.
pub(crate) trait Watcher: Send + Sync {
    /// Whether it watches the live call about to run (a shadow candidate
    /// that would skip it says no, and counts the skip, so the call is not
    /// taped for nothing).
    fn watches(&self) -> bool;

    /// A live call it watched, once it returned; returns what the host's own
    /// writes for the call join, if anything waits for them.
    fn seen(&self, call: Observed<'_>) -> Option<Arc<PendingRecord>>;

    /// How live calls are taped for it, when it says (a recording's
    /// redaction); `None`: they keep everything.
    fn redaction(&self) -> Option<&Redaction> {
        None
    }
}

/// A live call's observer: its version's watchers that watch this call.
pub(crate) struct Live<'a> {
    watching: Vec<&'a dyn Watcher>,
}

impl<'a> Live<'a> {
    /// The live call of a version recorded by `recording` (which watches
    /// every call) and with `shadow` beside it (which may skip this one).
    pub(crate) fn new(
        recording: Option<&'a Arc<dyn Watcher>>,
        shadow: Option<&'a Arc<dyn Watcher>>,
    ) -> Live<'a> {
        let mut watching: Vec<&'a dyn Watcher> = Vec::new();
        if let Some(r) = recording {
            watching.push(r.as_ref());
        }
        if let Some(s) = shadow.filter(|s| s.watches()) {
            watching.push(s.as_ref());
        }
        Live { watching }
    }
}

impl CallObserver for Live<'_> {
    fn before_call(&mut self) -> Taping {
        if self.watching.is_empty() {
            return Taping::off();
        }
        // A live store's seed is random; only a replay's is given.
        Taping {
            mode: TapeMode::Record,
            seed: 0,
        }
    }

    fn after_call(&mut self, call: Observed<'_>) -> Option<Arc<PendingRecord>> {
        let (last, first) = self.watching.split_last()?;
        let mut pending = None;
        // Each watcher but the last gets a copy; the last takes the tape.
        for w in first {
            pending = pending.or(w.seen(call.clone()));
        }
        pending.or(last.seen(call))
    }
}

/// A call to make again on a plugin version, every import answered from a
/// tape: a recorded call replayed ([`TapeMode::Replay`]), a live call run on
/// a shadow candidate ([`TapeMode::Shadow`]).
#[derive(Debug, Clone)]
pub(crate) struct Again {
    pub(crate) call: CallKind,
    pub(crate) key: String,
    /// The object the call is given (a provider's pod), as JSON text.
    pub(crate) obj: String,
    /// Provider calls: the export and its arguments besides the pod.
    pub(crate) provider: Option<ProviderCall>,
    pub(crate) taping: Taping,
}

/// The observer of a call made again: answers it from its tape and keeps
/// what became of it.
pub(crate) struct Replaying {
    taping: Option<Taping>,
    seen: Option<(Outcome, Taped)>,
}

impl Replaying {
    pub(crate) fn new(taping: Taping) -> Replaying {
        Replaying {
            taping: Some(taping),
            seen: None,
        }
    }

    /// The call's outcome and what its tape held; `None`: it never ran.
    pub(crate) fn seen(self) -> Option<(Outcome, Taped)> {
        self.seen
    }
}

impl CallObserver for Replaying {
    fn before_call(&mut self) -> Taping {
        self.taping.take().unwrap_or_else(Taping::off)
    }

    fn after_call(&mut self, call: Observed<'_>) -> Option<Arc<PendingRecord>> {
        self.seen = Some((call.outcome, call.taped));
        None
    }
}

/// What running a call again gives: its outcome and what its tape held.
pub(crate) type AgainFuture<'a> = Pin<Box<dyn Future<Output = (Outcome, Taped)> + Send + 'a>>;

/// A plugin version that runs calls again (loaded for replay, or as a
/// shadow candidate).
pub(crate) trait RunAgain: Send + Sync {
    /// The version's digest (sha256 of its `.wasm`).
    fn digest(&self) -> &str;

    /// Runs `again` on this version.
    fn run_again(&self, again: Again) -> AgainFuture<'_>;
}
