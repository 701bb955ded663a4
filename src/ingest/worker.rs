//! The ingestion worker: pulls up to 100 jobs, groups them by pipeline, splits and embeds each
//! group, and stores its fragments and vectors in one transaction; then acknowledges.
//!
//! A failure of a step that covers the whole group (license, pipeline lookup, splitting,
//! embedding, the transaction) returns every job of the group with a 10-second delay.
//! Processing is idempotent: a version is processed only while it is `pending`, checked under a
//! row lock inside the storing transaction, so a job delivered twice never duplicates fragments.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_nats::jetstream::consumer::{AckPolicy, PullConsumer, pull};
use async_nats::jetstream::{AckKind, Message};
use futures_util::StreamExt;
use serde_json::Value;
use sqlx::PgPool;
use uuid::Uuid;

use super::queue::{Job, Queue};
use crate::auth::license::License;
use crate::crypto::at_rest::Cipher;
use crate::metrics::WorkerMetrics;
use crate::providers::embedding::{EmbedderCache, ModelSpec, ProviderKind};
use crate::providers::splitting::TextSplitting;
use crate::store::vectors;

/// Jobs fetched at most per batch (interface: up to 100).
pub const BATCH_SIZE: usize = 100;

/// What one step did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StepOutcome {
    /// Jobs received.
    pub jobs: usize,
    /// Versions stored (`success`), including deleted ones acknowledged.
    pub stored: usize,
    /// Jobs skipped (not pending, empty text).
    pub skipped: usize,
    /// Jobs returned to the queue.
    pub failed: usize,
}

/// Everything a worker needs.
#[derive(Clone)]
pub struct Worker {
    pool: PgPool,
    consumer: PullConsumer,
    cipher: Cipher,
    embedders: EmbedderCache,
    license: Arc<License>,
    splitting: TextSplitting,
    redelivery_delay: Duration,
    pub metrics: WorkerMetrics,
}

/// One received job with its message.
struct Delivery {
    job: Job,
    message: Message,
}

/// A version ready to store.
struct Prepared {
    job: Job,
    expired_at: Option<chrono::DateTime<chrono::Utc>>,
    /// The version asks to expire older versions and the document has some.
    expires_older: bool,
    classification: String,
    metadata: Value,
    fragments: Vec<String>,
}

#[derive(sqlx::FromRow)]
struct PendingVersion {
    id: Uuid,
    version: i64,
    status: String,
    classification: String,
    metadata: Value,
    text_splitter_id: Option<Uuid>,
    expired_at: Option<chrono::DateTime<chrono::Utc>>,
    expire_older_versions: bool,
    has_older: bool,
    text: Option<Vec<u8>>,
}

#[derive(sqlx::FromRow)]
struct PipelineForWork {
    default_text_splitter_id: Uuid,
    has_full_text_search: bool,
    ve_id: Option<Uuid>,
    embedding_model_id: Option<Uuid>,
    dimensions: Option<i32>,
}

/// Why a whole group failed.
#[derive(Debug, thiserror::Error)]
enum GroupError {
    #[error("license: {0}")]
    License(String),
    #[error("database: {0}")]
    Database(#[from] sqlx::Error),
    #[error("splitting: {0}")]
    Split(String),
    #[error("embedding: {0}")]
    Embed(String),
}

impl Worker {
    /// Creates (or binds to) the durable consumer.
    pub async fn new(
        pool: PgPool,
        queue: &Queue,
        cipher: Cipher,
        embedders: EmbedderCache,
        splitting: TextSplitting,
        license: Arc<License>,
    ) -> Result<Self, String> {
        queue.ensure_stream().await?;
        let names = queue.names();
        let stream = queue
            .jetstream()
            .get_stream(&names.stream)
            .await
            .map_err(|e| e.to_string())?;
        let consumer: PullConsumer = stream
            .get_or_create_consumer(
                &names.consumer,
                pull::Config {
                    durable_name: Some(names.consumer.clone()),
                    ack_policy: AckPolicy::Explicit,
                    ack_wait: names.ack_wait,
                    max_deliver: -1,
                    filter_subject: format!("{}.>", names.subject_prefix),
                    ..Default::default()
                },
            )
            .await
            .map_err(|e| e.to_string())?;
        Ok(Self {
            pool,
            consumer,
            cipher,
            embedders,
            license,
            splitting,
            redelivery_delay: names.redelivery_delay,
            metrics: WorkerMetrics::new(),
        })
    }

    /// A worker over the application's pool, queue, cipher, embedders and license.
    pub async fn from_state(state: &crate::startup::AppState) -> Result<Self, String> {
        Self::new(
            state.pool.clone(),
            &state.queue,
            state.cipher.clone(),
            state.embedders.clone(),
            state.splitting.clone(),
            Arc::new(state.config.license.clone()),
        )
        .await
    }

    /// Fetches what is available now (up to 100 jobs, waiting at most `wait`) and processes it.
    pub async fn step(&self, wait: Duration) -> Result<StepOutcome, String> {
        let mut messages = self
            .consumer
            .batch()
            .max_messages(BATCH_SIZE)
            .expires(wait.max(Duration::from_millis(100)))
            .messages()
            .await
            .map_err(|e| e.to_string())?;
        let mut groups: BTreeMap<Uuid, Vec<Delivery>> = BTreeMap::new();
        let mut outcome = StepOutcome::default();
        while let Some(message) = messages.next().await {
            let message = match message {
                Ok(message) => message,
                Err(error) => {
                    tracing::warn!(%error, "queue fetch error");
                    break;
                }
            };
            outcome.jobs += 1;
            match serde_json::from_slice::<Job>(&message.payload) {
                Ok(job) => groups
                    .entry(job.pipeline_id)
                    .or_default()
                    .push(Delivery { job, message }),
                Err(error) => {
                    // A message that is not a job can never succeed: drop it.
                    tracing::warn!(%error, "malformed job acknowledged");
                    ack(&message).await;
                }
            }
        }
        for (pipeline_id, deliveries) in groups {
            let group = self.process_group(pipeline_id, deliveries).await;
            outcome.stored += group.stored;
            outcome.skipped += group.skipped;
            outcome.failed += group.failed;
        }
        Ok(outcome)
    }

    /// Processes one pipeline's jobs.
    async fn process_group(&self, pipeline_id: Uuid, deliveries: Vec<Delivery>) -> StepOutcome {
        let started = Instant::now();
        let size = deliveries.len();
        self.metrics.processed.inc_by(size as f64);
        let result = self.try_group(pipeline_id, &deliveries).await;
        self.metrics
            .processed_latency
            .add(started.elapsed().as_secs_f64());
        match result {
            Ok(outcome) => outcome,
            Err(error) => {
                tracing::warn!(%error, %pipeline_id, jobs = size, "document group failed; jobs return after the redelivery delay");
                self.metrics.failed.inc_by(size as f64);
                for delivery in &deliveries {
                    nak(&delivery.message, self.redelivery_delay).await;
                }
                StepOutcome {
                    jobs: size,
                    failed: size,
                    ..StepOutcome::default()
                }
            }
        }
    }

    async fn try_group(
        &self,
        pipeline_id: Uuid,
        deliveries: &[Delivery],
    ) -> Result<StepOutcome, GroupError> {
        let mut outcome = StepOutcome {
            jobs: deliveries.len(),
            ..StepOutcome::default()
        };
        self.license
            .check(&self.pool, None)
            .await
            .map_err(|e| GroupError::License(e.to_string()))?;
        let pipeline: Option<PipelineForWork> = sqlx::query_as(
            "SELECT p.default_text_splitter_id, p.has_full_text_search, ve.id AS ve_id, ve.embedding_model_id,
                    ve.dimensions
             FROM pipelines p LEFT JOIN vector_embeddings ve ON ve.pipeline_id = p.id
             WHERE p.id = $1",
        )
        .bind(pipeline_id)
        .fetch_optional(&self.pool)
        .await?;
        let Some(pipeline) = pipeline else {
            // The pipeline was deleted: its documents are gone, so their jobs are done.
            for delivery in deliveries {
                ack(&delivery.message).await;
            }
            self.metrics.success.inc_by(deliveries.len() as f64);
            outcome.stored = deliveries.len();
            return Ok(outcome);
        };

        // Read every version of the group in one statement; decide skip / deleted / process.
        let split_started = Instant::now();
        let (ids, versions): (Vec<Uuid>, Vec<i64>) = deliveries
            .iter()
            .map(|d| (d.job.document_id, d.job.version))
            .unzip();
        let rows: Vec<PendingVersion> = sqlx::query_as(
            "SELECT d.id, d.version, d.status, d.classification, d.metadata, d.text_splitter_id, d.expired_at,
                    d.expire_older_versions,
                    EXISTS (SELECT 1 FROM documents o WHERE o.id = d.id AND o.version < d.version) AS has_older,
                    t.text
             FROM unnest($1::uuid[], $2::bigint[]) AS j (id, version)
             JOIN documents d ON d.id = j.id AND d.version = j.version
             LEFT JOIN document_texts t ON t.document_id = d.id AND t.version = d.version",
        )
        .bind(&ids)
        .bind(&versions)
        .fetch_all(&self.pool)
        .await?;
        let mut by_job: BTreeMap<(Uuid, i64), PendingVersion> =
            rows.into_iter().map(|r| ((r.id, r.version), r)).collect();

        let mut prepared = Vec::new();
        let mut texts_by_splitter: BTreeMap<Uuid, Vec<(usize, String)>> = BTreeMap::new();
        let mut finished = Vec::new();
        for delivery in deliveries {
            let job = delivery.job;
            // A job delivered twice in one batch is processed once; the copy finds the entry
            // taken and is skipped.
            let Some(version) = by_job.remove(&(job.document_id, job.version)) else {
                let already_seen = prepared.iter().any(|p: &Prepared| p.job == job);
                if already_seen {
                    self.metrics.skip.inc();
                    outcome.skipped += 1;
                } else {
                    // Deleted before processing.
                    self.metrics.success.inc();
                    outcome.stored += 1;
                }
                finished.push(&delivery.message);
                continue;
            };
            if version.status != "pending" {
                self.metrics.skip.inc();
                outcome.skipped += 1;
                finished.push(&delivery.message);
                continue;
            }
            let text = match version.text.as_deref().map(|t| self.cipher.decrypt_text(t)) {
                Some(Ok(text)) => text,
                Some(Err(_)) | None => {
                    // Unreadable (another TROVE_SECRET) or already dropped: this version cannot
                    // be processed now; leave it to redelivery and the 24-hour sweep.
                    self.metrics.failed.inc();
                    outcome.failed += 1;
                    nak(&delivery.message, self.redelivery_delay).await;
                    continue;
                }
            };
            let splitter_id = version
                .text_splitter_id
                .unwrap_or(pipeline.default_text_splitter_id);
            texts_by_splitter
                .entry(splitter_id)
                .or_default()
                .push((prepared.len(), text));
            prepared.push(Prepared {
                job,
                expired_at: version.expired_at,
                // Versions only grow, so a version without older ones when read never gets any.
                expires_older: version.expire_older_versions && version.has_older,
                classification: version.classification,
                metadata: version.metadata,
                fragments: Vec::new(),
            });
        }
        // The pipeline's embedding model (its tokenizer may split, too).
        let spec = match pipeline.embedding_model_id {
            Some(model_id) if !prepared.is_empty() => Some(self.model_spec(model_id).await?),
            _ => None,
        };
        let local_model = spec
            .as_ref()
            .filter(|spec| spec.provider == ProviderKind::Local)
            .map(|spec| spec.model_name.as_str());
        // Split per splitter configuration, all texts of one configuration in one call.
        for (splitter_id, texts) in texts_by_splitter {
            let config = load_splitter(&self.pool, splitter_id).await?;
            let (positions, texts): (Vec<usize>, Vec<String>) = texts.into_iter().unzip();
            let split = self
                .splitting
                .split_all(&config, texts, local_model)
                .await
                .map_err(GroupError::Split)?;
            for (position, fragments) in positions.into_iter().zip(split) {
                if let Some(p) = prepared.get_mut(position) {
                    p.fragments = fragments;
                }
            }
        }
        self.metrics
            .text_splitter_latency
            .add(split_started.elapsed().as_secs_f64());

        // Embed every fragment of the group at once; meanwhile, on the blocking pool, detect
        // the language of each fragment for its full-text vector.
        let embed_started = Instant::now();
        let texts: Arc<Vec<String>> = Arc::new(
            prepared
                .iter()
                .flat_map(|p| p.fragments.iter().cloned())
                .collect(),
        );
        let embedding = async {
            let vectors = match &spec {
                Some(spec) if !texts.is_empty() => {
                    let embedder = self
                        .embedders
                        .embedder(spec)
                        .await
                        .map_err(|e| GroupError::Embed(e.to_string()))?;
                    embedder
                        .embed(&texts)
                        .await
                        .map_err(|e| GroupError::Embed(e.to_string()))?
                }
                _ => Vec::new(),
            };
            self.metrics
                .embedding_latency
                .add(embed_started.elapsed().as_secs_f64());
            Ok::<_, GroupError>(vectors)
        };
        let (vectors, configs) = tokio::join!(
            embedding,
            text_search_configs(pipeline.has_full_text_search, Arc::clone(&texts))
        );
        let (vectors, configs) = (vectors?, configs?);

        // Store everything in one transaction.
        let stored = self.store(&pipeline, &prepared, &vectors, &configs).await?;
        for delivery in deliveries {
            if finished.iter().any(|m| std::ptr::eq(*m, &delivery.message))
                || prepared.iter().any(|p| p.job == delivery.job)
            {
                ack(&delivery.message).await;
            }
        }
        for (p, was_stored) in prepared.iter().zip(&stored) {
            if !was_stored {
                self.metrics.skip.inc();
                outcome.skipped += 1;
            } else if p.fragments.is_empty() {
                // Empty text: success, counted as skipped.
                self.metrics.skip.inc();
                outcome.skipped += 1;
            } else {
                self.metrics.success.inc();
                outcome.stored += 1;
            }
        }
        Ok(outcome)
    }

    /// The embedder description of a stored model, secrets decrypted.
    async fn model_spec(&self, model_id: Uuid) -> Result<ModelSpec, GroupError> {
        let stored = crate::store::embedding::model(&self.pool, model_id)
            .await?
            .ok_or_else(|| GroupError::Embed(format!("embedding model {model_id} not found")))?;
        crate::service::embedding_models::model_spec(&self.cipher, &stored)
            .map_err(|e| GroupError::Embed(e.to_string()))
    }

    /// Stores the group's versions in one transaction with a fixed number of statements;
    /// returns, per version, whether it was stored (it may have stopped being pending
    /// meanwhile, e.g. deleted or processed by another delivery).
    async fn store(
        &self,
        pipeline: &PipelineForWork,
        prepared: &[Prepared],
        vectors: &[Vec<f32>],
        text_configs: &[&'static str],
    ) -> Result<Vec<bool>, GroupError> {
        if prepared.is_empty() {
            return Ok(Vec::new());
        }
        let mut tx = self.pool.begin().await?;
        let (ids, versions): (Vec<Uuid>, Vec<i64>) = prepared
            .iter()
            .map(|p| (p.job.document_id, p.job.version))
            .unzip();
        // Lock the versions that are still pending; only those are stored.
        let pending: Vec<(Uuid, i64)> = sqlx::query_as(
            "SELECT d.id, d.version FROM documents d
             JOIN unnest($1::uuid[], $2::bigint[]) AS j (id, version) ON d.id = j.id AND d.version = j.version
             WHERE d.status = 'pending' FOR UPDATE OF d",
        )
        .bind(&ids)
        .bind(&versions)
        .fetch_all(&mut *tx)
        .await?;
        let stored: Vec<bool> = prepared
            .iter()
            .map(|p| pending.contains(&(p.job.document_id, p.job.version)))
            .collect();

        // Every fragment of the stored versions, as parallel arrays.
        let mut fragment_ids = Vec::new();
        let mut document_ids = Vec::new();
        let mut fragment_versions = Vec::new();
        let mut order_ids = Vec::new();
        let mut classifications = Vec::new();
        let mut metadata = Vec::new();
        let mut contents = Vec::new();
        let mut expired = Vec::new();
        let mut texts: Vec<Option<&str>> = Vec::new();
        let mut configs = Vec::new();
        let mut flat_vectors: Vec<f32> = Vec::new();
        let mut offset = 0;
        for (p, keep) in prepared.iter().zip(&stored) {
            let count = p.fragments.len();
            let fragment_vectors = vectors.get(offset..offset + count).unwrap_or_default();
            let fragment_configs = text_configs.get(offset..offset + count).unwrap_or_default();
            offset += count;
            if !keep {
                continue;
            }
            for (order_id, text) in p.fragments.iter().enumerate() {
                let config = fragment_configs.get(order_id).copied();
                fragment_ids.push(Uuid::now_v7());
                document_ids.push(p.job.document_id);
                fragment_versions.push(p.job.version);
                order_ids.push(i32::try_from(order_id).unwrap_or(i32::MAX));
                classifications.push(p.classification.as_str());
                metadata.push(&p.metadata);
                contents.push(self.cipher.encrypt(text.as_bytes()));
                expired.push(p.expired_at);
                if let Some(config) = config {
                    texts.push(Some(text.as_str()));
                    configs.push(config);
                } else {
                    texts.push(None);
                    configs.push(trove_text::language::SIMPLE);
                }
            }
            flat_vectors.extend(fragment_vectors.iter().flatten());
        }
        if !fragment_ids.is_empty() {
            sqlx::query(
                "INSERT INTO fragments (id, pipeline_id, document_id, version, order_id, classification, metadata,
                                        content, expired_at, tsv)
                 SELECT u.id, $1, u.document_id, u.version, u.order_id, u.classification, u.metadata, u.content,
                        u.expired_at,
                        CASE WHEN u.txt IS NULL THEN NULL
                             ELSE to_tsvector(u.cfg::regconfig, u.txt) || to_tsvector('simple', u.txt) END
                 FROM unnest($2::uuid[], $3::uuid[], $4::bigint[], $5::int[], $6::text[], $7::jsonb[], $8::bytea[],
                             $9::timestamptz[], $10::text[], $11::text[])
                      AS u (id, document_id, version, order_id, classification, metadata, content, expired_at, txt, cfg)",
            )
            .bind(pipeline_id_of(prepared))
            .bind(&fragment_ids)
            .bind(&document_ids)
            .bind(&fragment_versions)
            .bind(&order_ids)
            .bind(&classifications)
            .bind(&metadata)
            .bind(&contents)
            .bind(&expired)
            .bind(&texts)
            .bind(&configs)
            .execute(&mut *tx)
            .await?;
            if let (Some(ve), Some(dimensions)) = (pipeline.ve_id, pipeline.dimensions)
                && !flat_vectors.is_empty()
            {
                vectors::insert(&mut tx, ve, dimensions, &fragment_ids, &flat_vectors).await?;
            }
        }
        let (done_ids, done_versions): (Vec<Uuid>, Vec<i64>) = pending.iter().copied().unzip();
        sqlx::query(
            "UPDATE documents d SET status = 'success', updated_at = now()
             FROM unnest($1::uuid[], $2::bigint[]) AS j (id, version) WHERE d.id = j.id AND d.version = j.version",
        )
        .bind(&done_ids)
        .bind(&done_versions)
        .execute(&mut *tx)
        .await?;
        sqlx::query(
            "DELETE FROM document_texts t USING unnest($1::uuid[], $2::bigint[]) AS j (id, version)
             WHERE t.document_id = j.id AND t.version = j.version",
        )
        .bind(&done_ids)
        .bind(&done_versions)
        .execute(&mut *tx)
        .await?;
        // Older versions expire now that their successor succeeded.
        let (expiring_ids, expiring_versions): (Vec<Uuid>, Vec<i64>) = prepared
            .iter()
            .zip(&stored)
            .filter(|(p, keep)| **keep && p.expires_older)
            .map(|(p, _)| (p.job.document_id, p.job.version))
            .unzip();
        if !expiring_ids.is_empty() {
            sqlx::query(
                "UPDATE documents d SET expired_at = now(), updated_at = now()
                 FROM unnest($1::uuid[], $2::bigint[]) AS j (id, version)
                 WHERE d.id = j.id AND d.version < j.version AND d.expired_at IS NULL",
            )
            .bind(&expiring_ids)
            .bind(&expiring_versions)
            .execute(&mut *tx)
            .await?;
            sqlx::query(
                "UPDATE fragments f SET expired_at = now()
                 FROM unnest($1::uuid[], $2::bigint[]) AS j (id, version)
                 WHERE f.document_id = j.id AND f.version < j.version AND f.expired_at IS NULL",
            )
            .bind(&expiring_ids)
            .bind(&expiring_versions)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(stored)
    }

    /// Runs `concurrency` step loops (each fetching and processing its own batch, so that one
    /// batch is split and embedded while another is stored) and the sweeper until `shutdown`
    /// turns true. A batch being processed is finished first.
    pub async fn run(self, concurrency: usize, shutdown: tokio::sync::watch::Receiver<bool>) {
        tracing::info!(concurrency, "worker started");
        let sweeper = tokio::spawn(sweep_loop(self.pool.clone(), shutdown.clone()));
        let mut loops = tokio::task::JoinSet::new();
        for _ in 0..concurrency.max(1) {
            let worker = self.clone();
            let shutdown = shutdown.clone();
            loops.spawn(async move { worker.step_loop(shutdown).await });
        }
        while loops.join_next().await.is_some() {}
        sweeper.abort();
        tracing::info!("worker stopped");
    }

    async fn step_loop(&self, mut shutdown: tokio::sync::watch::Receiver<bool>) {
        while !*shutdown.borrow() {
            // Not raced against `shutdown`: a fetched batch is always finished.
            if let Err(error) = self.step(Duration::from_secs(1)).await {
                tracing::warn!(%error, "worker step failed");
                tokio::select! {
                    () = tokio::time::sleep(Duration::from_secs(1)) => {}
                    _ = shutdown.changed() => {}
                }
            }
        }
    }
}

/// The text search configuration of each fragment (its detected language), computed on the
/// blocking pool; none without full-text search.
async fn text_search_configs(
    full_text: bool,
    texts: Arc<Vec<String>>,
) -> Result<Vec<&'static str>, GroupError> {
    if !full_text || texts.is_empty() {
        return Ok(Vec::new());
    }
    tokio::task::spawn_blocking(move || {
        texts
            .iter()
            .map(|text| trove_text::text_search_config(text))
            .collect()
    })
    .await
    .map_err(|e| GroupError::Split(format!("language detection: {e}")))
}

/// The pipeline of a group (all jobs of a group share it).
fn pipeline_id_of(prepared: &[Prepared]) -> Uuid {
    prepared
        .first()
        .map(|p| p.job.pipeline_id)
        .unwrap_or_default()
}

async fn ack(message: &Message) {
    if let Err(error) = message.ack().await {
        tracing::warn!(%error, "ack failed; the job will be delivered again");
    }
}

async fn nak(message: &Message, delay: Duration) {
    if let Err(error) = message.ack_with(AckKind::Nak(Some(delay))).await {
        tracing::warn!(%error, "nak failed; the job returns after the ack wait");
    }
}

async fn load_splitter(pool: &PgPool, id: Uuid) -> Result<trove_text::SplitterConfig, GroupError> {
    let row: Option<(String, Value)> =
        sqlx::query_as("SELECT provider, parameters FROM text_splitters WHERE id = $1")
            .bind(id)
            .fetch_optional(pool)
            .await?;
    let (provider, parameters) =
        row.ok_or_else(|| GroupError::Split(format!("text splitter {id} not found")))?;
    trove_text::SplitterConfig::from_parameters(&provider, &parameters)
        .map_err(|e| GroupError::Split(e.to_string()))
}

/// Versions still `pending` this long after submission become `failed`.
pub const PENDING_LIMIT_HOURS: i64 = 24;

/// Marks versions pending for more than 24 hours `failed` and drops their raw text.
pub async fn sweep(pool: &PgPool) -> Result<u64, sqlx::Error> {
    let mut tx = pool.begin().await?;
    let failed: Vec<(Uuid, i64)> = sqlx::query_as(
        "UPDATE documents SET status = 'failed', updated_at = now()
         WHERE status = 'pending' AND created_at < now() - make_interval(hours => $1::int)
         RETURNING id, version",
    )
    .bind(i32::try_from(PENDING_LIMIT_HOURS).unwrap_or(24))
    .fetch_all(&mut *tx)
    .await?;
    let (ids, versions): (Vec<Uuid>, Vec<i64>) = failed.iter().copied().unzip();
    sqlx::query("DELETE FROM document_texts t USING unnest($1::uuid[], $2::bigint[]) AS f (id, version) WHERE t.document_id = f.id AND t.version = f.version")
        .bind(&ids)
        .bind(&versions)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(failed.len() as u64)
}

async fn sweep_loop(pool: PgPool, mut shutdown: tokio::sync::watch::Receiver<bool>) {
    let mut interval = tokio::time::interval(Duration::from_secs(60));
    loop {
        tokio::select! {
            _ = interval.tick() => {
                match sweep(&pool).await {
                    Ok(0) => {}
                    Ok(n) => tracing::info!(versions = n, "pending versions older than 24 hours marked failed"),
                    Err(error) => tracing::warn!(%error, "sweep failed"),
                }
            }
            _ = shutdown.changed() => return,
        }
    }
}
