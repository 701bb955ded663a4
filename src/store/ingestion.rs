//! The worker's reads and writes: the pipeline of a group, the group's versions with their
//! texts, the set-based store of a group in one transaction, the planner statistics of the
//! tables a group grew, the sweep of versions pending too long, and the outbox of jobs whose
//! publication was never confirmed.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::{AssertSqlSafe, PgPool};
use uuid::Uuid;

use super::documents::DocumentStatus;
use super::vectors;

/// What the worker needs of a group's pipeline.
#[derive(Debug, sqlx::FromRow)]
pub struct PipelineForWork {
    pub default_text_splitter_id: Uuid,
    pub has_full_text_search: bool,
    /// The pipeline's default vector embedding (association), if it has a model.
    pub ve_id: Option<Uuid>,
    pub embedding_model_id: Option<Uuid>,
    pub dimensions: Option<i32>,
    pub metadata_schema: Value,
    /// Every association a group embeds its fragments with (`ready` or `backfilling`), the
    /// default first, as parallel arrays.
    pub association_ids: Vec<Uuid>,
    pub association_models: Vec<Uuid>,
    pub association_dimensions: Vec<i32>,
}

impl PipelineForWork {
    /// The associations a group embeds its fragments with, the default first.
    pub fn vector_tables(&self) -> Vec<(VectorTable, Uuid)> {
        self.association_ids
            .iter()
            .zip(&self.association_models)
            .zip(&self.association_dimensions)
            .map(|((&vector_embedding_id, &model), &dimensions)| {
                (
                    VectorTable {
                        vector_embedding_id,
                        dimensions,
                    },
                    model,
                )
            })
            .collect()
    }
}

/// The associations a group stores vectors in: `ready` or `backfilling`, the default first.
const WORK_ASSOCIATIONS: &str = "FROM vector_embeddings a
    WHERE a.pipeline_id = p.id AND a.status <> 'failed'
    ORDER BY a.is_default DESC, a.created_at, a.id";

/// The pipeline of a group; `None` once it has been deleted.
pub async fn pipeline_for_work(
    pool: &PgPool,
    pipeline_id: Uuid,
) -> Result<Option<PipelineForWork>, sqlx::Error> {
    sqlx::query_as(AssertSqlSafe(format!(
        "SELECT p.default_text_splitter_id, p.has_full_text_search, ve.id AS ve_id, ve.embedding_model_id,
                ve.dimensions, p.metadata_schema,
                ARRAY(SELECT a.id {WORK_ASSOCIATIONS}) AS association_ids,
                ARRAY(SELECT a.embedding_model_id {WORK_ASSOCIATIONS}) AS association_models,
                ARRAY(SELECT a.dimensions {WORK_ASSOCIATIONS}) AS association_dimensions
         FROM pipelines p LEFT JOIN vector_embeddings ve ON ve.pipeline_id = p.id AND ve.is_default
         WHERE p.id = $1"
    )))
    .bind(pipeline_id)
    .fetch_optional(pool)
    .await
}

/// A version named by a job, as stored now.
#[derive(Debug, sqlx::FromRow)]
pub struct JobVersion {
    pub id: Uuid,
    pub version: i64,
    #[sqlx(try_from = "String")]
    pub status: DocumentStatus,
    pub classification: String,
    pub metadata: Value,
    pub text_splitter_id: Option<Uuid>,
    pub expired_at: Option<DateTime<Utc>>,
    pub expire_older_versions: bool,
    /// The document has older versions.
    pub has_older: bool,
    /// The encrypted raw text, until the version is processed (`None` for a file: its bytes
    /// are read one file at a time, [`file_bytes`]).
    pub text: Option<Vec<u8>>,
    /// A file's format, until the version is processed; `None` for a plain text.
    pub format: Option<String>,
}

/// The versions `(ids[i], versions[i])` that still exist, in one statement.
pub async fn job_versions(
    pool: &PgPool,
    ids: &[Uuid],
    versions: &[i64],
) -> Result<Vec<JobVersion>, sqlx::Error> {
    sqlx::query_as(
        "SELECT d.id, d.version, d.status, d.classification, d.metadata, d.text_splitter_id, d.expired_at,
                d.expire_older_versions,
                EXISTS (SELECT 1 FROM documents o WHERE o.id = d.id AND o.version < d.version) AS has_older,
                CASE WHEN t.format IS NULL THEN t.text END AS text, t.format
         FROM unnest($1::uuid[], $2::bigint[]) AS j (id, version)
         JOIN documents d ON d.id = j.id AND d.version = j.version
         LEFT JOIN document_texts t ON t.document_id = d.id AND t.version = d.version",
    )
    .bind(ids)
    .bind(versions)
    .fetch_all(pool)
    .await
}

/// The encrypted bytes of a file submitted as a document, until it is processed.
pub async fn file_bytes(
    pool: &PgPool,
    id: Uuid,
    version: i64,
) -> Result<Option<Vec<u8>>, sqlx::Error> {
    sqlx::query_scalar("SELECT text FROM document_texts WHERE document_id = $1 AND version = $2")
        .bind(id)
        .bind(version)
        .fetch_optional(pool)
        .await
}

/// Marks a version still `pending` `failed` with the reason (a file whose text could not be
/// extracted) and drops its raw bytes, in one transaction. Returns whether it was pending.
pub async fn mark_failed_with_reason(
    pool: &PgPool,
    id: Uuid,
    version: i64,
    reason: &str,
) -> Result<bool, sqlx::Error> {
    let mut tx = pool.begin().await?;
    let updated = sqlx::query(
        "UPDATE documents SET status = 'failed', status_reason = $3, updated_at = now()
         WHERE id = $1 AND version = $2 AND status = 'pending'",
    )
    .bind(id)
    .bind(version)
    .bind(reason)
    .execute(&mut *tx)
    .await?
    .rows_affected();
    sqlx::query("DELETE FROM document_texts WHERE document_id = $1 AND version = $2")
        .bind(id)
        .bind(version)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(updated > 0)
}

/// A text splitter's provider and parameters.
pub async fn splitter(pool: &PgPool, id: Uuid) -> Result<Option<(String, Value)>, sqlx::Error> {
    sqlx::query_as("SELECT provider, parameters FROM text_splitters WHERE id = $1")
        .bind(id)
        .fetch_optional(pool)
        .await
}

/// One fragment ready to store.
#[derive(Debug)]
pub struct NewFragment<'a> {
    /// The text, encrypted.
    pub content: Vec<u8>,
    /// The plain text and its text search configuration, for the full-text vector (`None`
    /// without full-text search).
    pub full_text: Option<(&'a str, &'static str)>,
}

/// A processed version ready to store.
#[derive(Debug)]
pub struct ProcessedVersion<'a> {
    pub document_id: Uuid,
    pub version: i64,
    pub classification: &'a str,
    pub metadata: &'a Value,
    pub expired_at: Option<DateTime<Utc>>,
    /// Older versions expire with this one's success.
    pub expires_older: bool,
    pub fragments: Vec<NewFragment<'a>>,
    /// Per vector table of the group (in its order), the fragments' vectors, concatenated.
    pub vectors: Vec<&'a [f32]>,
}

/// Where a group's vectors go: the association and its dimension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VectorTable {
    pub vector_embedding_id: Uuid,
    pub dimensions: i32,
}

/// Stores a group's versions in one transaction with a fixed number of statements: only the
/// versions still `pending` (locked first) are stored, so a job delivered twice never
/// duplicates fragments. Returns, per version, whether it was stored.
///
/// The versions' rows are written ordered by the string values of `order_by` in their
/// metadata (`metadata_schema::write_order_fields`), then by classification, so the rows of one
/// value sit together in the vector table, and an exact search through the field's index
/// reads fewer pages: on the service benchmark the 3,050 vectors of a 5 % category lie on 923
/// of the table's 14,963 pages instead of 1,525.
///
/// The vectors go to each of `tables` that is still an association of the pipeline. Its
/// associations are read once the pipeline's row is held (an association is added while
/// holding it exclusively): one that is `ready` and not among `tables` was finished since the
/// group read them, and the group is refused ([`StoreError::AssociationsChanged`], to embed
/// again); one in `backfilling` gets its vectors from the backfill, which checks under the
/// same lock that none is missing before it finishes.
///
/// With `build_index`, the association's deferred HNSW index is built in the same transaction
/// once the group is stored (a burst's last group), so that its versions become `success` with
/// the index that searches walk and with `fragments` analysed, and none of its vectors is
/// inserted into the new graph one by one. The build waits for the groups writing to the table
/// and holds off those that come later; it is skipped when another builder holds the
/// association. If the build fails, the group is stored without it (the error is returned in
/// [`StoredGroup::index`]) and the index stays deferred for a later build.
pub async fn store_group(
    pool: &PgPool,
    pipeline_id: Uuid,
    tables: &[VectorTable],
    versions: &[ProcessedVersion<'_>],
    order_by: &[String],
    build_index: Option<Uuid>,
) -> Result<StoredGroup, StoreError> {
    if versions.is_empty() {
        return Ok(StoredGroup::default());
    }
    let mut tx = pool.begin().await?;
    // No statement timeout for the group: its statements are bounded by its size, and its
    // insert into the vector table waits for a deferred index build (minutes for a large
    // association); cancelled, the group would return to the queue and wait again.
    sqlx::query("SELECT set_config('statement_timeout', '0', true)")
        .execute(&mut *tx)
        .await?;
    // The pipeline's row first, as document deletes do: a pipeline delete (which locks it
    // exclusively before dropping the vector table) waits for the group, or the group for it.
    sqlx::query("SELECT 1 FROM pipelines WHERE id = $1 FOR KEY SHARE")
        .bind(pipeline_id)
        .execute(&mut *tx)
        .await?;
    let current: Vec<(Uuid, bool)> = sqlx::query_as(
        "SELECT id, status = 'ready' FROM vector_embeddings
         WHERE pipeline_id = $1 AND status <> 'failed'",
    )
    .bind(pipeline_id)
    .fetch_all(&mut *tx)
    .await?;
    let known = |id: Uuid| tables.iter().any(|t| t.vector_embedding_id == id);
    if current.iter().any(|&(id, ready)| ready && !known(id)) {
        return Err(StoreError::AssociationsChanged);
    }
    let still = |table: &VectorTable| {
        current
            .iter()
            .any(|&(id, _)| id == table.vector_embedding_id)
    };
    let builder = match build_index {
        Some(id) if current.iter().any(|&(current, _)| current == id) => {
            let locked = vectors::try_build_lock(&mut tx, id).await?;
            if locked {
                vectors::lock_for_build(&mut tx, id).await?;
            }
            locked.then_some(id)
        }
        _ => None,
    };
    let pending = lock_pending_versions(&mut tx, versions).await?;
    let stored: Vec<bool> = versions
        .iter()
        .map(|v| pending.contains(&(v.document_id, v.version)))
        .collect();
    let fragments = FragmentColumns::of(versions, &stored, order_by, tables.len());
    insert_fragments(&mut tx, pipeline_id, &fragments).await?;
    let live: Vec<bool> = fragments.expired.iter().map(Option::is_none).collect();
    for (table, flat) in tables.iter().zip(&fragments.vectors) {
        if flat.is_empty() || !still(table) {
            continue;
        }
        let rows = vectors::NewVectors {
            ids: &fragments.ids,
            flat,
            classifications: &fragments.classifications,
            metadata: &fragments.metadata,
            live: &live,
        };
        vectors::insert(&mut tx, table.vector_embedding_id, table.dimensions, &rows).await?;
    }
    mark_success(&mut tx, &pending).await?;
    let expired = expire_older_versions(&mut tx, versions, &stored).await?;
    for &(id, _) in &current {
        vectors::expire(&mut tx, id, &expired).await?;
    }
    let index = match builder {
        Some(vector_embedding_id) => Some(build_in_group(&mut tx, vector_embedding_id).await?),
        None => None,
    };
    tx.commit().await?;
    Ok(StoredGroup {
        stored,
        index,
        fragment_ids: fragments.ids,
    })
}

/// Reads the fragments of a committed group and their vectors once, which records in each row
/// that its transaction committed (its hint bits). Until a reader does, every search that
/// meets a row asks the commit log about it, and the first to find it committed writes the
/// bit into its page: on 62,000 rows of 384 dimensions written by 600 transactions, the first
/// exact scan of a 5 % scope took 11.5 ms and the next ones 2.8. Reading a group's 2,700 rows
/// by key takes 2–3 ms a table, with the pages still in memory.
///
/// A reader may record a commit only once the log is flushed past it, and past every
/// asynchronous commit of the transactions numbered near it (Postgres keeps one log position
/// per 32 transactions): the log is flushed first, so that on a server run with
/// `synchronous_commit = off` the group's commit and those of other sessions do not hold the
/// record back.
pub async fn read_back(
    pool: &PgPool,
    vector_table: Option<VectorTable>,
    fragment_ids: &[Uuid],
) -> Result<(), sqlx::Error> {
    if fragment_ids.is_empty() {
        return Ok(());
    }
    let vectors = vector_table.map_or_else(
        || "0".to_owned(),
        |table| {
            format!(
                "(SELECT count(*) FROM {} WHERE fragment_id = ANY($1))",
                vectors::table_name(table.vector_embedding_id)
            )
        },
    );
    let mut conn = pool.acquire().await?;
    // Read back even if the flush fails (a server that refuses the function): the rows of a
    // synchronously committed group are recorded all the same.
    let flushed = sqlx::query("SELECT pg_logical_emit_message(false, 'trove', '', true)")
        .execute(&mut *conn)
        .await;
    sqlx::query(AssertSqlSafe(format!(
        "SELECT (SELECT count(*) FROM fragments WHERE id = ANY($1)), {vectors}"
    )))
    .bind(fragment_ids)
    .execute(&mut *conn)
    .await?;
    flushed.map(|_| ())
}

/// Why [`store_group`] stored nothing.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{0}")]
    Database(#[from] sqlx::Error),
    /// An association the group has no vectors for became `ready` since it was read.
    #[error("the pipeline's embedding models changed while the group was embedded")]
    AssociationsChanged,
}

/// What [`store_group`] did.
#[derive(Debug, Default)]
pub struct StoredGroup {
    /// Per version, whether it was stored.
    pub stored: Vec<bool>,
    /// The deferred index's build, when the group built it: `Ok(false)` when it was no longer
    /// deferred; an error when it failed (the group was stored without it).
    pub index: Option<Result<bool, sqlx::Error>>,
    /// The fragments stored, for [`read_back`].
    pub fragment_ids: Vec<Uuid>,
}

/// Builds the association's deferred index and analyses `fragments` in a group's transaction,
/// under a savepoint: a failure is rolled back to it and returned, and the group commits.
async fn build_in_group(
    tx: &mut sqlx::PgConnection,
    vector_embedding_id: Uuid,
) -> Result<Result<bool, sqlx::Error>, sqlx::Error> {
    sqlx::raw_sql("SAVEPOINT deferred_index_build")
        .execute(&mut *tx)
        .await?;
    let built = build_and_analyze(tx, vector_embedding_id).await;
    let end = if built.is_ok() {
        "RELEASE SAVEPOINT deferred_index_build"
    } else {
        "ROLLBACK TO SAVEPOINT deferred_index_build"
    };
    sqlx::raw_sql(end).execute(&mut *tx).await?;
    Ok(built)
}

/// Builds the recorded index, then analyses `fragments` and the vector table before the build
/// commits: at the end of a burst their statistics (which estimate the scopes of searches, and
/// choose how the exact path reads a scope from the vector table) were sampled when they held a
/// fraction of the burst (a group analyses a table only while it adds a fifth of its rows, and
/// autovacuum's next analysis may come a minute later), so a value that only later documents
/// carry would be estimated from a sample without it. The analyses see the transaction's own
/// rows; that of `fragments` took 0.4 s after a burst of 59,833 fragments.
async fn build_and_analyze(
    conn: &mut sqlx::PgConnection,
    vector_embedding_id: Uuid,
) -> Result<bool, sqlx::Error> {
    if !vectors::build_recorded_index(conn, vector_embedding_id).await? {
        return Ok(false);
    }
    analyze_in(conn, GrownTable::Fragments).await?;
    analyze_in(conn, GrownTable::Vectors(vector_embedding_id)).await?;
    Ok(true)
}

/// Builds a deferred HNSW index on its own (the burst's last group did not, or the process
/// died before): the build lock, the build, the analysis and the clearing of the record in one
/// transaction. `Ok(false)` when another builder holds the association or the index is not
/// deferred.
pub async fn build_deferred_index(
    pool: &PgPool,
    vector_embedding_id: Uuid,
) -> Result<bool, sqlx::Error> {
    let mut tx = pool.begin().await?;
    if !vectors::try_build_lock(&mut tx, vector_embedding_id).await? {
        return Ok(false);
    }
    let built = build_and_analyze(&mut tx, vector_embedding_id).await?;
    tx.commit().await?;
    Ok(built)
}

/// Locks the group's versions and returns those still `pending` as `(document id, version)`;
/// the others were stored by an earlier delivery or deleted.
///
/// The versions are found by their key and their status tested once they are locked (the
/// row a lock waited for is read again, as the updater left it). With `status = 'pending'` in
/// the statement, the planner could read them through the index of pending versions, whose
/// statistics, taken when few were pending, put them at one row: during a burst of 20,000
/// pending versions each group read all of them into a hash join (17 ms a group at 15,000,
/// against under 1 ms by key).
async fn lock_pending_versions(
    tx: &mut sqlx::PgConnection,
    versions: &[ProcessedVersion<'_>],
) -> Result<Vec<(Uuid, i64)>, sqlx::Error> {
    let (ids, numbers): (Vec<Uuid>, Vec<i64>) =
        versions.iter().map(|v| (v.document_id, v.version)).unzip();
    let locked: Vec<(Uuid, i64, bool)> = sqlx::query_as(
        "SELECT d.id, d.version, d.status = 'pending' FROM documents d
         JOIN unnest($1::uuid[], $2::bigint[]) AS j (id, version) ON d.id = j.id AND d.version = j.version
         FOR UPDATE OF d",
    )
    .bind(&ids)
    .bind(&numbers)
    .fetch_all(&mut *tx)
    .await?;
    Ok(locked
        .into_iter()
        .filter(|(_, _, pending)| *pending)
        .map(|(id, version, _)| (id, version))
        .collect())
}

/// Inserts the stored versions' fragments in one statement, with their full-text vectors
/// built by the database from the plain text (which is not kept; `fragment_tsvector`, of
/// migration 21, bounds a vector to what Postgres can hold).
async fn insert_fragments(
    tx: &mut sqlx::PgConnection,
    pipeline_id: Uuid,
    fragments: &FragmentColumns<'_>,
) -> Result<(), sqlx::Error> {
    if fragments.ids.is_empty() {
        return Ok(());
    }
    sqlx::query(
        "INSERT INTO fragments (id, pipeline_id, document_id, version, order_id, classification, metadata,
                                content, expired_at, tsv)
         SELECT u.id, $1, u.document_id, u.version, u.order_id, u.classification, u.metadata, u.content,
                u.expired_at, fragment_tsvector(u.cfg::regconfig, u.txt)
         FROM unnest($2::uuid[], $3::uuid[], $4::bigint[], $5::int[], $6::text[], $7::jsonb[], $8::bytea[],
                     $9::timestamptz[], $10::text[], $11::text[])
              AS u (id, document_id, version, order_id, classification, metadata, content, expired_at, txt, cfg)",
    )
    .bind(pipeline_id)
    .bind(&fragments.ids)
    .bind(&fragments.document_ids)
    .bind(&fragments.versions)
    .bind(&fragments.order_ids)
    .bind(&fragments.classifications)
    .bind(&fragments.metadata)
    .bind(&fragments.contents)
    .bind(&fragments.expired)
    .bind(&fragments.texts)
    .bind(&fragments.configs)
    .execute(&mut *tx)
    .await?;
    Ok(())
}

/// Marks the stored versions `success` and drops their raw texts.
async fn mark_success(
    tx: &mut sqlx::PgConnection,
    stored: &[(Uuid, i64)],
) -> Result<(), sqlx::Error> {
    let (ids, numbers): (Vec<Uuid>, Vec<i64>) = stored.iter().copied().unzip();
    sqlx::query(
        "UPDATE documents d SET status = 'success', updated_at = now()
         FROM unnest($1::uuid[], $2::bigint[]) AS j (id, version) WHERE d.id = j.id AND d.version = j.version",
    )
    .bind(&ids)
    .bind(&numbers)
    .execute(&mut *tx)
    .await?;
    sqlx::query(
        "DELETE FROM document_texts t USING unnest($1::uuid[], $2::bigint[]) AS j (id, version)
         WHERE t.document_id = j.id AND t.version = j.version",
    )
    .bind(&ids)
    .bind(&numbers)
    .execute(&mut *tx)
    .await?;
    Ok(())
}

/// A table a group grows, whose planner statistics the worker may refresh.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GrownTable {
    /// `fragments`.
    Fragments,
    /// An association's vector table.
    Vectors(Uuid),
}

impl GrownTable {
    /// The table's name: `fragments`, or the vector table's, rendered from its UUID (never
    /// from input).
    pub fn name(self) -> String {
        match self {
            Self::Fragments => "fragments".to_owned(),
            Self::Vectors(vector_embedding_id) => vectors::table_name(vector_embedding_id),
        }
    }
}

/// `pg_class.reltuples` of each table, in order: the rows its last analysis (or vacuum)
/// counted, negative when it was never analysed; `None` for a table that no longer exists.
pub async fn analysed_rows(
    pool: &PgPool,
    tables: &[GrownTable],
) -> Result<Vec<Option<f32>>, sqlx::Error> {
    let names: Vec<String> = tables.iter().map(|t| t.name()).collect();
    sqlx::query_scalar(
        "SELECT c.reltuples FROM unnest($1::text[]) WITH ORDINALITY AS t (name, n)
         LEFT JOIN pg_class c ON c.oid = to_regclass(t.name)
         ORDER BY t.n",
    )
    .bind(&names)
    .fetch_all(pool)
    .await
}

/// `ANALYZE` of a table, in a transaction of its own (not the group's); skipped when another
/// analysis of it, or autovacuum, holds the table. The server's warning for a skip is not
/// asked for: a skip is expected under load (autovacuum analyses the table next), and the
/// client logged every one of them at WARN.
pub async fn analyze(pool: &PgPool, table: GrownTable) -> Result<(), sqlx::Error> {
    let mut tx = pool.begin().await?;
    analyze_in(&mut tx, table).await?;
    tx.commit().await
}

/// `ANALYZE (SKIP_LOCKED)` of a table in the caller's transaction, its skip warning not asked
/// for ([`analyze`]).
async fn analyze_in(conn: &mut sqlx::PgConnection, table: GrownTable) -> Result<(), sqlx::Error> {
    sqlx::query("SELECT set_config('client_min_messages', 'error', true)")
        .execute(&mut *conn)
        .await?;
    sqlx::raw_sql(AssertSqlSafe(format!(
        "ANALYZE (SKIP_LOCKED) {}",
        table.name()
    )))
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// Older versions expire now that their successor succeeded; returns their fragments.
async fn expire_older_versions(
    tx: &mut sqlx::PgConnection,
    versions: &[ProcessedVersion<'_>],
    stored: &[bool],
) -> Result<Vec<Uuid>, sqlx::Error> {
    let (ids, numbers): (Vec<Uuid>, Vec<i64>) = versions
        .iter()
        .zip(stored)
        .filter(|(v, keep)| **keep && v.expires_older)
        .map(|(v, _)| (v.document_id, v.version))
        .unzip();
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    sqlx::query(
        "UPDATE documents d SET expired_at = now(), updated_at = now()
         FROM unnest($1::uuid[], $2::bigint[]) AS j (id, version)
         WHERE d.id = j.id AND d.version < j.version AND d.expired_at IS NULL",
    )
    .bind(&ids)
    .bind(&numbers)
    .execute(&mut *tx)
    .await?;
    sqlx::query_scalar(
        "UPDATE fragments f SET expired_at = now()
         FROM unnest($1::uuid[], $2::bigint[]) AS j (id, version)
         WHERE f.document_id = j.id AND f.version < j.version AND f.expired_at IS NULL
         RETURNING f.id",
    )
    .bind(&ids)
    .bind(&numbers)
    .fetch_all(&mut *tx)
    .await
}

/// The fragments of the stored versions as parallel arrays, for one `unnest` insert.
#[derive(Default)]
struct FragmentColumns<'a> {
    ids: Vec<Uuid>,
    document_ids: Vec<Uuid>,
    versions: Vec<i64>,
    order_ids: Vec<i32>,
    classifications: Vec<&'a str>,
    metadata: Vec<&'a Value>,
    contents: Vec<&'a [u8]>,
    expired: Vec<Option<DateTime<Utc>>>,
    texts: Vec<Option<&'a str>>,
    configs: Vec<&'static str>,
    /// Per vector table, the vectors back to back.
    vectors: Vec<Vec<f32>>,
}

impl<'a> FragmentColumns<'a> {
    /// The fragments of the stored versions, the versions in the order of their metadata's
    /// string values of `order_by`, then their classification (otherwise as given).
    fn of(
        versions: &'a [ProcessedVersion<'a>],
        stored: &[bool],
        order_by: &[String],
        tables: usize,
    ) -> Self {
        let mut kept: Vec<&ProcessedVersion<'a>> = versions
            .iter()
            .zip(stored)
            .filter_map(|(v, keep)| keep.then_some(v))
            .collect();
        kept.sort_by_cached_key(|v| {
            let values: Vec<Option<&str>> = order_by
                .iter()
                .map(|field| v.metadata.get(field).and_then(Value::as_str))
                .collect();
            (values, v.classification)
        });
        let mut columns = Self {
            vectors: vec![Vec::new(); tables],
            ..Self::default()
        };
        for v in kept {
            for (order_id, fragment) in v.fragments.iter().enumerate() {
                columns.ids.push(Uuid::now_v7());
                columns.document_ids.push(v.document_id);
                columns.versions.push(v.version);
                columns
                    .order_ids
                    .push(i32::try_from(order_id).unwrap_or(i32::MAX));
                columns.classifications.push(v.classification);
                columns.metadata.push(v.metadata);
                columns.contents.push(&fragment.content);
                columns.expired.push(v.expired_at);
                let (text, config) = match fragment.full_text {
                    Some((text, config)) => (Some(text), config),
                    None => (None, trove_text::language::SIMPLE),
                };
                columns.texts.push(text);
                columns.configs.push(config);
            }
            for (flat, vectors) in columns.vectors.iter_mut().zip(&v.vectors) {
                flat.extend_from_slice(vectors);
            }
        }
        columns
    }
}

/// Versions still `pending` this long after submission become `failed`.
pub const PENDING_LIMIT_HOURS: i64 = 24;

/// Marks versions pending for more than 24 hours `failed` and drops their raw text; returns
/// how many.
pub async fn fail_stale_pending(pool: &PgPool) -> Result<u64, sqlx::Error> {
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

/// The job of a pending version whose publication was never confirmed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, sqlx::FromRow)]
pub struct UnconfirmedJob {
    pub pipeline_id: Uuid,
    pub document_id: Uuid,
    pub version: i64,
}

/// Claims, for one sweep, at most `limit` outbox entries older than `after` that no sweep
/// claimed within `after`, and returns the jobs of those whose versions are still `pending`
/// (the entries of the others, processed or failed meanwhile, are dropped). Rows another sweep
/// holds are skipped, and a claimed row is not claimed again for `after`: the job of a version
/// is published again at most once per `after`, even by many workers, and again after that
/// only if its entry is still there (the publish failed).
pub async fn claim_unconfirmed_jobs(
    pool: &PgPool,
    after: Duration,
    limit: i64,
) -> Result<Vec<UnconfirmedJob>, sqlx::Error> {
    sqlx::query_as(
        "WITH due AS (
             SELECT document_id, version FROM job_outbox
             WHERE created_at < now() - make_interval(secs => $1)
               AND (attempted_at IS NULL OR attempted_at < now() - make_interval(secs => $1))
             ORDER BY created_at LIMIT $2
             FOR UPDATE SKIP LOCKED
         ), moot AS (
             DELETE FROM job_outbox o USING due, documents d
             WHERE o.document_id = due.document_id AND o.version = due.version
               AND d.id = o.document_id AND d.version = o.version AND d.status <> 'pending'
         )
         UPDATE job_outbox o SET attempted_at = now()
         FROM due, documents d
         WHERE o.document_id = due.document_id AND o.version = due.version
           AND d.id = o.document_id AND d.version = o.version AND d.status = 'pending'
         RETURNING d.pipeline_id, o.document_id, o.version",
    )
    .bind(after.as_secs_f64())
    .bind(limit)
    .fetch_all(pool)
    .await
}

/// Removes the outbox entries of versions whose jobs JetStream has stored.
pub async fn forget_queued_jobs(
    pool: &PgPool,
    ids: &[Uuid],
    versions: &[i64],
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "DELETE FROM job_outbox o USING unnest($1::uuid[], $2::bigint[]) AS j (id, version)
         WHERE o.document_id = j.id AND o.version = j.version",
    )
    .bind(ids)
    .bind(versions)
    .execute(pool)
    .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_groups_rows_are_ordered_by_the_write_order_fields_then_classification() {
        let metadata = [
            json!({"category": "b", "year": 1}),
            json!({"category": "a"}),
            json!({"year": 2}),
            json!({"category": "b"}),
            json!({"category": "a"}),
        ];
        let classifications = ["public", "public", "public", "internal", "public"];
        // Two fragments per version, vectors of one dimension: the version's number twice.
        let vectors: Vec<[f32; 2]> = (0..5u8).map(|i| [f32::from(i); 2]).collect();
        let versions: Vec<ProcessedVersion<'_>> = (0..5)
            .map(|i| ProcessedVersion {
                document_id: Uuid::from_u128(i as u128),
                version: 1,
                classification: classifications[i],
                metadata: &metadata[i],
                expired_at: None,
                expires_older: true,
                fragments: (0..2)
                    .map(|_| NewFragment {
                        content: Vec::new(),
                        full_text: None,
                    })
                    .collect(),
                vectors: vec![&vectors[i], &vectors[i]],
            })
            .collect();
        let stored = [true, true, true, true, false];
        let check = |order_by: &[String], expected: [u8; 4]| {
            let columns = FragmentColumns::of(&versions, &stored, order_by, 2);
            let documents: Vec<u128> = columns.document_ids.iter().map(|id| id.as_u128()).collect();
            let each_twice: Vec<u8> = expected.iter().flat_map(|&d| [d, d]).collect();
            assert_eq!(
                documents,
                each_twice
                    .iter()
                    .map(|&d| u128::from(d))
                    .collect::<Vec<_>>()
            );
            assert_eq!(columns.order_ids, [0, 1, 0, 1, 0, 1, 0, 1]);
            // Each of the two vector tables gets them in the same order.
            let flat: Vec<f32> = each_twice.iter().map(|&d| f32::from(d)).collect();
            assert_eq!(columns.vectors, [flat.clone(), flat]);
        };
        // By classification alone; a version not stored is left out.
        check(&[], [3, 0, 1, 2]);
        // By category (absent first), then classification.
        check(&["category".to_owned()], [2, 1, 3, 0]);
    }
}
