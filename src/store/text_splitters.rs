//! Text splitter providers (seeded, read-only) and text splitters.

use chrono::{DateTime, Utc};
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, DbErr, EntityTrait, QueryFilter, Set,
    TransactionTrait,
};
use sea_query::{Alias, Expr, ExprTrait, Query, SelectStatement};
use serde::Serialize;
use serde_json::Value;
use uuid::Uuid;

use super::Pool;
use super::api_keys::delete_entries_on;
use super::entities::{self, text_splitter, text_splitter_provider};
use crate::access::ObjectType;
use crate::time::rfc3339;

/// A text splitter provider as the API shows it.
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

/// A text splitter as the API shows it.
#[derive(Debug, Clone, sqlx::FromRow, Serialize)]
pub struct SplitterRow {
    pub id: Uuid,
    pub name: String,
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

impl From<text_splitter_provider::Model> for ProviderRow {
    fn from(m: text_splitter_provider::Model) -> Self {
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

impl From<text_splitter::Model> for SplitterRow {
    fn from(m: text_splitter::Model) -> Self {
        Self {
            id: m.id,
            name: m.name,
            description: m.description,
            provider: m.provider,
            parameters: m.parameters,
            created_at: m.created_at,
            updated_at: m.updated_at,
        }
    }
}

/// One provider by id.
pub async fn get_provider(db: &Pool, id: Uuid) -> Result<Option<ProviderRow>, DbErr> {
    let row = text_splitter_provider::Entity::find_by_id(id)
        .one(db.orm())
        .await?;
    Ok(row.map(ProviderRow::from))
}

/// One provider by name.
pub async fn provider_by_name(db: &Pool, name: &str) -> Result<Option<ProviderRow>, DbErr> {
    let row = text_splitter_provider::Entity::find()
        .filter(text_splitter_provider::Column::Name.eq(name))
        .one(db.orm())
        .await?;
    Ok(row.map(ProviderRow::from))
}

/// One text splitter by id.
pub async fn get(db: &Pool, id: Uuid) -> Result<Option<SplitterRow>, DbErr> {
    let row = text_splitter::Entity::find_by_id(id).one(db.orm()).await?;
    Ok(row.map(SplitterRow::from))
}

/// Inserts a text splitter (parameters already validated, defaults filled).
pub async fn insert(
    db: &Pool,
    id: Uuid,
    name: &str,
    description: Option<&str>,
    provider: &str,
    parameters: &Value,
) -> Result<SplitterRow, DbErr> {
    let row = text_splitter::ActiveModel {
        id: Set(id),
        name: Set(name.to_owned()),
        description: Set(description.map(str::to_owned)),
        provider: Set(provider.to_owned()),
        parameters: Set(parameters.clone()),
        ..Default::default()
    }
    .insert(db.orm())
    .await?;
    Ok(row.into())
}

/// Writes the full state of a splitter's editable fields.
pub async fn update(
    db: &Pool,
    id: Uuid,
    name: &str,
    description: Option<&str>,
    parameters: &Value,
) -> Result<Option<SplitterRow>, DbErr> {
    let changes = text_splitter::ActiveModel {
        name: Set(name.to_owned()),
        description: Set(description.map(str::to_owned)),
        parameters: Set(parameters.clone()),
        ..Default::default()
    };
    let row = entities::update_by_id(db.orm(), id, changes).await?;
    Ok(row.map(SplitterRow::from))
}

/// Deletes a splitter and every permission entry on it, in one transaction.
///
/// Overrides of document versions that are no longer pending are cleared first (they will
/// never be processed again); a pending version's override or a pipeline's default keeps the
/// splitter (foreign-key violation: `Conflict related error`), and nothing changes.
pub async fn delete(db: &Pool, id: Uuid) -> Result<bool, DbErr> {
    let documents = Alias::new("documents");
    let clear_overrides = Query::update()
        .table(documents.clone())
        .value(Alias::new("text_splitter_id"), Option::<Uuid>::None)
        .and_where(Expr::col((documents.clone(), Alias::new("text_splitter_id"))).eq(id))
        .and_where(Expr::col((documents, Alias::new("status"))).ne("pending"))
        .to_owned();
    let txn = db.orm().begin().await?;
    txn.execute(&clear_overrides).await?;
    delete_entries_on(&txn, ObjectType::TextSplitters, id).await?;
    let deleted = text_splitter::Entity::delete_by_id(id).exec(&txn).await?;
    txn.commit().await?;
    Ok(deleted.rows_affected > 0)
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
