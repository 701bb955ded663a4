//! `POST /compat/v1/chat/completions`: the chat-completions relay. The request goes to the
//! LLM named by `x-llm-id` with that LLM's key; the model server's status, content type and
//! body come back unchanged, chunk by chunk. With the extension `conversations`, a request with
//! all three enrichment headers is an enriched completion instead ([`super::completions`]).

use std::collections::{BTreeMap, HashMap};

use poem::http::StatusCode;
use poem::{Body, IntoResponse, Request, RequestBody, Response};
use poem_openapi::registry::{
    MetaMediaType, MetaRequest, MetaResponse, MetaResponses, MetaSchemaRef, Registry,
};
use poem_openapi::{ApiExtractor, ApiExtractorType, ApiResponse, ExtractParamOptions, OpenApi};
use serde_json::Value;
use trove_query::classification::ClassificationRequest;
use uuid::Uuid;

use super::ApiTags;
use super::agents::header_id;
use super::completions::{self, CompletionBody};
use super::connections::unless_client_leaves;
use super::extract::{Auth, ForwardedBody, read_json, required_header, state};
use super::shell::OpenStream;
use crate::config::Extension;
use crate::error::ApiError;
use crate::service::agents::{self, ExecuteOptions, RetrievalInput};
use crate::service::llms as service;
use crate::state::AppState;

/// Headers of Trove's enriched completions: all or none of them.
const ENRICHMENT_HEADERS: [&str; 3] = ["x-agent-id", "x-pipeline-id", "x-pipeline-classification"];

/// The relay's headers, checked before the body is read: `x-llm-id` (required, a UUID) and the
/// enrichment headers, all or none. All of them answer 501, unless the extension
/// `conversations` is on: then they name the agent, the pipeline and the classifications of
/// an enriched completion.
pub struct RelayHeaders {
    llm_id: Uuid,
    enrichment: Option<Enrichment>,
}

/// What the enrichment headers name.
pub struct Enrichment {
    agent_id: Uuid,
    pipeline_id: Uuid,
    /// `X-Pipeline-Classification`: names separated by commas (spaces around them dropped),
    /// matched hierarchically as an execution's array.
    classifications: Vec<String>,
}

/// Whether a request with all the enrichment headers is an enriched completion.
fn enriches(request: &Request) -> bool {
    state(request).is_ok_and(|state| state.config.extensions.has(Extension::Conversations))
}

impl Enrichment {
    /// Reads the three headers as an execution reads its own: not visible ASCII is plain 400
    /// `invalid HTTP header (<name>)`, an id that is not a UUID 400 `Invalid agent ID` /
    /// `Invalid pipeline ID`.
    fn read(request: &Request) -> Result<Self, ApiError> {
        let agent = required_header(request, ENRICHMENT_HEADERS[0])?;
        let pipeline = required_header(request, ENRICHMENT_HEADERS[1])?;
        let classification = required_header(request, ENRICHMENT_HEADERS[2])?;
        Ok(Self {
            agent_id: header_id(agent, "Invalid agent ID")?,
            pipeline_id: header_id(pipeline, "Invalid pipeline ID")?,
            classifications: classification
                .split(',')
                .map(str::trim)
                .filter(|name| !name.is_empty())
                .map(str::to_owned)
                .collect(),
        })
    }
}

impl<'a> ApiExtractor<'a> for RelayHeaders {
    const TYPES: &'static [ApiExtractorType] = &[];
    type ParamType = ();
    type ParamRawType = ();

    async fn from_request(
        request: &'a Request,
        _body: &mut RequestBody,
        _opts: ExtractParamOptions<()>,
    ) -> poem::Result<Self> {
        let raw = required_header(request, "x-llm-id")?;
        let llm_id = Uuid::parse_str(raw)
            .map_err(|e| ApiError::InvalidHeaderId(format!("Invalid LLM ID: {e}")))?;
        let present = ENRICHMENT_HEADERS
            .iter()
            .filter(|name| request.headers().contains_key(**name))
            .count();
        match present {
            0 => Ok(Self {
                llm_id,
                enrichment: None,
            }),
            3 if enriches(request) => Ok(Self {
                llm_id,
                enrichment: Some(Enrichment::read(request)?),
            }),
            3 => Err(
                ApiError::NotImplemented("Trove enriched completions not implemented yet").into(),
            ),
            _ => Err(ApiError::MissingRelayHeaders.into()),
        }
    }
}

/// The relay's body: any JSON object, forwarded; for an enriched completion the
/// chat-completions fields Trove reads (read, like an execution's, without a nesting limit
/// for `filters`).
pub enum RelayBody {
    Forwarded(BTreeMap<String, Value>),
    Enriched(CompletionBody),
}

impl<'a> ApiExtractor<'a> for RelayBody {
    const TYPES: &'static [ApiExtractorType] = &[ApiExtractorType::RequestObject];
    type ParamType = ();
    type ParamRawType = ();

    fn register(registry: &mut Registry) {
        <ForwardedBody<BTreeMap<String, Value>> as ApiExtractor<'a>>::register(registry);
    }

    fn request_meta() -> Option<MetaRequest> {
        <ForwardedBody<BTreeMap<String, Value>> as ApiExtractor<'a>>::request_meta()
    }

    async fn from_request(
        request: &'a Request,
        body: &mut RequestBody,
        _opts: ExtractParamOptions<()>,
    ) -> poem::Result<Self> {
        // The headers were read first: all three are present only when they are valid.
        let enriched = ENRICHMENT_HEADERS
            .iter()
            .all(|name| request.headers().contains_key(*name))
            && enriches(request);
        Ok(if enriched {
            Self::Enriched(read_json(request, body, false, true).await?)
        } else {
            Self::Forwarded(read_json(request, body, false, false).await?)
        })
    }
}

/// The model server's answer, passed on as it came.
pub struct Relayed(Response);

impl IntoResponse for Relayed {
    fn into_response(self) -> Response {
        self.0
    }
}

impl ApiResponse for Relayed {
    fn meta() -> MetaResponses {
        MetaResponses {
            responses: vec![MetaResponse {
                description: "The model server's answer: its status, content type and body, \
                              unchanged (streamed when the request asked for a stream)",
                status: None,
                status_range: None,
                content: vec![MetaMediaType {
                    content_type: "application/json",
                    schema: MetaSchemaRef::Inline(Box::new(
                        poem_openapi::registry::MetaSchema::ANY,
                    )),
                }],
                headers: vec![],
            }],
        }
    }

    fn register(_registry: &mut Registry) {}
}

#[derive(Default)]
pub struct RelayApi;

#[OpenApi(tag = "ApiTags::Llms")]
impl RelayApi {
    /// Relay a chat completion
    ///
    /// Needs read and execute on the LLM named by `x-llm-id`. The body (any JSON object) goes
    /// to the LLM's chat-completions URL with its key; its `model` replaces the body's, its
    /// parameters fill absent keys. `X-Agent-Id`, `X-Pipeline-Id` and
    /// `X-Pipeline-Classification` are all or none (all: 501).
    #[oai(path = "/compat/v1/chat/completions", method = "post")]
    async fn relay(
        &self,
        auth: Auth,
        headers: RelayHeaders,
        req: &Request,
        body: RelayBody,
    ) -> poem::Result<Relayed> {
        let state = state(req)?;
        let body = match (headers.enrichment, body) {
            (None, RelayBody::Forwarded(body)) => body,
            (Some(enrichment), RelayBody::Enriched(body)) => {
                let answer = enriched(state, &auth, headers.llm_id, enrichment, body);
                return Ok(Relayed(unless_client_leaves(req, answer).await?));
            }
            _ => {
                return Err(
                    ApiError::Internal("relay headers and body disagree".to_owned()).into(),
                );
            }
        };
        let body = body.into_iter().collect();
        let answer =
            unless_client_leaves(req, service::relay(state, &auth.0, headers.llm_id, body)).await?;
        let status =
            StatusCode::from_u16(answer.status).map_err(|e| ApiError::Internal(e.to_string()))?;
        let mut builder = Response::builder().status(status);
        if let Some(content_type) = answer.content_type {
            builder = builder.header("content-type", content_type);
        }
        let mut response = builder.body(Body::from_bytes_stream(answer.body));
        response.set_data(OpenStream);
        Ok(Relayed(response))
    }
}

/// An enriched completion: the agent runs as an execution (retrieval with the headers'
/// classifications and the body's `filters`, rendering, the LLM's answer) with the last user
/// message as its variable and the earlier messages as its history; the answer comes back in
/// the chat-completions form.
async fn enriched(
    state: &AppState,
    auth: &Auth,
    llm_id: Uuid,
    enrichment: Enrichment,
    mut body: CompletionBody,
) -> Result<Response, ApiError> {
    let input = RetrievalInput {
        variables: HashMap::new(),
        classification: ClassificationRequest::hierarchical(enrichment.classifications),
        filters: body.filters.take().unwrap_or_default(),
    };
    let options = ExecuteOptions {
        llm_id,
        tracing: false,
        whole_answer: !body.streams(),
        context_id: None,
        completion: Some(body.completion()),
    };
    let execution = agents::execute(
        state,
        &auth.0,
        enrichment.agent_id,
        enrichment.pipeline_id,
        input,
        options,
    )
    .await?;
    completions::respond(&body, execution.model, execution.events).await
}
