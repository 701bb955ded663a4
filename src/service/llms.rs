//! LLMs: registration, changes, deletion, and the calls that use one (direct queries and the
//! chat-completions relay).

use super::Change;
use bytes::Bytes;
use futures_util::StreamExt;
use futures_util::stream::BoxStream;
use serde_json::{Map, Value};
use trove_query::list::{FieldKind, FieldSpec, FilterOps, ListRequest, ListSpec};
use uuid::Uuid;

use super::validate_name;
use crate::access::{AccessLevel, ObjectType};
use crate::auth::AuthContext;
use crate::auth::license::check_license;
use crate::crypto::at_rest::Cipher;
use crate::error::{ApiError, ApiResult};
use crate::names::Named;
use crate::providers::llm::{
    ChatMessage, ChatStream, LlmProvider, LlmTarget, passthrough_parameters,
};
use crate::providers::rerank::{ModelServer, RerankProvider, RerankTarget};
use crate::state::AppState;
use crate::store::Pool;
use crate::store::listing;
pub use crate::store::listing::Envelope;
pub use crate::store::llms::LlmRow;
pub use crate::store::llms::StoredLlm;
use crate::store::llms::{self as store, LlmFields};

/// Fields of the LLM list (addendum §4: as text splitters, plus `model` and `endpoint`).
pub const LLM_LIST: ListSpec = ListSpec {
    table: "llms",
    fields: &[
        FieldSpec::ID,
        FieldSpec::NAME,
        FieldSpec::DESCRIPTION,
        FieldSpec::new("provider", FieldKind::Text, false, FilterOps::EQ, true),
        FieldSpec::new("model", FieldKind::Text, true, FilterOps::EQ, false),
        FieldSpec::new("endpoint", FieldKind::Text, false, FilterOps::EQ, false),
        FieldSpec::CREATED_AT,
        FieldSpec::UPDATED_AT,
    ],
    echo_unset_filters: false,
    default_order: &["id"],
};

/// `details.error` of an `openai` LLM used without a key.
const KEY_REQUIRED: &str = "API key is required for OpenAI provider";

/// Input of an LLM registration, already deserialized.
pub struct NewLlm {
    pub name: String,
    pub description: Option<String>,
    pub provider: ModelServer,
    pub endpoint: String,
    pub model: Option<String>,
    pub api_key: Option<String>,
    /// `None` (omitted or null) is `{}`.
    pub parameters: Option<Map<String, Value>>,
}

/// Input of an LLM change (`provider` is fixed).
pub struct LlmChange {
    pub name: Change<String>,
    pub description: Change<String>,
    pub endpoint: Change<String>,
    pub model: Change<String>,
    /// `null` removes the key.
    pub api_key: Change<String>,
    /// Replaces the parameters whole; `null` counts as omitted.
    pub parameters: Change<Map<String, Value>>,
}

/// `LLM not found` with the id.
pub fn not_found(id: Uuid) -> ApiError {
    ApiError::NotFound {
        message: "LLM not found",
        id: Some(id),
    }
}

fn invalid(reason: impl Into<String>) -> ApiError {
    ApiError::InvalidParameter(reason.into())
}

/// Checks an endpoint (an absolute `http`/`https` URL without query string or fragment) and
/// returns it without a trailing `/`; otherwise 400 `Invalid endpoint: <reason>`.
pub fn normalized_endpoint(endpoint: &str) -> ApiResult<String> {
    let url =
        reqwest::Url::parse(endpoint).map_err(|e| invalid(format!("Invalid endpoint: {e}")))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(invalid(format!(
            "Invalid endpoint: scheme must be http or https, got {}",
            url.scheme()
        )));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(invalid(
            "Invalid endpoint: must not have a query string or a fragment",
        ));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(invalid("Invalid endpoint: empty host"));
    }
    Ok(endpoint.trim_end_matches('/').to_owned())
}

/// Validates the fields every create and change writes, in the order of the checks: name,
/// endpoint, model (required for `ollama`).
fn validated(
    provider: ModelServer,
    name: &str,
    endpoint: &str,
    model: Option<&str>,
) -> ApiResult<String> {
    validate_name(name)?;
    let endpoint = normalized_endpoint(endpoint)?;
    let needs_model = match provider {
        ModelServer::Chat(LlmProvider::Ollama) => Some("Ollama"),
        ModelServer::Reranker(RerankProvider::Cohere) => Some("Cohere"),
        ModelServer::Chat(LlmProvider::OpenAi) | ModelServer::Reranker(RerankProvider::Tei) => None,
    };
    if let Some(provider) = needs_model
        && model.is_none_or(str::is_empty)
    {
        return Err(invalid(format!(
            "Model is required for {provider} provider"
        )));
    }
    Ok(endpoint)
}

/// The provider of a stored LLM.
fn provider_of(row: &LlmRow) -> ApiResult<ModelServer> {
    ModelServer::parse(&row.provider)
        .ok_or_else(|| ApiError::Internal(format!("unknown llm provider: {}", row.provider)))
}

/// Reads an LLM the caller can read; missing or unreadable are both `LLM not found`.
pub async fn get_readable(pool: &Pool, auth: &AuthContext, id: Uuid) -> ApiResult<LlmRow> {
    if !auth.can_read(ObjectType::Llms, id) {
        return Err(not_found(id));
    }
    store::get(pool, id).await?.ok_or_else(|| not_found(id))
}

/// One page of the LLMs the caller can read.
pub async fn list(pool: &Pool, auth: &AuthContext, request: &ListRequest) -> ApiResult<Envelope> {
    let base = store::list_base(auth.readable_ids(ObjectType::Llms));
    listing::list::<LlmRow>(pool, &LLM_LIST, request, base).await
}

/// Registers an LLM: W on the type (403), the license, then name, endpoint and model (400),
/// then uniqueness (409). The key is stored encrypted.
pub async fn create(state: &AppState, auth: &AuthContext, input: NewLlm) -> ApiResult<LlmRow> {
    let pool = &state.pool;
    auth.require_type(ObjectType::Llms, AccessLevel::WRITE)?;
    check_license(&state.config.license, pool, Some(ObjectType::Llms)).await?;
    let endpoint = validated(
        input.provider,
        &input.name,
        &input.endpoint,
        input.model.as_deref(),
    )?;
    let api_key = input
        .api_key
        .map(|key| state.cipher.encrypt(key.as_bytes()));
    let parameters = Value::Object(input.parameters.unwrap_or_default());
    let fields = LlmFields {
        name: &input.name,
        description: input.description.as_deref(),
        endpoint: &endpoint,
        model: input.model.as_deref(),
        parameters: &parameters,
        api_key: api_key.as_deref(),
    };
    Ok(store::insert(pool, Uuid::new_v4(), input.provider.name(), &fields).await?)
}

/// Changes an LLM; the merged object is validated as at create. An invalid change leaves it
/// unchanged.
pub async fn update(
    state: &AppState,
    auth: &AuthContext,
    id: Uuid,
    change: LlmChange,
) -> ApiResult<LlmRow> {
    let pool = &state.pool;
    if !auth.can_read(ObjectType::Llms, id) {
        return Err(not_found(id));
    }
    let current = store::get_stored(pool, id)
        .await?
        .ok_or_else(|| not_found(id))?;
    auth.require_object(ObjectType::Llms, id, AccessLevel::WRITE)?;
    check_license(&state.config.license, pool, None).await?;
    let row = &current.row;
    let name = change.name.required(row.name.clone());
    let description = change.description.nullable(row.description.clone());
    let endpoint = change.endpoint.required(row.endpoint.clone());
    let model = change.model.nullable(row.model.clone());
    let parameters = change
        .parameters
        .map(Value::Object)
        .required(row.parameters.clone());
    let endpoint = validated(provider_of(row)?, &name, &endpoint, model.as_deref())?;
    let api_key = match change.api_key {
        Change::Value(key) => Some(state.cipher.encrypt(key.as_bytes())),
        Change::Null => None,
        Change::Omitted => current.api_key.clone(),
    };
    let fields = LlmFields {
        name: &name,
        description: description.as_deref(),
        endpoint: &endpoint,
        model: model.as_deref(),
        parameters: &parameters,
        api_key: api_key.as_deref(),
    };
    store::update(pool, id, &fields)
        .await?
        .ok_or_else(|| not_found(id))
}

/// Deletes an LLM and the permission entries on it.
pub async fn delete(pool: &Pool, auth: &AuthContext, id: Uuid) -> ApiResult<()> {
    get_readable(pool, auth, id).await?;
    auth.require_object(ObjectType::Llms, id, AccessLevel::WRITE)?;
    if store::delete(pool, id).await? {
        Ok(())
    } else {
        Err(not_found(id))
    }
}

/// An LLM ready to be called: its registration and its key, decrypted.
pub struct ReadyLlm {
    pub stored: StoredLlm,
    pub provider: LlmProvider,
    api_key: Option<String>,
}

impl std::fmt::Debug for ReadyLlm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadyLlm")
            .field("id", &self.stored.row.id)
            .field("provider", &self.provider)
            .finish_non_exhaustive()
    }
}

impl ReadyLlm {
    /// The key, for the one call that sends it.
    pub fn api_key(&self) -> Option<&str> {
        self.api_key.as_deref()
    }

    /// The LLM's parameters with `overrides` merged over them (shallow).
    pub fn parameters_with(&self, overrides: Map<String, Value>) -> Map<String, Value> {
        let mut parameters = match &self.stored.row.parameters {
            Value::Object(map) => map.clone(),
            _ => Map::new(),
        };
        parameters.extend(overrides);
        parameters
    }
}

/// Reads an LLM the caller may use (R|X: no read is `LLM not found`, no execute 403) and
/// decrypts its key; an `openai` LLM without a key is 400 before anything is sent.
pub async fn ready_for_use(
    pool: &Pool,
    cipher: &Cipher,
    auth: &AuthContext,
    id: Uuid,
) -> ApiResult<ReadyLlm> {
    ready(cipher, usable(pool, auth, id).await?)
}

/// Reads an LLM the caller may use (R|X: no read is `LLM not found`, no execute 403), with
/// its key still encrypted (an execution checks its variables before the key).
pub async fn usable(pool: &Pool, auth: &AuthContext, id: Uuid) -> ApiResult<StoredLlm> {
    if !auth.can_read(ObjectType::Llms, id) {
        return Err(not_found(id));
    }
    let stored = store::get_stored(pool, id)
        .await?
        .ok_or_else(|| not_found(id))?;
    auth.require_object(
        ObjectType::Llms,
        id,
        AccessLevel::READ.union(AccessLevel::EXECUTE),
    )?;
    Ok(stored)
}

/// The stored key of an LLM, decrypted.
fn decrypted_key(cipher: &Cipher, stored: &StoredLlm) -> ApiResult<Option<String>> {
    stored
        .api_key
        .as_ref()
        .map(|encrypted| {
            cipher
                .decrypt_text(encrypted)
                .map_err(|_| ApiError::Decryption)
        })
        .transpose()
}

/// The key check of a stored chat LLM, for a caller whose permissions were checked already: a
/// reranker is 400 `Invalid parameter` (`LLM <id> is a reranker`).
pub fn ready(cipher: &Cipher, stored: StoredLlm) -> ApiResult<ReadyLlm> {
    let provider = match provider_of(&stored.row)? {
        ModelServer::Chat(provider) => provider,
        ModelServer::Reranker(_) => {
            return Err(invalid(format!("LLM {} is a reranker", stored.row.id)));
        }
    };
    let api_key = decrypted_key(cipher, &stored)?;
    if provider == LlmProvider::OpenAi && api_key.as_deref().is_none_or(str::is_empty) {
        return Err(invalid(KEY_REQUIRED));
    }
    Ok(ReadyLlm {
        stored,
        provider,
        api_key,
    })
}

/// A registered reranker the caller may use, ready to be called.
pub struct ReadyReranker {
    pub stored: StoredLlm,
    pub provider: RerankProvider,
    api_key: Option<String>,
}

impl ReadyReranker {
    /// Where and how to call it.
    pub fn target(&self) -> RerankTarget<'_> {
        RerankTarget {
            provider: self.provider,
            endpoint: &self.stored.row.endpoint,
            model: self.stored.row.model.as_deref(),
            api_key: self.api_key.as_deref(),
        }
    }
}

/// Reads the reranker `id` names for a search: R|X on it (else 404 `LLM not found`), and a
/// reranker (a chat LLM is 400 `Invalid parameter`, `LLM <id> is not a reranker`).
pub async fn reranker(
    pool: &Pool,
    cipher: &Cipher,
    auth: &AuthContext,
    id: Uuid,
) -> ApiResult<ReadyReranker> {
    if !auth
        .object_level(ObjectType::Llms, id)
        .contains(AccessLevel::READ.union(AccessLevel::EXECUTE))
    {
        return Err(not_found(id));
    }
    let stored = store::get_stored(pool, id)
        .await?
        .ok_or_else(|| not_found(id))?;
    let ModelServer::Reranker(provider) = provider_of(&stored.row)? else {
        return Err(invalid(format!("LLM {id} is not a reranker")));
    };
    let api_key = decrypted_key(cipher, &stored)?;
    Ok(ReadyReranker {
        stored,
        provider,
        api_key,
    })
}

/// Sends `messages` to the LLM with its parameters and `overrides` merged over them, and
/// waits for the head of the answer: a failure before it is 500 `Stream error: <reason>`.
pub async fn chat(
    state: &AppState,
    llm: &ReadyLlm,
    messages: &[ChatMessage],
    overrides: Map<String, Value>,
) -> ApiResult<ChatStream> {
    let parameters = llm.parameters_with(overrides);
    let target = LlmTarget {
        provider: llm.provider,
        endpoint: &llm.stored.row.endpoint,
        model: llm.stored.row.model.as_deref(),
        api_key: llm.api_key(),
        parameters: &parameters,
    };
    state
        .llm
        .chat(&target, messages)
        .await
        .map_err(|e| ApiError::Stream(e.to_string()))
}

/// `POST /llms/{id}/query`: one user message, the request's parameters merged over the LLM's.
pub async fn query(
    state: &AppState,
    auth: &AuthContext,
    id: Uuid,
    prompt: String,
    parameters: Map<String, Value>,
) -> ApiResult<ChatStream> {
    let llm = ready_for_use(&state.pool, &state.cipher, auth, id).await?;
    chat(state, &llm, &[ChatMessage::user(prompt)], parameters).await
}

/// The model server's answer to a relayed request, to pass on unchanged.
pub struct RelayAnswer {
    pub status: u16,
    pub content_type: Option<Vec<u8>>,
    /// The body as it arrives; a failure mid-body (its text redacted) ends it with an error.
    pub body: BoxStream<'static, Result<Bytes, std::io::Error>>,
}

/// `POST /compat/v1/chat/completions`: forwards `body` (a JSON object) to the LLM's
/// chat-completions URL with its key, its `model` replacing the body's when it has one and its
/// parameters filling absent keys. Returns the model server's answer as it came; a failure
/// to get a head is 500 with the HTTP client's message (the key redacted).
pub async fn relay(
    state: &AppState,
    auth: &AuthContext,
    id: Uuid,
    mut body: Map<String, Value>,
) -> ApiResult<RelayAnswer> {
    let llm = ready_for_use(&state.pool, &state.cipher, auth, id).await?;
    let row = &llm.stored.row;
    if let Some(model) = &row.model {
        body.insert("model".to_owned(), Value::String(model.clone()));
    }
    if let Value::Object(defaults) = &row.parameters {
        for (key, value) in passthrough_parameters(defaults) {
            body.entry(key).or_insert(value);
        }
    }
    let url = match llm.provider {
        LlmProvider::OpenAi => format!("{}/chat/completions", row.endpoint),
        LlmProvider::Ollama => format!("{}/v1/chat/completions", row.endpoint),
    };
    let bytes =
        serde_json::to_vec(&Value::Object(body)).map_err(|e| ApiError::Internal(e.to_string()))?;
    let response = state
        .llm
        .forward(&url, llm.api_key(), Bytes::from(bytes))
        .await
        .map_err(|e| ApiError::ModelServerUnreachable(e.to_string()))?;
    let status = response.status().as_u16();
    let content_type = response
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .map(|v| v.as_bytes().to_vec());
    let client = state.llm.clone();
    let key = llm.api_key;
    let body = response
        .bytes_stream()
        .map(move |chunk| {
            chunk.map_err(|e| std::io::Error::other(client.relay_failure(e, key.as_deref())))
        })
        .boxed();
    Ok(RelayAnswer {
        status,
        content_type,
        body,
    })
}
