//! The state every request shares: the database, the queue, the providers and the settings.
//! Transports and services read it; the worker is built from its parts.

use std::sync::Arc;

use crate::auth::search_memory::SearchMemory;
use crate::config::Config;
use crate::crypto::at_rest::Cipher;
use crate::ingest::outbox::QueuedJobs;
use crate::ingest::queue::Queue;
use crate::metrics::ApiMetrics;
use crate::providers::embedding::EmbedderCache;
use crate::providers::llm::LlmClient;
use crate::providers::sidecar_client::SidecarClient;
use crate::providers::splitting::TextSplitting;
use crate::retrieval::estimates::ScopeEstimates;
use crate::store::Pool;
use crate::store::replicas::ReadReplicas;

/// State shared by every request.
#[derive(Clone)]
pub struct AppState {
    pub pool: Pool,
    /// Where searches read, when the deployment has read replicas.
    pub replicas: ReadReplicas,
    pub config: Arc<Config>,
    pub metrics: ApiMetrics,
    pub queue: Queue,
    /// Jobs the queue has stored, whose outbox entries are removed in the background.
    pub queued_jobs: QueuedJobs,
    /// AES-256-GCM for data at rest, keyed by `TROVE_SECRET`.
    pub cipher: Cipher,
    /// Embedders of stored models (local models loaded once).
    pub embedders: EmbedderCache,
    /// Where texts are split (in process, or the sidecar).
    pub splitting: TextSplitting,
    /// The planner's estimates of search scopes, reused for a minute.
    pub scope_estimates: Arc<ScopeEstimates>,
    /// Searches' key checks and contexts, remembered per key and pipeline.
    pub search_memory: SearchMemory,
    /// The client of model servers (one connection pool, the LLM timeouts).
    pub llm: LlmClient,
}

impl AppState {
    /// Assembles the state; the sidecar client (when configured) is shared by embedders and
    /// splitting.
    pub fn new(pool: Pool, config: Config, queue: Queue) -> Result<Self, StateError> {
        let sidecar = match &config.sidecar_url {
            Some(url) => Some(SidecarClient::new(url).map_err(StateError::Sidecar)?),
            None => None,
        };
        let cipher = Cipher::new(config.secret.expose());
        let embedders = EmbedderCache::new(&config, sidecar.clone());
        let llm = LlmClient::new(config.llm_connect_timeout, config.llm_read_timeout)
            .map_err(|e| StateError::Llm(e.to_string()))?;
        let splitting = match sidecar {
            Some(client) => TextSplitting::Sidecar(client),
            None => TextSplitting::InProcess(embedders.local_models().clone()),
        };
        let replicas = ReadReplicas::connect(
            &config.database_read_urls,
            crate::store::POOL_CONNECTIONS,
            config.statement_timeout,
            config.read_replica_max_lag,
        )
        .map_err(|e| StateError::ReadReplicas(e.to_string()))?;
        let metrics = ApiMetrics::new();
        metrics.register(queue.replica_gauges().collectors());
        metrics.register(replicas.collectors());
        Ok(Self {
            queued_jobs: QueuedJobs::new(pool.clone()),
            pool,
            replicas,
            config: Arc::new(config),
            metrics,
            queue,
            cipher,
            embedders,
            splitting,
            scope_estimates: Arc::default(),
            search_memory: SearchMemory::default(),
            llm,
        })
    }
}

/// Why the state could not be assembled.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("TROVE_SIDECAR_URL: {0}")]
    Sidecar(String),
    #[error("TROVE_DATABASE_READ_URL: {0}")]
    ReadReplicas(String),
    #[error("llm client: {0}")]
    Llm(String),
}
