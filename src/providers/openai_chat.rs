//! The `openai` chat provider: any OpenAI-compatible chat-completions server.
//!
//! `POST <endpoint>/chat/completions` with the merged parameters as body fields, plus `model`
//! (when the LLM names one), `messages`, `stream: true` and, unless the parameters choose
//! otherwise, `stream_options: {"include_usage": true}` so that the server reports token counts.
//!
//! The answer is server-sent events: each `data:` is a chunk
//! `{"choices":[{"delta":{"content":…},"finish_reason":…}],"usage":…}` and `data: [DONE]` ends
//! it. The usage chunk usually comes last with empty `choices`, so the finish reason and the
//! usage are remembered until `[DONE]`. Some servers omit `[DONE]`: a body that ends cleanly
//! after a finish reason is complete too, one that ends before it was cut short. A server that
//! ignores `stream` and answers one `application/json` completion is read the same way.

use eventsource_stream::{Event, EventStreamError, Eventsource};
use futures_util::stream::{self, StreamExt};
use reqwest::header::CONTENT_TYPE;
use serde::Deserialize;
use serde_json::{Value, json};

use super::llm::{
    ChatDecoder, ChatMessage, ChatStream, Decoded, FailureContext, LlmError, LlmTarget, Usage,
    chat_stream, messages_json, passthrough_parameters,
};

/// The URL and JSON body of a streamed chat request.
pub(super) fn request(target: &LlmTarget<'_>, messages: &[ChatMessage]) -> (String, Value) {
    let mut body = passthrough_parameters(target.parameters);
    if let Some(model) = target.model {
        body.insert("model".to_owned(), json!(model));
    }
    body.insert("messages".to_owned(), messages_json(messages));
    body.insert("stream".to_owned(), json!(true));
    // Without it OpenAI sends no usage in streamed answers; an LLM whose server rejects the
    // field can set its own `stream_options` in its parameters.
    body.entry("stream_options")
        .or_insert_with(|| json!({"include_usage": true}));
    (
        format!("{}/chat/completions", target.endpoint),
        Value::Object(body),
    )
}

/// The events of a 2xx answer.
pub(super) fn events(response: reqwest::Response, failures: FailureContext) -> ChatStream {
    let decoder = OpenAiDecoder {
        failures: failures.clone(),
        finish_reason: None,
        usage: None,
    };
    let is_json = response
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| value.starts_with("application/json"));
    if is_json {
        // A whole completion is read as if it were the only event of a stream.
        let whole = stream::once(async move {
            match response.bytes().await {
                Ok(body) => Ok(Event {
                    data: String::from_utf8_lossy(&body).into_owned(),
                    ..Event::default()
                }),
                Err(err) => Err(failures.transport(err)),
            }
        });
        return chat_stream(whole, decoder);
    }
    let events = response
        .bytes_stream()
        .eventsource()
        .map(move |event| match event {
            Ok(event) => Ok(event),
            Err(EventStreamError::Transport(err)) => Err(failures.transport(err)),
            Err(EventStreamError::Utf8(err)) => Err(failures.malformed(&err, None)),
            Err(EventStreamError::Parser(err)) => Err(failures.malformed(&err, None)),
        });
    chat_stream(events, decoder)
}

/// Reads chunks, remembering what `Done` will report.
struct OpenAiDecoder {
    failures: FailureContext,
    /// The last non-null `finish_reason` of the first choice.
    finish_reason: Option<String>,
    /// The last usage object seen.
    usage: Option<Usage>,
}

/// A chunk of a streamed answer, or a whole completion (`message` instead of `delta`).
#[derive(Deserialize)]
struct WireChunk {
    #[serde(default)]
    choices: Option<Vec<WireChoice>>,
    #[serde(default)]
    usage: Option<WireUsage>,
    #[serde(default)]
    error: Option<Value>,
}

#[derive(Deserialize)]
struct WireChoice {
    #[serde(default)]
    index: u64,
    #[serde(default)]
    delta: Option<WireContent>,
    #[serde(default)]
    message: Option<WireContent>,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct WireContent {
    #[serde(default)]
    content: Option<String>,
}

/// Usage as servers send it: some leave out `total_tokens`.
#[derive(Deserialize)]
struct WireUsage {
    prompt_tokens: Option<u64>,
    completion_tokens: Option<u64>,
    total_tokens: Option<u64>,
}

impl WireUsage {
    fn into_usage(self) -> Option<Usage> {
        let prompt_tokens = self.prompt_tokens?;
        let completion_tokens = self.completion_tokens?;
        Some(Usage {
            prompt_tokens,
            completion_tokens,
            total_tokens: self
                .total_tokens
                .unwrap_or(prompt_tokens.saturating_add(completion_tokens)),
        })
    }
}

impl ChatDecoder for OpenAiDecoder {
    type Unit = Event;

    fn decode(&mut self, event: Event) -> Result<Decoded, LlmError> {
        let data = event.data.trim();
        if data == "[DONE]" {
            return Ok(Decoded {
                delta: None,
                done: Some((self.finish_reason.take(), self.usage.take())),
            });
        }
        if event.event == "error" {
            let error = serde_json::from_str(data).unwrap_or_else(|_| json!(data));
            return Err(self.failures.upstream(&error));
        }
        if data.is_empty() {
            return Ok(Decoded::default());
        }
        let chunk: WireChunk =
            serde_json::from_str(data).map_err(|err| self.failures.malformed(&err, Some(data)))?;
        if let Some(error) = chunk.error {
            return Err(self.failures.upstream(&error));
        }
        if let Some(usage) = chunk.usage.and_then(WireUsage::into_usage) {
            self.usage = Some(usage);
        }
        let mut content: Option<String> = None;
        // Only the first choice is the answer; others exist only when a request asks for `n`.
        for choice in chunk.choices.unwrap_or_default() {
            if choice.index != 0 {
                continue;
            }
            if let Some(reason) = choice.finish_reason {
                self.finish_reason = Some(reason);
            }
            if let Some(text) = choice.delta.or(choice.message).and_then(|c| c.content) {
                content.get_or_insert_with(String::new).push_str(&text);
            }
        }
        Ok(Decoded::content(content))
    }

    fn finish(&mut self) -> Result<(Option<String>, Option<Usage>), LlmError> {
        match self.finish_reason.take() {
            Some(reason) => Ok((Some(reason), self.usage.take())),
            None => Err(LlmError::Truncated),
        }
    }
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "a test fails by panicking")]
mod tests {
    use super::*;
    use crate::providers::llm::{ChatEvent, LlmProvider};

    fn decoder() -> OpenAiDecoder {
        OpenAiDecoder {
            failures: FailureContext::for_tests(Some("sk-secret")),
            finish_reason: None,
            usage: None,
        }
    }

    fn data(text: &str) -> Event {
        Event {
            data: text.to_owned(),
            ..Event::default()
        }
    }

    #[test]
    fn request_adds_model_messages_stream_and_usage_option() {
        let Value::Object(parameters) =
            json!({"temperature": 0.5, "model": "ignored", "messages": "ignored", "stream": false})
        else {
            unreachable!()
        };
        let target = LlmTarget {
            provider: LlmProvider::OpenAi,
            endpoint: "http://host/v1",
            model: Some("gpt-x"),
            api_key: None,
            parameters: &parameters,
        };
        let (url, body) = request(&target, &[ChatMessage::user("hi")]);
        assert_eq!(url, "http://host/v1/chat/completions");
        assert_eq!(
            body,
            json!({
                "temperature": 0.5,
                "model": "gpt-x",
                "messages": [{"role": "user", "content": "hi"}],
                "stream": true,
                "stream_options": {"include_usage": true}
            })
        );
    }

    #[test]
    fn request_keeps_given_stream_options_and_omits_absent_model() {
        let Value::Object(parameters) = json!({"stream_options": {"include_usage": false}}) else {
            unreachable!()
        };
        let target = LlmTarget {
            provider: LlmProvider::OpenAi,
            endpoint: "http://host/v1",
            model: None,
            api_key: None,
            parameters: &parameters,
        };
        let (_, body) = request(&target, &[]);
        assert_eq!(body["stream_options"], json!({"include_usage": false}));
        assert!(body.get("model").is_none());
    }

    #[test]
    fn chunks_give_deltas_then_done_at_done_marker() {
        let mut decoder = decoder();
        let role = decoder
            .decode(data(
                r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}"#,
            ))
            .unwrap();
        assert_eq!(role, Decoded::default());
        let text = decoder
            .decode(data(
                r#"{"choices":[{"index":0,"delta":{"content":"Hi"}}],"usage":null}"#,
            ))
            .unwrap();
        assert_eq!(text, Decoded::content(Some("Hi".to_owned())));
        decoder
            .decode(data(
                r#"{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#,
            ))
            .unwrap();
        decoder
            .decode(data(
                r#"{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2}}"#,
            ))
            .unwrap();
        let done = decoder.decode(data("[DONE]")).unwrap();
        assert_eq!(
            done.done,
            Some((
                Some("stop".to_owned()),
                Some(Usage {
                    prompt_tokens: 3,
                    completion_tokens: 2,
                    total_tokens: 5
                })
            ))
        );
    }

    #[test]
    fn end_of_body_is_done_only_after_a_finish_reason() {
        let mut decoder = decoder();
        assert!(matches!(decoder.finish(), Err(LlmError::Truncated)));
        decoder
            .decode(data(
                r#"{"choices":[{"index":0,"delta":{"content":"x"},"finish_reason":"length"}]}"#,
            ))
            .unwrap();
        assert_eq!(decoder.finish().unwrap(), (Some("length".to_owned()), None));
    }

    #[test]
    fn in_band_errors_and_bad_json_are_errors_with_the_key_redacted() {
        let err = decoder()
            .decode(data(r#"{"error":{"message":"key sk-secret revoked"}}"#))
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "model server reported an error: key [redacted] revoked"
        );
        let err = decoder().decode(data("{not json sk-secret")).unwrap_err();
        assert!(matches!(err, LlmError::Malformed(_)), "{err}");
        assert!(!err.to_string().contains("sk-secret"), "{err}");
        let err = decoder()
            .decode(Event {
                event: "error".to_owned(),
                data: "overloaded".to_owned(),
                ..Event::default()
            })
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "model server reported an error: overloaded"
        );
    }

    #[tokio::test]
    async fn whole_completion_reads_as_one_delta_and_done() {
        let body = r#"{"choices":[{"index":0,"message":{"role":"assistant","content":"All of it"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":3,"total_tokens":4}}"#;
        let events: Vec<_> = chat_stream(stream::iter([Ok(data(body))]), decoder())
            .map(Result::unwrap)
            .collect()
            .await;
        assert_eq!(
            events,
            [
                ChatEvent::Delta("All of it".to_owned()),
                ChatEvent::Done {
                    finish_reason: Some("stop".to_owned()),
                    usage: Some(Usage {
                        prompt_tokens: 1,
                        completion_tokens: 3,
                        total_tokens: 4
                    })
                }
            ]
        );
    }

    #[tokio::test]
    async fn stream_ends_after_the_first_error() {
        let units = stream::iter([
            Ok(data(r#"{"choices":[{"delta":{"content":"a"}}]}"#)),
            Ok(data("garbage")),
            Ok(data(r#"{"choices":[{"delta":{"content":"b"}}]}"#)),
            Ok(data("[DONE]")),
        ]);
        let events: Vec<_> = chat_stream(units, decoder()).collect().await;
        assert_eq!(events.len(), 2);
        assert_eq!(
            events[0].as_ref().unwrap(),
            &ChatEvent::Delta("a".to_owned())
        );
        assert!(events[1].is_err());
    }
}
