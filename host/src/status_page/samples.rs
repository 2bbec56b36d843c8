//! Each controller's queue depth and reconcile count, sampled every
//! [`EVERY`] for the status page's charts of the last [`KEPT`] samples (ten
//! minutes). Memory is bounded: one fixed ring of [`KEPT`] samples per
//! controller (24 bytes each, under 3 KiB a controller), and the rings of
//! controllers that are gone are dropped at the next sample.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How often the page's sampler reads the controllers.
pub(super) const EVERY: Duration = Duration::from_secs(5);
/// Samples kept per controller: ten minutes at [`EVERY`].
pub(super) const KEPT: usize = 120;

#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Sample {
    pub(crate) at: Instant,
    /// Keys ready to run (both lanes).
    pub(crate) depth: u64,
    /// Reconciles so far, of any outcome (a counter).
    pub(crate) reconciles: u64,
}

/// The rings, by controller name.
#[derive(Default)]
pub(super) struct Samples {
    rings: Mutex<BTreeMap<String, VecDeque<Sample>>>,
}

impl Samples {
    /// Adds one sample per controller present now; forgets the others.
    pub(super) fn record(&self, now: impl IntoIterator<Item = (String, Sample)>) {
        let mut rings = self.rings.lock().unwrap_or_else(|p| p.into_inner());
        let mut present = Vec::new();
        for (name, sample) in now {
            let ring = rings
                .entry(name.clone())
                .or_insert_with(|| VecDeque::with_capacity(KEPT));
            if ring.len() == KEPT {
                ring.pop_front();
            }
            ring.push_back(sample);
            present.push(name);
        }
        rings.retain(|name, _| present.contains(name));
    }

    /// `name`'s samples, oldest first.
    pub(super) fn of(&self, name: &str) -> Vec<Sample> {
        let rings = self.rings.lock().unwrap_or_else(|p| p.into_inner());
        rings
            .get(name)
            .map(|r| r.iter().copied().collect())
            .unwrap_or_default()
    }
}

/// Reconciles per second between consecutive samples (a counter that went
/// down, a controller's series created anew, counts as none).
pub(super) fn rates(samples: &[Sample]) -> Vec<f64> {
    samples
        .windows(2)
        .map(|w| {
            let secs = w[1].at.duration_since(w[0].at).as_secs_f64();
            let n = w[1].reconciles.saturating_sub(w[0].reconciles) as f64;
            if secs > 0.0 { n / secs } else { 0.0 }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(base: Instant, secs: u64, depth: u64, reconciles: u64) -> Sample {
        Sample {
            at: base + Duration::from_secs(secs),
            depth,
            reconciles,
        }
    }

    #[test]
    fn a_ring_keeps_the_last_samples_and_gone_controllers_are_dropped() {
        let s = Samples::default();
        let base = Instant::now();
        for i in 0..(KEPT as u64 + 30) {
            s.record([
                ("a".to_string(), at(base, i * 5, i, i)),
                ("b".to_string(), at(base, i * 5, 0, 0)),
            ]);
        }
        let a = s.of("a");
        assert_eq!(a.len(), KEPT);
        assert_eq!(a[0].depth, 30, "the oldest ones went first");
        assert_eq!(a[KEPT - 1].depth, KEPT as u64 + 29);
        s.record([("a".to_string(), at(base, 10_000, 0, 0))]);
        assert!(s.of("b").is_empty(), "b is gone");
        assert_eq!(s.of("a").len(), KEPT);
    }

    #[test]
    fn rates_are_per_second_and_never_negative() {
        let base = Instant::now();
        let samples = [
            at(base, 0, 0, 0),
            at(base, 5, 0, 10),
            at(base, 10, 0, 10),
            at(base, 15, 0, 3),
        ];
        assert_eq!(rates(&samples), [2.0, 0.0, 0.0]);
        assert!(rates(&samples[..1]).is_empty());
    }
}
