//! Several hosts on one table (scale-out): each is a member of the table's
//! membership (`NAME_members`, one row per host with its heartbeat), rows
//! are split between the live members by rendezvous hashing, and a row is
//! reconciled only under its advisory lock ([`super::lock`]).
//!
//! Membership only spreads the work; the lock is what keeps a row from being
//! reconciled by two hosts at once, whatever each host believes about the
//! others. When a host joins or dies (its heartbeat is older than the TTL),
//! the others see the new member list at their next heartbeat, scan the
//! table again and queue the rows they now own; rendezvous hashing moves only
//! the rows of the member that came or went.
//!
//! ```ignore
//! # async fn demo(store: wasmlet::datastore::Datastore, table: wasmlet::datastore::Table) {
//! use wasmlet::datastore::members::{Membership, MembershipConfig, keep};
//! let me = Membership::new("host-a");
//! tokio::spawn(keep(store, table, me.clone(), MembershipConfig::default()));
//! if me.owns("project-1") { /* queue it */ }
//! # }
//! ```

use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use tokio::sync::Notify;

use super::{Datastore, DatastoreError, Table};

#[derive(Clone, Debug)]
pub(crate) struct MembershipConfig {
    /// How often a host renews its row and reads the member list.
    pub(crate) heartbeat: Duration,
    /// A member whose heartbeat is older than this is gone, and a host that
    /// could not renew its own for this long owns nothing until it can.
    pub(crate) ttl: Duration,
}

impl Default for MembershipConfig {
    fn default() -> Self {
        MembershipConfig {
            heartbeat: Duration::from_secs(2),
            ttl: Duration::from_secs(10),
        }
    }
}

/// This host's view of the table's members.
pub(crate) struct Membership {
    pub(crate) me: String,
    /// The live members, sorted; empty until the first heartbeat.
    view: ArcSwap<Vec<String>>,
    /// Signalled when the member list changes (the watcher scans again).
    pub(crate) changed: Arc<Notify>,
}

impl Membership {
    pub(crate) fn new(me: &str) -> Arc<Membership> {
        Arc::new(Membership {
            me: me.to_string(),
            view: ArcSwap::from_pointee(Vec::new()),
            changed: Arc::new(Notify::new()),
        })
    }

    /// A name for this process: hostname, pid and a random suffix (a host
    /// restarted with the same pid is a new member).
    pub(crate) fn name_for_this_process() -> String {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|_| "host".into());
        format!(
            "{host}-{}-{:04x}",
            std::process::id(),
            rand::random::<u16>()
        )
    }

    pub(crate) fn members(&self) -> Arc<Vec<String>> {
        self.view.load_full()
    }

    /// Whether row `id` is this host's to reconcile now.
    pub(crate) fn owns(&self, id: &str) -> bool {
        owner(&self.view.load(), id) == Some(self.me.as_str())
    }

    /// Replaces the member list; returns whether it changed.
    fn set(&self, members: Vec<String>) -> bool {
        if **self.view.load() == members {
            return false;
        }
        self.view.store(Arc::new(members));
        self.changed.notify_one();
        true
    }
}

/// The member that owns `id` among `members` (rendezvous hashing: the
/// highest hash of member and id), `None` with no members.
pub(crate) fn owner<'a>(members: &'a [String], id: &str) -> Option<&'a str> {
    members
        .iter()
        .max_by_key(|m| (stable_hash(m, id), m.as_str()))
        .map(String::as_str)
}

/// FNV-1a over `a`, a separator and `b`, then a 64-bit mix: stable across
/// builds and hosts, unlike std's hasher.
pub(super) fn stable_hash(a: &str, b: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in a.bytes().chain([0u8]).chain(b.bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    // splitmix64's finaliser, so that near-equal inputs spread.
    h ^= h >> 30;
    h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h ^= h >> 27;
    h = h.wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

/// Keeps `me` a member of `table`'s membership until the future is dropped:
/// renews its heartbeat, expires members past the TTL and updates the view.
pub(crate) async fn keep(
    store: Datastore,
    table: Table,
    me: Arc<Membership>,
    config: MembershipConfig,
) {
    // Tables made by an older `datastore init` have no membership table yet.
    if let Err(e) = create(&store, &table).await {
        tracing::warn!(table = %table, error = %e, "datastore: cannot create the membership table (run `wasmlet datastore init`)");
    }
    let mut last_ok = Instant::now();
    let mut announced = false;
    loop {
        match beat(&store, &table, &me.me, config.ttl).await {
            Ok(members) => {
                last_ok = Instant::now();
                if me.set(members) || !announced {
                    announced = true;
                    tracing::info!(table = %table, me = %me.me, members = ?me.members(), "datastore: members");
                }
            }
            Err(e) => {
                tracing::warn!(table = %table, error = %e, "datastore: cannot renew membership");
                // Others may have expired this host: own nothing until it is back.
                if last_ok.elapsed() >= config.ttl && me.set(Vec::new()) {
                    tracing::warn!(table = %table, me = %me.me, "datastore: membership lapsed; reconciling nothing until it is renewed");
                }
            }
        }
        tokio::time::sleep(config.heartbeat).await;
    }
}

async fn create(store: &Datastore, table: &Table) -> Result<(), DatastoreError> {
    store
        .client()
        .await?
        .batch_execute(&super::schema::members_table(table))
        .await
        .map_err(|e| DatastoreError::sql(table.name(), e))
}

/// One heartbeat: renew, expire, read the members.
async fn beat(
    store: &Datastore,
    table: &Table,
    me: &str,
    ttl: Duration,
) -> Result<Vec<String>, DatastoreError> {
    let client = store.client().await?;
    let members = table.derived("members");
    let sql = |e| DatastoreError::sql(table.name(), e);
    client
        .execute(
            &format!(
                "INSERT INTO {members} (member, heartbeat_at) VALUES ($1, now()) \
                 ON CONFLICT (member) DO UPDATE SET heartbeat_at = now()"
            ),
            &[&me],
        )
        .await
        .map_err(sql)?;
    client
        .execute(
            &format!(
                "DELETE FROM {members} WHERE heartbeat_at < now() - make_interval(secs => $1)"
            ),
            &[&ttl.as_secs_f64()],
        )
        .await
        .map_err(sql)?;
    let rows = client
        .query(
            &format!("SELECT member FROM {members} ORDER BY member"),
            &[],
        )
        .await
        .map_err(sql)?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_spread_over_members_and_only_a_leaving_members_rows_move() {
        let three: Vec<String> = ["a", "b", "c"].map(String::from).to_vec();
        let two: Vec<String> = ["a", "c"].map(String::from).to_vec();
        let ids: Vec<String> = (0..3000).map(|i| format!("row-{i}")).collect();
        let mut share = std::collections::BTreeMap::<&str, usize>::new();
        for id in &ids {
            *share.entry(owner(&three, id).unwrap()).or_default() += 1;
            let before = owner(&three, id).unwrap();
            let after = owner(&two, id).unwrap();
            if before != "b" {
                assert_eq!(before, after, "{id} moved though its owner stayed");
            }
        }
        for (m, n) in &share {
            assert!((800..1200).contains(n), "{m} owns {n} of 3000: {share:?}");
        }
        assert_eq!(owner(&[], "x"), None);
    }

    #[test]
    fn a_host_owns_nothing_before_its_first_heartbeat() {
        let me = Membership::new("a");
        assert!(!me.owns("x"));
        assert!(me.set(vec!["a".into()]));
        assert!(me.owns("x"));
        assert!(!me.set(vec!["a".into()]));
    }
}
