//! Operations of the `Agents` group: `/agents` (definitions), `GET /agents/{agent_id}/prompt`,
//! the retrieval dry run `POST /agents/{agent_id}/search` and `POST /agents/{agent_id}/execute`.

use std::collections::{BTreeMap, HashMap};

use poem::{Request, RequestBody};
use poem_openapi::types::MaybeUndefined;
use poem_openapi::{ApiExtractor, ApiExtractorType, ExtractParamOptions, Object, OpenApi};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use trove_query::classification::ClassificationRequest;
use trove_query::filter::Filter;
use trove_query::list::parse_list_query;
use uuid::Uuid;

use super::ApiTags;
use super::connections::unless_client_leaves;
use super::documents::Fragment;
use super::extract::{self, Auth, JsonBody, required_header, state};
use super::respond::{Created, Described, Json, List, NoContent, Nullable};
use super::streaming::{Answer, StreamMode};
use crate::agents::definition::{
    AgentDefinition, Message, Placeholder, RetrievalParams, Role, SearchKind,
};
use crate::auth::key_check::credentials;
use crate::config::Extension;
use crate::error::ApiError;
use crate::retrieval::kinds::{Listed, PlaceholderTypes, SearchParams};
use crate::service::agents::{
    self as service, AgentChange, AgentRow, ExecuteOptions, RetrievalInput,
};
use crate::service::contexts;

/// Roles of prompt messages.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, poem_openapi::Enum)]
#[serde(rename_all = "lowercase")]
#[oai(rename_all = "lowercase")]
pub enum RoleName {
    System,
    User,
    Assistant,
}

impl From<RoleName> for Role {
    fn from(role: RoleName) -> Self {
        match role {
            RoleName::System => Self::System,
            RoleName::User => Self::User,
            RoleName::Assistant => Self::Assistant,
        }
    }
}

impl From<Role> for RoleName {
    fn from(role: Role) -> Self {
        match role {
            Role::System => Self::System,
            Role::User => Self::User,
            Role::Assistant => Self::Assistant,
        }
    }
}

/// One prompt message.
#[derive(Debug, Clone, Object, Serialize, Deserialize)]
pub struct PromptMessage {
    role: RoleName,
    /// Text; `{name}` names a placeholder, `{{` and `}}` are literal braces.
    template: String,
    /// false: stored and validated, but neither sent nor traced.
    #[serde(default = "yes")]
    #[oai(default = "yes")]
    include: bool,
}

fn yes() -> bool {
    true
}

/// Retrieval parameters. Null or omitted: k 5, fetch_k 10, lambda_mult 0.5. Present: omitted k and fetch_k are 0.
#[derive(Debug, Clone, Object, Serialize, Deserialize)]
#[oai(nullable_all)]
pub struct PlaceholderParams {
    #[serde(default)]
    k: Option<u16>,
    #[serde(default)]
    fetch_k: Option<u16>,
    #[serde(default)]
    lambda_mult: Option<f64>,
    #[serde(default)]
    threshold: Option<f64>,
    /// A vector embedding id of the pipeline, or its model's id.
    #[serde(default)]
    embedding: Option<Uuid>,
    /// Hybrid (extension): described in the document when the extension is on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[oai(skip)]
    rrf_k: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[oai(skip)]
    similarity_weight: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[oai(skip)]
    full_text_weight: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[oai(skip)]
    rerank: Option<Uuid>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[oai(skip)]
    rerank_candidates: Option<u16>,
}

/// A named placeholder.
#[derive(Debug, Clone, Object, Serialize, Deserialize)]
pub struct AgentPlaceholder {
    /// Identifier of at most 64 characters, unique in the agent.
    name: String,
    #[serde(rename = "type")]
    #[oai(rename = "type")]
    kind: Listed<PlaceholderTypes>,
    /// Retrieval placeholders: the name of a `query` placeholder.
    #[serde(default)]
    #[oai(nullable)]
    target: Option<String>,
    #[serde(default)]
    params: Nullable<PlaceholderParams>,
}

impl From<PromptMessage> for Message {
    fn from(message: PromptMessage) -> Self {
        Self {
            role: message.role.into(),
            template: message.template,
            include: message.include,
        }
    }
}

impl From<AgentPlaceholder> for Placeholder {
    fn from(placeholder: AgentPlaceholder) -> Self {
        let kind = placeholder.kind.0;
        if kind == SearchKind::History {
            // Only `k` means anything to a history; omitted, it is the default.
            let params = placeholder
                .params
                .0
                .map(|p| Placeholder::history_params(p.k.map(u32::from)));
            return Self::new(placeholder.name, kind, placeholder.target, params);
        }
        let params = placeholder.params.0.map(|p| {
            let sent = SearchParams {
                k: p.k,
                fetch_k: p.fetch_k,
                lambda_mult: p.lambda_mult,
                threshold: p.threshold,
                embedding: p.embedding,
                rrf_k: p.rrf_k,
                similarity_weight: p.similarity_weight,
                full_text_weight: p.full_text_weight,
                rerank: p.rerank,
                rerank_candidates: p.rerank_candidates,
            };
            RetrievalParams::of(kind, Some(&sent))
        });
        Self::new(placeholder.name, kind, placeholder.target, params)
    }
}

/// An agent.
#[derive(Debug, Object, Serialize, Deserialize)]
#[oai(rename = "Agent")]
pub struct AgentObject {
    id: Uuid,
    name: String,
    #[oai(nullable)]
    description: Option<String>,
    /// Every message with its `include`.
    prompt: Vec<PromptMessage>,
    /// Retrieval placeholders with all five `params`; `query` placeholders with `target` and
    /// `params` null.
    // As stored: a `history` placeholder's params (extension `conversations`) hold only `k`.
    placeholders: Described<Vec<AgentPlaceholder>>,
    /// RFC 3339.
    created_at: String,
    /// RFC 3339.
    updated_at: String,
}

impl TryFrom<AgentRow> for AgentObject {
    type Error = ApiError;

    /// The row holds the normalised definition in the API's shape.
    fn try_from(row: AgentRow) -> Result<Self, ApiError> {
        let value = serde_json::to_value(row).map_err(|e| ApiError::Internal(e.to_string()))?;
        serde_json::from_value(value).map_err(|e| ApiError::Internal(e.to_string()))
    }
}

/// Body of `POST /agents`.
#[derive(Debug, Object, Deserialize)]
pub struct CreateAgentBody {
    /// Unique name, 1–255 characters.
    name: String,
    #[serde(default)]
    description: Option<String>,
    /// At least one `system` and one `user` message; the last is a `user` message.
    prompt: Vec<PromptMessage>,
    placeholders: Vec<AgentPlaceholder>,
}

/// Body of `PATCH /agents/{agent_id}`: arrays are replaced whole.
#[derive(Debug, Object, Deserialize)]
pub struct UpdateAgentBody {
    #[serde(default)]
    name: MaybeUndefined<String>,
    #[serde(default)]
    description: MaybeUndefined<String>,
    #[serde(default)]
    prompt: MaybeUndefined<Vec<PromptMessage>>,
    #[serde(default)]
    placeholders: MaybeUndefined<Vec<AgentPlaceholder>>,
}

/// The header naming the context of an execution (extension `conversations`).
pub const CONTEXT_HEADER: &str = "x-context-id";

/// Retrieval placeholder → its fragments (dry run, traces), as the service builds them.
pub type Retrievals<T = Value> = Described<BTreeMap<String, Vec<Fragment>>, T>;

/// `GET /agents/{agent_id}/prompt`.
#[derive(Debug, Object, Serialize)]
pub struct AgentPrompt {
    messages: Described<Vec<PromptMessage>>,
    placeholders: Described<Vec<AgentPlaceholder>>,
    /// The query placeholders an execution must supply, in definition order.
    variables: Vec<String>,
}

/// Body of the dry run and of an execution.
#[derive(Debug, Object, Deserialize)]
pub struct RunAgentBody {
    /// Query placeholder values.
    #[serde(default)]
    variables: Option<BTreeMap<String, String>>,
    /// As in search; omitted: `[]` (nothing is retrieved).
    #[serde(default)]
    classification: Option<extract::Opaque<ClassificationRequest>>,
    /// Retrieval placeholder name → filter.
    #[serde(default)]
    filters: Option<extract::Opaque<HashMap<String, Filter>>>,
    /// Execution: `true` or omitted NDJSON, `"sse"` server-sent events, `false` plain text.
    // Kept as written: this body is read without a nesting limit (filters nest to any
    // depth), and a value of any other field is not built into a tree.
    #[serde(default)]
    stream: Option<extract::Opaque<Box<serde_json::value::RawValue>>>,
    /// Execution: keep a trace for 60 minutes (header `x-service-tracing-id`).
    #[serde(default)]
    tracing: Option<bool>,
}

impl RunAgentBody {
    fn retrieval_input(&mut self) -> RetrievalInput {
        RetrievalInput {
            variables: self
                .variables
                .take()
                .unwrap_or_default()
                .into_iter()
                .collect(),
            classification: self
                .classification
                .take()
                .map_or_else(|| ClassificationRequest::hierarchical(Vec::new()), |c| c.0),
            filters: self.filters.take().map(|f| f.0).unwrap_or_default(),
        }
    }
}

/// A header holding an id: missing or not visible ASCII is plain 400, not a UUID 400
/// `<message>`.
pub(super) fn header_id(raw: &str, message: &str) -> Result<Uuid, ApiError> {
    Uuid::parse_str(raw).map_err(|_| ApiError::InvalidHeaderId(message.to_owned()))
}

/// The headers of a dry run: `x-pipeline-id`.
pub struct DryRunHeaders {
    pipeline_id: Uuid,
}

impl<'a> ApiExtractor<'a> for DryRunHeaders {
    const TYPES: &'static [ApiExtractorType] = &[];
    type ParamType = ();
    type ParamRawType = ();

    async fn from_request(
        request: &'a Request,
        _body: &mut RequestBody,
        _opts: ExtractParamOptions<()>,
    ) -> poem::Result<Self> {
        let raw = required_header(request, "x-pipeline-id")?;
        Ok(Self {
            pipeline_id: header_id(raw, "Invalid pipeline ID")?,
        })
    }
}

/// The headers of an execution: `x-pipeline-id` and `x-llm-id`, and with the extension
/// `conversations` `x-context-id`, a context of the caller's.
pub struct ExecuteHeaders {
    pipeline_id: Uuid,
    llm_id: Uuid,
    context_id: Option<Uuid>,
}

/// The context of `x-context-id` when the extension `conversations` is on (the header is
/// ignored otherwise): not a UUID is 400 `Invalid context ID`, a context the calling key does
/// not own 404 `Context not found`, both before the body is read.
async fn execution_context(request: &Request) -> poem::Result<Option<Uuid>> {
    let state = state(request)?;
    if !state.config.extensions.has(Extension::Conversations) {
        return Ok(None);
    }
    let Some(raw) = request.headers().get(CONTEXT_HEADER) else {
        return Ok(None);
    };
    let id = raw
        .to_str()
        .ok()
        .and_then(|raw| Uuid::parse_str(raw).ok())
        .ok_or_else(|| ApiError::InvalidHeaderId("Invalid context ID".to_owned()))?;
    // The key check (the `Auth` argument, extracted before these headers) has verified the
    // key these credentials name.
    let key_id = credentials(request.headers())?.key_id;
    contexts::get_of_key(&state.pool, key_id, id).await?;
    Ok(Some(id))
}

impl<'a> ApiExtractor<'a> for ExecuteHeaders {
    const TYPES: &'static [ApiExtractorType] = &[];
    type ParamType = ();
    type ParamRawType = ();

    async fn from_request(
        request: &'a Request,
        _body: &mut RequestBody,
        _opts: ExtractParamOptions<()>,
    ) -> poem::Result<Self> {
        let pipeline = required_header(request, "x-pipeline-id")?;
        let llm = required_header(request, "x-llm-id")?;
        let pipeline_id = header_id(pipeline, "Invalid pipeline ID")?;
        let llm_id = header_id(llm, "Invalid LLM ID")?;
        Ok(Self {
            pipeline_id,
            llm_id,
            context_id: execution_context(request).await?,
        })
    }
}

fn agent_object(row: AgentRow) -> poem::Result<AgentObject> {
    Ok(AgentObject::try_from(row)?)
}

fn definition(body: CreateAgentBody) -> AgentDefinition {
    AgentDefinition {
        name: body.name,
        description: body.description,
        prompt: body.prompt.into_iter().map(Message::from).collect(),
        placeholders: body
            .placeholders
            .into_iter()
            .map(Placeholder::from)
            .collect(),
    }
}

#[derive(Default)]
pub struct AgentsApi;

#[OpenApi(tag = "ApiTags::Agents")]
impl AgentsApi {
    /// List agents
    ///
    /// Agents the caller can read. Filters: `id`; `name`, `name$contains`, `name$startswith`,
    /// `name$gt|ge|lt|le`; `description`, `description$contains`; `created_at`, `updated_at`
    /// with `$gt|ge|lt|le`. Cursor or offset pagination, `count`, `order_by` (`id`, `name`,
    /// `created_at`, `updated_at`).
    #[oai(path = "/agents", method = "get")]
    async fn list(&self, auth: Auth, req: &Request) -> poem::Result<Json<List<AgentObject>>> {
        let state = state(req)?;
        let request = parse_list_query(&service::AGENT_LIST, req.uri().query(), &[])
            .map_err(ApiError::from)?;
        let envelope = service::list(&state.pool, &auth.0, &request).await?;
        Ok(Json(envelope.into()))
    }

    /// Create an agent
    ///
    /// Needs write on `agents`. Checked in this order: name, placeholder types (`hybrid`,
    /// `history`: 501), message roles, placeholder names, references and targets, retrieval
    /// parameters, uniqueness.
    #[oai(path = "/agents", method = "post")]
    async fn create(
        &self,
        auth: Auth,
        req: &Request,
        body: JsonBody<CreateAgentBody>,
    ) -> poem::Result<Created<AgentObject>> {
        let state = state(req)?;
        let row = service::create(state, &auth.0, definition(body.0)).await?;
        Ok(Created(agent_object(row)?))
    }

    /// Get an agent
    #[oai(path = "/agents/:agent_id", method = "get")]
    async fn get(
        &self,
        auth: Auth,
        agent_id: extract::Path,
        req: &Request,
    ) -> poem::Result<Json<AgentObject>> {
        let state = state(req)?;
        let row = service::get_readable(&state.pool, &auth.0, agent_id.0).await?;
        Ok(Json(agent_object(row)?))
    }

    /// Change an agent
    ///
    /// Needs write on the agent. `prompt` and `placeholders` are replaced whole; the merged
    /// agent is validated as at create, and an invalid change leaves it unchanged.
    #[oai(path = "/agents/:agent_id", method = "patch")]
    async fn update(
        &self,
        auth: Auth,
        agent_id: extract::Path,
        req: &Request,
        body: JsonBody<UpdateAgentBody>,
    ) -> poem::Result<Json<AgentObject>> {
        let state = state(req)?;
        let body = body.0;
        let change = AgentChange {
            name: body.name.take(),
            description: body.description.into(),
            prompt: body
                .prompt
                .take()
                .map(|prompt| prompt.into_iter().map(Message::from).collect()),
            placeholders: body
                .placeholders
                .take()
                .map(|placeholders| placeholders.into_iter().map(Placeholder::from).collect()),
        };
        let row = service::update(state, &auth.0, agent_id.0, change).await?;
        Ok(Json(agent_object(row)?))
    }

    /// Delete an agent
    ///
    /// Needs write on the agent; permission entries on it are removed.
    #[oai(path = "/agents/:agent_id", method = "delete")]
    async fn delete(
        &self,
        auth: Auth,
        agent_id: extract::Path,
        req: &Request,
    ) -> poem::Result<NoContent> {
        let state = state(req)?;
        service::delete(&state.pool, &auth.0, agent_id.0).await?;
        Ok(NoContent)
    }

    /// Get an agent's prompt
    ///
    /// The messages, the placeholders, and `variables`: the query placeholders an execution
    /// must supply (named in a template or targeted by a retrieval placeholder).
    #[oai(path = "/agents/:agent_id/prompt", method = "get")]
    async fn prompt(
        &self,
        auth: Auth,
        agent_id: extract::Path,
        req: &Request,
    ) -> poem::Result<Json<AgentPrompt>> {
        let state = state(req)?;
        let view = service::prompt(&state.pool, &auth.0, agent_id.0).await?;
        Ok(Json(AgentPrompt {
            messages: Described::new(view.messages),
            placeholders: Described::new(view.placeholders),
            variables: view.variables,
        }))
    }

    /// Retrieval dry run
    ///
    /// Needs read and execute on the agent and the pipeline of `x-pipeline-id`. Runs every
    /// retrieval placeholder and returns `{"<placeholder>": [fragments]}`; no model is called.
    #[oai(path = "/agents/:agent_id/search", method = "post")]
    async fn search(
        &self,
        auth: Auth,
        agent_id: extract::Path,
        headers: DryRunHeaders,
        req: &Request,
        body: extract::FilterBody<RunAgentBody, extract::Forwarded>,
    ) -> poem::Result<Json<Retrievals<BTreeMap<String, Value>>>> {
        let state = state(req)?;
        let mut body = body.0;
        let input = body.retrieval_input();
        let results =
            service::dry_run(state, &auth.0, agent_id.0, headers.pipeline_id, input).await?;
        Ok(Json(Described::new(results.into_iter().collect())))
    }

    /// Execute an agent
    ///
    /// Needs read and execute on the agent, the pipeline of `x-pipeline-id` and the LLM of
    /// `x-llm-id`. Retrieves, renders the included messages and streams the model's answer
    /// (`stream`: NDJSON, `"sse"` or plain text). With `tracing` the response carries
    /// `x-service-tracing-id`, the id of a trace readable for 60 minutes.
    #[oai(path = "/agents/:agent_id/execute", method = "post")]
    async fn execute(
        &self,
        auth: Auth,
        agent_id: extract::Path,
        headers: ExecuteHeaders,
        req: &Request,
        body: extract::FilterBody<RunAgentBody, extract::Forwarded>,
    ) -> poem::Result<Answer> {
        let state = state(req)?;
        let mut body = body.0;
        let mode = StreamMode::from_raw(body.stream.as_ref().map(|raw| &*raw.0))?;
        let options = ExecuteOptions {
            llm_id: headers.llm_id,
            tracing: body.tracing.unwrap_or(false),
            whole_answer: mode == StreamMode::Plain,
            context_id: headers.context_id,
            completion: None,
        };
        let input = body.retrieval_input();
        let answer = async {
            let execution = service::execute(
                state,
                &auth.0,
                agent_id.0,
                headers.pipeline_id,
                input,
                options,
            )
            .await?;
            let answer = Answer::render(mode, execution.events).await?;
            Ok(match execution.trace_id {
                Some(id) => answer.with_header(service::TRACING_HEADER, &id.to_string()),
                None => answer,
            })
        };
        Ok(unless_client_leaves(req, answer).await?)
    }
}
