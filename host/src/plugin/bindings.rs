//! The contract's generated bindings (`wit/`), the only place `bindgen!`
//! runs. They stay inside the plugin runtime: the host's own types cross the
//! boundary ([`super::outcome`] for reconcilers), so the controller engine
//! never names a WIT type.

/// The `reconciler-plugin` world, which also defines the shared interfaces
/// (`types`, `client`, `clusters`, `log`, `http`).
pub(crate) mod reconciler {
    wasmtime::component::bindgen!({
        path: "../wit",
        world: "reconciler-plugin",
        imports: { default: async },
        exports: { default: async },
        // Records (`super::super::record`) store import arguments and results as JSON.
        additional_derives: [serde::Serialize, serde::Deserialize],
    });
}

/// The `provider-plugin` world, sharing the reconciler world's interfaces.
pub(crate) mod provider {
    wasmtime::component::bindgen!({
        path: "../wit",
        world: "provider-plugin",
        imports: { default: async },
        exports: { default: async },
        additional_derives: [serde::Serialize, serde::Deserialize],
        with: {
            "wasmlet:plugin/types": super::reconciler::wasmlet::plugin::types,
            "wasmlet:plugin/client": super::reconciler::wasmlet::plugin::client,
            "wasmlet:plugin/clusters": super::reconciler::wasmlet::plugin::clusters,
            "wasmlet:plugin/log": super::reconciler::wasmlet::plugin::log,
            "wasmlet:plugin/http": super::reconciler::wasmlet::plugin::http,
        },
    });
}
