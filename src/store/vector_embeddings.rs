//! A pipeline's associations with embedding models ("vector embeddings") beyond the one it
//! was created with, and the backfill that gives a new association a vector for every
//! current fragment (`migrations/0019_vector_embedding_backfill.sql`).
//!
//! A backfill walks the pipeline's current fragments in `ranges` ranges of their ids (cut at
//! their quantiles when it starts), each by a chain of jobs of at most a batch: a job reads the
//! next fragments of its range that have no vector yet, the worker decrypts and embeds them,
//! and [`store_backfilled`] inserts their vectors. When every range is walked, [`finish`]
//! checks under the pipeline's row lock that no current fragment lacks a vector (the groups
//! that store fragments take that row shared first, and read the associations after it) and
//! marks the association `ready`.

use chrono::{DateTime, Utc};
use pgvector::Vector;
use serde::{Deserialize, Serialize};
use sqlx::{AssertSqlSafe, PgConnection, PgPool};
use uuid::Uuid;

use super::embedding::ModelRow;
use super::vectors::{self, HnswParams};
use crate::time::rfc3339;

/// An association as the API shows it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Association {
    pub id: Uuid,
    pub embedding_model: ModelRow,
    /// `backfilling`, `ready` or `failed`.
    pub status: String,
    pub status_reason: Option<String>,
    /// Fragments the backfill embeds and has embedded (null for the association a pipeline
    /// was created with: nothing was backfilled).
    pub fragments_total: Option<i64>,
    pub fragments_done: Option<i64>,
    /// The pipeline's default association.
    pub default: bool,
    #[serde(with = "rfc3339")]
    pub created_at: DateTime<Utc>,
}

impl Association {
    pub fn is_ready(&self) -> bool {
        self.status == STATUS_READY
    }
}

pub const STATUS_BACKFILLING: &str = "backfilling";
pub const STATUS_READY: &str = "ready";
pub const STATUS_FAILED: &str = "failed";

/// The JSON array of the associations of the pipeline `pipeline` (an SQL expression),
/// oldest first, each as [`Association`] deserializes it.
pub fn associations_json_sql(pipeline: &str) -> String {
    format!(
        "(SELECT coalesce(jsonb_agg(jsonb_build_object(
                'id', ve.id,
                'embedding_model', jsonb_build_object(
                    'id', em.id, 'name', em.name, 'description', em.description,
                    'provider', em.provider, 'model_name', em.model_name,
                    'parameters', em.parameters, 'dimensions', em.dimensions,
                    'created_at', em.created_at, 'updated_at', em.updated_at),
                'status', ve.status, 'status_reason', ve.status_reason,
                'fragments_total', b.fragments_total, 'fragments_done', b.fragments_done,
                'default', ve.is_default, 'created_at', ve.created_at)
            ORDER BY ve.created_at, ve.id), '[]'::jsonb)
          FROM vector_embeddings AS ve
          JOIN embedding_models AS em ON em.id = ve.embedding_model_id
          LEFT JOIN vector_embedding_backfills AS b ON b.vector_embedding_id = ve.id
          WHERE ve.pipeline_id = {pipeline})"
    )
}

/// The associations of a pipeline, oldest first.
pub async fn list(pool: &PgPool, pipeline_id: Uuid) -> Result<Vec<Association>, sqlx::Error> {
    list_on(pool, pipeline_id).await
}

async fn list_on<'e>(
    db: impl sqlx::PgExecutor<'e>,
    pipeline_id: Uuid,
) -> Result<Vec<Association>, sqlx::Error> {
    let json: serde_json::Value = sqlx::query_scalar(AssertSqlSafe(format!(
        "SELECT {}",
        associations_json_sql("$1")
    )))
    .bind(pipeline_id)
    .fetch_one(db)
    .await?;
    Ok(parse(json))
}

/// Associations from the JSON of [`associations_json_sql`] (none from anything else).
pub fn parse(json: serde_json::Value) -> Vec<Association> {
    serde_json::from_value(json).unwrap_or_else(|error| {
        tracing::error!(%error, "unreadable association list");
        Vec::new()
    })
}

/// Whether the pipeline holds an association added after its creation (one with a backfill).
pub async fn has_added(pool: &PgPool, pipeline_id: Uuid) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM vector_embeddings ve
                        JOIN vector_embedding_backfills b ON b.vector_embedding_id = ve.id
                        WHERE ve.pipeline_id = $1)",
    )
    .bind(pipeline_id)
    .fetch_one(pool)
    .await
}

/// What a new association stores.
pub struct NewAssociation {
    pub id: Uuid,
    pub pipeline_id: Uuid,
    pub embedding_model_id: Uuid,
    pub dimensions: i32,
    /// Its index, built once the backfill has stored every vector.
    pub index: HnswParams,
    pub ranges: u32,
}

/// Why an association could not be added.
#[derive(Debug)]
pub enum AddError {
    /// The pipeline holds this model already.
    Duplicate,
    /// The pipeline holds the most associations it may.
    Full,
    Database(sqlx::Error),
}

impl From<sqlx::Error> for AddError {
    fn from(error: sqlx::Error) -> Self {
        Self::Database(error)
    }
}

/// Adds an association in `backfilling` with its vector table (its HNSW index recorded as
/// deferred) and its backfill's ranges, in one transaction that holds the pipeline's row:
/// a group storing fragments finished before and its fragments are backfilled, or comes after
/// and embeds them with the new model too. Returns the ranges' bounds.
pub async fn add(pool: &PgPool, new: &NewAssociation, most: i64) -> Result<Association, AddError> {
    let mut tx = pool.begin().await?;
    sqlx::query("SELECT 1 FROM pipelines WHERE id = $1 FOR UPDATE")
        .bind(new.pipeline_id)
        .execute(&mut *tx)
        .await?;
    let (count, duplicate): (i64, bool) = sqlx::query_as(
        "SELECT count(*), coalesce(bool_or(embedding_model_id = $2), false)
         FROM vector_embeddings WHERE pipeline_id = $1",
    )
    .bind(new.pipeline_id)
    .bind(new.embedding_model_id)
    .fetch_one(&mut *tx)
    .await?;
    if duplicate {
        return Err(AddError::Duplicate);
    }
    if count >= most {
        return Err(AddError::Full);
    }
    sqlx::query(
        "INSERT INTO vector_embeddings (id, pipeline_id, embedding_model_id, dimensions,
                                        is_default, status, deferred_index_m,
                                        deferred_index_ef_construction, deferred_index_at)
         VALUES ($1, $2, $3, $4, false, 'backfilling', $5, $6, now())",
    )
    .bind(new.id)
    .bind(new.pipeline_id)
    .bind(new.embedding_model_id)
    .bind(new.dimensions)
    .bind(i32::try_from(new.index.m()).unwrap_or(i32::MAX))
    .bind(i32::try_from(new.index.ef_construction()).unwrap_or(i32::MAX))
    .execute(&mut *tx)
    .await?;
    vectors::create_table(&mut tx, new.id, new.dimensions, None).await?;
    super::indexes::sync_vector_field_indexes(&mut tx, Some(new.pipeline_id)).await?;
    sqlx::query(
        "INSERT INTO vector_embedding_backfills (vector_embedding_id, fragments_total, ranges, bounds)
         SELECT $1, count(*), $3::int,
                CASE WHEN $3::int > 1 THEN percentile_disc(
                         ARRAY(SELECT g::float8 / $3::int FROM generate_series(1, $3::int - 1) AS g))
                     WITHIN GROUP (ORDER BY id) END
         FROM fragments WHERE pipeline_id = $2 AND expired_at IS NULL",
    )
    .bind(new.id)
    .bind(new.pipeline_id)
    .bind(i32::try_from(new.ranges).unwrap_or(1))
    .execute(&mut *tx)
    .await?;
    let association = get_in(&mut tx, new.pipeline_id, new.id).await?;
    tx.commit().await?;
    association.ok_or(AddError::Database(sqlx::Error::RowNotFound))
}

/// One association of a pipeline.
pub async fn get(
    pool: &PgPool,
    pipeline_id: Uuid,
    id: Uuid,
) -> Result<Option<Association>, sqlx::Error> {
    let mut conn = pool.acquire().await?;
    get_in(&mut conn, pipeline_id, id).await
}

async fn get_in(
    conn: &mut PgConnection,
    pipeline_id: Uuid,
    id: Uuid,
) -> Result<Option<Association>, sqlx::Error> {
    let associations = list_on(&mut *conn, pipeline_id).await?;
    Ok(associations.into_iter().find(|a| a.id == id))
}

/// Makes a `ready` association the pipeline's default; `false` when it is not `ready` (any
/// more) or not the pipeline's.
pub async fn set_default(pool: &PgPool, pipeline_id: Uuid, id: Uuid) -> Result<bool, sqlx::Error> {
    let mut tx = pool.begin().await?;
    let ready: Option<bool> = sqlx::query_scalar(
        "SELECT status = 'ready' FROM vector_embeddings WHERE id = $1 AND pipeline_id = $2 FOR UPDATE",
    )
    .bind(id)
    .bind(pipeline_id)
    .fetch_optional(&mut *tx)
    .await?;
    if ready != Some(true) {
        return Ok(false);
    }
    sqlx::query(
        "UPDATE vector_embeddings SET is_default = false WHERE pipeline_id = $1 AND is_default AND id <> $2",
    )
    .bind(pipeline_id)
    .bind(id)
    .execute(&mut *tx)
    .await?;
    sqlx::query("UPDATE vector_embeddings SET is_default = true WHERE id = $1 AND NOT is_default")
        .bind(id)
        .execute(&mut *tx)
        .await?;
    sqlx::query("UPDATE pipelines SET updated_at = now() WHERE id = $1")
        .bind(pipeline_id)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(true)
}

/// Why an association could not be removed.
#[derive(Debug)]
pub enum RemoveError {
    NotFound,
    /// It is the pipeline's default.
    Default,
    Database(sqlx::Error),
}

impl From<sqlx::Error> for RemoveError {
    fn from(error: sqlx::Error) -> Self {
        Self::Database(error)
    }
}

/// Removes an association that is not the default, with its vectors and indexes (a backfill
/// in progress finds it gone and stops). The pipeline's row is taken first, as a pipeline
/// delete does, so groups storing fragments into its table finish before it is dropped.
pub async fn remove(pool: &PgPool, pipeline_id: Uuid, id: Uuid) -> Result<(), RemoveError> {
    let mut tx = pool.begin().await?;
    sqlx::query("SELECT 1 FROM pipelines WHERE id = $1 FOR UPDATE")
        .bind(pipeline_id)
        .execute(&mut *tx)
        .await?;
    let default: Option<bool> = sqlx::query_scalar(
        "SELECT is_default FROM vector_embeddings WHERE id = $1 AND pipeline_id = $2",
    )
    .bind(id)
    .bind(pipeline_id)
    .fetch_optional(&mut *tx)
    .await?;
    match default {
        None => return Err(RemoveError::NotFound),
        Some(true) => return Err(RemoveError::Default),
        Some(false) => {}
    }
    vectors::drop_table(&mut tx, id).await?;
    sqlx::query("DELETE FROM vector_embeddings WHERE id = $1")
        .bind(id)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(())
}

// ---- The backfill (workers) ---------------------------------------------------------------

/// A backfill as a job reads it.
#[derive(Debug, sqlx::FromRow)]
pub struct Backfill {
    pub pipeline_id: Uuid,
    pub embedding_model_id: Uuid,
    pub dimensions: i32,
    pub status: String,
    pub fragments_total: i64,
    pub fragments_done: i64,
    pub ranges: i32,
    pub ranges_done: i64,
    /// The ranges' inner bounds (`ranges - 1` fragment ids, ascending).
    pub bounds: Option<Vec<Uuid>>,
    pub attempts: i32,
}

impl Backfill {
    /// The ids of range `r`: above its lower bound (inclusive) and below its upper one.
    pub fn range(&self, r: u32) -> (Option<Uuid>, Option<Uuid>) {
        let bounds = self.bounds.as_deref().unwrap_or_default();
        let r = r as usize;
        let lower = r.checked_sub(1).and_then(|i| bounds.get(i)).copied();
        let upper = bounds.get(r).copied();
        (lower, upper)
    }

    /// Whether every range has been walked.
    pub fn all_ranges_done(&self) -> bool {
        let ranges = u32::try_from(self.ranges).unwrap_or(0).min(63);
        let all = (1_i64 << ranges) - 1;
        self.ranges_done & all == all
    }
}

/// The backfill of an association; `None` once it was removed.
pub async fn backfill(pool: &PgPool, id: Uuid) -> Result<Option<Backfill>, sqlx::Error> {
    sqlx::query_as(
        "SELECT ve.pipeline_id, ve.embedding_model_id, ve.dimensions, ve.status,
                b.fragments_total, b.fragments_done, b.ranges, b.ranges_done, b.bounds, b.attempts
         FROM vector_embeddings ve JOIN vector_embedding_backfills b ON b.vector_embedding_id = ve.id
         WHERE ve.id = $1",
    )
    .bind(id)
    .fetch_optional(pool)
    .await
}

/// A current fragment without a vector: its id and encrypted text.
#[derive(Debug, sqlx::FromRow)]
pub struct MissingFragment {
    pub id: Uuid,
    pub content: Vec<u8>,
}

/// The next `limit` current fragments of the pipeline without a vector in the association's
/// table, in id order: those of `range` after `after` (exclusive) or, without a range, any.
pub async fn missing_fragments(
    pool: &PgPool,
    pipeline_id: Uuid,
    id: Uuid,
    range: (Option<Uuid>, Option<Uuid>),
    after: Option<Uuid>,
    limit: i64,
) -> Result<Vec<MissingFragment>, sqlx::Error> {
    let table = vectors::table_name(id);
    sqlx::query_as(AssertSqlSafe(format!(
        "SELECT f.id, f.content FROM fragments f
         WHERE f.pipeline_id = $1 AND f.expired_at IS NULL
           AND ($2::uuid IS NULL OR f.id >= $2) AND ($3::uuid IS NULL OR f.id < $3)
           AND ($4::uuid IS NULL OR f.id > $4)
           AND NOT EXISTS (SELECT 1 FROM {table} v WHERE v.fragment_id = f.id)
         ORDER BY f.id LIMIT $5"
    )))
    .bind(pipeline_id)
    .bind(range.0)
    .bind(range.1)
    .bind(after)
    .bind(limit)
    .fetch_all(pool)
    .await
}

/// Stores backfilled vectors (`flat`: one of `dimensions` per id, back to back) and counts
/// them done, in one transaction. The fragments are locked (shared) first, so an expiry or a
/// delete of one of them either finished before (its state is copied as it left it, a deleted
/// one is skipped) or waits and then sees the vector. A vector stored meanwhile by a group is
/// kept. Returns how many were stored; `None` when the association is gone.
pub async fn store_backfilled(
    pool: &PgPool,
    id: Uuid,
    dimensions: i32,
    ids: &[Uuid],
    flat: &[f32],
) -> Result<Option<u64>, sqlx::Error> {
    let mut tx = pool.begin().await?;
    let present: Option<i32> = sqlx::query_scalar(
        "SELECT 1 FROM vector_embeddings WHERE id = $1 AND status = 'backfilling' FOR KEY SHARE",
    )
    .bind(id)
    .fetch_optional(&mut *tx)
    .await?;
    if present.is_none() {
        return Ok(None);
    }
    sqlx::query("SELECT 1 FROM fragments WHERE id = ANY($1) ORDER BY id FOR SHARE")
        .bind(ids)
        .execute(&mut *tx)
        .await?;
    let width = usize::try_from(dimensions).unwrap_or(0).max(1);
    let vectors: Vec<Vector> = flat
        .chunks(width)
        .map(|values| Vector::from(values.to_vec()))
        .collect();
    let table = vectors::table_name(id);
    let stored = sqlx::query(AssertSqlSafe(format!(
        "INSERT INTO {table} (fragment_id, embedding, classification, metadata, live)
         SELECT f.id, u.embedding, f.classification, f.metadata, f.expired_at IS NULL
         FROM unnest($1::uuid[], $2::vector[]) AS u (id, embedding)
         JOIN fragments f ON f.id = u.id
         ON CONFLICT (fragment_id) DO NOTHING"
    )))
    .bind(ids)
    .bind(&vectors)
    .execute(&mut *tx)
    .await?
    .rows_affected();
    if !vectors::all_unit(flat, usize::try_from(dimensions).unwrap_or(0)) {
        sqlx::query(
            "UPDATE vector_embeddings SET unit_vectors = false WHERE id = $1 AND unit_vectors",
        )
        .bind(id)
        .execute(&mut *tx)
        .await?;
    }
    sqlx::query(
        "UPDATE vector_embedding_backfills
         SET fragments_done = fragments_done + $2,
             fragments_total = greatest(fragments_total, fragments_done + $2),
             attempts = 0, progress_at = now()
         WHERE vector_embedding_id = $1",
    )
    .bind(id)
    .bind(i64::try_from(stored).unwrap_or(i64::MAX))
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(Some(stored))
}

/// Records range `r` walked; returns the backfill as it is then.
pub async fn range_done(pool: &PgPool, id: Uuid, r: u32) -> Result<Option<Backfill>, sqlx::Error> {
    sqlx::query(
        "UPDATE vector_embedding_backfills SET ranges_done = ranges_done | (1::int8 << $2), progress_at = now()
         WHERE vector_embedding_id = $1",
    )
    .bind(id)
    .bind(i32::try_from(r.min(62)).unwrap_or(0))
    .execute(pool)
    .await?;
    backfill(pool, id).await
}

/// What [`finish`] found.
#[derive(Debug, PartialEq, Eq)]
pub enum Finish {
    /// The association is `ready` now (or was already).
    Ready,
    /// Current fragments still lack a vector (stored by groups that had not seen the
    /// association): to embed before finishing again.
    Missing,
    /// The association is gone or failed.
    Gone,
}

/// Marks the association `ready` if no current fragment of its pipeline lacks a vector,
/// checked while holding the pipeline's row, so that no group stores fragments without it
/// afterwards; it becomes the pipeline's default if the pipeline has none.
pub async fn finish(pool: &PgPool, id: Uuid) -> Result<Finish, sqlx::Error> {
    let mut tx = pool.begin().await?;
    let found: Option<(Uuid, String)> =
        sqlx::query_as("SELECT pipeline_id, status FROM vector_embeddings WHERE id = $1")
            .bind(id)
            .fetch_optional(&mut *tx)
            .await?;
    let Some((pipeline_id, status)) = found else {
        return Ok(Finish::Gone);
    };
    match status.as_str() {
        STATUS_READY => return Ok(Finish::Ready),
        STATUS_FAILED => return Ok(Finish::Gone),
        _ => {}
    }
    sqlx::query("SELECT 1 FROM pipelines WHERE id = $1 FOR UPDATE")
        .bind(pipeline_id)
        .execute(&mut *tx)
        .await?;
    let table = vectors::table_name(id);
    let missing: bool = sqlx::query_scalar(AssertSqlSafe(format!(
        "SELECT EXISTS (SELECT 1 FROM fragments f WHERE f.pipeline_id = $1 AND f.expired_at IS NULL
                        AND NOT EXISTS (SELECT 1 FROM {table} v WHERE v.fragment_id = f.id))"
    )))
    .bind(pipeline_id)
    .fetch_one(&mut *tx)
    .await?;
    if missing {
        return Ok(Finish::Missing);
    }
    sqlx::query(
        "UPDATE vector_embeddings
         SET status = 'ready',
             is_default = NOT EXISTS (SELECT 1 FROM vector_embeddings d
                                      WHERE d.pipeline_id = $2 AND d.is_default)
         WHERE id = $1 AND status = 'backfilling'",
    )
    .bind(id)
    .bind(pipeline_id)
    .execute(&mut *tx)
    .await?;
    sqlx::query(
        "UPDATE vector_embedding_backfills SET fragments_total = fragments_done, progress_at = now()
         WHERE vector_embedding_id = $1",
    )
    .bind(id)
    .execute(&mut *tx)
    .await?;
    sqlx::query("UPDATE pipelines SET updated_at = now() WHERE id = $1")
        .bind(pipeline_id)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(Finish::Ready)
}

/// Counts a failed delivery of a backfill job; at `most` in a row the association turns
/// `failed` with `reason`. Returns whether it did.
pub async fn attempt_failed(
    pool: &PgPool,
    id: Uuid,
    most: i32,
    reason: &str,
) -> Result<bool, sqlx::Error> {
    let mut tx = pool.begin().await?;
    let attempts: Option<i32> = sqlx::query_scalar(
        "UPDATE vector_embedding_backfills SET attempts = attempts + 1, progress_at = now()
         WHERE vector_embedding_id = $1 RETURNING attempts",
    )
    .bind(id)
    .fetch_optional(&mut *tx)
    .await?;
    let failed = attempts.is_some_and(|a| a >= most);
    if failed {
        sqlx::query(
            "UPDATE vector_embeddings SET status = 'failed', status_reason = $2
             WHERE id = $1 AND status = 'backfilling'",
        )
        .bind(id)
        .bind(reason)
        .execute(&mut *tx)
        .await?;
    }
    tx.commit().await?;
    Ok(failed)
}

/// Backfills without progress for `quiet` (their jobs lost, e.g. published by a process that
/// died before JetStream stored them): each with its ranges not walked yet, and its progress
/// time moved to now so that the next sweep waits again.
pub async fn stalled(
    pool: &PgPool,
    quiet: std::time::Duration,
) -> Result<Vec<(Uuid, Uuid, Vec<u32>)>, sqlx::Error> {
    let rows: Vec<(Uuid, Uuid, i32, i64)> = sqlx::query_as(
        "UPDATE vector_embedding_backfills b SET progress_at = now()
         FROM vector_embeddings ve
         WHERE ve.id = b.vector_embedding_id AND ve.status = 'backfilling'
           AND b.progress_at < now() - make_interval(secs => $1)
         RETURNING ve.id, ve.pipeline_id, b.ranges, b.ranges_done",
    )
    .bind(quiet.as_secs_f64())
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(id, pipeline_id, ranges, done)| {
            let ranges = u32::try_from(ranges).unwrap_or(0).min(63);
            let mut open: Vec<u32> = (0..ranges).filter(|r| done & (1_i64 << r) == 0).collect();
            if open.is_empty() {
                // Every range walked, not finished: one job finishes it.
                open.push(0);
            }
            (id, pipeline_id, open)
        })
        .collect())
}

/// Fragments left to backfill per association in `backfilling` (for the gauge).
pub async fn remaining(pool: &PgPool) -> Result<Vec<(Uuid, i64)>, sqlx::Error> {
    sqlx::query_as(
        "SELECT ve.id, greatest(b.fragments_total - b.fragments_done, 0)
         FROM vector_embeddings ve JOIN vector_embedding_backfills b ON b.vector_embedding_id = ve.id
         WHERE ve.status = 'backfilling'",
    )
    .fetch_all(pool)
    .await
}
