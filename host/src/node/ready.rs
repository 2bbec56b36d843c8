//! What the Node's `Ready` condition says, as the kubelet derives it from
//! its runtime's health: True only once the provider plugin is loaded, which
//! includes its first call (`graph`, the check that the version works);
//! False with a reason and a message naming the provider plugin while it
//! loads (`ProviderLoading`: before the first scan of the plugin directory
//! ends, or while a scan compiles it; about 25 s on a fresh data directory),
//! when it is missing from the plugin directory
//! (`ProviderMissing`), its only version was rejected (`ProviderRejected`:
//! a manifest or compile error) or it keeps faulting (`ProviderCrashLooping`:
//! traps, deadlines or out-of-memory, [`CRASH_LOOP_FAULTS`] within
//! [`crash_loop_window`]); True again once fixed. The heartbeat writes it and
//! the host's `/readyz` asks it (`node-agent`).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::plugin::PluginSet;
use crate::plugin::metrics::PluginMetrics;

/// The Ready reason while the provider plugin loads.
pub(crate) const PROVIDER_LOADING: &str = "ProviderLoading";

/// Faults of the provider that make it crash-looping within [`crash_loop_window`].
pub(crate) const CRASH_LOOP_FAULTS: usize = 3;

/// How far back provider faults count: 30 back-off bases, 300 s for the
/// kubelet's 10 s (its back-off cap), so a provider whose pods back off
/// at their longest still counts as crash-looping. A shortened base
/// (`--provider-backoff-base-ms`, for tests) shortens it alike.
pub(crate) fn crash_loop_window(backoff_base: Duration) -> Duration {
    backoff_base.saturating_mul(30)
}

/// Why the node is not ready: the condition's reason and message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct NotReady {
    pub(crate) reason: &'static str,
    pub(crate) message: String,
}

/// The provider's recent faults, counted per version.
#[derive(Default)]
struct Faults {
    /// The version they were counted for (a new version starts afresh).
    digest: String,
    /// The provider's fault counter at the last look.
    seen: u64,
    /// When each recent fault was noticed, newest last (at most [`CRASH_LOOP_FAULTS`]).
    at: VecDeque<Instant>,
}

impl Faults {
    /// Takes in the counter's value `total` for version `digest` at `now`;
    /// returns how many faults fall in the window.
    fn observe(&mut self, digest: &str, total: u64, now: Instant, window: Duration) -> usize {
        if self.digest != digest {
            self.digest = digest.to_string();
            self.at.clear();
        } else {
            let new = total
                .saturating_sub(self.seen)
                .min(CRASH_LOOP_FAULTS as u64);
            for _ in 0..new {
                if self.at.len() == CRASH_LOOP_FAULTS {
                    self.at.pop_front();
                }
                self.at.push_back(now);
            }
        }
        self.seen = total;
        while self
            .at
            .front()
            .is_some_and(|t| now.duration_since(*t) > window)
        {
            self.at.pop_front();
        }
        self.at.len()
    }
}

/// The node's readiness, from the plugin set.
pub(crate) struct Readiness {
    plugins: Arc<PluginSet>,
    provider: String,
    faults: Mutex<Faults>,
    /// [`crash_loop_window`] of the node's back-off base.
    window: Duration,
}

impl Readiness {
    pub(crate) fn new(
        plugins: Arc<PluginSet>,
        provider: &str,
        backoff_base: Duration,
    ) -> Readiness {
        Readiness {
            plugins,
            provider: provider.to_string(),
            faults: Mutex::default(),
            window: crash_loop_window(backoff_base),
        }
    }

    /// `Ok` when the provider can run pods: loaded, its first call done.
    pub(crate) fn check(&self) -> Result<(), NotReady> {
        let name = &self.provider;
        let Some(loaded) = self.plugins.get(name) else {
            if self.plugins.scanned() == 0 || self.plugins.loading(name) {
                return Err(NotReady {
                    reason: PROVIDER_LOADING,
                    message: format!(
                        "provider plugin {name} is loading (compiling, then its first call); pods bound here wait for it"
                    ),
                });
            }
            if let Some(why) = self.plugins.rejection(name) {
                return Err(NotReady {
                    reason: "ProviderRejected",
                    message: format!("provider plugin {name} was rejected: {}", short(&why)),
                });
            }
            return Err(NotReady {
                reason: "ProviderMissing",
                message: format!(
                    "provider plugin {name} is not in the plugin directory ({name}.wasm and {name}.toml; flag --provider)"
                ),
            });
        };
        let m = self.plugins.metrics(name);
        let total = PluginMetrics::get(&m.traps)
            + PluginMetrics::get(&m.timeouts)
            + PluginMetrics::get(&m.out_of_memory);
        let recent = self
            .faults
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .observe(&loaded.digest, total, Instant::now(), self.window);
        if recent >= CRASH_LOOP_FAULTS {
            return Err(NotReady {
                reason: "ProviderCrashLooping",
                message: format!(
                    "provider plugin {name} faulted (trap, deadline or out of memory) {recent} times in the last {}; see the pods' ProviderBackOff events and the host log",
                    crate::node::pods::show_delay(self.window)
                ),
            });
        }
        Ok(())
    }
}

/// A load error cut to [`MESSAGE_MAX`] characters (compile errors can run
/// long; the host log has them whole).
fn short(why: &str) -> String {
    match why.char_indices().nth(MESSAGE_MAX) {
        Some((i, _)) => format!("{}…", &why[..i]),
        None => why.to_string(),
    }
}

/// The longest rejection reason the condition's message carries.
pub(crate) const MESSAGE_MAX: usize = 1024;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_reason_is_cut() {
        assert_eq!(short("short"), "short");
        let long = "é".repeat(MESSAGE_MAX + 10);
        assert_eq!(short(&long).chars().count(), MESSAGE_MAX + 1);
    }

    #[test]
    fn faults_count_within_the_window_and_a_new_version_starts_afresh() {
        let mut f = Faults::default();
        let t0 = Instant::now();
        const CRASH_LOOP_WINDOW: Duration = Duration::from_secs(300);
        let w = crash_loop_window(Duration::from_secs(10));
        assert_eq!(w, CRASH_LOOP_WINDOW);
        assert_eq!(f.observe("v1", 0, t0, w), 0);
        assert_eq!(f.observe("v1", 2, t0, w), 2);
        assert_eq!(f.observe("v1", 1_000_000, t0, w), CRASH_LOOP_FAULTS);
        assert_eq!(
            f.observe(
                "v1",
                1_000_000,
                t0 + CRASH_LOOP_WINDOW + Duration::from_secs(1),
                w
            ),
            0
        );
        assert_eq!(f.observe("v1", 1_000_005, t0 + CRASH_LOOP_WINDOW * 2, w), 3);
        assert_eq!(f.observe("v2", 1_000_009, t0 + CRASH_LOOP_WINDOW * 2, w), 0);
        assert_eq!(f.observe("v2", 1_000_010, t0 + CRASH_LOOP_WINDOW * 2, w), 1);
    }
}
