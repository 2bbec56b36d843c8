//! Built-in plugins: the controllers a Kubernetes control plane ships
//! (scheduler, ...), the default node provider, and the StatefulsetRollout
//! operator (`kubectl get sroll`, guests/sroll-reconciler/README.md), as
//! ordinary wasm plugins. A built-in's manifest names its CRD files: they are
//! installed beside it and the host applies them when the plugin loads.
//!
//! They are not embedded in the binary (the host build must not need a wasm
//! toolchain, and embedding would recompile the host whenever a guest
//! changes). `scripts/build-guests` puts them next to the binary; on every
//! start `wasmlet up` copies the ones it finds into `DATA_DIR/plugins/builtin/`
//! (only files whose content changed) and loads them from there, after the
//! user's plugin directory: a user's plugin of the same name replaces the
//! built-in one. Where "next to the binary" is, first found wins:
//! `--builtin-source DIR` (or `WASMLET_BUILTIN_PLUGINS`),
//! `EXE_DIR/wasmlet-plugins/`, `EXE_DIR/../lib/wasmlet/plugins/`, and
//! `EXE_DIR/../plugins/` (cargo's `target/debug/wasmlet` beside
//! `target/plugins/`, where `scripts/build-guests` writes).
//!
//! `wasmlet up` loads them unless `--no-builtins`; `wasmlet run` only with
//! `--builtins` (a real cluster has kube-scheduler and kube-controller-manager).
//! `--builtin-plugins` picks which, as kube-controller-manager's
//! `--controllers`: `*` (the default) for all, `NAME` to add one, `-NAME` to
//! leave one out, comma-separated (`*,-statefulset-controller`).

use std::path::{Path, PathBuf};

use crate::plugin::Manifest;

/// The built-in provider, the node's default `--provider`.
pub(crate) const DEFAULT_PROVIDER: &str = "wasi-runner";

/// The plugins that are built in, by plugin name (`NAME.wasm` + `NAME.toml`).
/// Other names in the source directory (test guests) are never installed.
pub(crate) const BUILTIN: &[&str] = &[
    "scheduler",
    "wasi-runner",
    "statefulset-controller",
    "disruption-controller",
    "replicaset-controller",
    "deployment-controller",
    // Needs the StatefulSet and disruption controllers (it evicts within a
    // PodDisruptionBudget); on a real cluster kube-controller-manager's.
    "sroll-reconciler",
    // batch/v1 Jobs and CronJobs (kube-controller-manager's job and
    // cronjob controllers).
    "job-controller",
    "cronjob-controller",
    // The ReplicaSet controller's code run on ReplicationControllers, as
    // kube-controller-manager's `replicationcontroller` controller.
    "replicationcontroller-controller",
    // One pod per eligible node (kube-controller-manager's `daemonset`).
    "daemonset-controller",
];

#[derive(clap::Args, Clone, Default)]
pub(crate) struct BuiltinArgs {
    /// `up --no-builtins` (a flag of `up` only).
    #[arg(skip)]
    pub(crate) no_builtins: bool,
    /// `run --builtins` (a flag of `run` only).
    #[arg(skip)]
    pub(crate) builtins: bool,
    /// Where the built-in plugins are installed from (default: next to the binary).
    #[arg(long, env = "WASMLET_BUILTIN_PLUGINS")]
    pub(crate) builtin_source: Option<PathBuf>,
    /// Which built-in plugins: `*` for all, `NAME` to add one, `-NAME` to
    /// leave one out (as kube-controller-manager's `--controllers`); e.g.
    /// `*,-sroll-reconciler` for all but the StatefulsetRollout operator.
    /// Built-ins: scheduler, wasi-runner, statefulset-controller,
    /// disruption-controller, replicaset-controller, deployment-controller,
    /// sroll-reconciler, job-controller, cronjob-controller,
    /// replicationcontroller-controller, daemonset-controller.
    #[arg(long, value_delimiter = ',', default_value = "*")]
    pub(crate) builtin_plugins: Vec<String>,
    /// Set by the command, not a flag: whether built-ins load without `--builtins`.
    #[arg(skip)]
    pub(crate) on_by_default: bool,
}

impl BuiltinArgs {
    pub(crate) fn enabled(&self) -> bool {
        if self.on_by_default {
            !self.no_builtins
        } else {
            self.builtins
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum BuiltinError {
    #[error(
        "built-in plugins: no directory holding them (looked in {looked}); install them beside the binary with scripts/install PREFIX, or build them with scripts/build-guests DIR and pass --builtin-source DIR, or run with --no-builtins"
    )]
    NoSource { looked: String },
    #[error("--builtin-plugins: unknown built-in plugin {name:?} (known: {known})")]
    Unknown { name: String, known: String },
    #[error("built-in plugin {name}: {path}: {source}")]
    Io {
        name: String,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("built-in plugin {name}: {source}")]
    Manifest {
        name: String,
        source: crate::plugin::manifest::ManifestError,
    },
}

/// The built-in plugins `--builtin-plugins` selects, in [`BUILTIN`] order.
pub(crate) fn selected(spec: &[String]) -> Result<Vec<&'static str>, BuiltinError> {
    let known = |n: &str| {
        BUILTIN
            .iter()
            .copied()
            .find(|b| *b == n)
            .ok_or_else(|| BuiltinError::Unknown {
                name: n.to_string(),
                known: BUILTIN.join(", "),
            })
    };
    // No list at all (a default-built `BuiltinArgs`) is `*`.
    let mut all = spec.is_empty();
    let (mut on, mut off) = (vec![], vec![]);
    for item in spec.iter().map(|s| s.trim()).filter(|s| !s.is_empty()) {
        match item {
            "*" => all = true,
            _ => match item.strip_prefix('-') {
                Some(n) => off.push(known(n)?),
                None => on.push(known(item)?),
            },
        }
    }
    Ok(BUILTIN
        .iter()
        .copied()
        .filter(|b| (all || on.contains(b)) && !off.contains(b))
        .collect())
}

/// The directories `--builtin-source` falls back to, in order.
fn candidates(explicit: Option<&Path>) -> Vec<PathBuf> {
    if let Some(p) = explicit {
        return vec![p.to_path_buf()];
    }
    let Some(exe_dir) = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(Path::to_path_buf))
    else {
        return vec![];
    };
    vec![
        exe_dir.join("wasmlet-plugins"),
        exe_dir.join("../lib/wasmlet/plugins"),
        exe_dir.join("../plugins"),
    ]
}

/// The first candidate holding at least one built-in plugin.
pub(crate) fn source_dir(explicit: Option<&Path>) -> Result<PathBuf, BuiltinError> {
    let dirs = candidates(explicit);
    dirs.iter()
        .find(|d| BUILTIN.iter().any(|n| plugin_files_exist(d, n)))
        .cloned()
        .ok_or_else(|| BuiltinError::NoSource {
            looked: dirs
                .iter()
                .map(|d| d.display().to_string())
                .collect::<Vec<_>>()
                .join(", "),
        })
}

fn plugin_files_exist(dir: &Path, name: &str) -> bool {
    dir.join(format!("{name}.wasm")).is_file() && dir.join(format!("{name}.toml")).is_file()
}

/// Copies the built-in plugins of `source` (with the CRD files their manifests
/// name) into `dest`, each file only when its content differs, through a
/// dot-file and a rename (a watching host never sees half a file); removes
/// built-ins `source` no longer has. Returns the names installed.
pub(crate) fn install(
    source: &Path,
    dest: &Path,
    selected: &[&str],
) -> Result<Vec<String>, BuiltinError> {
    let io = |name: &str, path: &Path| {
        let (name, path) = (name.to_string(), path.to_path_buf());
        move |source| BuiltinError::Io { name, path, source }
    };
    std::fs::create_dir_all(dest).map_err(io("*", dest))?;
    let mut installed = vec![];
    for name in BUILTIN {
        if !selected.contains(name) || !plugin_files_exist(source, name) {
            for ext in ["wasm", "toml"] {
                let stale = dest.join(format!("{name}.{ext}"));
                if stale.exists() {
                    std::fs::remove_file(&stale).map_err(io(name, &stale))?;
                }
            }
            continue;
        }
        let toml = source.join(format!("{name}.toml"));
        let manifest = Manifest::load(&toml).map_err(|source| BuiltinError::Manifest {
            name: name.to_string(),
            source,
        })?;
        let mut files: Vec<PathBuf> = manifest.crds.clone();
        // The manifest before the module: the host loads a pair only when both exist.
        files.push(toml);
        files.push(source.join(format!("{name}.wasm")));
        for from in files {
            let Some(file) = from.file_name() else {
                continue;
            };
            let to = dest.join(file);
            let content = std::fs::read(&from).map_err(io(name, &from))?;
            if std::fs::read(&to).is_ok_and(|old| old == content) {
                continue;
            }
            let tmp = dest.join(format!(".{}.tmp", file.to_string_lossy()));
            std::fs::write(&tmp, &content).map_err(io(name, &tmp))?;
            std::fs::rename(&tmp, &to).map_err(io(name, &to))?;
        }
        installed.push(name.to_string());
    }
    Ok(installed)
}

/// The plugin directory and the built-in directory a host loads: `plugins`
/// (the user's `--plugins`) first; with built-ins on, `DATA_DIR/plugins/builtin`
/// behind it, or alone when there is no `--plugins`; without the built-in
/// provider when the node runs another (`provider`).
pub(crate) fn plugin_dirs(
    args: &BuiltinArgs,
    data_dir: &Path,
    plugins: Option<&Path>,
    provider: Option<&str>,
) -> Result<(Option<PathBuf>, Option<PathBuf>), BuiltinError> {
    if !args.enabled() {
        return Ok((plugins.map(Path::to_path_buf), None));
    }
    let mut selected = selected(&args.builtin_plugins)?;
    // A node with a provider of its own does not get the built-in one
    // beside it: the plugin set refuses a second provider.
    if provider.is_some_and(|p| p != DEFAULT_PROVIDER) {
        selected.retain(|n| *n != DEFAULT_PROVIDER);
    }
    let source = source_dir(args.builtin_source.as_deref())?;
    let dest = data_dir.join("plugins").join("builtin");
    let names = install(&source, &dest, &selected)?;
    tracing::info!(from = %source.display(), to = %dest.display(), plugins = ?names, "built-in plugins installed");
    Ok(match plugins {
        Some(p) => (Some(p.to_path_buf()), Some(dest)),
        None => (Some(dest), None),
    })
}

/// The seed cache of precompiled components beside the built-ins' source
/// (`wasmlet plugin precompile SOURCE`), when built-ins are on and it exists.
pub(crate) fn seed_cache(args: &BuiltinArgs) -> Option<PathBuf> {
    if !args.enabled() {
        return None;
    }
    let seed = source_dir(args.builtin_source.as_deref())
        .ok()?
        .join(crate::plugin::engine::SEED_DIR);
    seed.is_dir().then_some(seed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plugin(dir: &Path, name: &str, wasm: &[u8]) {
        std::fs::write(dir.join(format!("{name}.wasm")), wasm).unwrap();
        std::fs::write(
            dir.join(format!("{name}.toml")),
            "[plugin]\nkind = \"provider\"\ncontract = \"0.1.0\"\n",
        )
        .unwrap();
    }

    #[test]
    fn installs_only_builtins_and_follows_the_source() {
        let src = tempfile::tempdir().unwrap();
        let data = tempfile::tempdir().unwrap();
        plugin(src.path(), "wasi-runner", b"v1");
        plugin(src.path(), "wasmlet-test-trap", b"x");
        let args = BuiltinArgs {
            builtin_source: Some(src.path().to_path_buf()),
            on_by_default: true,
            ..Default::default()
        };
        let (dir, behind) = plugin_dirs(&args, data.path(), None, None).unwrap();
        let dest = data.path().join("plugins/builtin");
        assert_eq!(dir.as_deref(), Some(dest.as_path()));
        assert_eq!(behind, None);
        assert_eq!(std::fs::read(dest.join("wasi-runner.wasm")).unwrap(), b"v1");
        assert!(!dest.join("wasmlet-test-trap.wasm").exists());

        // A newer binary's plugins replace the installed ones.
        plugin(src.path(), "wasi-runner", b"v2");
        let user = data.path().join("mine");
        let (dir, behind) = plugin_dirs(&args, data.path(), Some(&user), None).unwrap();
        assert_eq!(dir, Some(user));
        assert_eq!(behind.as_deref(), Some(dest.as_path()));
        assert_eq!(std::fs::read(dest.join("wasi-runner.wasm")).unwrap(), b"v2");
    }

    #[test]
    fn builtin_plugins_selects_as_controllers_does() {
        let pick = |s: &str| selected(&s.split(',').map(String::from).collect::<Vec<_>>());
        assert_eq!(pick("*").unwrap(), BUILTIN);
        assert_eq!(
            pick("scheduler,wasi-runner").unwrap(),
            ["scheduler", "wasi-runner"]
        );
        assert!(!pick("*,-scheduler").unwrap().contains(&"scheduler"));
        let err = pick("schedular").unwrap_err().to_string();
        assert!(
            err.contains("unknown built-in plugin \"schedular\""),
            "{err}"
        );

        // An unselected built-in is not installed (and an installed one goes).
        let src = tempfile::tempdir().unwrap();
        let dest = tempfile::tempdir().unwrap();
        plugin(src.path(), "scheduler", b"s");
        plugin(src.path(), "wasi-runner", b"w");
        install(src.path(), dest.path(), &["scheduler", "wasi-runner"]).unwrap();
        install(src.path(), dest.path(), &["wasi-runner"]).unwrap();
        assert!(!dest.path().join("scheduler.wasm").exists());
        assert!(dest.path().join("wasi-runner.wasm").exists());
    }

    #[test]
    fn the_help_names_every_builtin() {
        use clap::Args;
        let cmd = BuiltinArgs::augment_args(clap::Command::new("up"));
        let arg = cmd
            .get_arguments()
            .find(|a| a.get_id() == "builtin_plugins")
            .unwrap();
        let help = arg.get_long_help().or(arg.get_help()).unwrap().to_string();
        for name in BUILTIN {
            assert!(
                help.contains(name),
                "--builtin-plugins help lacks {name}: {help}"
            );
        }
    }

    #[test]
    fn off_unless_asked_where_off_by_default() {
        let data = tempfile::tempdir().unwrap();
        let run = BuiltinArgs::default();
        let (dir, behind) = plugin_dirs(&run, data.path(), None, None).unwrap();
        assert_eq!((dir, behind), (None, None));
        assert!(!data.path().join("plugins").exists());
        let up_off = BuiltinArgs {
            no_builtins: true,
            on_by_default: true,
            ..Default::default()
        };
        assert!(!up_off.enabled());
        let run_on = BuiltinArgs {
            builtins: true,
            ..Default::default()
        };
        assert!(run_on.enabled());
    }

    #[test]
    fn a_missing_source_names_where_it_looked() {
        let data = tempfile::tempdir().unwrap();
        let args = BuiltinArgs {
            builtin_source: Some(data.path().join("nowhere")),
            on_by_default: true,
            ..Default::default()
        };
        let e = plugin_dirs(&args, data.path(), None, None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("nowhere") && e.contains("--no-builtins"), "{e}");
    }
}
