//! The objects of the API's responses (and the taxonomy link of request bodies) as OpenAPI
//! schemas. The service returns its own rows; each handler converts them here, so storage
//! types never carry the web framework. Fields, their order and their serde formats are the
//! rows' own, so a response reads as the row would.

use chrono::{DateTime, Utc};
use poem_openapi::Object;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

use crate::service::text_splitters;
use crate::service::{api_keys, documents, embedding_models, llms, pipelines, taxonomies};
use crate::time::rfc3339;

/// Converts every row of a response list.
pub fn all<R, T: From<R>>(rows: Vec<R>) -> Vec<T> {
    rows.into_iter().map(T::from).collect()
}

/// An API key as the API shows it (never with its secret hash).
#[derive(Debug, Clone, Serialize, Object)]
#[oai(rename = "ApiKey")]
pub struct ApiKey {
    pub id: Uuid,
    pub name: String,
    #[oai(nullable)]
    pub description: Option<String>,
    pub active: bool,
    #[serde(with = "rfc3339::option")]
    #[oai(nullable)]
    pub expiration: Option<DateTime<Utc>>,
    #[serde(with = "rfc3339")]
    pub created_at: DateTime<Utc>,
    #[serde(with = "rfc3339")]
    pub updated_at: DateTime<Utc>,
}

impl From<api_keys::ApiKeyRow> for ApiKey {
    fn from(r: api_keys::ApiKeyRow) -> Self {
        Self {
            id: r.id,
            name: r.name,
            description: r.description,
            active: r.active,
            expiration: r.expiration,
            created_at: r.created_at,
            updated_at: r.updated_at,
        }
    }
}

/// An embedding provider as the API shows it.
#[derive(Debug, Clone, Serialize, Object)]
#[oai(rename = "EmbeddingProvider")]
pub struct EmbeddingProvider {
    pub id: Uuid,
    pub name: String,
    #[oai(nullable)]
    pub description: Option<String>,
    /// Parameter name → `{type, required, default, secret}`.
    pub parameters: Value,
    #[serde(with = "rfc3339")]
    pub created_at: DateTime<Utc>,
    #[serde(with = "rfc3339")]
    pub updated_at: DateTime<Utc>,
}

impl From<embedding_models::ProviderRow> for EmbeddingProvider {
    fn from(r: embedding_models::ProviderRow) -> Self {
        Self {
            id: r.id,
            name: r.name,
            description: r.description,
            parameters: r.parameters,
            created_at: r.created_at,
            updated_at: r.updated_at,
        }
    }
}

/// An embedding model as the API shows it (secret parameters are never part of it).
#[derive(Debug, Clone, Serialize, Object)]
#[oai(rename = "EmbeddingModel")]
pub struct EmbeddingModel {
    pub id: Uuid,
    pub name: String,
    #[oai(nullable)]
    pub description: Option<String>,
    /// Provider name.
    pub provider: String,
    pub model_name: String,
    /// Parameters without the secret ones.
    pub parameters: Value,
    pub dimensions: i32,
    #[serde(with = "rfc3339")]
    pub created_at: DateTime<Utc>,
    #[serde(with = "rfc3339")]
    pub updated_at: DateTime<Utc>,
}

/// Extension (model migration): an association of a pipeline with an embedding model.
#[derive(Debug, Clone, Serialize, Object)]
#[oai(rename = "VectorEmbedding")]
pub struct VectorEmbedding {
    /// The association's id: `params.embedding` of a search may name it.
    pub id: Uuid,
    pub embedding_model: EmbeddingModel,
    /// `backfilling` (vectors being computed from the stored fragments; searches naming it
    /// answer 409), `ready`, or `failed` (see `status_reason`).
    pub status: String,
    #[oai(nullable)]
    pub status_reason: Option<String>,
    /// Current fragments the backfill embeds (null: created with its pipeline, nothing to
    /// backfill).
    #[oai(nullable)]
    pub fragments_total: Option<i64>,
    /// Fragments it has embedded so far.
    #[oai(nullable)]
    pub fragments_done: Option<i64>,
    /// The pipeline's default: searches, agents and MCP without `params.embedding` use it.
    pub default: bool,
    #[serde(with = "rfc3339")]
    pub created_at: DateTime<Utc>,
}

impl From<crate::service::vector_embeddings::AssociationRow> for VectorEmbedding {
    fn from(a: crate::service::vector_embeddings::AssociationRow) -> Self {
        Self {
            id: a.id,
            embedding_model: a.embedding_model.into(),
            status: a.status,
            status_reason: a.status_reason,
            fragments_total: a.fragments_total,
            fragments_done: a.fragments_done,
            default: a.default,
            created_at: a.created_at,
        }
    }
}

impl From<embedding_models::ModelRow> for EmbeddingModel {
    fn from(r: embedding_models::ModelRow) -> Self {
        Self {
            id: r.id,
            name: r.name,
            description: r.description,
            provider: r.provider,
            model_name: r.model_name,
            parameters: r.parameters,
            dimensions: r.dimensions,
            created_at: r.created_at,
            updated_at: r.updated_at,
        }
    }
}

/// A text splitter provider as the API shows it.
#[derive(Debug, Clone, Serialize, Object)]
#[oai(rename = "TextSplitterProvider")]
pub struct TextSplitterProvider {
    pub id: Uuid,
    pub name: String,
    #[oai(nullable)]
    pub description: Option<String>,
    /// Parameter name → `{type, required, default, secret}`.
    pub parameters: Value,
    #[serde(with = "rfc3339")]
    pub created_at: DateTime<Utc>,
    #[serde(with = "rfc3339")]
    pub updated_at: DateTime<Utc>,
}

impl From<text_splitters::ProviderRow> for TextSplitterProvider {
    fn from(r: text_splitters::ProviderRow) -> Self {
        Self {
            id: r.id,
            name: r.name,
            description: r.description,
            parameters: r.parameters,
            created_at: r.created_at,
            updated_at: r.updated_at,
        }
    }
}

/// A text splitter as the API shows it.
#[derive(Debug, Clone, Serialize, Object)]
#[oai(rename = "TextSplitter")]
pub struct TextSplitter {
    pub id: Uuid,
    pub name: String,
    #[oai(nullable)]
    pub description: Option<String>,
    /// Provider name.
    pub provider: String,
    /// The provider's parameters, defaults filled.
    pub parameters: Value,
    #[serde(with = "rfc3339")]
    pub created_at: DateTime<Utc>,
    #[serde(with = "rfc3339")]
    pub updated_at: DateTime<Utc>,
}

impl From<text_splitters::SplitterRow> for TextSplitter {
    fn from(r: text_splitters::SplitterRow) -> Self {
        Self {
            id: r.id,
            name: r.name,
            description: r.description,
            provider: r.provider,
            parameters: r.parameters,
            created_at: r.created_at,
            updated_at: r.updated_at,
        }
    }
}

/// An LLM as the API shows it (`has_api_key`, never the key).
#[derive(Debug, Clone, Serialize, Object)]
#[oai(rename = "LLM")]
pub struct Llm {
    pub id: Uuid,
    pub name: String,
    #[oai(nullable)]
    pub description: Option<String>,
    /// `openai` or `ollama`.
    pub provider: String,
    /// Base URL of the model server, without a trailing `/`.
    pub endpoint: String,
    #[oai(nullable)]
    pub model: Option<String>,
    /// Passed through with every call (`model`, `messages` and `stream` excepted).
    pub parameters: Value,
    pub has_api_key: bool,
    #[serde(with = "rfc3339")]
    pub created_at: DateTime<Utc>,
    #[serde(with = "rfc3339")]
    pub updated_at: DateTime<Utc>,
}

impl From<llms::LlmRow> for Llm {
    fn from(r: llms::LlmRow) -> Self {
        Self {
            id: r.id,
            name: r.name,
            description: r.description,
            provider: r.provider,
            endpoint: r.endpoint,
            model: r.model,
            parameters: r.parameters,
            has_api_key: r.has_api_key,
            created_at: r.created_at,
            updated_at: r.updated_at,
        }
    }
}

/// A metadata index.
#[derive(Debug, Clone, Serialize, Object)]
#[oai(rename = "PipelineIndex")]
pub struct PipelineIndex {
    pub id: Uuid,
    pub pipeline_id: Uuid,
    pub field: String,
    #[serde(with = "rfc3339")]
    pub created_at: DateTime<Utc>,
}

impl From<pipelines::IndexRow> for PipelineIndex {
    fn from(r: pipelines::IndexRow) -> Self {
        Self {
            id: r.id,
            pipeline_id: r.pipeline_id,
            field: r.field,
            created_at: r.created_at,
        }
    }
}

/// One document version as the API shows it.
#[derive(Debug, Clone, Serialize, Object)]
#[oai(rename = "DocumentVersion")]
pub struct DocumentVersion {
    pub id: Uuid,
    pub pipeline_id: Uuid,
    pub external_identifier: String,
    pub classification: String,
    pub metadata: Value,
    pub status: String,
    /// Microseconds since the Unix epoch; equals `created_at`.
    pub version: i64,
    #[serde(with = "rfc3339")]
    pub created_at: DateTime<Utc>,
    #[serde(with = "rfc3339")]
    pub updated_at: DateTime<Utc>,
    #[serde(with = "rfc3339::option")]
    #[oai(nullable)]
    pub expired_at: Option<DateTime<Utc>>,
}

/// A document version as `GET /pipelines/{pipeline_id}/documents/{document_id}` shows it: with
/// `status_reason` (an extension of the interface).
#[derive(Debug, Clone, Serialize, Object)]
#[oai(rename = "DocumentVersionRead")]
pub struct DocumentVersionRead {
    #[serde(flatten)]
    #[oai(flatten)]
    pub version: DocumentVersion,
    /// Extension: why a `failed` version failed, when a reason is known (a file whose text
    /// could not be extracted); absent otherwise, so that every other version reads exactly as
    /// the interface shows it.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[oai(skip_serializing_if_is_none)]
    pub status_reason: Option<String>,
}

impl From<(documents::VersionRow, Option<String>)> for DocumentVersionRead {
    fn from((row, status_reason): (documents::VersionRow, Option<String>)) -> Self {
        Self {
            version: row.into(),
            status_reason,
        }
    }
}

impl From<documents::VersionRow> for DocumentVersion {
    fn from(r: documents::VersionRow) -> Self {
        Self {
            id: r.id,
            pipeline_id: r.pipeline_id,
            external_identifier: r.external_identifier,
            classification: r.classification,
            metadata: r.metadata,
            status: r.status.as_str().to_owned(),
            version: r.version,
            created_at: r.created_at,
            updated_at: r.updated_at,
            expired_at: r.expired_at,
        }
    }
}

/// A taxonomy as the API shows it.
#[derive(Debug, Clone, Serialize, Object)]
#[oai(rename = "Taxonomy")]
pub struct Taxonomy {
    pub id: Uuid,
    pub name: String,
    #[oai(nullable)]
    pub description: Option<String>,
    #[serde(with = "rfc3339")]
    pub created_at: DateTime<Utc>,
    #[serde(with = "rfc3339")]
    pub updated_at: DateTime<Utc>,
}

impl From<taxonomies::TaxonomyRow> for Taxonomy {
    fn from(r: taxonomies::TaxonomyRow) -> Self {
        Self {
            id: r.id,
            name: r.name,
            description: r.description,
            created_at: r.created_at,
            updated_at: r.updated_at,
        }
    }
}

/// A link as a request names it: parent field and value → child field and value.
#[derive(Debug, Clone, Deserialize, Object)]
#[oai(rename = "TaxonomyLink")]
pub struct Link {
    /// Metadata field of the parent (an identifier).
    pub parent_field: String,
    /// Value of the parent (non-empty).
    pub parent_value: String,
    /// Metadata field of the child (an identifier).
    pub child_field: String,
    /// Value of the child (non-empty).
    pub child_value: String,
}

impl From<Link> for taxonomies::Link {
    fn from(l: Link) -> Self {
        Self {
            parent_field: l.parent_field,
            parent_value: l.parent_value,
            child_field: l.child_field,
            child_value: l.child_value,
        }
    }
}

/// A stored entry as the API shows it (entry list, `added`).
#[derive(Debug, Clone, Serialize, Object)]
#[oai(rename = "TaxonomyEntry")]
pub struct TaxonomyEntry {
    pub id: Uuid,
    pub parent_field: String,
    pub parent_value: String,
    pub child_field: String,
    pub child_value: String,
    #[serde(with = "rfc3339")]
    pub created_at: DateTime<Utc>,
}

impl From<taxonomies::EntryRow> for TaxonomyEntry {
    fn from(r: taxonomies::EntryRow) -> Self {
        Self {
            id: r.id,
            parent_field: r.parent_field,
            parent_value: r.parent_value,
            child_field: r.child_field,
            child_value: r.child_value,
            created_at: r.created_at,
        }
    }
}

/// A link that was not added, with the taxonomy holding it.
#[derive(Debug, Clone, Serialize, Object)]
#[oai(rename = "SkippedTaxonomyEntry")]
pub struct SkippedEntry {
    pub parent_field: String,
    pub parent_value: String,
    pub child_field: String,
    pub child_value: String,
    /// The taxonomy holding the link (this one for a repeat or a duplicate in the request).
    pub taxonomy_id: Uuid,
}

impl From<taxonomies::SkippedEntry> for SkippedEntry {
    fn from(s: taxonomies::SkippedEntry) -> Self {
        Self {
            parent_field: s.parent_field,
            parent_value: s.parent_value,
            child_field: s.child_field,
            child_value: s.child_value,
            taxonomy_id: s.taxonomy_id,
        }
    }
}

/// Result of `POST /taxonomies/{taxonomy_id}/entries`, both lists in request order.
#[derive(Debug, Clone, Serialize, Object)]
#[oai(rename = "TaxonomyEntriesAdded")]
pub struct AddedEntries {
    /// Links stored by this request.
    pub added: Vec<TaxonomyEntry>,
    /// Links already stored (in this or another taxonomy), or repeated in the request.
    pub skipped: Vec<SkippedEntry>,
}

impl From<taxonomies::AddedEntries> for AddedEntries {
    fn from(a: taxonomies::AddedEntries) -> Self {
        Self {
            added: all(a.added),
            skipped: all(a.skipped),
        }
    }
}
