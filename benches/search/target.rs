//! The searched pipeline, the queries, and the statements the service runs for them.

use sea_query::Condition;
use serde_json::{Value, json};
use sqlx::{AssertSqlSafe, PgConnection, PgPool, Row};
use trove::retrieval::cost::{self, ScopeEstimate};
use trove::retrieval::search::{
    self, DistanceStrategy, NearestPath, NearestPlan, Scope, VectorQuery,
};
use trove_query::classification::ClassificationRequest;
use uuid::Uuid;

use crate::common::app::Running;
use crate::common::floor::FloorSearch;
use crate::{K, TENANTS};

/// What the service runs before the statement when `k` exceeds `SESSION_EF_SEARCH` (and the
/// older per-search transaction, measured for comparison).
pub const SET_CONFIG: &str = "SELECT set_config('hnsw.iterative_scan', 'relaxed_order', true), set_config('hnsw.ef_search', $1, true)";

/// A query: its text, its vector (the service computes the same, or with `--vectors=minilm`
/// gets the same from the fake embeddings server), its tenant.
pub struct Probe {
    pub text: String,
    pub vector: Vec<f32>,
    pub tenant: i64,
}

/// What a search scenario needs: the pipeline, its vector table and resolved
/// classifications.
pub struct Target {
    pub pipeline_id: Uuid,
    pub ve_id: Uuid,
    pub schema: Value,
    pub classifications: Vec<String>,
    /// How many classifications the pipeline has.
    pub pipeline_classifications: usize,
    pub path: String,
    /// What the service reads as the association's vector count (`pg_class.reltuples`).
    pub estimated_rows: f64,
    /// The planner's view of each tenant's filtered scope, from which the service chooses
    /// its path (`cost::choose`), by tenant.
    pub filtered_scopes: Vec<ScopeEstimate>,
}

/// Creates the pipeline through the interface, so the service creates its association and
/// table, with the model `model_id` (the seeded `default`, `hash`, when `None`); returns it
/// with the id of its text splitter.
pub async fn create(trove: &Running, model_id: Option<Value>) -> (Target, Uuid) {
    let http = &trove.http;
    let model_id = match model_id {
        Some(id) => id,
        None => {
            let models = http
                .json(reqwest::Method::GET, "/embedding-models", None)
                .await;
            let model = models["data"]
                .as_array()
                .expect("models")
                .iter()
                .find(|m| m["name"] == "default")
                .expect("default model")
                .clone();
            assert_eq!(model["provider"], "hash", "the default model is `hash`");
            assert_eq!(model["dimensions"], 384);
            model["id"].clone()
        }
    };
    let splitters = http
        .json(
            reqwest::Method::GET,
            "/text-splitters?name=recursive-character",
            None,
        )
        .await;
    let pipeline = http
        .json(
            reqwest::Method::POST,
            "/pipelines",
            Some(json!({
                "name": "bench-search",
                "embedding_model_id": model_id,
                "default_text_splitter_id": splitters["data"][0]["id"],
                "classifications": ["public", "restricted"],
                "hierarchy": [["restricted", "public"]],
                "metadata_schema": metadata_schema(),
            })),
        )
        .await;
    let pipeline_id: Uuid = pipeline["id"].as_str().expect("id").parse().expect("uuid");
    let splitter_id: Uuid = splitters["data"][0]["id"]
        .as_str()
        .expect("splitter")
        .parse()
        .expect("uuid");
    (Target::read(trove, pipeline_id).await, splitter_id)
}

/// The pipeline's metadata schema: `tenant` (1 % of the documents each) and `source`.
pub fn metadata_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "tenant": {"type": "integer"},
            "source": {"type": "string"}
        }
    })
}

impl Target {
    async fn read(trove: &Running, pipeline_id: Uuid) -> Self {
        let row = trove::store::pipelines::get(&trove.state.pool, pipeline_id)
            .await
            .expect("pipeline row")
            .expect("pipeline");
        let context =
            trove::store::pipelines::search_context(trove.state.pool.pg_pool(), pipeline_id)
                .await
                .expect("search context")
                .expect("pipeline");
        let classifications = trove_query::classification::resolve(
            &ClassificationRequest::hierarchical(vec!["restricted".to_owned()]),
            &context.classification_names,
            &context.hierarchy(),
        )
        .expect("resolved");
        Self {
            pipeline_id,
            ve_id: row.ve_id.expect("association"),
            schema: row.metadata_schema.clone(),
            classifications,
            pipeline_classifications: context.classification_names.len(),
            path: format!("/pipelines/{pipeline_id}/search"),
            estimated_rows: 0.0,
            filtered_scopes: Vec::new(),
        }
    }

    pub fn vector_table(&self) -> String {
        trove::store::vectors::table_name(self.ve_id)
    }

    fn filter_json(probe: &Probe, filtered: bool) -> Option<Value> {
        filtered.then(|| json!({"tenant": {"$eq": probe.tenant}}))
    }

    pub fn condition(&self, probe: &Probe, filtered: bool) -> Option<Condition> {
        let filter = Self::filter_json(probe, filtered)?;
        let filter: trove_query::filter::Filter = serde_json::from_value(filter).expect("filter");
        let typed = trove_query::filter::validate(&filter, &self.schema).expect("valid filter");
        Some(trove_query::filter::compile(
            &typed,
            "fragments",
            &trove_query::filter::TeqExpansions::new(),
        ))
    }

    pub fn body(probe: &Probe, filtered: bool, k: u16) -> Value {
        let mut body = json!({
            "query": probe.text,
            "type": "similarity",
            "classification": "restricted",
            "params": {"k": k},
        });
        if let Some(filter) = Self::filter_json(probe, filtered) {
            body["filters"] = filter;
        }
        body
    }

    /// The vector side of the probe's search, as the service builds it.
    pub fn vector_query<'a>(&self, probe: &'a Probe, filtered: bool) -> VectorQuery<'a> {
        let scope = self
            .filtered_scopes
            .get(probe.tenant as usize)
            .copied()
            .filter(|_| filtered);
        VectorQuery {
            vector_embedding_id: self.ve_id,
            vector: &probe.vector,
            strategy: DistanceStrategy::Cosine,
            unit_vectors: true,
            estimated_rows: self.estimated_rows,
            selectivity: scope.map(|scope| cost::selectivity(self.estimated_rows, scope)),
            path: cost::choose(self.estimated_rows, scope, K as u64),
            // Searches start once the index is built.
            indexed: true,
            gate: None,
        }
    }

    /// Chooses the path of every tenant's filtered search as the service does, from the
    /// planner's current estimates; prints what was chosen.
    pub async fn choose_paths(&mut self, pool: &PgPool) {
        let mut estimates = Vec::with_capacity(TENANTS as usize);
        for tenant in 0..TENANTS {
            let probe = Probe {
                text: String::new(),
                vector: Vec::new(),
                tenant,
            };
            let scope = Scope {
                pipeline_id: self.pipeline_id,
                classifications: &self.classifications,
                filter: self.condition(&probe, true),
            };
            estimates.push(
                search::estimate_scope(
                    pool,
                    &scope,
                    self.classifications.len() >= self.pipeline_classifications,
                )
                .await
                .expect("estimate"),
            );
        }
        let exact = estimates
            .iter()
            .filter(|&&e| {
                cost::choose(self.estimated_rows, Some(e), K as u64) == NearestPath::Exact
            })
            .count();
        let (low, high) = estimates.iter().fold((f64::INFINITY, 0.0f64), |(l, h), e| {
            (l.min(e.admitted), h.max(e.admitted))
        });
        println!(
            "path under the tenant filter: exact for {exact} of {TENANTS} tenants (planner's estimate {low:.0}–{high:.0} fragments, reached {:?})",
            estimates.first().map(|e| e.reach)
        );
        self.filtered_scopes = estimates;
    }

    /// The service's statement for the probe (`trove::retrieval::search::nearest_plan`), for
    /// looking into it: its plan, an exact scan, other index scan settings.
    pub fn statement(&self, probe: &Probe, filtered: bool) -> NearestPlan {
        let scope = Scope {
            pipeline_id: self.pipeline_id,
            classifications: &self.classifications,
            filter: self.condition(probe, filtered),
        };
        search::nearest_plan(
            &scope,
            &self.vector_query(probe, filtered),
            None,
            K as u64,
            false,
        )
        .expect("statement")
    }

    /// The probe's search as the floor adapter takes it.
    pub fn floor_search(&self, probe: &Probe, filtered: bool) -> FloorSearch {
        FloorSearch {
            pipeline_id: self.pipeline_id,
            vector_embedding_id: self.ve_id,
            classifications: self.classifications.clone(),
            pipeline_classifications: self.pipeline_classifications,
            filter: self.condition(probe, filtered),
            vector: probe.vector.clone(),
            limit: K as u64,
            mmr: false,
            estimated_rows: self.estimated_rows,
        }
    }

    pub async fn library(
        &self,
        pool: &trove::store::Pool,
        probe: &Probe,
        filtered: bool,
    ) -> Vec<(Uuid, f64)> {
        let scope = Scope {
            pipeline_id: self.pipeline_id,
            classifications: &self.classifications,
            filter: self.condition(probe, filtered),
        };
        let query = self.vector_query(probe, filtered);
        let mut conn = pool.acquire_warm().await.expect("connection");
        let hits = search::similarity(&mut conn, &scope, &query, K as u64, None)
            .await
            .expect("library search");
        conn.park();
        hits.into_iter().map(|h| (h.id, h.score)).collect()
    }
}

/// The statement with index scans disabled: an exact scan. Planned afresh
/// (`force_custom_plan`): a generic plan the connection cached for the same statement keeps the
/// index scan it was made with, whatever `enable_indexscan` says now.
pub async fn exact_search(pool: &PgPool, plan: NearestPlan) -> Vec<(Uuid, f64)> {
    let NearestPlan { sql, arguments, .. } = plan;
    let mut tx = pool.begin().await.expect("begin");
    sqlx::raw_sql(
        "SET LOCAL enable_indexscan = off; SET LOCAL plan_cache_mode = force_custom_plan",
    )
    .execute(&mut *tx)
    .await
    .expect("set");
    let rows = sqlx::query_with(AssertSqlSafe(sql), arguments)
        .fetch_all(&mut *tx)
        .await
        .expect("search statement");
    tx.commit().await.expect("commit");
    hits_of(&rows)
}

/// The statement alone on a connection whose session settings the caller chose.
pub async fn session_search(conn: &mut PgConnection, plan: NearestPlan) -> Vec<(Uuid, f64)> {
    let NearestPlan { sql, arguments, .. } = plan;
    let rows = sqlx::query_with(AssertSqlSafe(sql), arguments)
        .fetch_all(conn)
        .await
        .expect("search statement");
    hits_of(&rows)
}

/// (id, score) sorted by score, as the service re-sorts `relaxed_order` results.
fn hits_of(rows: &[sqlx::postgres::PgRow]) -> Vec<(Uuid, f64)> {
    let mut hits: Vec<(Uuid, f64)> = rows
        .iter()
        .map(|r| (r.get::<Uuid, _>("id"), r.get::<f64, _>("score")))
        .collect();
    hits.sort_by(|a, b| a.1.total_cmp(&b.1));
    hits.truncate(K);
    hits
}
