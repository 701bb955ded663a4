//! `POST /compat/v1/chat/completions`: the chat-completions relay. The request goes to the
//! LLM named by `x-llm-id` with that LLM's key; the model server's status, content type and
//! body come back unchanged, chunk by chunk.

use std::collections::BTreeMap;

use poem::http::StatusCode;
use poem::{Body, IntoResponse, Request, RequestBody, Response};
use poem_openapi::registry::{MetaMediaType, MetaResponse, MetaResponses, MetaSchemaRef, Registry};
use poem_openapi::{ApiExtractor, ApiExtractorType, ApiResponse, ExtractParamOptions, OpenApi};
use serde_json::Value;
use uuid::Uuid;

use super::ApiTags;
use super::connections::unless_client_leaves;
use super::extract::{Auth, ForwardedBody, required_header, state};
use super::shell::OpenStream;
use crate::error::ApiError;
use crate::service::llms as service;

/// Headers of Trove's enriched completions: all or none of them.
const ENRICHMENT_HEADERS: [&str; 3] = ["x-agent-id", "x-pipeline-id", "x-pipeline-classification"];

/// The relay's headers, checked before the body is read: `x-llm-id` (required, a UUID) and the
/// enrichment headers (none of them).
pub struct RelayHeaders {
    llm_id: Uuid,
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
            0 => Ok(Self { llm_id }),
            3 => Err(
                ApiError::NotImplemented("Trove enriched completions not implemented yet").into(),
            ),
            _ => Err(ApiError::MissingRelayHeaders.into()),
        }
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
        body: ForwardedBody<BTreeMap<String, Value>>,
    ) -> poem::Result<Relayed> {
        let state = state(req)?;
        let body = body.0.into_iter().collect();
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
