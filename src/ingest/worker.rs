//! The ingestion worker: pulls up to 100 jobs, groups them by pipeline, splits and embeds each
//! group, and stores its fragments and vectors in one transaction; then acknowledges.
//!
//! A failure of a step that covers the whole group (license, pipeline lookup, splitting,
//! embedding, the transaction) returns every job of the group with a 10-second delay.
//! Processing is idempotent: a version is processed only while it is `pending`, checked under a
//! row lock inside the storing transaction, so a job delivered twice never duplicates fragments.
//!
//! While a batch is worked on, every one of its messages not yet acknowledged or returned is
//! marked in progress every third of the ack wait, so JetStream never gives a live worker's slow
//! batch to another worker; the jobs of a worker that dies come back within the ack wait.
//!
//! After storing a group, the worker analyses `fragments` and the association's vector table
//! when the group made their planner statistics stale (see [`statistics_stale`]), so searches
//! right after an ingestion are planned on statistics that know the rows, not a minute later
//! when autovacuum analyses them.
//!
//! Beside the step loops, a sweep fails versions pending for 24 hours and publishes again the
//! jobs of pending versions never confirmed queued (a submission that stopped between its
//! commit and its publish), so no version waits for a job that does not exist.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_nats::jetstream::consumer::{AckPolicy, PullConsumer, pull};
use async_nats::jetstream::{AckKind, Message};
use futures_util::StreamExt;
use serde_json::Value;
use uuid::Uuid;

use super::deferred_index::{Deferral, IndexAction, QUIET_SECONDS, index_action};
use super::queue::{BackfillJob, Job, Queue, QueueError};
use crate::auth::license::check_license;
use crate::crypto::at_rest::Cipher;
use crate::license::License;
use crate::metadata_schema;
use crate::metrics::WorkerMetrics;
use crate::providers::embedding::{
    EmbedFailure, EmbedderCache, ModelSpec, ProviderKind, model_spec,
};
use crate::providers::splitting::TextSplitting;
use crate::store::documents::DocumentStatus;
use crate::store::ingestion::{
    self, GrownTable, JobVersion, NewFragment, PipelineForWork, ProcessedVersion, StoreError,
    UnconfirmedJob, VectorTable,
};
use crate::store::vectors::{HnswParams, Rebuild};
use crate::store::words;
use crate::store::{DatabaseError, Pool, vectors};

mod backfill;

/// Jobs fetched at most per batch (interface: up to 100).
pub const BATCH_SIZE: usize = 100;

/// A backfill without progress for this many republish delays has its jobs queued again (its
/// last batches, which build the association's index, may take minutes).
const STALLED_BACKFILL_FACTOR: u32 = 5;

/// Outbox entries a sweep claims at once.
const REPUBLISH_BATCH: i64 = 500;

/// Share of a table's analysed rows that one group may add before the worker analyses it.
pub const STALE_SHARE: f64 = 0.2;

/// Whether a group that added `added` rows to a table whose statistics count `reltuples` rows
/// (`pg_class.reltuples`, negative when never analysed) made them stale: never analysed, or
/// the group added more than [`STALE_SHARE`] of the rows counted. Until a table is first
/// analysed the planner takes it for nearly empty, and walks `fragments` with a sort instead
/// of the HNSW index (10–15 ms against 1.3 ms at 8,000 fragments); once it is analysed, the
/// planner scales the counted rows by the table's current size. The rule analyses only while
/// a table holds fewer than five groups' rows, so an analysis reads at most about six groups'
/// rows, and large tables are left to autovacuum.
pub fn statistics_stale(reltuples: f32, added: u64) -> bool {
    reltuples < 0.0 || added as f64 > STALE_SHARE * f64::from(reltuples)
}

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
    pool: Pool,
    queue: Queue,
    consumer: PullConsumer,
    cipher: Cipher,
    embedders: EmbedderCache,
    license: Arc<License>,
    splitting: TextSplitting,
    redelivery_delay: Duration,
    /// The consumer's ack wait: the batch's messages are marked in progress every third of it.
    ack_wait: Duration,
    /// Age of an outbox entry whose job the sweep publishes again.
    republish_after: Duration,
    /// `TROVE_INDEX_DEFER_ROWS` (see [`super::deferred_index`]).
    index_defer_rows: u64,
    /// `TROVE_HNSW_M` and `TROVE_HNSW_EF_CONSTRUCTION`: what [`Self::upgrade_an_index`]
    /// rebuilds indexes of the former defaults with.
    index_params: HnswParams,
    /// Step loops [`Self::run`] runs (1 for a worker driven by [`Self::step`]).
    concurrency: usize,
    pub metrics: WorkerMetrics,
}

/// The messages of a batch, each until it is acknowledged or returned (settled).
///
/// Settling a message and marking the batch in progress take the same lock, so no in-progress
/// mark ever follows the return of a job (it would replace its redelivery delay by the ack
/// wait).
#[derive(Clone, Default)]
struct InFlight(Arc<tokio::sync::Mutex<Vec<Option<Message>>>>);

impl InFlight {
    /// Holds a message until it is settled; returns its slot.
    async fn hold(&self, message: Message) -> usize {
        let mut messages = self.0.lock().await;
        messages.push(Some(message));
        messages.len() - 1
    }

    /// Acknowledges or returns the message of a slot (once: a settled slot is left alone).
    async fn settle(&self, slot: usize, kind: AckKind) {
        let mut messages = self.0.lock().await;
        let Some(message) = messages.get_mut(slot).and_then(Option::take) else {
            return;
        };
        let returned = matches!(kind, AckKind::Nak(_));
        if let Err(error) = message.ack_with(kind).await {
            if returned {
                tracing::warn!(%error, "nak failed; the job returns after the ack wait");
            } else {
                tracing::warn!(%error, "ack failed; the job will be delivered again");
            }
        }
    }

    /// Tells JetStream that every message not yet settled is still being worked on; returns
    /// how many.
    async fn mark_in_progress(&self) -> usize {
        let messages = self.0.lock().await;
        let mut marked = 0;
        for message in messages.iter().flatten() {
            match message.ack_with(AckKind::Progress).await {
                Ok(()) => marked += 1,
                Err(error) => {
                    tracing::warn!(%error, "in-progress mark failed; the job may be delivered again");
                }
            }
        }
        marked
    }

    /// Marks the batch in progress every `every` until dropped (the task is aborted then).
    fn keep_in_progress(&self, every: Duration) -> AbortOnDrop {
        let batch = self.clone();
        AbortOnDrop(tokio::spawn(async move {
            let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticks.tick().await;
                batch.mark_in_progress().await;
            }
        }))
    }
}

/// A task aborted when its handle is dropped (a step that ends or is cancelled).
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// How often a batch is marked in progress: a third of the ack wait, so that one lost or late
/// mark still leaves time for the next.
fn progress_interval(ack_wait: Duration) -> Duration {
    (ack_wait / 3).max(Duration::from_millis(100))
}

/// One model's vectors of a group's fragments, in their order.
type ModelVectors = Vec<Vec<f32>>;

/// One received job with its message's slot in the batch.
struct Delivery<J = Job> {
    job: J,
    slot: usize,
    batch: InFlight,
}

impl<J> Delivery<J> {
    async fn ack(&self) {
        self.batch.settle(self.slot, AckKind::Ack).await;
    }

    async fn nak(&self, delay: Duration) {
        self.batch
            .settle(self.slot, AckKind::Nak(Some(delay)))
            .await;
    }
}

/// A version to process: read, then split.
struct Prepared {
    job: Job,
    /// Its own splitter (else the pipeline's default).
    splitter_id: Option<Uuid>,
    /// The decrypted text, until it is split.
    text: String,
    expired_at: Option<chrono::DateTime<chrono::Utc>>,
    /// The version asks to expire older versions and the document has some.
    expires_older: bool,
    classification: String,
    metadata: Value,
    fragments: Vec<String>,
}

/// What became of a file's text.
enum FileText {
    Text(String),
    /// The stored bytes cannot be decrypted or are gone (as an unreadable text).
    Unreadable,
    /// The text cannot be extracted: the version fails with this reason.
    Failed(String),
}

/// Why a whole group failed.
#[derive(Debug, thiserror::Error)]
enum GroupError {
    #[error("license: {0}")]
    License(String),
    #[error("database: {0}")]
    Database(#[from] crate::store::DatabaseError),
    #[error("database: {0}")]
    Entity(#[from] crate::store::EntityError),
    #[error("splitting: {0}")]
    Split(String),
    #[error("embedding: {0}")]
    Embed(String),
    /// The model server refused a request for the texts it held.
    #[error("embedding: {0}")]
    EmbedRefused(String),
    #[error("{}", StoreError::AssociationsChanged)]
    AssociationsChanged,
}

impl GroupError {
    /// Whether the failure comes from what a document of the group holds, so that processing
    /// the group again fails again: a text the model server refuses, or one whose data
    /// Postgres refuses (SQLSTATE classes 22, data exception, and 54, program limit exceeded).
    fn is_about_a_document(&self) -> bool {
        match self {
            Self::EmbedRefused(_) => true,
            Self::Database(error) => error
                .as_database_error()
                .and_then(|error| error.code())
                .is_some_and(|code| code.starts_with("22") || code.starts_with("54")),
            _ => false,
        }
    }
}

/// A failure of the worker outside a group: the queue or the database.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    #[error("queue: {0}")]
    Queue(#[from] QueueError),
    #[error("database: {0}")]
    Database(#[from] DatabaseError),
    #[error("{error} ({published} jobs published again)")]
    Republish { error: QueueError, published: usize },
}

impl Worker {
    /// Creates the durable consumer, or updates its configuration when it exists (so that a
    /// consumer created with another ack wait takes the configured one).
    pub async fn new(
        pool: Pool,
        queue: &Queue,
        cipher: Cipher,
        embedders: EmbedderCache,
        splitting: TextSplitting,
        license: Arc<License>,
    ) -> Result<Self, WorkerError> {
        queue.ensure_stream().await?;
        let names = queue.names();
        let stream = queue
            .jetstream()
            .get_stream(&names.stream)
            .await
            .map_err(QueueError::new)?;
        // Create or update: JetStream changes the ack wait of an existing durable consumer.
        let consumer: PullConsumer = stream
            .create_consumer(pull::Config {
                durable_name: Some(names.consumer.clone()),
                ack_policy: AckPolicy::Explicit,
                ack_wait: names.ack_wait,
                max_deliver: -1,
                filter_subject: format!("{}.>", names.subject_prefix),
                ..Default::default()
            })
            .await
            .map_err(QueueError::new)?;
        Ok(Self {
            pool,
            queue: queue.clone(),
            consumer,
            cipher,
            embedders,
            license,
            splitting,
            redelivery_delay: names.redelivery_delay,
            ack_wait: names.ack_wait,
            republish_after: names.republish_after,
            index_defer_rows: crate::config::DEFAULT_INDEX_DEFER_ROWS,
            index_params: HnswParams::DEFAULT,
            concurrency: 1,
            metrics: WorkerMetrics::new(),
        })
    }

    /// The worker with `TROVE_INDEX_DEFER_ROWS` set (0: indexes are never deferred).
    #[must_use]
    pub fn deferring_indexes_from(mut self, rows: u64) -> Self {
        self.index_defer_rows = rows;
        self
    }

    /// The worker with `TROVE_HNSW_M` and `TROVE_HNSW_EF_CONSTRUCTION` set.
    #[must_use]
    pub fn with_index_params(mut self, params: HnswParams) -> Self {
        self.index_params = params;
        self
    }

    /// Fetches what is available now (up to 100 jobs, waiting at most `wait`) and processes it.
    /// From its first message until it returns, the batch is marked in progress every third
    /// of the ack wait; a step that is cancelled (its future dropped) stops marking it.
    pub async fn step(&self, wait: Duration) -> Result<StepOutcome, WorkerError> {
        let mut messages = self
            .consumer
            .batch()
            .max_messages(BATCH_SIZE)
            .expires(wait.max(Duration::from_millis(100)))
            .messages()
            .await
            .map_err(QueueError::new)?;
        let mut groups: BTreeMap<Uuid, Vec<Delivery>> = BTreeMap::new();
        let mut backfills: Vec<Delivery<BackfillJob>> = Vec::new();
        let mut outcome = StepOutcome::default();
        let batch = InFlight::default();
        let mut in_progress = None;
        while let Some(message) = messages.next().await {
            let message = match message {
                Ok(message) => message,
                Err(error) => {
                    tracing::warn!(%error, "queue fetch error");
                    break;
                }
            };
            outcome.jobs += 1;
            match serde_json::from_slice::<super::queue::Message>(&message.payload) {
                Ok(job) => {
                    if in_progress.is_none() {
                        in_progress =
                            Some(batch.keep_in_progress(progress_interval(self.ack_wait)));
                    }
                    let slot = batch.hold(message).await;
                    let batch = batch.clone();
                    match job {
                        super::queue::Message::Document(job) => {
                            groups.entry(job.pipeline_id).or_default().push(Delivery {
                                job,
                                slot,
                                batch,
                            });
                        }
                        super::queue::Message::Backfill(job) => {
                            backfills.push(Delivery { job, slot, batch });
                        }
                    }
                }
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
        // Backfill jobs one after the other (a model's call uses the machine's cores); each
        // queues its range's next job before it is acknowledged, so other step loops and
        // workers take those meanwhile.
        for delivery in &backfills {
            self.backfill(delivery).await;
        }
        // Every message is settled now: stop marking the batch.
        drop(in_progress);
        Ok(outcome)
    }

    /// Processes one pipeline's jobs. When the group fails because of what one of its
    /// documents holds, each document is processed alone, so that it fails alone instead of
    /// taking the others with it at every delivery.
    async fn process_group(&self, pipeline_id: Uuid, deliveries: Vec<Delivery>) -> StepOutcome {
        let size = deliveries.len();
        self.metrics.processed.inc_by(size as f64);
        match self.timed_group(pipeline_id, &deliveries).await {
            Ok(outcome) => outcome,
            Err(error) if size > 1 && error.is_about_a_document() => {
                tracing::info!(%error, %pipeline_id, jobs = size, "document group failed on what a document holds; its documents are processed one by one");
                let mut outcome = StepOutcome::default();
                for delivery in deliveries {
                    let alone = std::slice::from_ref(&delivery);
                    let one = match self.timed_group(pipeline_id, alone).await {
                        Ok(one) => one,
                        Err(error) => self.return_jobs(pipeline_id, alone, &error).await,
                    };
                    outcome.jobs += one.jobs;
                    outcome.stored += one.stored;
                    outcome.skipped += one.skipped;
                    outcome.failed += one.failed;
                }
                outcome
            }
            Err(error) => self.return_jobs(pipeline_id, &deliveries, &error).await,
        }
    }

    /// [`Self::try_group`], its time added to the processing latency.
    async fn timed_group(
        &self,
        pipeline_id: Uuid,
        deliveries: &[Delivery],
    ) -> Result<StepOutcome, GroupError> {
        let started = Instant::now();
        let result = self.try_group(pipeline_id, deliveries).await;
        self.metrics
            .processed_latency
            .add(started.elapsed().as_secs_f64());
        result
    }

    /// Returns the jobs of a failed group; they are delivered again after the delay.
    async fn return_jobs(
        &self,
        pipeline_id: Uuid,
        deliveries: &[Delivery],
        error: &GroupError,
    ) -> StepOutcome {
        let size = deliveries.len();
        tracing::warn!(%error, %pipeline_id, jobs = size, "document group failed; jobs return after the redelivery delay");
        self.metrics.failed.inc_by(size as f64);
        for delivery in deliveries {
            delivery.nak(self.redelivery_delay).await;
        }
        StepOutcome {
            jobs: size,
            failed: size,
            ..StepOutcome::default()
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
        check_license(&self.license, &self.pool, None)
            .await
            .map_err(|e| GroupError::License(e.to_string()))?;
        let Some(pipeline) = ingestion::pipeline_for_work(&self.pool, pipeline_id).await? else {
            // The pipeline was deleted: its documents are gone, so their jobs are done.
            for delivery in deliveries {
                delivery.ack().await;
            }
            self.metrics.success.inc_by(deliveries.len() as f64);
            outcome.stored = deliveries.len();
            return Ok(outcome);
        };

        let split_started = Instant::now();
        let (mut prepared, finished) = self.read_versions(deliveries, &mut outcome).await?;
        // The models of the pipeline's associations (the default's tokenizer may split, too).
        let tables = pipeline.vector_tables();
        let mut specs = Vec::with_capacity(tables.len());
        if !prepared.is_empty() {
            for (_, model_id) in &tables {
                specs.push(self.model_spec(*model_id).await?);
            }
        }
        let local_model = pipeline
            .embedding_model_id
            .and_then(|default| {
                tables
                    .iter()
                    .zip(&specs)
                    .find(|((_, model), _)| *model == default)
            })
            .map(|(_, spec)| spec)
            .filter(|spec| spec.provider == ProviderKind::Local)
            .map(|spec| spec.model_name.as_str());
        self.split(&pipeline, &mut prepared, local_model).await?;
        self.metrics
            .text_splitter_latency
            .add(split_started.elapsed().as_secs_f64());

        let (vectors, configs) = self.embed_and_detect(&pipeline, &prepared, &specs).await?;
        let build_index = match pipeline.ve_id {
            Some(vector_embedding_id)
                if self.index_defer_rows > 0
                    && self.prepare_index(vector_embedding_id, &prepared).await =>
            {
                Some(vector_embedding_id)
            }
            _ => None,
        };
        let tables: Vec<VectorTable> = tables.into_iter().map(|(table, _)| table).collect();
        let stored = self
            .store(
                pipeline_id,
                &pipeline,
                &tables,
                (&prepared, &vectors, &configs),
                build_index,
            )
            .await?;
        for delivery in deliveries {
            if finished.contains(&delivery.slot) || prepared.iter().any(|p| p.job == delivery.job) {
                delivery.ack().await;
            }
        }
        let added: usize = prepared
            .iter()
            .zip(&stored)
            .filter(|(_, stored)| **stored)
            .map(|(p, _)| p.fragments.len())
            .sum();
        self.refresh_statistics(&pipeline, added).await;
        for (p, was_stored) in prepared.iter().zip(&stored) {
            if !was_stored || p.fragments.is_empty() {
                // Not pending any more, or an empty text (success, counted as skipped).
                self.metrics.skip.inc();
                outcome.skipped += 1;
            } else {
                self.metrics.success.inc();
                outcome.stored += 1;
            }
        }
        Ok(outcome)
    }

    /// Reads every version of the group in one statement and decides, per job: skip (not
    /// pending, or a second copy in this batch), done (deleted), returned (text unreadable)
    /// or to process. Returns the versions to process and the slots of the messages already
    /// finished.
    async fn read_versions(
        &self,
        deliveries: &[Delivery],
        outcome: &mut StepOutcome,
    ) -> Result<(Vec<Prepared>, Vec<usize>), GroupError> {
        let (ids, versions): (Vec<Uuid>, Vec<i64>) = deliveries
            .iter()
            .map(|d| (d.job.document_id, d.job.version))
            .unzip();
        let rows = ingestion::job_versions(&self.pool, &ids, &versions).await?;
        let mut by_job: BTreeMap<(Uuid, i64), JobVersion> =
            rows.into_iter().map(|r| ((r.id, r.version), r)).collect();
        let mut prepared: Vec<Prepared> = Vec::new();
        let mut finished = Vec::new();
        for delivery in deliveries {
            let job = delivery.job;
            // A job delivered twice in one batch is processed once; the copy finds the entry
            // taken and is skipped.
            let Some(version) = by_job.remove(&(job.document_id, job.version)) else {
                if prepared.iter().any(|p| p.job == job) {
                    self.metrics.skip.inc();
                    outcome.skipped += 1;
                } else {
                    // Deleted before processing.
                    self.metrics.success.inc();
                    outcome.stored += 1;
                }
                finished.push(delivery.slot);
                continue;
            };
            if version.status != DocumentStatus::Pending {
                self.metrics.skip.inc();
                outcome.skipped += 1;
                finished.push(delivery.slot);
                continue;
            }
            let text = match version.format.as_deref() {
                None => version
                    .text
                    .as_deref()
                    .and_then(|t| self.cipher.decrypt_text(t).ok()),
                Some(format) => match self.file_text(job, format).await? {
                    FileText::Text(text) => Some(text),
                    FileText::Unreadable => None,
                    FileText::Failed(reason) => {
                        // This version fails; the rest of the group goes on.
                        tracing::info!(document_id = %job.document_id, version = job.version, %reason, "file text could not be extracted");
                        ingestion::mark_failed_with_reason(
                            &self.pool,
                            job.document_id,
                            job.version,
                            &reason,
                        )
                        .await?;
                        self.metrics.failed.inc();
                        outcome.failed += 1;
                        finished.push(delivery.slot);
                        continue;
                    }
                },
            };
            let Some(text) = text else {
                // Unreadable (another TROVE_SECRET) or already dropped: this version cannot
                // be processed now; leave it to redelivery and the 24-hour sweep.
                self.metrics.failed.inc();
                outcome.failed += 1;
                delivery.nak(self.redelivery_delay).await;
                continue;
            };
            prepared.push(Prepared {
                job,
                expired_at: version.expired_at,
                // Versions only grow, so a version without older ones when read never gets any.
                expires_older: version.expire_older_versions && version.has_older,
                classification: version.classification,
                metadata: version.metadata,
                splitter_id: version.text_splitter_id,
                text,
                fragments: Vec::new(),
            });
        }
        Ok((prepared, finished))
    }

    /// The text of a file submitted as a document: its bytes read and decrypted, then
    /// extracted on the blocking pool within the bounds of [`super::extract`].
    async fn file_text(&self, job: Job, format: &str) -> Result<FileText, GroupError> {
        let stored = ingestion::file_bytes(&self.pool, job.document_id, job.version).await?;
        let Some(Ok(bytes)) = stored.as_deref().map(|b| self.cipher.decrypt(b)) else {
            return Ok(FileText::Unreadable);
        };
        Ok(match super::extract::extract_file(bytes, format).await {
            Ok(text) => FileText::Text(text),
            Err(reason) => FileText::Failed(reason),
        })
    }

    /// Splits the texts, all texts of one splitter configuration in one call.
    async fn split(
        &self,
        pipeline: &PipelineForWork,
        prepared: &mut [Prepared],
        local_model: Option<&str>,
    ) -> Result<(), GroupError> {
        let mut texts_by_splitter: BTreeMap<Uuid, Vec<(usize, String)>> = BTreeMap::new();
        for (position, p) in prepared.iter_mut().enumerate() {
            let splitter_id = p.splitter_id.unwrap_or(pipeline.default_text_splitter_id);
            texts_by_splitter
                .entry(splitter_id)
                .or_default()
                .push((position, std::mem::take(&mut p.text)));
        }
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
        Ok(())
    }

    /// Embeds every fragment of the group at once with each model of `specs` (those of the
    /// pipeline's associations, in their order); meanwhile, on the blocking pool, detects the
    /// language of each fragment for its full-text vector. Returns the vectors per model.
    async fn embed_and_detect(
        &self,
        pipeline: &PipelineForWork,
        prepared: &[Prepared],
        specs: &[ModelSpec],
    ) -> Result<(Vec<ModelVectors>, Vec<&'static str>), GroupError> {
        let embed_started = Instant::now();
        let texts: Arc<Vec<String>> = Arc::new(
            prepared
                .iter()
                .flat_map(|p| p.fragments.iter().cloned())
                .collect(),
        );
        let embedding = async {
            let mut vectors = Vec::with_capacity(specs.len());
            for spec in specs {
                if texts.is_empty() {
                    vectors.push(Vec::new());
                    continue;
                }
                vectors.push(self.embed(spec, &texts).await?);
            }
            self.metrics
                .embedding_latency
                .add(embed_started.elapsed().as_secs_f64());
            Ok::<_, GroupError>(vectors)
        };
        let (vectors, configs) = tokio::join!(
            embedding,
            text_search_configs(pipeline.has_full_text_search, Arc::clone(&texts))
        );
        Ok((vectors?, configs?))
    }

    /// Embeds `texts` with a model.
    async fn embed(&self, spec: &ModelSpec, texts: &[String]) -> Result<Vec<Vec<f32>>, GroupError> {
        let embedder = self
            .embedders
            .embedder(spec)
            .await
            .map_err(|e| GroupError::Embed(e.to_string()))?;
        embedder.embed(texts).await.map_err(|e| match e {
            EmbedFailure::Refused(_) => GroupError::EmbedRefused(e.to_string()),
            _ => GroupError::Embed(e.to_string()),
        })
    }

    /// The embedder description of a stored model, secrets decrypted.
    async fn model_spec(&self, model_id: Uuid) -> Result<ModelSpec, GroupError> {
        let stored = crate::store::embedding::model(&self.pool, model_id)
            .await?
            .ok_or_else(|| GroupError::Embed(format!("embedding model {model_id} not found")))?;
        model_spec(&self.cipher, &stored).map_err(|e| GroupError::Embed(e.to_string()))
    }

    /// Encrypts the fragments and stores the group (its versions, their vectors and full-text
    /// configurations) in one transaction, in which, with `build_index`, the association's
    /// deferred index is built too; returns, per version, whether it was stored (it may have
    /// stopped being pending meanwhile, e.g. deleted or processed by another delivery).
    async fn store(
        &self,
        pipeline_id: Uuid,
        pipeline: &PipelineForWork,
        tables: &[VectorTable],
        (prepared, vectors, text_configs): (&[Prepared], &[ModelVectors], &[&'static str]),
        build_index: Option<Uuid>,
    ) -> Result<Vec<bool>, GroupError> {
        // Per table, its dimension and the group's vectors back to back.
        let flats: Vec<(usize, Vec<f32>)> = tables
            .iter()
            .zip(vectors)
            .map(|(table, vectors)| {
                (
                    usize::try_from(table.dimensions).unwrap_or(0),
                    vectors.iter().flatten().copied().collect(),
                )
            })
            .collect();
        let mut offset = 0;
        let mut versions = Vec::with_capacity(prepared.len());
        for p in prepared {
            let count = p.fragments.len();
            let configs = text_configs.get(offset..offset + count).unwrap_or_default();
            let fragment_vectors = flats
                .iter()
                .map(|(dimensions, flat)| {
                    flat.get(offset * dimensions..(offset + count) * dimensions)
                        .unwrap_or_default()
                })
                .collect();
            offset += count;
            versions.push(ProcessedVersion {
                document_id: p.job.document_id,
                version: p.job.version,
                classification: &p.classification,
                metadata: &p.metadata,
                expired_at: p.expired_at,
                expires_older: p.expires_older,
                fragments: p
                    .fragments
                    .iter()
                    .enumerate()
                    .map(|(i, text)| NewFragment {
                        content: self.cipher.encrypt(text.as_bytes()),
                        full_text: configs.get(i).map(|config| (text.as_str(), *config)),
                    })
                    .collect(),
                vectors: fragment_vectors,
            });
        }
        let vector_table = match (pipeline.ve_id, pipeline.dimensions) {
            (Some(vector_embedding_id), Some(dimensions)) => Some(VectorTable {
                vector_embedding_id,
                dimensions,
            }),
            _ => None,
        };
        let started = Instant::now();
        let group = ingestion::store_group(
            &self.pool,
            pipeline_id,
            tables,
            &versions,
            &metadata_schema::write_order_fields(&pipeline.metadata_schema),
            build_index,
        )
        .await
        .map_err(|error| match error {
            StoreError::Database(error) => GroupError::Database(error),
            StoreError::AssociationsChanged => GroupError::AssociationsChanged,
        })?;
        if let (Some(id), Some(index)) = (build_index, group.index) {
            log_build(id, index, started, "with a group");
        }
        if let Err(error) =
            ingestion::read_back(&self.pool, vector_table, &group.fragment_ids).await
        {
            // The group is stored; its rows only wait for a search to record their commit.
            tracing::warn!(%error, %pipeline_id, "reading a stored group back failed");
        }
        if let Err(error) = words::fold_if_scattered(&self.pool, pipeline_id).await {
            // The statistics stay right, only spread over more rows until a later group folds them.
            tracing::warn!(%error, %pipeline_id, "folding the pipeline's word statistics failed");
        }
        Ok(group.stored)
    }

    /// Defers the association's HNSW index before a group is stored, or says to build it with
    /// the group (`true`; [`super::deferred_index`]; not called when deferral is off: the sweep
    /// still builds an index deferred before). A failure only logs a warning: the group is
    /// stored either way, and a deferred index is built by a later group or the sweep.
    async fn prepare_index(&self, vector_embedding_id: Uuid, prepared: &[Prepared]) -> bool {
        let fragments: usize = prepared.iter().map(|p| p.fragments.len()).sum();
        if fragments == 0 {
            return false;
        }
        let Some(state) = self.index_state(vector_embedding_id).await else {
            return false;
        };
        let action = index_action(
            &state,
            prepared.len() as u64,
            fragments as u64,
            self.deferral(),
        );
        match action {
            IndexAction::Keep => {}
            IndexAction::Wait => self.look_again_after_quiet(vector_embedding_id),
            IndexAction::Defer(params) => {
                match vectors::defer_index(&self.pool, vector_embedding_id, params).await {
                    Ok(true) => {
                        tracing::info!(%vector_embedding_id, pending = state.pending, rows = state.rows, "HNSW index dropped for a burst of ingestion; built again once it is stored");
                    }
                    Ok(false) => {}
                    Err(error) => {
                        tracing::warn!(%error, %vector_embedding_id, "deferring the vector index failed");
                    }
                }
            }
            IndexAction::Build => return true,
        }
        false
    }

    /// Looks at a deferred index again once the pipeline may have had no submission for
    /// [`QUIET_SECONDS`], and builds it if the burst is over (a burst's last batch finds its
    /// submissions recent).
    fn look_again_after_quiet(&self, vector_embedding_id: Uuid) {
        let worker = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs_f64(QUIET_SECONDS)).await;
            let Some(state) = worker.index_state(vector_embedding_id).await else {
                return;
            };
            if index_action(&state, 0, 0, worker.deferral()) == IndexAction::Build {
                worker.build_index(vector_embedding_id).await;
            }
        });
    }

    /// The deferral rule of this worker's settings.
    fn deferral(&self) -> Deferral {
        Deferral::new(self.index_defer_rows, self.concurrency)
    }

    /// The association's index state; `None` when it was deleted or could not be read (logged).
    async fn index_state(&self, vector_embedding_id: Uuid) -> Option<vectors::IndexState> {
        // Enough to compare with `TROVE_INDEX_DEFER_ROWS`, and to see whether more than the
        // rule allows is left after a group.
        let deferred_count_at_least = self.deferral().left_at_most + BATCH_SIZE as u64 + 1;
        let count_at_least = self.index_defer_rows.max(deferred_count_at_least);
        vectors::index_state(
            &self.pool,
            vector_embedding_id,
            count_at_least,
            deferred_count_at_least,
        )
        .await
        .inspect_err(|error| tracing::warn!(%error, "reading the vector index's state failed"))
        .ok()
        .flatten()
    }

    /// Builds a deferred index on its own (with `fragments` analysed), logging how long it
    /// took.
    async fn build_index(&self, vector_embedding_id: Uuid) {
        let started = Instant::now();
        let built = ingestion::build_deferred_index(&self.pool, vector_embedding_id).await;
        log_build(vector_embedding_id, built, started, "on its own");
    }

    /// Builds the deferred indexes whose pipelines have nothing pending (a burst whose last
    /// batches did not build it, or a worker that died mid-build).
    pub async fn build_idle_deferred_indexes(&self) {
        let deferred = match vectors::deferred_indexes(&self.pool).await {
            Ok(deferred) => deferred,
            Err(error) => {
                tracing::warn!(%error, "listing deferred vector indexes failed");
                return;
            }
        };
        for (vector_embedding_id, pending) in deferred {
            if pending {
                continue;
            }
            self.build_index(vector_embedding_id).await;
        }
    }

    /// Rebuilds the oldest index still built with [`HnswParams::FORMER_DEFAULT`] with the
    /// configured parameters, when these differ, without stopping its searches
    /// ([`vectors::rebuild_index`]); returns the association whose index was replaced. One
    /// index per sweep, so that an upgrade spreads its builds over the sweeps.
    pub async fn upgrade_an_index(&self) -> Option<Uuid> {
        if self.index_params == HnswParams::FORMER_DEFAULT {
            return None;
        }
        let candidates =
            match vectors::indexes_built_with(&self.pool, HnswParams::FORMER_DEFAULT).await {
                Ok(candidates) => candidates,
                Err(error) => {
                    tracing::warn!(%error, "listing vector indexes to upgrade failed");
                    return None;
                }
            };
        let params = self.index_params;
        for vector_embedding_id in candidates {
            let started = Instant::now();
            tracing::info!(
                %vector_embedding_id,
                m = params.m(),
                ef_construction = params.ef_construction(),
                "rebuilding an HNSW index built with the former defaults; searches use the old one meanwhile"
            );
            match vectors::rebuild_index(&self.pool, vector_embedding_id, params).await {
                Ok(Rebuild::Replaced) => {
                    tracing::info!(
                        %vector_embedding_id,
                        seconds = started.elapsed().as_secs_f64(),
                        "HNSW index rebuilt with the configured parameters"
                    );
                    return Some(vector_embedding_id);
                }
                Ok(Rebuild::Skipped) => {}
                Ok(Rebuild::Busy) => {
                    tracing::info!(
                        %vector_embedding_id,
                        "rebuilt HNSW index not yet put in place (the table is busy); the next sweep does"
                    );
                    return None;
                }
                Err(error) => {
                    tracing::warn!(%error, %vector_embedding_id, "rebuilding an HNSW index failed; the next sweep tries again");
                    return None;
                }
            }
        }
        None
    }

    /// Analyses the tables a stored group grew (`fragments`, and the association's vector
    /// table) whose statistics it made stale ([`statistics_stale`]), each in its own
    /// statement after the group's transaction. A failure only logs a warning: the group is
    /// stored, and autovacuum analyses the tables later.
    async fn refresh_statistics(&self, pipeline: &PipelineForWork, added: usize) {
        if added == 0 {
            return;
        }
        let added = u64::try_from(added).unwrap_or(u64::MAX);
        let mut tables = vec![GrownTable::Fragments];
        if let (Some(vector_embedding_id), Some(_)) = (pipeline.ve_id, pipeline.dimensions) {
            tables.push(GrownTable::Vectors(vector_embedding_id));
        }
        let rows = match ingestion::analysed_rows(&self.pool, &tables).await {
            Ok(rows) => rows,
            Err(error) => {
                tracing::warn!(%error, "reading table statistics failed; autovacuum will analyse");
                return;
            }
        };
        for (table, reltuples) in tables.into_iter().zip(rows) {
            let Some(reltuples) = reltuples else { continue };
            if !statistics_stale(reltuples, added) {
                continue;
            }
            if let Err(error) = ingestion::analyze(&self.pool, table).await {
                tracing::warn!(%error, table = %table.name(), "ANALYZE after a group failed; autovacuum will analyse");
            }
        }
    }

    /// Runs `concurrency` step loops (each fetching and processing its own batch, so that one
    /// batch is split and embedded while another is stored) and the sweeper until `shutdown`
    /// turns true. A batch being processed is finished first.
    pub async fn run(mut self, concurrency: usize, shutdown: tokio::sync::watch::Receiver<bool>) {
        self.concurrency = concurrency.max(1);
        tracing::info!(concurrency, "worker started");
        let sweeper = tokio::spawn(self.clone().sweep_loop(shutdown.clone()));
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

    /// Publishes again the jobs of versions still `pending` whose outbox entry is older than
    /// the republish delay (their submission never confirmed the publish: the process stopped
    /// between its commit and the publish, or the confirmation was lost); returns how many.
    /// A job already in the queue may so be queued twice: the second delivery finds the version
    /// no longer pending and is skipped. Stops at the first failed publish (the entries left
    /// are retried after the republish delay).
    pub async fn republish_unconfirmed(&self) -> Result<usize, WorkerError> {
        let mut published = 0;
        loop {
            let jobs = ingestion::claim_unconfirmed_jobs(
                &self.pool,
                self.republish_after,
                REPUBLISH_BATCH,
            )
            .await?;
            let mut queued: Vec<UnconfirmedJob> = Vec::with_capacity(jobs.len());
            let mut failure = None;
            for job in &jobs {
                let publish = self
                    .queue
                    .publish(&Job {
                        pipeline_id: job.pipeline_id,
                        document_id: job.document_id,
                        version: job.version,
                    })
                    .await;
                match publish {
                    Ok(()) => queued.push(*job),
                    Err(error) => {
                        failure = Some(error);
                        break;
                    }
                }
            }
            if !queued.is_empty() {
                let (ids, versions): (Vec<Uuid>, Vec<i64>) =
                    queued.iter().map(|j| (j.document_id, j.version)).unzip();
                ingestion::forget_queued_jobs(&self.pool, &ids, &versions).await?;
            }
            published += queued.len();
            if let Some(error) = failure {
                return Err(WorkerError::Republish { error, published });
            }
            if jobs.len() < usize::try_from(REPUBLISH_BATCH).unwrap_or(usize::MAX) {
                return Ok(published);
            }
        }
    }

    /// Every minute, fails the versions pending for more than 24 hours, builds the deferred
    /// indexes of pipelines with nothing pending and, unless it is still at one, starts
    /// upgrading an index built with the former defaults ([`Self::upgrade_an_index`]); every
    /// quarter of the republish delay, publishes again the jobs never confirmed queued, queues
    /// again the backfills without progress, and refreshes the backfill gauge.
    async fn sweep_loop(self, mut shutdown: tokio::sync::watch::Receiver<bool>) {
        let mut stale = tokio::time::interval(Duration::from_secs(60));
        let mut unconfirmed = tokio::time::interval(republish_interval(self.republish_after));
        for ticks in [&mut stale, &mut unconfirmed] {
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        }
        // Dropped with the loop, which stops the upgrade: a build stopped so leaves an invalid
        // index, which the next one drops.
        let mut upgrade = tokio::task::JoinSet::new();
        loop {
            tokio::select! {
                _ = stale.tick() => {
                    match ingestion::fail_stale_pending(&self.pool).await {
                        Ok(0) => {}
                        Ok(n) => tracing::info!(versions = n, "pending versions older than 24 hours marked failed"),
                        Err(error) => tracing::warn!(%error, "sweep failed"),
                    }
                    self.build_idle_deferred_indexes().await;
                    // In a task of its own, so that a long build holds up no other sweep.
                    while upgrade.try_join_next().is_some() {}
                    if upgrade.is_empty() {
                        let worker = self.clone();
                        upgrade.spawn(async move { worker.upgrade_an_index().await });
                    }
                }
                _ = unconfirmed.tick() => {
                    match self.republish_unconfirmed().await {
                        Ok(0) => {}
                        Ok(n) => tracing::info!(jobs = n, "jobs of pending versions never confirmed queued published again"),
                        Err(error) => tracing::warn!(%error, "publishing unconfirmed jobs again failed"),
                    }
                    let quiet = self.republish_after * STALLED_BACKFILL_FACTOR;
                    match self.requeue_stalled_backfills(quiet).await {
                        0 => {}
                        n => tracing::info!(jobs = n, "jobs of backfills without progress queued again"),
                    }
                    self.refresh_backfill_gauge().await;
                }
                _ = shutdown.changed() => return,
            }
        }
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

/// Logs what became of a deferred index's build started at `started`, `how` it ran.
fn log_build(
    vector_embedding_id: Uuid,
    built: Result<bool, DatabaseError>,
    started: Instant,
    how: &'static str,
) {
    match built {
        Ok(true) => tracing::info!(
            %vector_embedding_id,
            seconds = started.elapsed().as_secs_f64(),
            how,
            "deferred HNSW index built"
        ),
        Ok(false) => {}
        // The service is stopping: the index stays recorded as deferred, and the next worker's
        // sweep builds it (`deferred_index`).
        Err(DatabaseError::PoolClosed) => tracing::info!(
            %vector_embedding_id,
            how,
            "building a deferred vector index stopped with the service; the next start builds it"
        ),
        Err(error) => {
            tracing::warn!(%error, %vector_embedding_id, how, "building a deferred vector index failed");
        }
    }
}

async fn ack(message: &Message) {
    if let Err(error) = message.ack().await {
        tracing::warn!(%error, "ack failed; the job will be delivered again");
    }
}

async fn load_splitter(pool: &Pool, id: Uuid) -> Result<trove_text::SplitterConfig, GroupError> {
    let (provider, parameters) = ingestion::splitter(pool, id)
        .await?
        .ok_or_else(|| GroupError::Split(format!("text splitter {id} not found")))?;
    trove_text::SplitterConfig::from_parameters(&provider, &parameters)
        .map_err(|e| GroupError::Split(e.to_string()))
}

/// How often the sweep looks for unconfirmed jobs: a quarter of the republish delay (at most a
/// minute), so a stranded version waits at most 1¼ of that delay.
fn republish_interval(republish_after: Duration) -> Duration {
    (republish_after / 4).clamp(Duration::from_millis(100), Duration::from_secs(60))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_table_never_analysed_or_grown_by_more_than_a_fifth_is_stale() {
        // Never analysed: stale whatever the group added.
        assert!(statistics_stale(-1.0, 1));
        assert!(statistics_stale(-1.0, 10_000));
        // Analysed empty: any row makes it stale.
        assert!(statistics_stale(0.0, 1));
        // More than a fifth of the rows counted.
        assert!(statistics_stale(1_000.0, 201));
        assert!(statistics_stale(400.0, 400));
        // Up to a fifth: fresh enough.
        assert!(!statistics_stale(1_000.0, 200));
        assert!(!statistics_stale(1_000.0, 1));
        assert!(!statistics_stale(1_000_000.0, 400));
        // A group that added nothing changes nothing.
        assert!(!statistics_stale(0.0, 0));
        assert!(!statistics_stale(1_000.0, 0));
    }

    #[test]
    fn groups_of_one_size_analyse_a_table_until_it_holds_five_of_them() {
        // The rows counted after each analysis, for groups of 400 rows.
        let mut reltuples = -1.0_f32;
        let mut rows = 0.0_f32;
        let mut analyses = 0;
        for _ in 0..100 {
            rows += 400.0;
            if statistics_stale(reltuples, 400) {
                analyses += 1;
                reltuples = rows;
            }
        }
        assert_eq!(analyses, 5);
        assert!((reltuples - 2_000.0).abs() < f32::EPSILON);
    }
}
