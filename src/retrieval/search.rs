//! Search execution: similarity (HNSW with iterative scans), MMR, and full-text.
//!
//! Classifications and metadata filters apply in the same statement as the selection, before
//! `k`. The statements are sea-query with every value bound; the only identifier that varies
//! is the association's vector table, rendered from a UUID.

use sea_query::PostgresQueryBuilder;
use sea_query_sqlx::SqlxBinder;
use serde_json::Value;
use sqlx::postgres::PgArguments;
use sqlx::{AssertSqlSafe, Connection, IntoArguments, PgConnection, PgPool};
use uuid::Uuid;

use super::mmr::{self, Similarity};
use crate::error::{ApiError, ApiResult};

/// How vector distances are measured (lower is closer).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DistanceStrategy {
    /// 1 − cosine similarity (0..2). The default, and the one the HNSW index serves.
    Cosine,
    /// Euclidean (L2) distance.
    EuclideanDistance,
    /// Negative inner product.
    DotProduct,
    /// Defined by the interface; searches with it fail.
    MaxInnerProduct,
}

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

use crate::store::SESSION_EF_SEARCH;

pub use trove_query::search::Scope;
use trove_query::search::{Distance, Nearest};

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
    /// How the statement finds its rows (see [`path_for`]).
    pub path: NearestPath,
}

/// How a nearest-neighbour statement finds its rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NearestPath {
    /// Through the association's HNSW index: approximate, with iterative scans that keep
    /// walking the graph until enough rows pass the scope's conditions.
    Index,
    /// The distance of every fragment the scope admits, sorted: exact, and the faster path
    /// when the scope admits few fragments.
    Exact,
}

/// Fragments a scope may admit, by the planner's estimate, for a search to take the exact
/// path. An HNSW walk under a selective condition visits many vectors that fail it and loses
/// recall: on the search benchmark (1,000,000 fragments, a 1 % filter) the walk returned
/// recall@5 0.92 in 136 ms whatever its candidate list, the exact path 1.0 in less time.
pub const EXACT_SCAN_ROWS: f64 = 20_000.0;

/// The path for a scope that admits `scope_rows` fragments by the planner's estimate (`None`
/// when the scope restricts nothing beyond the association).
pub fn path_for(scope_rows: Option<f64>) -> NearestPath {
    match scope_rows {
        Some(rows) if rows <= EXACT_SCAN_ROWS => NearestPath::Exact,
        _ => NearestPath::Index,
    }
}

/// The planner's estimate of the fragments a scope admits: `EXPLAIN` of the scope's
/// conditions alone, planned with the bound values (so statistics on a metadata index's
/// expression apply).
pub async fn estimate_scope_rows(pool: &PgPool, scope: &Scope<'_>) -> Result<f64, sqlx::Error> {
    let (sql, values) = scope_count_statement(scope);
    explain_rows(pool, sql, values).await
}

/// [`estimate_scope_rows`], reusing an estimate of the same scope made in the last minute
/// (see [`super::estimates`]).
pub async fn estimate_scope_rows_cached(
    pool: &PgPool,
    estimates: &super::estimates::ScopeEstimates,
    scope: &Scope<'_>,
) -> Result<f64, sqlx::Error> {
    let (sql, values) = scope_count_statement(scope);
    // The statement and its values name the scope exactly (pipeline, classifications,
    // filter); the values' debug form is unambiguous for the types a scope binds.
    let key = format!("{sql}\u{0}{:?}", values.0);
    if let Some(rows) = estimates.get(&key) {
        return Ok(rows);
    }
    let rows = explain_rows(pool, sql, values).await?;
    estimates.insert(key, rows);
    Ok(rows)
}

/// The statement whose plan estimates a scope, with its values.
fn scope_count_statement(scope: &Scope<'_>) -> (String, sea_query_sqlx::SqlxValues) {
    trove_query::search::scope_rows(scope).build_sqlx(PostgresQueryBuilder)
}

async fn explain_rows(
    pool: &PgPool,
    sql: String,
    values: sea_query_sqlx::SqlxValues,
) -> Result<f64, sqlx::Error> {
    let (plan,): (sqlx::types::Json<Value>,) = sqlx::query_as_with(
        AssertSqlSafe(format!("EXPLAIN (FORMAT JSON) {sql}")),
        values,
    )
    .fetch_one(pool)
    .await?;
    Ok(plan_rows(&plan.0).unwrap_or(f64::INFINITY))
}

/// `Plan Rows` of the top node of an `EXPLAIN (FORMAT JSON)` document.
fn plan_rows(plan: &Value) -> Option<f64> {
    plan.get(0)?.get("Plan")?.get("Plan Rows")?.as_f64()
}

/// Rows a nearest-neighbour statement fetches at least. With `relaxed_order`, rows that pass a
/// filter only after the first candidate list may come out of order, so the statement reads
/// more than `k` and the rows are sorted and cut here; on the search benchmark, LIMIT 20
/// instead of 5 under a 1 % filter took recall@5 from 0.90 to 1.0 at 100,000 fragments, and
/// cost nothing measurable without a filter (the first candidate list holds them already).
pub const MIN_FETCH: u64 = 20;

/// Vector count up to which [`SESSION_EF_SEARCH`] is enough.
const EF_SEARCH_BASE_ROWS: f64 = 100_000.0;

/// Largest `hnsw.ef_search` a search sets.
pub const MAX_EF_SEARCH: u64 = 1000;

/// The candidate list of a search with a metadata filter, at least. Under a selective filter
/// an iterative scan walks far past the first candidate list, and a short list both loses
/// recall there and leads the planner to prefer that walk to an exact scan through a metadata
/// index: on the search benchmark (100,000 fragments, a 1 % filter on an indexed field),
/// ef_search 100 gave recall@5 0.96 in 63 ms through the HNSW index, 400 gave 1.0 in 4.8 ms
/// through the metadata index.
pub const FILTERED_EF_SEARCH: u64 = 400;

/// The HNSW candidate list for an association of `rows` vectors and a statement fetching
/// `fetch` rows, with or without a metadata filter. The list that keeps recall@5 near 0.97
/// grows with the graph: 150 at 100,000 vectors, 600 at 1,000,000 on the search benchmark
/// with the default graph (0.95 at 400, 0.93 at 300), so it scales as `rows^0.6` above
/// 100,000; it is never shorter than the rows fetched, nor than [`FILTERED_EF_SEARCH`] under
/// a filter.
pub fn ef_search_for(rows: f64, fetch: u64, filtered: bool) -> u64 {
    let scaled = if rows > EF_SEARCH_BASE_ROWS {
        // At most MAX_EF_SEARCH, so the conversion cannot overflow.
        #[expect(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            reason = "the value is clamped to the target range first"
        )]
        let ef = (SESSION_EF_SEARCH as f64 * (rows / EF_SEARCH_BASE_ROWS).powf(0.6))
            .round()
            .min(MAX_EF_SEARCH as f64) as u64;
        ef
    } else {
        SESSION_EF_SEARCH
    };
    let floor = if filtered {
        FILTERED_EF_SEARCH
    } else {
        SESSION_EF_SEARCH
    };
    Ord::max(Ord::max(scaled, fetch), floor).clamp(SESSION_EF_SEARCH, MAX_EF_SEARCH)
}

/// A nearest-neighbour statement ready to run: the statement with its arguments (the query
/// vector, bound once as a `vector`, is the last), and the `hnsw.ef_search` it needs when that
/// differs from the session's [`SESSION_EF_SEARCH`].
pub struct NearestPlan {
    pub sql: String,
    pub arguments: PgArguments,
    pub ef_search: Option<u64>,
    /// Rows the statement returns at most (its LIMIT); the caller keeps the first `limit`
    /// after sorting.
    pub fetch: u64,
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
    let Some(distance) = query.strategy.distance() else {
        return Err(ApiError::Database(
            "the max-inner-product distance strategy is not supported".to_owned(),
        ));
    };
    let fetch = Ord::max(limit, MIN_FETCH);
    let exact = query.path == NearestPath::Exact;
    let table = crate::store::vectors::table_name(query.vector_embedding_id);
    let statement = trove_query::search::nearest(
        scope,
        &Nearest {
            vector_table: &table,
            vector: query.vector,
            distance,
            order: if query.unit_vectors {
                Distance::Cosine
            } else {
                distance
            },
            exact,
            threshold,
            fetch,
            with_embeddings,
        },
    );
    let (sql, values) = statement.build_sqlx(PostgresQueryBuilder);
    let arguments = values.into_arguments();
    let ef = ef_search_for(query.estimated_rows, fetch, scope.filter.is_some());
    Ok(NearestPlan {
        sql,
        arguments,
        ef_search: (ef != SESSION_EF_SEARCH && !exact).then_some(ef),
        fetch,
    })
}

/// Runs a plan's statement on a connection of `store::connect_lazy`. Every such connection
/// starts with `hnsw.iterative_scan = relaxed_order` and `hnsw.ef_search = SESSION_EF_SEARCH`:
/// iterative index scans keep reading the HNSW index until the rows that pass the filters are
/// found, so selective filters still return `k` results where they exist. A plan with another
/// `ef_search` runs in a transaction that sets it.
pub async fn run_plan(
    conn: &mut PgConnection,
    plan: NearestPlan,
) -> Result<Vec<sqlx::postgres::PgRow>, sqlx::Error> {
    let NearestPlan {
        sql,
        arguments,
        ef_search,
        ..
    } = plan;
    match ef_search {
        None => {
            sqlx::query_with(AssertSqlSafe(sql), arguments)
                .fetch_all(conn)
                .await
        }
        Some(ef) => {
            let mut tx = conn.begin().await?;
            sqlx::query("SELECT set_config('hnsw.ef_search', $1, true)")
                .bind(ef.to_string())
                .execute(&mut *tx)
                .await?;
            let rows = sqlx::query_with(AssertSqlSafe(sql), arguments)
                .fetch_all(&mut *tx)
                .await?;
            tx.commit().await?;
            Ok(rows)
        }
    }
}

/// Runs a nearest-neighbour selection of `limit` fragments, with their embeddings when asked,
/// sorted by distance (`relaxed_order` may return rows slightly out of order).
async fn nearest(
    conn: &mut PgConnection,
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
    conn: &mut PgConnection,
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
    conn: &mut PgConnection,
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
    let vectors: Vec<&[f32]> = candidates
        .iter()
        .map(|(_, e)| e.as_deref().unwrap_or_default())
        .collect();
    let k = usize::try_from(k).unwrap_or(usize::MAX);
    let chosen = mmr::select(
        query.vector,
        &vectors,
        k,
        lambda_mult,
        query.strategy.similarity(),
    );
    let mut candidates: Vec<Option<Hit>> =
        candidates.into_iter().map(|(hit, _)| Some(hit)).collect();
    Ok(chosen
        .into_iter()
        .filter_map(|i| candidates.get_mut(i).and_then(Option::take))
        .collect())
}

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
            path: NearestPath::Index,
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
            assert!(order.contains("\"embedding\" <=> $"), "{sql}");
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
            // The vector, pipeline, classification, threshold and limit: $1 everywhere.
            assert_eq!(arguments.len(), 5, "{sql}");
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

    #[test]
    fn candidate_list_grows_with_the_association() {
        assert_eq!(ef_search_for(-1.0, 20, false), SESSION_EF_SEARCH);
        assert_eq!(ef_search_for(0.0, 20, false), SESSION_EF_SEARCH);
        assert_eq!(ef_search_for(100_000.0, 20, false), SESSION_EF_SEARCH);
        assert_eq!(ef_search_for(1_000_000.0, 20, false), 597);
        assert_eq!(ef_search_for(1e9, 20, false), MAX_EF_SEARCH);
        // Never shorter than the rows fetched, never longer than the maximum.
        assert_eq!(ef_search_for(0.0, 300, false), 300);
        assert_eq!(ef_search_for(0.0, 120, false), SESSION_EF_SEARCH);
        assert_eq!(ef_search_for(0.0, 65_535, false), MAX_EF_SEARCH);
        // Under a filter, never shorter than FILTERED_EF_SEARCH.
        assert_eq!(ef_search_for(0.0, 20, true), FILTERED_EF_SEARCH);
        assert_eq!(ef_search_for(1_500_000.0, 20, true), 762);
        assert_eq!(ef_search_for(4_000_000.0, 20, true), MAX_EF_SEARCH);
    }

    #[test]
    fn statements_fetch_at_least_min_fetch_rows_and_set_ef_search_only_when_it_differs() {
        let classifications = ["public".to_owned()];
        let scope = Scope {
            pipeline_id: Uuid::nil(),
            classifications: &classifications,
            filter: None,
        };
        let plan = |limit: u64, rows: f64| {
            let query = VectorQuery {
                vector_embedding_id: Uuid::nil(),
                vector: &[0.6, 0.8],
                strategy: DistanceStrategy::Cosine,
                unit_vectors: true,
                estimated_rows: rows,
                path: NearestPath::Index,
            };
            nearest_plan(&scope, &query, None, limit, false).expect("plan")
        };
        let small = plan(5, 1000.0);
        assert_eq!((small.fetch, small.ef_search), (MIN_FETCH, None));
        let large_k = plan(200, 1000.0);
        assert_eq!((large_k.fetch, large_k.ef_search), (200, Some(200)));
        let large_table = plan(5, 1_000_000.0);
        assert_eq!(
            (large_table.fetch, large_table.ef_search),
            (MIN_FETCH, Some(597))
        );
    }

    #[test]
    fn scopes_the_planner_expects_few_fragments_in_are_searched_exactly() {
        assert_eq!(path_for(None), NearestPath::Index);
        assert_eq!(path_for(Some(0.0)), NearestPath::Exact);
        assert_eq!(path_for(Some(EXACT_SCAN_ROWS)), NearestPath::Exact);
        assert_eq!(path_for(Some(EXACT_SCAN_ROWS + 1.0)), NearestPath::Index);
        assert_eq!(path_for(Some(f64::INFINITY)), NearestPath::Index);
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
                path: NearestPath::Exact,
            };
            let plan = nearest_plan(&scope, &query, None, 5, false).expect("plan");
            let (_, order) = plan.sql.split_once("ORDER BY").expect("ordered");
            assert!(
                order.contains(&format!("(\"v\".\"embedding\" {operator} $"))
                    && order.contains(") + 0 ASC"),
                "{}",
                plan.sql
            );
            // No candidate list to set: the index is not walked.
            assert_eq!(plan.ef_search, None);
            assert_eq!(plan.fetch, MIN_FETCH);
        }
    }

    #[test]
    fn the_estimate_is_the_top_plan_node_rows() {
        let plan = serde_json::json!([{"Plan": {"Node Type": "Seq Scan", "Plan Rows": 1234, "Plans": []}}]);
        assert_eq!(plan_rows(&plan), Some(1234.0));
        assert_eq!(plan_rows(&serde_json::json!([])), None);
        assert_eq!(plan_rows(&serde_json::json!({"Plan": {}})), None);
    }

    #[test]
    fn max_inner_product_has_no_statement() {
        assert!(statement_of(DistanceStrategy::MaxInnerProduct, true).is_err());
    }
}
