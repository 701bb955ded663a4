//! Operations of the `Embeddings` group: `/embedding-providers` (read-only) and
//! `/embedding-models`.

use std::collections::BTreeMap;

use poem::Request;
use poem_openapi::types::MaybeUndefined;
use poem_openapi::{Object, OpenApi};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use trove_query::list::parse_list_query;

use super::ApiTags;
use super::extract::{self, Auth, JsonBody, state};
use super::respond::{Created, Json, List, NoContent};
use super::schemas::{EmbeddingModel, EmbeddingProvider};
use crate::error::ApiError;
use crate::service::embedding_models::{self as service, ModelChange, NewModel};

/// Body of `POST /embedding-models`.
#[derive(Debug, Object, Deserialize)]
pub struct CreateEmbeddingModelBody {
    /// Unique, 1–255 characters.
    name: String,
    #[serde(default)]
    description: Option<String>,
    /// Provider name: `local`, `openai` or `hash`.
    provider: String,
    /// `local`: a FastEmbed model name; `openai`: the remote model; `hash`: a free label.
    model_name: String,
    /// Exactly the provider's parameters; secret ones are stored encrypted and never returned.
    #[serde(default)]
    parameters: Option<BTreeMap<String, Value>>,
    /// 1–2000; the probe's size when omitted.
    #[serde(default)]
    dimensions: Option<i64>,
}

/// Body of `PATCH /embedding-models/{embedding_model_id}`.
#[derive(Debug, Object, Deserialize)]
pub struct UpdateEmbeddingModelBody {
    #[serde(default)]
    name: MaybeUndefined<String>,
    #[serde(default)]
    description: MaybeUndefined<String>,
    /// Replaces every parameter (send secrets again); the model is probed again and must keep
    /// its size.
    #[serde(default)]
    parameters: MaybeUndefined<BTreeMap<String, Value>>,
}

/// Body of `POST /embedding-models/{embedding_model_id}/query`.
#[derive(Debug, Object, Deserialize)]
pub struct EmbeddingQueryBody {
    text: String,
}

/// The embedding of a text.
#[derive(Debug, Object, Serialize)]
pub struct EmbeddingQueryResult {
    embedding: Vec<f32>,
    dimensions: usize,
}

fn to_map(parameters: BTreeMap<String, Value>) -> Map<String, Value> {
    parameters.into_iter().collect()
}

#[derive(Default)]
pub struct EmbeddingApi;

#[OpenApi(tag = "ApiTags::Embeddings")]
impl EmbeddingApi {
    /// List embedding providers
    ///
    /// Providers the caller can read. Filters: `id`; `name`, `name$contains`,
    /// `name$startswith`, `name$gt|ge|lt|le`; `created_at`, `updated_at` with `$gt|ge|lt|le`.
    /// Every filter appears in `query_info` (null or `[]` when unset).
    #[oai(path = "/embedding-providers", method = "get")]
    async fn list_providers(
        &self,
        auth: Auth,
        req: &Request,
    ) -> poem::Result<Json<List<EmbeddingProvider>>> {
        let state = state(req)?;
        let request = parse_list_query(&service::PROVIDER_LIST, req.uri().query(), &[])
            .map_err(ApiError::from)?;
        let envelope = service::list_providers(&state.pool, &auth.0, &request).await?;
        Ok(Json(envelope.into()))
    }

    /// Get an embedding provider
    #[oai(path = "/embedding-providers/:embedding_provider_id", method = "get")]
    async fn get_provider(
        &self,
        auth: Auth,
        embedding_provider_id: extract::Path,
        req: &Request,
    ) -> poem::Result<Json<EmbeddingProvider>> {
        let state = state(req)?;
        Ok(Json(
            service::get_provider(&state.pool, &auth.0, embedding_provider_id.0)
                .await?
                .into(),
        ))
    }

    /// List embedding models
    ///
    /// Models the caller can read. Filters: `id`; `name`, `name$contains`, `name$startswith`,
    /// `name$gt|ge|lt|le`; `description`, `description$contains`; `provider`; `model_name`,
    /// `model_name$contains`; `created_at`, `updated_at` with `$gt|ge|lt|le`.
    #[oai(path = "/embedding-models", method = "get")]
    async fn list_models(
        &self,
        auth: Auth,
        req: &Request,
    ) -> poem::Result<Json<List<EmbeddingModel>>> {
        let state = state(req)?;
        let request = parse_list_query(&service::MODEL_LIST, req.uri().query(), &[])
            .map_err(ApiError::from)?;
        let envelope = service::list_models(&state.pool, &auth.0, &request).await?;
        Ok(Json(envelope.into()))
    }

    /// Create an embedding model
    ///
    /// Needs write on `embedding-models` and on the provider. The service embeds the text
    /// `Trove` with the new model; the model's `dimensions` is that embedding's size.
    #[oai(path = "/embedding-models", method = "post")]
    async fn create_model(
        &self,
        auth: Auth,
        req: &Request,
        body: JsonBody<CreateEmbeddingModelBody>,
    ) -> poem::Result<Created<EmbeddingModel>> {
        let state = state(req)?;
        let body = body.0;
        let input = NewModel {
            name: body.name,
            description: body.description,
            provider: body.provider,
            model_name: body.model_name,
            parameters: to_map(body.parameters.unwrap_or_default()),
            dimensions: body.dimensions,
        };
        Ok(Created(
            service::create(state, &auth.0, input).await?.into(),
        ))
    }

    /// Get an embedding model
    #[oai(path = "/embedding-models/:embedding_model_id", method = "get")]
    async fn get_model(
        &self,
        auth: Auth,
        embedding_model_id: extract::Path,
        req: &Request,
    ) -> poem::Result<Json<EmbeddingModel>> {
        let state = state(req)?;
        Ok(Json(
            service::get_readable(&state.pool, &auth.0, embedding_model_id.0)
                .await?
                .into(),
        ))
    }

    /// Update an embedding model
    ///
    /// Changes `name`, `description` and `parameters` (replaced whole, secrets sent again,
    /// probed again; the size must stay). `provider`, `model_name` and `dimensions` are fixed.
    #[oai(path = "/embedding-models/:embedding_model_id", method = "patch")]
    async fn update_model(
        &self,
        auth: Auth,
        embedding_model_id: extract::Path,
        req: &Request,
        body: JsonBody<UpdateEmbeddingModelBody>,
    ) -> poem::Result<Json<EmbeddingModel>> {
        let state = state(req)?;
        let body = body.0;
        let change = ModelChange {
            name: body.name.into(),
            description: body.description.into(),
            parameters: body.parameters.map_value(to_map).into(),
        };
        Ok(Json(
            service::update(state, &auth.0, embedding_model_id.0, change)
                .await?
                .into(),
        ))
    }

    /// Delete an embedding model
    ///
    /// Refused with 409 while a pipeline uses the model.
    #[oai(path = "/embedding-models/:embedding_model_id", method = "delete")]
    async fn delete_model(
        &self,
        auth: Auth,
        embedding_model_id: extract::Path,
        req: &Request,
    ) -> poem::Result<NoContent> {
        let state = state(req)?;
        service::delete(&state.pool, &auth.0, embedding_model_id.0).await?;
        Ok(NoContent)
    }

    /// Embed a text
    ///
    /// Needs read and execute on the model. Returns the embedding vector and its size.
    #[oai(path = "/embedding-models/:embedding_model_id/query", method = "post")]
    async fn query_model(
        &self,
        auth: Auth,
        embedding_model_id: extract::Path,
        req: &Request,
        body: JsonBody<EmbeddingQueryBody>,
    ) -> poem::Result<Json<EmbeddingQueryResult>> {
        let state = state(req)?;
        let embedding = service::query(state, &auth.0, embedding_model_id.0, body.0.text).await?;
        Ok(Json(EmbeddingQueryResult {
            dimensions: embedding.len(),
            embedding,
        }))
    }
}
