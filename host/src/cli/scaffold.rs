//! `wasmlet plugin new NAME`: a standalone plugin crate to start from (a
//! reconciler of a new custom resource, or a provider), with its manifest, a
//! native unit test against the SDK's fake host, and a README with the three
//! commands that build, check and load it.
//!
//! A Rust crate starts with the `Cargo.lock` of the workspace its SDK comes
//! from (`SDK/../../Cargo.lock`: the checkout's, or the copy `scripts/install`
//! puts beside the installed SDK). Without it cargo resolves the new crate to
//! the newest versions it can find, which are neither the versions the SDK is
//! built and tested with nor, offline, necessarily in the local cache; with it
//! cargo keeps the locked versions of what the crate uses and drops the rest.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

mod python;
mod typescript;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(super) enum ScaffoldKind {
    Reconciler,
    Provider,
}

/// The language of the plugin to start.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub(super) enum Lang {
    /// A crate on wasmlet-sdk, built for wasm32-wasip2.
    #[default]
    Rust,
    /// A Python module on the Python SDK, built with componentize-py (reconcilers only).
    Python,
    /// A TypeScript module on the TypeScript SDK, built with componentize-js (reconcilers only).
    Typescript,
}

/// The SDK a new plugin builds against: this binary's version, which the
/// scaffold pins (`=VERSION`), so a plugin and the host it loads into agree.
const SDK_VERSION: &str = env!("CARGO_PKG_VERSION");

impl Lang {
    /// Where this language's SDK lives (`guests/DIR` in a checkout and under an
    /// installed prefix) and the file that marks it.
    fn sdk(self) -> (&'static str, &'static str) {
        match self {
            Lang::Rust => ("sdk", "Cargo.toml"),
            Lang::Python => ("sdk-python", "pyproject.toml"),
            Lang::Typescript => ("sdk-js", "package.json"),
        }
    }
}

/// Where `scripts/install` puts `lang`'s SDK relative to an installed binary
/// (`PREFIX/bin/wasmlet` → `PREFIX/share/wasmlet/VERSION/guests/sdk`, `sdk-python`,
/// `sdk-js`).
fn installed_sdk(exe: &Path, lang: Lang) -> Option<PathBuf> {
    let (dir, marker) = lang.sdk();
    let prefix = exe.parent()?.parent()?;
    let sdk = prefix
        .join("share/wasmlet")
        .join(SDK_VERSION)
        .join("guests")
        .join(dir);
    sdk.join(marker).is_file().then_some(sdk)
}

/// Writes `text` to `root/file`, making the directories on the way.
fn write_under(root: &Path, file: &str, text: &str) -> Result<()> {
    let path = root.join(file);
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))
}

/// Where `lang`'s SDK comes from: a path given; else the copy installed
/// beside this binary (`scripts/install`); else this build's own checkout
/// when it still exists (a binary built from source, `cargo install --path
/// host`). Whether it was given, and its directory.
fn find_sdk(lang: Lang, explicit: Option<&Path>) -> Result<(bool, PathBuf)> {
    let (dir, marker) = lang.sdk();
    if let Some(p) = explicit {
        if !p.join(marker).is_file() {
            bail!(
                "--sdk-path {}: no {marker} there (the SDK of this language is guests/{dir} in a wasmlet checkout)",
                p.display()
            );
        }
        return Ok((true, p.canonicalize().unwrap_or_else(|_| p.to_path_buf())));
    }
    let exe = std::env::current_exe().ok();
    let installed = exe.as_deref().and_then(|e| installed_sdk(e, lang));
    let checkout = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../guests")
        .join(dir);
    let found = installed.or_else(|| checkout.join(marker).exists().then_some(checkout));
    let Some(p) = found else {
        let looked = exe
            .as_deref()
            .and_then(|e| e.parent()?.parent())
            .map(|prefix| {
                prefix
                    .join("share/wasmlet")
                    .join(SDK_VERSION)
                    .join("guests")
                    .join(dir)
            })
            .map(|p| format!("{} (installed) or ", p.display()))
            .unwrap_or_default();
        bail!(
            "no guests/{dir} of wasmlet {SDK_VERSION} found (looked in {looked}{}): install wasmlet with scripts/install PREFIX from a checkout of version {SDK_VERSION}, or pass --sdk-path DIR",
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../guests")
                .join(dir)
                .display()
        );
    };
    Ok((false, p.canonicalize().unwrap_or(p)))
}

/// The `wasmlet-sdk` dependency of a new crate: by path, pinned to this
/// binary's version unless the path was given. The line, and the SDK's directory.
fn sdk_dependency(explicit: Option<&Path>) -> Result<(String, PathBuf)> {
    let (given, p) = find_sdk(Lang::Rust, explicit)?;
    let path = format!("{:?}", p.display().to_string());
    let line = if given {
        format!("{{ path = {path} }}")
    } else {
        format!("{{ version = \"={SDK_VERSION}\", path = {path} }}")
    };
    Ok((line, p))
}

/// The most of a lock file read: a workspace's is some 100 KiB (this one's,
/// 600 packages); a file past this is not one to start a crate from.
const LOCK_CAP: u64 = 4 << 20;

/// The `Cargo.lock` of the workspace the SDK at `sdk` belongs to: the
/// checkout's (`guests/sdk/../../Cargo.lock`) or the copy `scripts/install`
/// puts at the same place beside the installed SDK. Only a lock that has the
/// SDK in it (a `wasmlet-sdk` package) is the SDK's; none is not an error
/// (an SDK elsewhere), the crate then resolves as cargo would.
fn sdk_lock(sdk: &Path) -> Option<String> {
    use std::io::Read;
    let path = sdk.join("../../Cargo.lock");
    let mut text = String::new();
    std::fs::File::open(&path)
        .ok()?
        .take(LOCK_CAP + 1)
        .read_to_string(&mut text)
        .ok()?;
    let ours = text.len() as u64 <= LOCK_CAP
        && text
            .split("[[package]]")
            .any(|p| p.trim_start().starts_with("name = \"wasmlet-sdk\"\n"));
    ours.then_some(text)
}

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

/// `GROUP/VERSION/KIND`, checked.
fn parse_crd(crd: &str) -> Result<(String, String, String)> {
    let parts: Vec<&str> = crd.split('/').collect();
    let [group, version, kind] = parts[..] else {
        bail!("--crd {crd:?}: expected GROUP/VERSION/KIND, e.g. demo.example.com/v1/Greeting");
    };
    if !group.contains('.') {
        bail!("--crd {crd:?}: the group must be a domain (e.g. demo.example.com)");
    }
    if !kind.starts_with(|c: char| c.is_ascii_uppercase())
        || !kind.chars().all(|c| c.is_ascii_alphanumeric())
    {
        bail!("--crd {crd:?}: the kind must be CamelCase letters and digits");
    }
    Ok((group.into(), version.into(), kind.into()))
}

pub(super) fn plugin_new(
    name: &str,
    kind: ScaffoldKind,
    lang: Lang,
    crd: Option<&str>,
    dir: Option<&Path>,
    sdk: Option<&Path>,
) -> Result<PathBuf> {
    if !valid_name(name) {
        bail!(
            "{name:?}: a plugin name is lowercase letters, digits and '-', starting with a letter"
        );
    }
    let root = dir
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from(name));
    if root.exists() {
        bail!("{} already exists", root.display());
    }
    if lang == Lang::Python && kind == ScaffoldKind::Provider {
        bail!(
            "--lang python --kind provider: the Python SDK writes reconcilers only (providers are Rust)"
        );
    }
    if lang == Lang::Typescript && kind == ScaffoldKind::Provider {
        bail!(
            "--lang typescript --kind provider: the TypeScript SDK writes reconcilers only (providers are Rust)"
        );
    }
    // Every project depends on its SDK on disk, as a user's package manager
    // installs it (cargo's path dependency, pip's `file://` URL, npm's `file:`
    // spec), found before anything is written.
    let (sdk, lock) = match lang {
        Lang::Rust => {
            let (line, dir) = sdk_dependency(sdk)?;
            (line, sdk_lock(&dir))
        }
        Lang::Python => (python::dependency(&find_sdk(lang, sdk)?.1)?, None),
        Lang::Typescript => (typescript::dependency(&find_sdk(lang, sdk)?.1), None),
    };
    // The README says where the lock came from when there is one.
    let lock_note = if lock.is_some() { LOCK_NOTE } else { "" };
    std::fs::create_dir_all(root.join("src"))
        .with_context(|| format!("creating {}", root.display()))?;
    let lib = name.replace('-', "_");
    let write = |file: &str, text: String| -> Result<()> {
        let path = root.join(file);
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))
    };
    match kind {
        ScaffoldKind::Reconciler => {
            let (group, version, crd_kind) =
                parse_crd(crd.unwrap_or("demo.example.com/v1/Greeting"))?;
            let plural = format!("{}s", crd_kind.to_lowercase());
            let crd_file = format!("{}.crd.yaml", crd_kind.to_lowercase());
            let fill = |t: &str| {
                t.replace("@NAME@", name)
                    .replace("@LIB@", &lib)
                    .replace("@SDK@", &sdk)
                    .replace("@GROUP@", &group)
                    .replace("@VERSION@", &version)
                    .replace("@KIND@", &crd_kind)
                    .replace("@PLURAL@", &plural)
                    .replace("@CRD_FILE@", &crd_file)
                    .replace("@LOCK_NOTE@", lock_note)
            };
            if lang == Lang::Python {
                std::fs::remove_dir(root.join("src"))
                    .with_context(|| format!("tidying {}", root.display()))?;
                let fill = |t: &str| fill(t).replace("@COMPONENTIZE_PY@", python::COMPONENTIZE_PY);
                python::write(&root, name, &crd_file, fill)?;
                return Ok(root);
            }
            if lang == Lang::Typescript {
                std::fs::remove_dir(root.join("src"))
                    .with_context(|| format!("tidying {}", root.display()))?;
                typescript::write(&root, name, &crd_file, fill)?;
                return Ok(root);
            }
            write("Cargo.toml", fill(CARGO_TOML))?;
            write(&format!("{name}.toml"), fill(RECONCILER_TOML))?;
            write("src/lib.rs", fill(RECONCILER_LIB))?;
            write("README.md", fill(RECONCILER_README))?;
        }
        ScaffoldKind::Provider => {
            let fill = |t: &str| {
                t.replace("@NAME@", name)
                    .replace("@LIB@", &lib)
                    .replace("@SDK@", &sdk)
                    .replace("@LOCK_NOTE@", lock_note)
            };
            write("Cargo.toml", fill(CARGO_TOML))?;
            write(&format!("{name}.toml"), fill(PROVIDER_TOML))?;
            write("src/lib.rs", fill(PROVIDER_LIB))?;
            write("README.md", fill(PROVIDER_README))?;
        }
    }
    if let Some(lock) = lock {
        write("Cargo.lock", lock)?;
    }
    write(".gitignore", "/target\n*.wasm\n".into())?;
    Ok(root)
}

/// The README's word on the `Cargo.lock` it starts with (a line of its own
/// after the commands, or nothing when no lock was written).
const LOCK_NOTE: &str =
    "\n`Cargo.lock` starts as the one wasmlet's SDK is built and tested with: cargo
keeps those versions (and drops the entries this crate does not use), so a
cargo cache that built wasmlet builds this crate offline; `cargo update` moves
to newer versions.
";

const CARGO_TOML: &str = r#"[package]
name = "@NAME@"
version = "0.1.0"
edition = "2024"
publish = false

# A crate of its own, not a member of an enclosing workspace.
[workspace]

[lib]
crate-type = ["cdylib"]

[dependencies]
wasmlet-sdk = @SDK@
kube = { version = "5.0.0", default-features = false, features = ["derive"] }
schemars = "1"
k8s-openapi = { version = "0.29.0", features = ["v1_33"] }
serde = { version = "1", features = ["derive"] }
serde_json = "1"

[dev-dependencies]
serde_yaml = "0.9"

[profile.release]
opt-level = "s"
lto = true
strip = true
"#;

const RECONCILER_TOML: &str = r#"# The @NAME@ plugin: reconciles @KIND@ (@GROUP@/@VERSION@) and ships its CRD.
crds = ["@CRD_FILE@"]

[plugin]
kind = "reconciler"
contract = "0.1.0"

[reconciles]
api-version = "@GROUP@/@VERSION@"
kind = "@KIND@"

# What the guest may call beyond its own object's status (none yet).
[permissions]
rules = []
http-hosts = []

[limits]
concurrency = 1
memory-mib = 32
deadline-ms = 1000
"#;

const RECONCILER_LIB: &str = r#"//! `@NAME@`: reconciles @KIND@ objects; the host watches, queues, retries
//! and writes the status this returns.

use std::sync::Arc;

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use wasmlet_sdk::prelude::*;

#[derive(CustomResource, Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[kube(group = "@GROUP@", version = "@VERSION@", kind = "@KIND@", namespaced)]
#[kube(status = "@KIND@Status")]
pub struct @KIND@Spec {
    /// Who to greet.
    pub name: String,
}

/// `message` is this reconciler's; `observedGeneration` and `conditions`
/// (`Ready`, with the failure's reason and message) are the host's.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct @KIND@Status {
    #[serde(default)]
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<wasmlet_sdk::status::StatusCondition>,
}

fn reconcile(obj: Arc<@KIND@>, _ctx: &Context) -> Result<Action, Error> {
    let message = format!("Hello, {}!", obj.spec.name);
    Ok(Action::await_change().status(@KIND@Status { message, ..Default::default() }))
}

wasmlet_sdk::reconciler!(@KIND@, reconcile);

#[cfg(test)]
mod tests {
    use super::*;
    use kube::CustomResourceExt;
    use wasmlet_sdk::testing::FakeHost;

    #[test]
    fn greets_by_name() {
        let host = FakeHost::new();
        let _guard = host.install();
        let obj = Arc::new(@KIND@::new("a", @KIND@Spec { name: "wasm".into() }));
        let action = reconcile(obj.clone(), &Context::for_object(&*obj)).unwrap();
        assert_eq!(
            action.status_json(),
            Some(&serde_json::json!({"message": "Hello, wasm!"}))
        );
    }

    /// The shipped CRD comes from the types above: written on the first run
    /// and with `UPDATE_CRDS=1`, compared otherwise.
    #[test]
    fn shipped_crd_matches_the_types() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/@CRD_FILE@");
        let generated = serde_yaml::to_string(&@KIND@::crd()).unwrap();
        if std::env::var_os("UPDATE_CRDS").is_some() || !std::path::Path::new(path).exists() {
            std::fs::write(path, &generated).unwrap();
        }
        assert_eq!(std::fs::read_to_string(path).unwrap(), generated, "rerun with UPDATE_CRDS=1");
    }
}
"#;

const RECONCILER_README: &str = r#"# @NAME@

A wasmlet reconciler of `@KIND@` (`@GROUP@/@VERSION@`), made by `wasmlet plugin new`.
Edit `src/lib.rs` (the types are the CRD; `reconcile` returns the status).

```sh
cargo test                                    # unit tests on the SDK's fake host; writes @CRD_FILE@
cargo build --release --target wasm32-wasip2 && cp target/wasm32-wasip2/release/@LIB@.wasm @NAME@.wasm
wasmlet plugin check @NAME@.wasm && cp @NAME@.wasm @NAME@.toml @CRD_FILE@ PLUGIN_DIR/
```

(`rustup target add wasm32-wasip2` once.) The host loads the plugin from
`PLUGIN_DIR` (`wasmlet up --plugins PLUGIN_DIR`), applies the CRD, and from then
on `kubectl apply` of a @KIND@ gets its status. `UPDATE_CRDS=1 cargo test`
refreshes the CRD after changing the types; `wasmlet plugin rbac @NAME@.toml`
prints the RBAC it needs on a real cluster.
@LOCK_NOTE@"#;

const PROVIDER_TOML: &str = r#"# The @NAME@ provider: runs the pods of a wasmlet node (`--provider @NAME@`).

[plugin]
kind = "provider"
contract = "0.1.0"

[permissions]
rules = []
http-hosts = []

[limits]
concurrency = 4
memory-mib = 32
deadline-ms = 2000
"#;

const PROVIDER_LIB: &str = r#"//! `@NAME@`: a provider whose pods go Registered -> Running at once and stay
//! there until deleted; a starting point for a real pod lifecycle (see
//! wasi-runner for one that runs WASI workloads).

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use wasmlet_sdk::provider::{Pod, PodState, State, StateError, Transition, WaitOn, WakeEvent};

/// Data kept for each pod across its states.
#[derive(Serialize, Deserialize)]
pub struct PodData {
    pub started: bool,
}

impl PodState for PodData {
    fn new(_pod: &Pod) -> Result<Self, StateError> {
        Ok(PodData { started: false })
    }
}

#[derive(Default, Serialize, Deserialize)]
pub struct Registered;
#[derive(Serialize, Deserialize)]
pub struct Running;
#[derive(Serialize, Deserialize)]
pub struct Terminated;

impl State<PodData> for Registered {
    const NAME: &'static str = "Registered";
    fn next(self, _: &Pod, data: &mut PodData, _: Option<&WakeEvent>) -> Result<Transition<PodData>, StateError> {
        data.started = true;
        Ok(Transition::next(self, Running))
    }
}

impl State<PodData> for Running {
    const NAME: &'static str = "Running";
    fn next(self, _: &Pod, _: &mut PodData, _: Option<&WakeEvent>) -> Result<Transition<PodData>, StateError> {
        Ok(Transition::wait(self, [WaitOn::PodChanged]))
    }
    fn status(&self, _: &Pod, _: &PodData) -> Value {
        json!({"phase": "Running"})
    }
}

impl State<PodData> for Terminated {
    const NAME: &'static str = "Terminated";
    fn next(self, _: &Pod, _: &mut PodData, _: Option<&WakeEvent>) -> Result<Transition<PodData>, StateError> {
        Ok(Transition::wait(self, []))
    }
}

wasmlet_sdk::edges! {
    PodData {
        Registered => Running,
        Running => [Terminated],
    }
}
wasmlet_sdk::provider!(PodData, initial = Registered, on_delete = Terminated, error = Terminated);
"#;

const PROVIDER_README: &str = r#"# @NAME@

A wasmlet provider (a pod lifecycle as a state machine), made by `wasmlet plugin new`.

```sh
cargo test
cargo build --release --target wasm32-wasip2 && cp target/wasm32-wasip2/release/@LIB@.wasm @NAME@.wasm
wasmlet plugin check @NAME@.wasm && wasmlet plugin graph @NAME@.wasm && cp @NAME@.wasm @NAME@.toml PLUGIN_DIR/
```

Run a node with it: `wasmlet up --plugins PLUGIN_DIR --provider @NAME@`.
@LOCK_NOTE@"#;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_kinds_are_checked() {
        assert!(valid_name("hello-widgets"));
        assert!(!valid_name("Hello"));
        assert!(!valid_name("../x"));
        assert!(parse_crd("demo.example.com/v1/Greeting").is_ok());
        assert!(parse_crd("demo/v1/Greeting").is_err());
        assert!(parse_crd("demo.example.com/v1/greeting").is_err());
        assert!(parse_crd("demo.example.com/Greeting").is_err());
    }

    #[test]
    fn an_installed_binary_finds_the_sdk_under_its_prefix() {
        let prefix = tempfile::tempdir().unwrap();
        let exe = prefix.path().join("bin/wasmlet");
        assert_eq!(installed_sdk(&exe, Lang::Rust), None);
        let sdk = prefix
            .path()
            .join(format!("share/wasmlet/{SDK_VERSION}/guests/sdk"));
        std::fs::create_dir_all(&sdk).unwrap();
        std::fs::write(sdk.join("Cargo.toml"), "[package]\n").unwrap();
        assert_eq!(installed_sdk(&exe, Lang::Rust), Some(sdk));
        // Each language's SDK by its own marker.
        assert_eq!(installed_sdk(&exe, Lang::Python), None);
        let py = prefix
            .path()
            .join(format!("share/wasmlet/{SDK_VERSION}/guests/sdk-python"));
        std::fs::create_dir_all(&py).unwrap();
        std::fs::write(py.join("pyproject.toml"), "[project]\n").unwrap();
        assert_eq!(installed_sdk(&exe, Lang::Python), Some(py));
        // Another version's copy is not this binary's SDK.
        let other = prefix.path().join("other/bin/wasmlet");
        let old = prefix.path().join("other/share/wasmlet/0.0.1/guests/sdk");
        std::fs::create_dir_all(&old).unwrap();
        std::fs::write(old.join("Cargo.toml"), "[package]\n").unwrap();
        assert_eq!(installed_sdk(&other, Lang::Rust), None);
    }

    #[test]
    fn the_lock_is_the_sdks_workspaces_only() {
        let tmp = tempfile::tempdir().unwrap();
        let sdk = tmp.path().join("guests/sdk");
        std::fs::create_dir_all(&sdk).unwrap();
        assert_eq!(sdk_lock(&sdk), None, "no lock");
        let other = "version = 4\n\n[[package]]\nname = \"serde\"\nversion = \"1.0.0\"\n";
        std::fs::write(tmp.path().join("Cargo.lock"), other).unwrap();
        assert_eq!(sdk_lock(&sdk), None, "another workspace's lock");
        let ours =
            format!("{other}\n[[package]]\nname = \"wasmlet-sdk\"\nversion = \"{SDK_VERSION}\"\n");
        std::fs::write(tmp.path().join("Cargo.lock"), &ours).unwrap();
        assert_eq!(sdk_lock(&sdk), Some(ours));
    }

    #[test]
    fn writes_a_crate_with_manifest_and_readme() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("hello");
        plugin_new(
            "hello",
            ScaffoldKind::Reconciler,
            Lang::Rust,
            Some("demo.example.com/v1/Greeting"),
            Some(&root),
            None,
        )
        .unwrap();
        let manifest = std::fs::read_to_string(root.join("hello.toml")).unwrap();
        assert!(manifest.contains("api-version = \"demo.example.com/v1\""));
        assert!(manifest.contains("crds = [\"greeting.crd.yaml\"]"));
        let lib = std::fs::read_to_string(root.join("src/lib.rs")).unwrap();
        assert!(lib.contains("pub struct GreetingSpec"));
        // From a checkout: its SDK, pinned to this version.
        let cargo = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
        let pin = format!("wasmlet-sdk = {{ version = \"={SDK_VERSION}\", path = ");
        assert!(cargo.contains(&pin), "{cargo}");
        assert!(!lib.contains('@'), "a placeholder left: {lib}");
        // And the checkout's lock, which the README mentions.
        let lock = std::fs::read_to_string(root.join("Cargo.lock")).unwrap();
        let ours =
            std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../Cargo.lock"))
                .unwrap();
        assert_eq!(lock, ours);
        let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
        assert!(readme.contains("`Cargo.lock` starts as"), "{readme}");
        assert!(!readme.contains("@LOCK_NOTE@"), "{readme}");
        assert!(
            plugin_new(
                "hello",
                ScaffoldKind::Reconciler,
                Lang::Rust,
                None,
                Some(&root),
                None
            )
            .is_err(),
            "an existing directory is not overwritten"
        );
    }

    #[test]
    fn python_writes_a_project_with_the_sdk_and_the_contract() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("hello-py");
        plugin_new(
            "hello-py",
            ScaffoldKind::Reconciler,
            Lang::Python,
            Some("demo.example.com/v1/Greeting"),
            Some(&root),
            None,
        )
        .unwrap();
        for f in [
            "app.py",
            "hello-py.toml",
            "greeting.crd.yaml",
            "tests/test_app.py",
            "pyproject.toml",
            "build.sh",
            "README.md",
            "wit/worlds.wit",
        ] {
            let text = std::fs::read_to_string(root.join(f)).unwrap_or_else(|e| panic!("{f}: {e}"));
            assert!(
                !text.contains("@NAME@") && !text.contains("@KIND@"),
                "{f}: a placeholder left"
            );
        }
        assert!(!root.join("src").exists());
        // The SDK is a dependency, the checkout's, as pip takes a local one.
        assert!(!root.join("wasmlet").exists());
        let sdk = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../guests/sdk-python")
            .canonicalize()
            .unwrap();
        let pyproject = std::fs::read_to_string(root.join("pyproject.toml")).unwrap();
        let wanted = format!(
            "dependencies = [\"wasmlet-sdk @ file://{}\"]",
            sdk.display()
        );
        assert!(pyproject.contains(&wanted), "{pyproject}");
        assert!(!pyproject.contains("@SDK@"), "{pyproject}");
        let crd = std::fs::read_to_string(root.join("greeting.crd.yaml")).unwrap();
        assert!(crd.contains("name: greetings.demo.example.com"), "{crd}");
        assert!(
            plugin_new(
                "p",
                ScaffoldKind::Provider,
                Lang::Python,
                None,
                Some(&tmp.path().join("p")),
                None
            )
            .unwrap_err()
            .to_string()
            .contains("reconcilers only")
        );
    }

    #[test]
    fn typescript_writes_a_project_with_the_sdk_the_contract_and_pinned_tools() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("hello-ts");
        plugin_new(
            "hello-ts",
            ScaffoldKind::Reconciler,
            Lang::Typescript,
            Some("demo.example.com/v1/Greeting"),
            Some(&root),
            None,
        )
        .unwrap();
        for f in [
            "app.ts",
            "hello-ts.toml",
            "greeting.crd.yaml",
            "tests/app.test.ts",
            "package.json",
            "tsconfig.json",
            "build.sh",
            "test.sh",
            "README.md",
            "wit/worlds.wit",
        ] {
            let text = std::fs::read_to_string(root.join(f)).unwrap_or_else(|e| panic!("{f}: {e}"));
            assert!(
                !text.contains("@NAME@") && !text.contains("@KIND@") && !text.contains("@TOOLS@"),
                "{f}: a placeholder left"
            );
        }
        assert!(!root.join("src").exists());
        let package: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(root.join("package.json")).unwrap())
                .unwrap();
        assert_eq!(
            package["devDependencies"]["@bytecodealliance/componentize-js"],
            "0.23.0"
        );
        assert_eq!(package["name"], "hello-ts");
        // The SDK is a dependency, the checkout's, as npm takes a local one.
        assert!(!root.join("wasmlet").exists());
        let sdk = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../guests/sdk-js")
            .canonicalize()
            .unwrap();
        assert_eq!(
            package["dependencies"]["wasmlet"],
            format!("file:{}", sdk.display())
        );
        let test = std::fs::read_to_string(root.join("tests/app.test.ts")).unwrap();
        assert!(
            test.contains(r#"apiVersion: "demo.example.com/v1""#),
            "{test}"
        );
        assert!(
            plugin_new(
                "p",
                ScaffoldKind::Provider,
                Lang::Typescript,
                None,
                Some(&tmp.path().join("p")),
                None
            )
            .unwrap_err()
            .to_string()
            .contains("reconcilers only")
        );
    }
}
