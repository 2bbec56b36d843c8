//! One container's probes for one of its workloads: the startup probe until
//! it passes, then readiness and liveness side by side, until the workload
//! is replaced or the pod is gone (`stop`).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Pod, Probe};
use kube::runtime::events::{Event, EventType, Recorder};
use tokio::sync::mpsc;

use super::super::pods::Wake;
use super::super::workloads::exec::ExecRequest;
use super::super::workloads::{RunState, WorkloadManager};
use super::{PROBE_MAX_MEMORY, PROBE_OUTPUT_MAX, Shared};

pub(super) struct Worker {
    pub(super) workloads: Arc<WorkloadManager>,
    pub(super) recorder: Recorder,
    pub(super) results: Shared,
    pub(super) pod: Arc<Pod>,
    pub(super) uid: String,
    pub(super) container: Container,
    pub(super) handle: u64,
    pub(super) stop: Arc<AtomicBool>,
    pub(super) wake: mpsc::UnboundedSender<Wake>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Startup,
    Readiness,
    Liveness,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Startup => "Startup",
            Kind::Readiness => "Readiness",
            Kind::Liveness => "Liveness",
        }
    }
}

/// A probe's settings, with upstream's defaults.
struct Timing {
    initial_delay: Duration,
    period: Duration,
    timeout: Duration,
    success_threshold: u32,
    failure_threshold: u32,
}

impl Timing {
    fn of(p: &Probe) -> Timing {
        let secs =
            |v: Option<i32>, default: i32| Duration::from_secs(v.unwrap_or(default).max(0) as u64);
        Timing {
            initial_delay: secs(p.initial_delay_seconds, 0),
            period: secs(p.period_seconds, 10).max(Duration::from_secs(1)),
            timeout: secs(p.timeout_seconds, 1).max(Duration::from_secs(1)),
            success_threshold: p.success_threshold.unwrap_or(1).max(1) as u32,
            failure_threshold: p.failure_threshold.unwrap_or(3).max(1) as u32,
        }
    }
}

impl Worker {
    pub(super) async fn run(self) {
        let c = &self.container;
        if let Some(p) = c.startup_probe.clone() {
            if !self.until_threshold(Kind::Startup, &p).await {
                return;
            }
            self.record(|r| r.started = true);
        }
        let readiness = c.readiness_probe.clone();
        let liveness = c.liveness_probe.clone();
        let ready = async {
            if let Some(p) = readiness {
                self.readiness(&p).await;
            }
        };
        // A liveness kill ends the workload, and with it the readiness loop.
        let live = async {
            if let Some(p) = liveness {
                self.until_threshold(Kind::Liveness, &p).await;
            }
        };
        tokio::join!(ready, live);
    }

    fn stopped(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
            || !matches!(
                self.workloads.status(self.handle).map(|s| s.state),
                Ok(RunState::Running)
            )
    }

    fn record(&self, f: impl FnOnce(&mut super::Results)) {
        if self
            .results
            .set(&self.uid, &self.container.name, self.handle, f)
        {
            let _ = self.wake.send(Wake::ProbeChanged);
        }
    }

    /// Readiness, for as long as the workload runs: ready after
    /// `successThreshold` passes in a row, unready after `failureThreshold` failures.
    async fn readiness(&self, p: &Probe) {
        let t = Timing::of(p);
        tokio::time::sleep(t.initial_delay).await;
        let (mut passes, mut failures) = (0, 0);
        while !self.stopped() {
            if self.probe(Kind::Readiness, p, &t).await {
                passes += 1;
                failures = 0;
                if passes >= t.success_threshold {
                    self.record(|r| r.ready = true);
                }
            } else {
                failures += 1;
                passes = 0;
                if failures >= t.failure_threshold {
                    self.record(|r| r.ready = false);
                }
            }
            tokio::time::sleep(t.period).await;
        }
    }

    /// Startup (until it passes once) and liveness (for as long as it passes):
    /// `failureThreshold` failures in a row kill the container, which restarts
    /// per `restartPolicy`. `false` when the container was killed or stopped.
    async fn until_threshold(&self, kind: Kind, p: &Probe) -> bool {
        let t = Timing::of(p);
        tokio::time::sleep(t.initial_delay).await;
        let mut failures = 0;
        while !self.stopped() {
            if self.probe(kind, p, &t).await {
                failures = 0;
                if kind == Kind::Startup {
                    return true;
                }
            } else {
                failures += 1;
                if failures >= t.failure_threshold {
                    self.kill(kind, p).await;
                    return false;
                }
            }
            tokio::time::sleep(t.period).await;
        }
        false
    }

    async fn kill(&self, kind: Kind, p: &Probe) {
        // The probe's own grace, else the pod's (upstream's order).
        let grace = p
            .termination_grace_period_seconds
            .or_else(|| self.pod.spec.as_ref()?.termination_grace_period_seconds)
            .unwrap_or(30)
            .max(0) as u64;
        let note = format!(
            "Container {} failed {} probe, will be restarted",
            self.container.name,
            kind.name().to_lowercase()
        );
        self.event(EventType::Normal, "Killing", note).await;
        let ms = (grace * 1000).min(u64::from(u32::MAX)) as u32;
        let _ = self.workloads.kill(self.handle, ms);
    }

    /// One run of the probe: `true` when it passed.
    async fn probe(&self, kind: Kind, p: &Probe, t: &Timing) -> bool {
        let Some(command) = p.exec.as_ref().and_then(|e| e.command.clone()) else {
            let note = format!(
                "{} probe failed: only exec probes are served on wasmlet nodes (workloads have no sockets for httpGet, tcpSocket or grpc)",
                kind.name()
            );
            self.event(EventType::Warning, "Unhealthy", note).await;
            return false;
        };
        let (ok, output) = self.exec(&command, t.timeout).await;
        if !ok {
            let note = format!("{} probe failed: {}", kind.name(), output.trim_end());
            self.event(EventType::Warning, "Unhealthy", note).await;
        }
        ok
    }

    /// Runs the command; its exit 0 within `timeout` passes. The output is
    /// kept up to [`PROBE_OUTPUT_MAX`] (the rest is read and dropped).
    async fn exec(&self, command: &[String], timeout: Duration) -> (bool, String) {
        let req = ExecRequest {
            pod_uid: self.uid.clone(),
            container: self.container.name.clone(),
            command: command.to_vec(),
            stdin: false,
            session: false,
            memory_cap: Some(PROBE_MAX_MEMORY),
        };
        let mut exec = match self.workloads.exec(req) {
            Ok(e) => e,
            Err(e) => return (false, e.to_string()),
        };
        let handle = exec.handle;
        let mut out: Vec<u8> = Vec::new();
        let run = async {
            while let Some((_, bytes)) = exec.output.recv().await {
                let room = PROBE_OUTPUT_MAX.saturating_sub(out.len());
                out.extend_from_slice(&bytes[..bytes.len().min(room)]);
            }
            self.workloads.wait(handle).await
        };
        let ended = tokio::time::timeout(timeout, run).await;
        let text = String::from_utf8_lossy(&out).into_owned();
        match ended {
            Ok(Ok(s)) => match s.state {
                RunState::Exited(0) => (true, text),
                RunState::Exited(code) => (false, format!("{text}(exit code {code})")),
                RunState::Failed(why) => (false, format!("{text}{why}")),
                RunState::Running => (false, text),
            },
            Ok(Err(e)) => (false, e.to_string()),
            Err(_) => {
                let _ = self.workloads.kill(handle, 0);
                (
                    false,
                    format!("command {command:?} timed out after {}s", timeout.as_secs()),
                )
            }
        }
    }

    async fn event(&self, type_: EventType, reason: &str, note: String) {
        let reference = k8s_openapi::api::core::v1::ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
            namespace: self.pod.metadata.namespace.clone(),
            name: self.pod.metadata.name.clone(),
            uid: self.pod.metadata.uid.clone(),
            field_path: Some(format!("spec.containers{{{}}}", self.container.name)),
            ..Default::default()
        };
        let ev = Event {
            type_,
            reason: reason.into(),
            note: Some(note),
            action: "Probe".into(),
            secondary: None,
        };
        if let Err(e) = self.recorder.publish(&ev, &reference).await {
            tracing::debug!(error = %e, "could not record a probe event");
        }
    }
}
