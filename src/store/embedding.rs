//! Embedding providers (seeded, read-only) and embedding models.

use chrono::{DateTime, Utc};
use sea_query::{Alias, Expr, ExprTrait, Query, SelectStatement};
use serde::Serialize;
use serde_json::Value;
use sqlx::PgPool;
use uuid::Uuid;

use crate::access::ObjectType;
use crate::time::rfc3339;

/// An embedding provider as the API shows it.
#[derive(Debug, Clone, sqlx::FromRow, Serialize, poem_openapi::Object)]
#[oai(rename = "EmbeddingProvider")]
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

impl ProviderRow {
    /// Whether the provider declares `parameter` as secret (stored encrypted, never shown).
    pub fn is_secret(&self, parameter: &str) -> bool {
        self.parameters
            .get(parameter)
            .and_then(|p| p.get("secret"))
            .and_then(Value::as_bool)
            .unwrap_or(false)
    }
}

/// An embedding model as the API shows it (secret parameters are never part of it).
#[derive(Debug, Clone, sqlx::FromRow, Serialize, poem_openapi::Object)]
#[oai(rename = "EmbeddingModel")]
pub struct ModelRow {
    pub id: Uuid,
    pub name: String,
    #[oai(nullable)]
    pub description: Option<String>,
    /// Provider name.
    pub provider: String,
    pub model_name: String,
    /// Parameters without the secret ones.
    pub parameters: Value,
    pub dimensions: i32,
    #[serde(with = "rfc3339")]
    pub created_at: DateTime<Utc>,
    #[serde(with = "rfc3339")]
    pub updated_at: DateTime<Utc>,
}

/// A stored model with its encrypted secret parameters (JSON object), for building embedders.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct StoredModel {
    #[sqlx(flatten)]
    pub row: ModelRow,
    pub secret_parameters: Option<Vec<u8>>,
}

/// The columns of [`ProviderRow`], as a literal for `concat!` (SQL text is never formatted).
macro_rules! provider_columns {
    () => {
        "id, name, description, parameters, created_at, updated_at"
    };
}

/// The columns of [`ModelRow`].
macro_rules! model_columns {
    () => {
        "id, name, description, provider, model_name, parameters, dimensions, created_at, updated_at"
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

const MODEL_COLUMNS: [&str; 9] = [
    "id",
    "name",
    "description",
    "provider",
    "model_name",
    "parameters",
    "dimensions",
    "created_at",
    "updated_at",
];

/// One provider by id.
pub async fn provider(pool: &PgPool, id: Uuid) -> Result<Option<ProviderRow>, sqlx::Error> {
    sqlx::query_as(concat!(
        "SELECT ",
        provider_columns!(),
        " FROM embedding_providers WHERE id = $1"
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
        " FROM embedding_providers WHERE name = $1"
    ))
    .bind(name)
    .fetch_optional(pool)
    .await
}

/// The base statement of the provider list: readable providers only.
pub fn providers_list_base(readable_ids: Option<Vec<Uuid>>) -> SelectStatement {
    list_base("embedding_providers", &PROVIDER_COLUMNS, readable_ids)
}

/// The base statement of the model list: readable models only, never secret parameters.
pub fn models_list_base(readable_ids: Option<Vec<Uuid>>) -> SelectStatement {
    list_base("embedding_models", &MODEL_COLUMNS, readable_ids)
}

fn list_base(table: &str, columns: &[&str], readable_ids: Option<Vec<Uuid>>) -> SelectStatement {
    let table = Alias::new(table);
    let mut select = Query::select();
    select.from(table.clone()).columns(
        columns
            .iter()
            .map(|c| (table.clone(), Alias::new(*c)))
            .collect::<Vec<_>>(),
    );
    if let Some(ids) = readable_ids {
        select.and_where(Expr::col((table, Alias::new("id"))).is_in(ids));
    }
    select
}

/// One model by id, with its encrypted secret parameters.
pub async fn model(pool: &PgPool, id: Uuid) -> Result<Option<StoredModel>, sqlx::Error> {
    sqlx::query_as(concat!(
        "SELECT ",
        model_columns!(),
        ", secret_parameters FROM embedding_models WHERE id = $1"
    ))
    .bind(id)
    .fetch_optional(pool)
    .await
}

/// What a new model stores.
pub struct NewModel<'a> {
    pub id: Uuid,
    pub name: &'a str,
    pub description: Option<&'a str>,
    pub provider: &'a str,
    pub model_name: &'a str,
    pub parameters: &'a Value,
    pub secret_parameters: Option<&'a [u8]>,
    pub dimensions: i32,
}

/// Inserts a model (a duplicate name is a unique violation: `Conflict unique error`).
pub async fn insert_model(pool: &PgPool, model: NewModel<'_>) -> Result<ModelRow, sqlx::Error> {
    sqlx::query_as(concat!(
        "INSERT INTO embedding_models
             (id, name, description, provider, model_name, parameters, secret_parameters, dimensions)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING ",
        model_columns!()
    ))
    .bind(model.id)
    .bind(model.name)
    .bind(model.description)
    .bind(model.provider)
    .bind(model.model_name)
    .bind(model.parameters)
    .bind(model.secret_parameters)
    .bind(model.dimensions)
    .fetch_one(pool)
    .await
}

/// Writes the full state of a model's editable fields.
pub async fn update_model(
    pool: &PgPool,
    id: Uuid,
    name: &str,
    description: Option<&str>,
    parameters: &Value,
    secret_parameters: Option<&[u8]>,
) -> Result<Option<ModelRow>, sqlx::Error> {
    sqlx::query_as(concat!(
        "UPDATE embedding_models
         SET name = $2, description = $3, parameters = $4, secret_parameters = $5, updated_at = now()
         WHERE id = $1 RETURNING ",
        model_columns!()
    ))
    .bind(id)
    .bind(name)
    .bind(description)
    .bind(parameters)
    .bind(secret_parameters)
    .fetch_optional(pool)
    .await
}

/// Deletes a model and every permission entry on it. A model a pipeline uses is a foreign-key
/// violation (`Conflict related error`) and nothing is deleted.
pub async fn delete_model(pool: &PgPool, id: Uuid) -> Result<bool, sqlx::Error> {
    let mut tx = pool.begin().await?;
    super::api_keys::delete_entries_on(&mut tx, ObjectType::EmbeddingModels, id).await?;
    let deleted = sqlx::query("DELETE FROM embedding_models WHERE id = $1")
        .bind(id)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(deleted.rows_affected() > 0)
}
