//! The outermost endpoint: route lookup, metrics, request ids, cross-origin headers, and the
//! shaping of framework errors (404 with an empty body, 405 with `allow`).

use std::sync::Arc;
use std::time::Instant;

use poem::http::{HeaderValue, Method, StatusCode, header};
use poem::{Body, Endpoint, IntoResponse, Request, Response};
use uuid::Uuid;

use super::connections::{ClientWatch, Connections};
use super::routes::{RouteEntry, RouteKind, RouteTable};
use crate::error::ApiError;
use crate::metrics::ApiMetrics;

const REQUEST_ID: &str = "x-request-id";

/// Marks a response whose body is a long-lived stream: the pending gauge stays up until the
/// body ends.
#[derive(Debug, Clone, Copy)]
pub struct OpenStream;

/// The shell around the API, reference and MCP endpoints.
pub struct Shell<A, R, M> {
    pub api: A,
    pub reference: R,
    pub mcp: M,
    pub routes: Arc<RouteTable>,
    pub metrics: ApiMetrics,
    pub connections: Connections,
}

/// The method label: upper-case standard methods, empty for unknown ones.
fn method_label(method: &Method) -> &'static str {
    match *method {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::DELETE => "DELETE",
        Method::PATCH => "PATCH",
        Method::HEAD => "HEAD",
        Method::OPTIONS => "OPTIONS",
        Method::CONNECT => "CONNECT",
        Method::TRACE => "TRACE",
        _ => "",
    }
}

/// The request id: the client's own when it is a printable value, else a new UUID.
fn request_id(req: &Request) -> HeaderValue {
    req.headers()
        .get(REQUEST_ID)
        .filter(|v| !v.is_empty() && v.as_bytes().iter().all(|b| (0x21..=0x7e).contains(b)))
        .cloned()
        .unwrap_or_else(|| {
            HeaderValue::from_str(&Uuid::new_v4().to_string())
                .unwrap_or(HeaderValue::from_static("invalid"))
        })
}

fn allow_header(methods: &[Method]) -> String {
    methods
        .iter()
        .map(Method::as_str)
        .collect::<Vec<_>>()
        .join(",")
}

/// Turns an error of the inner endpoints into the interface's response.
fn error_response(err: poem::Error, methods: &[Method]) -> Response {
    if err.is::<poem::error::MethodNotAllowedError>() {
        return Response::builder()
            .status(StatusCode::METHOD_NOT_ALLOWED)
            .header(header::ALLOW, allow_header(methods))
            .finish();
    }
    if err.is::<poem::error::NotFoundError>() {
        return Response::builder().status(StatusCode::NOT_FOUND).finish();
    }
    if let Some(api) = err.downcast_ref::<ApiError>() {
        return super::respond::error_response(api);
    }
    // Any other framework rejection: its status with its text, as plain text.
    let status = err.status();
    let message = err.to_string();
    Response::builder()
        .status(status)
        .content_type("text/plain; charset=utf-8")
        .body(message)
}

/// Answers a CORS preflight for an API route.
fn preflight(req: &Request, methods: &[Method]) -> Response {
    let mut builder = Response::builder()
        .status(StatusCode::OK)
        .header(header::ACCESS_CONTROL_ALLOW_ORIGIN, "*")
        .header(header::ACCESS_CONTROL_ALLOW_METHODS, allow_header(methods))
        .header(header::ACCESS_CONTROL_MAX_AGE, "86400");
    if let Some(requested) = req.headers().get(header::ACCESS_CONTROL_REQUEST_HEADERS) {
        builder = builder.header(header::ACCESS_CONTROL_ALLOW_HEADERS, requested.clone());
    }
    builder.finish()
}

fn is_preflight(req: &Request) -> bool {
    req.method() == Method::OPTIONS
        && req.headers().contains_key(header::ORIGIN)
        && req
            .headers()
            .contains_key(header::ACCESS_CONTROL_REQUEST_METHOD)
}

impl<A: Endpoint, R: Endpoint, M: Endpoint> Endpoint for Shell<A, R, M> {
    type Output = Response;

    async fn call(&self, req: Request) -> poem::Result<Response> {
        let started = Instant::now();
        let method = method_label(req.method());
        let Some(route) = self.routes.find(req.uri().path()) else {
            // Unknown path: empty 404, no request id.
            let response = Response::builder().status(StatusCode::NOT_FOUND).finish();
            self.record(method, "", response.status(), started);
            return Ok(response);
        };
        let pending = self
            .metrics
            .requests_pending
            .with_label_values(&[method, route.template.as_str()]);
        pending.inc();
        let client = self.connections.watch(req.remote_addr().as_socket_addr());
        let mut response = match route.kind {
            RouteKind::Reference => outcome(self.reference.call(req).await, route),
            RouteKind::Api | RouteKind::Statistics | RouteKind::Mcp => {
                self.api_call(req, route, &client).await
            }
        };
        self.record(method, &route.template, response.status(), started);
        if response.data::<OpenStream>().is_some() {
            keep_pending_while_streaming(&mut response, pending, client);
        } else {
            pending.dec();
        }
        Ok(response)
    }
}

/// The response of an inner endpoint, or the interface's answer to its error.
fn outcome<T: IntoResponse>(result: poem::Result<T>, route: &RouteEntry) -> Response {
    match result {
        Ok(output) => output.into_response(),
        Err(err) => error_response(err, &route.methods),
    }
}

/// Keeps the pending gauge up until a streamed body ends or the client goes away; then the
/// body (and what it reads from, such as a model server's answer) is dropped.
fn keep_pending_while_streaming(
    response: &mut Response,
    pending: prometheus::Gauge,
    client: ClientWatch,
) {
    let guard = PendingGuard(pending);
    let body = response.take_body();
    let stream = futures_util::StreamExt::map(body.into_bytes_stream(), move |chunk| {
        let _keep = &guard;
        chunk
    });
    let stream = futures_util::StreamExt::take_until(stream, client.gone());
    response.set_body(Body::from_bytes_stream(stream));
}

/// Adds the headers of every API response: the request id and the cross-origin ones.
fn add_api_headers(response: &mut Response, id: HeaderValue, kind: RouteKind) {
    let headers = response.headers_mut();
    headers.insert(REQUEST_ID, id);
    headers.insert(
        header::ACCESS_CONTROL_ALLOW_ORIGIN,
        HeaderValue::from_static("*"),
    );
    headers.insert(
        header::ACCESS_CONTROL_EXPOSE_HEADERS,
        HeaderValue::from_static(if kind == RouteKind::Mcp {
            "x-request-id, mcp-session-id"
        } else {
            "x-request-id, x-service-tracing-id"
        }),
    );
}

impl<A: Endpoint, R: Endpoint, M: Endpoint> Shell<A, R, M> {
    /// An API, statistics or MCP request: a preflight is answered here, anything else by its
    /// endpoint, with the request id and cross-origin headers added.
    async fn api_call(
        &self,
        mut req: Request,
        route: &RouteEntry,
        client: &ClientWatch,
    ) -> Response {
        let id = request_id(&req);
        req.set_data(super::extract::RouteParams(route.params.clone()));
        req.set_data(client.clone());
        let mut response = if is_preflight(&req) {
            preflight(&req, &route.methods)
        } else if route.kind == RouteKind::Mcp {
            outcome(self.mcp.call(req).await, route)
        } else {
            outcome(self.api.call(req).await, route)
        };
        add_api_headers(&mut response, id, route.kind);
        response
    }
}

impl<A, R, M> Shell<A, R, M> {
    fn record(&self, method: &str, endpoint: &str, status: StatusCode, started: Instant) {
        let status = status.as_u16().to_string();
        let labels = [method, status.as_str(), endpoint];
        self.metrics.requests_total.with_label_values(&labels).inc();
        self.metrics
            .requests_duration
            .with_label_values(&labels)
            .observe(started.elapsed().as_secs_f64());
    }
}

/// Decrements the pending gauge when dropped.
struct PendingGuard(prometheus::Gauge);

impl Drop for PendingGuard {
    fn drop(&mut self) {
        self.0.dec();
    }
}
