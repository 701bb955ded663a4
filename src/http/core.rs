//! Routes without an API key: `/`, `/healthz`, `/metrics` (reference side) and
//! `/statistics` (API side).

use poem::Request;
use poem::web::Json as PoemJson;
use poem::{IntoResponse, Response, handler};
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
