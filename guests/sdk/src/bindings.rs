//! The wit-bindgen output for the two worlds of `wasmlet:plugin` (generated at compile
//! time from `wit/`). Nothing here is meant for plugin authors: the `reconciler!` and
//! `provider!` macros and the typed modules of this crate wrap it.
//!
//! The provider world is generated first because it imports every interface; the
//! reconciler world reuses those imports (`with`), so one set of import types exists.
//! Both use `pub_export_macro`, which makes wit-bindgen put each world's *exports* into
//! the custom section emitted where its export macro expands (in the guest crate). A
//! reconciler guest therefore never claims the provider's exports even when one cargo
//! build compiles this crate for reconcilers and providers together; unused imports
//! (e.g. `workloads` in a reconciler) are dropped by the component encoder.
#![allow(missing_docs, clippy::all)]

pub mod provider {
    wit_bindgen::generate!({
        world: "provider-plugin",
        path: "../../wit",
        pub_export_macro: true,
        export_macro_name: "export_provider",
        // Providers keep these records in their state and compare them in tests.
        additional_derives: [PartialEq],
        default_bindings_module: "wasmlet_sdk::bindings::provider",
        runtime_path: "wasmlet_sdk::__private::wit_bindgen::rt",
    });
}

pub mod reconciler {
    wit_bindgen::generate!({
        world: "reconciler-plugin",
        path: "../../wit",
        pub_export_macro: true,
        export_macro_name: "export_reconciler",
        default_bindings_module: "wasmlet_sdk::bindings::reconciler",
        runtime_path: "wasmlet_sdk::__private::wit_bindgen::rt",
        with: {
            "wasmlet:plugin/types@0.1.0": crate::bindings::provider::wasmlet::plugin::types,
            "wasmlet:plugin/client@0.1.0": crate::bindings::provider::wasmlet::plugin::client,
            "wasmlet:plugin/clusters@0.1.0": crate::bindings::provider::wasmlet::plugin::clusters,
            "wasmlet:plugin/log@0.1.0": crate::bindings::provider::wasmlet::plugin::log,
            "wasmlet:plugin/http@0.1.0": crate::bindings::provider::wasmlet::plugin::http,
        },
    });
}

pub use provider::exports::wasmlet::plugin::provider as provider_exports;
pub use provider::wasmlet::plugin::{client, clusters, http, log, types, workloads};
pub use reconciler::exports::wasmlet::plugin::reconciler as reconciler_exports;
