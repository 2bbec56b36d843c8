//! One wasmtime [`Engine`] for every plugin, its precompiled-component cache,
//! and the epoch ticker that enforces per-call deadlines.
//!
//! Compiled components are cached on disk under
//! `CACHE/<engine compatibility hash>/<sha256 of the .wasm>.cwasm`, sealed
//! with the install's key ([`super::artifact`]), so a
//! restart (or the same plugin under another name) deserializes in about a
//! millisecond instead of compiling for hundreds.
//!
//! A fresh data directory starts with an empty cache, so read-only *seed*
//! caches ([`PluginEngine::with_seeds`]) are consulted on a miss: the same
//! layout, written by `wasmlet plugin precompile DIR` into `DIR/.precompiled`
//! when the built-ins are built or installed. A seed is trusted as the own
//! cache is (this user's, closed to others, each artifact sealed under the
//! seed's key); a hit is resealed into the own cache, and anything stale or
//! foreign is compiled, never loaded.
//!
//! The per-call deadline the epoch enforces is wall time: it keeps running
//! while a guest waits in a host call (an HTTP fetch, an API write).

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use sha2::{Digest, Sha256};

use super::artifact::CacheKey;
use wasmlet_apiserver::private_dir::private_dir;
use wasmtime::component::Component;
use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig};

/// How often the epoch advances; deadlines are rounded up to this.
pub(crate) const EPOCH_TICK: Duration = Duration::from_millis(5);

#[derive(Debug, thiserror::Error)]
pub enum CompileError {
    #[error("{path}: not a valid WebAssembly component: {message}")]
    Invalid { path: String, message: String },
    #[error("{path}: {message}")]
    Io { path: String, message: String },
}

/// What a cached artifact was compiled from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Component,
    /// A core module: pods' WASI preview 1 workloads.
    Module,
}

impl Kind {
    /// The cache file of source digest `digest` (components keep the name
    /// they always had, so existing caches stay valid).
    fn file_name(self, digest: &str) -> String {
        match self {
            Kind::Component => format!("{digest}.cwasm"),
            Kind::Module => format!("{digest}.module.cwasm"),
        }
    }

    /// The string the seal binds.
    fn sealed_for(self, digest: &str) -> String {
        match self {
            Kind::Component => digest.to_string(),
            Kind::Module => format!("module:{digest}"),
        }
    }

    fn precompile(self, engine: &Engine, bytes: &[u8]) -> wasmtime::Result<Vec<u8>> {
        match self {
            Kind::Component => engine.precompile_component(bytes),
            Kind::Module => engine.precompile_module(bytes),
        }
    }
}

/// The directory name under which `dir` holds `engine`'s artifacts: an
/// engine of another wasmtime build or configuration never reads them.
fn compatible_dir(engine: &Engine, root: &Path) -> PathBuf {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    engine.precompile_compatibility_hash().hash(&mut h);
    root.join(format!("{:016x}", h.finish()))
}

/// A read-only cache written by `wasmlet plugin precompile`: where its artifacts for
/// this engine are, and the key they are sealed with.
struct Seed {
    dir: PathBuf,
    key: CacheKey,
}

/// The seed cache in `DIR/.precompiled` of a plugin directory `DIR`.
pub(crate) const SEED_DIR: &str = ".precompiled";

#[derive(Clone)]
pub struct PluginEngine {
    pub engine: Engine,
    cache_dir: PathBuf,
    /// Consulted in order on a miss in `cache_dir`; never written.
    seeds: Arc<Vec<Seed>>,
    /// `None`: the cache directory failed its ownership check; nothing is
    /// cached or loaded from it.
    key: Option<Arc<CacheKey>>,
    pub pooling: bool,
    /// The `wasmlet` executable that compiles components in a child process
    /// ([`PluginEngine::compile_in_child`]); `None`: compiled in this process.
    compiler: Option<Arc<PathBuf>>,
}

/// The plugins' engine configuration, with or without the pooling allocator:
/// a compile child builds the same, so its artifact loads here.
fn plugin_config(pooling: bool) -> Config {
    let mut config = base_config();
    if pooling {
        let mut pool = PoolingAllocationConfig::default();
        pool.total_component_instances(512);
        pool.total_core_instances(1024);
        pool.total_memories(1024);
        pool.total_tables(1024);
        pool.total_stacks(512);
        pool.max_memory_size(1 << 30);
        keep_dirty_pages_resident(&mut pool);
        config.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    }
    config
}

/// Linear memory kept mapped between instances of a pool slot, up to this
/// many bytes from its start: a Rust guest's shadow stack takes the first
/// MiB, its data and heap start above it, so 4 MiB covers what a typical
/// reconcile touches.
const KEEP_RESIDENT: usize = 4 << 20;

/// Every call runs on a fresh instance, so the slot's memory is reset after
/// each one. By default that is an `madvise` of the whole memory (a TLB
/// flush), and the next call faults every page it touches in again. With
/// the kernel's `PAGEMAP_SCAN` (Linux 6.7+) the pool finds the pages the
/// call dirtied and copies them back from the initial image instead, so they
/// stay mapped: the next instance starts from exactly the same contents (nothing
/// survives between calls) without faulting. The versus bench's widget call
/// (fresh instance included) went from 87 to 54 µs under load, 41 to 17 µs
/// idle, with 1.2 page faults per reconcile instead of 9.2 (issue 16).
/// Without the ioctl, keeping memory
/// resident would mean a `memset` of all of it per call, slower than the
/// faults: the default is kept.
fn keep_dirty_pages_resident(pool: &mut PoolingAllocationConfig) {
    if PoolingAllocationConfig::is_pagemap_scan_available() {
        pool.pagemap_scan(wasmtime::Enabled::Yes);
        pool.linear_memory_keep_resident(KEEP_RESIDENT);
        pool.table_keep_resident(64 << 10);
    }
}

fn base_config() -> Config {
    let mut config = Config::new();
    config.wasm_component_model(true);
    config.epoch_interruption(true);
    config
}

impl PluginEngine {
    /// Builds the plugins' engine: the pooling allocator when this machine can
    /// reserve its slots (a probe), on-demand allocation otherwise.
    pub fn new(cache_dir: &Path) -> anyhow::Result<PluginEngine> {
        let (engine, pooling) = match Engine::new(&plugin_config(true)) {
            Ok(e) => (e, true),
            Err(e) => {
                tracing::info!(error = %e, "pooling allocator unavailable, using on-demand allocation");
                (
                    Engine::new(&plugin_config(false)).map_err(|e| anyhow::anyhow!("{e}"))?,
                    false,
                )
            }
        };
        Self::with_engine(engine, pooling, cache_dir)
    }

    /// An engine for pods' WASI workloads, apart from the plugins' one: a pod's
    /// instances, memories and stacks never come out of the pool the reconcilers
    /// and providers instantiate from, however many pods run or however much they
    /// grow. On-demand allocation: memory is reserved as a workload grows, capped
    /// per store by its limit (a pool would have to reserve every slot at the
    /// node's maximum). Its compiled components share `cache_dir`'s cache.
    pub(crate) fn for_workloads(cache_dir: &Path) -> anyhow::Result<PluginEngine> {
        let engine = Engine::new(&base_config()).map_err(|e| anyhow::anyhow!("{e}"))?;
        Self::with_engine(engine, false, cache_dir)
    }

    fn with_engine(
        engine: Engine,
        pooling: bool,
        cache_dir: &Path,
    ) -> anyhow::Result<PluginEngine> {
        let root = cache_dir;
        let cache_dir = compatible_dir(&engine, root);
        let key = private_dir(root)
            .and_then(|()| private_dir(&cache_dir))
            .and_then(|()| CacheKey::load_or_create(root));
        let key = match key {
            Ok(k) => Some(Arc::new(k)),
            Err(e) => {
                tracing::warn!(dir = %root.display(), error = %e, "compiled-component cache disabled: every load compiles");
                None
            }
        };
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
            seeds: Arc::new(Vec::new()),
            key,
            pooling,
            compiler: None,
        })
    }

    /// Consults the seed caches rooted at `roots` (each a `wasmlet plugin precompile`
    /// output) on a miss. A root that is missing is skipped quietly; one that
    /// fails its checks (another user's, open to others, no key) is skipped
    /// with a warning: its artifacts would be machine code nobody vouched for.
    pub fn with_seeds(mut self, roots: &[PathBuf]) -> PluginEngine {
        let mut seeds = Vec::new();
        for root in roots {
            if !root.exists() {
                continue;
            }
            match CacheKey::load_existing(root) {
                Ok(key) => seeds.push(Seed {
                    dir: compatible_dir(&self.engine, root),
                    key,
                }),
                Err(e) => {
                    tracing::warn!(dir = %root.display(), error = %e, "precompiled seed cache not used")
                }
            }
        }
        self.seeds = Arc::new(seeds);
        self
    }

    /// Compiles components from now on in child processes of `exe` (the
    /// `wasmlet` binary, `wasmlet compile-component`): a compile's memory
    /// (tens of MiB for a large component) is the child's and goes with it,
    /// and a compiler crash on a hostile component ends the child, not the
    /// host. Loading from the cache is unchanged.
    pub fn compile_in_child(mut self, exe: PathBuf) -> PluginEngine {
        self.compiler = Some(Arc::new(exe));
        self
    }

    /// The component in file `path`, read and compiled (or deserialized) on
    /// a blocking thread: a compile takes hundreds of milliseconds, which must
    /// not stall a tokio worker.
    pub(crate) async fn load_file(
        &self,
        path: &Path,
    ) -> Result<(Arc<Component>, String), CompileError> {
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
        // SAFETY (both closures): `load_sealed` hands over only artifacts this
        // install sealed for exactly these bytes, compiled as a component by an
        // engine with this configuration (deserialize checks the engine matches).
        let (c, digest) = self.load_sealed(path, bytes, Kind::Component, |e, a| unsafe {
            Component::deserialize(e, a)
        })?;
        Ok((Arc::new(c), digest))
    }

    /// The core module in `bytes` (a pod's WASI preview 1 workload), like
    /// [`PluginEngine::load`]: compiled in the compile child, its artifact
    /// sealed in the same cache. Blocking.
    pub(crate) fn load_module(
        &self,
        path: &Path,
        bytes: &[u8],
    ) -> Result<(wasmtime::Module, String), CompileError> {
        // SAFETY: as in `load`, for a core module's artifact.
        self.load_sealed(path, bytes, Kind::Module, |e, a| unsafe {
            wasmtime::Module::deserialize(e, a)
        })
    }

    /// The cache's sealed artifact for `bytes` opened and deserialized, or
    /// `bytes` compiled now (in the child when configured), sealed and cached.
    /// A seal that fails (tampered, swapped, foreign) means a recompile.
    fn load_sealed<T>(
        &self,
        path: &Path,
        bytes: &[u8],
        kind: Kind,
        deserialize: impl Fn(&Engine, &[u8]) -> wasmtime::Result<T>,
    ) -> Result<(T, String), CompileError> {
        // Said plainly: wasmparser's own message prints both magic numbers
        // as multi-line byte arrays.
        if !bytes.starts_with(b"\0asm") {
            let head: Vec<String> = bytes.iter().take(8).map(|b| format!("{b:02x}")).collect();
            return Err(CompileError::Invalid {
                path: path.display().to_string(),
                message: format!(
                    "not WebAssembly: it does not start with the wasm magic bytes 00 61 73 6d but with {}",
                    if head.is_empty() {
                        "nothing (the file is empty)".to_string()
                    } else {
                        head.join(" ")
                    }
                ),
            });
        }
        let digest = hex::encode(Sha256::digest(bytes));
        let cached = self.cache_dir.join(kind.file_name(&digest));
        // What the seal binds: the source digest, and for modules the kind
        // (a component's artifact never opens as a module's or back).
        let sealed_for = kind.sealed_for(&digest);
        let invalid = |e: wasmtime::Error| CompileError::Invalid {
            path: path.display().to_string(),
            message: format!("{e:#}"),
        };
        if let Some(key) = &self.key
            && let Ok(sealed) = std::fs::read(&cached)
        {
            match key.open(&sealed_for, &sealed) {
                Some(artifact) => match deserialize(&self.engine, artifact) {
                    Ok(c) => return Ok((c, digest)),
                    Err(e) => {
                        tracing::warn!(file = %cached.display(), error = %e, "cached artifact unusable, recompiling")
                    }
                },
                None => {
                    tracing::warn!(file = %cached.display(), "cached artifact fails its integrity check (tampered or foreign), recompiling")
                }
            }
        }
        let file = kind.file_name(&digest);
        for seed in self.seeds.iter() {
            let seeded = seed.dir.join(&file);
            let Ok(sealed) = std::fs::read(&seeded) else {
                continue;
            };
            let Some(artifact) = seed.key.open(&sealed_for, &sealed) else {
                tracing::warn!(file = %seeded.display(), "precompiled artifact fails its integrity check (tampered or foreign), not used");
                continue;
            };
            match deserialize(&self.engine, artifact) {
                Ok(c) => {
                    self.keep(&cached, &sealed_for, artifact);
                    return Ok((c, digest));
                }
                Err(e) => {
                    tracing::warn!(file = %seeded.display(), error = %e, "precompiled artifact unusable, not used")
                }
            }
        }
        let compiled = self.precompile(path, bytes, kind)?;
        self.keep(&cached, &sealed_for, &compiled);
        let loaded = deserialize(&self.engine, &compiled).map_err(invalid)?;
        Ok((loaded, digest))
    }

    /// Seals `artifact` into the own cache as `path` (a failure only costs a
    /// compile later).
    fn keep(&self, path: &Path, sealed_for: &str, artifact: &[u8]) {
        if let Some(key) = &self.key
            && let Err(e) = self.store(path, &key.seal(sealed_for, artifact))
        {
            tracing::warn!(file = %path.display(), error = %e, "cannot cache the compiled artifact");
        }
    }

    /// `bytes` compiled for this engine: in a child when one is configured
    /// (and can be started), else here.
    fn precompile(&self, path: &Path, bytes: &[u8], kind: Kind) -> Result<Vec<u8>, CompileError> {
        let invalid = |message: String| CompileError::Invalid {
            path: path.display().to_string(),
            message,
        };
        if let Some(exe) = &self.compiler {
            // A child that failed for another reason than refusing the
            // component (it could not reserve its engine's memory, say) gets
            // one more try in a fresh child, never in the host.
            let outcome = match compile_child(exe, self.pooling, kind, bytes) {
                Ok(Err(ChildFailure::Failed(why))) => {
                    tracing::warn!(file = %path.display(), error = %why, "the compile child failed; trying once more");
                    compile_child(exe, self.pooling, kind, bytes)
                        .or_else(|e| Ok(Err(ChildFailure::Failed(format!("{why}; then: {e}")))))
                }
                other => other,
            };
            match outcome {
                Ok(Ok(compiled)) => return Ok(compiled),
                Ok(Err(ChildFailure::Refused(message) | ChildFailure::Failed(message))) => {
                    return Err(invalid(message));
                }
                // Not started (the executable moved, say): nothing hostile ran
                // yet, so compile here rather than not at all.
                Err(e) => {
                    tracing::warn!(exe = %exe.display(), error = %e, "cannot start a compile child; compiling in the host")
                }
            }
        }
        kind.precompile(&self.engine, bytes)
            .map_err(|e| invalid(format!("{e:#}")))
    }

    /// Writes `sealed` to `path` atomically: a uniquely named temp file (0600)
    /// in the same directory, renamed over it.
    fn store(&self, path: &Path, sealed: &[u8]) -> std::io::Result<()> {
        use std::io::Write;
        let mut tmp = tempfile::NamedTempFile::new_in(&self.cache_dir)?;
        tmp.write_all(sealed)?;
        tmp.as_file().sync_all()?;
        tmp.persist(path).map_err(|e| e.error)?;
        Ok(())
    }

    /// Epoch ticks for a deadline (at least one).
    pub(crate) fn ticks(deadline: Duration) -> u64 {
        (deadline.as_micros().div_ceil(EPOCH_TICK.as_micros())).max(1) as u64 + 1
    }
}

/// Why a compile child gave no artifact.
enum ChildFailure {
    /// The component is not valid: the compiler's reason.
    Refused(String),
    /// The child failed otherwise (its exit status and what it said).
    Failed(String),
}

/// Runs `exe compile-component` on `bytes`: `Err` when the child could not be
/// started or fed.
fn compile_child(
    exe: &Path,
    pooling: bool,
    kind: Kind,
    bytes: &[u8],
) -> std::io::Result<Result<Vec<u8>, ChildFailure>> {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let mut command = Command::new(exe);
    command.args([
        "compile-component",
        "--pooling",
        if pooling { "true" } else { "false" },
    ]);
    if kind == Kind::Module {
        command.arg("--module");
    }
    let mut child = command
        .env_clear()
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    // Fed from a thread: a child that writes before it has read everything
    // must not dead-lock with us.
    let mut stdin = child
        .stdin
        .take()
        .ok_or_else(|| std::io::Error::other("the child has no stdin"))?;
    let input = bytes.to_vec();
    let feeder = std::thread::spawn(move || stdin.write_all(&input));
    let out = child.wait_with_output()?;
    let fed = feeder
        .join()
        .unwrap_or_else(|_| Err(std::io::Error::other("the feeding thread panicked")));
    if out.status.success() {
        fed?;
        return Ok(Ok(out.stdout));
    }
    let said = String::from_utf8_lossy(&out.stderr).trim().to_string();
    Ok(Err(match out.status.code() {
        Some(CHILD_REFUSED) => ChildFailure::Refused(said),
        _ => ChildFailure::Failed(format!(
            "the compiler process failed ({}): {said}",
            out.status
        )),
    }))
}

/// `compile-component`'s exit status for a component it refuses.
const CHILD_REFUSED: i32 = 3;

/// The child's side of [`PluginEngine::compile_in_child`]: reads a component
/// (with `module`, a core module) on stdin and writes it compiled for the
/// plugins' engine (`pooling` as the host's) on stdout. Exits with
/// `CHILD_REFUSED` and the reason on stderr for an invalid one.
pub(crate) fn compile_component_child(pooling: bool, module: bool) -> std::process::ExitCode {
    use std::io::{Read, Write};
    let mut bytes = Vec::new();
    if let Err(e) = std::io::stdin().read_to_end(&mut bytes) {
        eprintln!("reading the component: {e}");
        return std::process::ExitCode::FAILURE;
    }
    let engine = match Engine::new(&plugin_config(pooling)) {
        Ok(e) => e,
        Err(e) => {
            eprintln!("engine: {e:#}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let kind = if module {
        Kind::Module
    } else {
        Kind::Component
    };
    match kind.precompile(&engine, &bytes) {
        Ok(compiled) => match std::io::stdout().lock().write_all(&compiled) {
            Ok(()) => std::process::ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("writing the artifact: {e}");
                std::process::ExitCode::FAILURE
            }
        },
        Err(e) => {
            eprintln!("{e:#}");
            std::process::ExitCode::from(CHILD_REFUSED as u8)
        }
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    fn imports(engine: &PluginEngine, c: &Component) -> Vec<String> {
        c.component_type()
            .imports(&engine.engine)
            .map(|(n, _)| n.to_string())
            .collect()
    }

    /// Someone who can write the cache swaps in the compiled artifact of
    /// another component: it is not deserialized, the real one is recompiled.
    #[test]
    fn a_swapped_cached_artifact_is_recompiled_not_loaded() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("cache");
        let engine = PluginEngine::new(&root).unwrap();
        for d in [&root, &engine.cache_dir] {
            let mode = std::fs::metadata(d).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o700, "{}", d.display());
        }
        let victim =
            wat::parse_str(r#"(component (import "wasmlet:plugin/log@0.1.0" (instance)))"#)
                .unwrap();
        let evil = wat::parse_str(r#"(component (import "evil:x/y" (instance)))"#).unwrap();
        let (_, vd) = engine.load(Path::new("v.wasm"), &victim).unwrap();
        let (_, ed) = engine.load(Path::new("e.wasm"), &evil).unwrap();
        let path = |d: &str| engine.cache_dir.join(format!("{d}.cwasm"));
        std::fs::copy(path(&ed), path(&vd)).unwrap();

        let (c, _) = engine.load(Path::new("v.wasm"), &victim).unwrap();
        assert_eq!(imports(&engine, &c), ["wasmlet:plugin/log@0.1.0"]);
        // Recompiled and re-cached: a fresh engine of this install loads it.
        let again = PluginEngine::new(&root).unwrap();
        let (c, _) = again.load(Path::new("v.wasm"), &victim).unwrap();
        assert_eq!(imports(&again, &c), ["wasmlet:plugin/log@0.1.0"]);
    }

    /// A fresh cache loads from a seed (`wasmlet plugin precompile`) without
    /// compiling and keeps the artifact in its own cache; a seed artifact that
    /// is swapped, or sealed under another key, is compiled instead; a seed
    /// others may write to is not read at all.
    #[test]
    fn a_seed_serves_a_fresh_cache_and_a_foreign_or_open_one_never_does() {
        let dir = tempfile::tempdir().unwrap();
        let victim =
            wat::parse_str(r#"(component (import "wasmlet:plugin/log@0.1.0" (instance)))"#)
                .unwrap();
        let evil = wat::parse_str(r#"(component (import "evil:x/y" (instance)))"#).unwrap();
        let seed_root = dir.path().join("seed");
        let seeding = PluginEngine::new(&seed_root).unwrap();
        let (_, vd) = seeding.load(Path::new("v.wasm"), &victim).unwrap();
        let (_, ed) = seeding.load(Path::new("e.wasm"), &evil).unwrap();
        let seeded = |d: &str| seeding.cache_dir.join(format!("{d}.cwasm"));

        // A hit: the artifact is the seed's (a marker in its unsealed bytes
        // would not survive a compile), and it is now in the own cache.
        let fresh = PluginEngine::new(&dir.path().join("a"))
            .unwrap()
            .with_seeds(std::slice::from_ref(&seed_root));
        assert_eq!(fresh.seeds.len(), 1);
        let (c, _) = fresh.load(Path::new("v.wasm"), &victim).unwrap();
        assert_eq!(imports(&fresh, &c), ["wasmlet:plugin/log@0.1.0"]);
        let own = fresh.cache_dir.join(format!("{vd}.cwasm"));
        let artifact = |p: &Path| std::fs::read(p).unwrap()[32..].to_vec();
        assert_eq!(
            artifact(&own),
            artifact(&seeded(&vd)),
            "resealed from the seed"
        );

        // Swapped in the seed: never loaded, the real one compiled.
        std::fs::copy(seeded(&ed), seeded(&vd)).unwrap();
        let swapped = PluginEngine::new(&dir.path().join("b"))
            .unwrap()
            .with_seeds(std::slice::from_ref(&seed_root));
        let (c, _) = swapped.load(Path::new("v.wasm"), &victim).unwrap();
        assert_eq!(imports(&swapped, &c), ["wasmlet:plugin/log@0.1.0"]);

        // The evil artifact sealed for the victim's digest under another
        // install's key, planted in the seed: its seal fails here, so the
        // victim is compiled.
        std::fs::create_dir(dir.path().join("e")).unwrap();
        let other = CacheKey::load_or_create(&dir.path().join("e")).unwrap();
        let planted = other.seal(&vd, &artifact(&seeded(&ed)));
        std::fs::write(seeded(&vd), planted).unwrap();
        let fooled = PluginEngine::new(&dir.path().join("c"))
            .unwrap()
            .with_seeds(std::slice::from_ref(&seed_root));
        let (c, _) = fooled.load(Path::new("v.wasm"), &victim).unwrap();
        assert_eq!(imports(&fooled, &c), ["wasmlet:plugin/log@0.1.0"]);

        // Open to others: refused before anything in it is read; a missing
        // seed is skipped.
        std::fs::set_permissions(&seed_root, std::fs::Permissions::from_mode(0o777)).unwrap();
        let open = PluginEngine::new(&dir.path().join("d"))
            .unwrap()
            .with_seeds(&[seed_root, dir.path().join("missing")]);
        assert!(open.seeds.is_empty());
    }

    /// The same for pods' core modules (the workloads' engine): a swapped
    /// artifact, or a component's artifact renamed to a module's, is
    /// recompiled; the module that runs is the one the bytes say.
    #[test]
    fn a_swapped_cached_module_is_recompiled_not_loaded() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("cache");
        let engine = PluginEngine::for_workloads(&root).unwrap();
        let victim = wat::parse_str(r#"(module (func (export "_start")))"#).unwrap();
        let evil = wat::parse_str(r#"(module (func (export "evil")))"#).unwrap();
        let (_, vd) = engine.load_module(Path::new("v.wasm"), &victim).unwrap();
        let (_, ed) = engine.load_module(Path::new("e.wasm"), &evil).unwrap();
        let path = |d: &str| engine.cache_dir.join(Kind::Module.file_name(d));
        assert!(path(&vd).is_file(), "the module's artifact is cached");
        let exports = |m: &wasmtime::Module| {
            m.exports()
                .map(|e| e.name().to_string())
                .collect::<Vec<_>>()
        };
        std::fs::copy(path(&ed), path(&vd)).unwrap();
        let (m, _) = engine.load_module(Path::new("v.wasm"), &victim).unwrap();
        assert_eq!(exports(&m), ["_start"]);
        // Recompiled and re-sealed: a fresh engine of this install loads it.
        let again = PluginEngine::for_workloads(&root).unwrap();
        let (m, _) = again.load_module(Path::new("v.wasm"), &victim).unwrap();
        assert_eq!(exports(&m), ["_start"]);
        // A component's sealed artifact under the module's name is refused too.
        let component = wat::parse_str(r#"(component)"#).unwrap();
        let (_, cd) = again.load(Path::new("c.wasm"), &component).unwrap();
        std::fs::copy(
            again.cache_dir.join(Kind::Component.file_name(&cd)),
            path(&vd),
        )
        .unwrap();
        let (m, _) = again.load_module(Path::new("v.wasm"), &victim).unwrap();
        assert_eq!(exports(&m), ["_start"]);
    }
}
