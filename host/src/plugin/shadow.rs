//! Shadow mode (issue 15): a candidate version of a reconciler runs beside
//! the live one on live traffic, and its decisions are compared with the live
//! version's before it is ever allowed to write.
//!
//! The candidate is `NAME.shadow.wasm` beside the live `NAME.wasm` (under the
//! live manifest; `wasmlet plugin shadow NAME CANDIDATE.wasm` puts it there).
//! While it runs, each live call is taped and, once it has returned, handed to
//! the candidate as a [`ShadowJob`]: the same object, answered from the live
//! call's tape ([`TapeMode::Shadow`]), so the
//! candidate sees the same cache snapshot, HTTP responses, clocks and random.
//! Cluster reads the live call did not make are read from the cache; every
//! write, eviction, event and HTTP request the live call did not make is held
//! back (the candidate's cluster access is read-only as well, so nothing it
//! asks for reaches the API server). The two decisions (outcome and writes)
//! are compared as a replay compares them ([`judge`]), counted in
//! `wasmlet_shadow_calls_total{plugin,result="same|different|error"}`, and
//! each difference is logged with its key and kept for
//! `wasmlet plugin shadow-report NAME` (the last [`KEPT`]).
//!
//! Shadow work never delays live work: candidate calls run one at a time on a
//! thread of their own at idle CPU priority (`SCHED_IDLE`: it gets only the
//! CPU time live work leaves; nice +10 where that is refused), off the
//! runtime that serves live calls, and a live call finding [`QUEUE`] calls already
//! waiting is skipped (counted in `wasmlet_shadow_skipped_total`), never waited for.
//! Nor may the candidate take more than [`CPU_SHARE`] of a core over time
//! (bursts of up to [`CPU_BURST`] of CPU time pass): idle priority alone
//! still let it cost a busy host ~10 % of its throughput on 2 cores (it
//! shares the engine, the allocator and memory bandwidth), so past its share
//! it skips calls too, and until its share has refilled live calls are not
//! even taped for it. Under sustained load the candidate samples live
//! traffic instead of following every call.
//!
//! The live call knows its shadow only as a [`Watcher`] (the slot), and the
//! shadow its candidate only as a [`RunAgain`]: neither imports the other
//! (see [`super::observe`]).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwapOption;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::mpsc;
use wasmlet_apimachinery::time::now_rfc3339_millis;

use super::metrics::PluginMetrics;
use super::observe::{Again, Observed, PendingRecord, RunAgain, Taping, Watcher};
use super::outcome::{CallKind, Outcome};
use super::record::CallRecord;
use super::record::replay::{Verdict, judge};
use super::tape::{Entry, Redaction, TapeMode};

/// How many differences a plugin's shadow keeps for its report.
pub(crate) const KEPT: usize = 100;
/// Live calls that may wait for the candidate; a call beyond is skipped.
pub(crate) const QUEUE: usize = 256;
/// The candidate thread's CPU time over time at most, as a share of one core.
pub(crate) const CPU_SHARE: f64 = 0.1;
/// CPU time the candidate may spend at once beyond its share (a burst of
/// changes is judged whole, up to this much of the candidate's CPU).
pub(crate) const CPU_BURST: std::time::Duration = std::time::Duration::from_millis(250);

/// How much lower the candidate's thread runs than the host (`nice`) where
/// the idle scheduling class is refused.
const NICENESS: i32 = 10;

/// A live call, handed to the candidate: its input and everything the live
/// version's imports answered, in order.
pub(crate) struct ShadowJob {
    pub(crate) call: CallKind,
    pub(crate) key: String,
    pub(crate) obj: String,
    pub(crate) entries: Vec<Entry>,
    /// The live store's `wasi:random/insecure-seed`.
    pub(crate) seed: u128,
    pub(crate) outcome: Outcome,
    /// How the live call's tape redacted (the candidate's is the same, so
    /// their requests compare alike).
    pub(crate) redaction: Redaction,
}

/// How a candidate's call compared with the live one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum ShadowResult {
    Same,
    /// Another outcome or other writes, or a request the live call did not make.
    Different,
    /// The candidate trapped, timed out or ran out of memory where the live
    /// version did not.
    Error,
}

impl ShadowResult {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            ShadowResult::Same => "same",
            ShadowResult::Different => "different",
            ShadowResult::Error => "error",
        }
    }
}

/// One place where the two decisions differ (a JSON pointer into
/// `{"outcome": .., "writes": [..]}`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Change {
    pub(crate) path: String,
    pub(crate) live: Value,
    pub(crate) candidate: Value,
}

/// A call the candidate decided differently, as the report shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) struct Difference {
    pub(crate) at: String,
    pub(crate) key: String,
    pub(crate) call: CallKind,
    pub(crate) result: ShadowResult,
    /// The candidate's digest (sha256 of its `.wasm`).
    pub(crate) candidate: String,
    pub(crate) changes: Vec<Change>,
    /// The first request the candidate made that the live call did not (held back).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) asked: Option<Entry>,
}

/// What `GET /shadow/NAME` answers and `wasmlet plugin shadow-report` prints.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct Report {
    pub(crate) plugin: String,
    /// The running candidate's digest; `None`: no candidate now.
    pub(crate) candidate: Option<String>,
    /// Counted since the host started, across candidates.
    pub same: u64,
    pub different: u64,
    pub error: u64,
    pub skipped: u64,
    /// The last [`KEPT`] differences of the running candidate, newest first.
    pub(crate) differences: Vec<Difference>,
}

/// Per plugin name, shared by its live versions: the candidate running
/// beside them now, and what it found.
pub struct ShadowSlot {
    pub(crate) name: String,
    current: ArcSwapOption<Shadow>,
    metrics: Arc<PluginMetrics>,
    differences: Arc<Mutex<VecDeque<Difference>>>,
    /// The candidate's files' fingerprint (`.shadow.wasm` + manifest).
    pub(super) fingerprint: Mutex<String>,
}

/// A running candidate: where live calls are handed to it.
pub(crate) struct Shadow {
    pub(crate) digest: String,
    jobs: mpsc::Sender<ShadowJob>,
    metrics: Arc<PluginMetrics>,
    gate: Arc<Gate>,
}

impl Shadow {
    /// Whether the candidate would take a call now; `false` counts the call
    /// as skipped (the caller then neither tapes nor offers it).
    pub(crate) fn accepting(&self) -> bool {
        let open = self.jobs.capacity() > 0 && self.gate.open();
        if !open {
            PluginMetrics::inc(&self.metrics.shadow_skipped);
        }
        open
    }

    /// Hands a live call to the candidate, or skips it when the candidate is
    /// [`QUEUE`] calls behind: the live call never waits.
    pub(crate) fn offer(&self, job: ShadowJob) {
        if self.jobs.try_send(job).is_err() {
            PluginMetrics::inc(&self.metrics.shadow_skipped);
        }
    }
}

/// Until when the candidate's CPU budget is spent, shared with live calls
/// so that they stop taping meanwhile.
struct Gate {
    since: std::time::Instant,
    /// Nanoseconds after `since` before which calls are skipped.
    closed_until: std::sync::atomic::AtomicU64,
}

impl Gate {
    fn new() -> Gate {
        Gate {
            since: std::time::Instant::now(),
            closed_until: Default::default(),
        }
    }

    fn open(&self) -> bool {
        let now = self.since.elapsed().as_nanos() as u64;
        now >= self.closed_until.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn close_for(&self, wait: std::time::Duration) {
        let until = (self.since.elapsed() + wait).as_nanos() as u64;
        self.closed_until
            .store(until, std::sync::atomic::Ordering::Relaxed);
    }
}

impl ShadowSlot {
    pub(crate) fn new(name: &str, metrics: Arc<PluginMetrics>) -> Arc<ShadowSlot> {
        Arc::new(ShadowSlot {
            name: name.to_string(),
            current: ArcSwapOption::empty(),
            metrics,
            differences: Arc::default(),
            fingerprint: Mutex::default(),
        })
    }

    /// The candidate running now, if any.
    pub(crate) fn current(&self) -> Option<Arc<Shadow>> {
        self.current.load_full()
    }

    /// Runs `candidate` beside the live versions from now on, in place of
    /// any earlier one.
    pub(crate) fn start(
        &self,
        candidate: impl RunAgain + 'static,
        fingerprint: String,
    ) -> std::io::Result<()> {
        let (jobs, rx) = mpsc::channel(QUEUE);
        let digest = candidate.digest().to_string();
        let gate = Arc::new(Gate::new());
        let worker = Worker {
            name: self.name.clone(),
            candidate: Box::new(candidate),
            metrics: self.metrics.clone(),
            differences: self.differences.clone(),
            gate: gate.clone(),
        };
        std::thread::Builder::new()
            .name(format!("shadow-{}", self.name))
            .spawn(move || worker.run(rx))?;
        self.differences
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
        *self.fingerprint.lock().unwrap_or_else(|p| p.into_inner()) = fingerprint;
        // The previous candidate's thread ends once its queue is drained and
        // its sender (held only here and by calls in flight) is gone.
        self.current.store(Some(Arc::new(Shadow {
            digest,
            jobs,
            metrics: self.metrics.clone(),
            gate,
        })));
        Ok(())
    }

    /// Stops the candidate; returns whether one was running.
    pub(crate) fn stop(&self) -> bool {
        self.fingerprint
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
        self.current.swap(None).is_some()
    }

    pub fn report(&self) -> Report {
        let m = &self.metrics;
        Report {
            plugin: self.name.clone(),
            candidate: self.current().map(|s| s.digest.clone()),
            same: PluginMetrics::get(&m.shadow_same),
            different: PluginMetrics::get(&m.shadow_different),
            error: PluginMetrics::get(&m.shadow_error),
            skipped: PluginMetrics::get(&m.shadow_skipped),
            differences: self
                .differences
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .iter()
                .rev()
                .cloned()
                .collect(),
        }
    }
}

/// The slot watches the live calls its candidate takes: each one, once it
/// returned, is handed to the candidate as a [`ShadowJob`].
impl Watcher for ShadowSlot {
    fn watches(&self) -> bool {
        self.current().is_some_and(|s| s.accepting())
    }

    fn seen(&self, call: Observed<'_>) -> Option<Arc<PendingRecord>> {
        if let Some(shadow) = self.current() {
            shadow.offer(ShadowJob {
                call: call.call,
                key: call.key.to_string(),
                obj: call.obj.to_string(),
                entries: call.taped.entries,
                seed: call.taped.seed,
                outcome: call.outcome,
                redaction: call.redaction,
            });
        }
        None
    }
}

/// Moves the calling thread to the idle scheduling class, or else lowers its
/// nice value. Measured on 2 cores at concurrency 16: at nice +10 the
/// candidate still took about a tenth of the CPU from live calls.
fn lower_priority() -> bool {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: both calls only change the scheduling of the calling thread
    // (pid 0 / `who` 0 on Linux) and read `param`, which outlives the call.
    unsafe {
        libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) == 0
            || libc::setpriority(libc::PRIO_PROCESS, 0, NICENESS) == 0
    }
}

/// A token bucket of the calling thread's CPU time: it fills at
/// [`CPU_SHARE`] of wall time up to [`CPU_BURST`], and what the thread uses
/// is taken out of it.
struct CpuBudget {
    /// CPU time left to spend (negative after a call that overran it).
    left: f64,
    filled: std::time::Instant,
    cpu: std::time::Duration,
}

impl CpuBudget {
    fn new() -> CpuBudget {
        CpuBudget {
            left: CPU_BURST.as_secs_f64(),
            filled: std::time::Instant::now(),
            cpu: thread_cpu(),
        }
    }

    /// Whether the budget is used up, after filling it for the time since
    /// the last look and charging the CPU time used since: `Some(wait)`, how
    /// long until a tenth of a burst is back (so it does not reopen for one call).
    fn spent(&mut self) -> Option<std::time::Duration> {
        let (now, cpu) = (std::time::Instant::now(), thread_cpu());
        let earned = now.duration_since(self.filled).as_secs_f64() * CPU_SHARE;
        let used = cpu.saturating_sub(self.cpu).as_secs_f64();
        self.left = (self.left + earned - used).min(CPU_BURST.as_secs_f64());
        (self.filled, self.cpu) = (now, cpu);
        (self.left <= 0.0).then(|| {
            let short = CPU_BURST.as_secs_f64() / 10.0 - self.left;
            std::time::Duration::from_secs_f64(short / CPU_SHARE)
        })
    }
}

/// CPU time the calling thread has used.
fn thread_cpu() -> std::time::Duration {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: writes only `t`, which outlives the call.
    if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) } != 0 {
        return std::time::Duration::ZERO;
    }
    std::time::Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

/// The candidate's thread: its calls, one at a time.
struct Worker {
    name: String,
    candidate: Box<dyn RunAgain>,
    metrics: Arc<PluginMetrics>,
    differences: Arc<Mutex<VecDeque<Difference>>>,
    gate: Arc<Gate>,
}

impl Worker {
    fn run(self, mut jobs: mpsc::Receiver<ShadowJob>) {
        if !lower_priority() {
            tracing::warn!(plugin = %self.name, "shadow: cannot lower the candidate thread's priority");
        }
        let runtime = match tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            Ok(r) => r,
            Err(e) => {
                tracing::error!(plugin = %self.name, error = %e, "shadow: no runtime for the candidate; it does not run");
                return;
            }
        };
        runtime.block_on(async {
            let mut budget = CpuBudget::new();
            while let Some(job) = jobs.recv().await {
                if let Some(wait) = budget.spent() {
                    // Live calls stop taping until the budget is back.
                    self.gate.close_for(wait);
                    PluginMetrics::inc(&self.metrics.shadow_skipped);
                    continue;
                }
                self.judge(job).await;
            }
        });
    }

    async fn judge(&self, job: ShadowJob) {
        // The live call's inputs, answered from its tape.
        let again = Again {
            call: job.call,
            key: job.key.clone(),
            obj: job.obj,
            provider: None,
            taping: Taping {
                mode: TapeMode::Shadow {
                    entries: job.entries.clone(),
                    redaction: job.redaction,
                },
                seed: job.seed,
            },
        };
        let (outcome, taped) = self.candidate.run_again(again).await;
        let live = CallRecord {
            seq: 0,
            at: String::new(),
            plugin: self.name.clone(),
            digest: String::new(),
            call: job.call,
            key: job.key.clone(),
            input: Value::Null,
            state: None,
            state_data: None,
            event: None,
            insecure_seed: String::new(),
            imports: job.entries,
            outcome: job.outcome,
            host_writes: Vec::new(),
        };
        let failed = |o: &Outcome| matches!(o, Outcome::Failed { .. });
        let (result, changes, asked) = match judge(&live, &outcome, &taped) {
            Verdict::Same => (ShadowResult::Same, Vec::new(), None),
            Verdict::Different(d) => {
                let result = if failed(&outcome) && !failed(&live.outcome) {
                    ShadowResult::Error
                } else {
                    ShadowResult::Different
                };
                let changes = d
                    .into_iter()
                    .map(|d| Change {
                        path: d.path,
                        live: d.recorded,
                        candidate: d.replayed,
                    })
                    .collect();
                (result, changes, None)
            }
            Verdict::Diverged(asked) => (ShadowResult::Different, Vec::new(), Some(asked)),
        };
        let m = &self.metrics;
        PluginMetrics::inc(match result {
            ShadowResult::Same => &m.shadow_same,
            ShadowResult::Different => &m.shadow_different,
            ShadowResult::Error => &m.shadow_error,
        });
        if result == ShadowResult::Same {
            return;
        }
        let difference = Difference {
            at: now_rfc3339_millis(),
            key: job.key,
            call: job.call,
            result,
            candidate: self.candidate.digest().to_string(),
            changes,
            asked,
        };
        tracing::warn!(
            plugin = %self.name,
            key = %difference.key,
            result = result.as_str(),
            diff = %serde_json::to_string(&difference.changes).unwrap_or_default(),
            asked = ?difference.asked.as_ref().map(|a| (&a.op, &a.args)),
            "shadow: the candidate decided differently"
        );
        let mut kept = self.differences.lock().unwrap_or_else(|p| p.into_inner());
        if kept.len() == KEPT {
            kept.pop_front();
        }
        kept.push_back(difference);
    }
}
