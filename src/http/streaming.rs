//! Answers of a model server as the client asked for them (`stream`): NDJSON lines, server-sent
//! events, or the whole text. The head is sent once the model server accepted the request;
//! afterwards a failure only ends the body (no `done`, no error object). Each chunk is written
//! as it arrives; a client that leaves drops the body and with it the model server's answer.

use bytes::Bytes;
use futures_util::StreamExt;
use poem::http::StatusCode;
use poem::{Body, IntoResponse, Response};
use poem_openapi::ApiResponse;
use poem_openapi::registry::{MetaMediaType, MetaResponse, MetaResponses, MetaSchemaRef, Registry};
use serde_json::{Value, json};

use super::shell::OpenStream;
use crate::error::ApiError;
use crate::providers::llm::{ChatEvent, ChatStream, collect};

/// How the client asked for the answer (`stream`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StreamMode {
    /// `true`, omitted or `null`: `application/x-ndjson`.
    #[default]
    Ndjson,
    /// `"sse"`: `text/event-stream`.
    Sse,
    /// `false`: `text/plain`, the whole answer.
    Plain,
}

impl StreamMode {
    /// Reads `stream`: a boolean or `"sse"`; anything else is 422 like any wrong body type.
    pub fn from_field(value: Option<&Value>) -> Result<Self, ApiError> {
        match value {
            None | Some(Value::Null) | Some(Value::Bool(true)) => Ok(Self::Ndjson),
            Some(Value::Bool(false)) => Ok(Self::Plain),
            Some(Value::String(s)) if s == "sse" => Ok(Self::Sse),
            Some(other) => Err(ApiError::Plain {
                status: StatusCode::UNPROCESSABLE_ENTITY,
                message: format!(
                    "Failed to deserialize the JSON body into the target type: stream: expected a boolean or \"sse\", got {other}"
                ),
            }),
        }
    }

    /// [`StreamMode::from_field`] for a `stream` kept as written (in bodies read without a
    /// nesting limit, where a value is not built into a tree); one nested too deep for a JSON
    /// value is refused as written.
    pub fn from_raw(raw: Option<&serde_json::value::RawValue>) -> Result<Self, ApiError> {
        let Some(raw) = raw else {
            return Ok(Self::Ndjson);
        };
        match serde_json::from_str::<Value>(raw.get()) {
            Ok(value) => Self::from_field(Some(&value)),
            Err(_) => Err(ApiError::Plain {
                status: StatusCode::UNPROCESSABLE_ENTITY,
                message: format!(
                    "Failed to deserialize the JSON body into the target type: stream: expected a boolean or \"sse\", got {}",
                    raw.get()
                ),
            }),
        }
    }
}

/// One NDJSON line or SSE event of an answer event.
fn frame(mode: StreamMode, event: &ChatEvent) -> Option<Bytes> {
    let text = match (mode, event) {
        (_, ChatEvent::Delta(content)) if content.is_empty() => return None,
        (StreamMode::Sse, ChatEvent::Delta(content)) => {
            format!("event: delta\ndata: {}\n\n", json!({ "content": content }))
        }
        (
            StreamMode::Sse,
            ChatEvent::Done {
                finish_reason,
                usage,
            },
        ) => format!(
            "event: done\ndata: {}\n\n",
            json!({ "finish_reason": finish_reason, "usage": usage })
        ),
        (_, ChatEvent::Delta(content)) => {
            format!("{}\n", json!({ "type": "delta", "content": content }))
        }
        (
            _,
            ChatEvent::Done {
                finish_reason,
                usage,
            },
        ) => format!(
            "{}\n",
            json!({ "type": "done", "finish_reason": finish_reason, "usage": usage })
        ),
    };
    Some(Bytes::from(text))
}

/// The body of a streamed answer: frames until the first failure, which ends it.
fn streamed_body(mode: StreamMode, events: ChatStream) -> Body {
    let frames = events
        .take_while(|event| {
            if let Err(error) = event {
                tracing::warn!(%error, "model server failed during the answer; ending the stream");
            }
            std::future::ready(event.is_ok())
        })
        .filter_map(move |event| std::future::ready(event.ok().and_then(|e| frame(mode, &e))))
        .map(Ok::<Bytes, std::io::Error>);
    Body::from_bytes_stream(frames)
}

/// The answer of a model server, as a response.
pub struct Answer(Response);

impl Answer {
    /// Renders `events` in `mode`. With `Plain` the whole answer is read first, so any
    /// failure is 500 `Stream error: <reason>`.
    pub async fn render(mode: StreamMode, events: ChatStream) -> Result<Self, ApiError> {
        let response = match mode {
            StreamMode::Plain => {
                let (text, _, _) = collect(events)
                    .await
                    .map_err(|e| ApiError::Stream(e.to_string()))?;
                Response::builder()
                    .status(StatusCode::OK)
                    .content_type("text/plain; charset=utf-8")
                    .body(text)
            }
            StreamMode::Ndjson | StreamMode::Sse => {
                let content_type = if mode == StreamMode::Sse {
                    "text/event-stream"
                } else {
                    "application/x-ndjson"
                };
                let mut response = Response::builder()
                    .status(StatusCode::OK)
                    .content_type(content_type)
                    .header("cache-control", "no-cache")
                    .body(streamed_body(mode, events));
                response.set_data(OpenStream);
                response
            }
        };
        Ok(Self(response))
    }

    /// Adds a header (the tracing id of an execution).
    pub fn with_header(mut self, name: &'static str, value: &str) -> Self {
        if let Ok(value) = poem::http::HeaderValue::from_str(value) {
            self.0.headers_mut().insert(name, value);
        }
        self
    }
}

impl IntoResponse for Answer {
    fn into_response(self) -> Response {
        self.0
    }
}

impl ApiResponse for Answer {
    fn meta() -> MetaResponses {
        let text = |content_type| MetaMediaType {
            content_type,
            schema: MetaSchemaRef::Inline(Box::new(poem_openapi::registry::MetaSchema::new(
                "string",
            ))),
        };
        MetaResponses {
            responses: vec![MetaResponse {
                description: "The answer: NDJSON lines `{\"type\":\"delta\",\"content\"}` then \
                              `{\"type\":\"done\",\"finish_reason\",\"usage\"}` (`stream` true or \
                              omitted), server-sent events `delta` and `done` (`\"sse\"`), or \
                              the whole text (`false`)",
                status: Some(200),
                status_range: None,
                content: vec![
                    text("application/x-ndjson"),
                    text("text/event-stream"),
                    text("text/plain; charset=utf-8"),
                ],
                headers: vec![],
            }],
        }
    }

    fn register(_registry: &mut Registry) {}
}
