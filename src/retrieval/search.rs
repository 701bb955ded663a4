//! Search execution: similarity (HNSW with iterative scans), MMR, and full-text.
//!
//! Classifications and metadata filters apply in the same statement as the selection, before
//! `k`. The statements are sea-query with every value bound; the only identifier that varies
//! is the association's vector table, rendered from a UUID.

use sea_query::PostgresQueryBuilder;
use sea_query_sqlx::{SqlxBinder, SqlxValues};
use serde_json::Value;
use sqlx::postgres::PgArguments;
use sqlx::{AssertSqlSafe, Connection, IntoArguments, PgConnection, PgPool};
use uuid::Uuid;

use super::mmr::{self, Similarity};
use crate::error::{ApiError, ApiResult};

pub use super::kinds::DistanceStrategy;

impl DistanceStrategy {
    fn distance(self) -> Option<Distance> {
        match self {
            Self::Cosine => Some(Distance::Cosine),
            Self::EuclideanDistance => Some(Distance::Euclidean),
            Self::DotProduct => Some(Distance::NegativeInnerProduct),
            Self::MaxInnerProduct => None,
        }
    }

    fn similarity(self) -> Similarity {
        match self {
            Self::Cosine | Self::MaxInnerProduct => Similarity::Cosine,
            Self::EuclideanDistance => Similarity::Euclidean,
            Self::DotProduct => Similarity::Dot,
        }
    }
}

/// A fragment found by a search, with its score.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Hit {
    pub id: Uuid,
    pub document_id: Uuid,
    pub version: i64,
    pub order_id: i32,
    pub classification: String,
    pub metadata: Value,
    pub content: Vec<u8>,
    pub score: f64,
}

use super::cost::{CONSTANT_FETCHES, MAX_EF_SEARCH, Reach, ScopeEstimate, Walk};
use crate::store::{self, SESSION_EF_SEARCH};

pub use trove_query::search::Scope;
use trove_query::search::{Distance, ExactScope, Fetch, Nearest};

/// The vector side of a search: which association's vectors, the query's vector, how
/// distance is measured, and what the search knows of the stored vectors.
pub struct VectorQuery<'a> {
    pub vector_embedding_id: Uuid,
    pub vector: &'a [f32],
    pub strategy: DistanceStrategy,
    /// Every stored vector of the association has unit length, so the cosine order (which the
    /// HNSW index serves) is also the euclidean and dot-product order.
    pub unit_vectors: bool,
    /// The planner's estimate of the association's vector count (`pg_class.reltuples`; 0 or
    /// negative when unknown).
    pub estimated_rows: f64,
    /// The share of the association the search's scope admits, when the scope restricts it (a
    /// metadata filter, some of the classifications): the walk's candidate list grows as it
    /// shrinks (see [`super::cost::walk`]).
    pub selectivity: Option<f64>,
    /// How the statement finds its rows (see [`super::cost::choose`]).
    pub path: NearestPath,
    /// The association's HNSW index exists (it is not dropped for a burst of ingestion): a
    /// walk orders by the distance the index computes. Without it the walk's statement orders
    /// by the exact distance, which sorts the scope as cheaply as a scan can.
    pub indexed: bool,
    /// What the statement confirms when the search's checks were remembered rather than read
    /// for it (`auth::search_memory`): it returns no rows unless they still hold.
    pub gate: Option<&'a Gate>,
}

/// The state a remembered search's checks were read in.
#[derive(Debug, Clone, PartialEq)]
pub struct Gate {
    /// The search epoch (`migrations/0014_search_epoch.sql`).
    pub epoch: i64,
    /// The association's vector count as estimated then, which the path and the walk were
    /// planned from ([`VectorQuery::estimated_rows`]): the estimate must be the same now.
    pub estimated_rows: f32,
    /// The integer fields the filter compares that no stored version was recorded as holding
    /// an unconvertible value in (rule 6 of the filter language): still none.
    pub unrecorded_integer_fields: Vec<String>,
}

/// How a nearest-neighbour statement finds its rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NearestPath {
    /// Through the association's HNSW index: approximate, with iterative scans that keep
    /// walking the graph until enough rows pass the scope's conditions.
    Index,
    /// The distance of every fragment the scope admits, sorted: exact, and the faster path
    /// when the scope admits few fragments or an index yields them. The scope is read from
    /// the vector table's copy of its conditions, through its indexes.
    Exact,
    /// [`Self::Exact`] where no index serves the scope's conditions: they are tested on each
    /// of the pipeline's fragments in `fragments`, a narrower table than the vector table, and
    /// the admitted vectors read by key.
    ExactScan,
}

/// The planner's view of a scope: `EXPLAIN` of the scope's conditions alone, planned with the
/// bound values (so statistics on a metadata field's expression apply). `every_classification`:
/// the scope names every classification of the pipeline (see `trove_query::search::scope_rows`).
pub async fn estimate_scope(
    pool: &PgPool,
    scope: &Scope<'_>,
    every_classification: bool,
) -> Result<ScopeEstimate, sqlx::Error> {
    let (sql, values) = scope_count_statement(scope, every_classification);
    explain_scope(pool, sql, values).await
}

/// What a scope's estimate was made from, besides the scope itself: the association's vector
/// count in the statistics, the pipeline's metadata indexes, its last change (a change of its
/// schema creates or drops the indexes on its declared fields), and how many classifications
/// the pipeline has.
pub struct EstimateBasis<'a> {
    pub vectors: f64,
    pub metadata_indexes: &'a [Uuid],
    pub pipeline_changed: chrono::DateTime<chrono::Utc>,
    pub pipeline_classifications: usize,
}

/// [`estimate_scope`], reusing an estimate of the same scope made in the last minute on the
/// same basis (see [`super::estimates`]): an `ANALYZE` that changes the tables' statistics (the
/// worker runs one after a group grows them) changes the vector count, and a metadata index
/// created or dropped changes how the scope is reached, so no estimate outlives what it was
/// made from.
pub async fn estimate_scope_cached(
    pool: &PgPool,
    estimates: &super::estimates::ScopeEstimates,
    scope: &Scope<'_>,
    basis: &EstimateBasis<'_>,
) -> Result<ScopeEstimate, sqlx::Error> {
    let every_classification = scope.classifications.len() >= basis.pipeline_classifications;
    let (sql, values) = scope_count_statement(scope, every_classification);
    // The statement and its values name the scope exactly (pipeline, classifications,
    // filter); the values' debug form is unambiguous for the types a scope binds.
    let key = format!(
        "{sql}\u{0}{:?}\u{0}{}\u{0}{:?}\u{0}{}",
        values.0, basis.vectors, basis.metadata_indexes, basis.pipeline_changed
    );
    if let Some(estimate) = estimates.get(&key) {
        return Ok(estimate);
    }
    let estimate = explain_scope(pool, sql, values).await?;
    estimates.insert(key, estimate);
    Ok(estimate)
}

/// The statement whose plan estimates a scope, with its values.
fn scope_count_statement(
    scope: &Scope<'_>,
    every_classification: bool,
) -> (String, sea_query_sqlx::SqlxValues) {
    trove_query::search::scope_rows(scope, every_classification).build_sqlx(PostgresQueryBuilder)
}

async fn explain_scope(
    pool: &PgPool,
    sql: String,
    values: sea_query_sqlx::SqlxValues,
) -> Result<ScopeEstimate, sqlx::Error> {
    let (plan,): (sqlx::types::Json<Value>,) = sqlx::query_as_with(
        AssertSqlSafe(format!("EXPLAIN (FORMAT JSON) {sql}")),
        values,
    )
    .fetch_one(pool)
    .await?;
    Ok(scope_estimate(&plan.0))
}

/// The index every scope may use: the pipeline and classification of live fragments.
const PIPELINE_INDEX: &str = "fragments_pipeline_idx";

/// A scope's estimate from its `EXPLAIN (FORMAT JSON)` document: the top node's rows, reached
/// through an index when a metadata index yields them or when the pipeline index yields them
/// with no condition left to test; otherwise each of the pipeline's fragments is tested.
fn scope_estimate(plan: &Value) -> ScopeEstimate {
    let top = plan.get(0).and_then(|p| p.get("Plan"));
    let admitted = top
        .and_then(|node| node.get("Plan Rows"))
        .and_then(Value::as_f64)
        .unwrap_or(f64::INFINITY);
    let mut nodes: Vec<&Value> = top.into_iter().collect();
    let (mut metadata_index, mut tested) = (false, false);
    while let Some(node) = nodes.pop() {
        let index = node.get("Index Name").and_then(Value::as_str);
        metadata_index |= index.is_some_and(|name| name != PIPELINE_INDEX);
        tested |= node.get("Filter").is_some()
            || node.get("Node Type").and_then(Value::as_str) == Some("Seq Scan");
        if let Some(Value::Array(children)) = node.get("Plans") {
            nodes.extend(children);
        }
    }
    ScopeEstimate {
        admitted,
        reach: if metadata_index || !tested {
            Reach::Indexed
        } else {
            Reach::Scanned
        },
    }
}

/// A nearest-neighbour statement ready to run: the statement with its arguments (the query
/// vector, bound once as a `vector`, is the first), and the session settings it needs beyond
/// the connection's.
pub struct NearestPlan {
    pub sql: String,
    pub arguments: PgArguments,
    /// The `hnsw.ef_search` of the statement's walk (`None`: exact, no walk).
    pub ef_search: Option<u64>,
    /// The path was chosen for a restricted scope by cost and its list is not
    /// [`SESSION_EF_SEARCH`] (at that list a scope of a fifth or more is walked by the
    /// planner's own choice): in a transaction of its own, sorts are disabled for the statement
    /// so that the planner walks the index rather than sorting what a scan of the scope returns
    /// (the plan it would pick when its estimate of the scope is off), and the iterative scan
    /// keeps strict order, so the `k` rows fetched are the nearest admitted ones the walk found
    /// (with `relaxed_order` and LIMIT k, recall@5 stayed at 0.88 under a 5 % filter whatever
    /// the candidate list, on the service benchmark).
    pub walk_only: bool,
    /// Rows the statement returns at most (its LIMIT); the caller keeps the first `limit`
    /// after sorting.
    pub fetch: u64,
    /// The statement runs on its generic plan, made once per connection, rather than on a
    /// plan made for each search's values: set where the plan does not depend on them (see
    /// [`hybrid`]).
    pub generic: bool,
}

/// The walk of an index path (a scope too rare for [`super::cost::walk`], searched on the
/// index path anyway by a caller that forces it, gets the longest list).
fn index_walk(query: &VectorQuery<'_>, limit: u64) -> Walk {
    super::cost::walk(query.estimated_rows, query.selectivity, limit).unwrap_or(Walk {
        ef_search: MAX_EF_SEARCH,
        fetch: limit,
    })
}

/// The statement of a nearest-neighbour selection of `limit` rows (the score is always the
/// requested distance).
pub fn nearest_plan(
    scope: &Scope<'_>,
    query: &VectorQuery<'_>,
    threshold: Option<f64>,
    limit: u64,
    with_embeddings: bool,
) -> ApiResult<NearestPlan> {
    planned(query, threshold, limit, with_embeddings, true, |nearest| {
        trove_query::search::nearest(scope, nearest)
    })
}

/// Plans the vector side of a search (its path, walk and settings) and builds its statement
/// with `build`, given the selection. `constant_fetch`: an unrestricted walk may write its
/// LIMIT into the statement (see [`Fetch::Constant`]); a statement holding the selection
/// within others binds it.
fn planned(
    query: &VectorQuery<'_>,
    threshold: Option<f64>,
    limit: u64,
    with_embeddings: bool,
    constant_fetch: bool,
    build: impl FnOnce(&Nearest<'_>) -> (String, sea_query::Values),
) -> ApiResult<NearestPlan> {
    let Some(distance) = query.strategy.distance() else {
        return Err(ApiError::Database(
            "the max-inner-product distance strategy is not supported".to_owned(),
        ));
    };
    let exact = match query.path {
        NearestPath::Index => None,
        NearestPath::Exact => Some(ExactScope::VectorTable),
        NearestPath::ExactScan => Some(ExactScope::Fragments),
    };
    let walk = exact.is_none().then(|| index_walk(query, limit));
    let fetch = walk.map_or(limit, |w| w.fetch);
    // An unrestricted walk fetching one of the code's constants writes it into the statement,
    // whose generic plan Postgres then reuses instead of planning each search again.
    let limit_rows = if constant_fetch
        && walk.is_some()
        && query.selectivity.is_none()
        && CONSTANT_FETCHES.contains(&fetch)
    {
        Fetch::Constant(fetch)
    } else {
        Fetch::Bound(fetch)
    };
    let order = if query.unit_vectors {
        Distance::Cosine
    } else {
        distance
    };
    let table = crate::store::vectors::table_name(query.vector_embedding_id);
    let vector_count = query
        .gate
        .map(|_| crate::store::vectors::estimated_rows_sql(&format!("'{table}'::regclass")));
    let (sql, values) = build(&Nearest {
        vector_table: &table,
        vector: query.vector,
        distance,
        order,
        index_dimensions: query
            .indexed
            .then(|| u32::try_from(query.vector.len()).ok())
            .flatten(),
        exact,
        threshold,
        fetch: limit_rows,
        with_embeddings,
        gate: query
            .gate
            .zip(vector_count.as_deref())
            .map(|(gate, count)| trove_query::search::Gate {
                epoch: gate.epoch,
                vector_count: (count, gate.estimated_rows),
                unrecorded_integer_fields: &gate.unrecorded_integer_fields,
            }),
    });
    Ok(NearestPlan {
        sql,
        arguments: SqlxValues(values).into_arguments(),
        ef_search: walk.map(|w| w.ef_search),
        walk_only: walk.is_some_and(|w| w.ef_search != SESSION_EF_SEARCH)
            && query.selectivity.is_some()
            && order == Distance::Cosine,
        fetch,
        generic: false,
    })
}

/// Runs a plan's statement on a connection of `store::connect_lazy`. Every such connection
/// starts with `hnsw.iterative_scan = relaxed_order`: iterative index scans keep reading the
/// HNSW index until the rows that pass the filters are found, so selective filters still
/// return `k` results where they exist. A walk gives the session its candidate list first,
/// unless the connection is known to have it (`store::Connection::use_ef_search`: a round trip
/// once for a run of searches of one pipeline, rather than a transaction for each); a walk
/// only the index may serve, and a statement to run on its generic plan, run in a transaction
/// that sets their settings, in one statement.
pub async fn run_plan(
    conn: &mut store::Connection,
    plan: NearestPlan,
) -> Result<Vec<sqlx::postgres::PgRow>, sqlx::Error> {
    let NearestPlan {
        sql,
        arguments,
        ef_search,
        walk_only,
        generic,
        ..
    } = plan;
    if !walk_only {
        if let Some(ef_search) = ef_search {
            conn.use_ef_search(ef_search).await?;
        }
        if !generic {
            return sqlx::query_with(AssertSqlSafe(sql), arguments)
                .fetch_all(&mut **conn)
                .await;
        }
    }
    // A walk only the index may serve has a restricted scope, a generic plan an unrestricted
    // one: a statement is one or the other.
    debug_assert!(
        !(walk_only && generic),
        "a restricted walk on a generic plan"
    );
    let mut tx = conn.begin().await?;
    let settings = if walk_only {
        sqlx::query(
            "SELECT set_config('hnsw.ef_search', $1, true), set_config('enable_sort', 'off', true),
                    set_config('hnsw.iterative_scan', 'strict_order', true)",
        )
        .bind(ef_search.unwrap_or(SESSION_EF_SEARCH).to_string())
    } else {
        sqlx::query("SELECT set_config('plan_cache_mode', 'force_generic_plan', true)")
    };
    settings.execute(&mut *tx).await?;
    let rows = sqlx::query_with(AssertSqlSafe(sql), arguments)
        .fetch_all(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(rows)
}

/// Runs a nearest-neighbour selection of `limit` fragments, with their embeddings when asked,
/// sorted by distance (`relaxed_order` may return rows slightly out of order).
async fn nearest(
    conn: &mut store::Connection,
    scope: &Scope<'_>,
    query: &VectorQuery<'_>,
    threshold: Option<f64>,
    limit: u64,
    with_embeddings: bool,
) -> ApiResult<Vec<(Hit, Option<Vec<f32>>)>> {
    let plan = nearest_plan(scope, query, threshold, limit, with_embeddings)?;
    let rows = run_plan(conn, plan).await?;
    let mut hits = Vec::with_capacity(rows.len());
    for row in rows {
        use sqlx::Row;
        let hit = <Hit as sqlx::FromRow<'_, sqlx::postgres::PgRow>>::from_row(&row)?;
        let embedding = if with_embeddings {
            let vector: pgvector::Vector = row.try_get("embedding")?;
            Some(vector.to_vec())
        } else {
            None
        };
        hits.push((hit, embedding));
    }
    hits.sort_by(|a, b| a.0.score.total_cmp(&b.0.score));
    hits.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
    Ok(hits)
}

/// Similarity search: the `k` closest fragments within the threshold.
pub async fn similarity(
    conn: &mut store::Connection,
    scope: &Scope<'_>,
    query: &VectorQuery<'_>,
    k: u64,
    threshold: Option<f64>,
) -> ApiResult<Vec<Hit>> {
    if k == 0 {
        return Ok(Vec::new());
    }
    let hits = nearest(conn, scope, query, threshold, k, false).await?;
    Ok(hits.into_iter().map(|(hit, _)| hit).collect())
}

/// MMR: `fetch_k` candidates by distance, then at most min(k, fetch_k) selected greedily,
/// returned in distance order.
pub async fn mmr(
    conn: &mut store::Connection,
    scope: &Scope<'_>,
    query: &VectorQuery<'_>,
    k: u64,
    fetch_k: u64,
    lambda_mult: f64,
    threshold: Option<f64>,
) -> ApiResult<Vec<Hit>> {
    if k == 0 || fetch_k == 0 {
        return Ok(Vec::new());
    }
    let candidates = nearest(conn, scope, query, threshold, fetch_k, true).await?;
    let (hits, vectors): (Vec<Hit>, Vec<Vec<f32>>) = candidates
        .into_iter()
        .map(|(hit, vector)| (hit, vector.unwrap_or_default()))
        .unzip();
    let k = usize::try_from(k).unwrap_or(usize::MAX);
    let similarity = query.strategy.similarity();
    let select = move |query: &[f32], vectors: &[Vec<f32>]| {
        let vectors: Vec<&[f32]> = vectors.iter().map(Vec::as_slice).collect();
        mmr::select(query, &vectors, k, lambda_mult, similarity)
    };
    // A selection compares each pick with every candidate left: thousands of them take
    // seconds, which run on the blocking pool rather than hold one of the server's threads.
    let chosen = if k.min(vectors.len()).saturating_mul(vectors.len()) <= MMR_INLINE_PAIRS {
        select(query.vector, &vectors)
    } else {
        let query = query.vector.to_vec();
        tokio::task::spawn_blocking(move || select(&query, &vectors))
            .await
            .map_err(|e| ApiError::Internal(format!("MMR selection: {e}")))?
    };
    let mut hits: Vec<Option<Hit>> = hits.into_iter().map(Some).collect();
    Ok(chosen
        .into_iter()
        .filter_map(|i| hits.get_mut(i).and_then(Option::take))
        .collect())
}

/// The largest MMR selection (picks × candidates) made where the search runs: 10 of 1,000
/// candidates take about 2 ms.
const MMR_INLINE_PAIRS: usize = 10_000;

/// Full-text search: every remaining word of the query must appear; score is the rank divided
/// by 1 + the logarithm of the fragment length; highest first.
pub async fn full_text(
    conn: &mut PgConnection,
    scope: &Scope<'_>,
    query: &str,
    k: u64,
    threshold: Option<f64>,
) -> ApiResult<Vec<Hit>> {
    if k == 0 || query.trim().is_empty() {
        return Ok(Vec::new());
    }
    // Postgres text cannot hold U+0000; as a word separator it means what a space means.
    let query = query.replace('\0', " ");
    let query = query.as_str();
    let config = trove_text::text_search_config(query);
    let (sql, values) = trove_query::search::full_text(scope, config, query, k, threshold)
        .build_sqlx(PostgresQueryBuilder);
    let mut hits: Vec<Hit> = sqlx::query_as_with(AssertSqlSafe(sql), values)
        .fetch_all(conn)
        .await?;
    hits.sort_by(|a, b| b.score.total_cmp(&a.score));
    Ok(hits)
}

/// A fragment found by a hybrid search: its fused score and its rank in each list (`None`
/// when absent from it).
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct HybridHit {
    #[sqlx(flatten)]
    pub hit: Hit,
    pub similarity_rank: Option<i64>,
    pub full_text_rank: Option<i64>,
}

/// The lexical side and the fusion of a hybrid search.
pub struct HybridQuery<'a> {
    /// The query's text.
    pub text: &'a str,
    /// Candidates per list (at least `k`).
    pub candidates: u64,
    pub fusion: trove_query::hybrid::Fusion,
    pub k: u64,
}

/// Hybrid search: the first `candidates` of the vector list (as similarity finds them, within
/// the threshold) and of the lexical list (fragments holding any word of the query), fused by
/// reciprocal rank, in one statement; at most `k`, best first.
pub async fn hybrid(
    conn: &mut store::Connection,
    scope: &Scope<'_>,
    query: &VectorQuery<'_>,
    threshold: Option<f64>,
    hybrid: &HybridQuery<'_>,
) -> ApiResult<Vec<HybridHit>> {
    if hybrid.k == 0 {
        return Ok(Vec::new());
    }
    // Postgres text cannot hold U+0000; as a word separator it means what a space means.
    let text = hybrid.text.replace('\0', " ");
    // The language of the words the lexical list reads.
    let config = trove_text::likeliest_text_search_config(trove_query::hybrid::lexical_text(&text));
    let plan = planned(
        query,
        threshold,
        hybrid.candidates,
        false,
        false,
        |nearest| {
            trove_query::hybrid::hybrid(
                scope,
                &trove_query::hybrid::Hybrid {
                    nearest: Nearest {
                        vector_table: nearest.vector_table,
                        vector: nearest.vector,
                        gate: None,
                        ..*nearest
                    },
                    lexical: trove_query::hybrid::Lexical {
                        config,
                        query: &text,
                        fetch: hybrid.candidates,
                    },
                    candidates: hybrid.candidates,
                    fusion: hybrid.fusion,
                    k: hybrid.k,
                },
            )
        },
    )?;
    // An unrestricted walk's plan is the same whatever the values (the walk, then each of the
    // query's words through the full-text index): planning the statement, 3–6 ms of each
    // search, is done once per connection. A restricted scope is planned for its values.
    let plan = NearestPlan {
        generic: plan.ef_search.is_some() && query.selectivity.is_none() && scope.filter.is_none(),
        ..plan
    };
    let rows = run_plan(conn, plan).await?;
    rows.iter()
        .map(<HybridHit as sqlx::FromRow<'_, sqlx::postgres::PgRow>>::from_row)
        .collect::<Result<Vec<_>, _>>()
        .map_err(ApiError::from)
}

#[cfg(test)]
#[expect(clippy::expect_used, reason = "tests")]
mod tests {
    use super::*;

    fn statement_of(
        strategy: DistanceStrategy,
        unit_vectors: bool,
    ) -> ApiResult<(String, PgArguments)> {
        let classifications = ["public".to_owned()];
        let scope = Scope {
            pipeline_id: Uuid::nil(),
            classifications: &classifications,
            filter: None,
        };
        let query = VectorQuery {
            vector_embedding_id: Uuid::nil(),
            vector: &[0.6, 0.8],
            strategy,
            unit_vectors,
            estimated_rows: 0.0,
            selectivity: None,
            path: NearestPath::Index,
            indexed: true,
            gate: None,
        };
        nearest_plan(&scope, &query, Some(0.5), 5, false).map(|plan| (plan.sql, plan.arguments))
    }

    fn statement(strategy: DistanceStrategy, unit_vectors: bool) -> String {
        statement_of(strategy, unit_vectors).expect("statement").0
    }

    #[test]
    fn unit_vectors_order_every_strategy_by_the_indexed_cosine_distance() {
        for (strategy, operator) in [
            (DistanceStrategy::Cosine, "<=>"),
            (DistanceStrategy::EuclideanDistance, "<->"),
            (DistanceStrategy::DotProduct, "<#>"),
        ] {
            let sql = statement(strategy, true);
            let (_, order) = sql.split_once("ORDER BY").expect("ordered");
            assert!(
                order.contains("::halfvec(2)) <=> (l2_normalize($1)::halfvec(2))"),
                "the index's distance: {sql}"
            );
            let (select, _) = sql.split_once(" FROM ").expect("select");
            assert!(
                select.contains(&format!("\"embedding\" {operator} $")),
                "score with {operator}: {sql}"
            );
            let (_, condition) = sql.split_once(" WHERE ").expect("where");
            assert!(
                condition.contains(&format!("\"embedding\" {operator} $")),
                "threshold on {operator}: {sql}"
            );
        }
    }

    #[test]
    fn the_query_vector_is_one_typed_parameter_first() {
        use sqlx::Arguments;
        for (strategy, unit_vectors) in [
            (DistanceStrategy::Cosine, true),
            (DistanceStrategy::EuclideanDistance, false),
        ] {
            let (sql, arguments) = statement_of(strategy, unit_vectors).expect("statement");
            assert!(!sql.contains("::vector"), "no text cast: {sql}");
            // The vector, pipeline, classification and threshold (the limit is the code's
            // constant): $1 everywhere.
            assert_eq!(arguments.len(), 4, "{sql}");
            let uses = sql.matches("$1)").count() + sql.matches("$1 ").count();
            assert_eq!(uses, 3, "score, threshold and order: {sql}");
        }
    }

    #[test]
    fn other_vectors_order_by_the_requested_distance() {
        for (strategy, operator) in [
            (DistanceStrategy::EuclideanDistance, "<->"),
            (DistanceStrategy::DotProduct, "<#>"),
        ] {
            let sql = statement(strategy, false);
            let (_, order) = sql.split_once("ORDER BY").expect("ordered");
            assert!(
                order.contains(&format!("\"embedding\" {operator} $")),
                "{sql}"
            );
            assert!(!sql.contains("<=>"), "{sql}");
        }
    }

    /// The plan of a cosine search of `limit` rows over an association of `rows` vectors.
    fn cosine_plan(
        limit: u64,
        rows: f64,
        selectivity: Option<f64>,
        path: NearestPath,
    ) -> NearestPlan {
        let classifications = ["public".to_owned()];
        let scope = Scope {
            pipeline_id: Uuid::nil(),
            classifications: &classifications,
            filter: None,
        };
        let query = VectorQuery {
            vector_embedding_id: Uuid::nil(),
            vector: &[0.6, 0.8],
            strategy: DistanceStrategy::Cosine,
            unit_vectors: true,
            estimated_rows: rows,
            selectivity,
            path,
            indexed: true,
            gate: None,
        };
        nearest_plan(&scope, &query, None, limit, false).expect("plan")
    }

    #[test]
    fn walks_set_the_candidate_list_and_restricted_walks_disable_sorts() {
        let plan = |limit: u64, rows: f64, selectivity: Option<f64>| {
            let plan = cosine_plan(limit, rows, selectivity, NearestPath::Index);
            (plan.fetch, plan.ef_search, plan.walk_only)
        };
        assert_eq!(plan(5, 1000.0, None), (5, Some(100), false));
        assert_eq!(plan(5, 58_841.0, None), (5, Some(145), false));
        assert_eq!(plan(200, 1000.0, None), (200, Some(200), false));
        assert_eq!(plan(5, 1_000_000.0, None), (5, Some(796), false));
        // A restricted scope fetches k rows with a list sized to its selectivity.
        assert_eq!(plan(5, 58_841.0, Some(0.5)), (5, Some(150), false));
        assert_eq!(plan(5, 1_000_000.0, Some(0.5)), (5, Some(597), true));
        // Forced onto the index although too rare for it: the longest list.
        assert_eq!(
            plan(5, 58_841.0, Some(0.0001)),
            (5, Some(MAX_EF_SEARCH), true)
        );
    }

    #[test]
    fn only_the_unrestricted_walks_constant_fetch_is_written_into_the_statement() {
        let limit_of = |limit: u64, selectivity: Option<f64>, path: NearestPath| {
            let plan = cosine_plan(limit, 58_841.0, selectivity, path);
            let limit = plan.sql.rsplit_once(" LIMIT ").expect("a limit").1;
            (limit.to_owned(), sqlx::Arguments::len(&plan.arguments))
        };
        // k up to 20 reads the next of the code's constants: written, and one value fewer
        // bound.
        let (written, bound) = limit_of(5, None, NearestPath::Index);
        assert_eq!(written, "5");
        for (k, constant) in [(1, "5"), (6, "10"), (11, "20"), (20, "20")] {
            assert_eq!(
                limit_of(k, None, NearestPath::Index),
                (constant.to_owned(), bound)
            );
        }
        // k 21 is the request's: bound.
        let (limit, with_k) = limit_of(21, None, NearestPath::Index);
        assert_eq!((limit.as_str(), with_k), ("$4", bound + 1));
        // A restricted walk's k and the exact path's are bound too.
        assert!(
            limit_of(20, Some(0.5), NearestPath::Index)
                .0
                .starts_with('$')
        );
        assert!(limit_of(20, None, NearestPath::Exact).0.starts_with('$'));
    }

    #[test]
    fn the_exact_path_orders_by_an_expression_the_index_cannot_serve() {
        let classifications = ["public".to_owned()];
        let scope = Scope {
            pipeline_id: Uuid::nil(),
            classifications: &classifications,
            filter: None,
        };
        for (strategy, unit_vectors, operator) in [
            (DistanceStrategy::Cosine, true, "<=>"),
            (DistanceStrategy::EuclideanDistance, true, "<->"),
            (DistanceStrategy::DotProduct, false, "<#>"),
        ] {
            let query = VectorQuery {
                vector_embedding_id: Uuid::nil(),
                vector: &[0.6, 0.8],
                strategy,
                unit_vectors,
                estimated_rows: 1_000_000.0,
                selectivity: Some(0.001),
                path: NearestPath::Exact,
                indexed: true,
                gate: None,
            };
            let plan = nearest_plan(&scope, &query, None, 5, false).expect("plan");
            // The distance is computed in a subquery that is not flattened (its OFFSET, bound
            // as 0), and ranked on that subquery's output.
            let (distances, ranked) = plan.sql.split_once(") OFFSET $").expect("fenced");
            assert!(
                distances.contains(&format!(
                    "\"fragments\".\"embedding\" {operator} $1 AS \"score\""
                )) && ranked.contains("ORDER BY \"d\".\"score\" ASC"),
                "{}",
                plan.sql
            );
            // No candidate list to set: the index is not walked.
            assert_eq!((plan.ef_search, plan.walk_only), (None, false));
            assert_eq!(plan.fetch, 5);
        }
    }

    #[test]
    fn a_scope_estimate_reads_the_rows_and_how_the_plan_reaches_them() {
        let estimate = |plan: Value| scope_estimate(&serde_json::json!([{ "Plan": plan }]));
        let scanned = estimate(serde_json::json!({
            "Node Type": "Bitmap Heap Scan", "Plan Rows": 2942,
            "Filter": "((metadata ->> 'category'::text) = 'c07'::text)",
            "Plans": [{"Node Type": "Bitmap Index Scan", "Index Name": PIPELINE_INDEX, "Plan Rows": 58841}]
        }));
        assert_eq!(
            scanned,
            ScopeEstimate {
                admitted: 2942.0,
                reach: Reach::Scanned
            }
        );
        let sequential = estimate(serde_json::json!({"Node Type": "Seq Scan", "Plan Rows": 12}));
        assert_eq!(sequential.reach, Reach::Scanned);
        let metadata_index = estimate(serde_json::json!({
            "Node Type": "Index Scan", "Index Name": "pidx_0190a0f17f5e7c3a9d5b3a1f2e4d5c6c",
            "Plan Rows": 1000, "Filter": "(classification = ANY ('{public}'::text[]))"
        }));
        assert_eq!(
            metadata_index,
            ScopeEstimate {
                admitted: 1000.0,
                reach: Reach::Indexed
            }
        );
        let classifications = estimate(serde_json::json!({
            "Node Type": "Index Only Scan", "Index Name": PIPELINE_INDEX, "Plan Rows": 20000
        }));
        assert_eq!(classifications.reach, Reach::Indexed);
        let unknown = scope_estimate(&serde_json::json!([]));
        assert!(unknown.admitted.is_infinite());
    }

    #[test]
    fn max_inner_product_has_no_statement() {
        assert!(statement_of(DistanceStrategy::MaxInnerProduct, true).is_err());
    }
}
