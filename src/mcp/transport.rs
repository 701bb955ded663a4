//! `/mcp` as a poem endpoint around rmcp's streamable HTTP server.
//!
//! rmcp ([`StreamableHttpService`]) does the protocol: sessions (`Mcp-Session-Id`), the
//! stateless 2026-07-28 mode (`MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Name`, request
//! `_meta`, `resultType`), `Accept` and `Content-Type` checks, the 4 MiB body limit, JSON-RPC
//! parsing and the SSE framing, with the interface's texts for those rejections.
//!
//! This endpoint adds what rmcp does not do, or does differently from the interface:
//!
//! 1. `Host` (403) and method (405) checks *before* authentication, with rmcp's own texts, so
//!    those rejections do not depend on the key headers.
//! 2. Authentication with the REST key check; a failure answers the REST 401 JSON body. The
//!    key ([`AuthContext`]) travels to the tools in the request's extensions, which rmcp hands
//!    to the handler inside `http::request::Parts`.
//! 3. `DELETE` of an unknown session: rmcp answers 202; the interface wants 404
//!    `Not Found: Session not found`.
//! 4. A POST that is not `initialize` and has no session: rmcp answers 400 `Bad Request:
//!    Session ID is required`; the interface wants 422 `Unexpected message, expect initialize
//!    request` (the 400 stays for GET and DELETE).
//! 5. `initialize` naming 2026-07-28: rmcp negotiates it down to 2025-11-25 (the revision has
//!    no handshake); the interface echoes every supported revision, so the answer is
//!    rewritten to 2026-07-28.
//! 6. rmcp prefixes its transport-level `_meta` rejection with `Invalid params: `; the
//!    interface's message is `request _meta is missing or has malformed required fields: …`.
//! 7. On 2026-07-28 requests rmcp turns every `-32002` into `-32602`; the interface keeps
//!    `-32002` for `Pipeline not found`. rmcp also refuses `ping` on that revision (-32601,
//!    HTTP 404); the interface answers every `ping` with an empty result.
//! 8. Event-stream responses are marked as open streams for the pending-requests gauge.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use poem::http::{HeaderValue, Method, StatusCode, header};
use poem::{Body, Endpoint, Request, Response};
use rmcp::transport::StreamableHttpService;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{SessionManager, StreamableHttpServerConfig};
use serde_json::Value;
use tonic::codegen::{Body as HttpBody, Bytes};

use super::handler::TroveMcp;
use crate::auth::key_check::authenticate;
use crate::http::shell::OpenStream;
use crate::state::AppState;

/// Largest MCP request body (interface: 4 MiB).
pub const MAX_BODY_BYTES: usize = 4 * 1024 * 1024;

/// Hosts the `Host` header may name.
pub const ALLOWED_HOSTS: [&str; 3] = ["localhost", "127.0.0.1", "::1"];

/// Methods of `/mcp`.
pub const ALLOW: &str = "GET, POST, DELETE";

const SESSION_ID: &str = "mcp-session-id";
const PROTOCOL_VERSION: &str = "mcp-protocol-version";
/// Revisions with sessions (2026-07-28 has none; rmcp rejects unsupported ones itself).
const SESSION_REVISIONS: [&str; 4] = ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"];

/// The `/mcp` endpoint.
pub struct McpEndpoint {
    service: StreamableHttpService<TroveMcp, LocalSessionManager>,
    sessions: Arc<LocalSessionManager>,
    state: AppState,
}

/// Builds the endpoint: in-memory sessions (a session lives on the replica that created it).
pub fn endpoint(state: AppState) -> McpEndpoint {
    let mut sessions = LocalSessionManager::default();
    // No SSE priming events: every response stream carries JSON-RPC messages only.
    sessions.session_config.sse_retry = None;
    let sessions = Arc::new(sessions);
    let config = StreamableHttpServerConfig::default()
        .with_allowed_hosts(ALLOWED_HOSTS)
        .with_max_request_body_bytes(MAX_BODY_BYTES)
        .with_legacy_session_mode(true)
        .with_json_response(true)
        .with_sse_retry(None)
        .with_sse_keep_alive(Some(Duration::from_secs(15)));
    let handler_state = state.clone();
    let service = StreamableHttpService::new(
        move || Ok(TroveMcp::new(handler_state.clone())),
        sessions.clone(),
        config,
    );
    McpEndpoint {
        service,
        sessions,
        state,
    }
}

fn plain(status: StatusCode, text: &'static str) -> Response {
    Response::builder()
        .status(status)
        .content_type("text/plain; charset=utf-8")
        .body(text)
}

/// The host named by `Host` (or the request URI's authority), lower-case, without brackets;
/// else the 400 text for an unreadable or missing one.
fn request_host(req: &Request) -> Result<String, &'static str> {
    let authority = match req.headers().get(header::HOST) {
        Some(value) => {
            let text = value
                .to_str()
                .map_err(|_| "Bad Request: Invalid Host header encoding")?;
            poem::http::uri::Authority::try_from(text)
                .map_err(|_| "Bad Request: Invalid Host header")?
        }
        None => req
            .uri()
            .authority()
            .cloned()
            .ok_or("Bad Request: missing Host header")?,
    };
    Ok(authority
        .host()
        .trim_matches(|c| c == '[' || c == ']')
        .to_ascii_lowercase())
}

fn header_str<'a>(req: &'a Request, name: &str) -> Option<&'a str> {
    req.headers().get(name).and_then(|v| v.to_str().ok())
}

/// Reads a request body up to `limit + 1` bytes: enough for rmcp to see that it is too large
/// (and answer 413 after its `Accept` and `Content-Type` checks) without holding more.
async fn read_limited(body: Body, limit: usize) -> Result<Vec<u8>, std::io::Error> {
    let mut stream = std::pin::pin!(body.into_bytes_stream());
    let mut data = Vec::new();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk?;
        let room = (limit + 1).saturating_sub(data.len());
        data.extend_from_slice(&chunk[..chunk.len().min(room)]);
        if data.len() > limit {
            break;
        }
    }
    Ok(data)
}

/// The data frames of a response body of rmcp.
fn frames<B>(body: B) -> impl futures_util::Stream<Item = Result<Bytes, std::io::Error>> + Send
where
    B: HttpBody<Data = Bytes, Error = Infallible> + Send + Unpin + 'static,
{
    futures_util::stream::unfold(body, |mut body| async move {
        loop {
            let frame = std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await?;
            match frame {
                Ok(frame) => {
                    if let Ok(data) = frame.into_data() {
                        return Some((Ok(data), body));
                    }
                }
                Err(never) => match never {},
            }
        }
    })
}

/// Whether a POST body is an `initialize` request naming 2026-07-28.
fn initialize_2026(body: &[u8]) -> bool {
    let Ok(message) = serde_json::from_slice::<Value>(body) else {
        return false;
    };
    message.get("method").and_then(Value::as_str) == Some("initialize")
        && message
            .pointer("/params/protocolVersion")
            .and_then(Value::as_str)
            == Some("2026-07-28")
}

/// Rewrites a complete (non-streaming) response body of rmcp where the interface differs.
fn fix_complete_body(method: &Method, status: StatusCode, body: Vec<u8>) -> (StatusCode, Vec<u8>) {
    if *method == Method::POST
        && status == StatusCode::BAD_REQUEST
        && body == b"Bad Request: Session ID is required"
    {
        return (
            StatusCode::UNPROCESSABLE_ENTITY,
            b"Unexpected message, expect initialize request".to_vec(),
        );
    }
    let Ok(text) = String::from_utf8(body) else {
        return (status, Vec::new());
    };
    let Ok(message) = serde_json::from_str::<Value>(&text) else {
        return (status, text.into_bytes());
    };
    let code = message.pointer("/error/code").and_then(Value::as_i64);
    let error_message = message
        .pointer("/error/message")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if code == Some(-32602)
        && error_message.starts_with(
            "Invalid params: request _meta is missing or has malformed required fields",
        )
    {
        let fixed = text.replacen("\"Invalid params: request _meta", "\"request _meta", 1);
        return (status, fixed.into_bytes());
    }
    if code == Some(-32602) && error_message == "Pipeline not found" {
        let fixed = text.replacen("\"code\":-32602", "\"code\":-32002", 1);
        return (status, fixed.into_bytes());
    }
    if status == StatusCode::NOT_FOUND && code == Some(-32601) && error_message == "ping" {
        let answer = serde_json::json!({
            "jsonrpc": "2.0",
            "id": message.get("id").cloned().unwrap_or(Value::Null),
            "result": {"resultType": "complete"},
        });
        return (StatusCode::OK, answer.to_string().into_bytes());
    }
    (status, text.into_bytes())
}

/// Step 1: the `Host` (403, or 400 when unreadable) and method (405) checks, before the key
/// check; `None` when the request passes both.
fn refuse_host_or_method(req: &Request) -> Option<Response> {
    match request_host(req) {
        Ok(host) if ALLOWED_HOSTS.contains(&host.as_str()) => {}
        Ok(_) => {
            return Some(plain(
                StatusCode::FORBIDDEN,
                "Forbidden: Host header is not allowed",
            ));
        }
        Err(text) => return Some(plain(StatusCode::BAD_REQUEST, text)),
    }
    if !matches!(*req.method(), Method::GET | Method::POST | Method::DELETE) {
        let mut response = plain(StatusCode::METHOD_NOT_ALLOWED, "Method Not Allowed");
        response
            .headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static(ALLOW));
        return Some(response);
    }
    None
}

/// Step 4: buffers a POST body (bounded) and puts it back; whether it is an `initialize`
/// naming 2026-07-28. Other methods get an empty body. `Err` is the 400 of an unreadable body.
async fn buffer_body(req: &mut Request) -> Result<bool, Response> {
    if req.method() != Method::POST {
        req.set_body(Body::empty());
        return Ok(false);
    }
    let body = match read_limited(req.take_body(), MAX_BODY_BYTES).await {
        Ok(body) => body,
        Err(error) => {
            return Err(Response::builder()
                .status(StatusCode::BAD_REQUEST)
                .content_type("text/plain; charset=utf-8")
                .body(format!("Failed to read request body: {error}")));
        }
    };
    let echo_2026 = initialize_2026(&body);
    req.set_body(Body::from_vec(body));
    Ok(echo_2026)
}

/// An rmcp event stream, with the `initialize` answer's negotiated 2025-11-25 rewritten to
/// 2026-07-28 when the request named that revision (`echo_2026`).
fn stream_body<B>(body: B, echo_2026: bool) -> Body
where
    B: HttpBody<Data = Bytes, Error = Infallible> + Send + Unpin + 'static,
{
    let stream = frames(body);
    if !echo_2026 {
        return Body::from_bytes_stream(stream);
    }
    let mut rewritten = false;
    Body::from_bytes_stream(stream.map(move |chunk| {
        chunk.map(|data| {
            if rewritten {
                return data;
            }
            match std::str::from_utf8(&data) {
                Ok(text) if text.contains("\"protocolVersion\":\"2025-11-25\"") => {
                    rewritten = true;
                    Bytes::from(text.replacen(
                        "\"protocolVersion\":\"2025-11-25\"",
                        "\"protocolVersion\":\"2026-07-28\"",
                        1,
                    ))
                }
                _ => data,
            }
        })
    }))
}

impl McpEndpoint {
    /// Step 3: whether the request ends a session (of a revision with sessions) that does
    /// not exist, which rmcp would answer 202.
    async fn deletes_unknown_session(&self, req: &Request) -> bool {
        if req.method() != Method::DELETE {
            return false;
        }
        let Some(session_id) = header_str(req, SESSION_ID) else {
            return false;
        };
        header_str(req, PROTOCOL_VERSION).is_none_or(|v| SESSION_REVISIONS.contains(&v))
            && !self
                .sessions
                .has_session(&session_id.into())
                .await
                .unwrap_or(false)
    }

    /// Step 5: rmcp, with its answer adapted: no session id on stateless (2026-07-28)
    /// answers, event streams marked open, complete bodies rewritten where the interface
    /// differs.
    async fn forward(&self, req: Request, echo_2026: bool) -> Response {
        let method = req.method().clone();
        // 2026-07-28 has no sessions: its responses carry no session id (rmcp, which serves
        // the revision within its session mode, would send one; the unused session expires).
        let stateless = echo_2026 || header_str(&req, "mcp-protocol-version") == Some("2026-07-28");
        let http_request: poem::http::Request<_> = req.into();
        let response = self.service.handle(http_request).await;
        let (parts, body) = response.into_parts();
        let is_stream = parts
            .headers
            .get(header::CONTENT_TYPE)
            .is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"));
        let mut builder = Response::builder().status(parts.status);
        for (name, value) in &parts.headers {
            if name != header::CONTENT_LENGTH && !(stateless && name.as_str() == SESSION_ID) {
                builder = builder.header(name.clone(), value.clone());
            }
        }

        if is_stream {
            let mut response = builder.body(stream_body(body, echo_2026));
            response.set_data(OpenStream);
            return response;
        }

        // Complete bodies (JSON and plain text) are small or already in memory.
        let mut collected = Vec::new();
        let mut stream = std::pin::pin!(frames(body));
        while let Some(Ok(chunk)) = stream.next().await {
            collected.extend_from_slice(&chunk);
        }
        let (status, collected) = fix_complete_body(&method, parts.status, collected);
        builder.status(status).body(collected)
    }
}

impl Endpoint for McpEndpoint {
    type Output = Response;

    async fn call(&self, mut req: Request) -> poem::Result<Response> {
        // 1. Host, then method: before the key check.
        if let Some(refusal) = refuse_host_or_method(&req) {
            return Ok(refusal);
        }

        // 2. The key, as REST checks it.
        let auth = match authenticate(
            &self.state.pool,
            req.headers(),
            &self.state.metrics.key_check_unavailable,
        )
        .await
        {
            Ok(auth) => auth,
            Err(error) => return Ok(crate::http::respond::error_response(&error)),
        };

        // 3. Ending a session that does not exist (rmcp would answer 202).
        if self.deletes_unknown_session(&req).await {
            return Ok(plain(StatusCode::NOT_FOUND, "Not Found: Session not found"));
        }

        // 4. The body (bounded), to know an `initialize` naming 2026-07-28.
        let echo_2026 = match buffer_body(&mut req).await {
            Ok(echo_2026) => echo_2026,
            Err(response) => return Ok(response),
        };
        req.extensions_mut().insert(auth);

        // 5. rmcp.
        Ok(self.forward(req, echo_2026).await)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_post_without_session_is_unprocessable() {
        let (status, body) = fix_complete_body(
            &Method::POST,
            StatusCode::BAD_REQUEST,
            b"Bad Request: Session ID is required".to_vec(),
        );
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
        assert_eq!(body, b"Unexpected message, expect initialize request");
        let (status, _) = fix_complete_body(
            &Method::GET,
            StatusCode::BAD_REQUEST,
            b"Bad Request: Session ID is required".to_vec(),
        );
        assert_eq!(status, StatusCode::BAD_REQUEST);
    }

    #[test]
    fn meta_errors_lose_the_prefix_and_pipeline_not_found_keeps_its_code() {
        let body = br#"{"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"Invalid params: request _meta is missing or has malformed required fields: io.modelcontextprotocol/protocolVersion"}}"#;
        let (_, fixed) = fix_complete_body(&Method::POST, StatusCode::BAD_REQUEST, body.to_vec());
        let fixed: Value = serde_json::from_slice(&fixed).unwrap_or_default();
        assert_eq!(
            fixed["error"]["message"],
            "request _meta is missing or has malformed required fields: io.modelcontextprotocol/protocolVersion"
        );
        let body = br#"{"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"Pipeline not found","data":{"id":"x"}}}"#;
        let (_, fixed) = fix_complete_body(&Method::POST, StatusCode::OK, body.to_vec());
        let fixed: Value = serde_json::from_slice(&fixed).unwrap_or_default();
        assert_eq!(fixed["error"]["code"], -32002);
    }

    #[test]
    fn initialize_2026_is_recognized() {
        assert!(initialize_2026(
            br#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2026-07-28"}}"#
        ));
        assert!(!initialize_2026(
            br#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25"}}"#
        ));
        assert!(!initialize_2026(b"not json"));
    }
}
