//! A pipeline's embedding models after its creation (extension: model migration): adding a
//! model whose vectors the workers backfill from the stored fragments, listing the
//! associations, making a `ready` one the default, removing one.

use uuid::Uuid;

use crate::access::{AccessLevel, ObjectType};
use crate::auth::AuthContext;
use crate::auth::license::check_license;
use crate::error::{ApiError, ApiResult};
use crate::ingest::queue::BackfillJob;
use crate::state::AppState;
use crate::store::vector_embeddings::{self as store, AddError, Association, RemoveError};

pub use crate::store::vector_embeddings::Association as AssociationRow;

/// The most associations a pipeline holds (its default included).
pub const MAX_VECTOR_EMBEDDINGS: i64 = 4;

/// The ranges of fragment ids a backfill walks in parallel, each by its own chain of jobs.
pub const BACKFILL_RANGES: u32 = 4;

/// `Vector embedding not found` (404) with the id.
fn not_found(id: Uuid) -> ApiError {
    ApiError::NotFound {
        message: "Vector embedding not found",
        id: Some(id),
    }
}

/// Adds a model to a pipeline (W on the pipeline, R on the model) and queues its backfill.
pub async fn add(
    state: &AppState,
    auth: &AuthContext,
    pipeline_id: Uuid,
    embedding_model_id: Uuid,
) -> ApiResult<Association> {
    super::pipelines::require(&state.pool, auth, pipeline_id, AccessLevel::WRITE).await?;
    let dimensions = if auth.can_read(ObjectType::EmbeddingModels, embedding_model_id) {
        crate::store::pipelines::embedding_model_dimensions(&state.pool, embedding_model_id).await?
    } else {
        None
    };
    let dimensions = dimensions.ok_or(ApiError::NotFound {
        message: "Embedding model not found",
        id: Some(embedding_model_id),
    })?;
    check_license(&state.config.license, &state.pool, None).await?;
    let new = store::NewAssociation {
        id: Uuid::new_v4(),
        pipeline_id,
        embedding_model_id,
        dimensions,
        index: state.config.hnsw,
        ranges: BACKFILL_RANGES,
    };
    let association = match store::add(state.pool.pg_pool(), &new, MAX_VECTOR_EMBEDDINGS).await {
        Ok(association) => association,
        Err(AddError::Duplicate) => return Err(ApiError::ConflictUnique),
        Err(AddError::Full) => {
            return Err(ApiError::InvalidParameter(format!(
                "a pipeline holds at most {MAX_VECTOR_EMBEDDINGS} embedding models"
            )));
        }
        Err(AddError::Database(error)) => return Err(error.into()),
    };
    // Jobs lost here (NATS unreachable) are published again by the workers' sweep once the
    // backfill has made no progress for a while: the association is stored either way.
    let jobs: Vec<BackfillJob> = (0..BACKFILL_RANGES)
        .map(|range| BackfillJob::start(pipeline_id, new.id, range))
        .collect();
    if let Err(error) = state.queue.publish_backfill(&jobs).await {
        tracing::warn!(%error, vector_embedding_id = %new.id, "queueing a backfill failed; the workers' sweep queues it again");
    }
    Ok(association)
}

/// The associations of a pipeline the key can read, oldest first.
pub async fn list(
    state: &AppState,
    auth: &AuthContext,
    pipeline_id: Uuid,
) -> ApiResult<Vec<Association>> {
    super::pipelines::require(&state.pool, auth, pipeline_id, AccessLevel::READ).await?;
    Ok(store::list(state.pool.pg_pool(), pipeline_id).await?)
}

/// Removes an association that is not the pipeline's default (W on the pipeline).
pub async fn remove(
    state: &AppState,
    auth: &AuthContext,
    pipeline_id: Uuid,
    id: Uuid,
) -> ApiResult<()> {
    super::pipelines::require(&state.pool, auth, pipeline_id, AccessLevel::WRITE).await?;
    match store::remove(state.pool.pg_pool(), pipeline_id, id).await {
        Ok(()) => Ok(()),
        Err(RemoveError::NotFound) => Err(not_found(id)),
        Err(RemoveError::Default) => Err(ApiError::ConflictRelated),
        Err(RemoveError::Database(error)) => Err(error.into()),
    }
}

/// Whether the pipeline holds a model added through the extension (its answers change only
/// on such pipelines).
pub async fn uses_extension(pool: &crate::store::Pool, pipeline_id: Uuid) -> ApiResult<bool> {
    Ok(store::has_added(pool.pg_pool(), pipeline_id).await?)
}

/// Checks that `id` is a `ready` association of the pipeline, to become its default
/// (`PATCH /pipelines/{id}`'s `default_vector_embedding_id`); `Invalid parameter` saying why
/// otherwise.
pub async fn check_default(
    pool: &crate::store::Pool,
    pipeline_id: Uuid,
    id: Uuid,
) -> ApiResult<()> {
    match store::get(pool.pg_pool(), pipeline_id, id).await? {
        None => Err(ApiError::InvalidParameter(format!(
            "{id} is not a vector embedding of this pipeline"
        ))),
        Some(association) if !association.is_ready() => Err(not_ready_parameter(&association)),
        Some(_) => Ok(()),
    }
}

/// Makes an association checked by [`check_default`] the pipeline's default.
pub async fn set_default(pool: &crate::store::Pool, pipeline_id: Uuid, id: Uuid) -> ApiResult<()> {
    if store::set_default(pool.pg_pool(), pipeline_id, id).await? {
        return Ok(());
    }
    // Removed or failed since it was checked.
    match store::get(pool.pg_pool(), pipeline_id, id).await? {
        Some(association) => Err(not_ready_parameter(&association)),
        None => Err(ApiError::InvalidParameter(format!(
            "{id} is not a vector embedding of this pipeline"
        ))),
    }
}

fn not_ready_parameter(association: &Association) -> ApiError {
    ApiError::InvalidParameter(format!(
        "vector embedding {} is {}, not ready",
        association.id, association.status
    ))
}

/// The 409 of a search naming an association that is not `ready`: its status and progress.
pub fn not_ready(
    id: Uuid,
    status: &str,
    fragments_done: Option<i64>,
    fragments_total: Option<i64>,
) -> ApiError {
    ApiError::ConflictRelatedWith(serde_json::json!({
        "vector_embedding_id": id,
        "status": status,
        "fragments_done": fragments_done,
        "fragments_total": fragments_total,
    }))
}
