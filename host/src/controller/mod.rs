//! The controller engine: everything a reconciler plugin would otherwise
//! re-implement, done once by the host.
//!
//! - [`workqueue`]: dedup, per-key back-off, priorities (high / low / scheduled);
//! - [`controller`]: per plugin, watches → queue → guest → host-owned status;
//! - [`status`]: merging the guest's status, conditions, `Ready`, `observedGeneration`;
//! - [`expectations`]: no second reconcile before the cache saw the first one's writes;
//! - [`leader`]: Lease-based leader election;
//! - [`metrics`]: controller-runtime's metric names, `/healthz`, `/readyz`;
//! - `remote`: watches of kinds in the host's named clusters;
//! - [`table`]: the same for rows of a datastore table ([`crate::datastore`]);
//! - [`manager`]: one controller per loaded reconciler, following the plugin set.

#[allow(clippy::module_inception)]
pub mod controller;
mod enqueue;
pub mod expectations;
mod guest;
mod keys;
pub mod leader;
pub mod manager;
pub mod metrics;
mod own_writes;
mod reconcile;
mod remote;
pub mod source;
pub mod status;
mod status_write;
pub mod table;
mod worker;
pub mod workqueue;

pub use manager::Manager;
