//! Agents (prompt and placeholders stored as JSON, already normalised) and their execution
//! traces (encrypted: they hold fragment text and answers).

use chrono::{DateTime, Utc};
use sea_orm::ActiveValue::NotSet;
use sea_orm::{ActiveModelTrait, ColumnTrait, DbErr, EntityTrait, QueryFilter, Set};
use sea_query::{Alias, Expr, ExprTrait, Query, SelectStatement};
use serde::Serialize;
use serde_json::Value;
use uuid::Uuid;

use super::Pool;
use super::api_keys::delete_with_entries;
use super::entities::{self, agent, agent_trace};
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

impl From<agent::Model> for AgentRow {
    fn from(m: agent::Model) -> Self {
        Self {
            id: m.id,
            name: m.name,
            description: m.description,
            prompt: m.prompt,
            placeholders: m.placeholders,
            created_at: m.created_at,
            updated_at: m.updated_at,
        }
    }
}

impl AgentFields<'_> {
    /// The fields as the columns they write.
    fn active_model(&self) -> agent::ActiveModel {
        agent::ActiveModel {
            name: Set(self.name.to_owned()),
            description: Set(self.description.map(str::to_owned)),
            prompt: Set(self.prompt.clone()),
            placeholders: Set(self.placeholders.clone()),
            ..Default::default()
        }
    }
}

/// One agent by id.
pub async fn get(db: &Pool, id: Uuid) -> Result<Option<AgentRow>, DbErr> {
    let row = agent::Entity::find_by_id(id).one(db.orm()).await?;
    Ok(row.map(AgentRow::from))
}

/// Inserts an agent.
pub async fn insert(db: &Pool, id: Uuid, fields: &AgentFields<'_>) -> Result<AgentRow, DbErr> {
    let row = agent::ActiveModel {
        id: Set(id),
        ..fields.active_model()
    }
    .insert(db.orm())
    .await?;
    Ok(row.into())
}

/// Writes the full state of an agent's editable fields; `None` when it no longer exists.
pub async fn update(
    db: &Pool,
    id: Uuid,
    fields: &AgentFields<'_>,
) -> Result<Option<AgentRow>, DbErr> {
    let row = entities::update_by_id(db.orm(), id, fields.active_model()).await?;
    Ok(row.map(AgentRow::from))
}

/// Deletes an agent and the permission entries on it; whether it existed. Its traces stay
/// until they expire (they belong to the key that ran them).
pub async fn delete(db: &Pool, id: Uuid) -> Result<bool, DbErr> {
    delete_with_entries::<agent::Entity>(db, ObjectType::Agents, id).await
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
#[derive(Debug, Clone)]
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

impl From<agent_trace::Model> for TraceRow {
    fn from(m: agent_trace::Model) -> Self {
        Self {
            id: m.id,
            agent_id: m.agent_id,
            pipeline_id: m.pipeline_id,
            llm_id: m.llm_id,
            created_at: m.created_at,
            retrievals: m.retrievals,
            messages: m.messages,
            answer: m.answer,
        }
    }
}

/// Writes a trace.
pub async fn insert_trace(db: &Pool, trace: &NewTrace<'_>) -> Result<(), DbErr> {
    let row = agent_trace::ActiveModel {
        id: Set(trace.id),
        api_key_id: Set(trace.api_key_id),
        agent_id: Set(trace.agent_id),
        pipeline_id: Set(trace.pipeline_id),
        llm_id: Set(trace.llm_id),
        retrievals: Set(trace.retrievals.to_vec()),
        messages: Set(trace.messages.to_vec()),
        answer: Set(trace.answer.map(<[u8]>::to_vec)),
        created_at: NotSet,
    };
    agent_trace::Entity::insert(row)
        .exec_without_returning(db.orm())
        .await?;
    Ok(())
}

/// Records the answer of a trace (encrypted).
pub async fn set_trace_answer(db: &Pool, id: Uuid, answer: &[u8]) -> Result<(), DbErr> {
    agent_trace::Entity::update_many()
        .col_expr(agent_trace::Column::Answer, Expr::value(answer.to_vec()))
        .filter(agent_trace::Column::Id.eq(id))
        .exec(db.orm())
        .await?;
    Ok(())
}

/// A trace of `api_key_id` younger than `max_age_seconds`.
pub async fn get_trace(
    db: &Pool,
    id: Uuid,
    api_key_id: Uuid,
    max_age_seconds: f64,
) -> Result<Option<TraceRow>, DbErr> {
    let row = agent_trace::Entity::find_by_id(id)
        .filter(agent_trace::Column::ApiKeyId.eq(api_key_id))
        .filter(
            agent_trace::Column::CreatedAt
                .into_expr()
                .gt(entities::age_cutoff(max_age_seconds)),
        )
        .one(db.orm())
        .await?;
    Ok(row.map(TraceRow::from))
}

/// Deletes the traces older than `max_age_seconds`; how many.
pub async fn delete_expired_traces(db: &Pool, max_age_seconds: f64) -> Result<u64, DbErr> {
    entities::delete_older_than::<agent_trace::Entity>(
        db.orm(),
        agent_trace::Column::CreatedAt,
        max_age_seconds,
    )
    .await
}
