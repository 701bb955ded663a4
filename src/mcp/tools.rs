//! The three read-only tools: their definitions (`tools/list`) and their execution
//! (`tools/call`), on the same service functions and permission rules as REST.

use std::sync::Arc;

use rmcp::ErrorData;
use rmcp::model::{CallToolResult, ContentBlock, ErrorCode, JsonObject, Tool, ToolAnnotations};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use trove_query::list::{FieldFilter, FilterOp, ListRequest, OrderField, PageRequest};
use uuid::Uuid;

use crate::auth::AuthContext;
use crate::config::{Extension, Extensions};
use crate::error::ApiError;
use crate::retrieval::kinds::{
    DEFAULT_HYBRID_FETCH_K, DEFAULT_RRF_K, Listed, Listing, SearchParams, ToolSearchTypes,
};
use crate::service::pipelines::PipelineRow;
use crate::state::AppState;

pub const GET_PIPELINES: &str = "get_pipelines";
pub const GET_PIPELINE_CLASSIFICATIONS: &str = "get_pipeline_classifications";
pub const SEARCH_KNOWLEDGE: &str = "search_knowledge";

/// JSON Schema dialect of every input and output schema.
const DRAFT_2020_12: &str = "https://json-schema.org/draft/2020-12/schema";

/// `get_pipelines` page size when `limit` is omitted or null.
pub const DEFAULT_PIPELINE_LIMIT: u64 = 10;

fn schema(value: Value) -> Arc<JsonObject> {
    match value {
        Value::Object(map) => Arc::new(map),
        _ => Arc::new(JsonObject::new()),
    }
}

fn tool(
    name: &'static str,
    description: impl Into<std::borrow::Cow<'static, str>>,
    input: Value,
    output: Value,
    idempotent: bool,
) -> Tool {
    Tool::new(name, description, schema(input))
        .with_raw_output_schema(schema(output))
        .with_annotations(
            ToolAnnotations::new()
                .read_only(true)
                .destructive(false)
                .idempotent(idempotent)
                .open_world(false),
        )
}

/// The tools, alphabetically (one page), with the extensions that are on.
pub fn definitions(extensions: Extensions) -> Vec<Tool> {
    vec![
        get_pipeline_classifications_tool(),
        get_pipelines_tool(),
        search_knowledge_tool(extensions),
    ]
}

/// The input schema of `get_pipeline_classifications`.
fn get_pipeline_classifications_input() -> Value {
    json!({
        "$schema": DRAFT_2020_12,
        "type": "object",
        "properties": {
            "pipeline_id": {
                "type": "string",
                "format": "uuid",
                "description": "Identifier of the pipeline.",
            },
        },
        "required": ["pipeline_id"],
    })
}

/// The output schema of `get_pipeline_classifications`.
fn get_pipeline_classifications_output() -> Value {
    json!({
        "$schema": DRAFT_2020_12,
        "type": "object",
        "properties": {
            "classifications": {
                "type": "array",
                "items": {"type": "string"},
                "description": "Classification names of the pipeline.",
            },
            "hierarchy": {
                "type": "array",
                "items": {
                    "type": "array",
                    "prefixItems": [{"type": "string"}, {"type": "string"}],
                    "items": false,
                    "minItems": 2,
                    "maxItems": 2,
                },
                "description": "Pairs [classification, inherited classification].",
            },
        },
        "required": ["classifications", "hierarchy"],
    })
}

/// `get_pipeline_classifications`: a pipeline's classifications and hierarchy.
fn get_pipeline_classifications_tool() -> Tool {
    tool(
        GET_PIPELINE_CLASSIFICATIONS,
        "List the classifications of a pipeline and their inheritance hierarchy (pairs of \
         classification and inherited classification). Requires read permission on the \
         pipeline and the classification allow-list `*`.",
        get_pipeline_classifications_input(),
        get_pipeline_classifications_output(),
        true,
    )
}

/// The input schema of `get_pipelines`.
fn get_pipelines_input() -> Value {
    json!({
        "$schema": DRAFT_2020_12,
        "type": "object",
        "properties": {
            "limit": {
                "type": ["integer", "null"],
                "minimum": 0,
                "default": DEFAULT_PIPELINE_LIMIT,
                "description": "Pipelines to return (0 returns none).",
            },
            "offset": {
                "type": ["integer", "null"],
                "minimum": 0,
                "default": 0,
                "description": "Pipelines to skip.",
            },
            "query": {
                "type": ["string", "null"],
                "description": "Substring of the pipeline name (case-sensitive; `%` and `_` are wildcards).",
            },
        },
    })
}

/// The output schema of `get_pipelines`.
fn get_pipelines_output() -> Value {
    json!({
        "$schema": DRAFT_2020_12,
        "type": "object",
        "properties": {
            "results": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "default_text_splitter_id": {"type": "string", "format": "uuid"},
                        "description": {"type": ["string", "null"]},
                        "embedding_model_id": {
                            "type": ["string", "null"],
                            "format": "uuid",
                            "description": "The vector embedding identifier of the pipeline.",
                        },
                        "name": {"type": "string"},
                        "pipeline_id": {"type": "string", "format": "uuid"},
                    },
                    "required": [
                        "default_text_splitter_id",
                        "description",
                        "embedding_model_id",
                        "name",
                        "pipeline_id",
                    ],
                },
            },
        },
        "required": ["results"],
    })
}

/// `get_pipelines`: the readable pipelines, a page at a time.
fn get_pipelines_tool() -> Tool {
    tool(
        GET_PIPELINES,
        "List the pipelines the key can read, ordered by pipeline id. `query` keeps \
         pipelines whose name contains it (case-sensitive; `%` and `_` act as wildcards). \
         Page with `limit` (default 10) and `offset` (default 0): the next page starts at \
         `offset + limit`; a page shorter than `limit` is the last one. \
         `embedding_model_id` in the output is the pipeline's vector embedding identifier, \
         not an embedding model id accepted by `search_knowledge`.",
        get_pipelines_input(),
        get_pipelines_output(),
        false,
    )
}

/// The input schema of `search_knowledge`.
fn search_knowledge_input() -> Value {
    json!({
        "$schema": DRAFT_2020_12,
        "type": "object",
        "properties": {
            "pipeline_id": {
                "type": "string",
                "format": "uuid",
                "description": "Identifier of the pipeline.",
            },
            "query": {"type": "string", "description": "Search text."},
            "classifications": {
                "type": "array",
                "items": {"type": "string"},
                "description": "Classifications of the reader (hierarchical matching).",
            },
            "type": {
                "type": "string",
                "enum": ToolSearchTypes::NAMES,
                "description": "Search type: `similarity`, `mmr` or `search` (full-text).",
            },
            "embedding_model_id": {
                "type": ["string", "null"],
                "format": "uuid",
                "description": "Id of an embedding model of the pipeline (default: the pipeline's).",
            },
            "params": {
                "type": ["object", "null"],
                "properties": {
                    "k": {"type": ["integer", "null"], "minimum": 0, "maximum": 65535},
                    "fetch_k": {"type": ["integer", "null"], "minimum": 0, "maximum": 65535},
                    "lambda_mult": {"type": ["number", "null"]},
                    "threshold": {"type": ["number", "null"]},
                    "embedding": {"description": "Accepted and ignored."},
                },
            },
        },
        "required": ["pipeline_id", "query", "classifications", "type"],
    })
}

/// The output schema of `search_knowledge`.
fn search_knowledge_output() -> Value {
    json!({
        "$schema": DRAFT_2020_12,
        "type": "object",
        "properties": {
            "results": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "classification": {"type": "string"},
                        "document_id": {"type": "string", "format": "uuid"},
                        "embedding": {"type": ["array", "null"], "items": {"type": "number"}},
                        "expired_at": {"type": ["string", "null"]},
                        "id": {"type": "string", "format": "uuid"},
                        "metadata": {"type": "object"},
                        "order_id": {"type": "integer"},
                        "page_content": {"type": "string"},
                        "score": {"type": ["number", "null"]},
                        "version": {"type": "integer"},
                    },
                    "required": [
                        "classification",
                        "document_id",
                        "id",
                        "metadata",
                        "order_id",
                        "version",
                    ],
                },
            },
        },
        "required": ["results"],
    })
}

/// The description of `search_knowledge`.
const SEARCH_KNOWLEDGE_DESCRIPTION: &str = "Search the fragments of a pipeline's documents. \
    `type`: `similarity` (vector distance), `mmr` (maximal marginal relevance) or `search` \
    (full-text). `classifications` names the classifications the reader holds (hierarchical \
    matching; an empty list returns nothing). `embedding_model_id` defaults to the \
    pipeline's embedding model. `params`: `k` (default 5), `fetch_k` (MMR candidates, \
    default 10), `lambda_mult` (MMR, default 0.5), `threshold`; when `params` is given, an \
    omitted `k` or `fetch_k` is 0. Distances are cosine. Requires read and execute \
    permission on the pipeline.";

/// What `search_knowledge`'s description adds when the extension `hybrid` is on.
fn hybrid_description() -> String {
    format!(
        " `type` `hybrid` fuses the similarity list and a full-text list of fragments holding \
         any word of the query by reciprocal rank (higher scores first; the pipeline needs \
         full-text search): `fetch_k` is the candidates per list (default \
         {DEFAULT_HYBRID_FETCH_K}), `rrf_k` (default {DEFAULT_RRF_K}), `similarity_weight` and \
         `full_text_weight` (default 1)."
    )
}

/// `search_knowledge`: a search of a pipeline.
fn search_knowledge_tool(extensions: Extensions) -> Tool {
    let mut input = search_knowledge_input();
    let mut description = SEARCH_KNOWLEDGE_DESCRIPTION.to_owned();
    if extensions.has(Extension::Hybrid) {
        description.push_str(&hybrid_description());
        if let Some(Value::Object(params)) = input.pointer_mut("/properties/params/properties") {
            for name in ["rrf_k", "similarity_weight", "full_text_weight"] {
                params.insert(name.to_owned(), json!({"type": ["number", "null"]}));
            }
        }
    }
    tool(
        SEARCH_KNOWLEDGE,
        description,
        input,
        search_knowledge_output(),
        true,
    )
}

/// How a tool call ends: a result (possibly `isError` for argument errors) or a JSON-RPC
/// error.
pub type ToolOutcome = Result<CallToolResult, ErrorData>;

/// Runs one tool for an authenticated key.
pub async fn call(
    state: &AppState,
    auth: &AuthContext,
    name: &str,
    arguments: Option<JsonObject>,
) -> ToolOutcome {
    let arguments = Value::Object(arguments.unwrap_or_default());
    match name {
        GET_PIPELINES => match parse(arguments) {
            Ok(args) => get_pipelines(state, auth, args).await,
            Err(result) => Ok(result),
        },
        GET_PIPELINE_CLASSIFICATIONS => match parse(arguments) {
            Ok(args) => get_pipeline_classifications(state, auth, args).await,
            Err(result) => Ok(result),
        },
        SEARCH_KNOWLEDGE => match parse(arguments) {
            Ok(args) => search_knowledge(state, auth, args).await,
            Err(result) => Ok(result),
        },
        _ => Err(ErrorData::invalid_params("tool not found", None)),
    }
}

/// Arguments that do not match the input schema: a result with `isError` true.
fn parse<T: DeserializeOwned>(arguments: Value) -> Result<T, CallToolResult> {
    serde_json::from_value(arguments).map_err(|error| {
        CallToolResult::error(vec![ContentBlock::text(format!(
            "failed to deserialize parameters: {error}"
        ))])
    })
}

/// A successful result: the output as one text block (keys alphabetical) and as structured
/// content.
fn output(value: Value) -> ToolOutcome {
    Ok(CallToolResult::structured(value))
}

/// `-32600` with the UUID parser's message.
pub fn parse_uuid(text: &str) -> Result<Uuid, ErrorData> {
    Uuid::parse_str(text).map_err(|error| ErrorData::invalid_request(error.to_string(), None))
}

/// The JSON-RPC error of a service failure (the mapping is [`ApiError::mcp_failure`]).
pub fn error_data(error: &ApiError) -> ErrorData {
    let failure = error.mcp_failure();
    ErrorData::new(ErrorCode(failure.code), failure.message, failure.data)
}

// ---------------------------------------------------------------------------------------------
// get_pipelines
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Deserialize)]
struct GetPipelinesArgs {
    #[serde(default)]
    limit: Option<u64>,
    #[serde(default)]
    offset: Option<u64>,
    #[serde(default)]
    query: Option<String>,
}

/// One pipeline as `get_pipelines` shows it.
fn pipeline_summary(row: &PipelineRow) -> Value {
    json!({
        "default_text_splitter_id": row.default_text_splitter_id,
        "description": row.description,
        "embedding_model_id": row.ve_id,
        "name": row.name,
        "pipeline_id": row.id,
    })
}

/// `GET /pipelines?name$contains=<query>&limit=..&offset=..`, ordered by id.
async fn get_pipelines(
    state: &AppState,
    auth: &AuthContext,
    args: GetPipelinesArgs,
) -> ToolOutcome {
    let limit = args.limit.unwrap_or(DEFAULT_PIPELINE_LIMIT);
    if limit == 0 {
        return output(json!({ "results": [] }));
    }
    let request = ListRequest {
        page: PageRequest::Offset {
            limit,
            offset: args.offset.unwrap_or(0),
        },
        count: false,
        order_by: vec![OrderField {
            field: "id",
            descending: false,
        }],
        explicit_order: false,
        filters: args
            .query
            .map(|query| FieldFilter {
                field: "name",
                op: FilterOp::Contains,
                value: Value::String(query),
            })
            .into_iter()
            .collect(),
        query_info: serde_json::Map::new(),
    };
    let envelope = crate::service::pipelines::list_mapped(&state.pool, auth, &request, |row| {
        Ok(pipeline_summary(&row))
    })
    .await
    .map_err(|error| error_data(&error))?;
    output(json!({ "results": envelope.data }))
}

// ---------------------------------------------------------------------------------------------
// get_pipeline_classifications
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Deserialize)]
struct PipelineArgs {
    pipeline_id: String,
}

async fn get_pipeline_classifications(
    state: &AppState,
    auth: &AuthContext,
    args: PipelineArgs,
) -> ToolOutcome {
    let id = parse_uuid(&args.pipeline_id)?;
    let (classifications, hierarchy) =
        crate::service::pipelines::classifications(&state.pool, auth, id)
            .await
            .map_err(|error| error_data(&error))?;
    let hierarchy: Vec<[String; 2]> = hierarchy.into_iter().map(|(a, b)| [a, b]).collect();
    output(json!({ "classifications": classifications, "hierarchy": hierarchy }))
}

// ---------------------------------------------------------------------------------------------
// search_knowledge
// ---------------------------------------------------------------------------------------------

/// `params` of `search_knowledge`: the search parameters, except that `embedding` is accepted
/// and ignored (the model is chosen by `embedding_model_id`).
#[derive(Debug, Clone, Default, Deserialize)]
pub struct SearchToolParams {
    #[serde(default)]
    pub k: Option<u16>,
    #[serde(default)]
    pub fetch_k: Option<u16>,
    #[serde(default)]
    pub lambda_mult: Option<f64>,
    #[serde(default)]
    pub threshold: Option<f64>,
    #[serde(default)]
    pub embedding: Option<Value>,
    #[serde(default)]
    pub rrf_k: Option<f64>,
    #[serde(default)]
    pub similarity_weight: Option<f64>,
    #[serde(default)]
    pub full_text_weight: Option<f64>,
}

impl SearchToolParams {
    /// The search parameters as sent, without `embedding`.
    pub fn as_search_params(&self) -> SearchParams {
        SearchParams {
            k: self.k,
            fetch_k: self.fetch_k,
            lambda_mult: self.lambda_mult,
            threshold: self.threshold,
            embedding: None,
            rrf_k: self.rrf_k,
            similarity_weight: self.similarity_weight,
            full_text_weight: self.full_text_weight,
            rerank: None,
            rerank_candidates: None,
        }
    }
}

/// The arguments of `search_knowledge`, as sent.
#[derive(Debug, Deserialize)]
pub struct SearchArgs {
    pub pipeline_id: String,
    pub query: String,
    pub classifications: Vec<String>,
    #[serde(rename = "type")]
    pub kind: Listed<ToolSearchTypes>,
    #[serde(default)]
    pub embedding_model_id: Option<String>,
    #[serde(default)]
    pub params: Option<SearchToolParams>,
}

async fn search_knowledge(state: &AppState, auth: &AuthContext, args: SearchArgs) -> ToolOutcome {
    let fragments = super::search::run(state, auth, args).await?;
    let results: Vec<Value> = fragments.into_iter().map(with_null_fields).collect();
    output(json!({ "results": results }))
}

/// MCP fragments carry `embedding` and `expired_at` as null (addendum §16).
fn with_null_fields(mut fragment: Value) -> Value {
    if let Value::Object(map) = &mut fragment {
        map.insert("embedding".to_owned(), Value::Null);
        map.insert("expired_at".to_owned(), Value::Null);
    }
    fragment
}
