//! Concurrent watches per user. A watch holds a connection, a buffer and a
//! share of every write's fan-out for as long as it runs, so one client (a
//! runaway informer loop, a script) must not open them without bound. Past
//! the limit a watch gets 429 Too Many Requests, which kube-rs' watcher and
//! client-go's reflector answer by backing off and retrying.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::status::ApiError;

/// The open watches of every user, and the most one user may hold.
pub(crate) struct WatchQuota {
    max: usize,
    open: Arc<Mutex<HashMap<String, usize>>>,
}

/// One open watch, counted until it is dropped (when its stream ends,
/// whichever side ends it).
pub(crate) struct WatchPermit {
    user: String,
    open: Arc<Mutex<HashMap<String, usize>>>,
}

impl WatchQuota {
    pub(crate) fn new(max: usize) -> WatchQuota {
        WatchQuota {
            max,
            open: Arc::default(),
        }
    }

    /// Counts one more watch of `user`, or refuses it at the limit.
    pub(crate) fn acquire(&self, user: &str) -> Result<WatchPermit, ApiError> {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        let n = open.entry(user.to_string()).or_default();
        if *n >= self.max {
            return Err(ApiError::new(
                429,
                "TooManyRequests",
                format!(
                    "too many open watches: user \"{user}\" holds {n}, the most this server allows one user (--max-watches-per-user)"
                ),
            ));
        }
        *n += 1;
        Ok(WatchPermit {
            user: user.to_string(),
            open: self.open.clone(),
        })
    }

    /// Watches `user` holds now.
    #[cfg(test)]
    pub(crate) fn open(&self, user: &str) -> usize {
        let open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        open.get(user).copied().unwrap_or(0)
    }
}

impl Drop for WatchPermit {
    fn drop(&mut self) {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = open.get_mut(&self.user) {
            *n -= 1;
            if *n == 0 {
                open.remove(&self.user);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_user_at_the_limit_waits_for_one_of_its_watches_to_end() {
        let q = WatchQuota::new(2);
        let a = q.acquire("alice").unwrap();
        let _b = q.acquire("alice").unwrap();
        let e = q.acquire("alice").err().expect("a third watch is refused");
        assert_eq!(e.code, 429);
        assert!(e.message.contains("\"alice\" holds 2"), "{}", e.message);
        // Another user has a quota of its own.
        let _c = q.acquire("bob").unwrap();
        drop(a);
        assert_eq!(q.open("alice"), 1);
        let _d = q.acquire("alice").unwrap();
    }
}
