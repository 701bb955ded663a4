//! The single place where `search_knowledge` reaches the search service
//! ([`crate::service::search`], shared with `POST /pipelines/{id}/search`): the steps in the
//! interface's order (read the pipeline, select the embedding model, embed the query for every
//! type, search) and their JSON-RPC errors.

use rmcp::ErrorData;
use serde_json::{Value, json};
use uuid::Uuid;

use super::tools::{SearchArgs, error_data, parse_uuid};
use crate::access::AccessLevel;
use crate::auth::AuthContext;
use crate::error::ApiError;
use crate::retrieval::kinds::{DistanceStrategy, EffectiveParams, SearchKind};
use crate::service::pipelines::{self, PipelineRow};
use crate::service::search::{self as service, Prefetched, QueryVector, SearchInput};
use crate::state::AppState;

/// The embedding model of the search: the requested one when the pipeline uses it, else the
/// pipeline's (`-32600` when there is none to use).
fn model_id(requested: Option<Uuid>, pipeline: &PipelineRow) -> Result<Uuid, ErrorData> {
    match (requested, pipeline.em_id) {
        (Some(requested), Some(model)) if requested == model => Ok(model),
        (Some(_), _) => Err(ErrorData::invalid_request(
            "Embedding model not found",
            None,
        )),
        (None, Some(model)) => Ok(model),
        (None, None) => Err(ErrorData::invalid_request(
            "Missing embedding model ID",
            None,
        )),
    }
}

/// Runs `search_knowledge`: hierarchical classifications, no filter, cosine; the query is
/// embedded once, for every type, before the search.
pub async fn run(
    state: &AppState,
    auth: &AuthContext,
    args: SearchArgs,
) -> Result<Vec<Value>, ErrorData> {
    let pipeline_id = parse_uuid(&args.pipeline_id)?;
    let requested_model = args
        .embedding_model_id
        .as_deref()
        .map(parse_uuid)
        .transpose()?;

    // 1. The pipeline, with read and execute.
    let mut context = pipelines::require_for_search(
        &state.pool,
        auth,
        pipeline_id,
        AccessLevel::READ.union(AccessLevel::EXECUTE),
    )
    .await
    .map_err(|error| error_data(&error))?;

    // 2. The embedding model: one of the pipeline's, by model id (a `ready` one added to the
    // pipeline after its creation, too: extension model migration).
    match service::select_association(state, &mut context, requested_model).await {
        Ok(()) | Err(ApiError::VectorEmbeddingNotFound(_)) => {}
        Err(error) => return Err(error_data(&error)),
    }
    let model_id = model_id(requested_model, &context.pipeline)?;

    // 3. The query's embedding, for every type.
    let vector = match context.stored_model() {
        Some(stored) => service::embed_query_with(state, &stored, &args.query).await,
        None => service::embed_query(state, model_id, &args.query).await,
    }
    .map_err(|error| error_data(&error))?;

    // 4. The search, with every parameter explicit (so the defaults apply when `params` is
    // omitted) and naming the chosen model.
    let kind = args.kind.0;
    // A kind the deployment does not run echoes its parameters as similarity takes them.
    let params_kind = if kind.is_implemented(state.config.extensions) {
        kind
    } else {
        SearchKind::Similarity
    };
    let mut params = EffectiveParams::from_request(
        params_kind,
        args.params
            .as_ref()
            .map(|params| params.as_search_params())
            .as_ref(),
    );
    params.embedding = Some(model_id);
    let input = SearchInput {
        query: args.query,
        kind,
        classification: trove_query::classification::ClassificationRequest::hierarchical(
            args.classifications,
        ),
        params: Some(params.as_request()),
        filters: None,
        distance_strategy: Some(DistanceStrategy::Cosine),
    };
    let query_vector = QueryVector { model_id, vector };
    service::run_with(
        state,
        auth,
        pipeline_id,
        &input,
        Some(query_vector),
        Some(Prefetched::read(pipeline_id, context)),
    )
    .await
    .map(|searched| searched.results)
    .map_err(|error| search_error(&error, params_kind, &params))
}

/// The JSON-RPC error of a failed search; a kind the release does not run carries the parsed
/// parameters as `data.params.params`.
fn search_error(error: &ApiError, kind: SearchKind, params: &EffectiveParams) -> ErrorData {
    let mut data = error_data(error);
    if let ApiError::NotImplemented(_) = error {
        data.data = Some(json!({ "params": { "params": params.to_json(kind) } }));
    }
    data
}
