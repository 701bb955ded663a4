//! Search execution: similarity (HNSW with iterative scans), MMR, and full-text.
//!
//! Classifications and metadata filters apply in the same statement as the selection, before
//! `k`. The statements are sea-query with every value bound; the only identifier that varies
//! is the association's vector table, rendered from a UUID.

use sea_query::{
    Alias, Cond, Condition, Expr, ExprTrait, Order, PostgresQueryBuilder, Query, SelectStatement,
};
use sea_query_sqlx::SqlxBinder;
use serde_json::Value;
use sqlx::{AssertSqlSafe, PgPool};
use uuid::Uuid;

use super::mmr::{self, Similarity};
use crate::error::{ApiError, ApiResult};

/// How vector distances are measured (lower is closer).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, poem_openapi::Enum)]
#[serde(rename_all = "kebab-case")]
#[oai(rename_all = "kebab-case")]
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
    fn operator(self) -> Option<&'static str> {
        match self {
            Self::Cosine => Some("<=>"),
            Self::EuclideanDistance => Some("<->"),
            Self::DotProduct => Some("<#>"),
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

/// `hnsw.ef_search` of every connection (set at connection start with `hnsw.iterative_scan =
/// relaxed_order`): the candidate list of an HNSW search. pgvector's default of 40 gave a
/// recall@5 of 0.90 on the 100,000-fragment benchmark, 100 gives 0.97 (`benches/search.rs`).
pub const SESSION_EF_SEARCH: u64 = 100;

/// What every search kind shares.
pub struct Scope<'a> {
    pub pipeline_id: Uuid,
    /// The classifications the reader may see (already resolved; non-empty).
    pub classifications: &'a [String],
    /// The compiled metadata filter over table `fragments`, if any.
    pub filter: Option<Condition>,
}

fn fragments() -> Alias {
    Alias::new("fragments")
}

/// SELECT of fragment columns FROM `fragments` with the scope's conditions.
fn scoped_select(scope: &Scope<'_>) -> SelectStatement {
    let f = fragments();
    let mut select = Query::select();
    select
        .from(f.clone())
        .columns(
            [
                "id",
                "document_id",
                "version",
                "order_id",
                "classification",
                "metadata",
                "content",
            ]
            .map(|c| (f.clone(), Alias::new(c))),
        )
        .and_where(Expr::col((f.clone(), Alias::new("pipeline_id"))).eq(scope.pipeline_id))
        .and_where(Expr::col((f.clone(), Alias::new("expired_at"))).is_null())
        .and_where(
            Expr::col((f, Alias::new("classification")))
                .is_in(scope.classifications.iter().cloned()),
        );
    if let Some(filter) = &scope.filter {
        select.cond_where(Cond::all().add(filter.clone()));
    }
    select
}

/// The text form pgvector parses: `[0.1,0.2,…]`.
fn vector_literal(vector: &[f32]) -> String {
    let mut text = String::with_capacity(vector.len() * 10 + 2);
    text.push('[');
    for (i, x) in vector.iter().enumerate() {
        if i > 0 {
            text.push(',');
        }
        text.push_str(&x.to_string());
    }
    text.push(']');
    text
}

/// The vector side of a search: which association's vectors, the query's vector, and how
/// distance is measured.
pub struct VectorQuery<'a> {
    pub vector_embedding_id: Uuid,
    pub vector: &'a [f32],
    pub strategy: DistanceStrategy,
}

/// The statement of a nearest-neighbour selection. `unit_vectors`: every stored vector of the
/// association has unit length, so the cosine order (which the HNSW index serves) is also the
/// euclidean and dot-product order; the score is always the requested distance.
fn nearest_statement(
    scope: &Scope<'_>,
    query: &VectorQuery<'_>,
    threshold: Option<f64>,
    limit: u64,
    with_embeddings: bool,
    unit_vectors: bool,
) -> ApiResult<(String, sea_query_sqlx::SqlxValues)> {
    let VectorQuery {
        vector_embedding_id,
        vector: query_vector,
        strategy,
    } = *query;
    let Some(operator) = strategy.operator() else {
        return Err(ApiError::Database(
            "the max-inner-product distance strategy is not supported".to_owned(),
        ));
    };
    let order_operator = if unit_vectors { "<=>" } else { operator };
    let table = Alias::new(crate::store::vectors::table_name(vector_embedding_id));
    let v = Alias::new("v");
    // The operators are fixed strings; the vector is a bound parameter (used twice when the
    // order and the score differ).
    let literal = vector_literal(query_vector);
    let distance = Expr::cust_with_values(
        format!("\"v\".\"embedding\" {operator} $1::vector"),
        [literal.clone()],
    );
    let order = if order_operator == operator {
        distance.clone()
    } else {
        Expr::cust_with_values(
            format!("\"v\".\"embedding\" {order_operator} $1::vector"),
            [literal],
        )
    };
    let mut select = scoped_select(scope);
    select
        .expr_as(distance.clone(), Alias::new("score"))
        .join_as(
            sea_query::JoinType::InnerJoin,
            table,
            v.clone(),
            Expr::col((v.clone(), Alias::new("fragment_id")))
                .equals((fragments(), Alias::new("id"))),
        )
        .order_by_expr(order, Order::Asc)
        .limit(limit);
    if with_embeddings {
        select.expr_as(
            Expr::cust("\"v\".\"embedding\"::real[]"),
            Alias::new("embedding"),
        );
    }
    if let Some(threshold) = threshold {
        select.and_where(distance.lte(threshold));
    }
    Ok(select.build_sqlx(PostgresQueryBuilder))
}

/// Runs a nearest-neighbour selection of `limit` fragments, with their embeddings when asked.
async fn nearest(
    pool: &PgPool,
    scope: &Scope<'_>,
    query: &VectorQuery<'_>,
    threshold: Option<f64>,
    limit: u64,
    with_embeddings: bool,
) -> ApiResult<Vec<(Hit, Option<Vec<f32>>)>> {
    let mut conn = pool.acquire().await?;
    let unit_vectors = query.strategy != DistanceStrategy::Cosine
        && crate::store::vectors::unit_vectors(&mut conn, query.vector_embedding_id).await?;
    let (sql, values) = nearest_statement(
        scope,
        query,
        threshold,
        limit,
        with_embeddings,
        unit_vectors,
    )?;

    // Every connection starts with `hnsw.iterative_scan = relaxed_order` and `hnsw.ef_search =
    // SESSION_EF_SEARCH` (see `store::connect_lazy`): iterative index scans keep reading the
    // HNSW index until `limit` rows pass the filters, so selective filters still return `k`
    // results where they exist; `relaxed_order` may return rows slightly out of order, so
    // they are re-sorted below. A larger `limit` raises `ef_search` for its own transaction.
    let rows = if limit <= SESSION_EF_SEARCH {
        sqlx::query_with(AssertSqlSafe(sql), values)
            .fetch_all(&mut *conn)
            .await?
    } else {
        let mut tx = sqlx::Connection::begin(&mut *conn).await?;
        sqlx::query("SELECT set_config('hnsw.iterative_scan', 'relaxed_order', true), set_config('hnsw.ef_search', $1, true)")
            .bind(Ord::min(limit, 1000).to_string())
            .execute(&mut *tx)
            .await?;
        let rows = sqlx::query_with(AssertSqlSafe(sql), values)
            .fetch_all(&mut *tx)
            .await?;
        tx.commit().await?;
        rows
    };

    let mut hits = Vec::with_capacity(rows.len());
    for row in rows {
        use sqlx::Row;
        let hit = <Hit as sqlx::FromRow<'_, sqlx::postgres::PgRow>>::from_row(&row)?;
        let embedding: Option<Vec<f32>> = if with_embeddings {
            row.try_get("embedding")?
        } else {
            None
        };
        hits.push((hit, embedding));
    }
    hits.sort_by(|a, b| a.0.score.total_cmp(&b.0.score));
    Ok(hits)
}

/// Similarity search: the `k` closest fragments within the threshold.
pub async fn similarity(
    pool: &PgPool,
    scope: &Scope<'_>,
    query: &VectorQuery<'_>,
    k: u64,
    threshold: Option<f64>,
) -> ApiResult<Vec<Hit>> {
    if k == 0 {
        return Ok(Vec::new());
    }
    let hits = nearest(pool, scope, query, threshold, k, false).await?;
    Ok(hits.into_iter().map(|(hit, _)| hit).collect())
}

/// MMR: `fetch_k` candidates by distance, then at most min(k, fetch_k) selected greedily,
/// returned in distance order.
pub async fn mmr(
    pool: &PgPool,
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
    let candidates = nearest(pool, scope, query, threshold, fetch_k, true).await?;
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
    pool: &PgPool,
    scope: &Scope<'_>,
    query: &str,
    k: u64,
    threshold: Option<f64>,
) -> ApiResult<Vec<Hit>> {
    if k == 0 || query.trim().is_empty() {
        return Ok(Vec::new());
    }
    let config = trove_text::text_search_config(query);
    let tsquery = Expr::cust_with_values(
        "plainto_tsquery($1::regconfig, $2)",
        [config.to_owned(), query.to_owned()],
    );
    let rank = Expr::cust_with_exprs(
        "ts_rank(\"fragments\".\"tsv\", $1, 1)::double precision",
        [tsquery.clone()],
    );
    let mut select = scoped_select(scope);
    select
        .expr_as(rank.clone(), Alias::new("score"))
        .and_where(Expr::cust_with_exprs(
            "\"fragments\".\"tsv\" @@ $1",
            [tsquery],
        ))
        .order_by_expr(rank.clone(), Order::Desc)
        .limit(k);
    if let Some(threshold) = threshold {
        select.and_where(rank.gte(threshold));
    }
    let (sql, values) = select.build_sqlx(PostgresQueryBuilder);
    let mut hits: Vec<Hit> = sqlx::query_as_with(AssertSqlSafe(sql), values)
        .fetch_all(pool)
        .await?;
    hits.sort_by(|a, b| b.score.total_cmp(&a.score));
    Ok(hits)
}

#[cfg(test)]
#[allow(clippy::expect_used, reason = "tests")]
mod tests {
    use super::*;

    fn statement_of(
        strategy: DistanceStrategy,
        unit_vectors: bool,
    ) -> ApiResult<(String, sea_query_sqlx::SqlxValues)> {
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
        };
        nearest_statement(&scope, &query, Some(0.5), 5, false, unit_vectors)
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
    fn max_inner_product_has_no_statement() {
        assert!(statement_of(DistanceStrategy::MaxInnerProduct, true).is_err());
    }
}
