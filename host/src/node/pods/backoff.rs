//! The back-off between retries of a faulting provider call: the kubelet's
//! crash-loop back-off (10 s doubling to 300 s, forgotten after 10 min
//! without a fault), with a shortenable base for tests
//! (`--provider-backoff-base-ms`).

use std::time::Duration;

use tokio::time::Instant;

/// The kubelet's `MaxContainerBackOff`.
pub(super) const MAX: Duration = Duration::from_secs(300);
/// A pod that ran this long without a fault starts again from the base
/// (the kubelet forgets a container's back-off after twice its maximum).
pub(super) const RESET_AFTER: Duration = Duration::from_secs(600);

/// One pod's fault back-off.
#[derive(Debug)]
pub(super) struct Backoff {
    base: Duration,
    /// The last delay given and when.
    last: Option<(Duration, Instant)>,
}

impl Backoff {
    pub(super) fn new(base: Duration) -> Backoff {
        Backoff { base, last: None }
    }

    /// The delay before the next retry, after a fault at `now`.
    pub(super) fn next(&mut self, now: Instant) -> Duration {
        let cap = MAX.max(self.base);
        let delay = match self.last {
            Some((d, at)) if now.saturating_duration_since(at) < d + RESET_AFTER => {
                (d * 2).min(cap)
            }
            _ => self.base.min(cap),
        };
        self.last = Some((delay, now));
        delay
    }
}

/// `10s`, `1.5s`, `200ms`: a delay as Events and messages show it.
pub(crate) fn show(d: Duration) -> String {
    if d.subsec_millis() == 0 {
        format!("{}s", d.as_secs())
    } else if d < Duration::from_secs(1) {
        format!("{}ms", d.as_millis())
    } else {
        format!("{:.1}s", d.as_secs_f64())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_from_ten_seconds_to_five_minutes() {
        let mut b = Backoff::new(Duration::from_secs(10));
        let mut now = Instant::now();
        let mut seen = Vec::new();
        for _ in 0..8 {
            let d = b.next(now);
            seen.push(d.as_secs());
            now += d;
        }
        assert_eq!(seen, [10, 20, 40, 80, 160, 300, 300, 300]);
    }

    #[test]
    fn ten_minutes_without_a_fault_resets_it() {
        let mut b = Backoff::new(Duration::from_secs(10));
        let now = Instant::now();
        assert_eq!(b.next(now), Duration::from_secs(10));
        assert_eq!(
            b.next(now + Duration::from_secs(15)),
            Duration::from_secs(20)
        );
        // Retried at +35 s, then ran fault-free for over ten minutes.
        let later = now + Duration::from_secs(15 + 20 + 601);
        assert_eq!(b.next(later), Duration::from_secs(10));
    }

    #[test]
    fn shows_delays_as_the_kubelet_does() {
        assert_eq!(show(Duration::from_secs(10)), "10s");
        assert_eq!(show(Duration::from_millis(200)), "200ms");
        assert_eq!(show(Duration::from_millis(1600)), "1.6s");
    }
}
