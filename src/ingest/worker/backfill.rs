//! Backfill jobs: the vectors of an embedding model added to a pipeline, computed from the
//! stored fragments (`store::vector_embeddings`).
//!
//! A job embeds the next batches of its range (for up to [`JOB_TIME`]) and queues the job
//! after it before it is acknowledged, so a worker that dies mid-batch leaves the job to be delivered again (the
//! batch is read again as "fragments without a vector": nothing is embedded twice into the
//! table, nothing is skipped). The last range walked finishes the backfill: it embeds what
//! groups stored without the new model meanwhile, builds the association's HNSW index once,
//! and marks it `ready` when no current fragment lacks a vector. An embedding failure returns
//! the job after the redelivery delay; [`MAX_ATTEMPTS`] in a row turn the association
//! `failed` with the error as its reason.

use std::time::{Duration, Instant};

use uuid::Uuid;

use super::{Delivery, GroupError, Worker};
use crate::ingest::queue::BackfillJob;
use crate::store::vector_embeddings::{self as store, Backfill, Finish, MissingFragment};
use crate::store::{DatabaseError, ingestion};

/// Fragments a backfill job embeds at most.
pub const BACKFILL_BATCH: i64 = 256;

/// How long a backfill job goes on with further batches of its range before it queues the
/// rest as a new job (a slow model's batch takes longer, and a job then holds one batch): a
/// fast model's batches take milliseconds, and each job waits for a worker's next fetch.
pub const JOB_TIME: Duration = Duration::from_secs(2);

/// Failed deliveries in a row after which a backfill is `failed`.
pub const MAX_ATTEMPTS: i32 = 5;

/// Why a backfill batch stopped.
enum BatchError {
    /// The model failed, or a fragment cannot be read: counted as an attempt.
    Attempt(String),
    /// The database or the queue: the job comes back later.
    Retry(String),
}

impl From<DatabaseError> for BatchError {
    fn from(error: DatabaseError) -> Self {
        Self::Retry(format!("database: {error}"))
    }
}

impl Worker {
    /// Runs one backfill job and settles its message.
    pub(super) async fn backfill(&self, delivery: &Delivery<BackfillJob>) {
        let job = delivery.job;
        let id = job.backfill;
        match self.backfill_step(job).await {
            Ok(()) => delivery.ack().await,
            Err(BatchError::Retry(error)) => {
                tracing::warn!(%error, vector_embedding_id = %id, "backfill job returns after the redelivery delay");
                delivery.nak(self.redelivery_delay).await;
            }
            Err(BatchError::Attempt(reason)) => {
                match store::attempt_failed(&self.pool, id, MAX_ATTEMPTS, &reason).await {
                    Ok(true) => {
                        tracing::warn!(%reason, vector_embedding_id = %id, "backfill failed");
                        self.metrics
                            .backfill_remaining
                            .remove_label_values(&[&id.to_string()])
                            .ok();
                        delivery.ack().await;
                    }
                    Ok(false) => {
                        tracing::warn!(%reason, vector_embedding_id = %id, "backfill batch failed; it returns after the redelivery delay");
                        delivery.nak(self.redelivery_delay).await;
                    }
                    Err(error) => {
                        tracing::warn!(%error, vector_embedding_id = %id, "recording a failed backfill batch failed");
                        delivery.nak(self.redelivery_delay).await;
                    }
                }
            }
        }
    }

    /// Embeds batches of the job's range for up to [`JOB_TIME`] (at least one), then queues the
    /// range's next job, or, once the range is walked, records it and finishes the backfill if
    /// it was the last.
    async fn backfill_step(&self, job: BackfillJob) -> Result<(), BatchError> {
        let id = job.backfill;
        let started = Instant::now();
        let mut after = job.after;
        loop {
            let Some(backfill) = store::backfill(&self.pool, id).await? else {
                // Removed: nothing left to do.
                return Ok(());
            };
            if backfill.status != store::STATUS_BACKFILLING {
                return Ok(());
            }
            let batch = store::missing_fragments(
                &self.pool,
                backfill.pipeline_id,
                id,
                backfill.range(job.range),
                after,
                BACKFILL_BATCH,
            )
            .await?;
            let last = batch.last().map(|f| f.id);
            let full = batch.len() == usize::try_from(BACKFILL_BATCH).unwrap_or(usize::MAX);
            if !batch.is_empty() && !self.embed_batch(id, &backfill, batch).await? {
                return Ok(());
            }
            if !full {
                break;
            }
            after = last;
            if started.elapsed() >= JOB_TIME {
                let next = BackfillJob { after, ..job };
                return self
                    .queue
                    .publish_backfill(&[next])
                    .await
                    .map_err(|error| BatchError::Retry(format!("queue: {error}")));
            }
        }
        // The range is walked: the last one finishes the backfill.
        let Some(backfill) = store::range_done(&self.pool, id, job.range).await? else {
            return Ok(());
        };
        if backfill.all_ranges_done() {
            self.finish_backfill(id, &backfill).await?;
        }
        Ok(())
    }

    /// Decrypts, embeds and stores a batch; `false` when the association is gone.
    async fn embed_batch(
        &self,
        id: Uuid,
        backfill: &Backfill,
        batch: Vec<MissingFragment>,
    ) -> Result<bool, BatchError> {
        let started = Instant::now();
        let mut ids = Vec::with_capacity(batch.len());
        let mut texts = Vec::with_capacity(batch.len());
        for fragment in batch {
            let text = self.cipher.decrypt_text(&fragment.content).map_err(|_| {
                BatchError::Attempt(format!("fragment {} cannot be decrypted", fragment.id))
            })?;
            ids.push(fragment.id);
            texts.push(text);
        }
        let spec = self
            .model_spec(backfill.embedding_model_id)
            .await
            .map_err(|error| BatchError::Attempt(error.to_string()))?;
        let vectors = self
            .embed(&spec, &texts)
            .await
            .map_err(|error| match error {
                GroupError::Embed(reason) => BatchError::Attempt(format!("embedding: {reason}")),
                other => BatchError::Retry(other.to_string()),
            })?;
        let dimensions = usize::try_from(backfill.dimensions).unwrap_or(0);
        if vectors.len() != ids.len() || vectors.iter().any(|v| v.len() != dimensions) {
            return Err(BatchError::Attempt(format!(
                "embedding: the model returned {} vectors for {} texts, or vectors not of {dimensions} dimensions",
                vectors.len(),
                ids.len()
            )));
        }
        let flat: Vec<f32> = vectors.into_iter().flatten().collect();
        let Some(stored) =
            store::store_backfilled(&self.pool, id, backfill.dimensions, &ids, &flat).await?
        else {
            return Ok(false);
        };
        let remaining = backfill.fragments_total - backfill.fragments_done;
        let remaining = remaining - i64::try_from(stored).unwrap_or(0);
        self.metrics
            .backfill_remaining
            .with_label_values(&[&id.to_string()])
            .set(remaining.max(0));
        tracing::debug!(vector_embedding_id = %id, fragments = ids.len(), stored, elapsed_ms = started.elapsed().as_millis(), "backfill batch stored");
        Ok(true)
    }

    /// Embeds the fragments stored meanwhile without the association, builds its index and
    /// marks it `ready`, until no current fragment lacks a vector.
    async fn finish_backfill(&self, id: Uuid, backfill: &Backfill) -> Result<(), BatchError> {
        let started = Instant::now();
        loop {
            loop {
                let batch = store::missing_fragments(
                    &self.pool,
                    backfill.pipeline_id,
                    id,
                    (None, None),
                    None,
                    BACKFILL_BATCH,
                )
                .await?;
                if batch.is_empty() {
                    break;
                }
                let Some(current) = store::backfill(&self.pool, id).await? else {
                    return Ok(());
                };
                if !self.embed_batch(id, &current, batch).await? {
                    return Ok(());
                }
            }
            if let Err(error) = ingestion::build_deferred_index(&self.pool, id).await {
                // Searches on it stay exact until the sweep builds it.
                tracing::warn!(%error, vector_embedding_id = %id, "building a backfilled association's index failed");
            }
            match store::finish(&self.pool, id).await? {
                Finish::Missing => {}
                Finish::Ready => {
                    tracing::info!(vector_embedding_id = %id, elapsed_ms = started.elapsed().as_millis(), "backfill finished; the embedding model is ready");
                    self.metrics
                        .backfill_remaining
                        .remove_label_values(&[&id.to_string()])
                        .ok();
                    return Ok(());
                }
                Finish::Gone => return Ok(()),
            }
        }
    }

    /// Queues again the ranges of backfills without progress for `quiet` (their jobs lost);
    /// returns how many jobs.
    pub(super) async fn requeue_stalled_backfills(&self, quiet: Duration) -> usize {
        let stalled = match store::stalled(&self.pool, quiet).await {
            Ok(stalled) => stalled,
            Err(error) => {
                tracing::warn!(%error, "listing stalled backfills failed");
                return 0;
            }
        };
        let jobs: Vec<BackfillJob> = stalled
            .into_iter()
            .flat_map(|(id, pipeline_id, ranges)| {
                ranges
                    .into_iter()
                    .map(move |range| BackfillJob::start(pipeline_id, id, range))
            })
            .collect();
        if jobs.is_empty() {
            return 0;
        }
        match self.queue.publish_backfill(&jobs).await {
            Ok(()) => jobs.len(),
            Err(error) => {
                tracing::warn!(%error, "queueing stalled backfills again failed");
                0
            }
        }
    }

    /// Sets the gauge of fragments left per backfill from the database (every worker's
    /// progress, not only this one's).
    pub(super) async fn refresh_backfill_gauge(&self) {
        match store::remaining(&self.pool).await {
            Ok(remaining) => {
                self.metrics.backfill_remaining.reset();
                for (id, left) in remaining {
                    self.metrics
                        .backfill_remaining
                        .with_label_values(&[&id.to_string()])
                        .set(left);
                }
            }
            Err(error) => tracing::warn!(%error, "reading backfill progress failed"),
        }
    }
}
