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
use crate::config::Extension;
use crate::error::ApiError;
use crate::names::{Listed, Named};
use crate::providers::rerank::{ChatModelServers, EveryModelServer, ModelServer};
use crate::service::llms::{self as service, LlmChange, NewLlm};

/// The provider of a registration: a chat model server, or with the extension `hybrid` a
/// reranker. Parsed within the providers the deployment accepts (see
/// [`extract::parsing_extensions`]), so that an unknown one is refused with the names of those.
#[derive(Debug, Clone, Copy)]
pub struct ProviderName(ModelServer);

impl<'de> Deserialize<'de> for ProviderName {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        if extract::parsing_extensions().has(Extension::Hybrid) {
            Listed::<EveryModelServer>::deserialize(deserializer).map(|p| Self(p.0))
        } else {
            Listed::<ChatModelServers>::deserialize(deserializer).map(|p| Self(p.0))
        }
    }
}

impl poem_openapi::types::Type for ProviderName {
    const IS_REQUIRED: bool = true;
    type RawValueType = Self;
    type RawElementValueType = Self;

    fn name() -> std::borrow::Cow<'static, str> {
        <Listed<ChatModelServers> as poem_openapi::types::Type>::name()
    }

    fn schema_ref() -> poem_openapi::registry::MetaSchemaRef {
        <Listed<ChatModelServers> as poem_openapi::types::Type>::schema_ref()
    }

    fn register(registry: &mut poem_openapi::registry::Registry) {
        <Listed<ChatModelServers> as poem_openapi::types::Type>::register(registry);
    }

    fn as_raw_value(&self) -> Option<&Self> {
        Some(self)
    }

    fn raw_element_iter<'a>(&'a self) -> Box<dyn Iterator<Item = &'a Self> + 'a> {
        Box::new(self.as_raw_value().into_iter())
    }
}

impl poem_openapi::types::ParseFromJSON for ProviderName {
    fn parse_from_json(value: Option<Value>) -> poem_openapi::types::ParseResult<Self> {
        <Listed<EveryModelServer> as poem_openapi::types::ParseFromJSON>::parse_from_json(value)
            .map(|p| Self(p.0))
            .map_err(poem_openapi::types::ParseError::propagate)
    }
}

impl poem_openapi::types::ToJSON for ProviderName {
    fn to_json(&self) -> Option<Value> {
        Some(Value::from(self.0.name()))
    }
}

/// Body of `POST /llms`.
#[derive(Debug, Object, Deserialize)]
pub struct CreateLlmBody {
    /// Unique name, 1–255 characters.
    name: String,
    #[serde(default)]
    description: Option<String>,
    provider: ProviderName,
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
            provider: body.provider.0,
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
