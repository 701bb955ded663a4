//! Builds the application (pool, migrations, installation, queue, routes) and runs it until
//! it is stopped.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use poem::Server;
use poem::listener::TcpAcceptor;

use crate::http::connections::{Connections, WatchedAcceptor};

use crate::config::Config;
use crate::ingest::queue::Queue;
use crate::ingest::worker::{Worker, WorkerError};
use crate::state::{AppState, StateError};
use crate::store;

/// Why the application could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("TROVE_DATABASE_URL: {0}")]
    DatabaseUrl(sqlx::Error),
    #[error("migrations: {0}")]
    Migrate(#[from] store::migrations::MigrateError),
    #[error("installation: {0}")]
    Install(#[from] store::install::InstallError),
    #[error("TROVE_NATS_URL: {0}")]
    Nats(String),
    #[error(transparent)]
    State(#[from] StateError),
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: SocketAddr,
        source: std::io::Error,
    },
}

/// A built application, bound to its address, not yet serving.
pub struct Application {
    state: AppState,
    acceptor: TcpAcceptor,
    local_addr: SocketAddr,
}

/// The server's commands (`trove serve`, `worker`, `migrate`, `sidecar`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    Serve,
    Worker,
    Migrate,
    Sidecar,
}

/// Runs `command` on a multi-threaded runtime until it ends or SIGINT/SIGTERM stops it.
///
/// The runtime is driven here rather than in `main` so that the server's futures are compiled
/// once, in this crate: a future polled from the binary is compiled again there.
pub fn run(command: Command, config: Config) -> Result<(), String> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|error| format!("cannot start the runtime: {error}"))?;
    runtime.block_on(async move {
        match command {
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
            Command::Sidecar => crate::sidecar::serve(
                config.sidecar_listen,
                config.models_dir.clone(),
                config.embed_threads,
                shutdown_signal(),
            )
            .await
            .map_err(|e| e.to_string()),
        }
    })
}

/// Opens the pool and applies migrations (`trove migrate` and every start).
pub async fn migrated_pool(config: &Config) -> Result<store::Pool, StartError> {
    let pool = store::connect_lazy_with_timeout(
        config.database_url.expose(),
        store::POOL_CONNECTIONS,
        config.statement_timeout,
    )
    .map_err(StartError::DatabaseUrl)?;
    store::migrations::migrate(&pool).await?;
    Ok(pool)
}

impl Application {
    /// Migrates, installs if needed, connects the queue and binds the listener.
    pub async fn build(config: Config) -> Result<Self, StartError> {
        let pool = migrated_pool(&config).await?;
        // Probing the local model costs a load: only before a first installation.
        if !store::install::is_installed(&pool).await? {
            let default_embedding =
                crate::providers::embedding::default_embedding_at_install(&config).await;
            store::install::install_if_needed(&pool, config.master_key.as_ref(), default_embedding)
                .await?;
        }
        let queue = Queue::connect(&config.nats_urls, config.queue.clone())
            .await
            .map_err(|e| StartError::Nats(e.to_string()))?;
        // Create the stream before serving when NATS answers; otherwise keep trying in the
        // background (requests that need the queue answer `NATS error` meanwhile).
        match tokio::time::timeout(Duration::from_secs(5), queue.ensure_stream()).await {
            Ok(Ok(())) => {}
            Ok(Err(error)) => {
                tracing::warn!(%error, "queue stream not ready at start, retrying in the background");
                spawn_stream_setup(queue.clone());
            }
            Err(_) => {
                tracing::warn!("nats did not answer at start, retrying in the background");
                spawn_stream_setup(queue.clone());
            }
        }

        let listener =
            std::net::TcpListener::bind(config.listen).map_err(|source| StartError::Listen {
                addr: config.listen,
                source,
            })?;
        let local_addr = listener.local_addr().map_err(|source| StartError::Listen {
            addr: config.listen,
            source,
        })?;
        listener
            .set_nonblocking(true)
            .map_err(|source| StartError::Listen {
                addr: config.listen,
                source,
            })?;
        let acceptor = TcpAcceptor::from_std(listener).map_err(|source| StartError::Listen {
            addr: config.listen,
            source,
        })?;

        let state = AppState::new(pool, config, queue)?;
        Ok(Self {
            state,
            acceptor,
            local_addr,
        })
    }

    /// The address actually bound (port 0 picks a free port).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The shared state (tests read the pool from it).
    pub fn state(&self) -> &AppState {
        &self.state
    }

    /// Serves (and runs the worker unless `TROVE_WORKER=false`) until `shutdown` completes,
    /// then finishes in-flight requests (at most 30 s) and the worker's current batch.
    pub async fn run_until(
        self,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        tracing::info!(address = %self.local_addr, "listening");
        let (stop_worker, worker_stopped) = tokio::sync::watch::channel(false);
        let worker = self
            .state
            .config
            .run_worker
            .then(|| tokio::spawn(run_worker(self.state.clone(), worker_stopped)));
        let mut sweeps = vec![
            tokio::spawn(sweep_traces(self.state.pool.clone())),
            tokio::spawn(self.state.replicas.clone().watch(self.state.pool.clone())),
        ];
        if let Some(retention) = self.state.config.context_retention {
            sweeps.push(tokio::spawn(sweep_contexts(
                self.state.pool.clone(),
                retention,
            )));
        }
        let connections = Connections::default();
        let mcp = crate::mcp::endpoint(self.state.clone());
        let app = crate::http::app(self.state.clone(), connections.clone(), mcp);
        let result = Server::new_with_acceptor(WatchedAcceptor::new(self.acceptor, connections))
            .run_with_graceful_shutdown(app, shutdown, Some(Duration::from_secs(30)))
            .await;
        for sweep in sweeps {
            sweep.abort();
        }
        // Then let the worker finish its current batch.
        let _ = stop_worker.send(true);
        if let Some(worker) = worker
            && tokio::time::timeout(Duration::from_secs(60), worker)
                .await
                .is_err()
        {
            tracing::warn!("worker did not stop in time");
        }
        result
    }
}

/// `trove worker`: waits for a current schema, then runs a worker (with its metrics server)
/// until `shutdown` completes.
pub async fn run_worker_only(
    config: Config,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<(), StartError> {
    let pool =
        store::connect_lazy_with_timeout(config.database_url.expose(), 8, config.statement_timeout)
            .map_err(StartError::DatabaseUrl)?;
    loop {
        match store::migrations::is_current(&pool).await {
            Ok(true) => break,
            Ok(false) => tracing::info!("waiting for the database schema to be current"),
            Err(error) => tracing::warn!(%error, "waiting for the database"),
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    let queue = Queue::connect(&config.nats_urls, config.queue.clone())
        .await
        .map_err(|e| StartError::Nats(e.to_string()))?;
    let state = AppState::new(pool, config, queue)?;
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let worker = tokio::spawn(run_worker(state, stopped));
    shutdown.await;
    let _ = stop.send(true);
    let _ = worker.await;
    Ok(())
}

/// Deletes expired execution traces every minute (they are unreadable already: their age is
/// checked on read).
async fn sweep_traces(pool: store::Pool) {
    sweep_every(Duration::from_secs(60), "traces", || {
        crate::service::agents::delete_expired_traces(&pool)
    })
    .await;
}

/// Deletes the conversation contexts not updated for `retention` (`TROVE_CONTEXT_RETENTION`)
/// with their messages, whether or not the extension `conversations` is on (contexts kept
/// from when it was), every tenth of the retention (from once a second to once a minute).
async fn sweep_contexts(pool: store::Pool, retention: Duration) {
    let period = crate::service::contexts::retention_sweep_period(retention);
    sweep_every(period, "contexts", || {
        crate::service::contexts::delete_expired(&pool, retention)
    })
    .await;
}

/// Runs `sweep` at once and then every `period` (a late run delays the next), logging how
/// many `what` it deleted or why it could not.
async fn sweep_every<F, Fut>(period: Duration, what: &'static str, mut sweep: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<u64, crate::error::ApiError>>,
{
    let mut every = tokio::time::interval(period);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        match sweep().await {
            Ok(0) => {}
            Ok(deleted) => tracing::debug!(deleted, what, "expired rows deleted"),
            Err(error) => tracing::warn!(%error, what, "could not delete expired rows"),
        }
    }
}

/// Creates the queue's stream, retrying while NATS is unreachable.
fn spawn_stream_setup(queue: Queue) {
    tokio::spawn(async move {
        let mut delay = Duration::from_millis(200);
        loop {
            match queue.ensure_stream().await {
                Ok(()) => return,
                Err(error) => {
                    tracing::warn!(%error, stream = %queue.names().stream, "queue stream not ready, retrying");
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(Duration::from_secs(10));
                }
            }
        }
    });
}

/// Completes on SIGINT or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        if let Err(error) = tokio::signal::ctrl_c().await {
            tracing::error!(%error, "cannot listen for ctrl-c");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(error) => {
                tracing::error!(%error, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = terminate => {},
    }
    tracing::info!("shutting down");
}

/// Runs a worker (retrying its set-up while NATS is unreachable) and its metrics server until
/// `stop` fires.
pub async fn run_worker(state: AppState, mut stop: tokio::sync::watch::Receiver<bool>) {
    let mut delay = Duration::from_millis(500);
    let worker = loop {
        match build_worker(&state).await {
            Ok(worker) => break worker,
            Err(error) => {
                tracing::warn!(%error, "worker cannot start yet, retrying");
                tokio::select! {
                    () = tokio::time::sleep(delay) => {}
                    _ = stop.changed() => return,
                }
                delay = (delay * 2).min(Duration::from_secs(10));
            }
        }
    };
    if let crate::config::MetricsListen::Addr(addr) = state.config.worker_metrics_listen {
        let metrics = worker.metrics.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            if let Err(error) = crate::http::worker_metrics::serve(addr, metrics, stop).await {
                tracing::error!(%error, %addr, "worker metrics server failed");
            }
        });
    }
    worker.run(state.config.worker_concurrency, stop).await;
}

/// A worker over the application's pool, queue, cipher, embedders and license.
pub async fn build_worker(state: &AppState) -> Result<Worker, WorkerError> {
    Worker::new(
        state.pool.clone(),
        &state.queue,
        state.cipher.clone(),
        state.embedders.clone(),
        state.splitting.clone(),
        Arc::new(state.config.license.clone()),
    )
    .await
    .map(|worker| {
        worker
            .deferring_indexes_from(state.config.index_defer_rows)
            .with_index_params(state.config.hnsw)
    })
}
