//! Pipelines: creation with their embedding model association and vector storage,
//! classifications, changes, deletion and metadata indexes.

use super::Change;
use serde_json::Value;
use trove_query::list::{FieldKind, FieldSpec, FilterOps, ListRequest, ListSpec};
use uuid::Uuid;

use super::{Envelope, classifications, validate_name};
use crate::access::{AccessLevel, ObjectType};
use crate::auth::AuthContext;
use crate::auth::license::check_license;
use crate::error::{ApiError, ApiResult};
use crate::license::License;
use crate::metadata_schema;
use crate::store::Pool;
use crate::store::indexes;
use crate::store::listing;
use crate::store::pipelines::{self as store, NewPipeline};
use crate::store::vectors;

pub use crate::store::indexes::IndexRow;
pub use crate::store::pipelines::{PipelineRow, SearchContext};

/// Fields of the pipeline list (addendum §4).
pub const PIPELINE_LIST: ListSpec = ListSpec {
    table: "pipelines",
    fields: &[
        FieldSpec::new("id", FieldKind::Uuid, false, FilterOps::EQ, true),
        FieldSpec::new("name", FieldKind::Text, false, FilterOps::TEXT_ALL, true),
        FieldSpec::new(
            "description",
            FieldKind::Text,
            true,
            FilterOps::EQ_CONTAINS,
            false,
        ),
        FieldSpec::new(
            "has_full_text_search",
            FieldKind::Bool,
            false,
            FilterOps::EQ,
            false,
        ),
        FieldSpec::new(
            "created_at",
            FieldKind::Timestamp,
            false,
            FilterOps::EQ_COMPARE,
            true,
        ),
        FieldSpec::new(
            "updated_at",
            FieldKind::Timestamp,
            false,
            FilterOps::EQ_COMPARE,
            true,
        ),
    ],
    echo_unset_filters: false,
    default_order: &["id"],
};

/// Fields of the index list (addendum §4).
pub const INDEX_LIST: ListSpec = ListSpec {
    table: "pipeline_indexes",
    fields: &[
        FieldSpec::new("id", FieldKind::Uuid, false, FilterOps::EQ, true),
        FieldSpec::new("field", FieldKind::Text, false, FilterOps::EQ, true),
        FieldSpec::new(
            "created_at",
            FieldKind::Timestamp,
            false,
            FilterOps::NONE,
            true,
        ),
    ],
    echo_unset_filters: false,
    default_order: &["id"],
};

/// `Pipeline not found` with the id.
pub fn not_found(id: Uuid) -> ApiError {
    ApiError::PipelineNotFound(Some(id))
}

/// `Pipeline not found` unless the key holds every bit of `needed` on the pipeline.
fn permitted(auth: &AuthContext, id: Uuid, needed: AccessLevel) -> ApiResult<()> {
    if auth
        .object_level(ObjectType::Pipelines, id)
        .contains(needed)
    {
        Ok(())
    } else {
        Err(not_found(id))
    }
}

/// Reads a pipeline on which the key holds every bit of `needed`; lacking any bit is
/// reported as "not found", as for a missing pipeline.
pub async fn require(
    pool: &Pool,
    auth: &AuthContext,
    id: Uuid,
    needed: AccessLevel,
) -> ApiResult<PipelineRow> {
    permitted(auth, id, needed)?;
    store::get(pool, id).await?.ok_or_else(|| not_found(id))
}

/// [`require`] for a search: the pipeline's [`SearchContext`] (one read) on which the
/// key holds every bit of `needed`.
pub async fn require_for_search(
    pool: &Pool,
    auth: &AuthContext,
    id: Uuid,
    needed: AccessLevel,
) -> ApiResult<SearchContext> {
    permitted(auth, id, needed)?;
    store::search_context(pool.pg_pool(), id)
        .await?
        .ok_or_else(|| not_found(id))
}

/// [`require_for_search`] with the context read ahead (the permission check still comes
/// first, so a key without access learns nothing from it).
pub fn require_prefetched(
    auth: &AuthContext,
    id: Uuid,
    needed: AccessLevel,
    context: ApiResult<Option<SearchContext>>,
) -> ApiResult<SearchContext> {
    permitted(auth, id, needed)?;
    context?.ok_or_else(|| not_found(id))
}

/// One page of the pipelines the key can read: the list envelope.
pub async fn list(pool: &Pool, auth: &AuthContext, request: &ListRequest) -> ApiResult<Envelope> {
    let base = store::list_base(auth.readable_ids(ObjectType::Pipelines));
    listing::list::<PipelineRow>(pool, &PIPELINE_LIST, request, base).await
}

/// Like [`list`], with each pipeline turned into an object by `to_object` (MCP's summaries):
/// the list envelope.
pub async fn list_mapped<F>(
    pool: &Pool,
    auth: &AuthContext,
    request: &ListRequest,
    to_object: F,
) -> ApiResult<Envelope>
where
    F: Fn(PipelineRow) -> ApiResult<Value>,
{
    let base = store::list_base(auth.readable_ids(ObjectType::Pipelines));
    listing::list_mapped(pool, &PIPELINE_LIST, request, base, to_object).await
}

/// Input of `POST /pipelines`.
pub struct NewPipelineInput {
    pub name: String,
    pub description: Option<String>,
    pub embedding_model_id: Option<Uuid>,
    pub default_text_splitter_id: Uuid,
    pub has_full_text_search: bool,
    pub classifications: Vec<String>,
    pub hierarchy: Vec<(String, String)>,
    pub metadata_schema: Option<Value>,
}

/// Requires read on a text splitter that exists (`Text Splitter not found` otherwise).
async fn require_text_splitter(pool: &Pool, auth: &AuthContext, id: Uuid) -> ApiResult<()> {
    if !auth.can_read(ObjectType::TextSplitters, id)
        || !store::text_splitter_exists(pool, id).await?
    {
        return Err(ApiError::NotFound {
            message: "Text Splitter not found",
            id: Some(id),
        });
    }
    Ok(())
}

/// Creates a pipeline, its classifications, its association and its vector table.
pub async fn create(
    pool: &Pool,
    license: &License,
    index: vectors::HnswParams,
    auth: &AuthContext,
    input: NewPipelineInput,
) -> ApiResult<PipelineRow> {
    auth.require_type(ObjectType::Pipelines, AccessLevel::WRITE)?;
    let model_dimensions = match input.embedding_model_id {
        Some(model_id) => {
            let dimensions = if auth.can_read(ObjectType::EmbeddingModels, model_id) {
                store::embedding_model_dimensions(pool, model_id).await?
            } else {
                None
            };
            Some(dimensions.ok_or(ApiError::NotFound {
                message: "Embedding model not found",
                id: Some(model_id),
            })?)
        }
        None => None,
    };
    require_text_splitter(pool, auth, input.default_text_splitter_id).await?;
    check_license(license, pool, Some(ObjectType::Pipelines)).await?;

    validate_name(&input.name)?;
    classifications::check(&input.classifications, &input.hierarchy)?;
    if input.embedding_model_id.is_none() && !input.has_full_text_search {
        return Err(ApiError::InvalidParameter(
            "A pipeline without embedding model requires full-text search".to_owned(),
        ));
    }
    let schema = input
        .metadata_schema
        .unwrap_or_else(metadata_schema::default_schema);
    metadata_schema::check_schema(&schema)?;

    let id = Uuid::new_v4();
    let mut tx = pool.begin().await?;
    store::insert(
        &mut tx,
        &NewPipeline {
            id,
            name: &input.name,
            description: input.description.as_deref(),
            default_text_splitter_id: input.default_text_splitter_id,
            has_full_text_search: input.has_full_text_search,
            metadata_schema: &schema,
        },
    )
    .await?;
    store::replace_classifications(&mut tx, id, &input.classifications, &input.hierarchy).await?;
    indexes::ensure_field_statistics(&mut tx, &schema).await?;
    indexes::sync_declared_field_indexes(&mut tx).await?;
    if let (Some(model_id), Some(dimensions)) = (input.embedding_model_id, model_dimensions) {
        let vector_embedding_id = Uuid::new_v4();
        store::insert_vector_embedding(&mut tx, vector_embedding_id, id, model_id, dimensions)
            .await?;
        vectors::create_table(&mut tx, vector_embedding_id, dimensions, Some(index)).await?;
        indexes::sync_vector_field_indexes(&mut tx, Some(id)).await?;
    }
    tx.commit().await?;
    store::get(pool, id).await?.ok_or_else(|| not_found(id))
}

/// Input of `PATCH /pipelines/{id}`.
pub struct PipelineChange {
    pub name: Change<String>,
    pub description: Change<String>,
    pub default_text_splitter_id: Change<Uuid>,
    pub metadata_schema: Change<Value>,
    /// Extension (model migration): a `ready` association to make the default.
    pub default_vector_embedding_id: Change<Uuid>,
}

/// Changes a pipeline's name, description, default splitter or (compatibly) its schema.
pub async fn update(
    pool: &Pool,
    license: &License,
    auth: &AuthContext,
    id: Uuid,
    change: PipelineChange,
) -> ApiResult<PipelineRow> {
    let current = require(pool, auth, id, AccessLevel::WRITE).await?;
    if let Change::Value(splitter) = change.default_text_splitter_id {
        require_text_splitter(pool, auth, splitter).await?;
    }
    check_license(license, pool, None).await?;
    let name = change.name.required(current.name.clone());
    validate_name(&name)?;
    let description = change.description.nullable(current.description.clone());
    let splitter = change
        .default_text_splitter_id
        .required(current.default_text_splitter_id);
    let (schema, schema_changed) = match change.metadata_schema {
        Change::Value(schema) => {
            metadata_schema::check_schema(&schema)?;
            metadata_schema::check_compatible(&current.metadata_schema, &schema)?;
            (schema, true)
        }
        _ => (current.metadata_schema.clone(), false),
    };
    // Extension (model migration): only on a pipeline that holds a model added through it;
    // on any other the field is ignored, as the interface ignores fields it does not change.
    let default_vector_embedding = match change.default_vector_embedding_id {
        Change::Omitted => None,
        _ if !super::vector_embeddings::uses_extension(pool, id).await? => None,
        Change::Value(association) => {
            super::vector_embeddings::check_default(pool, id, association).await?;
            Some(association)
        }
        Change::Null => {
            return Err(ApiError::InvalidParameter(
                "default_vector_embedding_id cannot be null".to_owned(),
            ));
        }
    };
    store::update(pool, id, &name, description.as_deref(), splitter, &schema).await?;
    if let Some(association) = default_vector_embedding {
        super::vector_embeddings::set_default(pool, id, association).await?;
    }
    if schema_changed {
        let mut tx = pool.begin().await?;
        indexes::ensure_field_statistics(&mut tx, &schema).await?;
        indexes::sync_declared_field_indexes(&mut tx).await?;
        indexes::sync_vector_field_indexes(&mut tx, Some(id)).await?;
        tx.commit().await?;
    }
    store::get(pool, id).await?.ok_or_else(|| not_found(id))
}

/// Deletes a pipeline and everything in it.
pub async fn delete(pool: &Pool, auth: &AuthContext, id: Uuid) -> ApiResult<()> {
    require(pool, auth, id, AccessLevel::WRITE).await?;
    store::delete(pool, id).await?;
    // The indexes of declared fields no other pipeline asks for go with it.
    let mut tx = pool.begin().await?;
    indexes::sync_declared_field_indexes(&mut tx).await?;
    tx.commit().await?;
    Ok(())
}

/// The 403 of classification management without allow-list `*`.
fn allow_list_denied(level: AccessLevel, id: Uuid) -> ApiError {
    ApiError::AccessDenied {
        level,
        object_type: ObjectType::Pipelines,
        id: Some(id),
    }
}

/// Classifications and hierarchy (read and allow-list `*`).
pub async fn classifications(
    pool: &Pool,
    auth: &AuthContext,
    id: Uuid,
) -> ApiResult<(Vec<String>, Vec<(String, String)>)> {
    require(pool, auth, id, AccessLevel::READ).await?;
    if !auth.allows_all_classifications(Some(id)) {
        return Err(allow_list_denied(AccessLevel::READ, id));
    }
    Ok(store::classifications(pool, id).await?)
}

/// Replaces classifications and hierarchy (write and allow-list `*`).
pub async fn set_classifications(
    pool: &Pool,
    license: &License,
    auth: &AuthContext,
    id: Uuid,
    names: Vec<String>,
    hierarchy: Vec<(String, String)>,
) -> ApiResult<()> {
    require(pool, auth, id, AccessLevel::WRITE).await?;
    if !auth.allows_all_classifications(Some(id)) {
        return Err(allow_list_denied(AccessLevel::WRITE, id));
    }
    check_license(license, pool, None).await?;
    classifications::check(&names, &hierarchy)?;
    if store::versions_outside(pool, id, &names).await? {
        return Err(ApiError::ConflictRelated);
    }
    let mut tx = pool.begin().await?;
    store::replace_classifications(&mut tx, id, &names, &hierarchy).await?;
    store::touch(&mut tx, id).await?;
    tx.commit().await?;
    Ok(())
}

/// Creates a metadata index on a declared top-level, non-object field.
pub async fn create_index(
    pool: &Pool,
    license: &License,
    auth: &AuthContext,
    id: Uuid,
    field: String,
) -> ApiResult<IndexRow> {
    let pipeline = require(pool, auth, id, AccessLevel::WRITE).await?;
    check_license(license, pool, None).await?;
    let properties = metadata_schema::properties(&pipeline.metadata_schema);
    let expression = properties
        .get(&field)
        .and_then(metadata_schema::property_type)
        .and_then(|ty| indexes::typed_field_expression(&field, ty))
        .ok_or_else(|| ApiError::InvalidParameter(field.clone()))?;
    Ok(indexes::create(pool, Uuid::new_v4(), id, &field, &expression).await?)
}

/// One page of the metadata indexes of a pipeline the key can read (404 otherwise): the list
/// envelope.
pub async fn list_indexes(
    pool: &Pool,
    auth: &AuthContext,
    id: Uuid,
    request: &ListRequest,
) -> ApiResult<Envelope> {
    require(pool, auth, id, AccessLevel::READ).await?;
    let base = indexes::list_base(id);
    listing::list::<IndexRow>(pool, &INDEX_LIST, request, base).await
}

/// Deletes a metadata index.
pub async fn delete_index(
    pool: &Pool,
    auth: &AuthContext,
    id: Uuid,
    index_id: Uuid,
) -> ApiResult<()> {
    require(pool, auth, id, AccessLevel::WRITE).await?;
    if indexes::get(pool, id, index_id).await?.is_none() {
        return Err(ApiError::NotFound {
            message: "Pipeline Index not found",
            id: Some(index_id),
        });
    }
    let mut tx = pool.begin().await?;
    indexes::drop_index(&mut tx, index_id).await?;
    tx.commit().await?;
    Ok(())
}
