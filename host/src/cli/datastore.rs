//! `wasmlet datastore init`: the migration a `source = "postgres"`
//! reconciler's table needs (see [`crate::datastore`]).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

use crate::datastore::{Datastore, Table, schema};
use crate::plugin::manifest::Manifest;

#[derive(clap::Subcommand)]
pub(super) enum DatastoreCommand {
    /// Create (or update) a table, its revision trigger and its NOTIFY trigger.
    Init {
        /// The PostgreSQL connection (`postgres://USER@HOST:PORT/DB`; TLS,
        /// verify-full, CA from `?sslrootcert=FILE`; plain only with
        /// `?sslmode=disable`).
        #[arg(long, env = "WASMLET_DATASTORE_URL", hide_env_values = true)]
        url: String,
        /// The table to create.
        #[arg(long, conflicts_with = "plugin", required_unless_present = "plugin")]
        table: Option<String>,
        /// Or the plugin (NAME.toml or NAME.wasm) whose `[reconciles] table` to create.
        #[arg(long)]
        plugin: Option<PathBuf>,
    },
}

/// The table a plugin's manifest names.
fn table_of(plugin: &Path) -> Result<String> {
    let manifest = plugin.with_extension("toml");
    let m = Manifest::load(&manifest)?;
    match m.reconciles {
        Some(r) if r.is_table() => Ok(r.table.unwrap_or_default()),
        _ => bail!(
            "{}: reconciles no table ([reconciles] source = \"postgres\", table = \"...\")",
            manifest.display()
        ),
    }
}

pub(super) async fn run(command: DatastoreCommand) -> Result<()> {
    match command {
        DatastoreCommand::Init { url, table, plugin } => {
            let name = match (table, plugin) {
                (Some(t), _) => t,
                (None, Some(p)) => table_of(&p)?,
                (None, None) => bail!("--table or --plugin is required"),
            };
            let table = Table::new(&name)?;
            let store = Datastore::new(&url, 1)?;
            schema::init(&store, &table)
                .await
                .with_context(|| format!("creating table {table}"))?;
            println!(
                "datastore: table {table} ready (NOTIFY channel {})",
                table.channel()
            );
        }
    }
    Ok(())
}
