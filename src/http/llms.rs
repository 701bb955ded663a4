//! Operations of the `LLMs` group: `/llms` (registrations of model servers) and
//! `POST /llms/{llm_id}/query`.

use std::collections::BTreeMap;

use poem::Request;
use poem_openapi::types::MaybeUndefined;
use poem_openapi::{Object, OpenApi};
use serde::Deserialize;
use serde_json::{Map, Value};
use trove_query::list::parse_list_query;

use super::ApiTags;
use super::connections::unless_client_leaves;
use super::extract::{self, Auth, JsonBody, state};
use super::respond::{Created, Json, List, NoContent};
use super::schemas::Llm;
use super::streaming::{Answer, StreamMode};
use crate::error::ApiError;
use crate::providers::llm::LlmProvider;
use crate::service::llms::{self as service, LlmChange, NewLlm};

/// Kinds of model server.
#[derive(Debug, Clone, Copy, Deserialize, poem_openapi::Enum)]
#[serde(rename_all = "lowercase")]
#[oai(rename_all = "lowercase")]
pub enum LlmProviderName {
    /// Any OpenAI-compatible chat-completions server (`<endpoint>/chat/completions`).
    Openai,
    /// An Ollama server (`<endpoint>/api/chat`).
    Ollama,
}

impl From<LlmProviderName> for LlmProvider {
    fn from(name: LlmProviderName) -> Self {
        match name {
            LlmProviderName::Openai => Self::OpenAi,
            LlmProviderName::Ollama => Self::Ollama,
        }
    }
}

/// Body of `POST /llms`.
#[derive(Debug, Object, Deserialize)]
pub struct CreateLlmBody {
    /// Unique name, 1–255 characters.
    name: String,
    #[serde(default)]
    description: Option<String>,
    provider: LlmProviderName,
    /// Absolute `http`/`https` base URL; a trailing `/` is dropped. `openai`: includes `/v1`;
    /// `ollama`: the server root.
    endpoint: String,
    /// The model to ask for; required for `ollama`.
    #[serde(default)]
    model: Option<String>,
    /// Write-only; stored encrypted.
    #[serde(default)]
    api_key: Option<String>,
    /// Passed through with every call (`model`, `messages` and `stream` are ignored).
    #[serde(default)]
    parameters: Option<BTreeMap<String, Value>>,
}

/// Body of `PATCH /llms/{llm_id}` (`provider` is fixed).
#[derive(Debug, Object, Deserialize)]
pub struct UpdateLlmBody {
    #[serde(default)]
    name: MaybeUndefined<String>,
    #[serde(default)]
    description: MaybeUndefined<String>,
    #[serde(default)]
    endpoint: MaybeUndefined<String>,
    #[serde(default)]
    model: MaybeUndefined<String>,
    /// `null` removes the key.
    #[serde(default)]
    api_key: MaybeUndefined<String>,
    /// Replaces the parameters whole.
    #[serde(default)]
    parameters: MaybeUndefined<BTreeMap<String, Value>>,
}

/// Body of `POST /llms/{llm_id}/query`.
#[derive(Debug, Object, Deserialize)]
pub struct QueryLlmBody {
    /// Sent as the only message, role `user`.
    prompt: String,
    /// `true` or omitted: NDJSON; `"sse"`: server-sent events; `false`: plain text.
    #[serde(default)]
    stream: Option<Value>,
    /// Merged over the LLM's `parameters`.
    #[serde(default)]
    parameters: Option<BTreeMap<String, Value>>,
}

fn to_map(parameters: BTreeMap<String, Value>) -> Map<String, Value> {
    parameters.into_iter().collect()
}

#[derive(Default)]
pub struct LlmsApi;

#[OpenApi(tag = "ApiTags::Llms")]
impl LlmsApi {
    /// List LLMs
    ///
    /// LLMs the caller can read. Filters: `id`; `name`, `name$contains`, `name$startswith`,
    /// `name$gt|ge|lt|le`; `description`, `description$contains`; `provider`; `model`;
    /// `endpoint`; `created_at`, `updated_at` with `$gt|ge|lt|le`. Cursor or offset pagination,
    /// `count`, `order_by` (`id`, `name`, `provider`, `created_at`, `updated_at`).
    #[oai(path = "/llms", method = "get")]
    async fn list(&self, auth: Auth, req: &Request) -> poem::Result<Json<List<Llm>>> {
        let state = state(req)?;
        let request =
            parse_list_query(&service::LLM_LIST, req.uri().query(), &[]).map_err(ApiError::from)?;
        let envelope = service::list(&state.pool, &auth.0, &request).await?;
        Ok(Json(envelope.into()))
    }

    /// Register an LLM
    ///
    /// Needs write on `llms`. The API key is stored encrypted and never returned
    /// (`has_api_key` tells whether one is stored).
    #[oai(path = "/llms", method = "post")]
    async fn create(
        &self,
        auth: Auth,
        req: &Request,
        body: JsonBody<CreateLlmBody>,
    ) -> poem::Result<Created<Llm>> {
        let state = state(req)?;
        let body = body.0;
        let input = NewLlm {
            name: body.name,
            description: body.description,
            provider: body.provider.into(),
            endpoint: body.endpoint,
            model: body.model,
            api_key: body.api_key,
            parameters: body.parameters.map(to_map),
        };
        Ok(Created(
            service::create(state, &auth.0, input).await?.into(),
        ))
    }

    /// Get an LLM
    #[oai(path = "/llms/:llm_id", method = "get")]
    async fn get(
        &self,
        auth: Auth,
        llm_id: extract::Path,
        req: &Request,
    ) -> poem::Result<Json<Llm>> {
        let state = state(req)?;
        Ok(Json(
            service::get_readable(&state.pool, &auth.0, llm_id.0)
                .await?
                .into(),
        ))
    }

    /// Change an LLM
    ///
    /// Needs write on the LLM. Omitted fields keep their values; `null` clears `description`,
    /// `model` and `api_key`. The merged object is validated as at registration.
    #[oai(path = "/llms/:llm_id", method = "patch")]
    async fn update(
        &self,
        auth: Auth,
        llm_id: extract::Path,
        req: &Request,
        body: JsonBody<UpdateLlmBody>,
    ) -> poem::Result<Json<Llm>> {
        let state = state(req)?;
        let body = body.0;
        let change = LlmChange {
            name: body.name.into(),
            description: body.description.into(),
            endpoint: body.endpoint.into(),
            model: body.model.into(),
            api_key: body.api_key.into(),
            parameters: body.parameters.map_value(to_map).into(),
        };
        Ok(Json(
            service::update(state, &auth.0, llm_id.0, change)
                .await?
                .into(),
        ))
    }

    /// Delete an LLM
    ///
    /// Needs write on the LLM; permission entries on it are removed.
    #[oai(path = "/llms/:llm_id", method = "delete")]
    async fn delete(
        &self,
        auth: Auth,
        llm_id: extract::Path,
        req: &Request,
    ) -> poem::Result<NoContent> {
        let state = state(req)?;
        service::delete(&state.pool, &auth.0, llm_id.0).await?;
        Ok(NoContent)
    }

    /// Query an LLM
    ///
    /// Needs read and execute on the LLM. Sends `prompt` as one user message with the LLM's
    /// parameters and the request's merged over them. The head is sent once the model server
    /// accepted the request; a failure before that is 500 `Stream error: <reason>`.
    #[oai(path = "/llms/:llm_id/query", method = "post")]
    async fn query(
        &self,
        auth: Auth,
        llm_id: extract::Path,
        req: &Request,
        body: extract::ForwardedBody<QueryLlmBody>,
    ) -> poem::Result<Answer> {
        let state = state(req)?;
        let body = body.0;
        let mode = StreamMode::from_field(body.stream.as_ref())?;
        let parameters = body.parameters.map(to_map).unwrap_or_default();
        let answer = async {
            let events = service::query(state, &auth.0, llm_id.0, body.prompt, parameters).await?;
            Answer::render(mode, events).await
        };
        Ok(unless_client_leaves(req, answer).await?)
    }
}
