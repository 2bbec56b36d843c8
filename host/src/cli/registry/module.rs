//! Workload modules as OCI artifacts (`wasmlet module push`): a pod's image.
//!
//! The layout is the one the node agent pulls (`node/workloads/fetch/oci.rs`)
//! and the CNCF TAG Runtime wasm layout other runtimes read: one
//! `application/wasm` layer holding the module, titled with its file name,
//! under an `application/vnd.wasm.config.v0+json` config saying
//! `architecture: wasm` and `os: wasip2` (a component) or `wasip1` (a core
//! module). Pushed through the same client and options as plugins
//! ([`crate::plugin::distribution::push_layers`]).

use std::path::Path;

use oci_client::client::ImageLayer;

use crate::plugin::distribution::{
    COMPONENT_MEDIA_TYPE, DistributionError, RegistryOptions, push_layers, titled,
};

/// What a file holds, by its 8-byte preamble.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum WasmKind {
    /// A core module (`\0asm`, version 1): a WASI preview 1 command.
    Module,
    /// A component (`\0asm`, version 0x0d, layer 1): a WASI 0.2 command.
    Component,
}

impl WasmKind {
    /// The `os` of the artifact's config.
    pub(super) fn os(self) -> &'static str {
        match self {
            WasmKind::Module => "wasip1",
            WasmKind::Component => "wasip2",
        }
    }

    /// The kind of `bytes`, or why they are neither.
    pub(super) fn of(bytes: &[u8]) -> Result<WasmKind, String> {
        match bytes.get(..8) {
            Some([0, b'a', b's', b'm', 1, 0, 0, 0]) => Ok(WasmKind::Module),
            Some([0, b'a', b's', b'm', _, _, 1, 0]) => Ok(WasmKind::Component),
            Some([0, b'a', b's', b'm', ..]) => {
                Err("a WebAssembly binary of an unknown version or layer".into())
            }
            _ => Err("not a WebAssembly module or component (no \\0asm header)".into()),
        }
    }
}

/// Reads the module at `path`: its bytes and kind. A file that is not wasm is
/// refused here, not by the node at the pod's pull.
pub(super) fn read(path: &Path) -> Result<(Vec<u8>, WasmKind), DistributionError> {
    let bytes = std::fs::read(path).map_err(|source| DistributionError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let kind = WasmKind::of(&bytes).map_err(|m| DistributionError::Io {
        path: path.to_path_buf(),
        source: std::io::Error::new(std::io::ErrorKind::InvalidData, m),
    })?;
    Ok((bytes, kind))
}

/// The artifact's one layer: the module, titled with `file_name`.
pub(super) fn layer(bytes: Vec<u8>, file_name: &str) -> ImageLayer {
    ImageLayer::new(bytes, COMPONENT_MEDIA_TYPE.into(), titled(file_name))
}

/// Pushes the module at `path` as `reference`; returns its kind and the
/// manifest's digest.
pub(super) async fn push(
    path: &Path,
    reference: &str,
    opts: &RegistryOptions,
) -> Result<(WasmKind, String), DistributionError> {
    let (bytes, kind) = read(path)?;
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("module.wasm");
    let digest = push_layers(vec![layer(bytes, name)], kind.os(), reference, opts).await?;
    Ok((kind, digest))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_preamble_tells_modules_components_and_others_apart() {
        let module = b"\0asm\x01\0\0\0rest";
        let component = b"\0asm\x0d\0\x01\0rest";
        assert_eq!(WasmKind::of(module), Ok(WasmKind::Module));
        assert_eq!(WasmKind::of(component), Ok(WasmKind::Component));
        assert_eq!(WasmKind::Module.os(), "wasip1");
        assert_eq!(WasmKind::Component.os(), "wasip2");
        assert!(WasmKind::of(b"\0asm\x02\0\0\0").is_err_and(|e| e.contains("unknown version")));
        assert!(WasmKind::of(b"#!/bin/sh\n").is_err_and(|e| e.contains("no \\0asm header")));
        assert!(WasmKind::of(b"\0as").is_err());
    }

    #[test]
    fn a_file_that_is_not_wasm_is_refused_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("app.wasm");
        std::fs::write(&path, "not wasm").unwrap();
        let e = read(&path).unwrap_err().to_string();
        assert!(
            e.contains("app.wasm") && e.contains("no \\0asm header"),
            "{e}"
        );
        let l = layer(b"\0asm\x01\0\0\0".to_vec(), "app.wasm");
        assert_eq!(l.media_type, "application/wasm");
        assert_eq!(
            l.annotations.unwrap()["org.opencontainers.image.title"],
            "app.wasm"
        );
    }
}
