//! `POST /pipelines/{pipeline_id}/search`.

use std::sync::Arc;

use poem::http::HeaderValue;
use poem::{IntoResponse, Request, RequestBody, Response};
use poem_openapi::ApiResponse;
use poem_openapi::registry::MetaResponses;
use poem_openapi::registry::Registry;
use poem_openapi::{ApiExtractor, ApiExtractorType, ExtractParamOptions, Object, OpenApi};
use serde::Deserialize;

use super::ApiTags;
use super::documents::Fragments;
use super::extract::{self, Auth, state};
use super::respond::Json;
use crate::auth::key_check;
use crate::auth::search_memory::Remembered;
use crate::retrieval::kinds::{DistanceStrategies, Listed, SearchTypes};
use crate::service::search::{self as service, SearchInput, SearchParams, Searched};

/// Search parameters. Omitted: k 5, fetch_k 10. Present: omitted k and fetch_k are 0.
#[derive(Debug, Clone, Default, Deserialize, Object)]
#[oai(rename = "SearchParams")]
pub struct SearchParamsBody {
    /// Fragments to return (0..65535).
    #[serde(default)]
    k: Option<u16>,
    /// MMR candidates (0..65535).
    #[serde(default)]
    fetch_k: Option<u16>,
    /// MMR balance: 1 relevance only, 0 maximum diversity.
    #[serde(default)]
    lambda_mult: Option<f64>,
    /// Maximum distance (vector search) or minimum rank (full-text).
    #[serde(default)]
    threshold: Option<f64>,
    /// A vector embedding id of the pipeline, or the id of its model.
    #[serde(default)]
    embedding: Option<uuid::Uuid>,
    /// Hybrid (extension): described in the document when the extension is on.
    #[serde(default)]
    #[oai(skip)]
    rrf_k: Option<f64>,
    #[serde(default)]
    #[oai(skip)]
    similarity_weight: Option<f64>,
    #[serde(default)]
    #[oai(skip)]
    full_text_weight: Option<f64>,
    #[serde(default)]
    #[oai(skip)]
    rerank: Option<uuid::Uuid>,
    #[serde(default)]
    #[oai(skip)]
    rerank_candidates: Option<u16>,
}

impl From<SearchParamsBody> for SearchParams {
    fn from(body: SearchParamsBody) -> Self {
        Self {
            k: body.k,
            fetch_k: body.fetch_k,
            lambda_mult: body.lambda_mult,
            threshold: body.threshold,
            embedding: body.embedding,
            rrf_k: body.rrf_k,
            similarity_weight: body.similarity_weight,
            full_text_weight: body.full_text_weight,
            rerank: body.rerank,
            rerank_candidates: body.rerank_candidates,
        }
    }
}

/// Body of a search.
#[derive(Debug, Object, Deserialize)]
pub struct SearchBody {
    /// Search text.
    query: String,
    #[serde(rename = "type")]
    #[oai(rename = "type")]
    kind: Listed<SearchTypes>,
    /// A name, an array of names (hierarchical matching), or `{classifications, search_type}`.
    classification: extract::Opaque<trove_query::classification::ClassificationRequest>,
    #[serde(default)]
    params: Option<SearchParamsBody>,
    /// Metadata filter; `{}` applies no restriction.
    #[serde(default)]
    filters: Option<extract::Opaque<trove_query::filter::Filter>>,
    #[serde(default)]
    distance_strategy: Option<Listed<DistanceStrategies>>,
}

/// [`Auth`] for a search, which also reads the pipeline's search context in the key check's
/// statement: two reads before the search statement become one round trip. The context is
/// only used once the key is verified and holds read and execute on the pipeline; it is not
/// read when the request's credentials are refused before any read or its path holds no
/// pipeline id. When an earlier search of the key on the pipeline remembered both
/// (`auth::search_memory`), nothing is read: the search statement confirms them.
#[expect(
    clippy::large_enum_variant,
    reason = "made once per search and moved once into the handler"
)]
pub enum SearchAuth {
    /// Checked on this request, with the context read alongside (when the path holds a
    /// pipeline id).
    Checked(Auth, Option<service::Prefetched>),
    /// Remembered from an earlier search; the request's secret opens it.
    Remembered(Arc<Remembered>),
}

impl<'a> ApiExtractor<'a> for SearchAuth {
    const TYPES: &'static [ApiExtractorType] = Auth::TYPES;
    type ParamType = ();
    type ParamRawType = ();

    fn register(registry: &mut Registry) {
        <Auth as ApiExtractor<'a>>::register(registry);
    }

    fn security_schemes() -> Vec<&'static str> {
        <Auth as ApiExtractor<'a>>::security_schemes()
    }

    async fn from_request(
        request: &'a Request,
        _body: &mut RequestBody,
        _opts: ExtractParamOptions<()>,
    ) -> poem::Result<Self> {
        let state = state(request)?;
        // The route's only path parameter (poem-openapi numbers them).
        let pipeline_id = request
            .raw_path_param("param0")
            .and_then(|raw| uuid::Uuid::parse_str(raw).ok());
        let Some(pipeline_id) = pipeline_id else {
            let unavailable = &state.metrics.key_check_unavailable;
            let auth = key_check::authenticate(&state.pool, request.headers(), unavailable);
            return Ok(SearchAuth::Checked(Auth(auth.await?), None));
        };
        let credentials = key_check::credentials(request.headers())?;
        if let Some(remembered) = state.search_memory.recall(&credentials, pipeline_id) {
            return Ok(SearchAuth::Remembered(remembered));
        }
        let (auth, context) = service::check(state, &credentials, pipeline_id).await?;
        Ok(SearchAuth::Checked(Auth(auth), Some(context)))
    }
}

#[derive(Default)]
pub struct SearchApi;

/// 200 with the fragments found, and `x-trove-rerank: skipped` when the search's reranker
/// failed (extension `hybrid`).
pub struct SearchResults(Searched);

/// The header of a search whose reranker failed.
const RERANK_HEADER: &str = "x-trove-rerank";

impl IntoResponse for SearchResults {
    fn into_response(self) -> Response {
        let skipped = self.0.rerank_skipped;
        let mut response = Json(Fragments::new(self.0.results)).into_response();
        if skipped {
            response
                .headers_mut()
                .insert(RERANK_HEADER, HeaderValue::from_static("skipped"));
        }
        response
    }
}

impl ApiResponse for SearchResults {
    fn meta() -> MetaResponses {
        <Json<Fragments> as ApiResponse>::meta()
    }

    fn register(registry: &mut Registry) {
        <Json<Fragments> as ApiResponse>::register(registry);
    }
}

#[OpenApi(tag = "ApiTags::Search")]
impl SearchApi {
    /// Search a pipeline
    ///
    /// Needs read and execute on the pipeline. Returns a plain array of fragments: similarity
    /// and MMR by ascending distance, full-text by descending rank.
    #[oai(path = "/pipelines/:pipeline_id/search", method = "post")]
    async fn search(
        &self,
        auth: SearchAuth,
        pipeline_id: extract::Path,
        req: &Request,
        body: extract::FilterBody<SearchBody>,
    ) -> poem::Result<SearchResults> {
        let state = state(req)?;
        let body = body.0;
        let input = SearchInput {
            query: body.query,
            kind: body.kind.0,
            classification: body.classification.0,
            params: body.params.map(SearchParams::from),
            filters: body.filters.map(|f| f.0),
            distance_strategy: body.distance_strategy.map(|strategy| strategy.0),
        };
        let (auth, context) = match auth {
            SearchAuth::Checked(Auth(auth), context) => (auth, context),
            SearchAuth::Remembered(remembered) => {
                let answered =
                    service::run_remembered(state, &remembered, pipeline_id.0, &input).await;
                if let Some(searched) = answered {
                    return Ok(SearchResults(searched));
                }
                let credentials = key_check::credentials(req.headers())?;
                let (auth, context) = service::check(state, &credentials, pipeline_id.0).await?;
                (auth, Some(context))
            }
        };
        let context = context.filter(|c| c.pipeline_id() == pipeline_id.0);
        let searched =
            service::run_with(state, &auth, pipeline_id.0, &input, None, context).await?;
        Ok(SearchResults(searched))
    }
}
