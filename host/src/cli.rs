//! The `wasmlet` command line.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::apiserver::{ApiServer, Config};

#[derive(Parser)]
#[command(name = "wasmlet", version, about = "Kubernetes controllers and node agents as WebAssembly components")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::Args, Clone)]
struct ServerArgs {
    /// Directory for the database, certificates and kubeconfig.
    #[arg(long, default_value = ".data", env = "WASMLET_DATA_DIR")]
    data_dir: PathBuf,
    /// Address of the API server (port 0 picks a free port).
    #[arg(long, default_value = "127.0.0.1")]
    address: std::net::IpAddr,
    /// Port of the API server.
    #[arg(long, default_value_t = 6443)]
    port: u16,
    /// Revisions of watch history kept; older resourceVersions get 410 Gone.
    #[arg(long, default_value_t = 10_000)]
    watch_history: usize,
}

#[derive(Subcommand)]
enum Command {
    /// Run the embedded control plane with the host (the main command).
    Up(ServerArgs),
    /// Run only the embedded API server.
    Apiserver(ServerArgs),
}

async fn serve(args: ServerArgs) -> anyhow::Result<()> {
    let server = ApiServer::start(Config {
        data_dir: args.data_dir.clone(),
        listen: SocketAddr::new(args.address, args.port),
        history: args.watch_history,
    })
    .await?;
    println!("wasmlet: API server listening on https://{}", server.addr);
    println!("wasmlet: kubectl --kubeconfig {} get namespaces", server.kubeconfig.display());
    tokio::signal::ctrl_c().await?;
    server.shutdown();
    Ok(())
}

pub fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("WASMLET_LOG").unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("wasmlet: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Up(args) | Command::Apiserver(args) => serve(args).await,
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("wasmlet: {e:#}");
            ExitCode::FAILURE
        }
    }
}
