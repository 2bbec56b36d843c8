//! # wasmlet-sdk: write wasmlet plugins in Rust
//!
//! A wasmlet plugin is a WebAssembly component (`wasm32-wasip2`) built against the
//! `wasmlet:plugin@0.1.0` contract in `wit/`. This crate hides the generated bindings:
//! a **reconciler** is one function over a typed object, exported with
//! [`reconciler!`]; a **provider** (a node agent's pod runtime) is a typestate machine
//! whose edges [`edges!`] declares, exported with [`provider!`].
//!
//! ## A complete reconciler
//!
//! ```
//! use std::sync::Arc;
//! use std::time::Duration;
//!
//! use k8s_openapi::api::core::v1::ConfigMap;
//! use kube::{CustomResource, ResourceExt};
//! use schemars::JsonSchema;
//! use serde::{Deserialize, Serialize};
//! use wasmlet_sdk::prelude::*;
//!
//! /// The custom resource: its spec, and the status this reconciler owns.
//! #[derive(CustomResource, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
//! #[kube(group = "examples.wasmlet.dev", version = "v1", kind = "ConfigSummary", namespaced)]
//! #[kube(status = "ConfigSummaryStatus")]
//! pub struct ConfigSummarySpec {}
//!
//! #[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
//! pub struct ConfigSummaryStatus {
//!     pub keys: usize,
//! }
//!
//! fn reconcile(obj: Arc<ConfigSummary>, ctx: &Context) -> Result<Action, Error> {
//!     let ns = obj.namespace().unwrap_or_default();
//!     let selector = format!("wasmlet.dev/summary={}", obj.name_any());
//!     // Served from the host's cache; the manifest must grant `list configmaps`.
//!     let maps: Vec<ConfigMap> = ctx.client().list(&ListParams::namespaced(&ns).labels(&selector))?;
//!     let keys: usize = maps.iter().map(|cm| cm.data.as_ref().map_or(0, |d| d.len())).sum();
//!     ctx.log(Level::Info, "summarised", &[("configmaps", &maps.len().to_string())]);
//!     if maps.is_empty() {
//!         let _ = ctx.event(Event::warning("NothingToSummarise", "Reconcile")
//!             .note(format!("no ConfigMap has label {selector}")));
//!     }
//!     // The host merges this into `.status`, sets the condition (and `Ready`,
//!     // `observedGeneration`), and writes only if something changed.
//!     Ok(Action::requeue(Duration::from_secs(600))
//!         .status(ConfigSummaryStatus { keys })
//!         .condition(Condition::is_true("Summarised").reason("Listed")
//!             .message(format!("{keys} keys in {} ConfigMaps", maps.len()))))
//! }
//!
//! // Optional: cleanup before deletion (runs while the manifest's finalizer is set).
//! fn finalize(_obj: Arc<ConfigSummary>, _ctx: &Context) -> Result<Finalize, Error> {
//!     Ok(Finalize::Done)
//! }
//!
//! wasmlet_sdk::reconciler!(ConfigSummary, reconcile, finalize = finalize, conditions = ["Summarised"]);
//! # fn main() {}
//! ```
//!
//! Build it with `scripts/build-guests` (or `cargo build --release --target
//! wasm32-wasip2 -p NAME`), and ship `NAME.wasm` with its manifest `NAME.toml`
//! (see `guests/README.md`).
//!
//! ## The pieces
//! - [`reconciler`](mod@reconciler): [`Context`](reconciler::Context) (with the typed
//!   [`Client`](client::Client) at `ctx.client()`), [`Action`](reconciler::Action),
//!   [`Error`](reconciler::Error), [`Condition`](reconciler::Condition),
//!   [`Finalize`](reconciler::Finalize).
//! - [`client`]: get / list / create / update / patch / patch-status / delete / evict /
//!   events, typed over any `kube::Resource` (k8s-openapi and `CustomResource` types);
//!   the same in the host's named clusters with `ctx.cluster("eu-west")`
//!   ([`ClusterClient`](client::ClusterClient)).
//! - [`provider`](mod@provider): [`State`](provider::State), [`PodState`](provider::PodState),
//!   [`Transition`](provider::Transition), [`edges!`], [`provider!`];
//!   [`workloads`]: modules, volumes and WASI workloads for pods.
//! - [`log`], [`http`]: structured logs; outbound HTTP to allowed hosts.
//! - [`testing`] (native targets): a fake host so guest logic runs under `cargo test`.
//!
//! Clocks and randomness are WASI's (`std::time`, `getrandom`); the host provides them.
//! A panic traps the instance: the host reports it as a failed reconcile for that one
//! object and retries with back-off, so panicking is a legitimate (if blunt) error path.
//! Its message and location reach `Ready`, the Event and the host's log ([`panic`](mod@panic)).

#![warn(missing_docs)]

// Lets the generated code and the exported macros name this crate as `wasmlet_sdk`
// from inside it too.
extern crate self as wasmlet_sdk;

pub mod bindings;
pub mod client;
pub mod controllers;
pub mod host;
pub mod http;
pub mod log;
pub mod panic;
pub mod provider;
pub mod reconciler;
pub mod status;
#[cfg(not(target_arch = "wasm32"))]
pub mod testing;
pub mod workloads;

pub use k8s_openapi;
pub use kube;
pub use serde_json;

/// What a reconciler module usually needs.
pub mod prelude {
    pub use crate::client::{
        Client, ClientError, ClusterClient, DeleteParams, Event, ListParams, ObjectRef, Patch,
    };
    pub use crate::log::Level;
    pub use crate::reconciler::{Action, Condition, ConditionStatus, Context, Error, Finalize};
}

#[doc(hidden)]
pub mod __private {
    pub use serde_json;
    pub use wit_bindgen;
}
