//! Vector storage: one table per pipeline–model association, with the model's fixed dimension
//! and an HNSW index, so that an approximate search scans only that pipeline's vectors.
//!
//! Each row also holds what a search's scope tests of its fragment: the classification, the
//! metadata and whether the fragment is current (`live`; the vectors of expired fragments stay,
//! as their versions' fragment lists return them). An exact search then reads the scope from
//! this table alone, through its indexes on the classification and the declared fields
//! (`store::indexes`), and joins only the nearest to their fragments: a 5 % scope of 59,833
//! fragments in 2.7–3.1 ms against 4.6–5.4 ms when the scope was read from `fragments` and the
//! vectors by key. The indexes, the HNSW index included, hold the live rows only, so expiring
//! a fragment (a new row version, as every row page is full) adds nothing to them.
//!
//! DDL cannot bind identifiers or type modifiers. The only values that reach the text below
//! are a UUID rendered as 32 hex digits and an integer dimension checked to be 1..=2000, so no
//! input can change the statement's shape.

use pgvector::Vector;
use sqlx::{AssertSqlSafe, PgConnection};
use uuid::Uuid;

pub use crate::config::HnswParams;

/// The name of an association's vector table.
pub fn table_name(vector_embedding_id: Uuid) -> String {
    format!("vectors_{}", vector_embedding_id.simple())
}

/// The name of an association's HNSW index.
fn index_name(table: &str) -> String {
    format!("{table}_hnsw")
}

/// The planner's estimate of the rows of the table whose oid `oid` yields, as Postgres scales
/// it: the analysed rows per page times the table's pages now (`reltuples`, negative when never
/// analysed, while it has no pages or no analysis). A SQL expression of type `real`.
pub fn estimated_rows_sql(oid: &str) -> String {
    format!(
        "(SELECT CASE WHEN c.relpages > 0 AND c.reltuples >= 0
                      THEN (c.reltuples / c.relpages
                            * (pg_relation_size(c.oid) / current_setting('block_size')::int))::real
                      ELSE c.reltuples END
          FROM pg_class AS c WHERE c.oid = {oid})"
    )
}

/// The DDL of an association's HNSW index on `table` of vectors of `dimensions`: cosine
/// distance (the default strategy) over the vectors normalised to unit length in half
/// precision (`trove_query::search::half_precision_cosine_key`). A search sorts the rows it
/// fetches by their exact distance afterwards. Against the vectors as stored (`vector`, four
/// bytes a dimension), on 59,833 fragments of 384 dimensions: half the index's size (58 MB
/// against 117), its build 8.1 s against 9.1, the walk 10–13 % more searches/s at 8 clients
/// and recall@5 the same (0.980 against 0.983 at a list of 150, 0.966 against 0.962 at 100).
/// It holds the live rows only (a walk tests `live`).
pub fn hnsw_index_sql(table: &str, dimensions: u32, params: HnswParams) -> String {
    hnsw_index_ddl(
        "INDEX IF NOT EXISTS",
        &index_name(table),
        table,
        dimensions,
        params,
    )
}

/// `CREATE {create} {name} ON {table}` with the definition of [`hnsw_index_sql`].
fn hnsw_index_ddl(
    create: &str,
    name: &str,
    table: &str,
    dimensions: u32,
    params: HnswParams,
) -> String {
    format!(
        "CREATE {create} {name} ON {table} USING hnsw ({} halfvec_cosine_ops) \
         WITH (m = {}, ef_construction = {}) WHERE live",
        trove_query::search::half_precision_cosine_key("embedding", dimensions),
        params.m(),
        params.ef_construction()
    )
}

/// The DDL of the index on the classification of the live rows of `table`.
pub fn classification_index_sql(table: &str) -> String {
    format!("CREATE INDEX IF NOT EXISTS {table}_class ON {table} (classification) WHERE live")
}

/// Creates the table, its HNSW index (unless `index` is `None`: an association whose index is
/// built once its backfill is stored) and its classification index.
pub async fn create_table(
    conn: &mut PgConnection,
    vector_embedding_id: Uuid,
    dimensions: i32,
    index: Option<HnswParams>,
) -> Result<(), sqlx::Error> {
    debug_assert!(
        (1..=2000).contains(&dimensions),
        "dimensions are validated at model creation"
    );
    let dimensions = dimensions.clamp(1, 2000);
    let table = table_name(vector_embedding_id);
    sqlx::raw_sql(AssertSqlSafe(format!(
        "CREATE TABLE {table} (
            fragment_id uuid PRIMARY KEY REFERENCES fragments (id) ON DELETE CASCADE,
            embedding      vector({dimensions}) NOT NULL,
            classification text NOT NULL,
            metadata       jsonb NOT NULL,
            live           boolean NOT NULL
        );
        {};
        {};",
        index.map_or_else(String::new, |index| hnsw_index_sql(
            &table,
            dimensions.unsigned_abs(),
            index
        )),
        classification_index_sql(&table)
    )))
    .execute(conn)
    .await?;
    Ok(())
}

/// Drops an association's table (with its index).
pub async fn drop_table(
    conn: &mut PgConnection,
    vector_embedding_id: Uuid,
) -> Result<(), sqlx::Error> {
    let table = table_name(vector_embedding_id);
    sqlx::raw_sql(AssertSqlSafe(format!("DROP TABLE IF EXISTS {table}")))
        .execute(conn)
        .await?;
    Ok(())
}

/// An association's HNSW index as the worker sees it before storing a group.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct IndexState {
    /// The index's build parameters while it exists (pgvector's defaults for options it
    /// does not name); `None` when it does not.
    pub live: Option<HnswParams>,
    /// The parameters of an index dropped for a burst of ingestion, to be built again.
    pub deferred: Option<HnswParams>,
    /// The planner's estimate of the table's rows (its analysed rows per page times its pages
    /// now; 0 before a first analysis).
    pub rows: f64,
    /// Versions of the association's pipeline pending now (those of the group included).
    pub pending: u64,
    /// Seconds since the newest of them was submitted (`None` when none is pending).
    pub quiet: Option<f64>,
    /// Seconds since the index was dropped (`None` unless it is deferred).
    pub deferred_for: Option<f64>,
}

/// Build parameters from stored integers; `None` when absent or out of pgvector's bounds.
fn params_from(m: Option<i32>, ef_construction: Option<i32>) -> Option<HnswParams> {
    let m = u32::try_from(m?).ok()?;
    let ef_construction = u32::try_from(ef_construction?).ok()?;
    HnswParams::new(m, ef_construction).ok()
}

/// Build parameters from an index's `pg_class.reloptions` (`m=10`, `ef_construction=64`;
/// pgvector's defaults 16 and 64 for those it does not name).
fn params_from_options(options: &[String]) -> Option<HnswParams> {
    let option = |name: &str, default: i32| {
        options
            .iter()
            .find_map(|o| o.strip_prefix(name)?.strip_prefix('=')?.parse::<i32>().ok())
            .unwrap_or(default)
    };
    params_from(Some(option("m", 16)), Some(option("ef_construction", 64)))
}

/// The row [`index_state`] reads.
#[derive(sqlx::FromRow)]
struct IndexRow {
    deferred_index_m: Option<i32>,
    deferred_index_ef_construction: Option<i32>,
    index_options: Option<Vec<String>>,
    index_exists: bool,
    rows: f64,
    pending: i64,
    quiet: Option<f64>,
    deferred_for: Option<f64>,
}

/// Reads an association's [`IndexState`] in one statement; `None` once it was deleted.
/// Pending versions are counted up to what the decision compares them with: while the index
/// exists, the association's rows or `count_at_least`, whichever is more, so a huge backlog
/// costs no more to count than the table it would be compared with; while it is deferred,
/// `deferred_count_at_least` (whether more than a batch is left). Counting every pending
/// version of a burst of 20,000 took 7 ms a group.
pub async fn index_state(
    pool: &sqlx::PgPool,
    vector_embedding_id: Uuid,
    count_at_least: u64,
    deferred_count_at_least: u64,
) -> Result<Option<IndexState>, sqlx::Error> {
    let table = table_name(vector_embedding_id);
    let row: Option<IndexRow> = sqlx::query_as(AssertSqlSafe(format!(
        "SELECT ve.deferred_index_m, ve.deferred_index_ef_construction,
                (SELECT c.reloptions FROM pg_class c WHERE c.oid = to_regclass($3)) AS index_options,
                to_regclass($3) IS NOT NULL AS index_exists,
                r.rows, p.pending, q.quiet,
                EXTRACT(EPOCH FROM clock_timestamp() - ve.deferred_index_at)::float8 AS deferred_for
         FROM vector_embeddings ve
         CROSS JOIN LATERAL (
             SELECT greatest(COALESCE({}, 0), 0)::float8 AS rows
         ) AS r
         CROSS JOIN LATERAL (
             SELECT count(*) AS pending FROM (
                 SELECT 1 FROM documents d
                 WHERE d.pipeline_id = ve.pipeline_id AND d.status = 'pending'
                 LIMIT CASE WHEN ve.deferred_index_m IS NULL THEN greatest($4, r.rows::int8 + 1)
                            ELSE $5 END
             ) AS counted
         ) AS p
         LEFT JOIN LATERAL (
             SELECT EXTRACT(EPOCH FROM clock_timestamp() - d.created_at)::float8 AS quiet
             FROM documents d
             WHERE d.pipeline_id = ve.pipeline_id AND d.status = 'pending'
             ORDER BY d.created_at DESC LIMIT 1
         ) AS q ON true
         WHERE ve.id = $1",
        estimated_rows_sql("to_regclass($2)")
    )))
    .bind(vector_embedding_id)
    .bind(&table)
    .bind(index_name(&table))
    .bind(i64::try_from(count_at_least).unwrap_or(i64::MAX))
    .bind(i64::try_from(deferred_count_at_least).unwrap_or(i64::MAX))
    .fetch_optional(pool)
    .await?;
    Ok(row.map(|row| IndexState {
        live: row
            .index_exists
            .then(|| params_from_options(&row.index_options.unwrap_or_default()))
            .flatten(),
        deferred: params_from(row.deferred_index_m, row.deferred_index_ef_construction),
        rows: row.rows,
        pending: u64::try_from(row.pending).unwrap_or(0),
        quiet: row.quiet,
        deferred_for: row.deferred_for,
    }))
}

/// How long dropping an index for a burst waits for the searches and groups that use the
/// table before it gives up (the burst then goes into the live index).
const DEFER_LOCK_TIMEOUT: &str = "1s";

/// Drops an association's HNSW index for a burst of ingestion and records `params` to build
/// it again, in one transaction. `Ok(false)` when another worker did so first or the table's
/// users held it longer than [`DEFER_LOCK_TIMEOUT`].
pub async fn defer_index(
    pool: &sqlx::PgPool,
    vector_embedding_id: Uuid,
    params: HnswParams,
) -> Result<bool, sqlx::Error> {
    let table = table_name(vector_embedding_id);
    let mut tx = pool.begin().await?;
    sqlx::query(
        "SELECT set_config('lock_timeout', $1, true), set_config('client_min_messages', 'error', true)",
    )
    .bind(DEFER_LOCK_TIMEOUT)
    .execute(&mut *tx)
    .await?;
    // The table's lock first, then the association's row: a group that has inserted vectors
    // may still update that row (its unit-length flag) before it commits.
    let dropped = sqlx::raw_sql(AssertSqlSafe(format!(
        "DROP INDEX IF EXISTS {}",
        index_name(&table)
    )))
    .execute(&mut *tx)
    .await;
    match dropped {
        Ok(_) => {}
        Err(sqlx::Error::Database(error)) if error.code().as_deref() == Some("55P03") => {
            return Ok(false);
        }
        Err(error) => return Err(error),
    }
    let recorded = sqlx::query(
        "UPDATE vector_embeddings
         SET deferred_index_m = $2, deferred_index_ef_construction = $3,
             deferred_index_at = now()
         WHERE id = $1 AND deferred_index_m IS NULL",
    )
    .bind(vector_embedding_id)
    .bind(i32::try_from(params.m()).unwrap_or(i32::MAX))
    .bind(i32::try_from(params.ef_construction()).unwrap_or(i32::MAX))
    .execute(&mut *tx)
    .await?
    .rows_affected();
    tx.commit().await?;
    Ok(recorded == 1)
}

/// Memory for building an HNSW graph of `rows` vectors of `dimensions` in one pass (about
/// 2.1 KB per 384-d vector at `m` 10, measured: a build of 60,000 such vectors in 64 MB
/// overflowed after 31,016 and took 24.7 s, against 10.5 s in 512 MB), at least Postgres's
/// default 64 MB and at most [`MAX_BUILD_MEMORY_KB`].
pub fn build_memory_kb(rows: u64, dimensions: u32, m: u32) -> u64 {
    let per_vector = 4 * u64::from(dimensions) + 32 * u64::from(m) + 256;
    (rows.saturating_mul(per_vector) / 1024 * 5 / 4).clamp(64 * 1024, MAX_BUILD_MEMORY_KB)
}

/// The most memory an index build takes (1 GiB).
pub const MAX_BUILD_MEMORY_KB: u64 = 1024 * 1024;

/// The key of an association's advisory lock, held by whoever builds its deferred index.
fn build_lock_key(vector_embedding_id: Uuid) -> i64 {
    i64::from_be_bytes(
        vector_embedding_id.as_bytes()[..8]
            .try_into()
            .unwrap_or_default(),
    )
}

/// Takes the association's build lock for the caller's transaction without waiting: `false`
/// when another builder holds it.
pub async fn try_build_lock(
    conn: &mut PgConnection,
    vector_embedding_id: Uuid,
) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar("SELECT pg_try_advisory_xact_lock($1)")
        .bind(build_lock_key(vector_embedding_id))
        .fetch_one(conn)
        .await
}

/// Makes the caller's transaction wait for the transactions writing to the association's
/// table and keeps the table from other writers until it ends (`SHARE` mode, which an index
/// build takes anyway; searches go on). Taken before the transaction writes to the table, so
/// that it waits for no one who waits for it.
pub async fn lock_for_build(
    conn: &mut PgConnection,
    vector_embedding_id: Uuid,
) -> Result<(), sqlx::Error> {
    let table = table_name(vector_embedding_id);
    sqlx::raw_sql(AssertSqlSafe(format!("LOCK TABLE {table} IN SHARE MODE")))
        .execute(conn)
        .await?;
    Ok(())
}

/// Builds a deferred HNSW index with its recorded parameters and clears the record, in the
/// caller's transaction, which holds the build lock ([`try_build_lock`]). Inserts into the
/// table wait for the transaction; searches go on, exact, meanwhile. `Ok(false)` when the
/// index is not deferred (any more).
pub async fn build_recorded_index(
    conn: &mut PgConnection,
    vector_embedding_id: Uuid,
) -> Result<bool, sqlx::Error> {
    let table = table_name(vector_embedding_id);
    let row: Option<(Option<i32>, Option<i32>, i32)> = sqlx::query_as(
        "SELECT deferred_index_m, deferred_index_ef_construction, dimensions
         FROM vector_embeddings WHERE id = $1",
    )
    .bind(vector_embedding_id)
    .fetch_optional(&mut *conn)
    .await?;
    let Some((m, ef, dimensions)) = row else {
        return Ok(false);
    };
    let Some(params) = params_from(m, ef) else {
        return Ok(false);
    };
    let rows: i64 = sqlx::query_scalar(AssertSqlSafe(format!("SELECT count(*) FROM {table}")))
        .fetch_one(&mut *conn)
        .await?;
    let memory = build_memory_kb(
        u64::try_from(rows).unwrap_or(0),
        u32::try_from(dimensions).unwrap_or(0),
        params.m(),
    );
    sqlx::query(
        "SELECT set_config('maintenance_work_mem', $1, true), set_config('statement_timeout', '0', true)",
    )
    .bind(format!("{memory}kB"))
    .execute(&mut *conn)
    .await?;
    sqlx::raw_sql(AssertSqlSafe(hnsw_index_sql(
        &table,
        u32::try_from(dimensions).unwrap_or(0),
        params,
    )))
    .execute(&mut *conn)
    .await?;
    sqlx::query(
        "UPDATE vector_embeddings
         SET deferred_index_m = NULL, deferred_index_ef_construction = NULL,
             deferred_index_at = NULL
         WHERE id = $1",
    )
    .bind(vector_embedding_id)
    .execute(&mut *conn)
    .await?;
    Ok(true)
}

/// `ready` associations whose index is deferred, each with whether its pipeline has pending
/// versions (a backfill builds its association's index itself).
pub async fn deferred_indexes(pool: &sqlx::PgPool) -> Result<Vec<(Uuid, bool)>, sqlx::Error> {
    sqlx::query_as(
        "SELECT ve.id, EXISTS (SELECT 1 FROM documents d
                               WHERE d.pipeline_id = ve.pipeline_id AND d.status = 'pending')
         FROM vector_embeddings ve WHERE ve.deferred_index_m IS NOT NULL AND ve.status = 'ready'",
    )
    .fetch_all(pool)
    .await
}

/// The associations whose HNSW index exists and was built with `params` (pgvector's defaults
/// for the options it does not name), oldest first.
pub async fn indexes_built_with(
    pool: &sqlx::PgPool,
    params: HnswParams,
) -> Result<Vec<Uuid>, sqlx::Error> {
    let indexes: Vec<(Uuid, Option<Vec<String>>)> = sqlx::query_as(
        "SELECT ve.id, c.reloptions::text[]
         FROM vector_embeddings ve
         JOIN pg_class c ON c.oid = to_regclass('vectors_' || replace(ve.id::text, '-', '') || '_hnsw')
         WHERE ve.deferred_index_m IS NULL
         ORDER BY ve.created_at, ve.id",
    )
    .fetch_all(pool)
    .await?;
    Ok(indexes
        .into_iter()
        .filter(|(_, options)| {
            params_from_options(options.as_deref().unwrap_or_default()) == Some(params)
        })
        .map(|(id, _)| id)
        .collect())
}

/// What [`rebuild_index`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rebuild {
    /// The new index replaced the old one.
    Replaced,
    /// Nothing: another builder holds the association, or its index is deferred or gone.
    Skipped,
    /// The new index is built, but the searches and groups using the table held it longer
    /// than [`DEFER_LOCK_TIMEOUT`] when it was to replace the old one: it is kept, and the
    /// next call puts it in place without building it again.
    Busy,
}

/// Rebuilds an association's HNSW index with `params` while its searches and inserts go on:
/// the new index is built beside the live one (`CREATE INDEX CONCURRENTLY … _hnsw_next`;
/// searches walk the old one meanwhile, inserts go into both), then replaces it in a short
/// transaction. A new index that a build which died left invalid is dropped and built again;
/// one left valid is put in place. The build holds the association's build lock (as a deferred
/// build does, so neither runs twice) on a connection of its own, closed afterwards with its
/// session settings and lock.
pub async fn rebuild_index(
    pool: &sqlx::PgPool,
    vector_embedding_id: Uuid,
    params: HnswParams,
) -> Result<Rebuild, sqlx::Error> {
    let mut conn = pool.acquire().await?.detach();
    let rebuilt = rebuild_on(&mut conn, vector_embedding_id, params).await;
    sqlx::Connection::close(conn).await.ok();
    rebuilt
}

async fn rebuild_on(
    conn: &mut PgConnection,
    vector_embedding_id: Uuid,
    params: HnswParams,
) -> Result<Rebuild, sqlx::Error> {
    let table = table_name(vector_embedding_id);
    let live = index_name(&table);
    let next = format!("{live}_next");
    let locked: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock($1)")
        .bind(build_lock_key(vector_embedding_id))
        .fetch_one(&mut *conn)
        .await?;
    if !locked {
        return Ok(Rebuild::Skipped);
    }
    let state: Option<(i32, bool, Option<bool>)> = sqlx::query_as(
        "SELECT ve.dimensions, to_regclass($2) IS NOT NULL AND ve.deferred_index_m IS NULL,
                (SELECT i.indisvalid FROM pg_index i WHERE i.indexrelid = to_regclass($3))
         FROM vector_embeddings ve WHERE ve.id = $1",
    )
    .bind(vector_embedding_id)
    .bind(&live)
    .bind(&next)
    .fetch_optional(&mut *conn)
    .await?;
    let Some((dimensions, usable, next_valid)) = state else {
        return Ok(Rebuild::Skipped);
    };
    if !usable || next_valid == Some(false) {
        drop_index_concurrently(conn, &next).await?;
        if !usable {
            return Ok(Rebuild::Skipped);
        }
    }
    let dimensions = u32::try_from(dimensions).unwrap_or(0);
    if next_valid != Some(true) {
        let rows: i64 = sqlx::query_scalar(AssertSqlSafe(format!("SELECT count(*) FROM {table}")))
            .fetch_one(&mut *conn)
            .await?;
        sqlx::query(
            "SELECT set_config('maintenance_work_mem', $1, false),
                    set_config('statement_timeout', '0', false),
                    set_config('client_min_messages', 'error', false)",
        )
        .bind(format!(
            "{}kB",
            build_memory_kb(u64::try_from(rows).unwrap_or(0), dimensions, params.m())
        ))
        .execute(&mut *conn)
        .await?;
        sqlx::raw_sql(AssertSqlSafe(hnsw_index_ddl(
            "INDEX CONCURRENTLY",
            &next,
            &table,
            dimensions,
            params,
        )))
        .execute(&mut *conn)
        .await?;
    }
    let mut tx = sqlx::Connection::begin(&mut *conn).await?;
    sqlx::query("SELECT set_config('lock_timeout', $1, true)")
        .bind(DEFER_LOCK_TIMEOUT)
        .execute(&mut *tx)
        .await?;
    // The table's lock first, then the association's row, as when an index is deferred.
    match sqlx::raw_sql(AssertSqlSafe(format!("DROP INDEX IF EXISTS {live}")))
        .execute(&mut *tx)
        .await
    {
        Ok(_) => {}
        Err(sqlx::Error::Database(error)) if error.code().as_deref() == Some("55P03") => {
            return Ok(Rebuild::Busy);
        }
        Err(error) => return Err(error),
    }
    let deferred: Option<bool> = sqlx::query_scalar(
        "SELECT deferred_index_m IS NOT NULL FROM vector_embeddings WHERE id = $1 FOR UPDATE",
    )
    .bind(vector_embedding_id)
    .fetch_optional(&mut *tx)
    .await?;
    if deferred != Some(false) {
        // A burst dropped the index meanwhile (or the association is gone): its deferred
        // build has the last word.
        tx.rollback().await?;
        drop_index_concurrently(conn, &next).await?;
        return Ok(Rebuild::Skipped);
    }
    sqlx::raw_sql(AssertSqlSafe(format!(
        "ALTER INDEX {next} RENAME TO {live}"
    )))
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(Rebuild::Replaced)
}

async fn drop_index_concurrently(conn: &mut PgConnection, name: &str) -> Result<(), sqlx::Error> {
    sqlx::raw_sql(AssertSqlSafe(format!(
        "DROP INDEX CONCURRENTLY IF EXISTS {name}"
    )))
    .execute(conn)
    .await?;
    Ok(())
}

/// How far from 1 a vector's length may be and still count as unit length (a model's
/// normalised output in `f32` is within ~1e-6).
const UNIT_TOLERANCE: f64 = 1e-4;

/// Whether every vector of `flat` (vectors of `dimensions` values, back to back) has unit
/// length.
pub fn all_unit(flat: &[f32], dimensions: usize) -> bool {
    dimensions > 0
        && flat.chunks(dimensions).all(|v| {
            let norm = v
                .iter()
                .map(|x| f64::from(*x) * f64::from(*x))
                .sum::<f64>()
                .sqrt();
            (norm - 1.0).abs() <= UNIT_TOLERANCE
        })
}

/// The fragments whose vectors [`insert`] stores, as parallel columns.
pub struct NewVectors<'a> {
    pub ids: &'a [Uuid],
    /// `ids.len()` vectors of the association's dimension, back to back.
    pub flat: &'a [f32],
    pub classifications: &'a [&'a str],
    pub metadata: &'a [&'a serde_json::Value],
    /// Whether each fragment is current (not inserted already expired).
    pub live: &'a [bool],
}

/// Inserts the vectors of fragments in one statement, the vectors bound as one `vector[]`
/// (pgvector's binary form). Vectors that are not of unit length clear the association's
/// `unit_vectors` flag (in the same transaction).
pub async fn insert(
    conn: &mut PgConnection,
    vector_embedding_id: Uuid,
    dimensions: i32,
    rows: &NewVectors<'_>,
) -> Result<(), sqlx::Error> {
    let flat = rows.flat;
    debug_assert_eq!(
        flat.len(),
        rows.ids.len() * usize::try_from(dimensions).unwrap_or(0)
    );
    let table = table_name(vector_embedding_id);
    let width = usize::try_from(dimensions).unwrap_or(0).max(1);
    let vectors: Vec<Vector> = flat
        .chunks(width)
        .map(|values| Vector::from(values.to_vec()))
        .collect();
    sqlx::query(AssertSqlSafe(format!(
        "INSERT INTO {table} (fragment_id, embedding, classification, metadata, live)
         SELECT ($1::uuid[])[i], ($2::vector[])[i], ($3::text[])[i], ($4::jsonb[])[i], ($5::bool[])[i]
         FROM generate_series(1, cardinality($1::uuid[])) AS i"
    )))
    .bind(rows.ids)
    .bind(&vectors)
    .bind(rows.classifications)
    .bind(rows.metadata)
    .bind(rows.live)
    .execute(&mut *conn)
    .await?;
    if !all_unit(flat, usize::try_from(dimensions).unwrap_or(0)) {
        sqlx::query(
            "UPDATE vector_embeddings SET unit_vectors = false WHERE id = $1 AND unit_vectors",
        )
        .bind(vector_embedding_id)
        .execute(&mut *conn)
        .await?;
    }
    Ok(())
}

/// Marks the vectors of expired fragments not live (the caller's transaction, which expires
/// the fragments).
pub async fn expire(
    conn: &mut PgConnection,
    vector_embedding_id: Uuid,
    fragment_ids: &[Uuid],
) -> Result<(), sqlx::Error> {
    if fragment_ids.is_empty() {
        return Ok(());
    }
    let table = table_name(vector_embedding_id);
    sqlx::query(AssertSqlSafe(format!(
        "UPDATE {table} SET live = false WHERE fragment_id = ANY($1) AND live"
    )))
    .bind(fragment_ids)
    .execute(conn)
    .await?;
    Ok(())
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "tests fail loudly")]
mod tests {
    use super::{
        HnswParams, MAX_BUILD_MEMORY_KB, all_unit, build_memory_kb, hnsw_index_sql,
        params_from_options,
    };

    #[test]
    fn index_parameters_keep_to_pgvector_bounds() {
        assert_eq!(HnswParams::new(16, 128), Ok(HnswParams::DEFAULT));
        assert_eq!(HnswParams::new(10, 64), Ok(HnswParams::FORMER_DEFAULT));
        assert!(HnswParams::new(8, 16).is_ok());
        assert!(HnswParams::new(1, 64).is_err());
        assert!(HnswParams::new(101, 1000).is_err());
        assert!(HnswParams::new(16, 31).is_err());
        assert!(HnswParams::new(2, 3).is_err());
        assert!(HnswParams::new(16, 1001).is_err());
        assert_eq!(
            hnsw_index_sql("vectors_x", 384, HnswParams::new(12, 40).unwrap()),
            "CREATE INDEX IF NOT EXISTS vectors_x_hnsw ON vectors_x USING hnsw \
             ((l2_normalize(embedding)::halfvec(384)) halfvec_cosine_ops) \
             WITH (m = 12, ef_construction = 40) WHERE live"
        );
    }

    #[test]
    fn unit_length_is_checked_per_vector() {
        let s = 0.5_f32.sqrt();
        assert!(all_unit(&[1.0, 0.0, s, s], 2));
        assert!(!all_unit(&[1.0, 0.0, 1.0, 1.0], 2));
        assert!(!all_unit(&[0.0, 0.0], 2));
        assert!(all_unit(&[], 2));
        assert!(!all_unit(&[1.0], 0));
    }

    #[test]
    fn a_dropped_index_keeps_its_build_parameters() {
        let options = ["m=12".to_owned(), "ef_construction=40".to_owned()];
        assert_eq!(params_from_options(&options), HnswParams::new(12, 40).ok());
        // pgvector's defaults for options the index does not name.
        assert_eq!(params_from_options(&[]), HnswParams::new(16, 64).ok());
        assert_eq!(
            params_from_options(&["ef_construction=100".to_owned()]),
            HnswParams::new(16, 100).ok()
        );
    }

    #[test]
    fn a_build_gets_memory_for_its_graph_within_bounds() {
        // 59,833 vectors of 384 dimensions at m 10: about 154 MB (64 MB held half the graph).
        let kb = build_memory_kb(59_833, 384, 10);
        assert!((150_000..160_000).contains(&kb), "{kb}");
        assert_eq!(build_memory_kb(10, 384, 10), 64 * 1024);
        assert_eq!(build_memory_kb(10_000_000, 384, 10), MAX_BUILD_MEMORY_KB);
        assert_eq!(build_memory_kb(u64::MAX, 2000, 100), MAX_BUILD_MEMORY_KB);
    }
}
