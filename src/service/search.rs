//! `POST /pipelines/{id}/search` (and the MCP `search_knowledge` tool): parameters, the
//! embedding to use, classifications, filters, and the three search kinds.

use serde_json::{Map, Value, json};
use uuid::Uuid;

use crate::access::{AccessLevel, ObjectType};
use crate::auth::AuthContext;
use crate::auth::key_check::{self, Credentials};
use crate::auth::search_memory::Remembered;
use crate::config::{Extension, Extensions};
use crate::error::{ApiError, ApiResult};
use crate::providers::embedding::ProviderKind;
use crate::retrieval::cost;
pub use crate::retrieval::kinds::{DistanceStrategy, EffectiveParams, SearchKind, SearchParams};
use crate::retrieval::search::{
    self, Gate, Hit, HybridHit, HybridQuery, NearestPath, Scope, VectorQuery,
};
use crate::service::llms::ReadyReranker;
use crate::state::AppState;
use crate::store::api_keys::KeyRead;
use crate::store::pipelines::{PipelineRow, SearchContext};
use crate::store::{Connection, DatabaseError};
use trove_query::hybrid::Fusion;

/// A search request, already deserialized.
pub struct SearchInput {
    pub query: String,
    pub kind: SearchKind,
    pub classification: trove_query::classification::ClassificationRequest,
    pub params: Option<SearchParams>,
    pub filters: Option<trove_query::filter::Filter>,
    pub distance_strategy: Option<DistanceStrategy>,
}

/// The search result object of a hit (no `embedding`, `expired_at` null).
pub fn hit_object(state: &AppState, hit: Hit) -> ApiResult<Value> {
    let text = state
        .cipher
        .decrypt_text(&hit.content)
        .map_err(|_| ApiError::Decryption)?;
    let mut object = Map::new();
    object.insert("id".to_owned(), json!(hit.id));
    object.insert("classification".to_owned(), json!(hit.classification));
    object.insert("metadata".to_owned(), hit.metadata);
    object.insert("document_id".to_owned(), json!(hit.document_id));
    if !text.is_empty() {
        object.insert("page_content".to_owned(), json!(text));
    }
    object.insert("version".to_owned(), json!(hit.version));
    object.insert("expired_at".to_owned(), Value::Null);
    object.insert("score".to_owned(), json!(hit.score));
    object.insert("order_id".to_owned(), json!(hit.order_id));
    Ok(Value::Object(object))
}

/// Puts the association that `requested` names (its id or its model's), when it is not the
/// pipeline's default, in the place of the default's in `context`: `Vector embedding not
/// found` when the pipeline has none such, `Conflict related error` with its progress while it
/// is not `ready` (extension: model migration).
pub async fn select_association(
    state: &AppState,
    context: &mut SearchContext,
    requested: Option<Uuid>,
) -> ApiResult<()> {
    let Some(requested) = requested else {
        return Ok(());
    };
    let pipeline = &context.pipeline;
    if pipeline.ve_id == Some(requested) || pipeline.em_id == Some(requested) {
        return Ok(());
    }
    let association =
        crate::store::pipelines::association_context(state.pool.pg_pool(), pipeline.id, requested)
            .await?
            .ok_or(ApiError::VectorEmbeddingNotFound(Some(requested)))?;
    if association.status != crate::store::vector_embeddings::STATUS_READY {
        return Err(super::vector_embeddings::not_ready(
            association.ve_id,
            &association.status,
            association.fragments_done,
            association.fragments_total,
        ));
    }
    context.use_association(association);
    Ok(())
}

/// Which association a vector search uses: `params.embedding` (a vector embedding id or the
/// id of its model), else the pipeline's default; `Vector embedding not found` otherwise.
fn vector_embedding(pipeline: &PipelineRow, requested: Option<Uuid>) -> ApiResult<(Uuid, Uuid)> {
    let (Some(ve), Some(model)) = (pipeline.ve_id, pipeline.em_id) else {
        return Err(ApiError::VectorEmbeddingNotFound(requested));
    };
    match requested {
        None => Ok((ve, model)),
        Some(id) if id == ve || id == model => Ok((ve, model)),
        Some(id) => Err(ApiError::VectorEmbeddingNotFound(Some(id))),
    }
}

/// Embeds the query with the pipeline's model.
pub async fn embed_query(state: &AppState, model_id: Uuid, query: &str) -> ApiResult<Vec<f32>> {
    let stored = crate::store::embedding::model(&state.pool, model_id)
        .await?
        .ok_or(ApiError::NotFound {
            message: "Embedding model not found",
            id: Some(model_id),
        })?;
    embed_query_with(state, &stored, query).await
}

/// Embeds the query with a model already read.
pub async fn embed_query_with(
    state: &AppState,
    stored: &crate::store::embedding::StoredModel,
    query: &str,
) -> ApiResult<Vec<f32>> {
    let mut vectors =
        super::embedding_models::embed_texts(state, stored, &[query.to_owned()]).await?;
    vectors
        .pop()
        .ok_or_else(|| ApiError::Internal("Received empty embedding vector".to_owned()))
}

/// A query embedding computed before the search (the MCP tool embeds the query first, for every
/// search type), with the embedding model that produced it.
pub struct QueryVector {
    pub model_id: Uuid,
    pub vector: Vec<f32>,
}

/// A pipeline's search context read before the key check completed (see
/// `http::search::SearchAuth`): used only after the key is verified and its permissions
/// checked. It keeps the connection that read it, on which the search statement then runs
/// (see [`run_with`]).
pub struct Prefetched {
    pipeline_id: Uuid,
    context: ApiResult<Option<crate::store::pipelines::SearchContext>>,
    connection: Option<Connection>,
    /// The context is remembered from an earlier search, read at this search epoch: the
    /// search statement is gated on it (see [`run_remembered`]).
    gate: Option<i64>,
}

impl Prefetched {
    /// A context the caller has read already.
    pub fn read(pipeline_id: Uuid, context: crate::store::pipelines::SearchContext) -> Self {
        Self {
            pipeline_id,
            context: Ok(Some(context)),
            connection: None,
            gate: None,
        }
    }

    pub fn pipeline_id(&self) -> Uuid {
        self.pipeline_id
    }
}

/// Reads the key `key_id` (for the key check) and the pipeline's search context (ahead of
/// the permission check) in one statement, on a connection it keeps.
pub async fn prefetch(
    state: &AppState,
    key_id: Uuid,
    pipeline_id: Uuid,
) -> (Result<KeyRead, DatabaseError>, Prefetched) {
    let failed = |error: DatabaseError| {
        let prefetched = Prefetched {
            pipeline_id,
            context: Err(ApiError::from(&error)),
            connection: None,
            gate: None,
        };
        (Err(error), prefetched)
    };
    let mut connection = match state.pool.acquire_warm().await {
        Ok(connection) => connection,
        Err(error) => return failed(error),
    };
    match crate::store::pipelines::key_and_search_context(&mut connection, key_id, pipeline_id)
        .await
    {
        Ok((key, context)) => (
            Ok(key),
            Prefetched {
                pipeline_id,
                context: Ok(context),
                connection: Some(connection),
                gate: None,
            },
        ),
        Err(error) => failed(error),
    }
}

/// What a key needs on a pipeline to search it.
const SEARCH_ACCESS: AccessLevel = AccessLevel::READ.union(AccessLevel::EXECUTE);

/// Whether the pipeline's model embeds on a remote server.
fn embeds_remotely(pipeline: &PipelineRow) -> bool {
    pipeline
        .em_provider
        .as_deref()
        .and_then(ProviderKind::parse)
        == Some(ProviderKind::OpenAi)
}

/// The key check of a search on `pipeline_id` and the pipeline's search context, read in one
/// statement (see [`prefetch`]). A key that passes and holds read and execute on the pipeline
/// is remembered with the context for its next searches there ([`run_remembered`]); otherwise
/// what was remembered for it is forgotten, so that a refused key's next searches are not
/// started on it.
pub async fn check(
    state: &AppState,
    credentials: &Credentials<'_>,
    pipeline_id: Uuid,
) -> ApiResult<(AuthContext, Prefetched)> {
    let (key, prefetched) = prefetch(state, credentials.key_id, pipeline_id).await;
    let read_key = key
        .as_ref()
        .ok()
        .and_then(Option::as_ref)
        .map(|(k, _)| k.clone());
    let verified = key_check::verify(credentials, key, &state.metrics.key_check_unavailable);
    match (&verified, read_key, &prefetched.context) {
        (Ok(auth), Some(key), Ok(Some(context)))
            if auth
                .object_level(ObjectType::Pipelines, pipeline_id)
                .contains(SEARCH_ACCESS) =>
        {
            state.search_memory.remember(&key, auth, context);
        }
        _ => state.search_memory.forget(credentials, pipeline_id),
    }
    Ok((verified?, prefetched))
}

/// A similarity or MMR search answered on what an earlier search of the key on the pipeline
/// read (see `search_memory`): `None` when the search is of another kind, or its pipeline's
/// model embeds on a remote server (a call that costs more than the read saved, and that a key
/// refused since must not cause), or its statement's gate found the remembered read out of
/// date, or it found no rows, or it failed; the caller then makes it from a fresh read.
pub async fn run_remembered(
    state: &AppState,
    remembered: &Remembered,
    pipeline_id: Uuid,
    input: &SearchInput,
) -> Option<Searched> {
    let context = &remembered.context;
    let gated = matches!(input.kind, SearchKind::Similarity | SearchKind::Mmr);
    if !gated || embeds_remotely(&context.pipeline) {
        return None;
    }
    // A replica that has not replayed a change to the key or the pipeline would find the
    // gate still open: with replicas, the primary confirms the epoch first.
    if !state.replicas.is_empty() {
        let mut connection = state.pool.acquire_warm().await.ok()?;
        let epoch = crate::store::pipelines::search_epoch(&mut connection)
            .await
            .ok()?;
        connection.park();
        if epoch != context.search_epoch {
            return None;
        }
    }
    let prefetched = Prefetched {
        pipeline_id,
        context: Ok(Some(context.clone())),
        connection: None,
        gate: Some(context.search_epoch),
    };
    match run_with(
        state,
        &remembered.auth,
        pipeline_id,
        input,
        None,
        Some(prefetched),
    )
    .await
    {
        Ok(searched) if !searched.results.is_empty() => {
            state.metrics.searches_remembered.inc();
            Some(searched)
        }
        _ => None,
    }
}

/// Runs a search statement where searches read: on the next usable read replica when the
/// deployment has them (the connection kept from the context read goes back to the pool),
/// else on the kept connection or one from the primary's pool. A statement a replica cannot
/// answer — it went away, has not replayed the pipeline's tables yet, or its recovery
/// cancelled the statement — runs again on the primary (`store::replicas`).
async fn on_read_connection<T, F, S>(
    state: &AppState,
    mut kept: Option<Connection>,
    statement: S,
) -> ApiResult<T>
where
    S: Fn(Connection) -> F,
    F: Future<Output = (Connection, ApiResult<T>)>,
{
    if let Some(replica) = state.replicas.pick() {
        if let Some(connection) = kept.take() {
            connection.park();
        }
        match replica.pool().acquire_warm().await {
            Ok(connection) => match statement(connection).await {
                (_, Err(ApiError::DatabaseConnection(_))) => replica.set_down(),
                (_, Err(ApiError::DatabaseBehind(_))) => {}
                (connection, result) => {
                    connection.park();
                    return result;
                }
            },
            Err(_) => replica.set_down(),
        }
    }
    let connection = match kept {
        Some(connection) => connection,
        None => state.pool.acquire_warm().await?,
    };
    let (connection, result) = statement(connection).await;
    if result.is_ok() {
        connection.park();
    }
    result
}

/// Runs a search on a pipeline the key can read and execute, with what the caller has
/// already: the query's embedding (a vector search uses it instead of embedding the query
/// again when it comes from the model the search selects), and the pipeline's search context
/// (read ahead; still subject to the permission check). A search naming a reranker (extension
/// `hybrid`) has its first results reordered by it.
///
/// Checks come in the interface's order: permission, search kind, classification, filter,
/// vector embedding, embedding.
pub async fn run_with(
    state: &AppState,
    auth: &AuthContext,
    pipeline_id: Uuid,
    input: &SearchInput,
    query_vector: Option<QueryVector>,
    prefetched: Option<Prefetched>,
) -> ApiResult<Searched> {
    let gate = prefetched
        .as_ref()
        .filter(|p| p.pipeline_id == pipeline_id)
        .and_then(|p| p.gate);
    let (mut context, connection) = permitted_context(state, auth, pipeline_id, prefetched).await?;
    let requested = EffectiveParams::from_request(input.kind, input.params.as_ref());
    // An association other than the default, named by `params.embedding`: read now, its
    // error reported in its turn.
    let mut association_error = if input.kind.embeds_query() {
        select_association(state, &mut context, requested.embedding)
            .await
            .err()
    } else {
        None
    };
    let pipeline = &context.pipeline;
    // The search statement runs on the connection that read the context: its server process
    // has just worked on this pipeline, and the search takes one connection fewer. A model
    // embedding the query outside the process can take hundreds of milliseconds, during
    // which the connection serves others.
    let remote_model = embeds_remotely(pipeline);
    let connection = match connection {
        Some(connection) if remote_model => {
            connection.park();
            None
        }
        kept => kept,
    };
    check_kind(input.kind, pipeline, &requested, state.config.extensions)?;
    let reranker = reranker_of(state, auth, input.kind, &requested).await?;
    // The statement returns the reranker's candidates too; the search keeps `k` of them.
    let params = EffectiveParams {
        k: requested.before_reranking(reranker.is_some()),
        ..requested
    };
    // The query's vector (similarity and MMR with k > 0) is computed while the
    // classifications are read and the filter compiled.
    let vector_target = input
        .kind
        .embeds_query()
        .then(|| match association_error.take() {
            Some(error) => Err(error),
            None => vector_embedding(pipeline, params.embedding),
        });
    let wants_vector = params.k > 0 && (input.kind != SearchKind::Mmr || params.fetch_k > 0);
    let embedding = query_embedding(
        state,
        &context,
        &input.query,
        vector_target.as_ref(),
        wants_vector,
        query_vector,
    );
    let vector_limit = (wants_vector && matches!(vector_target, Some(Ok(_))))
        .then(|| params.statement_rows(input.kind));
    let scope_parts = resolve_scope(state, &context, input, pipeline_id, vector_limit);
    let (scope_parts, embedding) = tokio::join!(scope_parts, embedding);
    let parts = scope_parts?;
    if parts.classifications.is_empty() {
        return Ok(Searched::default());
    }
    let search = Search {
        state,
        context: &context,
        pipeline_id,
        parts,
        connection,
        params,
        gate,
    };
    if !input.kind.embeds_query() {
        let hits = search.full_text(&input.query).await?;
        return Ok(Searched::of(
            hits.into_iter()
                .map(|hit| hit_object(state, hit))
                .collect::<ApiResult<_>>()?,
        ));
    }
    let ve = match vector_target {
        Some(target) => target?.0,
        None => {
            return Err(ApiError::Internal(
                "no vector embedding selected".to_owned(),
            ));
        }
    };
    let Some(vector) = embedding else {
        // k = 0, or MMR with fetch_k = 0.
        return Ok(Searched::default());
    };
    let vector = vector?;
    let strategy = input.distance_strategy.unwrap_or(DistanceStrategy::DEFAULT);
    let results: Vec<Value> = if input.kind == SearchKind::Hybrid {
        let hits = search.hybrid(ve, &vector, strategy, &input.query).await?;
        hits.into_iter()
            .map(|ranked| {
                let mut object = hit_object(state, ranked.hit)?;
                if let Value::Object(map) = &mut object {
                    map.insert("similarity_rank".to_owned(), json!(ranked.similarity_rank));
                    map.insert("full_text_rank".to_owned(), json!(ranked.full_text_rank));
                }
                Ok(object)
            })
            .collect::<ApiResult<_>>()?
    } else {
        let hits = search.vector(input.kind, ve, &vector, strategy).await?;
        hits.into_iter()
            .map(|hit| hit_object(state, hit))
            .collect::<ApiResult<_>>()?
    };
    Ok(match reranker {
        Some(reranker) => reranked(state, &reranker, &input.query, results, requested.k).await,
        None => Searched::of(results),
    })
}

/// What a search found, best first, and whether its reranker failed (the results are then in
/// their order before reranking).
#[derive(Debug, Default)]
pub struct Searched {
    pub results: Vec<Value>,
    pub rerank_skipped: bool,
}

impl Searched {
    fn of(results: Vec<Value>) -> Self {
        Self {
            results,
            rerank_skipped: false,
        }
    }
}

/// The reranker of a similarity or hybrid search that names one, with the extension `hybrid`
/// on (R|X on it, else 404 `LLM not found`; a chat LLM is 400).
async fn reranker_of(
    state: &AppState,
    auth: &AuthContext,
    kind: SearchKind,
    params: &EffectiveParams,
) -> ApiResult<Option<(ReadyReranker, u16)>> {
    let reranks = state.config.extensions.has(Extension::Hybrid)
        && matches!(kind, SearchKind::Similarity | SearchKind::Hybrid);
    match params.rerank {
        Some(rerank) if reranks => {
            let reranker =
                super::llms::reranker(&state.pool, &state.cipher, auth, rerank.llm).await?;
            Ok(Some((reranker, rerank.candidates)))
        }
        _ => Ok(None),
    }
}

/// Sends the first candidates' texts to the reranker in one request and keeps the `k` most
/// relevant, each with the reranker's relevance as its score (the results beyond the
/// candidates follow in their order). When the reranker fails, the first `k` in the order
/// before reranking, counted and logged once.
async fn reranked(
    state: &AppState,
    (reranker, candidates): &(ReadyReranker, u16),
    query: &str,
    mut results: Vec<Value>,
    k: u16,
) -> Searched {
    let k = usize::from(k);
    let first = results.len().min(usize::from(*candidates));
    let texts: Vec<String> = results[..first]
        .iter()
        .map(|r| r["page_content"].as_str().unwrap_or_default().to_owned())
        .collect();
    if texts.is_empty() {
        results.truncate(k);
        return Searched::of(results);
    }
    let timeout = state.config.rerank_timeout;
    match state
        .llm
        .rerank(&reranker.target(), query, &texts, timeout)
        .await
    {
        Ok(order) => {
            let rest = results.split_off(first);
            let mut slots: Vec<Option<Value>> = results.into_iter().map(Some).collect();
            let mut ordered: Vec<Value> = order
                .into_iter()
                .filter_map(|(index, relevance)| {
                    let mut result = slots.get_mut(index)?.take()?;
                    if let Value::Object(map) = &mut result {
                        map.insert("score".to_owned(), json!(relevance));
                    }
                    Some(result)
                })
                .collect();
            ordered.extend(rest);
            ordered.truncate(k);
            Searched::of(ordered)
        }
        Err(failure) => {
            state
                .metrics
                .rerank_failures
                .with_label_values(&[failure.reason.label()])
                .inc();
            tracing::warn!(
                llm_id = %reranker.stored.row.id,
                reason = failure.reason.label(),
                error = %failure,
                "reranker failed; the results keep their order before reranking"
            );
            results.truncate(k);
            Searched {
                results,
                rerank_skipped: true,
            }
        }
    }
}

/// The pipeline's search context, once the key holds read and execute on it, with the
/// connection that read it ahead (if it did).
async fn permitted_context(
    state: &AppState,
    auth: &AuthContext,
    pipeline_id: Uuid,
    prefetched: Option<Prefetched>,
) -> ApiResult<(SearchContext, Option<Connection>)> {
    Ok(match prefetched {
        Some(prefetched) if prefetched.pipeline_id == pipeline_id => (
            super::pipelines::require_prefetched(
                auth,
                pipeline_id,
                SEARCH_ACCESS,
                prefetched.context,
            )?,
            prefetched.connection,
        ),
        _ => (
            super::pipelines::require_for_search(&state.pool, auth, pipeline_id, SEARCH_ACCESS)
                .await?,
            None,
        ),
    })
}

/// The search kinds the deployment or the pipeline cannot serve, and invalid fusion
/// parameters of a hybrid search.
fn check_kind(
    kind: SearchKind,
    pipeline: &PipelineRow,
    params: &EffectiveParams,
    extensions: Extensions,
) -> ApiResult<()> {
    if let Some(message) = kind.not_implemented(extensions) {
        return Err(ApiError::NotImplemented(message));
    }
    match kind {
        SearchKind::Query => Err(ApiError::InvalidSearchType),
        SearchKind::Hybrid if !params.fusion.is_valid() => Err(ApiError::InvalidSearchType),
        SearchKind::Similarity | SearchKind::Hybrid
            if extensions.has(Extension::Hybrid)
                && params.rerank.is_some_and(|rerank| !rerank.is_valid()) =>
        {
            Err(ApiError::InvalidSearchType)
        }
        SearchKind::Search | SearchKind::Hybrid if !pipeline.has_full_text_search => {
            Err(ApiError::FullTextDisabled(params.to_json(kind)))
        }
        SearchKind::Similarity
        | SearchKind::Mmr
        | SearchKind::Search
        | SearchKind::Hybrid
        | SearchKind::History => Ok(()),
    }
}

/// The query's vector when the search needs one: the caller's, when it comes from the model
/// the search selects, else embedded here.
async fn query_embedding(
    state: &AppState,
    context: &SearchContext,
    query: &str,
    vector_target: Option<&ApiResult<(Uuid, Uuid)>>,
    wants_vector: bool,
    computed: Option<QueryVector>,
) -> Option<ApiResult<Vec<f32>>> {
    let Some(Ok((_, model))) = vector_target else {
        return None;
    };
    if !wants_vector {
        return None;
    }
    if let Some(computed) = computed.filter(|c| c.model_id == *model) {
        return Some(Ok(computed.vector));
    }
    Some(match context.stored_model() {
        Some(stored) => embed_query_with(state, &stored, query).await,
        None => Err(ApiError::Internal(
            "the association has no model".to_owned(),
        )),
    })
}

/// What restricts a search: the classifications it may see, the filter (as a condition and
/// compiled), and how a vector search finds its rows.
struct ScopeParts {
    classifications: Vec<String>,
    filter: Option<sea_query::Condition>,
    compiled: Option<super::filters::CompiledFilter>,
    path: NearestPath,
    /// The share of the association the scope admits, when it restricts it.
    selectivity: Option<f64>,
}

/// Resolves the classifications, compiles the filter and, for a vector search under a filter
/// or over some of the pipeline's classifications, chooses its path by cost from the
/// planner's view of the scope (`retrieval::cost`). `limit` is the rows the statement
/// selects (`k`, or MMR's `fetch_k`).
async fn resolve_scope(
    state: &AppState,
    context: &SearchContext,
    input: &SearchInput,
    pipeline_id: Uuid,
    vector_limit: Option<u64>,
) -> ApiResult<ScopeParts> {
    let classifications = trove_query::classification::resolve(
        &input.classification,
        &context.classification_names,
        &context.hierarchy(),
    )
    .map_err(|_| ApiError::NotFound {
        message: "Classification not found",
        id: None,
    })?;
    let compiled = match &input.filters {
        Some(filter) => Some(
            super::filters::compile_for_pipeline(state, &context.pipeline, filter, "fragments")
                .await?,
        ),
        None => None,
    };
    let filter = compiled.as_ref().map(|c| c.condition.clone());
    let restricted = filter.is_some() || classifications.len() < context.classification_names.len();
    // Without its HNSW index (dropped for a burst of ingestion) every search reads the scope
    // exactly: a restricted one through its own path rather than a scan of the vector table.
    let deferred = context.ve_index_deferred.unwrap_or(false);
    let (path, selectivity) = match vector_limit {
        Some(_) if restricted && deferred => (NearestPath::Exact, None),
        Some(limit) if restricted && !classifications.is_empty() => {
            let scope = Scope {
                pipeline_id,
                classifications: &classifications,
                filter: filter.clone(),
            };
            let vectors = context.ve_estimated_rows.map_or(0.0, f64::from);
            let basis = search::EstimateBasis {
                vectors,
                metadata_indexes: &context.metadata_index_ids,
                pipeline_changed: context.pipeline.updated_at,
                pipeline_classifications: context.classification_names.len(),
            };
            let estimate =
                search::estimate_scope_cached(&state.pool, &state.scope_estimates, &scope, &basis)
                    .await?;
            (
                cost::choose(vectors, Some(estimate), limit),
                Some(cost::selectivity(vectors, estimate)),
            )
        }
        _ => (NearestPath::Index, None),
    };
    Ok(ScopeParts {
        classifications,
        filter,
        compiled,
        path,
        selectivity,
    })
}

/// A search whose checks have passed, ready to run its statement.
struct Search<'a> {
    state: &'a AppState,
    context: &'a SearchContext,
    pipeline_id: Uuid,
    parts: ScopeParts,
    connection: Option<Connection>,
    params: EffectiveParams,
    /// The epoch of a remembered context (see [`run_remembered`]).
    gate: Option<i64>,
}

impl Search<'_> {
    fn scope(&self) -> Scope<'_> {
        Scope {
            pipeline_id: self.pipeline_id,
            classifications: &self.parts.classifications,
            filter: self.parts.filter.clone(),
        }
    }

    /// Rule 6 of the filter language, when a statement applies the filter (after the checks
    /// that come first).
    async fn refuse_unconvertible(&self) -> ApiResult<()> {
        match &self.parts.compiled {
            Some(compiled) => {
                super::filters::refuse_unconvertible(
                    self.state,
                    self.pipeline_id,
                    compiled,
                    Some(&self.context.unconvertible_fields),
                )
                .await
            }
            None => Ok(()),
        }
    }

    /// What the statement of a search on a remembered context confirms: `Err` (no rows) when
    /// it cannot be confirmed.
    fn gate(&self) -> Result<Option<Gate>, ()> {
        let Some(epoch) = self.gate else {
            return Ok(None);
        };
        let estimated_rows = self.context.ve_estimated_rows.ok_or(())?;
        let unrecorded_integer_fields = self.parts.compiled.as_ref().map_or_else(Vec::new, |c| {
            c.unrecorded_integer_fields(&self.context.unconvertible_fields)
        });
        Ok(Some(Gate {
            epoch,
            estimated_rows,
            unrecorded_integer_fields,
        }))
    }

    /// The vector side of a search on the association `ve`, as the context and the scope
    /// describe it.
    fn vector_query<'q>(
        &self,
        ve: Uuid,
        vector: &'q [f32],
        strategy: DistanceStrategy,
        gate: Option<&'q Gate>,
    ) -> VectorQuery<'q> {
        VectorQuery {
            vector_embedding_id: ve,
            vector,
            strategy,
            unit_vectors: strategy == DistanceStrategy::Cosine
                || self.context.ve_unit_vectors.unwrap_or(false),
            estimated_rows: self.context.ve_estimated_rows.map_or(0.0, f64::from),
            selectivity: self.parts.selectivity,
            path: self.parts.path,
            indexed: !self.context.ve_index_deferred.unwrap_or(false),
            gate,
        }
    }

    /// Similarity or MMR on the association `ve`.
    async fn vector(
        mut self,
        kind: SearchKind,
        ve: Uuid,
        vector: &[f32],
        strategy: DistanceStrategy,
    ) -> ApiResult<Vec<Hit>> {
        let Ok(gate) = self.gate() else {
            return Ok(Vec::new());
        };
        self.refuse_unconvertible().await?;
        let kept = self.connection.take();
        let query = self.vector_query(ve, vector, strategy, gate.as_ref());
        let scope = self.scope();
        let p = &self.params;
        let (scope, query) = (&scope, &query);
        on_read_connection(self.state, kept, |mut connection| async move {
            let hits = if kind == SearchKind::Similarity {
                search::similarity(&mut connection, scope, query, p.k.into(), p.threshold).await
            } else {
                search::mmr(
                    &mut connection,
                    scope,
                    query,
                    p.k.into(),
                    p.fetch_k.into(),
                    p.lambda_mult,
                    p.threshold,
                )
                .await
            };
            (connection, hits)
        })
        .await
    }

    /// Hybrid search on the association `ve`: its vector list and the lexical list, fused.
    async fn hybrid(
        mut self,
        ve: Uuid,
        vector: &[f32],
        strategy: DistanceStrategy,
        text: &str,
    ) -> ApiResult<Vec<HybridHit>> {
        if self.gate.is_some() {
            // Not gated: never answered on a remembered context.
            return Ok(Vec::new());
        }
        self.refuse_unconvertible().await?;
        let kept = self.connection.take();
        let query = self.vector_query(ve, vector, strategy, None);
        let p = &self.params;
        let hybrid = HybridQuery {
            text,
            candidates: p.statement_rows(SearchKind::Hybrid),
            fusion: Fusion {
                rrf_k: p.fusion.rrf_k,
                similarity_weight: p.fusion.similarity_weight,
                full_text_weight: p.fusion.full_text_weight,
            },
            k: p.k.into(),
        };
        let scope = self.scope();
        let (scope, query, hybrid) = (&scope, &query, &hybrid);
        on_read_connection(self.state, kept, |mut connection| async move {
            let hits = search::hybrid(&mut connection, scope, query, p.threshold, hybrid).await;
            (connection, hits)
        })
        .await
    }

    /// Full-text search.
    async fn full_text(mut self, query: &str) -> ApiResult<Vec<Hit>> {
        if self.gate.is_some() {
            // Not gated: never answered on a remembered context.
            return Ok(Vec::new());
        }
        if self.params.k > 0 {
            self.refuse_unconvertible().await?;
        }
        let kept = self.connection.take();
        let scope = self.scope();
        let (k, threshold) = (self.params.k.into(), self.params.threshold);
        let scope = &scope;
        on_read_connection(self.state, kept, |mut connection| async move {
            let hits = search::full_text(&mut connection, scope, query, k, threshold).await;
            (connection, hits)
        })
        .await
    }
}
