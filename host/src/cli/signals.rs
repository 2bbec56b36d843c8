//! Stopping on SIGTERM (what Kubernetes and systemd send) as on SIGINT
//! (Ctrl-C): the first signal starts the drain, a second one ends the
//! process at once, and the drain itself is bounded so that the process
//! exits before the orchestrator's SIGKILL (a pod's default grace is 30 s).

use std::time::Duration;

use tokio::signal::unix::{Signal, SignalKind, signal};

/// How long the drain may take before the process exits anyway.
pub(super) const DRAIN_BOUND: Duration = Duration::from_secs(25);

/// The process's SIGINT and SIGTERM handlers. Installed before anything
/// starts: a SIGTERM that arrived before would kill the process undrained.
pub(super) struct Signals {
    int: Signal,
    term: Signal,
}

impl Signals {
    pub(super) fn install() -> std::io::Result<Signals> {
        Ok(Signals {
            int: signal(SignalKind::interrupt())?,
            term: signal(SignalKind::terminate())?,
        })
    }

    /// Waits for SIGINT or SIGTERM; returns its name and number.
    async fn next(&mut self) -> (&'static str, i32) {
        tokio::select! {
            _ = self.int.recv() => ("SIGINT", 2),
            _ = self.term.recv() => ("SIGTERM", 15),
        }
    }

    /// Waits for the first signal, says that the process drains, and from
    /// then on ends the process at once on another (exit status 128 + the
    /// signal's number, as if it had not been caught).
    pub(super) async fn wait(mut self) {
        let (name, _) = self.next().await;
        tracing::info!(signal = name, bound = ?DRAIN_BOUND, "draining: no new work, in-flight calls finish, workloads stop within their grace; a second signal exits at once");
        eprintln!("wasmlet: {name}: draining (a second SIGINT or SIGTERM exits at once)");
        tokio::spawn(async move {
            let (name, number) = self.next().await;
            eprintln!("wasmlet: {name} again: exiting without finishing the drain");
            std::process::exit(128 + number);
        });
    }
}

/// Runs `drain` within [`DRAIN_BOUND`]; past it the process exits non-zero
/// (a drain stuck on an unreachable API server must not outlive the grace period).
pub(super) async fn bounded(drain: impl std::future::Future<Output = ()>) -> anyhow::Result<()> {
    let started = std::time::Instant::now();
    match tokio::time::timeout(DRAIN_BOUND, drain).await {
        Ok(()) => {
            tracing::info!(took = ?started.elapsed(), "drained; exiting");
            eprintln!(
                "wasmlet: drained in {:.1} s",
                started.elapsed().as_secs_f64()
            );
            Ok(())
        }
        Err(_) => anyhow::bail!(
            "the drain did not finish within {} s; exiting anyway",
            DRAIN_BOUND.as_secs()
        ),
    }
}
