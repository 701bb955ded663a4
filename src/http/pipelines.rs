//! `/pipelines`, `/pipelines/{pipeline_id}/classifications`, `/pipelines/{pipeline_id}/indexes`.

use std::collections::BTreeMap;

use poem::Request;
use poem_openapi::types::MaybeUndefined;
use poem_openapi::{Object, OpenApi};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use trove_query::list::parse_list_query;
use uuid::Uuid;

use super::ApiTags;
use super::extract::{self, Auth, JsonBody, state};
use super::respond::{Created, EmptyOk, Json, List, NoContent};
use super::schemas::{EmbeddingModel, PipelineIndex, VectorEmbedding};
use crate::access::AccessLevel;
use crate::error::ApiError;
use crate::service::pipelines::{self as service, NewPipelineInput, PipelineChange, PipelineRow};

/// Body of `POST /pipelines`.
#[derive(Debug, Object, Deserialize)]
pub struct CreatePipelineBody {
    name: String,
    #[serde(default)]
    description: Option<String>,
    /// An embedding model id; null makes a full-text-only pipeline.
    #[serde(default)]
    embedding_model_id: Option<Uuid>,
    default_text_splitter_id: Uuid,
    /// Fixed at creation; required when there is no embedding model.
    #[serde(default)]
    #[oai(default)]
    has_full_text_search: bool,
    /// At least one; each 1–255 characters, not `*`.
    classifications: Vec<String>,
    /// Pairs `[classification, inherited classification]`.
    #[serde(default)]
    #[oai(default)]
    hierarchy: Vec<[String; 2]>,
    /// JSON Schema (draft 2020-12) of document metadata. Extension: each declared top-level
    /// field that is not an object is indexed for filters unless the schema says
    /// `"x-trove-index": false` (on the property, or at the top for every property that does
    /// not say otherwise).
    #[serde(default)]
    metadata_schema: Option<Value>,
}

/// Body of `PATCH /pipelines/{pipeline_id}`.
#[derive(Debug, Object, Deserialize)]
pub struct UpdatePipelineBody {
    #[serde(default)]
    name: MaybeUndefined<String>,
    #[serde(default)]
    description: MaybeUndefined<String>,
    #[serde(default)]
    default_text_splitter_id: MaybeUndefined<Uuid>,
    /// JSON Schema of document metadata; `"x-trove-index"` as on creation.
    #[serde(default)]
    metadata_schema: MaybeUndefined<Value>,
    /// Extension (model migration): makes a `ready` association of the pipeline (see
    /// `/pipelines/{pipeline_id}/embedding-models`) its default, used by searches, agents and
    /// MCP without `params.embedding` from the next request. Only on a pipeline that holds a
    /// model added through that route; ignored on any other, as the interface ignores it.
    #[serde(default)]
    default_vector_embedding_id: MaybeUndefined<Uuid>,
}

/// Body of `POST /pipelines/{pipeline_id}/embedding-models` (extension: model migration).
#[derive(Debug, Object, Deserialize)]
pub struct AddEmbeddingModelBody {
    embedding_model_id: Uuid,
}

/// Body of `POST /pipelines/{pipeline_id}/classifications` and the answer of its GET.
#[derive(Debug, Object, Deserialize, Serialize)]
pub struct ClassificationsBody {
    classifications: Vec<String>,
    #[serde(default)]
    #[oai(default)]
    hierarchy: Vec<[String; 2]>,
}

/// Body of `POST /pipelines/{pipeline_id}/indexes`.
#[derive(Debug, Object, Deserialize)]
pub struct CreateIndexBody {
    /// A declared top-level field that is not an object.
    field: String,
}

/// A pipeline (schema of the response; the body is produced by `PipelineRow`).
#[derive(Debug, Object)]
pub struct Pipeline {
    id: Uuid,
    name: String,
    #[oai(nullable)]
    description: Option<String>,
    default_text_splitter_id: Uuid,
    /// The pipeline–model association, null for full-text-only pipelines.
    #[oai(nullable)]
    default_vector_embedding_id: Option<Uuid>,
    /// Vector embedding id → embedding model, for each `ready` association.
    embedding_models: BTreeMap<String, EmbeddingModel>,
    /// Extension (model migration), present only on a pipeline that holds a model added
    /// through `POST /pipelines/{pipeline_id}/embedding-models`: every association with its
    /// status and backfill progress, oldest first.
    vector_embeddings: Option<Vec<VectorEmbedding>>,
    has_full_text_search: bool,
    metadata_schema: Value,
    created_at: chrono::DateTime<chrono::Utc>,
    updated_at: chrono::DateTime<chrono::Utc>,
}

/// Serializes a stored row with the schema of [`Pipeline`].
pub struct PipelineOut(PipelineRow);

impl Serialize for PipelineOut {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(s)
    }
}

impl poem_openapi::types::Type for PipelineOut {
    const IS_REQUIRED: bool = true;
    type RawValueType = Self;
    type RawElementValueType = Self;

    fn name() -> std::borrow::Cow<'static, str> {
        Pipeline::name()
    }

    fn schema_ref() -> poem_openapi::registry::MetaSchemaRef {
        Pipeline::schema_ref()
    }

    fn register(registry: &mut poem_openapi::registry::Registry) {
        Pipeline::register(registry);
    }

    fn as_raw_value(&self) -> Option<&Self::RawValueType> {
        Some(self)
    }

    fn raw_element_iter<'a>(
        &'a self,
    ) -> Box<dyn Iterator<Item = &'a Self::RawElementValueType> + 'a> {
        Box::new(std::iter::once(self))
    }
}

fn pairs(hierarchy: Vec<[String; 2]>) -> Vec<(String, String)> {
    hierarchy.into_iter().map(|[a, b]| (a, b)).collect()
}

#[derive(Default)]
pub struct PipelinesApi;

#[OpenApi(tag = "ApiTags::Pipelines")]
impl PipelinesApi {
    /// List pipelines
    ///
    /// Pipelines the key can read. Filters: `id`; `name` with `$contains`, `$startswith`,
    /// `$gt|ge|lt|le`; `description`, `description$contains`; `has_full_text_search`;
    /// `created_at`, `updated_at` with comparisons. Pagination and `order_by` (`id`, `name`,
    /// `created_at`, `updated_at`).
    #[oai(path = "/pipelines", method = "get")]
    async fn list(&self, auth: Auth, req: &Request) -> poem::Result<Json<List<Pipeline>>> {
        let state = state(req)?;
        let request = parse_list_query(&service::PIPELINE_LIST, req.uri().query(), &[])
            .map_err(ApiError::from)?;
        let envelope = service::list(&state.pool, &auth.0, &request).await?;
        Ok(Json(envelope.into()))
    }

    /// Create a pipeline
    #[oai(path = "/pipelines", method = "post")]
    async fn create(
        &self,
        auth: Auth,
        req: &Request,
        body: JsonBody<CreatePipelineBody>,
    ) -> poem::Result<Created<PipelineOut>> {
        let state = state(req)?;
        let body = body.0;
        let input = NewPipelineInput {
            name: body.name,
            description: body.description,
            embedding_model_id: body.embedding_model_id,
            default_text_splitter_id: body.default_text_splitter_id,
            has_full_text_search: body.has_full_text_search,
            classifications: body.classifications,
            hierarchy: pairs(body.hierarchy),
            metadata_schema: body.metadata_schema,
        };
        let row = service::create(
            &state.pool,
            &state.config.license,
            state.config.hnsw,
            &auth.0,
            input,
        )
        .await?;
        Ok(Created(PipelineOut(row)))
    }

    /// Get a pipeline
    #[oai(path = "/pipelines/:pipeline_id", method = "get")]
    async fn get(
        &self,
        auth: Auth,
        pipeline_id: extract::Path,
        req: &Request,
    ) -> poem::Result<Json<PipelineOut>> {
        let state = state(req)?;
        let row = service::require(&state.pool, &auth.0, pipeline_id.0, AccessLevel::READ).await?;
        Ok(Json(PipelineOut(row)))
    }

    /// Update a pipeline
    ///
    /// Changes `name`, `description`, `default_text_splitter_id` (for jobs processed
    /// afterwards) and `metadata_schema` (only compatibly: every current property keeps its
    /// type, `required` may only shrink). Extension (model migration):
    /// `default_vector_embedding_id` makes a `ready` association the default. Full-text
    /// search and classifications are not changed here.
    #[oai(path = "/pipelines/:pipeline_id", method = "patch")]
    async fn update(
        &self,
        auth: Auth,
        pipeline_id: extract::Path,
        req: &Request,
        body: JsonBody<UpdatePipelineBody>,
    ) -> poem::Result<Json<PipelineOut>> {
        let state = state(req)?;
        let body = body.0;
        let change = PipelineChange {
            name: body.name.into(),
            description: body.description.into(),
            default_text_splitter_id: body.default_text_splitter_id.into(),
            metadata_schema: body.metadata_schema.into(),
            default_vector_embedding_id: body.default_vector_embedding_id.into(),
        };
        let row = service::update(
            &state.pool,
            &state.config.license,
            &auth.0,
            pipeline_id.0,
            change,
        )
        .await?;
        Ok(Json(PipelineOut(row)))
    }

    /// Delete a pipeline
    ///
    /// Removes its documents, fragments, vectors, indexes, classifications and permission
    /// entries.
    #[oai(path = "/pipelines/:pipeline_id", method = "delete")]
    async fn delete(
        &self,
        auth: Auth,
        pipeline_id: extract::Path,
        req: &Request,
    ) -> poem::Result<NoContent> {
        let state = state(req)?;
        service::delete(&state.pool, &auth.0, pipeline_id.0).await?;
        Ok(NoContent)
    }

    /// Classifications of a pipeline
    ///
    /// Requires read on the pipeline and the classification allow-list `*`.
    #[oai(path = "/pipelines/:pipeline_id/classifications", method = "get")]
    async fn classifications(
        &self,
        auth: Auth,
        pipeline_id: extract::Path,
        req: &Request,
    ) -> poem::Result<Json<ClassificationsBody>> {
        let state = state(req)?;
        let (classifications, hierarchy) =
            service::classifications(&state.pool, &auth.0, pipeline_id.0).await?;
        Ok(Json(ClassificationsBody {
            classifications,
            hierarchy: hierarchy.into_iter().map(|(a, b)| [a, b]).collect(),
        }))
    }

    /// Replace the classifications of a pipeline
    ///
    /// Requires write and allow-list `*`. Removing a classification that a stored version
    /// carries is a conflict.
    #[oai(path = "/pipelines/:pipeline_id/classifications", method = "post")]
    async fn set_classifications(
        &self,
        auth: Auth,
        pipeline_id: extract::Path,
        req: &Request,
        body: JsonBody<ClassificationsBody>,
    ) -> poem::Result<EmptyOk> {
        let state = state(req)?;
        let body = body.0;
        service::set_classifications(
            &state.pool,
            &state.config.license,
            &auth.0,
            pipeline_id.0,
            body.classifications,
            pairs(body.hierarchy),
        )
        .await?;
        Ok(EmptyOk)
    }

    /// Create a metadata index
    #[oai(path = "/pipelines/:pipeline_id/indexes", method = "post")]
    async fn create_index(
        &self,
        auth: Auth,
        pipeline_id: extract::Path,
        req: &Request,
        body: JsonBody<CreateIndexBody>,
    ) -> poem::Result<Created<PipelineIndex>> {
        let state = state(req)?;
        let row = service::create_index(
            &state.pool,
            &state.config.license,
            &auth.0,
            pipeline_id.0,
            body.0.field,
        )
        .await?;
        Ok(Created(row.into()))
    }

    /// List metadata indexes
    #[oai(path = "/pipelines/:pipeline_id/indexes", method = "get")]
    async fn list_indexes(
        &self,
        auth: Auth,
        pipeline_id: extract::Path,
        req: &Request,
    ) -> poem::Result<Json<List<PipelineIndex>>> {
        let state = state(req)?;
        let request = parse_list_query(&service::INDEX_LIST, req.uri().query(), &[])
            .map_err(ApiError::from)?;
        let envelope = service::list_indexes(&state.pool, &auth.0, pipeline_id.0, &request).await?;
        Ok(Json(envelope.into()))
    }

    /// Delete a metadata index
    #[oai(path = "/pipelines/:pipeline_id/indexes/:index_id", method = "delete")]
    async fn delete_index(
        &self,
        auth: Auth,
        pipeline_id: extract::Path,
        index_id: extract::Path,
        req: &Request,
    ) -> poem::Result<NoContent> {
        let state = state(req)?;
        service::delete_index(&state.pool, &auth.0, pipeline_id.0, index_id.0).await?;
        Ok(NoContent)
    }

    /// Add an embedding model to a pipeline (extension: model migration)
    ///
    /// Requires write on the pipeline and read on the model. The workers compute the model's
    /// vectors of every current fragment from the stored texts (`status` `backfilling`, with
    /// `fragments_done` of `fragments_total`); documents submitted meanwhile are embedded with
    /// it too. Once `ready`, searches may name it in `params.embedding`, and
    /// `PATCH /pipelines/{pipeline_id}` may make it the default. The same model twice is
    /// `Conflict unique error`; a pipeline holds at most 4 models.
    #[oai(path = "/pipelines/:pipeline_id/embedding-models", method = "post")]
    async fn add_embedding_model(
        &self,
        auth: Auth,
        pipeline_id: extract::Path,
        req: &Request,
        body: JsonBody<AddEmbeddingModelBody>,
    ) -> poem::Result<Created<VectorEmbedding>> {
        let state = state(req)?;
        let association = crate::service::vector_embeddings::add(
            state,
            &auth.0,
            pipeline_id.0,
            body.0.embedding_model_id,
        )
        .await?;
        Ok(Created(association.into()))
    }

    /// List a pipeline's embedding models (extension: model migration)
    ///
    /// Every association, oldest first, with its status and backfill progress.
    #[oai(path = "/pipelines/:pipeline_id/embedding-models", method = "get")]
    async fn list_embedding_models(
        &self,
        auth: Auth,
        pipeline_id: extract::Path,
        req: &Request,
    ) -> poem::Result<Json<Vec<VectorEmbedding>>> {
        let state = state(req)?;
        let associations =
            crate::service::vector_embeddings::list(state, &auth.0, pipeline_id.0).await?;
        Ok(Json(associations.into_iter().map(Into::into).collect()))
    }

    /// Remove an embedding model from a pipeline (extension: model migration)
    ///
    /// Drops its vectors and index; a backfill in progress stops. The default is
    /// `Conflict related error`: make another one the default first.
    #[oai(
        path = "/pipelines/:pipeline_id/embedding-models/:vector_embedding_id",
        method = "delete"
    )]
    async fn remove_embedding_model(
        &self,
        auth: Auth,
        pipeline_id: extract::Path,
        vector_embedding_id: extract::Path,
        req: &Request,
    ) -> poem::Result<NoContent> {
        let state = state(req)?;
        crate::service::vector_embeddings::remove(
            state,
            &auth.0,
            pipeline_id.0,
            vector_embedding_id.0,
        )
        .await?;
        Ok(NoContent)
    }
}
