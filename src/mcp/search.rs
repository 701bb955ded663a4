//! The single place where `search_knowledge` reaches the search service
//! ([`crate::service::search`], shared with `POST /pipelines/{id}/search`).

use serde_json::Value;
use uuid::Uuid;

use super::tools::{Effective, SearchRequest, SearchType};
use crate::auth::AuthContext;
use crate::error::ApiResult;
use crate::retrieval::search::DistanceStrategy;
use crate::service::search::{
    self as service, EffectiveParams, Prefetched, QueryVector, SearchInput, SearchKind,
    SearchParams,
};
use crate::state::AppState;

/// Embeds the query with an embedding model of the pipeline.
pub async fn embed_query(state: &AppState, model_id: Uuid, query: &str) -> ApiResult<Vec<f32>> {
    service::embed_query(state, model_id, query).await
}

fn kind(kind: SearchType) -> SearchKind {
    match kind {
        SearchType::Similarity => SearchKind::Similarity,
        SearchType::Mmr => SearchKind::Mmr,
        SearchType::Search => SearchKind::Search,
        SearchType::Query => SearchKind::Query,
        SearchType::Hybrid => SearchKind::Hybrid,
        SearchType::History => SearchKind::History,
    }
}

/// The service's `params`: always present (so the MCP defaults are explicit), naming the
/// chosen embedding model.
fn service_params(params: Effective, model_id: Uuid) -> SearchParams {
    SearchParams {
        k: Some(params.k),
        fetch_k: Some(params.fetch_k),
        lambda_mult: Some(params.lambda_mult),
        threshold: params.threshold,
        embedding: Some(model_id),
    }
}

/// The parsed parameters as the service echoes them in errors.
pub fn params_json(params: Effective, model_id: Uuid) -> Value {
    EffectiveParams::from_request(Some(&service_params(params, model_id))).to_json()
}

/// Runs the search of `search_knowledge`: hierarchical classifications, no filter, cosine.
///
/// The service reads the pipeline (read and execute); vector searches use
/// `request.query_vector` (computed first, for every type, as the interface orders it), so the
/// query is embedded once per call.
pub async fn run(
    state: &AppState,
    auth: &AuthContext,
    request: SearchRequest,
) -> ApiResult<Vec<Value>> {
    let input = SearchInput {
        query: request.query,
        kind: kind(request.kind),
        classification: trove_query::classification::ClassificationRequest::hierarchical(
            request.classifications,
        ),
        params: Some(service_params(request.params, request.embedding_model_id)),
        filters: None,
        distance_strategy: Some(DistanceStrategy::Cosine),
    };
    let query_vector = QueryVector {
        model_id: request.embedding_model_id,
        vector: request.query_vector,
    };
    let pipeline_id = request.context.pipeline.id;
    service::run_with(
        state,
        auth,
        pipeline_id,
        &input,
        Some(query_vector),
        Some(Prefetched::read(pipeline_id, request.context)),
    )
    .await
}
