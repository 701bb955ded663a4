//! Documents: submission of versions, reads, expiry and deletion, fragments.

use chrono::{DateTime, Utc};
use serde_json::Value;
use uuid::Uuid;

use crate::access::{AccessLevel, ObjectType};
use crate::auth::AuthContext;
use crate::error::{ApiError, ApiResult};
use crate::ingest::queue::Job;
use crate::metadata_schema;
use crate::state::AppState;
use crate::store::documents::{self as store, NewVersion, VersionRow};
use crate::store::pipelines::{self as pipelines_store, PipelineRow};

/// Largest version accepted in `version` / `as_of` (year 9999).
pub const MAX_VERSION: i64 = 253_402_300_799_999_999;

/// `Document not found` with the id.
pub fn not_found(id: Uuid) -> ApiError {
    ApiError::NotFound {
        message: "Document not found",
        id: Some(id),
    }
}

/// The pipeline of a document write: missing → 404, present without write → 403.
pub async fn pipeline_for_write(
    state: &AppState,
    auth: &AuthContext,
    id: Uuid,
) -> ApiResult<PipelineRow> {
    let pipeline = pipelines_store::get(&state.pool, id)
        .await?
        .ok_or_else(|| super::pipelines::not_found(id))?;
    auth.require_object(ObjectType::Pipelines, id, AccessLevel::WRITE)?;
    Ok(pipeline)
}

/// Whether the key's allow-list on the pipeline permits a classification (exact names).
fn allowed(auth: &AuthContext, pipeline: Uuid, classification: &str) -> bool {
    let list = auth.allow_list(Some(pipeline));
    list.iter().any(|c| c == "*" || c == classification)
}

/// Input of a submission.
pub struct NewDocument {
    pub external_identifier: String,
    pub classification: String,
    pub metadata: Value,
    pub text: String,
    pub text_splitter_id: Option<Uuid>,
    pub expire_older_versions: bool,
}

/// Microseconds since the epoch of a timestamp.
fn micros(ts: DateTime<Utc>) -> i64 {
    ts.timestamp_micros()
}

/// Submits a version: stores it `pending` with its encrypted text and queues its job.
pub async fn submit(
    state: &AppState,
    auth: &AuthContext,
    pipeline_id: Uuid,
    input: NewDocument,
) -> ApiResult<VersionRow> {
    let pool = &state.pool;
    let (metadata_schema, declared) =
        pipelines_store::submission_context(pool, pipeline_id, &input.classification)
            .await?
            .ok_or_else(|| super::pipelines::not_found(pipeline_id))?;
    auth.require_object(ObjectType::Pipelines, pipeline_id, AccessLevel::WRITE)?;
    if !declared || !allowed(auth, pipeline_id, &input.classification) {
        return Err(ApiError::NotFound {
            message: "Classification not found",
            id: None,
        });
    }
    if let Some(splitter) = input.text_splitter_id
        && (!auth.can_read(ObjectType::TextSplitters, splitter)
            || !pipelines_store::text_splitter_exists(pool, splitter).await?)
    {
        return Err(ApiError::NotFound {
            message: "Text Splitter not found",
            id: Some(splitter),
        });
    }

    let mut tx = pool.begin().await?;
    store::lock_identity(&mut tx, pipeline_id, &input.external_identifier).await?;
    let existing = store::identity(&mut tx, pipeline_id, &input.external_identifier).await?;
    let creates_document = existing.is_none();
    crate::auth::license::check_license(
        &state.config.license,
        pool,
        creates_document.then_some(ObjectType::Documents),
    )
    .await?;

    let length = input.external_identifier.chars().count();
    if !(1..=1024).contains(&length) {
        return Err(ApiError::InvalidParameter(
            "Invalid external_identifier".to_owned(),
        ));
    }
    if !input.metadata.is_object() {
        return Err(ApiError::InvalidMetadata(serde_json::Map::new()));
    }
    metadata_schema::validate_metadata(&metadata_schema, &input.metadata)?;
    let unconvertible =
        trove_query::filter::unconvertible_integer_fields(&metadata_schema, &input.metadata);
    if let Some((_, classification, _)) = &existing
        && *classification != input.classification
    {
        return Err(ApiError::ClassificationMismatch);
    }

    let now = Utc::now();
    // Versions of one document are distinct and increasing even within one microsecond.
    let version = match &existing {
        Some((_, _, last)) => micros(now).max(last + 1),
        None => micros(now),
    };
    let created_at = DateTime::<Utc>::from_timestamp_micros(version).unwrap_or(now);
    let id = existing
        .as_ref()
        .map_or_else(Uuid::now_v7, |(id, _, _)| *id);
    let encrypted = state.cipher.encrypt(input.text.as_bytes());
    let row = store::insert(
        &mut tx,
        &NewVersion {
            id,
            version,
            created_at,
            pipeline_id,
            external_identifier: &input.external_identifier,
            classification: &input.classification,
            metadata: &input.metadata,
            text_splitter_id: input.text_splitter_id,
            expire_older_versions: input.expire_older_versions,
            encrypted_text: &encrypted,
        },
    )
    .await?;
    if !unconvertible.is_empty() {
        store::record_unconvertible(&mut tx, pipeline_id, id, version, &unconvertible).await?;
    }
    tx.commit().await?;

    let job = Job {
        pipeline_id,
        document_id: id,
        version,
    };
    if let Err(error) = state.queue.publish(&job).await {
        tracing::error!(%error, document_id = %id, version, "job could not be queued");
        store::mark_failed(pool, id, version).await?;
        return Err(ApiError::Nats(error));
    }
    Ok(row)
}

/// Requires read on the pipeline (404 otherwise).
pub async fn pipeline_for_read(
    state: &AppState,
    auth: &AuthContext,
    id: Uuid,
) -> ApiResult<PipelineRow> {
    super::pipelines::require(&state.pool, auth, id, AccessLevel::READ).await
}

/// Checks a `version` / `as_of` value.
pub fn check_version(value: Option<i64>) -> ApiResult<()> {
    match value {
        Some(v) if !(0..=MAX_VERSION).contains(&v) => Err(ApiError::InvalidVersion),
        _ => Ok(()),
    }
}

/// Reads versions (`version` wins over `as_of`; neither: current versions).
pub async fn read(
    state: &AppState,
    auth: &AuthContext,
    pipeline_id: Uuid,
    id: Uuid,
    version: Option<i64>,
    as_of: Option<i64>,
) -> ApiResult<Vec<VersionRow>> {
    check_version(version)?;
    check_version(as_of)?;
    pipeline_for_read(state, auth, pipeline_id).await?;
    let rows = store::read(&state.pool, pipeline_id, id, version, as_of).await?;
    if rows.is_empty() {
        return Err(not_found(id));
    }
    Ok(rows)
}

/// Every version, newest first.
pub async fn versions(
    state: &AppState,
    auth: &AuthContext,
    pipeline_id: Uuid,
    id: Uuid,
) -> ApiResult<Vec<VersionRow>> {
    pipeline_for_read(state, auth, pipeline_id).await?;
    let rows = store::versions(&state.pool, pipeline_id, id).await?;
    if rows.is_empty() {
        return Err(not_found(id));
    }
    Ok(rows)
}

/// Expires (`expire`) or permanently deletes a document.
pub async fn remove(
    state: &AppState,
    auth: &AuthContext,
    pipeline_id: Uuid,
    id: Uuid,
    expire: bool,
) -> ApiResult<Option<Vec<VersionRow>>> {
    pipeline_for_write(state, auth, pipeline_id).await?;
    let versions = store::versions(&state.pool, pipeline_id, id).await?;
    let Some(newest) = versions.first() else {
        return Err(not_found(id));
    };
    if !allowed(auth, pipeline_id, &newest.classification) {
        return Err(ApiError::AccessDenied {
            level: AccessLevel::WRITE,
            object_type: ObjectType::Pipelines,
            id: Some(pipeline_id),
        });
    }
    if expire {
        Ok(Some(store::expire(&state.pool, pipeline_id, id).await?))
    } else {
        store::delete(&state.pool, pipeline_id, id).await?;
        Ok(None)
    }
}
