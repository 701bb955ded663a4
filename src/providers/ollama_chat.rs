//! The `ollama` chat provider.
//!
//! `POST <endpoint>/api/chat` with `{model, messages, stream: true, options}`, where `options`
//! are the merged parameters (§11.1: for `ollama` the parameters are its `options`).
//!
//! The answer is newline-delimited JSON: `{"message":{"role","content"},"done":false}` lines,
//! then one `{"done":true,"done_reason":…,"prompt_eval_count":n,"eval_count":m}` line. Lines
//! arrive split across body chunks, so they are reassembled before parsing; a last line without
//! its newline is still read. A body that ends before the `done` line was cut short.

use bytes::Bytes;
use futures_util::stream::{self, BoxStream, Stream, StreamExt};
use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::llm::{
    ChatDecoder, ChatMessage, ChatStream, Decoded, FailureContext, LlmError, LlmTarget, Usage,
    chat_stream, messages_json, passthrough_parameters,
};

/// Longest line accepted. Answer lines are small; a longer one means the endpoint is not an
/// Ollama chat, and buffering it whole would only use memory.
const MAX_LINE_BYTES: usize = 4 * 1024 * 1024;

/// The URL and JSON body of a streamed chat request.
pub(super) fn request(target: &LlmTarget<'_>, messages: &[ChatMessage]) -> (String, Value) {
    let mut body = Map::new();
    if let Some(model) = target.model {
        body.insert("model".to_owned(), json!(model));
    }
    body.insert("messages".to_owned(), messages_json(messages));
    body.insert("stream".to_owned(), json!(true));
    body.insert(
        "options".to_owned(),
        Value::Object(passthrough_parameters(target.parameters)),
    );
    (format!("{}/api/chat", target.endpoint), Value::Object(body))
}

/// The events of a 2xx answer.
pub(super) fn events(response: reqwest::Response, failures: FailureContext) -> ChatStream {
    let lines = ndjson_lines(response.bytes_stream(), failures.clone());
    chat_stream(lines, OllamaDecoder { failures })
}

/// What [`ndjson_lines`] keeps between two chunks.
struct LineReader {
    body: BoxStream<'static, Result<Bytes, reqwest::Error>>,
    buffer: Vec<u8>,
    /// How much of `buffer` is known to hold no newline.
    scanned: usize,
    body_ended: bool,
    failures: FailureContext,
}

/// The non-blank lines of a body, without their newline.
fn ndjson_lines<S>(
    body: S,
    failures: FailureContext,
) -> impl Stream<Item = Result<Vec<u8>, LlmError>>
where
    S: Stream<Item = Result<Bytes, reqwest::Error>> + Send + 'static,
{
    let reader = LineReader {
        body: body.boxed(),
        buffer: Vec::new(),
        scanned: 0,
        body_ended: false,
        failures,
    };
    stream::unfold(reader, next_line)
}

/// The next non-blank line: from what is buffered, else after reading more of the body.
async fn next_line(mut reader: LineReader) -> Option<(Result<Vec<u8>, LlmError>, LineReader)> {
    loop {
        let newline = reader
            .buffer
            .get(reader.scanned..)
            .and_then(|unscanned| unscanned.iter().position(|byte| *byte == b'\n'));
        if let Some(offset) = newline {
            let end = reader.scanned + offset;
            let mut line: Vec<u8> = reader.buffer.drain(..=end).collect();
            line.pop();
            reader.scanned = 0;
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            return Some((Ok(line), reader));
        }
        reader.scanned = reader.buffer.len();
        if reader.body_ended {
            if reader.buffer.iter().all(u8::is_ascii_whitespace) {
                return None;
            }
            let line = std::mem::take(&mut reader.buffer);
            reader.scanned = 0;
            return Some((Ok(line), reader));
        }
        if reader.buffer.len() > MAX_LINE_BYTES {
            let err = reader.failures.malformed(
                &format_args!("a line longer than {MAX_LINE_BYTES} bytes"),
                None,
            );
            return Some((Err(err), reader));
        }
        match reader.body.next().await {
            Some(Ok(chunk)) => reader.buffer.extend_from_slice(&chunk),
            Some(Err(err)) => {
                let err = reader.failures.transport(err);
                return Some((Err(err), reader));
            }
            None => reader.body_ended = true,
        }
    }
}

/// Reads answer lines.
struct OllamaDecoder {
    failures: FailureContext,
}

#[derive(Deserialize)]
struct WireLine {
    #[serde(default)]
    message: Option<WireMessage>,
    #[serde(default)]
    done: bool,
    #[serde(default)]
    done_reason: Option<String>,
    #[serde(default)]
    prompt_eval_count: Option<u64>,
    #[serde(default)]
    eval_count: Option<u64>,
    #[serde(default)]
    error: Option<Value>,
}

#[derive(Deserialize)]
struct WireMessage {
    #[serde(default)]
    content: Option<String>,
}

impl ChatDecoder for OllamaDecoder {
    type Unit = Vec<u8>;

    fn decode(&mut self, line: Vec<u8>) -> Result<Decoded, LlmError> {
        let line: WireLine = serde_json::from_slice(&line).map_err(|err| {
            self.failures
                .malformed(&err, Some(&String::from_utf8_lossy(&line)))
        })?;
        if let Some(error) = line.error {
            return Err(self.failures.upstream(&error));
        }
        let mut decoded = Decoded::content(line.message.and_then(|message| message.content));
        if line.done {
            let usage = match (line.prompt_eval_count, line.eval_count) {
                (Some(prompt_tokens), Some(completion_tokens)) => Some(Usage {
                    prompt_tokens,
                    completion_tokens,
                    total_tokens: prompt_tokens.saturating_add(completion_tokens),
                }),
                _ => None,
            };
            decoded.done = Some((line.done_reason, usage));
        }
        Ok(decoded)
    }

    fn finish(&mut self) -> Result<(Option<String>, Option<Usage>), LlmError> {
        Err(LlmError::Truncated)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::llm::{ChatEvent, LlmProvider};

    fn failures() -> FailureContext {
        FailureContext::for_tests(Some("sk-secret"))
    }

    fn body_of(chunks: &[&str]) -> impl Stream<Item = Result<Bytes, reqwest::Error>> + use<> {
        let chunks: Vec<Result<Bytes, reqwest::Error>> = chunks
            .iter()
            .map(|chunk| Ok(Bytes::from(chunk.to_string())))
            .collect();
        stream::iter(chunks)
    }

    async fn events_of(chunks: &[&str]) -> Vec<Result<ChatEvent, LlmError>> {
        let lines = ndjson_lines(body_of(chunks), failures());
        chat_stream(
            lines,
            OllamaDecoder {
                failures: failures(),
            },
        )
        .collect()
        .await
    }

    #[test]
    fn request_puts_parameters_in_options() {
        let Value::Object(parameters) =
            json!({"temperature": 0.1, "num_ctx": 4096, "model": "x", "stream": false})
        else {
            unreachable!()
        };
        let target = LlmTarget {
            provider: LlmProvider::Ollama,
            endpoint: "http://host:11434",
            model: Some("llama3"),
            api_key: None,
            parameters: &parameters,
        };
        let (url, body) = request(&target, &[ChatMessage::new("system", "be brief")]);
        assert_eq!(url, "http://host:11434/api/chat");
        assert_eq!(
            body,
            json!({
                "model": "llama3",
                "messages": [{"role": "system", "content": "be brief"}],
                "stream": true,
                "options": {"temperature": 0.1, "num_ctx": 4096}
            })
        );
    }

    #[tokio::test]
    async fn lines_split_across_chunks_are_reassembled() {
        let events = events_of(&[
            r#"{"message":{"role":"assistant","content":"Hel"},"do"#,
            "ne\":false}\n\n{\"message\":{\"role\":\"assistant\",\"content\":\"lo\"},\"done\":false}\n{\"message\":{\"role\":\"assistant\",\"content\":\"\"},",
            r#""done":true,"done_reason":"stop","prompt_eval_count":4,"eval_count":2}"#,
        ])
        .await;
        let events: Vec<ChatEvent> = events.into_iter().map(Result::unwrap).collect();
        assert_eq!(
            events,
            [
                ChatEvent::Delta("Hel".to_owned()),
                ChatEvent::Delta("lo".to_owned()),
                ChatEvent::Done {
                    finish_reason: Some("stop".to_owned()),
                    usage: Some(Usage {
                        prompt_tokens: 4,
                        completion_tokens: 2,
                        total_tokens: 6
                    })
                }
            ]
        );
    }

    #[tokio::test]
    async fn done_without_counts_has_no_usage() {
        let events = events_of(&["{\"message\":{\"content\":\"x\"},\"done\":true}\n"]).await;
        let events: Vec<ChatEvent> = events.into_iter().map(Result::unwrap).collect();
        assert_eq!(
            events,
            [
                ChatEvent::Delta("x".to_owned()),
                ChatEvent::Done {
                    finish_reason: None,
                    usage: None
                }
            ]
        );
    }

    #[tokio::test]
    async fn body_ending_before_done_is_truncated() {
        let events = events_of(&["{\"message\":{\"content\":\"x\"},\"done\":false}\n"]).await;
        assert_eq!(events.len(), 2);
        assert!(matches!(events[1], Err(LlmError::Truncated)));
    }

    #[tokio::test]
    async fn error_line_is_an_error_and_ends_the_stream() {
        let events = events_of(&[
            "{\"error\":\"model 'x' not found, key sk-secret\"}\n",
            "{\"message\":{\"content\":\"x\"},\"done\":true}\n",
        ])
        .await;
        assert_eq!(events.len(), 1);
        let Err(err) = &events[0] else {
            panic!("expected an error, got {events:?}")
        };
        assert_eq!(
            err.to_string(),
            "model server reported an error: model 'x' not found, key [redacted]"
        );
    }

    #[tokio::test]
    async fn malformed_line_is_an_error() {
        let events = events_of(&["not json\n"]).await;
        assert!(
            matches!(events[..], [Err(LlmError::Malformed(_))]),
            "{events:?}"
        );
    }
}
