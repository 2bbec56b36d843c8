//! Leader election on a coordination.k8s.io Lease, as client-go does it:
//! the holder renews every `retry_period`; a candidate takes over when it has
//! seen no change to the lease for `lease_duration`; a leader that cannot
//! renew within `renew_deadline` steps down at once. Leases give no fencing,
//! so workers check the flag before every reconcile.
//!
//! Expiry is judged by when *this* process last saw the lease change, not by
//! the timestamps in it, so clock skew between hosts does not matter.

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, ObjectMeta, PostParams};

#[derive(Clone, Debug)]
pub(crate) struct LeaderConfig {
    pub(crate) namespace: String,
    pub(crate) name: String,
    pub(crate) identity: String,
    pub(crate) lease_duration: Duration,
    pub(crate) renew_deadline: Duration,
    pub(crate) retry_period: Duration,
}

impl LeaderConfig {
    pub(crate) fn new(identity: &str) -> LeaderConfig {
        LeaderConfig {
            namespace: "kube-system".into(),
            name: "wasmlet-controller".into(),
            identity: identity.into(),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

/// Whether this process may reconcile: set by `run`, read by the workers
/// before every reconcile, awaited by followers instead of polling.
///
/// ```ignore
/// # tokio_test_block_on(async {
/// use wasmlet::controller::leader::Leadership;
/// let l = Leadership::new(false);
/// let follower = { let l = l.clone(); tokio::spawn(async move { l.acquired().await }) };
/// l.set(true);
/// follower.await.unwrap();
/// assert!(l.is_leading());
/// # });
/// # fn tokio_test_block_on(f: impl std::future::Future) { tokio::runtime::Runtime::new().unwrap().block_on(f); }
/// ```
#[derive(Clone)]
pub struct Leadership(Arc<tokio::sync::watch::Sender<bool>>);

impl Leadership {
    pub fn new(leading: bool) -> Leadership {
        Leadership(Arc::new(tokio::sync::watch::Sender::new(leading)))
    }

    pub(crate) fn is_leading(&self) -> bool {
        *self.0.borrow()
    }

    /// Sets the flag; returns what it was.
    pub(crate) fn set(&self, leading: bool) -> bool {
        self.0.send_replace(leading)
    }

    /// Returns once this process leads (at once if it does now).
    pub(crate) async fn acquired(&self) {
        let mut rx = self.0.subscribe();
        // The sender lives in `self`, so the channel cannot close.
        let _ = rx.wait_for(|leading| *leading).await;
    }
}

fn now() -> MicroTime {
    MicroTime(k8s_openapi::jiff::Timestamp::now())
}

/// Runs forever, keeping `leading` true exactly while this process holds the lease.
pub(crate) async fn run(client: kube::Client, config: LeaderConfig, leading: Leadership) {
    let api: Api<Lease> = Api::namespaced(client, &config.namespace);
    // (holder, renewTime) as last observed, and when.
    let mut observed: Option<(Option<String>, Option<String>)> = None;
    let mut observed_at = Instant::now();
    let mut last_renew = Instant::now();
    loop {
        let result = try_acquire_or_renew(&api, &config, &mut observed, &mut observed_at).await;
        match result {
            Ok(true) => {
                if !leading.set(true) {
                    tracing::info!(identity = %config.identity, lease = %config.name, "became leader");
                }
                last_renew = Instant::now();
            }
            Ok(false) => {
                if leading.set(false) {
                    tracing::warn!(identity = %config.identity, "lost the lease to another holder; stopping reconciles");
                }
            }
            Err(e) => {
                tracing::warn!(identity = %config.identity, error = %e, "lease renewal failed");
                if leading.is_leading() && last_renew.elapsed() >= config.renew_deadline {
                    leading.set(false);
                    tracing::warn!(identity = %config.identity, "could not renew within the deadline; stopping reconciles");
                }
            }
        }
        tokio::time::sleep(config.retry_period).await;
    }
}

/// Gives the lease up at shutdown, as client-go's `ReleaseOnCancel` does:
/// if this process holds it, the holder is cleared (and the duration set to
/// 1 s), so another replica takes over at once rather than after
/// `lease_duration`. Stop [`run`] first. Returns whether it held the lease.
pub(crate) async fn release(
    client: kube::Client,
    config: &LeaderConfig,
) -> Result<bool, kube::Error> {
    let api: Api<Lease> = Api::namespaced(client, &config.namespace);
    let Some(mut lease) = api.get_opt(&config.name).await? else {
        return Ok(false);
    };
    let spec = lease.spec.get_or_insert_with(Default::default);
    if spec.holder_identity.as_deref() != Some(config.identity.as_str()) {
        return Ok(false);
    }
    spec.holder_identity = None;
    spec.lease_duration_seconds = Some(1);
    spec.renew_time = Some(now());
    // A compare-and-swap on the resourceVersion: a lease taken over
    // meanwhile is left alone (409).
    match api
        .replace(&config.name, &PostParams::default(), &lease)
        .await
    {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
        Err(e) => Err(e),
    }
}

async fn try_acquire_or_renew(
    api: &Api<Lease>,
    config: &LeaderConfig,
    observed: &mut Option<(Option<String>, Option<String>)>,
    observed_at: &mut Instant,
) -> Result<bool, kube::Error> {
    let spec = |transitions: i32, acquire: Option<MicroTime>| LeaseSpec {
        holder_identity: Some(config.identity.clone()),
        lease_duration_seconds: Some(config.lease_duration.as_secs() as i32),
        acquire_time: acquire.or_else(|| Some(now())),
        renew_time: Some(now()),
        lease_transitions: Some(transitions),
        ..Default::default()
    };
    let lease = match api.get_opt(&config.name).await? {
        None => {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(config.name.clone()),
                    ..Default::default()
                },
                spec: Some(spec(0, None)),
            };
            return match api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(true),
                Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
                Err(e) => Err(e),
            };
        }
        Some(l) => l,
    };
    let s = lease.spec.clone().unwrap_or_default();
    let record = (
        s.holder_identity.clone(),
        s.renew_time.as_ref().map(|t| t.0.to_string()),
    );
    if observed.as_ref() != Some(&record) {
        *observed = Some(record);
        *observed_at = Instant::now();
    }
    let holder = s.holder_identity.clone().unwrap_or_default();
    let mine = holder == config.identity;
    let expired = holder.is_empty() || observed_at.elapsed() >= config.lease_duration;
    if !mine && !expired {
        return Ok(false);
    }
    let transitions = s.lease_transitions.unwrap_or(0) + if mine { 0 } else { 1 };
    let acquire = if mine { s.acquire_time.clone() } else { None };
    let mut new = lease.clone();
    new.spec = Some(spec(transitions, acquire));
    // The resourceVersion in `new` makes this a compare-and-swap: of two
    // candidates taking over at once, one gets 409.
    match api
        .replace(&config.name, &PostParams::default(), &new)
        .await
    {
        Ok(l) => {
            let s = l.spec.unwrap_or_default();
            *observed = Some((s.holder_identity, s.renew_time.map(|t| t.0.to_string())));
            *observed_at = Instant::now();
            Ok(true)
        }
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
        Err(e) => Err(e),
    }
}

/// `leader_election_master_status{name}` (client-go's name): 1 while this
/// process holds the lease, read at each scrape. Summed over replicas, 0
/// means nobody reconciles.
#[derive(Debug)]
pub(crate) struct LeaderCollector {
    pub(crate) name: String,
    pub(crate) leading: Leadership,
}

impl std::fmt::Debug for Leadership {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Leadership")
            .field(&self.is_leading())
            .finish()
    }
}

impl prometheus_client::collector::Collector for LeaderCollector {
    fn encode(
        &self,
        mut encoder: prometheus_client::encoding::DescriptorEncoder,
    ) -> Result<(), std::fmt::Error> {
        use prometheus_client::encoding::EncodeMetric;
        let mut family = encoder.encode_descriptor(
            "leader_election_master_status",
            "1 while this process is the leader of the named lease, else 0",
            None,
            prometheus_client::metrics::MetricType::Gauge,
        )?;
        let labels = [("name", self.name.as_str())];
        prometheus_client::metrics::gauge::ConstGauge::new(i64::from(self.leading.is_leading()))
            .encode(family.encode_family(&labels)?)
    }
}

/// The module documentation's example (its modules are private to the
/// crate, so rustdoc cannot compile it from outside).
#[cfg(test)]
mod doc_example {
    #[test]
    fn the_example_wakes_a_follower_when_leading() {
        tokio::runtime::Runtime::new().unwrap().block_on(async {
            use crate::controller::leader::Leadership;
            let l = Leadership::new(false);
            let follower = {
                let l = l.clone();
                tokio::spawn(async move { l.acquired().await })
            };
            l.set(true);
            follower.await.unwrap();
            assert!(l.is_leading());
        });
    }
}
