//! `GET /tracing/{execution_id}`: the trace of an agent execution.

use poem::Request;
use poem_openapi::{Object, OpenApi};
use serde::Serialize;
use serde_json::Value;
use uuid::Uuid;

use super::ApiTags;
use super::extract::{self, Auth, state};
use super::respond::Json;
use crate::service::agents::{self as service, Trace};

/// What an execution retrieved, sent and received.
#[derive(Debug, Object, Serialize)]
#[oai(rename = "Trace")]
pub struct TraceObject {
    /// The execution's `x-service-tracing-id`.
    id: Uuid,
    agent_id: Uuid,
    pipeline_id: Uuid,
    llm_id: Uuid,
    /// RFC 3339.
    created_at: String,
    /// Retrieval placeholder → its fragments.
    retrievals: Value,
    /// `[{role, content}]` as sent to the model.
    messages: Value,
    /// Null until generation ended; partial after an early end.
    #[oai(nullable)]
    answer: Option<String>,
}

impl From<Trace> for TraceObject {
    fn from(trace: Trace) -> Self {
        Self {
            id: trace.id,
            agent_id: trace.agent_id,
            pipeline_id: trace.pipeline_id,
            llm_id: trace.llm_id,
            created_at: crate::time::rfc3339::format(&trace.created_at),
            retrievals: trace.retrievals,
            messages: trace.messages,
            answer: trace.answer,
        }
    }
}

pub struct TracesApi;

#[OpenApi(tag = "ApiTags::Tracing")]
impl TracesApi {
    /// Get an execution trace
    ///
    /// Only for the key that ran the execution, for 60 minutes; otherwise 404
    /// `Trace with id <id> not found`.
    #[oai(path = "/tracing/:execution_id", method = "get")]
    async fn get(
        &self,
        auth: Auth,
        execution_id: extract::Path,
        req: &Request,
    ) -> poem::Result<Json<TraceObject>> {
        let state = state(req)?;
        let trace = service::get_trace(state, &auth.0, execution_id.0).await?;
        Ok(Json(trace.into()))
    }
}
