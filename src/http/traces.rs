//! `GET /tracing/{execution_id}`: the trace of an agent execution.

use poem::Request;
use poem_openapi::{Object, OpenApi};
use serde::Serialize;
use uuid::Uuid;

use super::ApiTags;
use super::agents::{Retrievals, RoleName};
use super::extract::{self, Auth, state};
use super::respond::{Described, Json};
use crate::service::agents::{self as service, Trace};

/// A message as sent to the model.
// Schema only: a trace keeps the rendered messages as JSON.
#[derive(Debug, Object)]
pub struct TraceMessage {
    role: RoleName,
    /// The message text with every placeholder filled.
    content: String,
}

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
    retrievals: Retrievals,
    /// The messages as sent to the model.
    messages: Described<Vec<TraceMessage>>,
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
            retrievals: Described::new(trace.retrievals),
            messages: Described::new(trace.messages),
            answer: trace.answer,
        }
    }
}

#[derive(Default)]
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
