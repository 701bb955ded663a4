//! The one place where service errors become the interface's statuses and bodies.
//!
//! Every error a handler can return is an [`ApiError`]; [`ApiError::status`] and
//! [`ApiError::body`] are exhaustive matches, so a new variant forces a decision about its
//! status and message. Messages are the interface's own, reproduced exactly.

use http::StatusCode;
use serde_json::{Value, json};
use uuid::Uuid;

use crate::access::{AccessLevel, ObjectType};

/// An error of the service, as the interface names it.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// 400 `Invalid parameter`, `details.error` = the reason.
    #[error("invalid parameter: {0}")]
    InvalidParameter(String),
    /// 400 `Invalid object type`.
    #[error("invalid object type")]
    InvalidObjectType,
    /// 400 `Pagination error`.
    #[error("pagination error")]
    Pagination,
    /// 400 `Invalid order_by parameter`, `details` = rejected values as sent.
    #[error("invalid order_by parameter")]
    InvalidOrderBy(Vec<String>),
    /// 400 `Invalid interval format: <value>. ...`.
    #[error("invalid interval format")]
    InvalidInterval(String),
    /// 400 `Schema error`.
    #[error("schema error")]
    Schema,
    /// 400 `Invalid metadata`, `details` maps field to reason.
    #[error("invalid metadata")]
    InvalidMetadata(serde_json::Map<String, Value>),
    /// 400 `Classification mismatch`.
    #[error("classification mismatch")]
    ClassificationMismatch,
    /// 400 `Invalid version`.
    #[error("invalid version")]
    InvalidVersion,
    /// 400 `Invalid search type or parameters`.
    #[error("invalid search type")]
    InvalidSearchType,
    /// 400 with a message naming a header that holds no UUID (`Invalid LLM ID`,
    /// `Invalid pipeline ID`, the relay's `Invalid LLM ID: <reason>`).
    #[error("invalid header id: {0}")]
    InvalidHeaderId(String),
    /// 400 `Missing required headers: …` (the relay's all-or-none headers).
    #[error("missing required headers")]
    MissingRelayHeaders,
    /// 400 `Invalid prompt type` (an agent's prompt lacks a system or user message, or does
    /// not end with a user message).
    #[error("invalid prompt type")]
    InvalidPromptType,
    /// 400 `Invalid prompt` (bad placeholder name, unknown template name, bad target).
    #[error("invalid prompt")]
    InvalidPrompt,
    /// 400 `Invalid placeholder of type <type>` (retrieval parameters out of range).
    #[error("invalid placeholder of type {0}")]
    InvalidPlaceholder(&'static str),
    /// 400 `Invalid parameter` for one item of a batch: `details.index` and the item's own
    /// error (`status`, `message`, and its `details` when it has some).
    #[error("invalid batch item {index}: {error}")]
    BatchItem { index: usize, error: Box<ApiError> },
    /// 400 `Vector embedding not found`, `details.embedding_id`.
    #[error("vector embedding not found")]
    VectorEmbeddingNotFound(Option<Uuid>),

    /// 401 `Unauthorized: No API Key specified.`
    #[error("no api key")]
    NoApiKey,
    /// 401 `Unauthorized: No API Secret Key specified.`
    #[error("no api secret")]
    NoApiSecret,
    /// 401 `Invalid key ID`.
    #[error("invalid key id")]
    InvalidKeyId,
    /// 401 `Invalid API Key or Secret`.
    #[error("invalid api key or secret")]
    InvalidKeyOrSecret,

    /// 403 `Unauthorized: access level <level> required for <type> with id <id>`.
    #[error("access denied")]
    AccessDenied {
        level: AccessLevel,
        object_type: ObjectType,
        id: Option<Uuid>,
    },
    /// 403 `Invalid license: Expired`.
    #[error("license expired")]
    LicenseExpired,
    /// 403 `Invalid license: Exceeded("<types>")`.
    #[error("license exceeded")]
    LicenseExceeded(Vec<ObjectType>),
    /// 403 `License limits exceeded for <display name>`.
    #[error("license limit")]
    LicenseLimit(ObjectType),

    /// 404 with a short message (`ApiKey not found`, ...) and `details.id` when known.
    #[error("not found: {message}")]
    NotFound {
        message: &'static str,
        id: Option<Uuid>,
    },
    /// 404 `Pipeline not found`, `details.id` when known: the pipeline is missing or the key
    /// lacks the permission the operation needs on it.
    #[error("pipeline not found")]
    PipelineNotFound(Option<Uuid>),
    /// 404 `<Type> with id <id> not found` (permission entries, traces).
    #[error("object not found")]
    ObjectNotFound { type_name: &'static str, id: Uuid },

    /// 409 `Conflict unique error`.
    #[error("conflict unique")]
    ConflictUnique,
    /// 409 `Conflict related error`.
    #[error("conflict related")]
    ConflictRelated,
    /// 409 `Conflict related error` with `details` (an association still being backfilled:
    /// its progress).
    #[error("conflict related")]
    ConflictRelatedWith(Value),

    /// 500 `Internal error`, `details.error` = the reason.
    #[error("internal error: {0}")]
    Internal(String),
    /// 500 with the database's own message.
    #[error("database error: {0}")]
    Database(String),
    /// 500 with the database's own message, from a statement that a read replica answers
    /// once it has replayed further (a table it has not got yet) or that its recovery
    /// cancelled: a search runs it again on the primary.
    #[error("database error: {0}")]
    DatabaseBehind(String),
    /// 500 `Database connection error: <reason>`.
    #[error("database connection error: {0}")]
    DatabaseConnection(String),
    /// 500 `NATS error`.
    #[error("nats error: {0}")]
    Nats(String),
    /// 501 with the given message (`Hybrid placeholder is not implemented yet`, …).
    #[error("not implemented: {0}")]
    NotImplemented(&'static str),
    /// 501 `Full text search is not enabled for this pipeline`, `details.params`.
    #[error("full text search disabled")]
    FullTextDisabled(Value),
    /// 500 `Decryption error`.
    #[error("decryption error")]
    Decryption,
    /// 500 `gRPC error: <status>` reported as `Internal error`.
    #[error("grpc error: {0}")]
    Grpc(String),
    /// 500 `Failed to get stream info: <reason>` (statistics).
    #[error("stream info: {0}")]
    StreamInfo(String),
    /// 500 `Stream error: <reason>`: a model server failed before answering (or, with
    /// `stream` false, at any point). The reason never holds a secret.
    #[error("stream error: {0}")]
    Stream(String),
    /// 500 with the HTTP client's message: the relay could not reach the model server.
    #[error("model server unreachable: {0}")]
    ModelServerUnreachable(String),

    /// 415 `Unsupported file type: <detected type>`, `details.supported` = the media types
    /// Trove reads (file submissions, an extension).
    #[error("unsupported file type {0}")]
    UnsupportedFileType(String),

    /// A plain-text response of §Errors "Responses without the JSON body".
    #[error("{message}")]
    Plain { status: StatusCode, message: String },
}

impl ApiError {
    /// 400 plain text `Failed to deserialize query string: <reason>`.
    pub fn query_string(reason: impl std::fmt::Display) -> Self {
        Self::Plain {
            status: StatusCode::BAD_REQUEST,
            message: format!("Failed to deserialize query string: {reason}"),
        }
    }

    /// `ApiKey not found` with the id.
    pub fn api_key_not_found(id: Uuid) -> Self {
        Self::NotFound {
            message: "ApiKey not found",
            id: Some(id),
        }
    }

    /// Status of the response.
    pub fn status(&self) -> StatusCode {
        match self {
            Self::InvalidParameter(_)
            | Self::InvalidObjectType
            | Self::Pagination
            | Self::InvalidOrderBy(_)
            | Self::InvalidInterval(_)
            | Self::Schema
            | Self::InvalidMetadata(_)
            | Self::ClassificationMismatch
            | Self::InvalidVersion
            | Self::InvalidSearchType
            | Self::InvalidHeaderId(_)
            | Self::MissingRelayHeaders
            | Self::InvalidPromptType
            | Self::InvalidPrompt
            | Self::InvalidPlaceholder(_)
            | Self::BatchItem { .. }
            | Self::VectorEmbeddingNotFound(_) => StatusCode::BAD_REQUEST,
            Self::NoApiKey | Self::NoApiSecret | Self::InvalidKeyId | Self::InvalidKeyOrSecret => {
                StatusCode::UNAUTHORIZED
            }
            Self::AccessDenied { .. }
            | Self::LicenseExpired
            | Self::LicenseExceeded(_)
            | Self::LicenseLimit(_) => StatusCode::FORBIDDEN,
            Self::NotFound { .. } | Self::PipelineNotFound(_) | Self::ObjectNotFound { .. } => {
                StatusCode::NOT_FOUND
            }
            Self::ConflictUnique | Self::ConflictRelated | Self::ConflictRelatedWith(_) => {
                StatusCode::CONFLICT
            }
            Self::NotImplemented(_) | Self::FullTextDisabled(_) => StatusCode::NOT_IMPLEMENTED,
            Self::Internal(_)
            | Self::Database(_)
            | Self::DatabaseBehind(_)
            | Self::DatabaseConnection(_)
            | Self::Nats(_)
            | Self::Decryption
            | Self::Grpc(_)
            | Self::StreamInfo(_)
            | Self::Stream(_)
            | Self::ModelServerUnreachable(_) => StatusCode::INTERNAL_SERVER_ERROR,
            Self::UnsupportedFileType(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Self::Plain { status, .. } => *status,
        }
    }

    /// The message of the error body (or the text of a plain-text error), from the same
    /// table as the HTTP response; other transports (MCP) report it.
    pub fn message(&self) -> String {
        match self {
            Self::InvalidParameter(_) | Self::BatchItem { .. } => "Invalid parameter".to_owned(),
            Self::InvalidObjectType => "Invalid object type".to_owned(),
            Self::Pagination => "Pagination error".to_owned(),
            Self::InvalidOrderBy(_) => "Invalid order_by parameter".to_owned(),
            Self::InvalidInterval(value) => format!(
                "Invalid interval format: {value}. Must be a valid Prometheus duration (e.g., 15m, 1h, 24h)."
            ),
            Self::Schema => "Schema error".to_owned(),
            Self::InvalidMetadata(_) => "Invalid metadata".to_owned(),
            Self::ClassificationMismatch => "Classification mismatch".to_owned(),
            Self::InvalidVersion => "Invalid version".to_owned(),
            Self::InvalidSearchType => "Invalid search type or parameters".to_owned(),
            Self::MissingRelayHeaders => "Missing required headers: either all of X-Agent-Id, X-Pipeline-Id, and X-Pipeline-Classification must be provided, or none of them".to_owned(),
            Self::InvalidPromptType => "Invalid prompt type".to_owned(),
            Self::InvalidPrompt => "Invalid prompt".to_owned(),
            Self::InvalidPlaceholder(kind) => format!("Invalid placeholder of type {kind}"),
            Self::VectorEmbeddingNotFound(_) => "Vector embedding not found".to_owned(),
            Self::NoApiKey => "Unauthorized: No API Key specified.".to_owned(),
            Self::NoApiSecret => "Unauthorized: No API Secret Key specified.".to_owned(),
            Self::InvalidKeyId => "Invalid key ID".to_owned(),
            Self::InvalidKeyOrSecret => "Invalid API Key or Secret".to_owned(),
            Self::AccessDenied {
                level,
                object_type,
                id,
            } => {
                let id = match id {
                    Some(id) => format!("Some({id})"),
                    None => "None".to_owned(),
                };
                format!(
                    "Unauthorized: access level {level} required for {} with id {id}",
                    object_type.key()
                )
            }
            Self::LicenseExpired => "Invalid license: Expired".to_owned(),
            Self::LicenseExceeded(types) => {
                let keys: Vec<&str> = types.iter().map(|t| t.key()).collect();
                format!("Invalid license: Exceeded(\"{}\")", keys.join(", "))
            }
            Self::LicenseLimit(object_type) => {
                format!("License limits exceeded for {}", object_type.display_name())
            }
            Self::NotFound { message, .. } | Self::NotImplemented(message) => (*message).to_owned(),
            Self::PipelineNotFound(_) => "Pipeline not found".to_owned(),
            Self::ObjectNotFound { type_name, id } => format!("{type_name} with id {id} not found"),
            Self::ConflictUnique => "Conflict unique error".to_owned(),
            Self::ConflictRelated | Self::ConflictRelatedWith(_) => {
                "Conflict related error".to_owned()
            }
            Self::FullTextDisabled(_) => "Full text search is not enabled for this pipeline".to_owned(),
            Self::Internal(_) | Self::Grpc(_) => "Internal error".to_owned(),
            Self::InvalidHeaderId(message)
            | Self::Database(message)
            | Self::DatabaseBehind(message)
            | Self::ModelServerUnreachable(message)
            | Self::Plain { message, .. } => message.clone(),
            Self::DatabaseConnection(reason) => format!("Database connection error: {reason}"),
            Self::Nats(_) => "NATS error".to_owned(),
            Self::Decryption => "Decryption error".to_owned(),
            Self::StreamInfo(reason) => format!("Failed to get stream info: {reason}"),
            Self::Stream(reason) => format!("Stream error: {reason}"),
            Self::UnsupportedFileType(detected) => format!("Unsupported file type: {detected}"),
        }
    }

    /// The `details` of the JSON error body, for the errors that have them.
    fn details(&self) -> Option<Value> {
        match self {
            Self::InvalidParameter(reason) | Self::Internal(reason) => {
                Some(json!({ "error": reason }))
            }
            Self::InvalidOrderBy(values) => Some(json!(values)),
            Self::InvalidMetadata(details) => Some(Value::Object(details.clone())),
            Self::BatchItem { index, error } => {
                let mut item = serde_json::Map::new();
                item.insert("index".to_owned(), json!(index));
                item.insert("status".to_owned(), json!(error.status().as_u16()));
                item.insert("message".to_owned(), Value::String(error.message()));
                if let Some(details) = error.details() {
                    item.insert("details".to_owned(), details);
                }
                Some(Value::Object(item))
            }
            Self::VectorEmbeddingNotFound(id) => Some(json!({ "embedding_id": id })),
            Self::NotFound { id, .. } | Self::PipelineNotFound(id) => {
                id.map(|id| json!({ "id": id }))
            }
            Self::FullTextDisabled(params) => Some(json!({ "params": params })),
            Self::ConflictRelatedWith(details) => Some(details.clone()),
            Self::UnsupportedFileType(_) => Some(json!({ "supported": trove_extract::SUPPORTED })),
            Self::Grpc(status) => Some(json!({ "error": format!("gRPC error: {status}") })),
            Self::InvalidObjectType
            | Self::Pagination
            | Self::InvalidInterval(_)
            | Self::Schema
            | Self::ClassificationMismatch
            | Self::InvalidVersion
            | Self::InvalidSearchType
            | Self::InvalidHeaderId(_)
            | Self::MissingRelayHeaders
            | Self::InvalidPromptType
            | Self::InvalidPrompt
            | Self::InvalidPlaceholder(_)
            | Self::NoApiKey
            | Self::NoApiSecret
            | Self::InvalidKeyId
            | Self::InvalidKeyOrSecret
            | Self::AccessDenied { .. }
            | Self::LicenseExpired
            | Self::LicenseExceeded(_)
            | Self::LicenseLimit(_)
            | Self::ObjectNotFound { .. }
            | Self::ConflictUnique
            | Self::ConflictRelated
            | Self::NotImplemented(_)
            | Self::Database(_)
            | Self::DatabaseBehind(_)
            | Self::DatabaseConnection(_)
            | Self::Nats(_)
            | Self::Decryption
            | Self::StreamInfo(_)
            | Self::Stream(_)
            | Self::ModelServerUnreachable(_)
            | Self::Plain { .. } => None,
        }
    }

    /// How the failure of an MCP tool reaches the client (interface §MCP errors, "Operation
    /// failures"): a missing or unreadable pipeline is `-32002` with `data.id`; every other
    /// failure is `-32603` with a one-line description (the REST message, or its reason
    /// where the REST message is the generic `Internal error`).
    pub fn mcp_failure(&self) -> McpFailure {
        match self {
            Self::PipelineNotFound(id) => McpFailure {
                code: McpFailure::RESOURCE_NOT_FOUND,
                message: self.message(),
                data: Some(json!({ "id": id })),
            },
            Self::AccessDenied { level, .. } => {
                McpFailure::internal(format!("Authorization error: {level}"))
            }
            Self::Internal(reason) => McpFailure::internal(reason.clone()),
            Self::Grpc(status) => McpFailure::internal(format!("gRPC error: {status}")),
            Self::InvalidParameter(_)
            | Self::InvalidObjectType
            | Self::Pagination
            | Self::InvalidOrderBy(_)
            | Self::InvalidInterval(_)
            | Self::Schema
            | Self::InvalidMetadata(_)
            | Self::ClassificationMismatch
            | Self::InvalidVersion
            | Self::InvalidSearchType
            | Self::InvalidHeaderId(_)
            | Self::MissingRelayHeaders
            | Self::InvalidPromptType
            | Self::InvalidPrompt
            | Self::InvalidPlaceholder(_)
            | Self::BatchItem { .. }
            | Self::VectorEmbeddingNotFound(_)
            | Self::NoApiKey
            | Self::NoApiSecret
            | Self::InvalidKeyId
            | Self::InvalidKeyOrSecret
            | Self::LicenseExpired
            | Self::LicenseExceeded(_)
            | Self::LicenseLimit(_)
            | Self::NotFound { .. }
            | Self::ObjectNotFound { .. }
            | Self::ConflictUnique
            | Self::ConflictRelated
            | Self::ConflictRelatedWith(_)
            | Self::Database(_)
            | Self::DatabaseBehind(_)
            | Self::DatabaseConnection(_)
            | Self::Nats(_)
            | Self::NotImplemented(_)
            | Self::FullTextDisabled(_)
            | Self::Decryption
            | Self::StreamInfo(_)
            | Self::Stream(_)
            | Self::ModelServerUnreachable(_)
            | Self::UnsupportedFileType(_)
            | Self::Plain { .. } => McpFailure::internal(self.message()),
        }
    }

    /// The JSON body `{"error": {"message", "details"?}}`; `None` for the plain-text errors
    /// of §Errors "Responses without the JSON body" (their text is [`ApiError::message`]).
    pub fn json_body(&self) -> Option<Value> {
        if let Self::Plain { .. } = self {
            return None;
        }
        let mut error = serde_json::Map::new();
        error.insert("message".to_owned(), Value::String(self.message()));
        if let Some(details) = self.details() {
            error.insert("details".to_owned(), details);
        }
        Some(json!({ "error": Value::Object(error) }))
    }
}

/// A JSON-RPC error of an MCP tool call, as [`ApiError::mcp_failure`] maps it.
#[derive(Debug, Clone, PartialEq)]
pub struct McpFailure {
    pub code: i32,
    pub message: String,
    pub data: Option<Value>,
}

impl McpFailure {
    /// JSON-RPC `-32002`: a resource the call names does not exist.
    pub const RESOURCE_NOT_FOUND: i32 = -32002;
    /// JSON-RPC `-32603`.
    pub const INTERNAL_ERROR: i32 = -32603;

    fn internal(message: String) -> Self {
        Self {
            code: Self::INTERNAL_ERROR,
            message,
            data: None,
        }
    }
}

impl From<crate::access::UnknownObjectType> for ApiError {
    fn from(_: crate::access::UnknownObjectType) -> Self {
        Self::InvalidObjectType
    }
}

impl From<trove_query::list::ListQueryError> for ApiError {
    fn from(err: trove_query::list::ListQueryError) -> Self {
        use trove_query::list::ListQueryError as E;
        match err {
            E::QueryString(reason) => Self::query_string(reason),
            E::Pagination => Self::Pagination,
            E::InvalidOrderBy(values) => Self::InvalidOrderBy(values),
        }
    }
}

/// Result of service operations.
pub type ApiResult<T> = Result<T, ApiError>;
