//! The content-addressed store (`DATA/modules/sha256/`) and turning its modules into
//! pre-linked runnables (components and core modules through the plugin engine's
//! sealed cache, compiled in its compile child).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use wasmtime_wasi::p2::bindings::CommandPre;

use super::super::{FetchError, Inner, LoadedModule, Runnable};

impl Inner {
    pub(super) fn modules_dir(&self) -> PathBuf {
        self.config.data_dir.join("modules")
    }

    pub(crate) fn module_path(&self, hex: &str) -> PathBuf {
        self.modules_dir()
            .join("sha256")
            .join(format!("{hex}.wasm"))
    }
    pub(crate) fn loaded(&self, hex: &str) -> Option<Arc<LoadedModule>> {
        self.modules
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(hex)
            .cloned()
    }
    /// Compiles and links `bytes` (digest `hex`) off the async threads.
    pub(super) async fn load_blocking(
        self: Arc<Self>,
        hex: String,
        bytes: Vec<u8>,
    ) -> Result<Arc<LoadedModule>, FetchError> {
        tokio::task::spawn_blocking(move || self.load_module(&hex, &bytes))
            .await
            .map_err(|e| FetchError::Other(format!("compile task: {e}")))?
    }

    /// Compiles (or takes from the precompiled cache) and pre-links a module.
    pub(crate) fn load_module(
        &self,
        hex: &str,
        bytes: &[u8],
    ) -> Result<Arc<LoadedModule>, FetchError> {
        if let Some(m) = self.loaded(hex) {
            return Ok(m);
        }
        let path = self.module_path(hex);
        let shown = format!("sha256:{hex}");
        let runnable = if is_component(bytes) {
            let (component, _) = self
                .engine
                .load(&path, bytes)
                .map_err(|e| FetchError::NotWasm(e.to_string()))?;
            let pre = self.p2_linker.instantiate_pre(&component).map_err(|e| {
                FetchError::NotWasm(format!("{shown}: cannot be linked with WASI 0.2: {e:#}"))
            })?;
            let pre = CommandPre::new(pre).map_err(|e| {
                FetchError::NotWasm(format!(
                    "{shown}: not a WASI command (no wasi:cli/run export): {e:#}"
                ))
            })?;
            Runnable::Component(pre)
        } else {
            let module = self.load_core(hex, bytes)?;
            match module.get_export("_start") {
                Some(wasmtime::ExternType::Func(_)) => {}
                _ => {
                    return Err(FetchError::NotWasm(format!(
                        "{shown}: a core module without _start is not a WASI command"
                    )));
                }
            }
            let pre = self.p1_linker.instantiate_pre(&module).map_err(|e| {
                FetchError::NotWasm(format!(
                    "{shown}: cannot be linked with WASI preview 1: {e:#}"
                ))
            })?;
            Runnable::Core(pre)
        };
        let loaded = Arc::new(LoadedModule {
            digest: format!("sha256:{hex}"),
            runnable,
        });
        self.modules
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(hex.to_string(), loaded.clone());
        Ok(loaded)
    }

    /// A core module through the engine's sealed cache, compiled in the compile
    /// child as components are: a swapped or planted artifact is recompiled,
    /// never run, and a hostile module crashes the child, not the node.
    pub(super) fn load_core(
        &self,
        hex: &str,
        bytes: &[u8],
    ) -> Result<wasmtime::Module, FetchError> {
        self.engine
            .load_module(&self.module_path(hex), bytes)
            .map(|(m, _)| m)
            .map_err(|e| FetchError::NotWasm(format!("sha256:{hex}: {e}")))
    }
}

fn is_component(bytes: &[u8]) -> bool {
    bytes.len() >= 8 && bytes[..4] == *b"\0asm" && bytes[6..8] == [1, 0]
}

pub(super) fn check_magic(bytes: &[u8], what: &str) -> Result<(), FetchError> {
    if bytes.len() < 8 || bytes[..4] != *b"\0asm" {
        return Err(FetchError::NotWasm(format!(
            "{what}: not a WebAssembly module or component (no \\0asm header)"
        )));
    }
    Ok(())
}

pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let tmp = path.with_extension(format!(
        "tmp{}.{}",
        std::process::id(),
        rand::random::<u32>()
    ));
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, path).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}
