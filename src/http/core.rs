//! Routes without an API key: `/`, `/healthz`, `/metrics` (reference side) and
//! `/statistics` (API side).

use poem::Request;
use poem::web::{Html, Json as PoemJson};
use poem::{Endpoint, IntoResponse, Response, handler};
use poem_openapi::OpenApi;
use serde_json::json;

use super::ApiTags;
use super::extract::state;
use super::respond::Json;
use super::statistics::{Statistics, check_interval};
use crate::error::ApiError;

/// `GET /`: a fixed string naming the service.
#[handler]
pub fn root() -> Response {
    Response::builder()
        .content_type("text/plain; charset=utf-8")
        .body("Trove Knowledge Retrieval and Agent Service")
}

/// `GET /healthz`: every component `ok` once started (not checked, as the interface says).
#[handler]
pub fn healthz() -> impl IntoResponse {
    PoemJson(
        json!({"status": "ok", "components": {"database": "ok", "queue": "ok", "sidecar": "ok"}}),
    )
}

/// `GET /metrics`.
#[handler]
pub fn metrics(req: &Request) -> Response {
    let body = req
        .data::<crate::state::AppState>()
        .map(|s| s.metrics.render())
        .unwrap_or_default();
    Response::builder()
        .content_type("text/plain; version=0.0.4")
        .body(body)
}

/// `GET /openapi.json`: the deployment's document (see [`super::extensions`]).
pub struct Document(pub String);

impl Endpoint for Document {
    type Output = Response;

    async fn call(&self, _req: Request) -> poem::Result<Response> {
        Ok(Response::builder()
            .content_type("application/json")
            .body(self.0.clone()))
    }
}

/// An interactive reference: its page (which embeds the deployment's document) at the root of
/// the path it is nested at, its other assets from `assets`.
pub struct Page<E> {
    page: String,
    assets: E,
}

impl<E> Page<E> {
    pub fn new(page: String, assets: E) -> Self {
        Self { page, assets }
    }
}

impl<E: Endpoint> Endpoint for Page<E> {
    type Output = Response;

    async fn call(&self, req: Request) -> poem::Result<Response> {
        if matches!(req.uri().path(), "" | "/") {
            return Ok(Html(self.page.clone()).into_response());
        }
        self.assets.call(req).await.map(IntoResponse::into_response)
    }
}

#[derive(Default)]
pub struct CoreApi;

#[OpenApi(tag = "ApiTags::Service")]
impl CoreApi {
    /// Queue statistics
    ///
    /// No API key. `interval` is a Prometheus duration (`15m`, `1h30m`, `0`). In this release
    /// only `document_queue` (messages in the document queue stream) carries a value.
    #[oai(path = "/statistics", method = "get")]
    async fn statistics(&self, req: &Request) -> poem::Result<Json<Statistics>> {
        check_interval(req.uri().query())?;
        let state = state(req)?;
        let document_queue = state
            .queue
            .jobs_in_progress()
            .await
            .map_err(|error| ApiError::StreamInfo(error.to_string()))?;
        Ok(Json(Statistics {
            documents_added: 0.0,
            documents_processed: 0.0,
            documents_processed_latency: 0.0,
            documents_failed: 0.0,
            agent_executions: 0.0,
            agent_execution_latency: 0.0,
            agent_execution_latencies: Vec::new(),
            document_queue,
            document_queue_processed_latencies: Vec::new(),
        }))
    }
}
