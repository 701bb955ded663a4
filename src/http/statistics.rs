//! `GET /statistics`.

use serde::Serialize;
use serde_json::Value;

use crate::error::ApiError;

/// The statistics object. In this release only `document_queue` carries a value.
#[derive(Debug, Serialize, poem_openapi::Object)]
pub struct Statistics {
    pub documents_added: f64,
    pub documents_processed: f64,
    pub documents_processed_latency: f64,
    pub documents_failed: f64,
    pub agent_executions: f64,
    pub agent_execution_latency: f64,
    pub agent_execution_latencies: Vec<Value>,
    pub document_queue: u64,
    pub document_queue_processed_latencies: Vec<Value>,
}

/// Validates the `interval` query parameter.
pub fn check_interval(query: Option<&str>) -> Result<(), ApiError> {
    let pairs = super::extract::form_pairs(query);
    let mut intervals = pairs.iter().filter(|(name, _)| name == "interval");
    let Some((_, interval)) = intervals.next() else {
        return Err(ApiError::query_string("missing field `interval`"));
    };
    if intervals.next().is_some() {
        return Err(ApiError::query_string("duplicate field `interval`"));
    }
    if crate::time::parse_prometheus_duration(interval).is_none() {
        return Err(ApiError::InvalidInterval(interval.clone()));
    }
    Ok(())
}
