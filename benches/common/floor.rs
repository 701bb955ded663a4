//! The floor of a vector search, or of a hybrid search: its statement run alone, as the service
//! runs it.

use std::time::{Duration, Instant};

use sea_query::Condition;
use sqlx::Row;
use trove::retrieval::cost;
use trove::retrieval::estimates::ScopeEstimates;
use trove::retrieval::search::{
    self, DistanceStrategy, EstimateBasis, HybridQuery, NearestPath, Scope, VectorQuery,
    estimate_scope_cached, nearest_plan, run_plan,
};
use trove::store::Pool;
use trove_query::hybrid::Fusion;
use uuid::Uuid;

/// A vector search (similarity, or the candidates of MMR) with cosine distance, as the
/// service sees it once the request is checked and the query embedded.
#[derive(Clone)]
pub struct FloorSearch {
    pub pipeline_id: Uuid,
    pub vector_embedding_id: Uuid,
    /// The classifications the search may see (resolved).
    pub classifications: Vec<String>,
    /// How many classifications the pipeline has.
    pub pipeline_classifications: usize,
    /// The compiled metadata filter.
    pub filter: Option<Condition>,
    pub vector: Vec<f32>,
    /// Rows kept: `k`, or MMR's `fetch_k` (with their vectors); for [`hybrid_floor`], the
    /// candidates of each list.
    pub limit: u64,
    pub mmr: bool,
    /// The planner's estimate of the association's vector count, as the service reads it.
    pub estimated_rows: f64,
}

/// What the statement returned and took.
pub struct Floor {
    /// From taking a pooled connection to the last row.
    pub elapsed: Duration,
    /// (id, score), sorted by score and cut to the limit, as the service sorts them.
    pub hits: Vec<(Uuid, f64)>,
    /// The statement computed every distance of the scope instead of walking the HNSW index.
    pub exact: bool,
    /// The share of the association the planner's estimate put in a restricted scope.
    pub selectivity: Option<f64>,
}

/// The statement of `search` planned as the service plans it (the path chosen from the
/// planner's estimate of a restricted scope, kept in `estimates` as the service keeps its
/// own), then run alone on a warm connection of `pool` (a `trove::store::connect_lazy` pool,
/// whose sessions carry the service's settings) by the service's own `run_plan`; only the run is
/// timed. Every call the benches make into the plan API of `trove::retrieval::search` for a
/// floor is here.
pub async fn floor(pool: &Pool, estimates: &ScopeEstimates, search: FloorSearch) -> Floor {
    let (scope, query) = planned(pool, estimates, &search).await;
    let (path, selectivity) = (query.path, query.selectivity);
    let plan = nearest_plan(&scope, &query, None, search.limit, search.mmr).expect("statement");
    let started = Instant::now();
    let mut conn = pool.acquire_warm().await.expect("connection");
    let rows = run_plan(&mut conn, plan).await.expect("search statement");
    let elapsed = started.elapsed();
    conn.park();
    let mut hits: Vec<(Uuid, f64)> = rows
        .iter()
        .map(|r| (r.get::<Uuid, _>("id"), r.get::<f64, _>("score")))
        .collect();
    hits.sort_by(|a, b| a.1.total_cmp(&b.1));
    hits.truncate(usize::try_from(search.limit).unwrap_or(usize::MAX));
    Floor {
        elapsed,
        hits,
        exact: path != NearestPath::Index,
        selectivity,
    }
}

/// The scope of `search` and its vector query, the path chosen as the service chooses it.
async fn planned<'a>(
    pool: &Pool,
    estimates: &ScopeEstimates,
    search: &'a FloorSearch,
) -> (Scope<'a>, VectorQuery<'a>) {
    let scope = Scope {
        pipeline_id: search.pipeline_id,
        classifications: &search.classifications,
        filter: search.filter.clone(),
    };
    let (path, selectivity) = choose_path(pool, estimates, &scope, search).await;
    let query = VectorQuery {
        vector_embedding_id: search.vector_embedding_id,
        vector: &search.vector,
        strategy: DistanceStrategy::Cosine,
        unit_vectors: true,
        estimated_rows: search.estimated_rows,
        selectivity,
        path,
        indexed: index_built(pool, search.vector_embedding_id).await,
        gate: None,
    };
    (scope, query)
}

/// The path the service chooses for `search` (from the planner's estimate of a restricted
/// scope, kept in `estimates` as the service keeps its own), and the share of the association
/// the estimate puts in a restricted scope.
async fn choose_path(
    pool: &Pool,
    estimates: &ScopeEstimates,
    scope: &Scope<'_>,
    search: &FloorSearch,
) -> (NearestPath, Option<f64>) {
    let restricted =
        search.filter.is_some() || search.classifications.len() < search.pipeline_classifications;
    if !restricted {
        return (NearestPath::Index, None);
    }
    let vectors = search.estimated_rows;
    // The service's basis: the vector count, the pipeline's metadata indexes and its last
    // change.
    let (pipeline_changed, metadata_indexes): (chrono::DateTime<chrono::Utc>, Vec<Uuid>) =
        sqlx::query_as(
            "SELECT p.updated_at, array(SELECT i.id FROM pipeline_indexes AS i
                                       WHERE i.pipeline_id = p.id ORDER BY i.id)
             FROM pipelines AS p WHERE p.id = $1",
        )
        .bind(search.pipeline_id)
        .fetch_one(pool.pg_pool())
        .await
        .expect("metadata indexes");
    let basis = EstimateBasis {
        vectors,
        metadata_indexes: &metadata_indexes,
        pipeline_changed,
        pipeline_classifications: search.pipeline_classifications,
    };
    let estimate = estimate_scope_cached(pool, estimates, scope, &basis)
        .await
        .expect("estimate");
    (
        cost::choose(vectors, Some(estimate), search.limit),
        Some(cost::selectivity(vectors, estimate)),
    )
}

/// The service's view of the association's index (dropped for a burst of ingestion or not).
async fn index_built(pool: &Pool, vector_embedding_id: Uuid) -> bool {
    sqlx::query_scalar("SELECT deferred_index_m IS NULL FROM vector_embeddings WHERE id = $1")
        .bind(vector_embedding_id)
        .fetch_one(pool.pg_pool())
        .await
        .expect("index state")
}

/// The lexical side of a hybrid search's floor: the query's text, and `k`. The vector list's
/// candidates are the [`FloorSearch`]'s `limit`, the lexical list's as many; the fusion is the
/// default (`rrf_k` 60, both weights 1).
#[derive(Clone)]
pub struct HybridFloor {
    pub text: String,
    pub k: u64,
}

/// A hybrid search's statement, planned as the service plans it (the vector list's path
/// chosen for `search.limit` rows, the candidates of each list) and built and run alone by the
/// service's own `search::hybrid` on a warm connection of `pool`; building and running it are
/// timed (building takes microseconds). Hits are in the fused order, best first.
pub async fn hybrid_floor(
    pool: &Pool,
    estimates: &ScopeEstimates,
    search: FloorSearch,
    lexical: &HybridFloor,
) -> Floor {
    let (scope, query) = planned(pool, estimates, &search).await;
    let (path, selectivity) = (query.path, query.selectivity);
    let hybrid = HybridQuery {
        text: &lexical.text,
        candidates: search.limit.max(lexical.k),
        fusion: Fusion {
            rrf_k: 60.0,
            similarity_weight: 1.0,
            full_text_weight: 1.0,
        },
        k: lexical.k,
    };
    let started = Instant::now();
    let mut conn = pool.acquire_warm().await.expect("connection");
    let rows = search::hybrid(&mut conn, &scope, &query, None, &hybrid)
        .await
        .expect("hybrid statement");
    let elapsed = started.elapsed();
    conn.park();
    let mut hits: Vec<(Uuid, f64)> = rows.iter().map(|r| (r.hit.id, r.hit.score)).collect();
    hits.truncate(usize::try_from(lexical.k).unwrap_or(usize::MAX));
    Floor {
        elapsed,
        hits,
        exact: path != NearestPath::Index,
        selectivity,
    }
}
