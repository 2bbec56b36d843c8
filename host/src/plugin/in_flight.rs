//! Bindings a call does not wait for (`limits.bindings-in-flight`): `bind`
//! returns once the binding is authorized and sent, and the API server's
//! answer comes while the plugin's next call runs. kube-scheduler runs its
//! binding cycle beside the next scheduling cycle for the same reason: a
//! placement need not wait for the API server's disk (one fsynced write).
//!
//! The worker that made the call waits for the answers before the key is
//! done ([`land`]), so a key never runs again while its own binding is in
//! flight, and its expectations hold the binding's real resourceVersion. A
//! binding that failed fails the call, as if the guest had returned the
//! error: a conflict or a 429 queues the key again soon (the next call sees
//! the pod bound, or tries again), anything else with back-off.
//!
//! ```toml
//! [limits]
//! concurrency = 1
//! bindings-in-flight = 8
//! ```

use tokio::task::JoinHandle;

use crate::cluster::ClientError;

/// One write (a binding) sent by a call that has returned; `W` is what a
/// landed one leaves for the expectations.
#[derive(Debug)]
pub(crate) struct InFlight<W> {
    /// `pod ns/name to node N`, for the error.
    what: String,
    answer: JoinHandle<Result<W, ClientError>>,
}

impl<W: Send + 'static> InFlight<W> {
    /// Sends `write` on the runtime; `what` names it in a failure.
    pub(crate) fn send(
        what: String,
        write: impl Future<Output = Result<W, ClientError>> + Send + 'static,
    ) -> InFlight<W> {
        InFlight {
            what,
            answer: tokio::spawn(write),
        }
    }
}

/// What the writes a call left in flight came to.
#[derive(Debug)]
pub(crate) struct Landed<W> {
    /// The writes that landed.
    pub(crate) writes: Vec<W>,
    /// One met a conflict or a 429: retry soon, as after a write the guest
    /// waited for.
    pub(crate) retry_soon: bool,
    /// The first that failed otherwise: the call's error.
    pub(crate) failed: Option<String>,
}

/// Waits for every write in `in_flight`.
pub(crate) async fn land<W>(in_flight: Vec<InFlight<W>>) -> Landed<W> {
    let mut landed = Landed {
        writes: Vec::with_capacity(in_flight.len()),
        retry_soon: false,
        failed: None,
    };
    for w in in_flight {
        let answer = w
            .answer
            .await
            .unwrap_or_else(|e| Err(ClientError::Other(format!("its task ended: {e}"))));
        match answer {
            Ok(write) => landed.writes.push(write),
            Err(ClientError::Conflict(_) | ClientError::TooManyRequests) => {
                landed.retry_soon = true;
            }
            Err(e) => {
                landed
                    .failed
                    .get_or_insert_with(|| format!("binding {}: {e}", w.what));
            }
        }
    }
    landed
}
