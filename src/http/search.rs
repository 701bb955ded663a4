//! `POST /pipelines/{pipeline_id}/search`.

use poem::Request;
use poem_openapi::{Object, OpenApi};
use serde::Deserialize;
use serde_json::Value;

use super::ApiTags;
use super::extract::{self, Auth, JsonBody, state};
use super::respond::Json;
use crate::retrieval::search::DistanceStrategy;
use crate::service::search::{self as service, SearchInput, SearchKind, SearchParams};

/// Body of a search.
#[derive(Debug, Object, Deserialize)]
pub struct SearchBody {
    /// Search text.
    query: String,
    /// `similarity`, `mmr` or `search` (full-text).
    #[serde(rename = "type")]
    #[oai(rename = "type")]
    kind: SearchKind,
    /// A name, an array of names (hierarchical matching), or `{classifications, search_type}`.
    classification: extract::Opaque<trove_query::classification::ClassificationRequest>,
    /// Omitted: k 5, fetch_k 10. Present: omitted k and fetch_k are 0.
    #[serde(default)]
    params: Option<SearchParams>,
    /// Metadata filter; `{}` applies no restriction.
    #[serde(default)]
    filters: Option<extract::Opaque<trove_query::filter::Filter>>,
    /// `cosine` (default), `euclidean-distance`, `dot-product`; ignored by full-text search.
    #[serde(default)]
    distance_strategy: Option<DistanceStrategy>,
}

pub struct SearchApi;

#[OpenApi(tag = "ApiTags::Search")]
impl SearchApi {
    /// Search a pipeline
    ///
    /// Needs read and execute on the pipeline. Returns a plain array of fragments: similarity
    /// and MMR by ascending distance, full-text by descending rank.
    #[oai(path = "/pipelines/:pipeline_id/search", method = "post")]
    async fn search(
        &self,
        auth: Auth,
        pipeline_id: extract::Path,
        req: &Request,
        body: JsonBody<SearchBody>,
    ) -> poem::Result<Json<Vec<Value>>> {
        let state = state(req)?;
        let body = body.0;
        let input = SearchInput {
            query: body.query,
            kind: body.kind,
            classification: body.classification.0,
            params: body.params,
            filters: body.filters.map(|f| f.0),
            distance_strategy: body.distance_strategy,
        };
        Ok(Json(
            service::run(state, &auth.0, pipeline_id.0, input).await?,
        ))
    }
}
