//! LLMs: registered connections to model servers. The API key is stored encrypted and read
//! only where a call needs it.

use chrono::{DateTime, Utc};
use sea_query::{Alias, Expr, ExprTrait, Query, SelectStatement};
use serde::Serialize;
use serde_json::Value;
use sqlx::PgPool;
use uuid::Uuid;

use crate::access::ObjectType;
use crate::time::rfc3339;

/// An LLM as the API shows it (`has_api_key`, never the key).
#[derive(Debug, Clone, sqlx::FromRow, Serialize, poem_openapi::Object)]
#[oai(rename = "LLM")]
pub struct LlmRow {
    pub id: Uuid,
    pub name: String,
    #[oai(nullable)]
    pub description: Option<String>,
    /// `openai` or `ollama`.
    pub provider: String,
    /// Base URL of the model server, without a trailing `/`.
    pub endpoint: String,
    #[oai(nullable)]
    pub model: Option<String>,
    /// Passed through with every call (`model`, `messages` and `stream` excepted).
    pub parameters: Value,
    pub has_api_key: bool,
    #[serde(with = "rfc3339")]
    pub created_at: DateTime<Utc>,
    #[serde(with = "rfc3339")]
    pub updated_at: DateTime<Utc>,
}

/// An LLM with its encrypted key, for the calls that use it.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct StoredLlm {
    #[sqlx(flatten)]
    pub row: LlmRow,
    /// The API key encrypted with the data-at-rest cipher.
    pub api_key: Option<Vec<u8>>,
}

/// The columns of [`LlmRow`], as a literal for `concat!` (SQL text is never formatted).
macro_rules! llm_columns {
    () => {
        "id, name, description, provider, endpoint, model, parameters, api_key IS NOT NULL AS has_api_key, created_at, updated_at"
    };
}

/// The fields of an LLM written at create and by every change.
#[derive(Debug)]
pub struct LlmFields<'a> {
    pub name: &'a str,
    pub description: Option<&'a str>,
    pub endpoint: &'a str,
    pub model: Option<&'a str>,
    pub parameters: &'a Value,
    /// The encrypted key; `None` stores none.
    pub api_key: Option<&'a [u8]>,
}

/// One LLM by id.
pub async fn get(pool: &PgPool, id: Uuid) -> Result<Option<LlmRow>, sqlx::Error> {
    sqlx::query_as(concat!(
        "SELECT ",
        llm_columns!(),
        " FROM llms WHERE id = $1"
    ))
    .bind(id)
    .fetch_optional(pool)
    .await
}

/// One LLM by id with its encrypted key.
pub async fn get_stored(pool: &PgPool, id: Uuid) -> Result<Option<StoredLlm>, sqlx::Error> {
    sqlx::query_as(concat!(
        "SELECT ",
        llm_columns!(),
        ", api_key FROM llms WHERE id = $1"
    ))
    .bind(id)
    .fetch_optional(pool)
    .await
}

/// Inserts an LLM.
pub async fn insert(
    pool: &PgPool,
    id: Uuid,
    provider: &str,
    fields: &LlmFields<'_>,
) -> Result<LlmRow, sqlx::Error> {
    sqlx::query_as(concat!(
        "INSERT INTO llms (id, name, description, provider, endpoint, model, parameters, api_key)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING ",
        llm_columns!()
    ))
    .bind(id)
    .bind(fields.name)
    .bind(fields.description)
    .bind(provider)
    .bind(fields.endpoint)
    .bind(fields.model)
    .bind(fields.parameters)
    .bind(fields.api_key)
    .fetch_one(pool)
    .await
}

/// Writes the full state of an LLM's editable fields; `None` when it no longer exists.
pub async fn update(
    pool: &PgPool,
    id: Uuid,
    fields: &LlmFields<'_>,
) -> Result<Option<LlmRow>, sqlx::Error> {
    sqlx::query_as(concat!(
        "UPDATE llms SET name = $2, description = $3, endpoint = $4, model = $5, parameters = $6,
                api_key = $7, updated_at = now()
         WHERE id = $1 RETURNING ",
        llm_columns!()
    ))
    .bind(id)
    .bind(fields.name)
    .bind(fields.description)
    .bind(fields.endpoint)
    .bind(fields.model)
    .bind(fields.parameters)
    .bind(fields.api_key)
    .fetch_optional(pool)
    .await
}

/// Deletes an LLM and the permission entries on it; whether it existed.
pub async fn delete(pool: &PgPool, id: Uuid) -> Result<bool, sqlx::Error> {
    let mut tx = pool.begin().await?;
    super::api_keys::delete_entries_on(&mut tx, ObjectType::Llms, id).await?;
    let deleted = sqlx::query("DELETE FROM llms WHERE id = $1")
        .bind(id)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(deleted.rows_affected() > 0)
}

/// The columns of the list, in the order of [`LlmRow`].
fn list_columns(select: &mut SelectStatement) {
    let table = Alias::new("llms");
    for column in [
        "id",
        "name",
        "description",
        "provider",
        "endpoint",
        "model",
        "parameters",
    ] {
        select.column((table.clone(), Alias::new(column)));
    }
    select.expr_as(
        Expr::col((table.clone(), Alias::new("api_key"))).is_not_null(),
        Alias::new("has_api_key"),
    );
    for column in ["created_at", "updated_at"] {
        select.column((table.clone(), Alias::new(column)));
    }
}

/// The base statement of the LLM list: readable LLMs only.
pub fn list_base(readable_ids: Option<Vec<Uuid>>) -> SelectStatement {
    let mut select = Query::select();
    select.from(Alias::new("llms"));
    list_columns(&mut select);
    if let Some(ids) = readable_ids {
        select.and_where(Expr::col((Alias::new("llms"), Alias::new("id"))).is_in(ids));
    }
    select
}
