//! `wasmlet plugin push` / `wasmlet plugin pull`: plugins to and from OCI
//! registries (see [`crate::plugin::distribution`]); `wasmlet module push`:
//! a workload module as a pod's image (see [`module`]). The
//! registry flags are the same for all three.

use std::io::Read;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

mod module;

use crate::oci::{PullSecret, docker_config_credentials};
use crate::plugin::distribution::{self, Artifact, RegistryOptions};

#[derive(clap::Args, Clone, Default)]
pub(super) struct RegistryArgs {
    /// Talk plain HTTP to the registry (a local one).
    #[arg(long, visible_alias = "plain-http")]
    pub(crate) insecure: bool,
    /// Registry user (default: the docker config file's credentials, else anonymous).
    #[arg(long, requires = "password_stdin")]
    pub(crate) username: Option<String>,
    /// Read the registry password from standard input.
    #[arg(long, requires = "username")]
    pub(crate) password_stdin: bool,
}

impl RegistryArgs {
    fn options(&self, reference: &str) -> Result<RegistryOptions> {
        let credentials = match &self.username {
            Some(user) => {
                let mut password = String::new();
                std::io::stdin()
                    .read_to_string(&mut password)
                    .context("reading the password from standard input")?;
                let registry = reference
                    .strip_prefix("oci://")
                    .unwrap_or(reference)
                    .split('/')
                    .next()
                    .unwrap_or_default()
                    .to_string();
                vec![PullSecret {
                    registry,
                    username: user.clone(),
                    password: password.trim_end_matches(['\r', '\n']).to_string(),
                }]
            }
            None => docker_config_credentials().map_err(anyhow::Error::msg)?,
        };
        Ok(RegistryOptions {
            insecure: self.insecure,
            credentials,
        })
    }
}

pub(super) async fn plugin_push(path: &Path, reference: &str, args: &RegistryArgs) -> Result<()> {
    let (name, artifact) = Artifact::read(path)?;
    let digest = distribution::push(&artifact, reference, &args.options(reference)?).await?;
    println!("pushed plugin {name} to {reference}@{digest}");
    Ok(())
}

pub(super) async fn module_push(path: &Path, reference: &str, args: &RegistryArgs) -> Result<()> {
    let (kind, digest) = module::push(path, reference, &args.options(reference)?).await?;
    println!(
        "pushed {} ({}) to {reference}@{digest}",
        path.display(),
        kind.os()
    );
    Ok(())
}

pub(super) async fn plugin_pull(reference: &str, dir: &PathBuf, args: &RegistryArgs) -> Result<()> {
    let (digest, artifact) = distribution::pull(reference, &args.options(reference)?).await?;
    let name = &distribution::name_of(reference);
    if name.is_empty() {
        bail!("{reference}: no repository name to name the plugin after");
    }
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    artifact.write(dir, name)?;
    println!(
        "pulled {reference}@{digest} into {}",
        dir.join(format!("{name}.wasm")).display()
    );
    Ok(())
}
