//! One wasmtime [`Engine`] for every plugin, its precompiled-component cache,
//! and the epoch ticker that enforces per-call CPU deadlines.
//!
//! Compiled components are cached on disk under
//! `CACHE/<engine compatibility hash>/<sha256 of the .wasm>.cwasm`, so a
//! restart (or the same plugin under another name) deserializes in about a
//! millisecond instead of compiling for hundreds.

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use sha2::{Digest, Sha256};
use wasmtime::component::Component;
use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig};

/// How often the epoch advances; deadlines are rounded up to this.
pub const EPOCH_TICK: Duration = Duration::from_millis(5);

#[derive(Debug, thiserror::Error)]
pub enum CompileError {
    #[error("{path}: not a valid WebAssembly component: {message}")]
    Invalid { path: String, message: String },
    #[error("{path}: {message}")]
    Io { path: String, message: String },
}

#[derive(Clone)]
pub struct PluginEngine {
    pub engine: Engine,
    cache_dir: PathBuf,
    pub pooling: bool,
}

fn base_config() -> Config {
    let mut config = Config::new();
    config.wasm_component_model(true);
    config.epoch_interruption(true);
    config
}

impl PluginEngine {
    /// Builds the engine: the pooling allocator when this machine can reserve
    /// its slots (a probe), on-demand allocation otherwise.
    pub fn new(cache_dir: &Path) -> anyhow::Result<PluginEngine> {
        let mut pooled = base_config();
        let mut pool = PoolingAllocationConfig::default();
        pool.total_component_instances(512);
        pool.total_core_instances(1024);
        pool.total_memories(1024);
        pool.total_tables(1024);
        pool.total_stacks(512);
        pool.max_memory_size(1 << 30);
        pooled.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
        let (engine, pooling) = match Engine::new(&pooled) {
            Ok(e) => (e, true),
            Err(e) => {
                tracing::info!(error = %e, "pooling allocator unavailable, using on-demand allocation");
                (
                    Engine::new(&base_config()).map_err(|e| anyhow::anyhow!("{e}"))?,
                    false,
                )
            }
        };
        let mut h = std::collections::hash_map::DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut h);
        let cache_dir = cache_dir.join(format!("{:016x}", h.finish()));
        std::fs::create_dir_all(&cache_dir)?;
        let ticker = engine.weak();
        std::thread::Builder::new()
            .name("epoch-ticker".into())
            .spawn(move || {
                // A sleep loop skips missed ticks by construction: one increment per wake.
                while let Some(engine) = ticker.upgrade() {
                    engine.increment_epoch();
                    drop(engine);
                    std::thread::sleep(EPOCH_TICK);
                }
            })?;
        Ok(PluginEngine {
            engine,
            cache_dir,
            pooling,
        })
    }

    /// The component in file `path`, read and compiled (or deserialized) on
    /// a blocking thread: a compile takes hundreds of milliseconds, which must
    /// not stall a tokio worker.
    pub async fn load_file(&self, path: &Path) -> Result<(Arc<Component>, String), CompileError> {
        let (engine, path) = (self.clone(), path.to_path_buf());
        let shown = path.display().to_string();
        tokio::task::spawn_blocking(move || {
            let bytes = std::fs::read(&path).map_err(|e| CompileError::Io {
                path: path.display().to_string(),
                message: e.to_string(),
            })?;
            engine.load(&path, &bytes)
        })
        .await
        .map_err(|e| CompileError::Io {
            path: shown,
            message: format!("the compile task failed: {e}"),
        })?
    }

    /// The component in `bytes`, from the cache or compiled (and cached) now.
    /// Blocking: from async code use [`PluginEngine::load_file`].
    pub fn load(
        &self,
        path: &Path,
        bytes: &[u8],
    ) -> Result<(Arc<Component>, String), CompileError> {
        let digest = hex::encode(Sha256::digest(bytes));
        let cached = self.cache_dir.join(format!("{digest}.cwasm"));
        let io = |e: std::io::Error| CompileError::Io {
            path: path.display().to_string(),
            message: e.to_string(),
        };
        if cached.exists() {
            // SAFETY: files in the cache directory are written only by
            // `precompile_component` of an engine with this compatibility hash.
            match unsafe { Component::deserialize_file(&self.engine, &cached) } {
                Ok(c) => return Ok((Arc::new(c), digest)),
                Err(e) => {
                    tracing::warn!(file = %cached.display(), error = %e, "cached component unusable, recompiling")
                }
            }
        }
        let compiled =
            self.engine
                .precompile_component(bytes)
                .map_err(|e| CompileError::Invalid {
                    path: path.display().to_string(),
                    message: format!("{e:#}"),
                })?;
        let tmp = cached.with_extension(format!("tmp{}", std::process::id()));
        std::fs::write(&tmp, &compiled).map_err(io)?;
        std::fs::rename(&tmp, &cached).map_err(io)?;
        // SAFETY: written just above by this engine.
        let component =
            unsafe { Component::deserialize_file(&self.engine, &cached) }.map_err(|e| {
                CompileError::Invalid {
                    path: path.display().to_string(),
                    message: format!("{e:#}"),
                }
            })?;
        Ok((Arc::new(component), digest))
    }

    /// Epoch ticks for a deadline (at least one).
    pub fn ticks(deadline: Duration) -> u64 {
        (deadline.as_micros().div_ceil(EPOCH_TICK.as_micros())).max(1) as u64 + 1
    }
}
