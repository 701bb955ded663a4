//! The `trove` command.

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use trove::config::Config;
use trove::startup::{Application, migrated_pool, run_worker_only, shutdown_signal};

#[derive(Parser)]
#[command(
    name = "trove",
    version,
    about = "Trove knowledge retrieval and agent service"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Apply migrations, install if needed, serve the API (and run a worker unless TROVE_WORKER=false).
    Serve,
    /// Run an ingestion worker only.
    Worker,
    /// Serve the gRPC splitting and embedding sidecar.
    Sidecar,
    /// Apply pending migrations and exit.
    Migrate,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let config = match Config::from_env() {
        Ok(config) => config,
        Err(error) => {
            eprintln!("trove: configuration error: {error}");
            return ExitCode::from(1);
        }
    };
    trove::telemetry::init(&config.log_filter, config.log_format);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("trove: cannot start the runtime: {error}");
            return ExitCode::from(1);
        }
    };
    let result: Result<(), String> = runtime.block_on(async move {
        match cli.command {
            Command::Serve => {
                let app = Application::build(config)
                    .await
                    .map_err(|e| e.to_string())?;
                app.run_until(shutdown_signal())
                    .await
                    .map_err(|e| e.to_string())
            }
            Command::Migrate => {
                let pool = migrated_pool(&config).await.map_err(|e| e.to_string())?;
                pool.close().await;
                Ok(())
            }
            Command::Worker => run_worker_only(config, shutdown_signal())
                .await
                .map_err(|e| e.to_string()),
            Command::Sidecar => trove::sidecar::serve(
                config.sidecar_listen,
                config.models_dir.clone(),
                config.embed_threads,
                shutdown_signal(),
            )
            .await
            .map_err(|e| e.to_string()),
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            tracing::error!(%error, "stopped");
            eprintln!("trove: {error}");
            ExitCode::from(1)
        }
    }
}
