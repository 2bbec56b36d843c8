//! Fuzz targets for wasmlet's untrusted-input paths, and a stable-toolchain
//! driver that runs them (see the README's "Fuzzing" section for why it is
//! not cargo-fuzz).
//!
//! Each target takes raw bytes and either decodes them as text (selectors,
//! manifests) or drives [`generate`], which turns them into Kubernetes-shaped JSON,
//! schemas, requests and WebAssembly components. A target panics only on a
//! bug: a crash in the code under test or a broken invariant.

pub mod driver;
pub mod generate;
mod targets;

/// One fuzz target.
pub struct Target {
    pub name: &'static str,
    pub about: &'static str,
    pub run: fn(&[u8]),
}

/// Every target, in the order `scripts/fuzz` runs them.
pub const TARGETS: &[Target] = &[
    Target {
        name: "merge-patch",
        about: "JSON merge patch and JSON patch: diffs round-trip, failed patches leave the object unchanged",
        run: targets::patch::merge_and_json,
    },
    Target {
        name: "strategic-patch",
        about: "strategic merge patch with built-in list types; an empty patch changes nothing",
        run: targets::patch::strategic,
    },
    Target {
        name: "patch-bounds",
        about: "amplifying JSON patches (self-copies, doubling lists, deep values): results stay within patch::bounds",
        run: targets::patch_bounds::patch_bounds,
    },
    Target {
        name: "rbac-covers",
        about: "RBAC coverage without breakdown agrees with the breakdown; rules up to the limits finish, bounded listing",
        run: targets::rbac::rbac_covers,
    },
    Target {
        name: "apply",
        about: "server-side apply and update (managed fields); re-applying is a no-op, fieldsV1 round-trips",
        run: targets::apply::apply,
    },
    Target {
        name: "selectors",
        about: "label and field selectors: parse, print, parse again gives the same selector",
        run: targets::selector::selectors,
    },
    Target {
        name: "selector-bounds",
        about: "selectors of every size up to the request head limit: no recursion, sets match as a scan would, bounded error messages",
        run: targets::selector_bounds::selector_bounds,
    },
    Target {
        name: "schema",
        about: "CRD structural schemas: defaulting is idempotent, validation never reports a pruned field",
        run: targets::schema::schema,
    },
    #[cfg(feature = "host")]
    Target {
        name: "manifest",
        about: "plugin manifests (Manifest::parse)",
        run: targets::manifest::manifest,
    },
    #[cfg(feature = "host")]
    Target {
        name: "rest",
        about: "requests to the embedded API server: paths, query parameters, JSON/YAML/protobuf bodies",
        run: targets::rest::rest,
    },
    #[cfg(feature = "host")]
    Target {
        name: "component",
        about: "wasm-smith components and wrapped modules through the plugin loader's validation",
        run: targets::component::component,
    },
];

/// The target called `name`.
pub fn target(name: &str) -> Option<&'static Target> {
    TARGETS.iter().find(|t| t.name == name)
}
