//! Embedding providers (seeded, read-only) and embedding models.

use chrono::{DateTime, Utc};
use sea_orm::{ActiveModelTrait, ColumnTrait, DbErr, EntityTrait, QueryFilter, Set};
use sea_query::{Alias, Expr, ExprTrait, Query, SelectStatement};
use serde::Serialize;
use serde_json::Value;
use uuid::Uuid;

use super::Pool;
use super::api_keys::delete_with_entries;
use super::entities::{self, embedding_model, embedding_provider};
use crate::access::ObjectType;
use crate::time::rfc3339;

/// An embedding provider as the API shows it.
#[derive(Debug, Clone, sqlx::FromRow, Serialize)]
pub struct ProviderRow {
    pub id: Uuid,
    pub name: String,
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
#[derive(Debug, Clone, sqlx::FromRow, Serialize, serde::Deserialize)]
pub struct ModelRow {
    pub id: Uuid,
    pub name: String,
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
#[derive(Debug, Clone)]
pub struct StoredModel {
    pub row: ModelRow,
    pub secret_parameters: Option<Vec<u8>>,
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

impl From<embedding_provider::Model> for ProviderRow {
    fn from(m: embedding_provider::Model) -> Self {
        Self {
            id: m.id,
            name: m.name,
            description: m.description,
            parameters: m.parameters,
            created_at: m.created_at,
            updated_at: m.updated_at,
        }
    }
}

impl From<embedding_model::Model> for StoredModel {
    fn from(m: embedding_model::Model) -> Self {
        Self {
            row: ModelRow {
                id: m.id,
                name: m.name,
                description: m.description,
                provider: m.provider,
                model_name: m.model_name,
                parameters: m.parameters,
                dimensions: m.dimensions,
                created_at: m.created_at,
                updated_at: m.updated_at,
            },
            secret_parameters: m.secret_parameters,
        }
    }
}

impl From<embedding_model::Model> for ModelRow {
    fn from(m: embedding_model::Model) -> Self {
        StoredModel::from(m).row
    }
}

/// One provider by id.
pub async fn provider(db: &Pool, id: Uuid) -> Result<Option<ProviderRow>, DbErr> {
    let row = embedding_provider::Entity::find_by_id(id)
        .one(db.orm())
        .await?;
    Ok(row.map(ProviderRow::from))
}

/// One provider by name.
pub async fn provider_by_name(db: &Pool, name: &str) -> Result<Option<ProviderRow>, DbErr> {
    let row = embedding_provider::Entity::find()
        .filter(embedding_provider::Column::Name.eq(name))
        .one(db.orm())
        .await?;
    Ok(row.map(ProviderRow::from))
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
pub async fn model(db: &Pool, id: Uuid) -> Result<Option<StoredModel>, DbErr> {
    let row = embedding_model::Entity::find_by_id(id)
        .one(db.orm())
        .await?;
    Ok(row.map(StoredModel::from))
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
pub async fn insert_model(db: &Pool, model: NewModel<'_>) -> Result<ModelRow, DbErr> {
    let row = embedding_model::ActiveModel {
        id: Set(model.id),
        name: Set(model.name.to_owned()),
        description: Set(model.description.map(str::to_owned)),
        provider: Set(model.provider.to_owned()),
        model_name: Set(model.model_name.to_owned()),
        parameters: Set(model.parameters.clone()),
        secret_parameters: Set(model.secret_parameters.map(<[u8]>::to_vec)),
        dimensions: Set(model.dimensions),
        ..Default::default()
    }
    .insert(db.orm())
    .await?;
    Ok(row.into())
}

/// Writes the full state of a model's editable fields.
pub async fn update_model(
    db: &Pool,
    id: Uuid,
    name: &str,
    description: Option<&str>,
    parameters: &Value,
    secret_parameters: Option<&[u8]>,
) -> Result<Option<ModelRow>, DbErr> {
    let changes = embedding_model::ActiveModel {
        name: Set(name.to_owned()),
        description: Set(description.map(str::to_owned)),
        parameters: Set(parameters.clone()),
        secret_parameters: Set(secret_parameters.map(<[u8]>::to_vec)),
        ..Default::default()
    };
    let row = entities::update_by_id(db.orm(), id, changes).await?;
    Ok(row.map(ModelRow::from))
}

/// Deletes a model and every permission entry on it. A model a pipeline uses is a foreign-key
/// violation (`Conflict related error`) and nothing is deleted.
pub async fn delete_model(db: &Pool, id: Uuid) -> Result<bool, DbErr> {
    delete_with_entries::<embedding_model::Entity>(db, ObjectType::EmbeddingModels, id).await
}
