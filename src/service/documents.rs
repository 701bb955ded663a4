//! Documents: submission of versions, reads, expiry and deletion, fragments.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use serde_json::{Map, Value, json};
use trove_query::filter::Filter;
use trove_query::list::{FieldKind, FieldSpec, FilterOps, ListRequest, ListSpec};
use uuid::Uuid;

use super::Envelope;
use crate::access::{AccessLevel, ObjectType};
use crate::auth::AuthContext;
use crate::error::{ApiError, ApiResult};
use crate::ingest::queue::Job;
use crate::metadata_schema;
use crate::state::AppState;
use crate::store::documents::{self as store, NewVersion};
use crate::store::listing;
use crate::store::pipelines::{self as pipelines_store, PipelineRow};
use crate::time::rfc3339;

pub use crate::store::documents::{FragmentRow, VersionRow};

/// Largest version accepted in `version` / `as_of` (year 9999).
pub const MAX_VERSION: i64 = 253_402_300_799_999_999;

/// Fields of the document list (interface §Pipelines…, addendum §4).
pub const DOCUMENT_LIST: ListSpec = ListSpec {
    table: "documents",
    fields: &[
        FieldSpec::new("id", FieldKind::Uuid, false, FilterOps::EQ, true),
        FieldSpec::new("status", FieldKind::Text, false, FilterOps::EQ, false),
        FieldSpec::new(
            "classification",
            FieldKind::Text,
            false,
            FilterOps::EQ,
            true,
        ),
        FieldSpec::new(
            "external_identifier",
            FieldKind::Text,
            false,
            FilterOps::EQ_CONTAINS,
            true,
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
    default_order: &["id", "created_at"],
};

/// Fields of the fragment list of a version.
pub const FRAGMENT_LIST: ListSpec = ListSpec {
    table: "fragments",
    fields: &[
        FieldSpec::new("id", FieldKind::Uuid, false, FilterOps::NONE, true),
        FieldSpec::new("order_id", FieldKind::Integer, false, FilterOps::NONE, true),
    ],
    echo_unset_filters: false,
    default_order: &["order_id"],
};

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

/// What a submission holds: a plain text, or a file whose text the worker extracts.
pub enum Content {
    Text(String),
    File {
        bytes: Vec<u8>,
        format: trove_extract::Format,
    },
}

/// Input of a submission.
pub struct NewDocument {
    pub external_identifier: String,
    pub classification: String,
    pub metadata: Value,
    pub content: Content,
    pub text_splitter_id: Option<Uuid>,
    pub expire_older_versions: bool,
}

/// Microseconds since the epoch of a timestamp.
fn micros(ts: DateTime<Utc>) -> i64 {
    ts.timestamp_micros()
}

/// Submits a version: stores it `pending` with its encrypted text and the outbox entry of its
/// job, queues the job, then hands the entry over for removal. A process that stops between
/// the commit and the publish leaves the entry: the workers' sweep publishes the job then.
pub async fn submit(
    state: &AppState,
    auth: &AuthContext,
    pipeline_id: Uuid,
    input: NewDocument,
) -> ApiResult<VersionRow> {
    let schema = admitted(state, auth, pipeline_id, &input).await?;
    let mut rows =
        store_versions(state, pipeline_id, &[(&input, &schema)], |_, error| error).await?;
    rows.pop()
        .ok_or_else(|| ApiError::Internal("the version was not stored".to_owned()))
}

/// The most versions one batch submission holds.
pub const MAX_BATCH: usize = 1000;

/// Submits versions in one transaction (`POST /pipelines/{pipeline_id}/documents/batch`, an
/// extension of the interface): every item is checked as a single submission would be before
/// anything is stored; an item's failure is 400 `Invalid parameter` with its index and its own
/// error, and nothing is stored. The versions come back in the order of the items.
pub async fn submit_batch(
    state: &AppState,
    auth: &AuthContext,
    pipeline_id: Uuid,
    inputs: Vec<NewDocument>,
) -> ApiResult<Vec<VersionRow>> {
    if !(1..=MAX_BATCH).contains(&inputs.len()) {
        return Err(ApiError::InvalidParameter(format!(
            "documents must hold 1 to {MAX_BATCH} items"
        )));
    }
    // What admits an item depends on its classification and splitter only: each pair is
    // checked once (a batch usually names a few).
    let mut admissions: HashMap<(&str, Option<Uuid>), Value> = HashMap::new();
    let mut schemas = Vec::with_capacity(inputs.len());
    for (index, input) in inputs.iter().enumerate() {
        let key = (input.classification.as_str(), input.text_splitter_id);
        let schema = match admissions.get(&key) {
            Some(schema) => schema.clone(),
            None => {
                let schema = admitted(state, auth, pipeline_id, input)
                    .await
                    .map_err(|error| item_error(index, error))?;
                admissions.insert(key, schema.clone());
                schema
            }
        };
        schemas.push(schema);
    }
    let items: Vec<(&NewDocument, &Value)> = inputs.iter().zip(&schemas).collect();
    store_versions(state, pipeline_id, &items, item_error).await
}

/// An item's own error in a batch.
fn item_error(index: usize, error: ApiError) -> ApiError {
    match error {
        // The pipeline's absence, the key's permissions and the service's own failures are
        // the request's, not the item's.
        ApiError::PipelineNotFound(_) | ApiError::AccessDenied { .. } => error,
        error if error.status().is_server_error() => error,
        error => ApiError::BatchItem {
            index,
            error: Box::new(error),
        },
    }
}

/// The checks of a submission that take no lock: the pipeline (404), write on it (403), the
/// classification (declared and within the key's allow-list, else 404) and the text
/// splitter. Returns the pipeline's metadata schema.
async fn admitted(
    state: &AppState,
    auth: &AuthContext,
    pipeline_id: Uuid,
    input: &NewDocument,
) -> ApiResult<Value> {
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
    Ok(metadata_schema)
}

/// The license check of a submission that creates `new_documents` documents (a new version
/// of a known document creates none).
async fn check_license_for_documents(state: &AppState, new_documents: usize) -> ApiResult<()> {
    let license = &state.config.license;
    if new_documents <= 1 {
        let creating = (new_documents == 1).then_some(ObjectType::Documents);
        return crate::auth::license::check_license(license, &state.pool, creating).await;
    }
    crate::auth::license::check_license_for(
        license,
        &state.pool,
        ObjectType::Documents,
        new_documents,
    )
    .await
}

/// Stores versions `pending` in one transaction, then queues their jobs: their identities are
/// locked (in one order, so two submissions cannot wait for each other) and read, the license
/// checked for the documents they create, each version validated against the document it
/// extends (an earlier item of the same document is its last version; an item's error goes
/// through `item_error` with its index) before anything is written, then every version is
/// inserted in one statement. Returns the versions in the order of the items.
async fn store_versions(
    state: &AppState,
    pipeline_id: Uuid,
    items: &[(&NewDocument, &Value)],
    item_error: fn(usize, ApiError) -> ApiError,
) -> ApiResult<Vec<VersionRow>> {
    let mut identifiers: Vec<&str> = items
        .iter()
        .map(|(input, _)| input.external_identifier.as_str())
        .collect();
    identifiers.sort_unstable();
    identifiers.dedup();
    let mut tx = state.pool.begin().await?;
    store::lock_identities(&mut tx, pipeline_id, &identifiers).await?;
    let mut last = store::identities(&mut tx, pipeline_id, &identifiers).await?;
    let new_documents = identifiers
        .iter()
        .filter(|identifier| !last.contains_key(**identifier))
        .count();
    check_license_for_documents(state, new_documents).await?;
    let mut checked = Vec::with_capacity(items.len());
    for (index, (input, schema)) in items.iter().enumerate() {
        let version = checked_version(state, schema, input, last.get(&input.external_identifier))
            .map_err(|error| item_error(index, error))?;
        last.insert(
            input.external_identifier.clone(),
            (version.id, input.classification.clone(), version.version),
        );
        checked.push(version);
    }
    let versions: Vec<NewVersion<'_>> = items
        .iter()
        .zip(&checked)
        .map(|((input, _), v)| NewVersion {
            id: v.id,
            version: v.version,
            created_at: v.created_at,
            pipeline_id,
            external_identifier: &input.external_identifier,
            classification: &input.classification,
            metadata: &input.metadata,
            text_splitter_id: input.text_splitter_id,
            expire_older_versions: input.expire_older_versions,
            encrypted_text: &v.encrypted_text,
            format: v.format,
        })
        .collect();
    let rows = store::insert(&mut tx, &versions).await?;
    for v in checked.iter().filter(|v| !v.unconvertible.is_empty()) {
        store::record_unconvertible(&mut tx, pipeline_id, v.id, v.version, &v.unconvertible)
            .await?;
    }
    tx.commit().await?;
    let jobs: Vec<Job> = checked
        .iter()
        .map(|v| Job {
            pipeline_id,
            document_id: v.id,
            version: v.version,
        })
        .collect();
    publish(state, &jobs).await?;
    Ok(rows)
}

/// A version checked and ready to store.
struct CheckedVersion {
    id: Uuid,
    version: i64,
    created_at: DateTime<Utc>,
    encrypted_text: Vec<u8>,
    /// A file's format; `None` for a plain text.
    format: Option<&'static str>,
    /// Metadata fields the database cannot read as their declared integer type.
    unconvertible: Vec<String>,
}

/// Validates a version against the document it extends (`last`: its id, classification and
/// last version), and gives it its id, version number and encrypted text.
fn checked_version(
    state: &AppState,
    metadata_schema: &Value,
    input: &NewDocument,
    last: Option<&store::Identity>,
) -> ApiResult<CheckedVersion> {
    let length = input.external_identifier.chars().count();
    if !(1..=1024).contains(&length) {
        return Err(ApiError::InvalidParameter(
            "Invalid external_identifier".to_owned(),
        ));
    }
    if !input.metadata.is_object() {
        return Err(ApiError::InvalidMetadata(serde_json::Map::new()));
    }
    metadata_schema::validate_metadata(metadata_schema, &input.metadata)?;
    let unconvertible =
        trove_query::filter::unconvertible_integer_fields(metadata_schema, &input.metadata);
    if let Some((_, classification, _)) = last
        && *classification != input.classification
    {
        return Err(ApiError::ClassificationMismatch);
    }
    let now = Utc::now();
    // Versions of one document are distinct and increasing even within one microsecond.
    let version = match last {
        Some((_, _, last)) => micros(now).max(last + 1),
        None => micros(now),
    };
    Ok(CheckedVersion {
        id: last.map_or_else(Uuid::now_v7, |(id, _, _)| *id),
        version,
        created_at: DateTime::<Utc>::from_timestamp_micros(version).unwrap_or(now),
        encrypted_text: state.cipher.encrypt(match &input.content {
            Content::Text(text) => text.as_bytes(),
            Content::File { bytes, .. } => bytes,
        }),
        format: match &input.content {
            Content::Text(_) => None,
            Content::File { format, .. } => Some(format.as_str()),
        },
        unconvertible,
    })
}

/// Queues the jobs of committed versions, all at once; a version whose job could not be
/// queued (and that no worker has taken meanwhile) is marked `failed` and the request answers
/// 500 `NATS error`.
async fn publish(state: &AppState, jobs: &[Job]) -> ApiResult<()> {
    let results =
        futures_util::future::join_all(jobs.iter().map(|job| state.queue.publish(job))).await;
    let mut queued = Vec::with_capacity(jobs.len());
    let mut failure = None;
    for (job, result) in jobs.iter().zip(results) {
        match result {
            Ok(()) => queued.push((job.document_id, job.version)),
            // A publish that timed out may have reached the stream all the same: a version a
            // worker has already taken was queued.
            Err(error) => {
                if store::mark_failed(&state.pool, job.document_id, job.version).await? {
                    tracing::error!(%error, document_id = %job.document_id, version = job.version, "job could not be queued");
                    failure.get_or_insert(error);
                } else {
                    queued.push((job.document_id, job.version));
                }
            }
        }
    }
    // The queued jobs' outbox entries go, in the background (`ingest::outbox`).
    state.queued_jobs.record(&queued);
    match failure {
        Some(error) => Err(ApiError::Nats(error.to_string())),
        None => Ok(()),
    }
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

/// [`read`], each version with the reason it failed, where one is known (a file whose text
/// could not be extracted).
pub async fn read_with_reasons(
    state: &AppState,
    auth: &AuthContext,
    pipeline_id: Uuid,
    id: Uuid,
    version: Option<i64>,
    as_of: Option<i64>,
) -> ApiResult<Vec<(VersionRow, Option<String>)>> {
    let rows = read(state, auth, pipeline_id, id, version, as_of).await?;
    let failed: Vec<i64> = rows
        .iter()
        .filter(|r| r.status == store::DocumentStatus::Failed)
        .map(|r| r.version)
        .collect();
    let mut reasons = if failed.is_empty() {
        HashMap::new()
    } else {
        store::status_reasons(&state.pool, id, &failed).await?
    };
    Ok(rows
        .into_iter()
        .map(|row| {
            let reason = reasons.remove(&row.version);
            (row, reason)
        })
        .collect())
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

/// The API object of a fragment: text decrypted, `page_content` absent when empty.
pub fn fragment_object(
    state: &AppState,
    row: FragmentRow,
    embedding: Option<Vec<f32>>,
) -> ApiResult<Value> {
    let text = state
        .cipher
        .decrypt_text(&row.content)
        .map_err(|_| ApiError::Decryption)?;
    let mut object = Map::new();
    object.insert("id".to_owned(), json!(row.id));
    object.insert("classification".to_owned(), json!(row.classification));
    object.insert("metadata".to_owned(), row.metadata);
    object.insert("document_id".to_owned(), json!(row.document_id));
    if !text.is_empty() {
        object.insert("page_content".to_owned(), json!(text));
    }
    object.insert("version".to_owned(), json!(row.version));
    object.insert(
        "expired_at".to_owned(),
        json!(row.expired_at.as_ref().map(rfc3339::format)),
    );
    if let Some(embedding) = embedding {
        object.insert("embedding".to_owned(), json!(embedding));
    }
    object.insert("score".to_owned(), Value::Null);
    object.insert("order_id".to_owned(), json!(row.order_id));
    Ok(Value::Object(object))
}

/// Fragments as objects, with embeddings when asked and the pipeline has a model.
async fn fragment_objects(
    state: &AppState,
    vector_embedding_id: Option<Uuid>,
    rows: Vec<FragmentRow>,
    include_embedding: bool,
) -> ApiResult<Vec<Value>> {
    let mut embeddings = HashMap::new();
    if include_embedding && let Some(ve) = vector_embedding_id {
        let ids: Vec<Uuid> = rows.iter().map(|r| r.id).collect();
        embeddings.extend(store::embeddings(&state.pool, ve, &ids).await?);
    }
    rows.into_iter()
        .map(|row| {
            let embedding = embeddings.remove(&row.id);
            fragment_object(state, row, embedding)
        })
        .collect()
}

/// One page of the current versions of a pipeline's documents (read on the pipeline, 404
/// otherwise): the list envelope. `metadata` is the parsed `metadata` filter with its raw
/// text, which `query_info` echoes (as JSON when it is JSON).
pub async fn list(
    state: &AppState,
    auth: &AuthContext,
    pipeline_id: Uuid,
    mut request: ListRequest,
    metadata: Option<(Filter, String)>,
) -> ApiResult<Envelope> {
    let pipeline = pipeline_for_read(state, auth, pipeline_id).await?;
    let mut base = store::list_base(pipeline_id);
    if let Some((filter, raw)) = metadata {
        let compiled =
            super::filters::compile_for_pipeline(state, &pipeline, &filter, "documents").await?;
        super::filters::refuse_unconvertible(state, pipeline.id, &compiled, None).await?;
        base.cond_where(compiled.condition);
        let echoed = serde_json::from_str(&raw).unwrap_or(Value::String(raw));
        request.query_info.insert("metadata".to_owned(), echoed);
    }
    listing::list::<VersionRow>(&state.pool, &DOCUMENT_LIST, &request, base).await
}

/// One page of the fragments of a document version (`version`, default the newest current
/// one; read on the pipeline), with their embeddings when `include_embedding` and the
/// pipeline has a model: the list envelope.
pub async fn fragments(
    state: &AppState,
    auth: &AuthContext,
    pipeline_id: Uuid,
    document_id: Uuid,
    version: Option<i64>,
    include_embedding: bool,
    request: &ListRequest,
) -> ApiResult<Envelope> {
    check_version(version)?;
    let pipeline = pipeline_for_read(state, auth, pipeline_id).await?;
    let versions = store::read(&state.pool, pipeline_id, document_id, version, None)
        .await
        .map_err(ApiError::from)?;
    let Some(selected) = versions.first() else {
        return Err(not_found(document_id));
    };
    let base = store::fragment_list_base(document_id, selected.version);
    let vector_embedding = if include_embedding {
        pipeline.ve_id
    } else {
        None
    };
    let mut envelope = listing::list_mapped(
        &state.pool,
        &FRAGMENT_LIST,
        request,
        base,
        |row: FragmentRow| fragment_object(state, row, None),
    )
    .await?;
    if let Some(ve) = vector_embedding {
        let ids: Vec<Uuid> = envelope
            .data
            .iter()
            .filter_map(|f| f["id"].as_str()?.parse().ok())
            .collect();
        let embeddings: HashMap<Uuid, Vec<f32>> = store::embeddings(&state.pool, ve, &ids)
            .await
            .map_err(ApiError::from)?
            .into_iter()
            .collect();
        for fragment in &mut envelope.data {
            let id = fragment["id"].as_str().and_then(|s| s.parse::<Uuid>().ok());
            if let (Some(id), Some(object)) = (id, fragment.as_object_mut())
                && let Some(embedding) = embeddings.get(&id)
            {
                object.insert("embedding".to_owned(), json!(embedding));
            }
        }
    }
    Ok(envelope)
}

/// Fragments of a pipeline by id (read on the pipeline): the API objects in request order,
/// unknown ids omitted, repeated ids once, expired fragments included, with embeddings when
/// `include_embedding` and the pipeline has a model.
pub async fn fragments_by_id(
    state: &AppState,
    auth: &AuthContext,
    pipeline_id: Uuid,
    ids: Vec<Uuid>,
    include_embedding: bool,
) -> ApiResult<Vec<Value>> {
    let pipeline = pipeline_for_read(state, auth, pipeline_id).await?;
    let rows = store::fragments_by_id(&state.pool, pipeline_id, &ids).await?;
    let mut by_id: HashMap<Uuid, FragmentRow> = rows.into_iter().map(|r| (r.id, r)).collect();
    // Request order; repeated ids appear once.
    let ordered: Vec<FragmentRow> = ids.iter().filter_map(|id| by_id.remove(id)).collect();
    fragment_objects(state, pipeline.ve_id, ordered, include_embedding).await
}
