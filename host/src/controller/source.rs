//! What a controller calls: normally the current version of a wasm plugin,
//! but anything with the same contract works — the benchmark compares a wasm
//! guest with the same logic as native Rust behind this same interface.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use crate::plugin::outcome::{Finalized, GuestError, Reconciled};
use crate::plugin::sandbox::CallReport;
use crate::plugin::{CallError, Loaded, Manifest, PluginSet};

pub type Call<'a, T> = Pin<
    Box<dyn Future<Output = Result<(Result<T, GuestError>, CallReport), CallError>> + Send + 'a>,
>;

/// One reconciler version, as the controller uses it.
pub trait Reconciler: Send + Sync {
    fn manifest(&self) -> &Manifest;
    fn declared_conditions(&self) -> &[String];
    fn reconcile<'a>(&'a self, key: &'a str, obj: &'a str) -> Call<'a, Reconciled>;
    fn finalize<'a>(&'a self, key: &'a str, obj: &'a str) -> Call<'a, Finalized>;
}

impl Reconciler for Loaded {
    fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    fn declared_conditions(&self) -> &[String] {
        &self.declared_conditions
    }

    fn reconcile<'a>(&'a self, key: &'a str, obj: &'a str) -> Call<'a, Reconciled> {
        Box::pin(Loaded::reconcile(self, key, obj))
    }

    fn finalize<'a>(&'a self, key: &'a str, obj: &'a str) -> Call<'a, Finalized> {
        Box::pin(Loaded::finalize(self, key, obj))
    }
}

/// Where a controller finds its reconciler's current version.
pub trait Source: Send + Sync {
    fn current(&self, name: &str) -> Option<Arc<dyn Reconciler>>;
}

impl Source for PluginSet {
    fn current(&self, name: &str) -> Option<Arc<dyn Reconciler>> {
        self.get(name).map(|l| l as Arc<dyn Reconciler>)
    }
}

/// A fixed reconciler (native code, for benchmarks and embedding).
pub struct Fixed(pub Arc<dyn Reconciler>);

impl Source for Fixed {
    fn current(&self, _name: &str) -> Option<Arc<dyn Reconciler>> {
        Some(self.0.clone())
    }
}
