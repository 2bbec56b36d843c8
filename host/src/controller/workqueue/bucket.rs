//! A lazily refilled token bucket with `golang.org/x/time/rate` reservation
//! semantics: the overall error back-off limit and the low-lane drain rate.

use std::time::Duration;

use tokio::time::Instant;

/// A lazily refilled token bucket (`golang.org/x/time/rate` semantics for
/// `reserve`: the balance may go negative, the caller waits it off).
pub(super) struct TokenBucket {
    /// Tokens per second; `None` = unlimited.
    rate: Option<f64>,
    burst: f64,
    tokens: f64,
    last: Instant,
}

const EPS: f64 = 1e-9;

impl TokenBucket {
    pub(super) fn new(rate: f64, burst: u32, now: Instant) -> Self {
        let rate = (rate.is_finite() && rate > 0.0).then_some(rate);
        let burst = f64::from(burst.max(1));
        TokenBucket {
            rate,
            burst,
            tokens: burst,
            last: now,
        }
    }

    pub(super) fn refill(&mut self, now: Instant) {
        if let Some(rate) = self.rate {
            let dt = now.saturating_duration_since(self.last).as_secs_f64();
            self.tokens = (self.tokens + dt * rate).min(self.burst);
        }
        if now > self.last {
            self.last = now;
        }
    }

    /// Takes a token, returning how long to wait for it.
    pub(super) fn reserve(&mut self, now: Instant) -> Duration {
        let Some(rate) = self.rate else {
            return Duration::ZERO;
        };
        self.refill(now);
        self.tokens -= 1.0;
        if self.tokens >= -EPS {
            Duration::ZERO
        } else {
            secs(-self.tokens / rate)
        }
    }

    /// Takes a token if one is available now.
    pub(super) fn try_take(&mut self, now: Instant) -> bool {
        if self.rate.is_none() {
            return true;
        }
        self.refill(now);
        if self.tokens >= 1.0 - EPS {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }

    /// When the next whole token is available (after `refill(now)`).
    pub(super) fn next_token_at(&self, now: Instant) -> Instant {
        match self.rate {
            None => now,
            Some(rate) => now + secs(((1.0 - self.tokens) / rate).max(0.0)),
        }
    }
}

/// Seconds to a Duration, saturating (and never panicking) on huge values.
pub(super) fn secs(s: f64) -> Duration {
    if s.is_nan() || s <= 0.0 {
        Duration::ZERO
    } else if s >= 1e12 {
        Duration::from_secs(1_000_000_000_000)
    } else {
        Duration::from_secs_f64(s)
    }
}
