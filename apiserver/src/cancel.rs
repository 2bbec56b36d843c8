//! Whether the client of the request being served has gone: set by
//! `crate::inflight` when it drops a request, read by long CPU work (the CEL
//! guard, the rules step of a write) so that it stops early. A leaf, so that
//! every layer may ask.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

tokio::task_local! {
    static CANCEL: Arc<AtomicBool>;
}

/// Runs `work` with `flag` as its cancellation flag.
pub(crate) fn scope<F: Future>(flag: Arc<AtomicBool>, work: F) -> impl Future<Output = F::Output> {
    CANCEL.scope(flag, work)
}

/// Whether the request this code runs for was abandoned by its client.
/// False outside a request.
pub(crate) fn cancelled() -> bool {
    CANCEL
        .try_with(|c| c.load(Ordering::Relaxed))
        .unwrap_or(false)
}
