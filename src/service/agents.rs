//! Agents: their definitions (create, change, delete, read, list), the retrieval dry run and
//! executions (retrieval, rendering, the model's answer, the trace).

use super::Change;
use std::collections::{HashMap, HashSet};

use futures_util::StreamExt;
use futures_util::future::join_all;
use serde_json::{Map, Value, json};
use trove_query::classification::ClassificationRequest;
use trove_query::filter::Filter;
use trove_query::list::{FieldSpec, ListRequest, ListSpec};
use uuid::Uuid;

use super::contexts::{self, Exchange};
use super::search::{self as search_service, QueryVector, SearchInput};
use crate::access::{AccessLevel, ObjectType};
use crate::agents::definition::{
    AgentDefinition, DefinitionError, Message, Placeholder, RenderedMessage,
};
pub use crate::agents::trace::Trace;
use crate::agents::trace::{self, AnswerRecorder, TraceIds};
use crate::auth::AuthContext;
use crate::auth::license::check_license;
use crate::crypto::at_rest::Cipher;
use crate::error::{ApiError, ApiResult};
use crate::providers::llm::{ChatEvent, ChatMessage, ChatStream, collect};
use crate::retrieval::kinds::DistanceStrategy;
use crate::state::AppState;
use crate::store::Pool;
pub use crate::store::agents::AgentRow;
use crate::store::agents::{self as store, AgentFields};
use crate::store::listing;
pub use crate::store::listing::Envelope;
use crate::store::pipelines::SearchContext;

/// Fields of the agent list (interface §Agents).
pub const AGENT_LIST: ListSpec = ListSpec {
    table: "agents",
    fields: &[
        FieldSpec::ID,
        FieldSpec::NAME,
        FieldSpec::DESCRIPTION,
        FieldSpec::CREATED_AT,
        FieldSpec::UPDATED_AT,
    ],
    echo_unset_filters: false,
    default_order: &["id"],
};

/// The header naming the trace of an execution.
pub const TRACING_HEADER: &str = "x-service-tracing-id";

/// `Agent not found` with the id.
pub fn not_found(id: Uuid) -> ApiError {
    ApiError::NotFound {
        message: "Agent not found",
        id: Some(id),
    }
}

impl From<DefinitionError> for ApiError {
    fn from(error: DefinitionError) -> Self {
        match error {
            DefinitionError::InvalidName => Self::InvalidParameter("Invalid name".to_owned()),
            DefinitionError::NotImplemented(_) => Self::NotImplemented("Not implemented"),
            DefinitionError::InvalidPromptType => Self::InvalidPromptType,
            DefinitionError::InvalidPrompt(problem) => {
                tracing::debug!(%problem, "agent prompt refused");
                Self::InvalidPrompt
            }
            DefinitionError::InvalidPlaceholder(kind) => Self::InvalidPlaceholder(kind.wire_name()),
        }
    }
}

/// The definition stored in a row.
fn definition_of(row: &AgentRow) -> ApiResult<AgentDefinition> {
    let parse = |e: serde_json::Error| ApiError::Internal(format!("stored agent unreadable: {e}"));
    Ok(AgentDefinition {
        name: row.name.clone(),
        description: row.description.clone(),
        prompt: serde_json::from_value(row.prompt.clone()).map_err(parse)?,
        placeholders: serde_json::from_value(row.placeholders.clone()).map_err(parse)?,
    })
}

/// Validates a definition and writes it: the new row, or `None` when the agent vanished.
async fn store_definition(
    state: &AppState,
    id: Uuid,
    definition: &AgentDefinition,
    existing: bool,
) -> ApiResult<Option<AgentRow>> {
    definition.validate(state.config.extensions)?;
    let internal = |e: serde_json::Error| ApiError::Internal(e.to_string());
    let prompt = serde_json::to_value(&definition.prompt).map_err(internal)?;
    let placeholders = serde_json::to_value(&definition.placeholders).map_err(internal)?;
    let fields = AgentFields {
        name: &definition.name,
        description: definition.description.as_deref(),
        prompt: &prompt,
        placeholders: &placeholders,
    };
    Ok(if existing {
        store::update(&state.pool, id, &fields).await?
    } else {
        Some(store::insert(&state.pool, id, &fields).await?)
    })
}

/// Reads an agent the caller can read; missing or unreadable are both `Agent not found`.
pub async fn get_readable(pool: &Pool, auth: &AuthContext, id: Uuid) -> ApiResult<AgentRow> {
    if !auth.can_read(ObjectType::Agents, id) {
        return Err(not_found(id));
    }
    store::get(pool, id).await?.ok_or_else(|| not_found(id))
}

/// One page of the agents the caller can read.
pub async fn list(pool: &Pool, auth: &AuthContext, request: &ListRequest) -> ApiResult<Envelope> {
    let base = store::list_base(auth.readable_ids(ObjectType::Agents));
    listing::list::<AgentRow>(pool, &AGENT_LIST, request, base).await
}

/// Creates an agent: W on the type (403), the license, then the definition's rules (400/501),
/// then uniqueness (409).
pub async fn create(
    state: &AppState,
    auth: &AuthContext,
    definition: AgentDefinition,
) -> ApiResult<AgentRow> {
    auth.require_type(ObjectType::Agents, AccessLevel::WRITE)?;
    check_license(&state.config.license, &state.pool, Some(ObjectType::Agents)).await?;
    store_definition(state, Uuid::new_v4(), &definition, false)
        .await?
        .ok_or_else(|| ApiError::Internal("insert returned no row".to_owned()))
}

/// A change of an agent: omitted fields keep their values; arrays are replaced whole.
pub struct AgentChange {
    pub name: Option<String>,
    pub description: Change<String>,
    pub prompt: Option<Vec<Message>>,
    pub placeholders: Option<Vec<Placeholder>>,
}

/// Changes an agent; the merged definition is validated as at create, and an invalid change
/// leaves the agent unchanged.
pub async fn update(
    state: &AppState,
    auth: &AuthContext,
    id: Uuid,
    change: AgentChange,
) -> ApiResult<AgentRow> {
    let current = get_readable(&state.pool, auth, id).await?;
    auth.require_object(ObjectType::Agents, id, AccessLevel::WRITE)?;
    check_license(&state.config.license, &state.pool, None).await?;
    let mut definition = definition_of(&current)?;
    if let Some(name) = change.name {
        definition.name = name;
    }
    definition.description = change.description.nullable(definition.description.take());
    if let Some(prompt) = change.prompt {
        definition.prompt = prompt;
    }
    if let Some(placeholders) = change.placeholders {
        definition.placeholders = placeholders;
    }
    store_definition(state, id, &definition, true)
        .await?
        .ok_or_else(|| not_found(id))
}

/// Deletes an agent and the permission entries on it.
pub async fn delete(pool: &Pool, auth: &AuthContext, id: Uuid) -> ApiResult<()> {
    get_readable(pool, auth, id).await?;
    auth.require_object(ObjectType::Agents, id, AccessLevel::WRITE)?;
    if store::delete(pool, id).await? {
        Ok(())
    } else {
        Err(not_found(id))
    }
}

/// `GET /agents/{id}/prompt`: the messages, the placeholders and the query placeholders an
/// execution must supply.
pub struct PromptView {
    pub messages: Value,
    pub placeholders: Value,
    pub variables: Vec<String>,
}

/// The prompt of an agent the caller can read.
pub async fn prompt(pool: &Pool, auth: &AuthContext, id: Uuid) -> ApiResult<PromptView> {
    let row = get_readable(pool, auth, id).await?;
    let variables = definition_of(&row)?.variables();
    Ok(PromptView {
        messages: row.prompt,
        placeholders: row.placeholders,
        variables,
    })
}

/// What an execution or dry run retrieves with.
pub struct RetrievalInput {
    /// Query placeholder values.
    pub variables: HashMap<String, String>,
    /// Applies to every retrieval placeholder; `[]` retrieves nothing.
    pub classification: ClassificationRequest,
    /// Retrieval placeholder → its filter.
    pub filters: HashMap<String, Filter>,
}

/// An agent the caller may run (R|X): no read is `Agent not found` (with the id unless
/// `with_details` is false), no execute 403.
async fn runnable(
    pool: &Pool,
    auth: &AuthContext,
    id: Uuid,
    with_details: bool,
) -> ApiResult<AgentDefinition> {
    let missing = || ApiError::NotFound {
        message: "Agent not found",
        id: with_details.then_some(id),
    };
    if !auth.can_read(ObjectType::Agents, id) {
        return Err(missing());
    }
    let row = store::get(pool, id).await?.ok_or_else(missing)?;
    auth.require_object(
        ObjectType::Agents,
        id,
        AccessLevel::READ.union(AccessLevel::EXECUTE),
    )?;
    definition_of(&row)
}

/// The pipeline an agent runs on (R|X, else `Pipeline not found`).
async fn pipeline_context(
    state: &AppState,
    auth: &AuthContext,
    pipeline_id: Uuid,
) -> ApiResult<SearchContext> {
    super::pipelines::require_for_search(
        &state.pool,
        auth,
        pipeline_id,
        AccessLevel::READ.union(AccessLevel::EXECUTE),
    )
    .await
}

/// Search errors as an agent reports them: a filter that does not fit the schema, and
/// database errors, are 500 `Internal error` (filter language, rule 7).
fn agent_search_error(error: ApiError) -> ApiError {
    match error {
        ApiError::Schema => ApiError::Internal("Schema error".to_owned()),
        ApiError::Database(message) | ApiError::DatabaseBehind(message) => {
            ApiError::Internal(message)
        }
        other => other,
    }
}

/// The query vectors of the distinct targets of vector placeholders, embedded once each (and
/// concurrently) with the pipeline's model. A target whose embedding fails gets none: its
/// searches embed again and report the failure in search's order of checks.
async fn query_vectors(
    state: &AppState,
    context: &SearchContext,
    definition: &AgentDefinition,
    input: &RetrievalInput,
) -> HashMap<String, QueryVector> {
    let Some(model) = context.stored_model() else {
        return HashMap::new();
    };
    let retrieves_anything = trove_query::classification::resolve(
        &input.classification,
        &context.classification_names,
        &context.hierarchy(),
    )
    .is_ok_and(|names| !names.is_empty());
    if !retrieves_anything {
        return HashMap::new();
    }
    let targets: HashSet<&str> = definition
        .retrieval_placeholders()
        .filter(|p| p.kind.embeds_query())
        .filter_map(|p| p.target.as_deref())
        .collect();
    let embedded = join_all(targets.into_iter().filter_map(|target| {
        let query = input.variables.get(target)?;
        let model = &model;
        Some(async move {
            let vector = search_service::embed_query_with(state, model, query).await;
            (target.to_owned(), vector)
        })
    }))
    .await;
    embedded
        .into_iter()
        .filter_map(|(target, vector)| {
            let vector = vector.ok()?;
            Some((
                target,
                QueryVector {
                    model_id: model.row.id,
                    vector,
                },
            ))
        })
        .collect()
}

/// Runs every retrieval placeholder (referenced or not) through the search service, with its
/// target's value, its parameters, the request's classification and its filter (cosine).
/// Returns `(placeholder, fragments)` in definition order; the first failing placeholder in
/// that order decides the error.
async fn retrieve(
    state: &AppState,
    auth: &AuthContext,
    pipeline_id: Uuid,
    context: &SearchContext,
    definition: &AgentDefinition,
    input: &RetrievalInput,
) -> ApiResult<Vec<(String, Vec<Value>)>> {
    let vectors = query_vectors(state, context, definition, input).await;
    let searches = definition.retrieval_placeholders().map(|placeholder| {
        let target = placeholder.target.as_deref().unwrap_or_default();
        let search = SearchInput {
            query: input.variables.get(target).cloned().unwrap_or_default(),
            kind: placeholder.kind,
            classification: input.classification.clone(),
            params: Some(placeholder.effective_params().as_request()),
            filters: input.filters.get(&placeholder.name).cloned(),
            distance_strategy: Some(DistanceStrategy::DEFAULT),
        };
        let vector = vectors.get(target).map(|v| QueryVector {
            model_id: v.model_id,
            vector: v.vector.clone(),
        });
        let prefetched = search_service::Prefetched::read(pipeline_id, context.clone());
        async move {
            let hits = search_service::run_with(
                state,
                auth,
                pipeline_id,
                &search,
                vector,
                Some(prefetched),
            )
            .await
            .map_err(agent_search_error)?;
            Ok((placeholder.name.clone(), hits.results))
        }
    });
    join_all(searches).await.into_iter().collect()
}

fn retrievals_object(results: &[(String, Vec<Value>)]) -> Map<String, Value> {
    results
        .iter()
        .map(|(name, hits)| (name.clone(), Value::Array(hits.clone())))
        .collect()
}

/// `POST /agents/{id}/search`: the fragments of every retrieval placeholder, without calling
/// a model.
pub async fn dry_run(
    state: &AppState,
    auth: &AuthContext,
    agent_id: Uuid,
    pipeline_id: Uuid,
    input: RetrievalInput,
) -> ApiResult<Map<String, Value>> {
    let definition = runnable(&state.pool, auth, agent_id, false).await?;
    let context = pipeline_context(state, auth, pipeline_id).await?;
    definition
        .check_retrieval_variables(&input.variables)
        .map_err(|e| ApiError::InvalidParameter(e.to_string()))?;
    let results = retrieve(state, auth, pipeline_id, &context, &definition, &input).await?;
    Ok(retrievals_object(&results))
}

/// An execution's request beyond its retrieval input.
pub struct ExecuteOptions {
    pub llm_id: Uuid,
    /// Keep a trace (readable by this key for 60 minutes).
    pub tracing: bool,
    /// The client wants the whole answer at once: it is read here, so any failure is 500
    /// `Stream error` and no trace is written for it.
    pub whole_answer: bool,
    /// The context of the caller's (header `x-context-id`, extension `conversations`, already
    /// found to be the caller's): its messages fill the `history` placeholder and the
    /// exchange is appended to it once the answer is complete.
    pub context_id: Option<Uuid>,
    /// An enriched chat completion (the relay with `X-Agent-Id`, extension `conversations`):
    /// its last user message is the agent's one variable and its earlier messages the
    /// history. The retrieval input's variables are then not read.
    pub completion: Option<Completion>,
}

/// The conversation of an enriched chat completion.
pub struct Completion {
    /// The text of the last `user` message, if any.
    pub query: Option<String>,
    /// The messages before it, oldest first: they fill the `history` placeholder as a
    /// context's most recent messages would (its `k` most recent of them); nothing is stored.
    pub history: Vec<RenderedMessage>,
}

impl Completion {
    /// The variables of an agent run as a chat completion: its one variable (a query
    /// placeholder named in a template or targeted) holds the last user message. An agent
    /// needing more than one, or one without a user message to fill it, is 400
    /// `Missing prompt variables: <names>`.
    fn variables(&self, definition: &AgentDefinition) -> ApiResult<HashMap<String, String>> {
        let names = definition.variables();
        let missing = |names: &[String]| {
            ApiError::InvalidParameter(format!("Missing prompt variables: {}", names.join(", ")))
        };
        match (names.as_slice(), &self.query) {
            ([], _) => Ok(HashMap::new()),
            ([name], Some(query)) => Ok(HashMap::from([(name.clone(), query.clone())])),
            _ => Err(missing(&names)),
        }
    }

    /// The `k` most recent messages of the history.
    fn recent(&self, k: u32) -> Vec<RenderedMessage> {
        let k = usize::try_from(k).unwrap_or(usize::MAX);
        let start = self.history.len().saturating_sub(k);
        self.history[start..].to_vec()
    }
}

/// A started execution: the answer's events (the head was received), the trace id and the
/// model the LLM names (if it names one).
pub struct Execution {
    pub events: ChatStream,
    pub trace_id: Option<Uuid>,
    pub model: Option<String>,
}

/// `POST /agents/{id}/execute`: checks (agent, pipeline, LLM, variables, key), retrieval,
/// rendering, then the model's answer.
pub async fn execute(
    state: &AppState,
    auth: &AuthContext,
    agent_id: Uuid,
    pipeline_id: Uuid,
    mut input: RetrievalInput,
    options: ExecuteOptions,
) -> ApiResult<Execution> {
    let definition = runnable(&state.pool, auth, agent_id, true).await?;
    let context = pipeline_context(state, auth, pipeline_id).await?;
    let stored_llm = super::llms::usable(&state.pool, auth, options.llm_id).await?;
    if let Some(completion) = &options.completion {
        input.variables = completion.variables(&definition)?;
    }
    definition
        .check_execution_variables(&input.variables)
        .map_err(|e| ApiError::InvalidParameter(e.to_string()))?;
    let llm = super::llms::ready(&state.cipher, stored_llm)?;
    let model = llm.stored.row.model.clone();
    let results = retrieve(state, auth, pipeline_id, &context, &definition, &input).await?;
    let history = match (&options.completion, options.context_id) {
        (Some(completion), _) => completion.recent(definition.history_len()),
        (None, Some(id)) if definition.history_len() > 0 => {
            contexts::history(
                &state.pool,
                &state.cipher,
                auth,
                id,
                definition.history_len(),
            )
            .await?
        }
        _ => Vec::new(),
    };
    let execution_id = Uuid::new_v4();
    let memory = options.context_id.map(|id| Memory {
        pool: state.pool.clone(),
        cipher: state.cipher.clone(),
        key_id: auth.key_id,
        context_id: id,
        exchange: Exchange {
            execution_id,
            user: definition.user_turn(&input.variables),
            answer: String::new(),
        },
    });

    let rendered = render(&definition, input.variables, &results, &history)?;
    let messages: Vec<ChatMessage> = rendered
        .iter()
        .map(|m| ChatMessage {
            role: m.role.as_str().to_owned(),
            content: m.content.clone(),
        })
        .collect();
    let mut events = super::llms::chat(state, &llm, &messages, Map::new()).await?;
    if let Some(memory) = memory {
        events = memory.remember(events);
    }
    let trace = options.tracing.then(|| Traced {
        ids: TraceIds {
            id: execution_id,
            api_key_id: auth.key_id,
            agent_id,
            pipeline_id,
            llm_id: options.llm_id,
        },
        retrievals: Value::Object(retrievals_object(&results)),
        messages: json!(rendered),
    });
    let mut execution = answer(state, events, trace, options.whole_answer).await?;
    execution.model = model;
    Ok(execution)
}

/// The included messages with the variables and each retrieval placeholder's fragments
/// (their text joined by a blank line) filled in.
fn render(
    definition: &AgentDefinition,
    mut values: HashMap<String, String>,
    results: &[(String, Vec<Value>)],
    history: &[RenderedMessage],
) -> ApiResult<Vec<RenderedMessage>> {
    for (name, hits) in results {
        let texts: Vec<&str> = hits
            .iter()
            .filter_map(|hit| hit.get("page_content").and_then(Value::as_str))
            .collect();
        values.insert(name.clone(), texts.join("\n\n"));
    }
    definition
        .render_messages(&values, history)
        .map_err(|unfilled| {
            ApiError::InvalidParameter(format!(
                "Prompts contain unfilled placeholders: {}",
                unfilled.names.join(", ")
            ))
        })
}

/// The exchange of an execution with a context, appended once the answer is complete.
struct Memory {
    pool: Pool,
    cipher: Cipher,
    key_id: Uuid,
    context_id: Uuid,
    /// The answer is gathered here as it streams.
    exchange: Exchange,
}

impl Memory {
    /// `events`, with the exchange appended to the context before the final event is passed
    /// on. An answer that fails, or is dropped before its final event (the client left),
    /// appends nothing.
    fn remember(self, events: ChatStream) -> ChatStream {
        futures_util::stream::unfold(Some((events, self)), |state| async move {
            let (mut events, mut memory) = state?;
            match events.next().await {
                Some(Ok(ChatEvent::Delta(text))) => {
                    memory.exchange.answer.push_str(&text);
                    Some((Ok(ChatEvent::Delta(text)), Some((events, memory))))
                }
                Some(Ok(done @ ChatEvent::Done { .. })) => {
                    memory.append().await;
                    Some((Ok(done), None))
                }
                Some(Err(error)) => Some((Err(error), None)),
                None => None,
            }
        })
        .boxed()
    }

    /// Appends the exchange; a failure is logged, since the answer has been given.
    async fn append(&self) {
        let appended = contexts::append_exchange(
            &self.pool,
            &self.cipher,
            self.key_id,
            self.context_id,
            &self.exchange,
        )
        .await;
        match appended {
            Ok(true) => {}
            Ok(false) => {
                tracing::debug!(context_id = %self.context_id, "context gone before the exchange was appended");
            }
            Err(error) => {
                tracing::warn!(%error, context_id = %self.context_id, "could not append the exchange to the context");
            }
        }
    }
}

/// What a traced execution records before its answer.
struct Traced {
    ids: TraceIds,
    retrievals: Value,
    messages: Value,
}

/// The answer's events, with the trace written as the interface says: for a whole answer
/// once it is complete (a failure keeps no trace), for a stream before the head, its answer
/// recorded when the stream ends.
async fn answer(
    state: &AppState,
    events: ChatStream,
    trace: Option<Traced>,
    whole_answer: bool,
) -> ApiResult<Execution> {
    let trace_id = trace.as_ref().map(|t| t.ids.id);
    if whole_answer {
        let (text, finish_reason, usage) = collect(events)
            .await
            .map_err(|e| ApiError::Stream(e.to_string()))?;
        if let Some(t) = &trace {
            trace::write(
                &state.pool,
                &state.cipher,
                t.ids,
                &t.retrievals,
                &t.messages,
                Some(&text),
            )
            .await?;
        }
        let events = futures_util::stream::iter([
            Ok(ChatEvent::Delta(text)),
            Ok(ChatEvent::Done {
                finish_reason,
                usage,
            }),
        ])
        .boxed();
        return Ok(Execution {
            events,
            trace_id,
            model: None,
        });
    }
    let Some(t) = trace else {
        return Ok(Execution {
            events,
            trace_id: None,
            model: None,
        });
    };
    trace::write(
        &state.pool,
        &state.cipher,
        t.ids,
        &t.retrievals,
        &t.messages,
        None,
    )
    .await?;
    let recorder = AnswerRecorder::new(state.pool.clone(), state.cipher.clone(), t.ids.id);
    Ok(Execution {
        events: recorder.record(events),
        trace_id,
        model: None,
    })
}

/// `GET /tracing/{execution_id}`: a trace of the caller's own executions, younger than 60
/// minutes.
pub async fn get_trace(state: &AppState, auth: &AuthContext, id: Uuid) -> ApiResult<Trace> {
    trace::read(&state.pool, &state.cipher, id, auth.key_id).await
}

/// Deletes the traces older than 60 minutes (`trove serve` does every minute); how many.
pub async fn delete_expired_traces(pool: &Pool) -> ApiResult<u64> {
    trace::delete_expired(pool).await
}
