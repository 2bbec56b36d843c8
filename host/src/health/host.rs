//! The host's own checks, served on its metrics address in kube-apiserver's
//! format (`wasmlet_apiserver::health::format`). Each applies only where the host has the part it
//! checks:
//!
//! - `ping`; `runtime`: the async runtime still runs a 1 s heartbeat task
//!   (a wedged runtime answers nothing, a starved one fails this);
//! - `store`: the embedded API server's store takes writes (`wasmlet up`);
//! - readiness only: `caches-synced` (every started cache has listed once),
//!   `plugin-set` (the first scan has finished and no plugin in the directory
//!   is without a running version), `node-agent` (the provider can run pods,
//!   the node's Lease is renewed), `leader-lease` (the leader election loop
//!   runs, with `--leader-elect`), `shutdown` (fails while draining).
//!
//! `/livez` and `/healthz` ask whether the process can serve (restart it if
//! not); `/readyz` whether it should get work.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use crate::cluster::cache::Caches;
use crate::plugin::PluginSet;

/// A check's probe: `Err` says why it fails.
pub(crate) type Probe = Arc<dyn Fn() -> Result<(), String> + Send + Sync>;

/// How long the runtime's heartbeat task may go unrun before `runtime` fails.
pub(crate) const RUNTIME_STALL: Duration = Duration::from_secs(10);

/// The host's checks; parts are filled in as the host starts.
pub(crate) struct HostChecks {
    born: Instant,
    /// Milliseconds after `born` of the heartbeat task's last run.
    beat: AtomicU64,
    started: AtomicBool,
    draining: AtomicBool,
    pub(crate) store: OnceLock<Probe>,
    pub(crate) caches: OnceLock<Arc<Caches>>,
    pub(crate) plugins: OnceLock<Arc<PluginSet>>,
    pub(crate) node: OnceLock<Probe>,
    /// Whether the leader election loop still runs.
    pub(crate) leader: OnceLock<Arc<AtomicBool>>,
}

impl HostChecks {
    /// The checks, with the runtime's heartbeat task started.
    pub(crate) fn start() -> Arc<HostChecks> {
        let checks = Arc::new(HostChecks {
            born: Instant::now(),
            beat: AtomicU64::new(0),
            started: AtomicBool::new(false),
            draining: AtomicBool::new(false),
            store: OnceLock::new(),
            caches: OnceLock::new(),
            plugins: OnceLock::new(),
            node: OnceLock::new(),
            leader: OnceLock::new(),
        });
        let weak = Arc::downgrade(&checks);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let Some(c) = weak.upgrade() else { return };
                c.beat
                    .store(c.born.elapsed().as_millis() as u64, Ordering::Release);
            }
        });
        checks
    }

    /// The first plugin scan has finished.
    pub(crate) fn set_started(&self) {
        self.started.store(true, Ordering::Release);
    }

    /// Draining: `shutdown` fails from now on.
    pub(crate) fn set_draining(&self) {
        self.draining.store(true, Ordering::Release);
    }

    /// The checks `endpoint` (`livez`, `healthz` or `readyz`) runs, in order.
    pub(crate) fn names(&self, endpoint: &str) -> Vec<&'static str> {
        let mut names = vec!["ping", "runtime"];
        if self.store.get().is_some() {
            names.push("store");
        }
        if endpoint == "readyz" {
            if self.caches.get().is_some() {
                names.push("caches-synced");
            }
            if self.plugins.get().is_some() {
                names.push("plugin-set");
            }
            if self.node.get().is_some() {
                names.push("node-agent");
            }
            if self.leader.get().is_some() {
                names.push("leader-lease");
            }
            names.push("shutdown");
        }
        names
    }

    /// Runs check `name`.
    pub(crate) fn check(&self, name: &str) -> Result<(), String> {
        match name {
            "runtime" => {
                let last = Duration::from_millis(self.beat.load(Ordering::Acquire));
                let stalled = self.born.elapsed().saturating_sub(last);
                if stalled > RUNTIME_STALL {
                    return Err(format!(
                        "the async runtime has not run its 1 s heartbeat task for {}s",
                        stalled.as_secs()
                    ));
                }
                Ok(())
            }
            "store" => self.store.get().map_or(Ok(()), |p| p()),
            "caches-synced" => match self.caches.get().map(|c| c.unsynced()) {
                Some(kinds) if !kinds.is_empty() => {
                    Err(format!("caches not synced yet: {}", short_list(&kinds)))
                }
                _ => Ok(()),
            },
            "plugin-set" => {
                if !self.started.load(Ordering::Acquire) {
                    return Err("the first plugin scan has not finished".into());
                }
                let down = self
                    .plugins
                    .get()
                    .map(|p| p.not_running())
                    .unwrap_or_default();
                if down.is_empty() {
                    return Ok(());
                }
                let named: Vec<String> = down
                    .iter()
                    .map(|(n, why)| format!("{n} (rejected: {why})"))
                    .collect();
                Err(format!(
                    "plugins with no running version: {}",
                    short_list(&named)
                ))
            }
            "node-agent" => self.node.get().map_or(Ok(()), |p| p()),
            "leader-lease" => match self.leader.get() {
                Some(alive) if !alive.load(Ordering::Acquire) => {
                    Err("the leader election loop has stopped".into())
                }
                _ => Ok(()),
            },
            "shutdown" if self.draining.load(Ordering::Acquire) => {
                Err("the process is shutting down".into())
            }
            _ => Ok(()),
        }
    }
}

/// The first five of a list, and how many more.
fn short_list(items: &[String]) -> String {
    let mut s = items.iter().take(5).cloned().collect::<Vec<_>>().join(", ");
    if items.len() > 5 {
        s.push_str(&format!(" and {} more", items.len() - 5));
    }
    s
}

/// Sets `alive` false when dropped: wrapped around a task's future, it
/// tells when the task ended, panicked or was aborted.
pub(crate) struct AliveGuard(pub Arc<AtomicBool>);

impl Drop for AliveGuard {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn checks_apply_only_where_the_host_has_the_part_and_shutdown_fails_when_draining() {
        let c = HostChecks::start();
        assert_eq!(c.names("livez"), ["ping", "runtime"]);
        assert_eq!(c.names("readyz"), ["ping", "runtime", "shutdown"]);
        let _ = c.store.set(Arc::new(|| Err("disk I/O error".into())));
        let _ = c.node.set(Arc::new(|| Ok(())));
        assert_eq!(c.names("healthz"), ["ping", "runtime", "store"]);
        assert_eq!(
            c.names("readyz"),
            ["ping", "runtime", "store", "node-agent", "shutdown"]
        );
        assert_eq!(c.check("store").unwrap_err(), "disk I/O error");
        assert!(c.check("shutdown").is_ok());
        c.set_draining();
        assert!(c.check("shutdown").is_err());
        let alive = Arc::new(AtomicBool::new(true));
        let _ = c.leader.set(alive.clone());
        assert!(c.check("leader-lease").is_ok());
        drop(AliveGuard(alive));
        assert!(c.check("leader-lease").is_err());
    }
}
