//! The `trove` command.

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use trove::config::Config;
use trove::startup;

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
    /// Upload files and folders as documents to a running Trove
    /// (`POST /pipelines/{pipeline_id}/files`), with a progress bar; prints each version
    /// created as a line of JSON, and a summary of the failures; exits with 1 if any.
    Upload(UploadArgs),
}

#[derive(clap::Args)]
struct UploadArgs {
    /// Trove's base address.
    #[arg(long, env = "TROVE_URL", default_value = "http://127.0.0.1:8080")]
    url: String,
    /// The pipeline.
    #[arg(long)]
    pipeline: uuid::Uuid,
    /// The API key id.
    #[arg(long, env = "TROVE_API_KEY")]
    key: String,
    /// The API key secret.
    #[arg(long, env = "TROVE_API_KEY_SECRET", hide_env_values = true)]
    secret: String,
    /// The documents' classification.
    #[arg(long)]
    classification: String,
    /// The document's external identifier (one file only; default: the path relative to the
    /// argument, a file argument's own name).
    #[arg(long)]
    external_identifier: Option<String>,
    /// Metadata: a JSON object.
    #[arg(long)]
    metadata: Option<String>,
    /// Keep the current versions of the documents once the new ones are processed.
    #[arg(long)]
    keep_older_versions: bool,
    /// Files sent at the same time.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..=64))]
    concurrency: u16,
    /// Wait until every version created is processed (`success` or `failed`) and report the
    /// failed ones with their reason.
    #[arg(long)]
    wait: bool,
    /// With `--wait`: the most seconds to wait; the versions still pending then count as
    /// failures.
    #[arg(long, default_value_t = 3600, requires = "wait")]
    wait_timeout: u64,
    /// Files and folders (walked; each file's external identifier is its path relative to the
    /// folder).
    #[arg(required = true)]
    files: Vec<std::path::PathBuf>,
}

fn main() -> ExitCode {
    let command = match Cli::parse().command {
        Command::Upload(args) => return upload(args),
        Command::Serve => startup::Command::Serve,
        Command::Worker => startup::Command::Worker,
        Command::Migrate => startup::Command::Migrate,
        Command::Sidecar => startup::Command::Sidecar,
    };
    let config = match Config::from_env() {
        Ok(config) => config,
        Err(error) => {
            eprintln!("trove: configuration error: {error}");
            return ExitCode::from(1);
        }
    };
    trove::telemetry::init(&config.log_filter, config.log_format);
    match startup::run(command, config) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            tracing::error!(%error, "stopped");
            eprintln!("trove: {error}");
            ExitCode::from(1)
        }
    }
}

/// `trove upload`: a client of a running Trove; it needs none of the server's configuration.
fn upload(args: UploadArgs) -> ExitCode {
    let target = trove::upload::UploadTarget {
        url: args.url,
        pipeline_id: args.pipeline,
        key_id: args.key,
        key_secret: args.secret,
        classification: args.classification,
        external_identifier: args.external_identifier,
        metadata: args.metadata,
        expire_older_versions: !args.keep_older_versions,
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("trove: cannot start the runtime: {error}");
            return ExitCode::from(1);
        }
    };
    let options = trove::upload::UploadOptions {
        concurrency: usize::from(args.concurrency),
        wait: args
            .wait
            .then(|| std::time::Duration::from_secs(args.wait_timeout)),
        ..trove::upload::UploadOptions::default()
    };
    match runtime.block_on(trove::upload::run(target, &args.files, &options)) {
        Ok(summary) => {
            eprintln!("trove upload: {}", summary.report(args.wait));
            if summary.is_success() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        Err(error) => {
            eprintln!("trove upload: {error}");
            ExitCode::from(2)
        }
    }
}
