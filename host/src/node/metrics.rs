//! The pod metrics the provider contract promises ("back-off states are for
//! metrics and kubectl describe"): pods per provider and state (gauge),
//! transitions per (from, to) (counter), time spent in a state before leaving
//! it (histogram) and provider handler faults by kind (counter). States are
//! those the machine comes to rest in (the ones whose status is written),
//! and the host's own `ProviderBackOff` while a faulting provider call
//! waits for its retry (the retry counts the move back to the state whose
//! handler faulted); states passed straight through are not counted.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabels {
    provider: String,
    state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TransitionLabels {
    provider: String,
    from: String,
    to: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FaultLabels {
    provider: String,
    kind: String,
}

/// A provider handler's failure, as counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FaultKind {
    /// The handler returned an error.
    Error,
    Trap,
    /// The call ran past its deadline.
    Deadline,
    OutOfMemory,
    /// A malformed or oversized result.
    Malformed,
}

impl FaultKind {
    pub(crate) fn label(self) -> &'static str {
        match self {
            FaultKind::Error => "error",
            FaultKind::Trap => "trap",
            FaultKind::Deadline => "deadline",
            FaultKind::OutOfMemory => "out-of-memory",
            FaultKind::Malformed => "malformed",
        }
    }

    /// The kind of a failed handler call from its message: a failed call's
    /// is `CallError`'s text (`plugin::loaded`), anything else the handler's
    /// own error.
    pub(crate) fn of(message: &str) -> FaultKind {
        if message.starts_with("the guest trapped: ") {
            FaultKind::Trap
        } else if message.starts_with("the guest ran past its ") {
            FaultKind::Deadline
        } else if message.starts_with("the guest ran out of memory ") {
            FaultKind::OutOfMemory
        } else if message.starts_with("the guest returned a ") {
            FaultKind::Malformed
        } else {
            FaultKind::Error
        }
    }
}

/// The node's pod metrics, registered in the host's registry.
#[derive(Clone)]
pub(crate) struct PodMetrics {
    provider: String,
    pods: Family<StateLabels, Gauge>,
    transitions: Family<TransitionLabels, Counter>,
    time_in_state: Family<StateLabels, Histogram>,
    faults: Family<FaultLabels, Counter>,
}

impl PodMetrics {
    pub(crate) fn new(provider: &str) -> PodMetrics {
        PodMetrics {
            provider: provider.to_string(),
            pods: Family::default(),
            transitions: Family::default(),
            // 10 ms to about 30 h: a state lasts from a pass to a pod's life.
            time_in_state: Family::new_with_constructor(|| {
                Histogram::new(exponential_buckets(0.01, 4.0, 12))
            }),
            faults: Family::default(),
        }
    }

    pub(crate) fn register(&self, registry: &mut Registry) {
        registry.register(
            "wasmlet_node_pods",
            "Pods on this node per provider and state",
            self.pods.clone(),
        );
        registry.register(
            "wasmlet_node_pod_transitions",
            "Pod state transitions per provider, from and to",
            self.transitions.clone(),
        );
        registry.register(
            "wasmlet_node_pod_state_duration_seconds",
            "Time a pod spent in a state before leaving it, per provider and state",
            self.time_in_state.clone(),
        );
        registry.register(
            "wasmlet_node_provider_faults",
            "Provider handler failures by kind (error, trap, deadline, out-of-memory, malformed)",
            self.faults.clone(),
        );
    }

    fn state(&self, state: &str) -> StateLabels {
        StateLabels {
            provider: self.provider.clone(),
            state: state.to_string(),
        }
    }

    /// A pod moved from `from` (`None`: its machine just started) to `to`
    /// (`None`: its machine ended) after `stayed` in `from`.
    pub(crate) fn moved(&self, from: Option<&str>, to: Option<&str>, stayed: std::time::Duration) {
        if let Some(f) = from {
            self.pods.get_or_create(&self.state(f)).dec();
            self.time_in_state
                .get_or_create(&self.state(f))
                .observe(stayed.as_secs_f64());
        }
        if let Some(t) = to {
            self.pods.get_or_create(&self.state(t)).inc();
        }
        if let (Some(f), Some(t)) = (from, to) {
            self.transitions
                .get_or_create(&TransitionLabels {
                    provider: self.provider.clone(),
                    from: f.to_string(),
                    to: t.to_string(),
                })
                .inc();
        }
    }

    pub(crate) fn fault(&self, kind: FaultKind) {
        self.faults
            .get_or_create(&FaultLabels {
                provider: self.provider.clone(),
                kind: kind.label().to_string(),
            })
            .inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn call_errors_are_classified_by_kind_and_handler_errors_are_errors() {
        use crate::plugin::loaded::CallError;
        let kind = |e: CallError| FaultKind::of(&e.to_string());
        assert_eq!(kind(CallError::Trap("unreachable".into())), FaultKind::Trap);
        assert_eq!(
            kind(CallError::Timeout(std::time::Duration::from_secs(5))),
            FaultKind::Deadline
        );
        assert_eq!(kind(CallError::OutOfMemory(64)), FaultKind::OutOfMemory);
        assert_eq!(kind(CallError::Malformed("x".into())), FaultKind::Malformed);
        assert_eq!(
            kind(CallError::TooLarge { bytes: 2, limit: 1 }),
            FaultKind::Malformed
        );
        assert_eq!(FaultKind::of("module not found"), FaultKind::Error);
    }

    #[test]
    fn moves_keep_the_gauge_and_count_transitions() {
        let m = PodMetrics::new("p");
        let mut r = Registry::default();
        m.register(&mut r);
        let d = std::time::Duration::from_millis(50);
        m.moved(None, Some("Pulling"), d);
        m.moved(Some("Pulling"), Some("Running"), d);
        m.moved(Some("Running"), None, d);
        m.fault(FaultKind::Trap);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &r).unwrap();
        for line in [
            "wasmlet_node_pods{provider=\"p\",state=\"Pulling\"} 0",
            "wasmlet_node_pods{provider=\"p\",state=\"Running\"} 0",
            "wasmlet_node_pod_transitions_total{provider=\"p\",from=\"Pulling\",to=\"Running\"} 1",
            "wasmlet_node_pod_state_duration_seconds_count{provider=\"p\",state=\"Running\"} 1",
            "wasmlet_node_provider_faults_total{provider=\"p\",kind=\"trap\"} 1",
        ] {
            assert!(text.contains(line), "{line} in\n{text}");
        }
    }
}
