//! LLMs: registered connections to model servers. The API key is stored encrypted and read
//! only where a call needs it.

use chrono::{DateTime, Utc};
use sea_orm::{ActiveModelTrait, DbErr, EntityTrait, Set};
use sea_query::{Alias, Expr, ExprTrait, Query, SelectStatement};
use serde::Serialize;
use serde_json::Value;
use uuid::Uuid;

use super::Pool;
use super::api_keys::delete_with_entries;
use super::entities::{self, llm};
use crate::access::ObjectType;
use crate::time::rfc3339;

/// An LLM as the API shows it (`has_api_key`, never the key).
#[derive(Debug, Clone, sqlx::FromRow, Serialize)]
pub struct LlmRow {
    pub id: Uuid,
    pub name: String,
    pub description: Option<String>,
    /// `openai` or `ollama`.
    pub provider: String,
    /// Base URL of the model server, without a trailing `/`.
    pub endpoint: String,
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
#[derive(Debug, Clone)]
pub struct StoredLlm {
    pub row: LlmRow,
    /// The API key encrypted with the data-at-rest cipher.
    pub api_key: Option<Vec<u8>>,
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

impl From<llm::Model> for StoredLlm {
    fn from(m: llm::Model) -> Self {
        Self {
            row: LlmRow {
                id: m.id,
                name: m.name,
                description: m.description,
                provider: m.provider,
                endpoint: m.endpoint,
                model: m.model,
                parameters: m.parameters,
                has_api_key: m.api_key.is_some(),
                created_at: m.created_at,
                updated_at: m.updated_at,
            },
            api_key: m.api_key,
        }
    }
}

impl From<llm::Model> for LlmRow {
    fn from(m: llm::Model) -> Self {
        StoredLlm::from(m).row
    }
}

impl LlmFields<'_> {
    /// The fields as the columns they write.
    fn active_model(&self) -> llm::ActiveModel {
        llm::ActiveModel {
            name: Set(self.name.to_owned()),
            description: Set(self.description.map(str::to_owned)),
            endpoint: Set(self.endpoint.to_owned()),
            model: Set(self.model.map(str::to_owned)),
            parameters: Set(self.parameters.clone()),
            api_key: Set(self.api_key.map(<[u8]>::to_vec)),
            ..Default::default()
        }
    }
}

/// One LLM by id.
pub async fn get(db: &Pool, id: Uuid) -> Result<Option<LlmRow>, DbErr> {
    Ok(get_stored(db, id).await?.map(|llm| llm.row))
}

/// One LLM by id with its encrypted key.
pub async fn get_stored(db: &Pool, id: Uuid) -> Result<Option<StoredLlm>, DbErr> {
    let row = llm::Entity::find_by_id(id).one(db.orm()).await?;
    Ok(row.map(StoredLlm::from))
}

/// Inserts an LLM.
pub async fn insert(
    db: &Pool,
    id: Uuid,
    provider: &str,
    fields: &LlmFields<'_>,
) -> Result<LlmRow, DbErr> {
    let row = llm::ActiveModel {
        id: Set(id),
        provider: Set(provider.to_owned()),
        ..fields.active_model()
    }
    .insert(db.orm())
    .await?;
    Ok(row.into())
}

/// Writes the full state of an LLM's editable fields; `None` when it no longer exists.
pub async fn update(db: &Pool, id: Uuid, fields: &LlmFields<'_>) -> Result<Option<LlmRow>, DbErr> {
    let row = entities::update_by_id(db.orm(), id, fields.active_model()).await?;
    Ok(row.map(LlmRow::from))
}

/// Deletes an LLM and the permission entries on it; whether it existed.
pub async fn delete(db: &Pool, id: Uuid) -> Result<bool, DbErr> {
    delete_with_entries::<llm::Entity>(db, ObjectType::Llms, id).await
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
