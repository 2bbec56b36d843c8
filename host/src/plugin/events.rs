//! The `record-event` import's sink: Events a plugin records, truncated to the
//! sizes the API server accepts and rate-limited, so no plugin can flood the
//! cluster's Events (they cost etcd writes and every `kubectl describe`).
//!
//! Recording needs no manifest rule (a plugin should always be able to say what
//! it did; the host's identity writes the Event, about any object the plugin
//! names); instead two limits apply, the first the shape of client-go's
//! `EventSourceObjectSpamFilter`:
//! - per object the event is about: a burst of [`PER_OBJECT_BURST`], then one
//!   each [`PER_OBJECT_PERIOD`];
//! - per plugin version, across objects: a burst of [`PER_PLUGIN_BURST`], then
//!   [`PER_PLUGIN_PER_SECOND`] a second.
//!
//! Events past either are dropped and counted
//! (`wasmlet_plugin_events_dropped_total`), not failed: a reconcile must not
//! fail because it was chatty.

use std::num::NonZeroU32;
use std::time::Duration;

use governor::{DefaultDirectRateLimiter, DefaultKeyedRateLimiter, Quota, RateLimiter};
use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, Recorder};

pub(crate) const PER_OBJECT_BURST: u32 = 25;
pub(crate) const PER_OBJECT_PERIOD: Duration = Duration::from_secs(300);
pub(crate) const PER_PLUGIN_BURST: u32 = 100;
pub(crate) const PER_PLUGIN_PER_SECOND: u32 = 10;

/// Upstream's limits on `events.k8s.io/v1` fields (bytes).
pub(crate) const MAX_REASON: usize = 128;
const MAX_ACTION: usize = 128;
pub(crate) const MAX_NOTE: usize = 1024;

/// Objects whose budgets are kept before idle ones are forgotten.
const MAX_TRACKED_OBJECTS: usize = 10_000;

/// Where one plugin version's events go.
pub(crate) struct EventSink {
    recorder: Recorder,
    per_object: DefaultKeyedRateLimiter<(String, String, String, String)>,
    per_plugin: DefaultDirectRateLimiter,
}

/// Why an event was not published.
#[derive(Debug)]
pub(crate) enum Dropped {
    /// Over the rate: dropped on purpose.
    Throttled,
    /// The API server refused or could not be reached.
    Failed(kube::Error),
}

fn nonzero(n: u32) -> NonZeroU32 {
    NonZeroU32::new(n).expect("limits are constants above zero")
}

impl EventSink {
    pub(crate) fn new(recorder: Recorder) -> EventSink {
        let per_object = Quota::with_period(PER_OBJECT_PERIOD)
            .expect("a non-zero period")
            .allow_burst(nonzero(PER_OBJECT_BURST));
        let per_plugin = Quota::per_second(nonzero(PER_PLUGIN_PER_SECOND))
            .allow_burst(nonzero(PER_PLUGIN_BURST));
        EventSink {
            recorder,
            per_object: RateLimiter::keyed(per_object),
            per_plugin: RateLimiter::direct(per_plugin),
        }
    }

    /// Publishes `event` about `regarding` unless a limit says no. Over-long
    /// fields are cut (at a character boundary) to what the API server accepts.
    pub(crate) async fn publish(
        &self,
        mut event: Event,
        regarding: &ObjectReference,
    ) -> Result<(), Dropped> {
        let key = (
            regarding.api_version.clone().unwrap_or_default(),
            regarding.kind.clone().unwrap_or_default(),
            regarding.namespace.clone().unwrap_or_default(),
            regarding.name.clone().unwrap_or_default(),
        );
        if self.per_object.len() > MAX_TRACKED_OBJECTS {
            self.per_object.retain_recent();
        }
        // The per-object check first: an object over its budget does not use up
        // the plugin's.
        if self.per_object.check_key(&key).is_err() || self.per_plugin.check().is_err() {
            return Err(Dropped::Throttled);
        }
        truncate(&mut event.reason, MAX_REASON);
        truncate(&mut event.action, MAX_ACTION);
        if let Some(n) = event.note.as_mut() {
            truncate(n, MAX_NOTE);
        }
        self.recorder
            .publish(&event, regarding)
            .await
            .map_err(Dropped::Failed)
    }
}

/// Cuts `s` to at most `max` bytes without splitting a character.
pub(crate) fn truncate(s: &mut String, max: usize) {
    if s.len() > max {
        let end = (0..=max)
            .rev()
            .find(|&i| s.is_char_boundary(i))
            .unwrap_or(0);
        s.truncate(end);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A sink whose API server is not there: every event that passes the
    /// limits fails to publish, so Failed counts what was let through.
    fn sink() -> EventSink {
        let closed = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let config = kube::Config::new(format!("http://{closed}").parse().unwrap());
        let client = kube::Client::try_from(config).unwrap();
        EventSink::new(Recorder::new(
            client,
            kube::runtime::events::Reporter {
                controller: "t".into(),
                instance: None,
            },
        ))
    }

    fn event() -> Event {
        Event {
            type_: kube::runtime::events::EventType::Normal,
            reason: "Spam".into(),
            note: Some("x".into()),
            action: "Spam".into(),
            secondary: None,
        }
    }

    fn about(name: &str) -> ObjectReference {
        ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("ConfigMap".into()),
            namespace: Some("default".into()),
            name: Some(name.into()),
            ..Default::default()
        }
    }

    /// How many of `events` reached the API server (and failed there).
    async fn let_through(sink: &EventSink, events: impl Iterator<Item = ObjectReference>) -> u32 {
        let mut through = 0;
        for r in events {
            if matches!(sink.publish(event(), &r).await, Err(Dropped::Failed(_))) {
                through += 1;
            }
        }
        through
    }

    #[tokio::test]
    async fn a_plugin_flooding_one_object_gets_its_burst_only() {
        let sink = sink();
        let n = let_through(&sink, (0..1000).map(|_| about("victim"))).await;
        assert_eq!(n, PER_OBJECT_BURST);
        // Another object has its own budget.
        assert_eq!(let_through(&sink, std::iter::once(about("other"))).await, 1);
    }

    #[tokio::test]
    async fn a_plugin_flooding_many_objects_is_capped_across_them() {
        let sink = sink();
        let n = let_through(&sink, (0..1000).map(|i| about(&format!("o{i}")))).await;
        // The burst, plus what the rate refills while the loop runs.
        assert!((PER_PLUGIN_BURST..1000 / 2).contains(&n), "{n} let through");
    }

    #[test]
    fn truncation_never_splits_a_character() {
        // 'é' is two bytes: a cut at an odd byte count must back off one.
        let mut s = "é".repeat(600);
        truncate(&mut s, MAX_NOTE - 1);
        assert_eq!(s.len(), MAX_NOTE - 2);
        assert!(s.chars().all(|c| c == 'é'));
        let mut short = "ok".to_string();
        truncate(&mut short, MAX_NOTE);
        assert_eq!(short, "ok");
    }
}
