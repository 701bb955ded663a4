//! Text splitter providers (seeded, read-only) and text splitters.

use chrono::{DateTime, Utc};
use sea_query::{Alias, Expr, ExprTrait, Query, SelectStatement};
use serde::Serialize;
use serde_json::Value;
use sqlx::PgPool;
use uuid::Uuid;

use crate::access::ObjectType;
use crate::time::rfc3339;

/// A text splitter provider as the API shows it.
#[derive(Debug, Clone, sqlx::FromRow, Serialize, poem_openapi::Object)]
#[oai(rename = "TextSplitterProvider")]
pub struct ProviderRow {
    pub id: Uuid,
    pub name: String,
    #[oai(nullable)]
    pub description: Option<String>,
    /// Parameter name → `{type, required, default, secret}`.
    pub parameters: Value,
    #[serde(with = "rfc3339")]
    pub created_at: DateTime<Utc>,
    #[serde(with = "rfc3339")]
    pub updated_at: DateTime<Utc>,
}

/// A text splitter as the API shows it.
#[derive(Debug, Clone, sqlx::FromRow, Serialize, poem_openapi::Object)]
#[oai(rename = "TextSplitter")]
pub struct SplitterRow {
    pub id: Uuid,
    pub name: String,
    #[oai(nullable)]
    pub description: Option<String>,
    /// Provider name.
    pub provider: String,
    /// The provider's parameters, defaults filled.
    pub parameters: Value,
    #[serde(with = "rfc3339")]
    pub created_at: DateTime<Utc>,
    #[serde(with = "rfc3339")]
    pub updated_at: DateTime<Utc>,
}

/// The columns of [`ProviderRow`], as a literal for `concat!` (SQL text is never formatted).
macro_rules! provider_columns {
    () => {
        "id, name, description, parameters, created_at, updated_at"
    };
}

/// The columns of [`SplitterRow`].
macro_rules! splitter_columns {
    () => {
        "id, name, description, provider, parameters, created_at, updated_at"
    };
}

const PROVIDER_COLUMNS: [&str; 6] = [
    "id",
    "name",
    "description",
    "parameters",
    "created_at",
    "updated_at",
];

const SPLITTER_COLUMNS: [&str; 7] = [
    "id",
    "name",
    "description",
    "provider",
    "parameters",
    "created_at",
    "updated_at",
];

/// One provider by id.
pub async fn get_provider(pool: &PgPool, id: Uuid) -> Result<Option<ProviderRow>, sqlx::Error> {
    sqlx::query_as(concat!(
        "SELECT ",
        provider_columns!(),
        " FROM text_splitter_providers WHERE id = $1"
    ))
    .bind(id)
    .fetch_optional(pool)
    .await
}

/// One provider by name.
pub async fn provider_by_name(
    pool: &PgPool,
    name: &str,
) -> Result<Option<ProviderRow>, sqlx::Error> {
    sqlx::query_as(concat!(
        "SELECT ",
        provider_columns!(),
        " FROM text_splitter_providers WHERE name = $1"
    ))
    .bind(name)
    .fetch_optional(pool)
    .await
}

/// One text splitter by id.
pub async fn get(pool: &PgPool, id: Uuid) -> Result<Option<SplitterRow>, sqlx::Error> {
    sqlx::query_as(concat!(
        "SELECT ",
        splitter_columns!(),
        " FROM text_splitters WHERE id = $1"
    ))
    .bind(id)
    .fetch_optional(pool)
    .await
}

/// Inserts a text splitter (parameters already validated, defaults filled).
pub async fn insert(
    pool: &PgPool,
    id: Uuid,
    name: &str,
    description: Option<&str>,
    provider: &str,
    parameters: &Value,
) -> Result<SplitterRow, sqlx::Error> {
    sqlx::query_as(concat!(
        "INSERT INTO text_splitters (id, name, description, provider, parameters)
         VALUES ($1, $2, $3, $4, $5) RETURNING ",
        splitter_columns!()
    ))
    .bind(id)
    .bind(name)
    .bind(description)
    .bind(provider)
    .bind(parameters)
    .fetch_one(pool)
    .await
}

/// Writes the full state of a splitter's editable fields.
pub async fn update(
    pool: &PgPool,
    id: Uuid,
    name: &str,
    description: Option<&str>,
    parameters: &Value,
) -> Result<Option<SplitterRow>, sqlx::Error> {
    sqlx::query_as(concat!(
        "UPDATE text_splitters SET name = $2, description = $3, parameters = $4, updated_at = now()
         WHERE id = $1 RETURNING ",
        splitter_columns!()
    ))
    .bind(id)
    .bind(name)
    .bind(description)
    .bind(parameters)
    .fetch_optional(pool)
    .await
}

/// Deletes a splitter and every permission entry on it, in one transaction.
///
/// Overrides of document versions that are no longer pending are cleared first (they will
/// never be processed again); a pending version's override or a pipeline's default keeps the
/// splitter (foreign-key violation: `Conflict related error`), and nothing changes.
pub async fn delete(pool: &PgPool, id: Uuid) -> Result<bool, sqlx::Error> {
    let mut tx = pool.begin().await?;
    sqlx::query(
        "UPDATE documents SET text_splitter_id = NULL
         WHERE text_splitter_id = $1 AND status <> 'pending'",
    )
    .bind(id)
    .execute(&mut *tx)
    .await?;
    super::api_keys::delete_entries_on(&mut tx, ObjectType::TextSplitters, id).await?;
    let deleted = sqlx::query("DELETE FROM text_splitters WHERE id = $1")
        .bind(id)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(deleted.rows_affected() > 0)
}

fn base(
    table: &'static str,
    columns: &[&'static str],
    readable: Option<Vec<Uuid>>,
) -> SelectStatement {
    let table = Alias::new(table);
    let mut select = Query::select();
    select
        .from(table.clone())
        .columns(columns.iter().map(|c| (table.clone(), Alias::new(*c))));
    if let Some(ids) = readable {
        select.and_where(Expr::col((table, Alias::new("id"))).is_in(ids));
    }
    select
}

/// The base statement of the provider list: readable providers only.
pub fn provider_list_base(readable_ids: Option<Vec<Uuid>>) -> SelectStatement {
    base("text_splitter_providers", &PROVIDER_COLUMNS, readable_ids)
}

/// The base statement of the splitter list: readable splitters only.
pub fn list_base(readable_ids: Option<Vec<Uuid>>) -> SelectStatement {
    base("text_splitters", &SPLITTER_COLUMNS, readable_ids)
}
