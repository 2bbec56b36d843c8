//! Request work bounded, off the runtime's workers, and stopped when its
//! client leaves: a simpler form of kube-apiserver's max-inflight filter and
//! API Priority and Fairness.
//!
//! A write's admission (decoding, schema validation, CEL rules, server-side
//! apply) is synchronous CPU work. Run inline on the runtime's workers, two
//! slow writes stalled every request on a 2-core machine, `/readyz`
//! included, and a write went on after its client had gone. Here every
//! request that is not long-running (watches and logs are not: they have
//! their own bounds):
//!
//! - waits for a place among the requests of its user ([`PER_USER`]) and of
//!   the server ([`OVERALL`]); one that waits longer than [`QUEUE_WAIT`] gets
//!   429 with `Retry-After`, which client-go and kube-rs retry. The caller
//!   exempts `system:masters` and the plane's own components, as APF's
//!   exempt and system priority levels;
//! - runs as its own task, each poll inside `block_in_place`, so a poll that
//!   computes for seconds takes a thread of its own and hands the worker's
//!   other tasks (health checks, watches, other requests) to a new worker;
//! - is aborted when its client disconnects (the server drops the request's
//!   future, and with it the task's [`AbortOnDrop`]): at its next await, so a
//!   write not yet committed is never committed, and long CPU work polls
//!   [`crate::cancel::cancelled`] to stop early (the CEL guard does, at every step).
//!
//! ```ignore
//! let response = state.inflight.run(Some("alice"), handle(state.clone(), req)).await?;
//! ```

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use crate::status::ApiError;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Requests of one user in flight at once.
pub(crate) const PER_USER: usize = 32;
/// Requests in flight at once, all users together (upstream's defaults are
/// 400 reads and 200 writes; this server shares one machine with its host).
pub(crate) const OVERALL: usize = 128;
/// How long a request waits for its place before it gets 429.
pub(crate) const QUEUE_WAIT: Duration = Duration::from_secs(30);

/// The places of every user, and of the server.
pub(crate) struct Inflight {
    overall: Arc<Semaphore>,
    overall_max: usize,
    users: Mutex<HashMap<String, Arc<Semaphore>>>,
    per_user: usize,
    wait: Duration,
}

impl Default for Inflight {
    fn default() -> Self {
        Inflight::new(PER_USER, OVERALL, QUEUE_WAIT)
    }
}

impl Inflight {
    pub(crate) fn new(per_user: usize, overall: usize, wait: Duration) -> Inflight {
        Inflight {
            overall: Arc::new(Semaphore::new(overall)),
            overall_max: overall,
            users: Mutex::default(),
            per_user,
            wait,
        }
    }

    /// Runs `work` for `user` in its place (see the module's doc), or
    /// refuses it with 429 after [`QUEUE_WAIT`]. `None` is a user exempt
    /// from the bounds (the caller decides: `system:masters` and the plane's
    /// own components, as APF's exempt and system levels).
    pub(crate) async fn run<F>(&self, user: Option<&str>, work: F) -> Result<F::Output, ApiError>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        let _places = match user {
            None => None,
            Some(user) => Some(self.enter(user).await?),
        };
        let cancel = Arc::new(AtomicBool::new(false));
        let task = tokio::spawn(crate::cancel::scope(
            cancel.clone(),
            Offload(Box::pin(work)),
        ));
        let guard = AbortOnDrop {
            task: task.abort_handle(),
            cancel,
        };
        let out = task.await;
        drop(guard);
        out.map_err(|e| match e.try_into_panic() {
            Ok(p) => std::panic::resume_unwind(p),
            Err(_) => ApiError::internal("the request was cancelled"),
        })
    }

    /// Waits for a place of `user` and one of the server.
    async fn enter(&self, user: &str) -> Result<Places<'_>, ApiError> {
        let mine = {
            let mut users = self.users.lock().unwrap_or_else(|p| p.into_inner());
            users
                .entry(user.to_string())
                .or_insert_with(|| Arc::new(Semaphore::new(self.per_user)))
                .clone()
        };
        let places = async {
            let user_place = mine.clone().acquire_owned().await.ok()?;
            let overall = self.overall.clone().acquire_owned().await.ok()?;
            Some((user_place, overall))
        };
        let places = tokio::time::timeout(self.wait, places).await;
        let (user_place, overall) = match places {
            Ok(Some(p)) => p,
            _ => {
                self.forget_idle(user, &mine);
                return Err(ApiError::new(
                    429,
                    "TooManyRequests",
                    format!(
                        "Too many requests, please try again later: user \"{user}\" has {} requests in flight (at most {} per user, {} in all)",
                        self.per_user - mine.available_permits(),
                        self.per_user,
                        self.overall_max
                    ),
                )
                .retry_after(1));
            }
        };
        Ok(Places {
            inflight: self,
            user: user.to_string(),
            sem: mine,
            user_place: Some(user_place),
            _overall: overall,
        })
    }

    /// Drops `user`'s entry once nothing holds or waits for a place in it,
    /// so the map holds only users with requests in flight.
    fn forget_idle(&self, user: &str, sem: &Arc<Semaphore>) {
        let mut users = self.users.lock().unwrap_or_else(|p| p.into_inner());
        // The map's and the caller's references only.
        if Arc::strong_count(sem) <= 2 && sem.available_permits() == self.per_user {
            users.remove(user);
        }
    }

    /// Users with requests in flight (the map's size).
    #[cfg(test)]
    pub(crate) fn users(&self) -> usize {
        self.users.lock().unwrap_or_else(|p| p.into_inner()).len()
    }
}

/// A request's places, given back when it ends.
struct Places<'a> {
    inflight: &'a Inflight,
    user: String,
    sem: Arc<Semaphore>,
    user_place: Option<OwnedSemaphorePermit>,
    _overall: OwnedSemaphorePermit,
}

impl Drop for Places<'_> {
    fn drop(&mut self) {
        drop(self.user_place.take());
        self.inflight.forget_idle(&self.user, &self.sem);
    }
}

/// Aborts a request's task, and tells its CPU work to stop, when the request
/// is dropped before the task ends (its client went away).
struct AbortOnDrop {
    task: tokio::task::AbortHandle,
    cancel: Arc<AtomicBool>,
}

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        if !self.task.is_finished() {
            self.cancel.store(true, Ordering::Relaxed);
            self.task.abort();
        }
    }
}

/// Polls a future inside `block_in_place` on a multi-threaded runtime, so
/// that a long synchronous step does not hold a worker other tasks wait for.
/// A current-thread runtime (unit tests) polls it as it is.
struct Offload<F>(Pin<Box<F>>);

impl<F: Future> Future for Offload<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let multi = tokio::runtime::Handle::try_current()
            .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
        let inner = self.0.as_mut();
        if multi {
            tokio::task::block_in_place(|| inner.poll(cx))
        } else {
            inner.poll(cx)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_user_past_its_places_waits_then_gets_429_while_others_go_on() {
        let inflight = Arc::new(Inflight::new(2, 10, Duration::from_secs(5)));
        let (release, hold) = tokio::sync::watch::channel(false);
        let mut held = Vec::new();
        for _ in 0..2 {
            let (inflight, mut hold) = (inflight.clone(), hold.clone());
            held.push(tokio::spawn(async move {
                inflight
                    .run(Some("alice"), async move {
                        let _ = hold.wait_for(|r| *r).await;
                    })
                    .await
            }));
        }
        tokio::task::yield_now().await;
        // alice's third request waits, then is refused; bob is not held up.
        let third = inflight.run(Some("alice"), async {}).await;
        let e = third.expect_err("a third request of alice is refused");
        assert_eq!(e.code, 429);
        assert!(e.message.contains("user \"alice\""), "{}", e.message);
        assert!(inflight.run(Some("bob"), async { 7 }).await.is_ok());
        release.send(true).ok();
        for h in held {
            h.await.expect("joined").expect("held requests finish");
        }
        // Nothing in flight: no user is remembered.
        assert_eq!(inflight.users(), 0);
    }

    /// The runtime's only worker is not held by a request that blocks: a
    /// task that needs it runs, and it is what unblocks the request (without
    /// the hand-off this waits out the 60 s and fails).
    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn a_request_that_blocks_gives_up_the_worker_other_tasks_need() {
        let inflight = Arc::new(Inflight::default());
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let blocked = tokio::spawn({
            let inflight = inflight.clone();
            async move {
                inflight
                    .run(Some("dave"), async move {
                        rx.recv_timeout(Duration::from_secs(60)).is_ok()
                    })
                    .await
            }
        });
        tokio::spawn(async move { tx.send(()).ok() });
        let unblocked = blocked.await.expect("joined").expect("ran");
        assert!(
            unblocked,
            "the other task never ran while the request blocked"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_dropped_request_is_aborted_and_told_to_stop() {
        let inflight = Arc::new(Inflight::default());
        let (saw_cancel, mut seen) = tokio::sync::mpsc::unbounded_channel();
        let (started, mut has_started) = tokio::sync::mpsc::unbounded_channel();
        let (committed, mut commits) = tokio::sync::mpsc::unbounded_channel::<()>();
        let request = {
            let inflight = inflight.clone();
            async move {
                inflight
                    .run(Some("carol"), async move {
                        started.send(()).ok();
                        // CPU work that checks for its client, then a commit
                        // after an await, which the abort must prevent.
                        while !crate::cancel::cancelled() {
                            std::thread::sleep(Duration::from_millis(5));
                        }
                        saw_cancel.send(()).ok();
                        tokio::task::yield_now().await;
                        committed.send(()).ok();
                    })
                    .await
            }
        };
        let client = tokio::spawn(request);
        has_started.recv().await.expect("the request started");
        client.abort(); // the client disconnects
        seen.recv().await.expect("the work saw the cancellation");
        assert!(commits.recv().await.is_none(), "the aborted work committed");
    }
}
