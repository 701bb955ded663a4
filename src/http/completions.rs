//! Enriched chat completions (extension `conversations`): the relay's request read as an agent
//! execution's input, and the agent's answer written back in the chat-completions form — one
//! `chat.completion` object, or server-sent `chat.completion.chunk` objects ending with
//! `data: [DONE]`.

use std::collections::HashMap;
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use futures_util::StreamExt;
use poem::http::StatusCode;
use poem::{Body, Response};
use serde::Deserialize;
use serde_json::{Value, json};
use trove_query::filter::Filter;
use uuid::Uuid;

use super::shell::OpenStream;
use crate::agents::definition::{RenderedMessage, Role};
use crate::error::ApiError;
use crate::providers::llm::{ChatEvent, ChatStream, Usage, collect};
use crate::service::agents::Completion;

/// The body of an enriched completion: the chat-completions fields Trove reads. Any other
/// field is ignored.
#[derive(Debug, Deserialize)]
pub struct CompletionBody {
    messages: Vec<InputMessage>,
    /// Echoed in the answer when the LLM names no model.
    #[serde(default)]
    model: Option<Value>,
    /// `true`: server-sent chunks; `false`, `null` or omitted: one object.
    #[serde(default)]
    stream: Option<bool>,
    /// Retrieval placeholder name → filter, as in an execution.
    #[serde(default)]
    pub filters: Option<HashMap<String, Filter>>,
}

/// A message of the request. `developer` is a system message; other roles (`tool`, …) are
/// refused as unknown values (422).
#[derive(Debug, Deserialize)]
struct InputMessage {
    role: InputRole,
    #[serde(default)]
    content: Option<Content>,
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "lowercase")]
enum InputRole {
    System,
    Developer,
    User,
    Assistant,
}

impl From<InputRole> for Role {
    fn from(role: InputRole) -> Self {
        match role {
            InputRole::System | InputRole::Developer => Self::System,
            InputRole::User => Self::User,
            InputRole::Assistant => Self::Assistant,
        }
    }
}

/// A message's content: a string, or content parts whose texts are joined by newlines (parts
/// without text, such as images, count for nothing).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Content {
    Text(String),
    Parts(Vec<ContentPart>),
}

#[derive(Debug, Deserialize)]
struct ContentPart {
    #[serde(default)]
    text: Option<String>,
}

impl InputMessage {
    fn text(&self) -> String {
        match &self.content {
            None => String::new(),
            Some(Content::Text(text)) => text.clone(),
            Some(Content::Parts(parts)) => parts
                .iter()
                .filter_map(|part| part.text.as_deref())
                .collect::<Vec<_>>()
                .join("\n"),
        }
    }
}

impl CompletionBody {
    /// Whether the answer streams.
    pub fn streams(&self) -> bool {
        self.stream.unwrap_or(false)
    }

    /// The conversation: the last `user` message is the query, the messages before it the
    /// history; messages after it are not read.
    pub fn completion(&self) -> Completion {
        let last_user = self
            .messages
            .iter()
            .rposition(|message| matches!(message.role, InputRole::User));
        let Some(last_user) = last_user else {
            return Completion {
                query: None,
                history: Vec::new(),
            };
        };
        Completion {
            query: Some(self.messages[last_user].text()),
            history: self.messages[..last_user]
                .iter()
                .map(|message| RenderedMessage {
                    role: message.role.into(),
                    content: message.text(),
                })
                .collect(),
        }
    }

    /// The model an answer names: the LLM's, else the request's.
    fn model(&self, llm_model: Option<String>) -> String {
        llm_model
            .or_else(|| match &self.model {
                Some(Value::String(model)) => Some(model.clone()),
                _ => None,
            })
            .unwrap_or_default()
    }
}

/// What every object of one answer repeats.
struct Head {
    id: String,
    created: u64,
    model: String,
}

impl Head {
    fn new(model: String) -> Self {
        Self {
            id: format!("chatcmpl-{}", Uuid::new_v4().simple()),
            created: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            model,
        }
    }

    /// One `chat.completion.chunk` with this choice (and `usage`, when given).
    fn chunk(&self, choice: Value, usage: Option<&Usage>) -> Bytes {
        let mut chunk = json!({
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [choice],
        });
        if let Some(usage) = usage {
            chunk["usage"] = json!(usage);
        }
        Bytes::from(format!("data: {chunk}\n\n"))
    }
}

/// The answer's events as a response in the chat-completions form. Not streaming, the whole
/// answer is read first (any failure is 500 `Stream error: <reason>`); streaming, the first
/// content chunk carries the role, the last one the finish reason (and `usage` when the model
/// reported it), then `data: [DONE]`. A failure during the stream only ends the body, without
/// `[DONE]`.
pub async fn respond(
    body: &CompletionBody,
    llm_model: Option<String>,
    events: ChatStream,
) -> Result<Response, ApiError> {
    let head = Head::new(body.model(llm_model));
    if !body.streams() {
        let (text, finish_reason, usage) = collect(events)
            .await
            .map_err(|e| ApiError::Stream(e.to_string()))?;
        let mut object = json!({
            "id": head.id,
            "object": "chat.completion",
            "created": head.created,
            "model": head.model,
            "choices": [{
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": finish_reason,
            }],
        });
        if let Some(usage) = usage {
            object["usage"] = json!(usage);
        }
        return Ok(Response::builder()
            .status(StatusCode::OK)
            .content_type("application/json")
            .body(object.to_string()));
    }
    let mut role_sent = false;
    let chunks = events
        .take_while(|event| {
            if let Err(error) = event {
                tracing::warn!(%error, "model server failed during the answer; ending the stream");
            }
            std::future::ready(event.is_ok())
        })
        .filter_map(move |event| {
            let bytes = match event {
                Ok(ChatEvent::Delta(content)) if content.is_empty() => None,
                Ok(ChatEvent::Delta(content)) => {
                    let delta = if role_sent {
                        json!({"content": content})
                    } else {
                        role_sent = true;
                        json!({"role": "assistant", "content": content})
                    };
                    let choice = json!({"index": 0, "delta": delta, "finish_reason": null});
                    Some(head.chunk(choice, None))
                }
                Ok(ChatEvent::Done {
                    finish_reason,
                    usage,
                }) => {
                    let delta = if role_sent {
                        json!({})
                    } else {
                        json!({"role": "assistant", "content": ""})
                    };
                    let choice =
                        json!({"index": 0, "delta": delta, "finish_reason": finish_reason});
                    let mut bytes = head.chunk(choice, usage.as_ref()).to_vec();
                    bytes.extend_from_slice(b"data: [DONE]\n\n");
                    Some(Bytes::from(bytes))
                }
                Err(_) => None,
            };
            std::future::ready(bytes)
        })
        .map(Ok::<Bytes, std::io::Error>);
    let mut response = Response::builder()
        .status(StatusCode::OK)
        .content_type("text/event-stream")
        .header("cache-control", "no-cache")
        .body(Body::from_bytes_stream(chunks));
    response.set_data(OpenStream);
    Ok(response)
}
