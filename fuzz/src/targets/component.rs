//! Component loading: wasm-smith components, and wasm-smith core modules
//! wrapped as components, through the plugin engine's load (validation,
//! compile, the sealed cache and deserialization), the first step of
//! `Loaded::load`. Any outcome but a value or an error is a bug: a panic
//! here would take the host down with the plugin.

use std::path::Path;
use std::sync::OnceLock;

use arbitrary::Unstructured;
use wasm_encoder::{ComponentSectionId, RawSection};
use wasmlet::internals::PluginEngine;
use wasmlet::internals::PluginKind;
use wasmlet::internals::check_contract;

fn engine() -> &'static PluginEngine {
    static ENGINE: OnceLock<(PluginEngine, tempfile::TempDir)> = OnceLock::new();
    let (engine, _) = ENGINE.get_or_init(|| {
        let dir = tempfile::tempdir().expect("a temp dir");
        let engine = PluginEngine::new(&dir.path().join("cache")).expect("the engine builds");
        (engine, dir)
    });
    engine
}

/// A small wasm-smith configuration: compile time grows with size, and the
/// bugs live in structure, not volume.
fn config(u: &mut Unstructured) -> arbitrary::Result<wasm_smith::Config> {
    let mut c: wasm_smith::Config = u.arbitrary()?;
    c.max_funcs = c.max_funcs.min(8);
    c.max_instructions = c.max_instructions.min(64);
    c.max_types = c.max_types.min(16);
    c.max_imports = c.max_imports.min(8);
    c.max_exports = c.max_exports.min(8);
    c.max_memories = c.max_memories.min(2);
    c.max_tables = c.max_tables.min(2);
    c.max_globals = c.max_globals.min(8);
    c.max_elements = c.max_elements.min(8);
    c.max_data_segments = c.max_data_segments.min(8);
    c.max_components = c.max_components.min(2);
    c.max_instances = c.max_instances.min(4);
    c.max_modules = c.max_modules.min(2);
    c.max_type_size = c.max_type_size.min(100);
    Ok(c)
}

/// A component that embeds `module` as a core module (not instantiated, so
/// its imports need no arguments; wasmtime still validates and compiles it).
fn wrap(module: &[u8]) -> Vec<u8> {
    let mut c = wasm_encoder::Component::new();
    c.section(&RawSection {
        id: ComponentSectionId::CoreModule.into(),
        data: module,
    });
    c.finish()
}

fn bytes(data: &[u8]) -> Option<Vec<u8>> {
    let mut u = Unstructured::new(data);
    let mode: u8 = u.arbitrary().ok()?;
    let config = config(&mut u).ok()?;
    let mut wasm = if mode.is_multiple_of(2) {
        wasm_smith::Component::new(config, &mut u).ok()?.to_bytes()
    } else {
        wrap(&wasm_smith::Module::new(config, &mut u).ok()?.to_bytes())
    };
    // Sometimes corrupt a few bytes: the decoder's error paths.
    if mode % 8 == 1 {
        for _ in 0..u.int_in_range(1..=4u8).ok()? {
            let i = u.choose_index(wasm.len()).ok()?;
            wasm[i] = u.arbitrary().ok()?;
        }
    }
    Some(wasm)
}

pub fn component(data: &[u8]) {
    let Some(wasm) = bytes(data) else {
        return;
    };
    let engine = engine();
    let path = Path::new("fuzz.wasm");
    if let Ok((component, _)) = engine.load(path, &wasm) {
        for kind in [PluginKind::Reconciler, PluginKind::Provider] {
            assert!(
                check_contract(engine, &component, path, kind).is_err(),
                "a random component passed the contract check"
            );
        }
    }
}
