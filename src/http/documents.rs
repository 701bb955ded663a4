//! Documents, versions and fragments.

use poem::Request;
use poem_openapi::{Object, OpenApi};
use serde::Deserialize;
use serde_json::{Value, json};
use trove_query::list::parse_list_query;
use uuid::Uuid;

use super::ApiTags;
use super::extract::form_pairs;
use super::extract::{self, Auth, JsonBody, state};
use super::files::FileUpload;
use super::respond::{Created, Described, Json, List, OkOrNoContent};
use super::schemas::{self, DocumentVersion, DocumentVersionRead};
use crate::error::{ApiError, ApiResult};
use crate::service::documents::{self as service, Content, NewDocument};
use crate::state::AppState;

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

/// Body of `POST /pipelines/{pipeline_id}/documents/batch`.
#[derive(Debug, Object, Deserialize)]
pub struct CreateDocumentsBody {
    /// 1 to 1,000 documents, each as in a single submission.
    documents: Vec<CreateDocumentBody>,
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

/// A fragment of a document version.
// Schema only: fragments are built by `service::documents::fragment_object` and, in search
// results, by `service::search::hit_object`.
#[derive(Debug, Object)]
pub struct Fragment {
    id: Uuid,
    /// The document's classification.
    classification: String,
    /// The document's metadata.
    metadata: Value,
    document_id: Uuid,
    /// The decrypted text; absent when empty.
    page_content: Option<String>,
    /// The document version: microseconds since the Unix epoch.
    version: i64,
    /// Null for a current version; always null in search results.
    #[oai(nullable)]
    expired_at: Option<chrono::DateTime<chrono::Utc>>,
    /// Only with `include_embedding=true` on a pipeline with an embedding model; never in search
    /// results.
    embedding: Option<Vec<f32>>,
    /// Search results: the distance (similarity, MMR; lower is closer) or the rank (full text;
    /// higher is better). Null outside search results.
    #[oai(nullable)]
    score: Option<f64>,
    /// Position within the document version, from 0.
    order_id: i32,
}

/// A plain array of fragments (fragments by id, search results), as the service builds them.
pub type Fragments = Described<Vec<Fragment>, Vec<Value>>;

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

impl From<CreateDocumentBody> for NewDocument {
    fn from(body: CreateDocumentBody) -> Self {
        Self {
            external_identifier: body.external_identifier,
            classification: body.classification,
            metadata: body.metadata,
            content: Content::Text(body.text),
            text_splitter_id: body.text_splitter_id,
            expire_older_versions: body.expire_older_versions,
        }
    }
}

async fn submit(
    state: &AppState,
    auth: &Auth,
    pipeline_id: Uuid,
    body: CreateDocumentBody,
) -> poem::Result<Created<DocumentVersion>> {
    Ok(Created(
        service::submit(state, &auth.0, pipeline_id, body.into())
            .await?
            .into(),
    ))
}

#[derive(Default)]
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
    ) -> poem::Result<Created<DocumentVersion>> {
        let state = state(req)?;
        state.metrics.document_queue_added.inc();
        submit(state, &auth, pipeline_id.0, body.0).await
    }

    /// Submit document versions in one request (extension)
    ///
    /// An extension of the interface: 1 to 1,000 documents, each as in a single submission,
    /// checked item by item before anything is stored (an invalid item is 400
    /// `Invalid parameter` with `details.index` and the item's own `status`, `message` and
    /// `details`; nothing is stored), then stored in one transaction and queued. Answers the
    /// versions in the order of the items. Permissions, license checks and metrics are those
    /// of single submissions.
    #[oai(path = "/pipelines/:pipeline_id/documents/batch", method = "post")]
    async fn create_batch(
        &self,
        auth: Auth,
        pipeline_id: extract::Path,
        req: &Request,
        body: JsonBody<CreateDocumentsBody>,
    ) -> poem::Result<Created<Vec<DocumentVersion>>> {
        let state = state(req)?;
        let documents = body.0.documents;
        state
            .metrics
            .document_queue_added
            .inc_by(documents.len() as f64);
        let inputs = documents.into_iter().map(NewDocument::from).collect();
        Ok(Created(schemas::all(
            service::submit_batch(state, &auth.0, pipeline_id.0, inputs).await?,
        )))
    }

    /// Submit a file as a document version (extension)
    ///
    /// An extension of the interface: a `multipart/form-data` body with the parts `file`
    /// (required), `classification` (required), `external_identifier` (default: the file's
    /// name), `metadata` (a JSON object as text) and `expire_older_versions` (`true` or
    /// `false`, default `true`). PDF (its text layer), DOCX, ODT, HTML, Markdown and plain text,
    /// detected from the content first and the name second; the worker extracts the text
    /// before splitting. Checks, answer and metrics are those of a JSON submission. A body over
    /// `TROVE_MAX_FILE_BYTES` is 413, an unreadable body 400 `Invalid parameter`, a type Trove
    /// cannot read 415 `Unsupported file type: <type>`. A file whose text cannot be extracted
    /// makes its version `failed` with a `status_reason`.
    #[oai(path = "/pipelines/:pipeline_id/files", method = "post")]
    async fn create_file(
        &self,
        auth: Auth,
        pipeline_id: extract::Path,
        req: &Request,
        body: FileUpload,
    ) -> poem::Result<Created<DocumentVersion>> {
        let state = state(req)?;
        state.metrics.document_queue_added.inc();
        Ok(Created(
            service::submit(state, &auth.0, pipeline_id.0, body.0)
                .await?
                .into(),
        ))
    }

    /// Submit a document version (pipeline in the body)
    #[oai(path = "/documents", method = "post")]
    async fn create_flat(
        &self,
        auth: Auth,
        req: &Request,
        body: JsonBody<CreateDocumentWithPipelineBody>,
    ) -> poem::Result<Created<DocumentVersion>> {
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
    ) -> poem::Result<Json<List<DocumentVersion>>> {
        let state = state(req)?;
        let query = req.uri().query();
        let request = parse_list_query(&service::DOCUMENT_LIST, query, &["metadata"])
            .map_err(ApiError::from)?;
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
        let envelope = service::list(state, &auth.0, pipeline_id.0, request, metadata).await?;
        Ok(Json(envelope.into()))
    }

    /// Read a document
    ///
    /// `version` selects one version (expired or not); `as_of` reads the document as it was
    /// at that time; neither gives the current versions. Newest first. A `failed` version
    /// whose reason is known (a file whose text could not be extracted) carries it as
    /// `status_reason` (an extension); no other version has the field.
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
    ) -> poem::Result<Json<Vec<DocumentVersionRead>>> {
        let state = state(req)?;
        let query = req.uri().query();
        let version = integer_param(query, "version")?;
        let as_of = integer_param(query, "as_of")?;
        Ok(Json(schemas::all(
            service::read_with_reasons(
                state,
                &auth.0,
                pipeline_id.0,
                document_id.0,
                version,
                as_of,
            )
            .await?,
        )))
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
    ) -> poem::Result<Json<Vec<DocumentVersion>>> {
        let state = state(req)?;
        Ok(Json(schemas::all(
            service::versions(state, &auth.0, pipeline_id.0, document_id.0).await?,
        )))
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
    ) -> poem::Result<OkOrNoContent<Vec<DocumentVersion>>> {
        let state = state(req)?;
        let expire = bool_param(req.uri().query(), "expire")?;
        match service::remove(state, &auth.0, pipeline_id.0, document_id.0, expire).await? {
            Some(expired) => Ok(OkOrNoContent::Ok(schemas::all(expired))),
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
    ) -> poem::Result<Json<List<Fragment>>> {
        let state = state(req)?;
        let query = req.uri().query();
        let version = integer_param(query, "version")?;
        let include_embedding = bool_param(query, "include_embedding")?;
        let request = parse_list_query(
            &service::FRAGMENT_LIST,
            query,
            &["version", "include_embedding"],
        )
        .map_err(ApiError::from)?;
        let envelope = service::fragments(
            state,
            &auth.0,
            pipeline_id.0,
            document_id.0,
            version,
            include_embedding,
            &request,
        )
        .await?;
        Ok(Json(envelope.into()))
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
    ) -> poem::Result<Json<Fragments>> {
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
        Ok(Json(Described::new(
            service::fragments_by_id(state, &auth.0, pipeline_id.0, ids, include_embedding).await?,
        )))
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
    ) -> poem::Result<Json<Fragments>> {
        let state = state(req)?;
        let include_embedding = bool_param(req.uri().query(), "include_embedding")?;
        Ok(Json(Described::new(
            service::fragments_by_id(state, &auth.0, pipeline_id.0, body.0.ids, include_embedding)
                .await?,
        )))
    }
}
