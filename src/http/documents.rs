//! Documents, versions and fragments.

use poem::Request;
use poem_openapi::{Object, OpenApi};
use serde::Deserialize;
use serde_json::{Map, Value, json};
use trove_query::list::{FieldKind, FieldSpec, FilterOps, ListSpec, parse_list_query};
use uuid::Uuid;

use super::ApiTags;
use super::api_keys::form_pairs;
use super::extract::{self, Auth, JsonBody, state};
use super::respond::{Created, Json, ListEnvelope, OkOrNoContent};
use crate::error::{ApiError, ApiResult};
use crate::service::documents::{self as service, NewDocument};
use crate::state::AppState;
use crate::store;
use crate::store::documents::{FragmentRow, VersionRow};
use crate::time::rfc3339;

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

/// Body of `POST /pipelines/{pipeline_id}/documents`.
#[derive(Debug, Object, Deserialize)]
pub struct CreateDocumentBody {
    /// The client's own id, 1–1024 characters; a known one adds a version.
    external_identifier: String,
    /// A declared classification, equal to earlier versions'.
    classification: String,
    #[serde(default = "empty_object")]
    #[oai(default = "empty_object")]
    metadata: Value,
    /// The plain text (may be empty).
    text: String,
    /// Splitter for this version instead of the pipeline's default.
    #[serde(default)]
    text_splitter_id: Option<Uuid>,
    /// Expire the current versions once this one is processed.
    #[serde(default = "yes")]
    #[oai(default = "yes")]
    expire_older_versions: bool,
}

/// Body of `POST /documents`: the pipeline and the document.
#[derive(Debug, Object, Deserialize)]
pub struct CreateDocumentWithPipelineBody {
    pipeline_id: Uuid,
    #[serde(flatten)]
    #[oai(flatten)]
    document: CreateDocumentBody,
}

fn empty_object() -> Value {
    json!({})
}

fn yes() -> bool {
    true
}

/// Body of the deprecated `POST /pipelines/{pipeline_id}/fragments`.
#[derive(Debug, Object, Deserialize)]
pub struct FragmentIdsBody {
    ids: Vec<Uuid>,
}

/// A fragment (schema only; objects are built by [`fragment_object`]).
#[derive(Debug, Object)]
pub struct Fragment {
    id: Uuid,
    classification: String,
    metadata: Value,
    document_id: Uuid,
    page_content: Option<String>,
    version: i64,
    expired_at: Option<chrono::DateTime<chrono::Utc>>,
    embedding: Option<Vec<f32>>,
    score: Option<f64>,
    order_id: i32,
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

/// Reads an optional integer query parameter (`version`, `as_of`).
fn integer_param(query: Option<&str>, name: &str) -> ApiResult<Option<i64>> {
    let mut found = None;
    for (key, value) in form_pairs(query) {
        if key != name {
            continue;
        }
        if found.is_some() {
            return Err(ApiError::query_string(format!("duplicate field `{name}`")));
        }
        found = Some(
            value
                .parse::<i64>()
                .map_err(|e| ApiError::query_string(format!("{name}: {e}")))?,
        );
    }
    Ok(found)
}

/// Reads an optional boolean query parameter (`expire`, `include_embedding`).
fn bool_param(query: Option<&str>, name: &str) -> ApiResult<bool> {
    let mut found = None;
    for (key, value) in form_pairs(query) {
        if key != name {
            continue;
        }
        if found.is_some() {
            return Err(ApiError::query_string(format!("duplicate field `{name}`")));
        }
        found = Some(match value.as_str() {
            "true" => true,
            "false" => false,
            other => {
                return Err(ApiError::query_string(format!(
                    "{name}: provided string was not `true` or `false`: {other}"
                )));
            }
        });
    }
    Ok(found.unwrap_or(false))
}

/// Fragments as objects, with embeddings when asked and the pipeline has a model.
async fn fragment_objects(
    state: &AppState,
    vector_embedding_id: Option<Uuid>,
    rows: Vec<FragmentRow>,
    include_embedding: bool,
) -> ApiResult<Vec<Value>> {
    let mut embeddings = std::collections::HashMap::new();
    if include_embedding && let Some(ve) = vector_embedding_id {
        let ids: Vec<Uuid> = rows.iter().map(|r| r.id).collect();
        embeddings.extend(store::documents::embeddings(&state.pool, ve, &ids).await?);
    }
    rows.into_iter()
        .map(|row| {
            let embedding = embeddings.remove(&row.id);
            fragment_object(state, row, embedding)
        })
        .collect()
}

async fn submit(
    state: &AppState,
    auth: &Auth,
    pipeline_id: Uuid,
    body: CreateDocumentBody,
) -> poem::Result<Created<VersionRow>> {
    let input = NewDocument {
        external_identifier: body.external_identifier,
        classification: body.classification,
        metadata: body.metadata,
        text: body.text,
        text_splitter_id: body.text_splitter_id,
        expire_older_versions: body.expire_older_versions,
    };
    Ok(Created(
        service::submit(state, &auth.0, pipeline_id, input).await?,
    ))
}

pub struct DocumentsApi;

#[OpenApi(tag = "ApiTags::Documents")]
impl DocumentsApi {
    /// Submit a document version
    ///
    /// Stores the version `pending` and queues it for splitting and embedding; it becomes
    /// searchable once its status is `success`.
    #[oai(path = "/pipelines/:pipeline_id/documents", method = "post")]
    async fn create(
        &self,
        auth: Auth,
        pipeline_id: extract::Path,
        req: &Request,
        body: JsonBody<CreateDocumentBody>,
    ) -> poem::Result<Created<VersionRow>> {
        let state = state(req)?;
        state.metrics.document_queue_added.inc();
        submit(state, &auth, pipeline_id.0, body.0).await
    }

    /// Submit a document version (pipeline in the body)
    #[oai(path = "/documents", method = "post")]
    async fn create_flat(
        &self,
        auth: Auth,
        req: &Request,
        body: JsonBody<CreateDocumentWithPipelineBody>,
    ) -> poem::Result<Created<VersionRow>> {
        let state = state(req)?;
        state.metrics.document_queue_added.inc();
        let body = body.0;
        submit(state, &auth, body.pipeline_id, body.document).await
    }

    /// List documents
    ///
    /// Current versions of the pipeline's documents. Filters: `id`, `status`,
    /// `classification`, `external_identifier`, `external_identifier$contains`, `created_at`
    /// and `updated_at` with comparisons. `order_by`: `id`, `created_at`, `updated_at`,
    /// `external_identifier`, `classification`.
    #[oai(path = "/pipelines/:pipeline_id/documents", method = "get")]
    async fn list(
        &self,
        auth: Auth,
        pipeline_id: extract::Path,
        req: &Request,
    ) -> poem::Result<Json<ListEnvelope>> {
        let state = state(req)?;
        let query = req.uri().query();
        let mut request =
            parse_list_query(&DOCUMENT_LIST, query, &["metadata"]).map_err(ApiError::from)?;
        // The metadata filter language, URL-encoded JSON; grammar errors are query-string
        // errors (400 plain text).
        let mut metadata = None;
        for (key, value) in form_pairs(query) {
            if key != "metadata" {
                continue;
            }
            if metadata.is_some() {
                return Err(ApiError::query_string("duplicate field `metadata`").into());
            }
            let filter = trove_query::filter::Filter::parse_query_param(&value)
                .map_err(|reason| ApiError::query_string(format!("metadata: {reason}")))?;
            metadata = Some((filter, value));
        }
        let pipeline = service::pipeline_for_read(state, &auth.0, pipeline_id.0).await?;
        let mut base = store::documents::list_base(pipeline_id.0);
        if let Some((filter, raw)) = metadata {
            let compiled = crate::service::filters::compile_for_pipeline(
                state,
                &pipeline,
                &filter,
                "documents",
            )
            .await?;
            crate::service::filters::refuse_unconvertible(state, pipeline.id, &compiled, None)
                .await?;
            base.cond_where(compiled.condition);
            let echoed = serde_json::from_str(&raw).unwrap_or(Value::String(raw));
            request.query_info.insert("metadata".to_owned(), echoed);
        }
        let envelope =
            store::listing::list::<VersionRow>(&state.pool, &DOCUMENT_LIST, &request, base).await?;
        Ok(Json(ListEnvelope::from(envelope)))
    }

    /// Read a document
    ///
    /// `version` selects one version (expired or not); `as_of` reads the document as it was
    /// at that time; neither gives the current versions. Newest first.
    #[oai(
        path = "/pipelines/:pipeline_id/documents/:document_id",
        method = "get"
    )]
    async fn get(
        &self,
        auth: Auth,
        pipeline_id: extract::Path,
        document_id: extract::Path,
        req: &Request,
    ) -> poem::Result<Json<Vec<VersionRow>>> {
        let state = state(req)?;
        let query = req.uri().query();
        let version = integer_param(query, "version")?;
        let as_of = integer_param(query, "as_of")?;
        Ok(Json(
            service::read(state, &auth.0, pipeline_id.0, document_id.0, version, as_of).await?,
        ))
    }

    /// Every version of a document
    #[oai(
        path = "/pipelines/:pipeline_id/documents/:document_id/versions",
        method = "get"
    )]
    async fn versions(
        &self,
        auth: Auth,
        pipeline_id: extract::Path,
        document_id: extract::Path,
        req: &Request,
    ) -> poem::Result<Json<Vec<VersionRow>>> {
        let state = state(req)?;
        Ok(Json(
            service::versions(state, &auth.0, pipeline_id.0, document_id.0).await?,
        ))
    }

    /// Expire or delete a document
    ///
    /// `expire=true` marks every current version expired (200, the versions expired);
    /// otherwise every version, fragment and vector is removed (204).
    #[oai(
        path = "/pipelines/:pipeline_id/documents/:document_id",
        method = "delete"
    )]
    async fn delete(
        &self,
        auth: Auth,
        pipeline_id: extract::Path,
        document_id: extract::Path,
        req: &Request,
    ) -> poem::Result<OkOrNoContent<Vec<VersionRow>>> {
        let state = state(req)?;
        let expire = bool_param(req.uri().query(), "expire")?;
        match service::remove(state, &auth.0, pipeline_id.0, document_id.0, expire).await? {
            Some(expired) => Ok(OkOrNoContent::Ok(expired)),
            None => Ok(OkOrNoContent::NoContent),
        }
    }

    /// Fragments of a document version
    ///
    /// `version` (default: the newest current version), `include_embedding`, pagination,
    /// `order_by` (`order_id`, `id`).
    #[oai(
        path = "/pipelines/:pipeline_id/documents/:document_id/fragments",
        method = "get"
    )]
    async fn fragments(
        &self,
        auth: Auth,
        pipeline_id: extract::Path,
        document_id: extract::Path,
        req: &Request,
    ) -> poem::Result<Json<ListEnvelope>> {
        let state = state(req)?;
        let query = req.uri().query();
        let version = integer_param(query, "version")?;
        let include_embedding = bool_param(query, "include_embedding")?;
        let request = parse_list_query(&FRAGMENT_LIST, query, &["version", "include_embedding"])
            .map_err(ApiError::from)?;
        service::check_version(version)?;
        let pipeline = service::pipeline_for_read(state, &auth.0, pipeline_id.0).await?;
        let versions =
            store::documents::read(&state.pool, pipeline_id.0, document_id.0, version, None)
                .await
                .map_err(ApiError::from)?;
        let Some(selected) = versions.first() else {
            return Err(service::not_found(document_id.0).into());
        };
        let base = store::documents::fragment_list_base(document_id.0, selected.version);
        let vector_embedding = if include_embedding {
            pipeline.ve_id
        } else {
            None
        };
        let mut envelope = store::listing::list_mapped(
            &state.pool,
            &FRAGMENT_LIST,
            &request,
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
            let embeddings: std::collections::HashMap<Uuid, Vec<f32>> =
                store::documents::embeddings(&state.pool, ve, &ids)
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
        Ok(Json(ListEnvelope::from(envelope)))
    }

    /// Fragments by id
    ///
    /// Repeat `id`; unknown ids are omitted; request order; expired fragments included.
    #[oai(path = "/pipelines/:pipeline_id/fragments", method = "get")]
    async fn fragments_by_id(
        &self,
        auth: Auth,
        pipeline_id: extract::Path,
        req: &Request,
    ) -> poem::Result<Json<Vec<Value>>> {
        let state = state(req)?;
        let mut ids = Vec::new();
        for (key, value) in form_pairs(req.uri().query()) {
            if key == "id" {
                ids.push(Uuid::parse_str(&value).map_err(|e| {
                    ApiError::query_string(format!("id: UUID parsing failed: {e}"))
                })?);
            }
        }
        let include_embedding = bool_param(req.uri().query(), "include_embedding")?;
        Ok(Json(
            by_id(state, &auth, pipeline_id.0, ids, include_embedding).await?,
        ))
    }

    /// Fragments by id (deprecated)
    ///
    /// Replaced by `GET /pipelines/{pipeline_id}/fragments` with repeated `id` parameters.
    #[oai(
        path = "/pipelines/:pipeline_id/fragments",
        method = "post",
        deprecated
    )]
    async fn fragments_by_id_post(
        &self,
        auth: Auth,
        pipeline_id: extract::Path,
        req: &Request,
        body: JsonBody<FragmentIdsBody>,
    ) -> poem::Result<Json<Vec<Value>>> {
        let state = state(req)?;
        let include_embedding = bool_param(req.uri().query(), "include_embedding")?;
        Ok(Json(
            by_id(state, &auth, pipeline_id.0, body.0.ids, include_embedding).await?,
        ))
    }
}

async fn by_id(
    state: &AppState,
    auth: &Auth,
    pipeline_id: Uuid,
    ids: Vec<Uuid>,
    include_embedding: bool,
) -> ApiResult<Vec<Value>> {
    let pipeline = service::pipeline_for_read(state, &auth.0, pipeline_id).await?;
    let rows = store::documents::fragments_by_id(&state.pool, pipeline_id, &ids).await?;
    let mut by_id: std::collections::HashMap<Uuid, FragmentRow> =
        rows.into_iter().map(|r| (r.id, r)).collect();
    // Request order; repeated ids appear once.
    let ordered: Vec<FragmentRow> = ids.iter().filter_map(|id| by_id.remove(id)).collect();
    fragment_objects(state, pipeline.ve_id, ordered, include_embedding).await
}
