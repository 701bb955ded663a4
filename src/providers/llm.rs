//! Chat with language models: the vocabulary shared by the chat providers and the one client
//! that talks to model servers.
//!
//! [`LlmClient::chat`] sends one chat request to an `openai` ([`super::openai_chat`]) or
//! `ollama` ([`super::ollama_chat`]) server and returns, once the server has accepted the request
//! with a 2xx head, a [`ChatStream`] of [`ChatEvent`]s: `Delta`s as content arrives, then exactly
//! one `Done` when the server finished cleanly. Any failure ends the stream with one `Err` and no
//! `Done`, which is what the streaming modes need (a failure after the head only ends the body)
//! and what plain mode turns into `500 Stream error: <reason>` through [`collect`].
//!
//! Timeouts are wrapped once, in the `reqwest::Client` built by [`LlmClient::new`]: the connect
//! timeout bounds connecting, and the read timeout bounds both the wait for the head (counted
//! from the moment the request is sent, connecting included) and every wait between two body
//! chunks, so a model server that stalls mid-answer ends the stream instead of holding it open.
//! Nothing is retried: a chat answer streams to a client as it comes, so a second attempt could
//! not be made invisible.
//!
//! The API key never leaves this module in clear: [`LlmTarget`]'s `Debug` hides it and every
//! text that came from the model server or from `reqwest` is passed through [`redact`] before it
//! is stored in an [`LlmError`], because servers echo bad keys (`Incorrect API key provided:
//! sk-…`) and the error text reaches API clients and logs.

use std::collections::VecDeque;
use std::error::Error as StdError;
use std::fmt;
use std::pin::Pin;
use std::time::Duration;

use bytes::Bytes;
use futures_util::stream::{self, BoxStream, Stream, StreamExt};
use reqwest::StatusCode;
use reqwest::header::CONTENT_TYPE;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::{ollama_chat, openai_chat};

/// Characters of a model server's error body quoted in [`LlmError::Status`].
const EXCERPT_CHARS: usize = 200;
/// Bytes of a model server's error body read to build the excerpt. More than the excerpt needs,
/// so that a key echoed near the excerpt's end is still whole when it is redacted.
const ERROR_BODY_LIMIT: usize = 16 * 1024;
/// What replaces a secret in error texts.
const REDACTED: &str = "[redacted]";
/// Keys of an LLM's `parameters` that the request itself decides, so they are never passed
/// through (§11.1: "`model`, `messages`, `stream` ignored").
const RESERVED_PARAMETERS: [&str; 3] = ["model", "messages", "stream"];

/// The kind of model server an LLM is registered with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LlmProvider {
    /// Any OpenAI-compatible chat-completions server; the endpoint includes `/v1`.
    #[serde(rename = "openai")]
    OpenAi,
    /// An Ollama server; the endpoint is the server root.
    Ollama,
}

impl LlmProvider {
    /// The provider's name as stored and shown in the API (`openai`, `ollama`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::OpenAi => "openai",
            Self::Ollama => "ollama",
        }
    }
}

impl fmt::Display for LlmProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One message of a chat, as sent to the model server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ChatMessage {
    /// `system`, `user` or `assistant`.
    pub role: String,
    /// The message text, already rendered.
    pub content: String,
}

impl ChatMessage {
    /// A message with the given role and content.
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Self {
        Self {
            role: role.into(),
            content: content.into(),
        }
    }

    /// A `user` message, as `POST /llms/{id}/query` sends its prompt.
    pub fn user(content: impl Into<String>) -> Self {
        Self::new("user", content)
    }
}

/// Token counts reported by the model server for one answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Usage {
    /// Tokens of the messages sent.
    pub prompt_tokens: u64,
    /// Tokens of the answer.
    pub completion_tokens: u64,
    /// Their sum, as reported (or computed when the server left it out).
    pub total_tokens: u64,
}

/// One step of a streamed answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChatEvent {
    /// A non-empty piece of the answer, in order.
    Delta(String),
    /// The server finished the answer cleanly; always the last event of a stream.
    Done {
        /// Why the model stopped (`stop`, `length`, …), as the server reported it.
        finish_reason: Option<String>,
        /// Token counts, when the server reported them.
        usage: Option<Usage>,
    },
}

/// The events of one answer: `Delta`s, then one `Done`, or one `Err` after which it ends.
///
/// Dropping it drops the upstream response and so closes the connection to the model server at
/// once; nothing keeps reading in the background.
pub type ChatStream = BoxStream<'static, Result<ChatEvent, LlmError>>;

/// Where and how to send a chat: an LLM registration with its key decrypted.
#[derive(Clone, Copy)]
pub struct LlmTarget<'a> {
    /// The kind of model server.
    pub provider: LlmProvider,
    /// Base URL without a trailing `/` (`openai`: including `/v1`; `ollama`: server root).
    pub endpoint: &'a str,
    /// The model to ask for; required by `ollama`, optional for `openai` servers serving one.
    pub model: Option<&'a str>,
    /// Sent as a bearer token when present and non-empty.
    pub api_key: Option<&'a str>,
    /// The LLM's `parameters` with the request's merged over them.
    pub parameters: &'a Map<String, Value>,
}

impl fmt::Debug for LlmTarget<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LlmTarget")
            .field("provider", &self.provider)
            .field("endpoint", &self.endpoint)
            .field("model", &self.model)
            .field("api_key", &self.api_key.map(|_| REDACTED))
            .field("parameters", &self.parameters)
            .finish()
    }
}

/// Why a chat failed. Its `Display` is the `<reason>` of `500 Stream error: <reason>`; every
/// text in it has had the API key redacted.
#[derive(Debug, thiserror::Error)]
pub enum LlmError {
    /// The model server answered the request with a non-2xx status.
    #[error("model server answered {status}: {excerpt}")]
    Status {
        /// The status of the head.
        status: StatusCode,
        /// The start of the body (at most 200 characters, on one line).
        excerpt: String,
    },
    /// No connection to the model server within the connect timeout.
    #[error("timed out connecting to the model server after {0:?}")]
    ConnectTimeout(Duration),
    /// The model server sent no head within the read timeout.
    #[error("timed out waiting for the model server to answer after {0:?}")]
    NoAnswer(Duration),
    /// The model server sent nothing for longer than the read timeout in the middle of a body.
    #[error("timed out waiting for more of the answer: the model server sent nothing for {0:?}")]
    Stalled(Duration),
    /// Any other failure of the connection or the HTTP exchange, as `reqwest` describes it
    /// (with its chain of causes).
    #[error("{0}")]
    Transport(String),
    /// The body could not be read as the provider's format.
    #[error("model server sent malformed data: {0}")]
    Malformed(String),
    /// The model server reported an error inside a 2xx body.
    #[error("model server reported an error: {0}")]
    Upstream(String),
    /// The body ended cleanly but before the server said the answer was finished.
    #[error("model server ended the answer before finishing it")]
    Truncated,
    /// The HTTP client could not be built (start-up only).
    #[error("could not build the http client for model servers: {0}")]
    Client(String),
}

/// Replaces every occurrence of each non-empty secret in `text` by `[redacted]`.
///
/// Longer secrets are replaced first, so that a secret containing another is not left half
/// visible.
pub fn redact(text: &str, secrets: &[&str]) -> String {
    let mut ordered: Vec<&str> = secrets.iter().copied().filter(|s| !s.is_empty()).collect();
    ordered.sort_by_key(|s| std::cmp::Reverse(s.len()));
    let mut redacted = text.to_owned();
    for secret in ordered {
        if redacted.contains(secret) {
            redacted = redacted.replace(secret, REDACTED);
        }
    }
    redacted
}

/// The LLM's merged `parameters` without the keys the request itself sets (`model`,
/// `messages`, `stream`): the fields an `openai` body starts from, or an `ollama` body's
/// `options`.
pub fn passthrough_parameters(parameters: &Map<String, Value>) -> Map<String, Value> {
    parameters
        .iter()
        .filter(|(key, _)| !RESERVED_PARAMETERS.contains(&key.as_str()))
        .map(|(key, value)| (key.clone(), value.clone()))
        .collect()
}

/// `[{role, content}, …]`, as both providers send messages.
pub(super) fn messages_json(messages: &[ChatMessage]) -> Value {
    messages
        .iter()
        .map(|message| serde_json::json!({"role": message.role, "content": message.content}))
        .collect()
}

/// Reads a whole answer: the concatenated deltas, the finish reason and the usage.
///
/// This is plain mode (`stream` false): any failure, including a stream that ends without
/// `Done`, is an error, to be answered as `500 Stream error: <reason>`.
pub async fn collect<S>(mut events: S) -> Result<(String, Option<String>, Option<Usage>), LlmError>
where
    S: Stream<Item = Result<ChatEvent, LlmError>> + Unpin,
{
    let mut answer = String::new();
    while let Some(event) = events.next().await {
        match event? {
            ChatEvent::Delta(text) => answer.push_str(&text),
            ChatEvent::Done {
                finish_reason,
                usage,
            } => return Ok((answer, finish_reason, usage)),
        }
    }
    // Streams from `LlmClient::chat` never end without `Done` or an error; any other stream
    // that does was cut short.
    Err(LlmError::Truncated)
}

/// The client for model servers: one connection pool, with the timeouts of every call.
///
/// Cheap to clone; clones share the pool.
#[derive(Debug, Clone)]
pub struct LlmClient {
    http: reqwest::Client,
    connect_timeout: Duration,
    read_timeout: Duration,
}

impl LlmClient {
    /// Builds the client. `connect_timeout` bounds connecting; `read_timeout` bounds the wait
    /// for the head of an answer and every wait between two of its chunks.
    pub fn new(connect_timeout: Duration, read_timeout: Duration) -> Result<Self, LlmError> {
        let http = reqwest::Client::builder()
            .connect_timeout(connect_timeout)
            .read_timeout(read_timeout)
            .tcp_nodelay(true)
            .pool_idle_timeout(Duration::from_secs(90))
            // A redirect would resend the bearer key to wherever the server points, and a
            // retry would replay a request whose answer may already be streaming to a client.
            .redirect(reqwest::redirect::Policy::none())
            .retry(reqwest::retry::never())
            .build()
            .map_err(|err| LlmError::Client(error_chain(&err)))?;
        Ok(Self {
            http,
            connect_timeout,
            read_timeout,
        })
    }

    /// The HTTP client, for the other calls to model servers (rerankers).
    pub(super) fn http(&self) -> &reqwest::Client {
        &self.http
    }

    /// Sends a chat and waits for the head of the answer.
    ///
    /// A connection failure, a timeout before the head or a non-2xx head is an `Err`; a 2xx
    /// head gives the stream of the answer's events.
    pub async fn chat(
        &self,
        target: &LlmTarget<'_>,
        messages: &[ChatMessage],
    ) -> Result<ChatStream, LlmError> {
        debug_assert!(
            !target.endpoint.ends_with('/'),
            "endpoints are stored without a trailing slash"
        );
        let failures = self.failure_context(target.api_key);
        let (url, body) = match target.provider {
            LlmProvider::OpenAi => openai_chat::request(target, messages),
            LlmProvider::Ollama => ollama_chat::request(target, messages),
        };
        let mut request = self.http.post(&url).json(&body);
        if let Some(key) = usable_key(target.api_key) {
            request = request.bearer_auth(key);
        }
        tracing::debug!(provider = %target.provider, %url, "sending chat request");
        let response = request
            .send()
            .await
            .map_err(|err| failures.transport(err))?;
        if !response.status().is_success() {
            let failure = failures.status(response).await;
            tracing::debug!(
                provider = %target.provider,
                %url,
                reason = %failure,
                "model server refused chat request"
            );
            return Err(failure);
        }
        Ok(match target.provider {
            LlmProvider::OpenAi => openai_chat::events(response, failures),
            LlmProvider::Ollama => ollama_chat::events(response, failures),
        })
    }

    /// Relays a chat-completions request body as it is: a `POST` to `url` with
    /// `content-type: application/json` and the bearer key when present, and no header of the
    /// relay's own client.
    ///
    /// Returns the model server's response whatever its status, so that its status, content
    /// type and body can be passed on unchanged. Only a failure to get a head is an `Err`.
    pub async fn forward(
        &self,
        url: &str,
        api_key: Option<&str>,
        body: Bytes,
    ) -> Result<reqwest::Response, LlmError> {
        let mut request = self
            .http
            .post(url)
            .header(CONTENT_TYPE, "application/json")
            .body(body);
        if let Some(key) = usable_key(api_key) {
            request = request.bearer_auth(key);
        }
        tracing::debug!(%url, "relaying chat completions request");
        request
            .send()
            .await
            .map_err(|err| self.failure_context(api_key).transport(err))
    }

    /// Describes a failure met while relaying a response body from [`LlmClient::forward`],
    /// with the key redacted.
    pub fn relay_failure(&self, err: reqwest::Error, api_key: Option<&str>) -> LlmError {
        self.failure_context(api_key).transport(err)
    }

    /// What streams and errors of a call with this key need.
    fn failure_context(&self, api_key: Option<&str>) -> FailureContext {
        FailureContext {
            secret: usable_key(api_key).map(str::to_owned),
            connect_timeout: self.connect_timeout,
            read_timeout: self.read_timeout,
        }
    }
}

/// An empty key is no key: it is neither sent nor redacted (redacting "" would mark every
/// character boundary).
fn usable_key(api_key: Option<&str>) -> Option<&str> {
    api_key.filter(|key| !key.is_empty())
}

/// What a chat's stream needs to turn failures into [`LlmError`]s after [`LlmClient::chat`]
/// has returned: the key to redact and the timeouts to name.
#[derive(Clone)]
pub(super) struct FailureContext {
    secret: Option<String>,
    connect_timeout: Duration,
    read_timeout: Duration,
}

impl fmt::Debug for FailureContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FailureContext")
            .field("secret", &self.secret.as_ref().map(|_| REDACTED))
            .field("connect_timeout", &self.connect_timeout)
            .field("read_timeout", &self.read_timeout)
            .finish()
    }
}

impl FailureContext {
    /// A context redacting `secret`, for decoding tests.
    #[cfg(test)]
    pub(super) fn for_tests(secret: Option<&str>) -> Self {
        Self {
            secret: secret.map(str::to_owned),
            connect_timeout: Duration::from_secs(1),
            read_timeout: Duration::from_secs(1),
        }
    }

    /// `text` with the key replaced by `[redacted]`.
    pub(super) fn redact(&self, text: &str) -> String {
        match &self.secret {
            Some(secret) => redact(text, &[secret]),
            None => text.to_owned(),
        }
    }

    /// A `reqwest` failure, classified by when it happened.
    pub(super) fn transport(&self, err: reqwest::Error) -> LlmError {
        if err.is_timeout() {
            if err.is_connect() {
                return LlmError::ConnectTimeout(self.connect_timeout);
            }
            // `reqwest` reports the read timeout as a request error before the head and as a
            // body error after it.
            if err.is_body() || err.is_decode() {
                return LlmError::Stalled(self.read_timeout);
            }
            return LlmError::NoAnswer(self.read_timeout);
        }
        LlmError::Transport(self.redact(&error_chain(&err)))
    }

    /// Data that does not parse as the provider's format: `what` says why, `data` (when known)
    /// is what was read. Parser messages may quote the input, so the whole text is redacted.
    pub(super) fn malformed(&self, what: &dyn fmt::Display, data: Option<&str>) -> LlmError {
        let text = match data {
            Some(data) => format!("{what} in `{data}`"),
            None => what.to_string(),
        };
        LlmError::Malformed(excerpt(&self.redact(&text)))
    }

    /// An error object sent inside a 2xx body: `{"message": …}`, a string, or either wrapped
    /// in `{"error": …}`.
    pub(super) fn upstream(&self, error: &Value) -> LlmError {
        let error = error.get("error").unwrap_or(error);
        let message = match error {
            Value::String(text) => text.clone(),
            Value::Object(fields) => match fields.get("message") {
                Some(Value::String(text)) => text.clone(),
                _ => error.to_string(),
            },
            other => other.to_string(),
        };
        LlmError::Upstream(excerpt(&self.redact(&message)))
    }

    /// A non-2xx head: its status and the start of its body.
    async fn status(&self, mut response: reqwest::Response) -> LlmError {
        let status = response.status();
        let mut body = Vec::new();
        let mut cut = false;
        // The body only explains the failure: what could be read is enough, so a failure
        // while reading it ends the reading without replacing the status error.
        while let Ok(Some(chunk)) = response.chunk().await {
            body.extend_from_slice(&chunk);
            if body.len() >= ERROR_BODY_LIMIT {
                cut = true;
                break;
            }
        }
        if cut {
            // A key cut at the limit could not be recognised by `redact`; dropping as many
            // bytes as the key is long removes any such fragment (the excerpt is far shorter
            // than what remains).
            let keep = ERROR_BODY_LIMIT.saturating_sub(self.secret.as_ref().map_or(0, String::len));
            body.truncate(keep);
        }
        let text = self.redact(&String::from_utf8_lossy(&body));
        LlmError::Status {
            status,
            excerpt: excerpt(&text),
        }
    }
}

/// A one-line quotation of `text`: whitespace runs folded into one space, at most
/// [`EXCERPT_CHARS`] characters (the last one `…` when cut).
fn excerpt(text: &str) -> String {
    let folded = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if folded.is_empty() {
        return "(empty body)".to_owned();
    }
    if folded.chars().count() <= EXCERPT_CHARS {
        return folded;
    }
    let mut cut: String = folded.chars().take(EXCERPT_CHARS - 1).collect();
    cut.push('…');
    cut
}

/// An error's text followed by its causes, skipping a cause whose text is already included
/// (`hyper` and `reqwest` often repeat their source in their own message).
fn error_chain(err: &dyn StdError) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

/// What one unit of a provider's body (an SSE event, an NDJSON line) meant.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Decoded {
    /// Content to pass on; only ever non-empty.
    pub(super) delta: Option<String>,
    /// Set when this unit finished the answer.
    pub(super) done: Option<(Option<String>, Option<Usage>)>,
}

impl Decoded {
    /// A unit carrying `content` (nothing when it is empty).
    pub(super) fn content(content: Option<String>) -> Self {
        Self {
            delta: content.filter(|text| !text.is_empty()),
            done: None,
        }
    }
}

/// A provider's reading of its body, one unit at a time.
pub(super) trait ChatDecoder: Send + 'static {
    /// One unit of the body: an SSE event, an NDJSON line.
    type Unit: Send + 'static;

    /// Reads one unit.
    fn decode(&mut self, unit: Self::Unit) -> Result<Decoded, LlmError>;

    /// The body ended cleanly without a unit that finished the answer: the final `Done`, if
    /// what was seen allows it, else why the answer is incomplete.
    fn finish(&mut self) -> Result<(Option<String>, Option<Usage>), LlmError>;
}

/// The state of a chat stream, owning the response body through `units`.
struct ChatState<D: ChatDecoder> {
    units: Pin<Box<dyn Stream<Item = Result<D::Unit, LlmError>> + Send>>,
    decoder: D,
    /// Events decoded but not yet handed out (a last delta and its `Done`).
    pending: VecDeque<ChatEvent>,
    /// Set once `Done` or an error was produced: nothing more is read. Whatever remains of the
    /// body is left to `hyper` when the stream is dropped: it reads an end that has already
    /// arrived (keeping the connection for reuse) and closes the connection otherwise.
    ended: bool,
}

/// Turns a provider's units and decoder into a [`ChatStream`] with the guarantees every
/// provider shares: only non-empty deltas, at most one `Done` and always last, at most one
/// `Err` and always last.
pub(super) fn chat_stream<D, S>(units: S, decoder: D) -> ChatStream
where
    D: ChatDecoder,
    S: Stream<Item = Result<D::Unit, LlmError>> + Send + 'static,
{
    let state = ChatState {
        units: Box::pin(units),
        decoder,
        pending: VecDeque::new(),
        ended: false,
    };
    stream::unfold(state, next_event).boxed()
}

/// The next event of a chat stream: a decoded event not yet handed out, else the next one
/// read from the body, until the stream has ended.
async fn next_event<D: ChatDecoder>(
    mut state: ChatState<D>,
) -> Option<(Result<ChatEvent, LlmError>, ChatState<D>)> {
    if let Some(event) = state.pending.pop_front() {
        return Some((Ok(event), state));
    }
    if state.ended {
        return None;
    }
    loop {
        let decoded = match state.units.next().await {
            Some(Ok(unit)) => state.decoder.decode(unit),
            Some(Err(err)) => Err(err),
            None => state.decoder.finish().map(|done| Decoded {
                delta: None,
                done: Some(done),
            }),
        };
        let decoded = match decoded {
            Ok(decoded) => decoded,
            Err(err) => {
                state.ended = true;
                return Some((Err(err), state));
            }
        };
        if let Some(text) = decoded.delta {
            state.pending.push_back(ChatEvent::Delta(text));
        }
        if let Some((finish_reason, usage)) = decoded.done {
            state.pending.push_back(ChatEvent::Done {
                finish_reason,
                usage,
            });
            state.ended = true;
        }
        if let Some(event) = state.pending.pop_front() {
            return Some((Ok(event), state));
        }
    }
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "a test fails by panicking")]
mod tests {
    use super::*;

    #[test]
    fn redact_replaces_every_occurrence_and_ignores_empty_secrets() {
        assert_eq!(
            redact("key sk-abc then sk-abc", &["sk-abc", ""]),
            "key [redacted] then [redacted]"
        );
        assert_eq!(redact("nothing here", &[""]), "nothing here");
    }

    #[test]
    fn redact_replaces_longer_secrets_first() {
        assert_eq!(redact("sk-abcdef", &["sk-abc", "sk-abcdef"]), "[redacted]");
    }

    #[test]
    fn target_debug_hides_the_key() {
        let parameters = Map::new();
        let target = LlmTarget {
            provider: LlmProvider::OpenAi,
            endpoint: "http://localhost/v1",
            model: None,
            api_key: Some("sk-very-secret"),
            parameters: &parameters,
        };
        let shown = format!("{target:?}");
        assert!(!shown.contains("sk-very-secret"), "{shown}");
        assert!(shown.contains("[redacted]"), "{shown}");
    }

    #[test]
    fn provider_names_round_trip() {
        for provider in [LlmProvider::OpenAi, LlmProvider::Ollama] {
            let json = serde_json::to_value(provider).unwrap();
            assert_eq!(json, Value::String(provider.as_str().to_owned()));
            assert_eq!(
                serde_json::from_value::<LlmProvider>(json).unwrap(),
                provider
            );
        }
    }

    #[test]
    fn passthrough_parameters_drop_reserved_keys() {
        let parameters = serde_json::json!({
            "model": "x", "messages": [], "stream": false, "temperature": 0.2
        });
        let Value::Object(parameters) = parameters else {
            unreachable!()
        };
        let kept = passthrough_parameters(&parameters);
        assert_eq!(Value::Object(kept), serde_json::json!({"temperature": 0.2}));
    }

    #[test]
    fn excerpt_folds_whitespace_and_cuts_at_200_characters() {
        assert_eq!(excerpt("  a\n\n b  "), "a b");
        assert_eq!(excerpt(" \n"), "(empty body)");
        let long = "é".repeat(500);
        let cut = excerpt(&long);
        assert_eq!(cut.chars().count(), 200);
        assert!(cut.ends_with('…'));
    }

    #[test]
    fn upstream_errors_quote_the_message_redacted() {
        let failures = FailureContext::for_tests(Some("sk-live"));
        let err = failures.upstream(&serde_json::json!({"message": "bad key sk-live"}));
        assert_eq!(
            err.to_string(),
            "model server reported an error: bad key [redacted]"
        );
        let err = failures.upstream(&serde_json::json!("model not found"));
        assert_eq!(
            err.to_string(),
            "model server reported an error: model not found"
        );
    }
}
