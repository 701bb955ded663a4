//! Agents (prompt and placeholders stored as JSON, already normalised) and their execution
//! traces (encrypted: they hold fragment text and answers).

use chrono::{DateTime, Utc};
use sea_query::{Alias, Expr, ExprTrait, Query, SelectStatement};
use serde::Serialize;
use serde_json::Value;
use sqlx::PgPool;
use uuid::Uuid;

use crate::access::ObjectType;
use crate::time::rfc3339;

/// An agent as stored; `prompt` and `placeholders` are the normalised definition, so a row
/// serializes as the API object.
#[derive(Debug, Clone, sqlx::FromRow, Serialize)]
pub struct AgentRow {
    pub id: Uuid,
    pub name: String,
    pub description: Option<String>,
    pub prompt: Value,
    pub placeholders: Value,
    #[serde(with = "rfc3339")]
    pub created_at: DateTime<Utc>,
    #[serde(with = "rfc3339")]
    pub updated_at: DateTime<Utc>,
}

/// The fields written at create and by every change.
#[derive(Debug)]
pub struct AgentFields<'a> {
    pub name: &'a str,
    pub description: Option<&'a str>,
    pub prompt: &'a Value,
    pub placeholders: &'a Value,
}

/// The columns of [`AgentRow`], in order.
const COLUMNS: [&str; 7] = [
    "id",
    "name",
    "description",
    "prompt",
    "placeholders",
    "created_at",
    "updated_at",
];

/// One agent by id.
pub async fn get(pool: &PgPool, id: Uuid) -> Result<Option<AgentRow>, sqlx::Error> {
    sqlx::query_as(
        "SELECT id, name, description, prompt, placeholders, created_at, updated_at
         FROM agents WHERE id = $1",
    )
    .bind(id)
    .fetch_optional(pool)
    .await
}

/// Inserts an agent.
pub async fn insert(
    pool: &PgPool,
    id: Uuid,
    fields: &AgentFields<'_>,
) -> Result<AgentRow, sqlx::Error> {
    sqlx::query_as(
        "INSERT INTO agents (id, name, description, prompt, placeholders)
         VALUES ($1, $2, $3, $4, $5)
         RETURNING id, name, description, prompt, placeholders, created_at, updated_at",
    )
    .bind(id)
    .bind(fields.name)
    .bind(fields.description)
    .bind(fields.prompt)
    .bind(fields.placeholders)
    .fetch_one(pool)
    .await
}

/// Writes the full state of an agent's editable fields; `None` when it no longer exists.
pub async fn update(
    pool: &PgPool,
    id: Uuid,
    fields: &AgentFields<'_>,
) -> Result<Option<AgentRow>, sqlx::Error> {
    sqlx::query_as(
        "UPDATE agents SET name = $2, description = $3, prompt = $4, placeholders = $5,
                updated_at = now()
         WHERE id = $1
         RETURNING id, name, description, prompt, placeholders, created_at, updated_at",
    )
    .bind(id)
    .bind(fields.name)
    .bind(fields.description)
    .bind(fields.prompt)
    .bind(fields.placeholders)
    .fetch_optional(pool)
    .await
}

/// Deletes an agent and the permission entries on it; whether it existed. Its traces stay
/// until they expire (they belong to the key that ran them).
pub async fn delete(pool: &PgPool, id: Uuid) -> Result<bool, sqlx::Error> {
    let mut tx = pool.begin().await?;
    super::api_keys::delete_entries_on(&mut tx, ObjectType::Agents, id).await?;
    let deleted = sqlx::query("DELETE FROM agents WHERE id = $1")
        .bind(id)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(deleted.rows_affected() > 0)
}

/// The base statement of the agent list: readable agents only.
pub fn list_base(readable_ids: Option<Vec<Uuid>>) -> SelectStatement {
    let table = Alias::new("agents");
    let mut select = Query::select();
    select.from(table.clone());
    for column in COLUMNS {
        select.column((table.clone(), Alias::new(column)));
    }
    if let Some(ids) = readable_ids {
        select.and_where(Expr::col((table, Alias::new("id"))).is_in(ids));
    }
    select
}

/// A trace as written at the start of an execution.
#[derive(Debug)]
pub struct NewTrace<'a> {
    pub id: Uuid,
    pub api_key_id: Uuid,
    pub agent_id: Uuid,
    pub pipeline_id: Uuid,
    pub llm_id: Uuid,
    /// Encrypted JSON: retrieval placeholder → fragments.
    pub retrievals: &'a [u8],
    /// Encrypted JSON: the messages as sent.
    pub messages: &'a [u8],
    /// Encrypted answer, when known at insert (plain mode).
    pub answer: Option<&'a [u8]>,
}

/// A stored trace, its encrypted parts still encrypted.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct TraceRow {
    pub id: Uuid,
    pub agent_id: Uuid,
    pub pipeline_id: Uuid,
    pub llm_id: Uuid,
    pub created_at: DateTime<Utc>,
    pub retrievals: Vec<u8>,
    pub messages: Vec<u8>,
    pub answer: Option<Vec<u8>>,
}

/// Writes a trace.
pub async fn insert_trace(pool: &PgPool, trace: &NewTrace<'_>) -> Result<(), sqlx::Error> {
    sqlx::query(
        "INSERT INTO agent_traces
             (id, api_key_id, agent_id, pipeline_id, llm_id, retrievals, messages, answer)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
    )
    .bind(trace.id)
    .bind(trace.api_key_id)
    .bind(trace.agent_id)
    .bind(trace.pipeline_id)
    .bind(trace.llm_id)
    .bind(trace.retrievals)
    .bind(trace.messages)
    .bind(trace.answer)
    .execute(pool)
    .await?;
    Ok(())
}

/// Records the answer of a trace (encrypted).
pub async fn set_trace_answer(pool: &PgPool, id: Uuid, answer: &[u8]) -> Result<(), sqlx::Error> {
    sqlx::query("UPDATE agent_traces SET answer = $2 WHERE id = $1")
        .bind(id)
        .bind(answer)
        .execute(pool)
        .await?;
    Ok(())
}

/// A trace of `api_key_id` younger than `max_age_seconds`.
pub async fn get_trace(
    pool: &PgPool,
    id: Uuid,
    api_key_id: Uuid,
    max_age_seconds: f64,
) -> Result<Option<TraceRow>, sqlx::Error> {
    sqlx::query_as(
        "SELECT id, agent_id, pipeline_id, llm_id, created_at, retrievals, messages, answer
         FROM agent_traces
         WHERE id = $1 AND api_key_id = $2
           AND created_at > now() - make_interval(secs => $3)",
    )
    .bind(id)
    .bind(api_key_id)
    .bind(max_age_seconds)
    .fetch_optional(pool)
    .await
}

/// Deletes the traces older than `max_age_seconds`; how many.
pub async fn delete_expired_traces(
    pool: &PgPool,
    max_age_seconds: f64,
) -> Result<u64, sqlx::Error> {
    let deleted = sqlx::query(
        "DELETE FROM agent_traces WHERE created_at <= now() - make_interval(secs => $1)",
    )
    .bind(max_age_seconds)
    .execute(pool)
    .await?;
    Ok(deleted.rows_affected())
}
