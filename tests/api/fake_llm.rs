//! A fake model server on loopback: OpenAI-compatible chat completions
//! (`POST /v1/chat/completions`, `POST /chat/completions`) and Ollama chat (`POST /api/chat`).
//!
//! Each test starts its own with [`FakeLlm::start`], scripts the replies of the next requests
//! with [`FakeLlm::script`] (unscripted requests get [`Answer::default`]) and afterwards reads
//! what it received and sent with [`FakeLlm::requests`]. Streaming can be paced, held after the
//! first content chunk until [`FakeLlm::release`], or broken off; [`FakeLlm::client_left`]
//! resolves when a client went away before a streamed answer was complete. Nothing here sleeps
//! to synchronise: holds and departures are notifications.
//!
//! Connections are watched from below (reads and writes of each socket), because the HTTP
//! server keeps polling a response body after its connection failed: a body cannot learn from
//! being dropped that its client left, nor end a connection by failing.
//!
//! Answers follow the request: `stream: true` gets server-sent events in OpenAI's chunk format
//! (with a usage chunk when `stream_options.include_usage` is true, then `data: [DONE]`) or
//! NDJSON on `/api/chat`; otherwise one JSON completion in the path's format.

#![expect(dead_code, reason = "each test uses a part of the fake")]

use std::collections::{HashMap, VecDeque};
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures_util::stream;
use poem::http::uri::Scheme;
use poem::http::{HeaderMap, StatusCode};
use poem::listener::{Acceptor, TcpAcceptor};
use poem::web::{LocalAddr, RemoteAddr};
use poem::{Body, Endpoint, Request, Response, Route, Server, post};
use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;

/// The usage reported by default: this many prompt tokens, one completion token per chunk.
pub const DEFAULT_PROMPT_TOKENS: u64 = 12;

/// A running fake model server. Dropping it stops accepting connections.
pub struct FakeLlm {
    /// Where it listens (127.0.0.1, a free port).
    pub addr: SocketAddr,
    shared: Arc<Shared>,
    server: JoinHandle<()>,
}

/// What the server's handlers and the test share.
struct Shared {
    script: Mutex<VecDeque<Reply>>,
    exchanges: Mutex<Vec<Arc<Record>>>,
    release: Notify,
    client_left: Notify,
    /// The watch of each accepted connection, by client address.
    connections: Mutex<HashMap<SocketAddr, Arc<ConnectionWatch>>>,
}

/// One request as received, and the response as sent so far.
struct Record {
    path: String,
    headers: HeaderMap,
    body: Bytes,
    remote_addr: Option<SocketAddr>,
    status: Mutex<Option<StatusCode>>,
    sent: Mutex<Vec<u8>>,
}

/// A snapshot of one exchange, for assertions.
#[derive(Debug, Clone)]
pub struct Exchange {
    /// The request path (`/v1/chat/completions`, `/chat/completions`, `/api/chat`).
    pub path: String,
    /// The request headers.
    pub headers: HeaderMap,
    /// The request body, byte for byte.
    pub body: Bytes,
    /// The client's address (its port tells connections apart).
    pub remote_addr: Option<SocketAddr>,
    /// The status answered, once the head was sent.
    pub status: Option<StatusCode>,
    /// The response body bytes sent so far, byte for byte.
    pub response_body: Bytes,
}

impl Exchange {
    /// The request body parsed as JSON.
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).expect("request body is JSON")
    }

    /// A request header as text.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .get(name)
            .map(|value| value.to_str().expect("visible ASCII header"))
    }
}

/// How the fake answers one request.
#[derive(Debug, Clone)]
pub enum Reply {
    /// Answer these content chunks, streamed or whole as the request asks.
    Answer(Answer),
    /// Answer this status with this JSON body.
    Json {
        /// The status.
        status: u16,
        /// The body.
        body: Value,
    },
    /// Answer this status with an OpenAI-style error whose message quotes the bearer key.
    EchoKey {
        /// The status.
        status: u16,
    },
    /// Never send a head.
    Hang,
}

impl Reply {
    /// A status with a JSON body.
    pub fn json(status: u16, body: Value) -> Self {
        Self::Json { status, body }
    }

    /// OpenAI's 429 for an exhausted rate limit.
    pub fn rate_limited() -> Self {
        Self::json(
            429,
            json!({"error": {"message": "Rate limit reached", "type": "requests", "code": "rate_limit_exceeded"}}),
        )
    }
}

/// A successful answer.
#[derive(Debug, Clone)]
pub struct Answer {
    /// The content chunks, in order.
    pub chunks: Vec<String>,
    /// Delay before each streamed content chunk after the first.
    pub pace: Option<Duration>,
    /// Stop after the first content chunk until [`FakeLlm::release`].
    pub hold_after_first: bool,
    /// Drop the connection after this many content chunks, without the end of the answer.
    pub break_after: Option<usize>,
    /// The finish reason reported.
    pub finish_reason: String,
    /// `(prompt_tokens, completion_tokens)` reported, if any.
    pub usage: Option<(u64, u64)>,
}

impl Default for Answer {
    /// "Hello, world!" in four chunks.
    fn default() -> Self {
        Self::new(["Hello", ", ", "world", "!"])
    }
}

impl Answer {
    /// These chunks, finishing with `stop` and usage ([`DEFAULT_PROMPT_TOKENS`], one per chunk).
    pub fn new<I, S>(chunks: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let chunks: Vec<String> = chunks.into_iter().map(Into::into).collect();
        let completion_tokens = chunks.len() as u64;
        Self {
            chunks,
            pace: None,
            hold_after_first: false,
            break_after: None,
            finish_reason: "stop".to_owned(),
            usage: Some((DEFAULT_PROMPT_TOKENS, completion_tokens)),
        }
    }

    /// "Hello" then a hundred more chunks, 50 ms apart: an answer still being generated for
    /// 5 s after its first chunk.
    pub fn long_paced_hello() -> Self {
        let mut chunks = vec!["Hello".to_owned()];
        chunks.extend((0..100).map(|i| format!(" {i}")));
        Self::new(chunks).paced(Duration::from_millis(50))
    }

    /// Waits `pace` before each content chunk after the first.
    pub fn paced(mut self, pace: Duration) -> Self {
        self.pace = Some(pace);
        self
    }

    /// Holds after the first content chunk until [`FakeLlm::release`].
    pub fn hold_after_first(mut self) -> Self {
        self.hold_after_first = true;
        self
    }

    /// Drops the connection after `chunks` content chunks.
    pub fn break_after(mut self, chunks: usize) -> Self {
        self.break_after = Some(chunks);
        self
    }

    /// Reports this usage.
    pub fn usage(mut self, prompt_tokens: u64, completion_tokens: u64) -> Self {
        self.usage = Some((prompt_tokens, completion_tokens));
        self
    }

    /// Reports no usage.
    pub fn without_usage(mut self) -> Self {
        self.usage = None;
        self
    }

    /// Reports this finish reason.
    pub fn finish_reason(mut self, reason: &str) -> Self {
        self.finish_reason = reason.to_owned();
        self
    }

    /// The whole answer text.
    pub fn text(&self) -> String {
        self.chunks.concat()
    }
}

impl From<Answer> for Reply {
    fn from(answer: Answer) -> Self {
        Self::Answer(answer)
    }
}

impl FakeLlm {
    /// Starts a fake on a free loopback port.
    pub async fn start() -> Self {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind loopback");
        listener
            .set_nonblocking(true)
            .expect("non-blocking listener");
        let addr = listener.local_addr().expect("local address");
        let shared = Arc::new(Shared {
            script: Mutex::new(VecDeque::new()),
            exchanges: Mutex::new(Vec::new()),
            release: Notify::new(),
            client_left: Notify::new(),
            connections: Mutex::new(HashMap::new()),
        });
        let acceptor = WatchedAcceptor {
            inner: TcpAcceptor::from_std(listener).expect("tokio listener"),
            shared: Arc::clone(&shared),
        };
        let app = Route::new()
            .at("/v1/chat/completions", post(chat_endpoint(&shared)))
            .at("/chat/completions", post(chat_endpoint(&shared)))
            .at("/api/chat", post(chat_endpoint(&shared)));
        let server = tokio::spawn(async move {
            Server::new_with_acceptor(acceptor)
                .run(app)
                .await
                .expect("fake model server");
        });
        Self {
            addr,
            shared,
            server,
        }
    }

    /// `http://127.0.0.1:<port>`: an Ollama endpoint.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// `http://127.0.0.1:<port>/v1`: an OpenAI endpoint.
    pub fn openai_endpoint(&self) -> String {
        format!("{}/v1", self.base_url())
    }

    /// Queues the reply to the next request not yet scripted.
    pub fn script(&self, reply: impl Into<Reply>) {
        self.shared
            .script
            .lock()
            .expect("script lock")
            .push_back(reply.into());
    }

    /// Lets a held answer go on (or the next one to be held, if none is held yet).
    pub fn release(&self) {
        self.shared.release.notify_one();
    }

    /// Resolves once a client went away before a streamed answer was complete (immediately if
    /// one already did). Wrap it in a timeout.
    pub async fn client_left(&self) {
        self.shared.client_left.notified().await;
    }

    /// Fails the test unless a client went away (see [`FakeLlm::client_left`]) within 2 s.
    pub async fn assert_client_left(&self, who: &str) {
        tokio::time::timeout(Duration::from_secs(2), self.client_left())
            .await
            .unwrap_or_else(|_| panic!("the fake saw {who} leave within 2 s"));
    }

    /// Every exchange so far, in arrival order.
    pub fn requests(&self) -> Vec<Exchange> {
        let exchanges = self.shared.exchanges.lock().expect("exchanges lock");
        exchanges.iter().map(|record| record.snapshot()).collect()
    }

    /// The last exchange.
    pub fn last_request(&self) -> Exchange {
        self.requests().pop().expect("a request was received")
    }
}

impl Drop for FakeLlm {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl Record {
    fn snapshot(&self) -> Exchange {
        Exchange {
            path: self.path.clone(),
            headers: self.headers.clone(),
            body: self.body.clone(),
            remote_addr: self.remote_addr,
            status: *self.status.lock().expect("status lock"),
            response_body: Bytes::from(self.sent.lock().expect("sent lock").clone()),
        }
    }

    fn sent(&self, bytes: &[u8]) {
        self.sent
            .lock()
            .expect("sent lock")
            .extend_from_slice(bytes);
    }
}

fn chat_endpoint(shared: &Arc<Shared>) -> impl Endpoint<Output = Response> + 'static {
    let shared = Arc::clone(shared);
    poem::endpoint::make(move |request| answer(Arc::clone(&shared), request))
}

async fn answer(shared: Arc<Shared>, request: Request) -> Response {
    let path = request.uri().path().to_owned();
    let headers = request.headers().clone();
    let remote_addr = request.remote_addr().as_socket_addr().copied();
    let body = request
        .into_body()
        .into_bytes()
        .await
        .expect("read request body");
    let record = Arc::new(Record {
        path,
        headers,
        body,
        remote_addr,
        status: Mutex::new(None),
        sent: Mutex::new(Vec::new()),
    });
    shared
        .exchanges
        .lock()
        .expect("exchanges lock")
        .push(Arc::clone(&record));
    let reply = shared
        .script
        .lock()
        .expect("script lock")
        .pop_front()
        .unwrap_or_else(|| Answer::default().into());
    match reply {
        Reply::Hang => std::future::pending().await,
        Reply::Json { status, body } => {
            whole(&record, status, "application/json", json_bytes(&body))
        }
        Reply::EchoKey { status } => {
            let key = record
                .headers
                .get("authorization")
                .and_then(|value| value.to_str().ok())
                .and_then(|value| value.strip_prefix("Bearer "))
                .unwrap_or_default()
                .to_owned();
            let body = json!({"error": {
                "message": format!("Incorrect API key provided: {key}. You can find your API key at https://platform.example/account/api-keys."),
                "type": "invalid_request_error",
                "param": null,
                "code": "invalid_api_key"
            }});
            whole(&record, status, "application/json", json_bytes(&body))
        }
        Reply::Answer(answer) => {
            let request: Value = serde_json::from_slice(&record.body).unwrap_or(Value::Null);
            let ollama = record.path == "/api/chat";
            let model = request["model"].as_str().unwrap_or("fake-model").to_owned();
            if request["stream"] != json!(true) {
                let body = if ollama {
                    ollama_whole(&answer, &model)
                } else {
                    openai_whole(&answer, &model)
                };
                return whole(&record, 200, "application/json", json_bytes(&body));
            }
            let connection = record.remote_addr.and_then(|addr| {
                shared
                    .connections
                    .lock()
                    .expect("connections lock")
                    .get(&addr)
                    .cloned()
            });
            let (content_type, steps) = if ollama {
                ("application/x-ndjson", ollama_steps(&answer, &model))
            } else {
                let include_usage = request["stream_options"]["include_usage"] == json!(true);
                (
                    "text/event-stream",
                    openai_steps(&answer, &model, include_usage),
                )
            };
            streamed(
                &shared,
                &record,
                connection,
                content_type,
                steps,
                answer.pace,
            )
        }
    }
}

fn json_bytes(value: &Value) -> Bytes {
    Bytes::from(serde_json::to_vec(value).expect("serialise JSON"))
}

/// A complete response, recorded as sent.
fn whole(record: &Record, status: u16, content_type: &str, body: Bytes) -> Response {
    let status = StatusCode::from_u16(status).expect("valid status");
    *record.status.lock().expect("status lock") = Some(status);
    record.sent(&body);
    Response::builder()
        .status(status)
        .content_type(content_type)
        .body(body)
}

/// One step of a streamed body.
enum Step {
    /// Send these bytes; `content` when they carry a content chunk (paced).
    Send { bytes: Bytes, content: bool },
    /// Wait for [`FakeLlm::release`].
    Hold,
    /// Fail the body: the connection is dropped without the end of the answer.
    Break,
}

/// The steps of an answer around its content frames: the hold after the first, the break
/// after `break_after`, and what follows the last content frame unless broken.
fn around_content(answer: &Answer, content: Vec<Bytes>, ending: Vec<Bytes>) -> VecDeque<Step> {
    let mut steps = VecDeque::new();
    for (index, bytes) in content.into_iter().enumerate() {
        if answer.break_after == Some(index) {
            steps.push_back(Step::Break);
            return steps;
        }
        steps.push_back(Step::Send {
            bytes,
            content: true,
        });
        if index == 0 && answer.hold_after_first {
            steps.push_back(Step::Hold);
        }
    }
    if answer.break_after.is_some() {
        steps.push_back(Step::Break);
        return steps;
    }
    steps.extend(ending.into_iter().map(|bytes| Step::Send {
        bytes,
        content: false,
    }));
    steps
}

fn sse(data: &Value) -> Bytes {
    Bytes::from(format!("data: {data}\n\n"))
}

fn openai_chunk(model: &str, choices: Value) -> Value {
    json!({
        "id": "chatcmpl-fake",
        "object": "chat.completion.chunk",
        "created": 1_700_000_000,
        "model": model,
        "choices": choices,
    })
}

fn usage_json(answer: &Answer) -> Value {
    match answer.usage {
        Some((prompt, completion)) => json!({
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        }),
        None => Value::Null,
    }
}

fn openai_steps(answer: &Answer, model: &str, include_usage: bool) -> VecDeque<Step> {
    let content = answer
        .chunks
        .iter()
        .map(|chunk| {
            sse(&openai_chunk(
                model,
                json!([{"index": 0, "delta": {"content": chunk}, "finish_reason": null}]),
            ))
        })
        .collect();
    let mut ending = vec![sse(&openai_chunk(
        model,
        json!([{"index": 0, "delta": {}, "finish_reason": answer.finish_reason}]),
    ))];
    if include_usage && answer.usage.is_some() {
        let mut chunk = openai_chunk(model, json!([]));
        chunk["usage"] = usage_json(answer);
        ending.push(sse(&chunk));
    }
    ending.push(Bytes::from_static(b"data: [DONE]\n\n"));
    let mut steps = around_content(answer, content, ending);
    // As OpenAI does, the first event only names the role.
    let role = sse(&openai_chunk(
        model,
        json!([{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": null}]),
    ));
    steps.push_front(Step::Send {
        bytes: role,
        content: false,
    });
    steps
}

fn openai_whole(answer: &Answer, model: &str) -> Value {
    json!({
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": model,
        "choices": [{
            "index": 0,
            "message": {"role": "assistant", "content": answer.text()},
            "finish_reason": answer.finish_reason,
        }],
        "usage": usage_json(answer),
    })
}

fn ndjson(value: &Value) -> Bytes {
    Bytes::from(format!("{value}\n"))
}

fn ollama_line(model: &str, content: &str) -> Value {
    json!({
        "model": model,
        "created_at": "2026-01-01T00:00:00Z",
        "message": {"role": "assistant", "content": content},
        "done": false,
    })
}

fn ollama_final(answer: &Answer, model: &str, content: &str) -> Value {
    let mut line = ollama_line(model, content);
    line["done"] = json!(true);
    line["done_reason"] = json!(answer.finish_reason);
    line["total_duration"] = json!(1_000_000);
    if let Some((prompt, completion)) = answer.usage {
        line["prompt_eval_count"] = json!(prompt);
        line["eval_count"] = json!(completion);
    }
    line
}

fn ollama_steps(answer: &Answer, model: &str) -> VecDeque<Step> {
    let content = answer
        .chunks
        .iter()
        .map(|chunk| ndjson(&ollama_line(model, chunk)))
        .collect();
    let ending = vec![ndjson(&ollama_final(answer, model, ""))];
    around_content(answer, content, ending)
}

fn ollama_whole(answer: &Answer, model: &str) -> Value {
    ollama_final(answer, model, &answer.text())
}

/// Notifies [`FakeLlm::client_left`] when dropped while still armed, that is when the server
/// dropped a body before it was complete: the client went away.
struct DepartureGuard {
    shared: Arc<Shared>,
    armed: bool,
}

impl DepartureGuard {
    /// The body ends as scripted: its drop is no departure.
    fn disarm(&mut self) {
        self.armed = false;
    }
}

impl Drop for DepartureGuard {
    fn drop(&mut self) {
        if self.armed {
            self.shared.client_left.notify_one();
        }
    }
}

struct BodyState {
    steps: VecDeque<Step>,
    shared: Arc<Shared>,
    record: Arc<Record>,
    connection: Option<Arc<ConnectionWatch>>,
    pace: Option<Duration>,
    sent_content: bool,
    guard: DepartureGuard,
}

fn streamed(
    shared: &Arc<Shared>,
    record: &Arc<Record>,
    connection: Option<Arc<ConnectionWatch>>,
    content_type: &str,
    steps: VecDeque<Step>,
    pace: Option<Duration>,
) -> Response {
    *record.status.lock().expect("status lock") = Some(StatusCode::OK);
    let state = BodyState {
        steps,
        shared: Arc::clone(shared),
        record: Arc::clone(record),
        connection,
        pace,
        sent_content: false,
        guard: DepartureGuard {
            shared: Arc::clone(shared),
            armed: true,
        },
    };
    let body = stream::unfold(state, |mut state| async move {
        let mut closed = state
            .connection
            .as_ref()
            .map(|connection| connection.closed.subscribe());
        loop {
            match state.steps.pop_front() {
                Some(Step::Send { bytes, content }) => {
                    if content {
                        if let (true, Some(pace)) = (state.sent_content, state.pace) {
                            tokio::select! {
                                // The scripted pace between content frames.
                                () = tokio::time::sleep(pace) => {}
                                // Ending with the guard armed reports the departure.
                                () = client_gone(&mut closed) => return None,
                            }
                        }
                        state.sent_content = true;
                    }
                    state.record.sent(&bytes);
                    return Some((Ok::<Bytes, io::Error>(bytes), state));
                }
                Some(Step::Hold) => {
                    tokio::select! {
                        () = state.shared.release.notified() => {}
                        () = client_gone(&mut closed) => return None,
                    }
                }
                Some(Step::Break) => {
                    // Pending once lets the server flush the chunks sent so far; then every
                    // write fails, so the connection ends without the body's terminator.
                    tokio::task::yield_now().await;
                    state.guard.disarm();
                    if let Some(connection) = &state.connection {
                        connection.aborted.store(true, Ordering::SeqCst);
                    }
                    let broken = io::Error::other("answer broken off on purpose");
                    return Some((Err(broken), state));
                }
                None => {
                    state.guard.disarm();
                    return None;
                }
            }
        }
    });
    Response::builder()
        .status(StatusCode::OK)
        .content_type(content_type)
        .header("cache-control", "no-cache")
        .body(Body::from_bytes_stream(body))
}

/// Resolves when the connection's client closed it (never, when it is not watched).
async fn client_gone(closed: &mut Option<watch::Receiver<bool>>) {
    match closed {
        Some(closed) => {
            // An error means the watch itself is gone, which only happens with the server.
            let _ = closed.wait_for(|closed| *closed).await;
        }
        None => std::future::pending().await,
    }
}

/// What the fake knows of one connection from its socket.
struct ConnectionWatch {
    /// Set once a read found the client's end closed (or failed).
    closed: watch::Sender<bool>,
    /// Set to make every further write fail, which ends the connection.
    aborted: AtomicBool,
}

/// Accepts TCP connections and watches each of them.
struct WatchedAcceptor {
    inner: TcpAcceptor,
    shared: Arc<Shared>,
}

impl Acceptor for WatchedAcceptor {
    type Io = WatchedStream;

    fn local_addr(&self) -> Vec<LocalAddr> {
        self.inner.local_addr()
    }

    async fn accept(&mut self) -> io::Result<(WatchedStream, LocalAddr, RemoteAddr, Scheme)> {
        let (io, local_addr, remote_addr, scheme) = self.inner.accept().await?;
        let watch = Arc::new(ConnectionWatch {
            closed: watch::Sender::new(false),
            aborted: AtomicBool::new(false),
        });
        if let Some(addr) = remote_addr.as_socket_addr() {
            self.shared
                .connections
                .lock()
                .expect("connections lock")
                .insert(*addr, Arc::clone(&watch));
        }
        Ok((WatchedStream { io, watch }, local_addr, remote_addr, scheme))
    }
}

/// A TCP stream that reports its client closing and can be made to fail.
struct WatchedStream {
    io: TcpStream,
    watch: Arc<ConnectionWatch>,
}

impl WatchedStream {
    fn check_aborted(&self) -> io::Result<()> {
        if self.watch.aborted.load(Ordering::SeqCst) {
            return Err(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                "connection broken off on purpose",
            ));
        }
        Ok(())
    }
}

impl AsyncRead for WatchedStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let room = buf.remaining() > 0;
        let result = Pin::new(&mut self.io).poll_read(cx, buf);
        let at_end = matches!(result, Poll::Ready(Ok(()))) && room && buf.filled().len() == before;
        if at_end || matches!(result, Poll::Ready(Err(_))) {
            self.watch.closed.send_replace(true);
        }
        result
    }
}

impl AsyncWrite for WatchedStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.check_aborted()?;
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.check_aborted()?;
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.check_aborted()?;
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

/// Binds a loopback port and frees it, so that connecting to it is refused.
pub fn refused_addr() -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind loopback");
    listener.local_addr().expect("local address")
}
