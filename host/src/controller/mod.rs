//! The controller engine: everything a reconciler plugin would otherwise
//! re-implement, done once by the host.
//!
//! - [`workqueue`]: dedup, per-key back-off, priorities (high / low / scheduled);
//! - `priority`: which lane an object a list finds goes to (kinds and tables alike);
//! - [`controller`]: per plugin, watches → queue → guest → host-owned status;
//! - [`status`]: merging the guest's status, conditions, `Ready`, `observedGeneration`;
//! - [`expectations`]: no second reconcile before the cache saw the first one's writes;
//! - [`leader`]: Lease-based leader election;
//! - [`metrics`]: controller-runtime's metric names, `/healthz`, `/readyz`;
//! - `remote`: watches of kinds in the host's named clusters;
//! - `changes`: which owned or watched changes requeue (the manifest's `changes`);
//! - [`table`]: the same for rows of a datastore table ([`crate::datastore`]);
//! - [`manager`]: one controller per loaded reconciler, following the plugin set.

mod changes;
#[allow(clippy::module_inception)]
pub(crate) mod controller;
mod enqueue;
pub(crate) mod expectations;
mod guest;
mod keys;
pub(crate) mod leader;
pub(crate) mod manager;
pub(crate) mod metrics;
mod own_writes;
mod priority;
mod reconcile;
mod remote;
pub(crate) mod source;
pub(crate) mod status;
mod status_write;
pub(crate) mod table;
mod worker;
pub(crate) mod workqueue;

pub(crate) use manager::Manager;
