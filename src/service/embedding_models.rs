//! Embedding providers (read-only) and embedding models: creation with a probe, changes,
//! deletion, queries, and the embedder of a stored model for the other services.

use super::Change;
use serde::Deserialize;
use serde_json::{Map, Value};
use trove_query::list::{FieldKind, FieldSpec, FilterOps, ListRequest, ListSpec};
use uuid::Uuid;

use super::{Envelope, validate_name};
use crate::access::{AccessLevel, ObjectType};
use crate::auth::AuthContext;
use crate::crypto::at_rest::Cipher;
use crate::error::{ApiError, ApiResult};
use crate::providers::embedding::{EmbedFailure, Embedder, ModelSpec, ProviderKind, model_spec};
use crate::state::AppState;
use crate::store::Pool;
use crate::store::embedding::{self as store, NewModel as StoredNew, StoredModel};
use crate::store::listing;

pub use crate::store::embedding::{ModelRow, ProviderRow};

/// Largest embedding size (pgvector HNSW limit, addendum §15 item 22).
pub const MAX_DIMENSIONS: i64 = 2000;

/// The text embedded at create and at every parameter change.
pub const PROBE_TEXT: &str = "Trove";

/// Fields of the embedding provider list (addendum §4): every filter is echoed in
/// `query_info`, set or not (interface list rule 9).
pub const PROVIDER_LIST: ListSpec = ListSpec {
    table: "embedding_providers",
    fields: &[
        FieldSpec::ID,
        FieldSpec::NAME,
        FieldSpec::CREATED_AT,
        FieldSpec::UPDATED_AT,
    ],
    echo_unset_filters: true,
    default_order: &["id"],
};

/// Fields of the embedding model list (addendum §4).
pub const MODEL_LIST: ListSpec = ListSpec {
    table: "embedding_models",
    fields: &[
        FieldSpec::ID,
        FieldSpec::NAME,
        FieldSpec::DESCRIPTION,
        FieldSpec::new("provider", FieldKind::Text, false, FilterOps::EQ, true),
        FieldSpec::new(
            "model_name",
            FieldKind::Text,
            false,
            FilterOps::EQ_CONTAINS,
            true,
        ),
        FieldSpec::CREATED_AT,
        FieldSpec::UPDATED_AT,
    ],
    echo_unset_filters: false,
    default_order: &["id"],
};

/// Input of a model creation, already deserialized.
pub struct NewModel {
    pub name: String,
    pub description: Option<String>,
    pub provider: String,
    pub model_name: String,
    pub parameters: Map<String, Value>,
    pub dimensions: Option<i64>,
}

/// Input of a model change.
pub struct ModelChange {
    pub name: Change<String>,
    pub description: Change<String>,
    /// Replaces every parameter (secrets must be sent again).
    pub parameters: Change<Map<String, Value>>,
}

/// `Embedding model not found` with the id.
pub fn model_not_found(id: Uuid) -> ApiError {
    ApiError::NotFound {
        message: "Embedding model not found",
        id: Some(id),
    }
}

/// `Embedding provider not found` with the id.
pub fn provider_not_found(id: Uuid) -> ApiError {
    ApiError::NotFound {
        message: "Embedding provider not found",
        id: Some(id),
    }
}

// ---- Providers ---------------------------------------------------------------------------

/// One page of the embedding providers the caller can read: the list envelope.
pub async fn list_providers(
    pool: &Pool,
    auth: &AuthContext,
    request: &ListRequest,
) -> ApiResult<Envelope> {
    let base = store::providers_list_base(auth.readable_ids(ObjectType::EmbeddingProviders));
    listing::list::<ProviderRow>(pool, &PROVIDER_LIST, request, base).await
}

/// Reads a provider the caller can read; missing or unreadable are both not found.
pub async fn get_provider(pool: &Pool, auth: &AuthContext, id: Uuid) -> ApiResult<ProviderRow> {
    if !auth.can_read(ObjectType::EmbeddingProviders, id) {
        return Err(provider_not_found(id));
    }
    store::provider(pool, id)
        .await?
        .ok_or_else(|| provider_not_found(id))
}

// ---- Parameters --------------------------------------------------------------------------

/// `parameters` of an `openai` model (field order makes serde's `expected one of` list).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct OpenAiParameters {
    #[expect(dead_code, reason = "checked for presence and type only")]
    base_url: String,
    #[serde(default)]
    api_key: Option<String>,
    #[serde(default)]
    dimensions: Option<i64>,
}

/// `parameters` of a `local` model: none.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LocalParameters {}

/// `parameters` of a `hash` model.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct HashParameters {
    #[serde(default)]
    dimensions: Option<i64>,
}

fn invalid(reason: impl Into<String>) -> ApiError {
    ApiError::InvalidParameter(reason.into())
}

/// `Unsupported embedding size <n>: at most 2000` for sizes outside 1..=2000.
fn check_size(size: i64) -> ApiResult<()> {
    if (1..=MAX_DIMENSIONS).contains(&size) {
        Ok(())
    } else {
        Err(invalid(format!(
            "Unsupported embedding size {size}: at most {MAX_DIMENSIONS}"
        )))
    }
}

/// Checks that `parameters` are exactly the provider's (serde's messages for undefined and
/// missing ones), then the provider's own rules and the model name.
fn validate_parameters(
    provider: ProviderKind,
    model_name: &str,
    parameters: &Map<String, Value>,
) -> ApiResult<()> {
    let value = Value::Object(parameters.clone());
    let serde_failure = |e: serde_json::Error| invalid(e.to_string());
    match provider {
        ProviderKind::OpenAi => {
            let p: OpenAiParameters = serde_json::from_value(value).map_err(serde_failure)?;
            if p.api_key.as_deref().is_none_or(str::is_empty) {
                return Err(invalid("API key is required for OpenAI provider"));
            }
            if let Some(size) = p.dimensions {
                check_size(size)?;
            }
        }
        ProviderKind::Local => {
            let _: LocalParameters = serde_json::from_value(value).map_err(serde_failure)?;
            if !is_fastembed_model(model_name) {
                return Err(invalid(format!(
                    "Unknown FastEmbed embedding model: {model_name}"
                )));
            }
        }
        ProviderKind::Hash => {
            let p: HashParameters = serde_json::from_value(value).map_err(serde_failure)?;
            if let Some(size) = p.dimensions {
                check_size(size)?;
            }
        }
    }
    Ok(())
}

/// Whether `name` is a FastEmbed text-embedding model, with or without its organisation
/// prefix, case-insensitively (addendum §9.3).
pub fn is_fastembed_model(name: &str) -> bool {
    trove_embed::canonical_model_name(name).is_some()
}

/// Splits parameters into the stored plain ones and the encrypted JSON of the secret ones.
fn split_secrets(
    cipher: &Cipher,
    provider: &ProviderRow,
    parameters: Map<String, Value>,
) -> (Value, Option<Vec<u8>>) {
    let (secret, plain): (Map<String, Value>, Map<String, Value>) = parameters
        .into_iter()
        .partition(|(name, _)| provider.is_secret(name));
    let encrypted =
        (!secret.is_empty()).then(|| cipher.encrypt(Value::Object(secret).to_string().as_bytes()));
    (Value::Object(plain), encrypted)
}

/// Every parameter of a stored model, secrets decrypted (500 `Decryption error` when the
/// application secret changed).
fn provider_kind(name: &str) -> ApiResult<ProviderKind> {
    ProviderKind::parse(name).ok_or_else(|| invalid(format!("Unknown provider type: {name}")))
}

/// The ready embedder of a stored model (`Internal error` when it cannot be built).
pub async fn embedder(state: &AppState, stored: &StoredModel) -> ApiResult<Embedder> {
    let spec = model_spec(&state.cipher, stored)?;
    state
        .embedders
        .embedder(&spec)
        .await
        .map_err(|e| ApiError::Internal(e.to_string()))
}

/// Embeds texts with a stored model: one vector per text, in order. Failures are
/// `Internal error` with the failure's text in `details.error`.
pub async fn embed_texts(
    state: &AppState,
    stored: &StoredModel,
    texts: &[String],
) -> ApiResult<Vec<Vec<f32>>> {
    let embedder = embedder(state, stored).await?;
    let vectors = embedder
        .embed(texts)
        .await
        .map_err(|e| ApiError::Internal(e.to_string()))?;
    if vectors.len() != texts.len() {
        return Err(ApiError::Internal(EmbedFailure::Empty.to_string()));
    }
    Ok(vectors)
}

/// `Failed loading embedding model: <reason>` for a load or probe failure.
fn load_failure(failure: EmbedFailure) -> ApiError {
    let reason = match failure {
        EmbedFailure::Load(reason)
        | EmbedFailure::Compute(reason)
        | EmbedFailure::Refused(reason) => reason,
        EmbedFailure::Empty | EmbedFailure::Grpc(_) => failure.to_string(),
    };
    invalid(format!("Failed loading embedding model: {reason}"))
}

/// Builds the embedder of a model being created or changed and embeds the probe text;
/// returns the embedding size.
async fn probe(state: &AppState, spec: &ModelSpec) -> ApiResult<i64> {
    let embedder = state.embedders.embedder(spec).await.map_err(load_failure)?;
    let vectors = embedder
        .embed(&[PROBE_TEXT.to_owned()])
        .await
        .map_err(load_failure)?;
    let size = vectors
        .first()
        .map(Vec::len)
        .filter(|n| *n > 0)
        .ok_or_else(|| load_failure(EmbedFailure::Empty))?;
    Ok(i64::try_from(size).unwrap_or(i64::MAX))
}

fn size_mismatch(expected: i64, got: i64) -> ApiError {
    invalid(format!(
        "Failed to create embedding model: expected embedding size {expected}, got {got}"
    ))
}

// ---- Models ------------------------------------------------------------------------------

/// One page of the embedding models the caller can read: the list envelope.
pub async fn list_models(
    pool: &Pool,
    auth: &AuthContext,
    request: &ListRequest,
) -> ApiResult<Envelope> {
    let base = store::models_list_base(auth.readable_ids(ObjectType::EmbeddingModels));
    listing::list::<ModelRow>(pool, &MODEL_LIST, request, base).await
}

/// Reads a model the caller can read (with its encrypted secrets); missing or unreadable are
/// both `Embedding model not found`.
pub async fn get_stored_readable(
    pool: &Pool,
    auth: &AuthContext,
    id: Uuid,
) -> ApiResult<StoredModel> {
    if !auth.can_read(ObjectType::EmbeddingModels, id) {
        return Err(model_not_found(id));
    }
    store::model(pool, id)
        .await?
        .ok_or_else(|| model_not_found(id))
}

/// Reads a model the caller can read, as the API shows it.
pub async fn get_readable(pool: &Pool, auth: &AuthContext, id: Uuid) -> ApiResult<ModelRow> {
    Ok(get_stored_readable(pool, auth, id).await?.row)
}

/// Creates a model after embedding the probe text with it.
pub async fn create(state: &AppState, auth: &AuthContext, input: NewModel) -> ApiResult<ModelRow> {
    let pool = &state.pool;
    auth.require_type(ObjectType::EmbeddingModels, AccessLevel::WRITE)?;
    // A provider the key cannot write is not found; a name no provider has is a parameter
    // error, reported with the other validation below.
    let provider = store::provider_by_name(pool, &input.provider).await?;
    if let Some(provider) = &provider
        && !auth
            .object_level(ObjectType::EmbeddingProviders, provider.id)
            .contains(AccessLevel::WRITE)
    {
        return Err(ApiError::NotFound {
            message: "Embedding Provider not found",
            id: None,
        });
    }
    crate::auth::license::check_license(
        &state.config.license,
        pool,
        Some(ObjectType::EmbeddingModels),
    )
    .await?;

    validate_name(&input.name)?;
    let kind = provider_kind(&input.provider)?;
    let provider =
        provider.ok_or_else(|| invalid(format!("Unknown provider type: {}", input.provider)))?;
    validate_parameters(kind, &input.model_name, &input.parameters)?;
    if let Some(size) = input.dimensions {
        check_size(size)?;
    }

    let spec = ModelSpec {
        provider: kind,
        model_name: input.model_name.clone(),
        parameters: Value::Object(input.parameters.clone()),
        dimensions: None,
    };
    let size = probe(state, &spec).await?;
    if let Some(expected) = input.dimensions
        && expected != size
    {
        return Err(size_mismatch(expected, size));
    }
    check_size(size)?;
    let dimensions = i32::try_from(size).map_err(|_| size_mismatch(size, size))?;

    let (parameters, secret_parameters) = split_secrets(&state.cipher, &provider, input.parameters);
    Ok(store::insert_model(
        pool,
        StoredNew {
            id: Uuid::new_v4(),
            name: &input.name,
            description: input.description.as_deref(),
            provider: &provider.name,
            model_name: &input.model_name,
            parameters: &parameters,
            secret_parameters: secret_parameters.as_deref(),
            dimensions,
        },
    )
    .await?)
}

/// Changes a model's name, description or parameters (re-probed; the size cannot change).
pub async fn update(
    state: &AppState,
    auth: &AuthContext,
    id: Uuid,
    change: ModelChange,
) -> ApiResult<ModelRow> {
    let pool = &state.pool;
    let current = get_stored_readable(pool, auth, id).await?;
    auth.require_object(ObjectType::EmbeddingModels, id, AccessLevel::WRITE)?;
    crate::auth::license::check_license(&state.config.license, pool, None).await?;

    let name = change.name.required(current.row.name.clone());
    validate_name(&name)?;
    let description = change.description.nullable(current.row.description.clone());
    let (parameters, secret_parameters) = match change.parameters {
        Change::Value(parameters) => {
            let kind = provider_kind(&current.row.provider)?;
            validate_parameters(kind, &current.row.model_name, &parameters)?;
            let spec = ModelSpec {
                provider: kind,
                model_name: current.row.model_name.clone(),
                parameters: Value::Object(parameters.clone()),
                dimensions: None,
            };
            let size = probe(state, &spec).await?;
            let stored = i64::from(current.row.dimensions);
            if size != stored {
                return Err(size_mismatch(stored, size));
            }
            let provider = store::provider_by_name(pool, &current.row.provider)
                .await?
                .ok_or_else(|| {
                    invalid(format!("Unknown provider type: {}", current.row.provider))
                })?;
            split_secrets(&state.cipher, &provider, parameters)
        }
        Change::Null | Change::Omitted => (
            current.row.parameters.clone(),
            current.secret_parameters.clone(),
        ),
    };
    store::update_model(
        pool,
        id,
        &name,
        description.as_deref(),
        &parameters,
        secret_parameters.as_deref(),
    )
    .await?
    .ok_or_else(|| model_not_found(id))
}

/// Deletes a model and the permission entries on it (409 while a pipeline uses it).
pub async fn delete(pool: &Pool, auth: &AuthContext, id: Uuid) -> ApiResult<()> {
    get_stored_readable(pool, auth, id).await?;
    auth.require_object(ObjectType::EmbeddingModels, id, AccessLevel::WRITE)?;
    if !store::delete_model(pool, id).await? {
        return Err(model_not_found(id));
    }
    Ok(())
}

/// Embeds one text with a model the caller can read and execute.
pub async fn query(
    state: &AppState,
    auth: &AuthContext,
    id: Uuid,
    text: String,
) -> ApiResult<Vec<f32>> {
    let stored = get_stored_readable(&state.pool, auth, id).await?;
    auth.require_object(ObjectType::EmbeddingModels, id, AccessLevel::EXECUTE)?;
    let mut vectors = embed_texts(state, &stored, &[text]).await?;
    vectors
        .pop()
        .filter(|v| !v.is_empty())
        .ok_or_else(|| ApiError::Internal(EmbedFailure::Empty.to_string()))
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "tests fail loudly")]
mod tests {
    use super::*;
    use serde_json::json;

    fn params(value: Value) -> Map<String, Value> {
        match value {
            Value::Object(map) => map,
            _ => Map::new(),
        }
    }

    fn reason(result: ApiResult<()>) -> String {
        match result {
            Err(ApiError::InvalidParameter(reason)) => reason,
            other => panic!("expected Invalid parameter, got {other:?}"),
        }
    }

    #[test]
    fn undefined_and_missing_parameters_use_serde_messages() {
        assert_eq!(
            reason(validate_parameters(
                ProviderKind::OpenAi,
                "m",
                &params(json!({"base_url": "http://x", "api_key": "k", "x": 1}))
            )),
            "unknown field `x`, expected one of `base_url`, `api_key`, `dimensions`"
        );
        assert_eq!(
            reason(validate_parameters(
                ProviderKind::Local,
                "all-MiniLM-L6-v2",
                &params(json!({"x": 1}))
            )),
            "unknown field `x`, there are no fields"
        );
        assert_eq!(
            reason(validate_parameters(
                ProviderKind::Hash,
                "h",
                &params(json!({"x": 1}))
            )),
            "unknown field `x`, expected `dimensions`"
        );
        assert_eq!(
            reason(validate_parameters(
                ProviderKind::OpenAi,
                "m",
                &params(json!({"api_key": "k"}))
            )),
            "missing field `base_url`"
        );
        assert_eq!(
            reason(validate_parameters(
                ProviderKind::OpenAi,
                "m",
                &params(json!({"base_url": "http://x"}))
            )),
            "API key is required for OpenAI provider"
        );
        assert_eq!(
            reason(validate_parameters(
                ProviderKind::Hash,
                "h",
                &params(json!({"dimensions": 2001}))
            )),
            "Unsupported embedding size 2001: at most 2000"
        );
    }

    #[test]
    fn fastembed_names_with_or_without_prefix() {
        assert!(is_fastembed_model("all-MiniLM-L6-v2"));
        assert!(is_fastembed_model("sentence-transformers/all-minilm-l6-v2"));
        assert!(is_fastembed_model("BGE-small-en-v1.5"));
        assert!(!is_fastembed_model("gpt-4"));
        assert!(!is_fastembed_model("other/all-MiniLM-L6-v2-x"));
    }

    #[test]
    fn secrets_are_split_and_recovered() {
        let cipher = Cipher::new(&[3; 32]);
        let provider = ProviderRow {
            id: Uuid::new_v4(),
            name: "openai".to_owned(),
            description: None,
            parameters: json!({
                "base_url": {"type": "string", "required": true, "default": null, "secret": false},
                "api_key": {"type": "string", "required": true, "default": null, "secret": true},
            }),
            created_at: chrono::Utc::now(),
            updated_at: chrono::Utc::now(),
        };
        let (plain, secret) = split_secrets(
            &cipher,
            &provider,
            params(json!({"base_url": "http://x", "api_key": "sk-1"})),
        );
        assert_eq!(plain, json!({"base_url": "http://x"}));
        let secret = secret.unwrap();
        assert!(!secret.windows(4).any(|w| w == b"sk-1"));
        let stored = StoredModel {
            row: ModelRow {
                id: Uuid::new_v4(),
                name: "n".to_owned(),
                description: None,
                provider: "openai".to_owned(),
                model_name: "m".to_owned(),
                parameters: plain,
                dimensions: 3,
                created_at: chrono::Utc::now(),
                updated_at: chrono::Utc::now(),
            },
            secret_parameters: Some(secret),
        };
        let spec = model_spec(&cipher, &stored).unwrap();
        assert_eq!(
            spec.parameters,
            json!({"base_url": "http://x", "api_key": "sk-1"})
        );
        assert!(matches!(
            model_spec(&Cipher::new(&[4; 32]), &stored),
            Err(ApiError::Decryption)
        ));
    }
}
