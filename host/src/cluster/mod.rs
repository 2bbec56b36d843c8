//! Cluster access, below both the controller engine and the plugin runtime:
//! one client, kinds resolved once, one watch and cache per kind, reads
//! served from those caches and writes sent to the API server. The CLI builds
//! it once; nothing here knows about plugins or controllers.
//!
//! - [`resolver`]: `apiVersion` + `kind` → resource (discovery, cached);
//! - [`cache`]: shared watches and caches, one per kind;
//! - [`object`]: [`CachedObject`], a cached object (its body kept as text),
//!   and objects as guests read them (JSON with apiVersion and kind);
//! - [`client`]: [`Cluster`], reads from the caches, writes to the server;
//! - [`access`]: [`ClusterAccess`], the trait the plugin imports call;
//! - [`metrics`]: requests to each named cluster, counted in its client;
//! - [`read_only`]: [`ReadOnly`], access that never writes (shadow candidates);
//! - [`named`]: [`NamedClusters`], the clusters besides the host's own
//!   (`--cluster NAME=KUBECONFIG`), each a [`Cluster`] of its own;
//! - [`error`]: why a call failed ([`ClientError`]).
//!
//! ```ignore
//! # async fn demo(client: kube::Client) -> anyhow::Result<()> {
//! use std::sync::Arc;
//! use wasmlet::cluster::{Cluster, ClusterAccess, Resolver, cache::Caches};
//! let resolver = Arc::new(Resolver::new(client));
//! let caches = Caches::new(resolver.clone());
//! let cluster: Arc<dyn ClusterAccess> = Arc::new(Cluster::new(resolver, Some(caches)));
//! let pods = cluster.resolve("v1", "Pod").await?;
//! let names = cluster.list(&pods, Some("default"), "app=web", None).await?;
//! # Ok(()) }
//! ```

pub(crate) mod access;
pub(crate) mod cache;
pub(crate) mod client;
pub(crate) mod error;
pub(crate) mod metrics;
pub(crate) mod named;
pub(crate) mod object;
pub(crate) mod read_only;
pub(crate) mod resolver;

pub(crate) use access::ClusterAccess;
pub(crate) use client::{Cluster, Delete, PatchKind};
pub(crate) use error::ClientError;
pub(crate) use named::NamedClusters;
pub(crate) use object::CachedObject;
pub(crate) use read_only::ReadOnly;
pub(crate) use resolver::{Resolved, Resolver};
