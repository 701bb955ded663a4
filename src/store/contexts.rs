//! Conversation contexts and their messages (extension `conversations`). A context belongs to
//! the key that created it: every statement here names the owner, so another key's context is
//! absent to it. Message content arrives and leaves encrypted (the service holds the cipher).

use chrono::{DateTime, Utc};
use sea_orm::ActiveValue::NotSet;
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, DbErr, EntityTrait, QueryFilter, QueryOrder,
    QuerySelect, QueryTrait, Set, TransactionTrait,
};
use sea_query::{Expr, ExprTrait, SelectStatement};
use serde::Serialize;
use serde_json::Value;
use uuid::Uuid;

use super::Pool;
use super::entities::{self, context, context_message};
use crate::time::rfc3339;

/// A context as the API shows it (the owner is not part of it).
#[derive(Debug, Clone, sqlx::FromRow, Serialize)]
pub struct ContextRow {
    pub id: Uuid,
    pub name: Option<String>,
    pub description: Option<String>,
    pub metadata: Value,
    #[serde(with = "rfc3339")]
    pub created_at: DateTime<Utc>,
    #[serde(with = "rfc3339")]
    pub updated_at: DateTime<Utc>,
}

impl From<context::Model> for ContextRow {
    fn from(m: context::Model) -> Self {
        Self {
            id: m.id,
            name: m.name,
            description: m.description,
            metadata: m.metadata,
            created_at: m.created_at,
            updated_at: m.updated_at,
        }
    }
}

/// The fields written at create and by every change.
#[derive(Debug)]
pub struct ContextFields<'a> {
    pub name: Option<&'a str>,
    pub description: Option<&'a str>,
    /// A JSON object.
    pub metadata: &'a Value,
}

impl ContextFields<'_> {
    fn active_model(&self) -> context::ActiveModel {
        context::ActiveModel {
            name: Set(self.name.map(str::to_owned)),
            description: Set(self.description.map(str::to_owned)),
            metadata: Set(self.metadata.clone()),
            ..Default::default()
        }
    }
}

/// A stored message, its content still encrypted.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct MessageRow {
    pub id: Uuid,
    pub context_id: Uuid,
    /// `system`, `user` or `assistant` (the table's check).
    pub role: String,
    pub content: Vec<u8>,
    pub execution_id: Option<Uuid>,
    pub created_at: DateTime<Utc>,
}

impl From<context_message::Model> for MessageRow {
    fn from(m: context_message::Model) -> Self {
        Self {
            id: m.id,
            context_id: m.context_id,
            role: m.role,
            content: m.content,
            execution_id: m.execution_id,
            created_at: m.created_at,
        }
    }
}

/// A message to store; `content` already encrypted.
#[derive(Debug)]
pub struct NewMessage<'a> {
    pub id: Uuid,
    pub role: &'a str,
    pub content: &'a [u8],
}

/// What [`delete_message`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MessageRemoval {
    /// The message is gone and the context's `updated_at` moved.
    Removed,
    /// The owner has no such context.
    NoContext,
    /// The context holds no such message.
    NoMessage,
}

/// `id = $id AND api_key_id = $owner`: the context as its owner names it.
fn owned(id: Uuid, owner: Uuid) -> Expr {
    context::Column::Id
        .eq(id)
        .and(context::Column::ApiKeyId.eq(owner))
}

/// Inserts a context of `owner`.
pub async fn insert(
    db: &Pool,
    id: Uuid,
    owner: Uuid,
    fields: &ContextFields<'_>,
) -> Result<ContextRow, DbErr> {
    let row = context::ActiveModel {
        id: Set(id),
        api_key_id: Set(owner),
        ..fields.active_model()
    }
    .insert(db.orm())
    .await?;
    Ok(row.into())
}

/// The context `id` of `owner`.
pub async fn get(db: &Pool, id: Uuid, owner: Uuid) -> Result<Option<ContextRow>, DbErr> {
    let row = context::Entity::find()
        .filter(owned(id, owner))
        .one(db.orm())
        .await?;
    Ok(row.map(ContextRow::from))
}

/// Writes the full state of a context's editable fields and moves its `updated_at`; `None`
/// when `owner` has no such context (any longer).
pub async fn update(
    db: &Pool,
    id: Uuid,
    owner: Uuid,
    fields: &ContextFields<'_>,
) -> Result<Option<ContextRow>, DbErr> {
    let row = entities::update_one_where(db.orm(), owned(id, owner), fields.active_model()).await?;
    Ok(row.map(ContextRow::from))
}

/// Deletes a context of `owner` with its messages (cascade); whether it existed.
pub async fn delete(db: &Pool, id: Uuid, owner: Uuid) -> Result<bool, DbErr> {
    let deleted = context::Entity::delete_many()
        .filter(owned(id, owner))
        .exec(db.orm())
        .await?;
    Ok(deleted.rows_affected > 0)
}

/// Moves a context's `updated_at` to the transaction's time; whether `owner` has it. The
/// row stays locked until the transaction ends, so it cannot be deleted meanwhile.
async fn touch(db: &impl ConnectionTrait, id: Uuid, owner: Uuid) -> Result<bool, DbErr> {
    let touched = context::Entity::update_many()
        .col_expr(context::Column::UpdatedAt, Expr::current_timestamp())
        .filter(owned(id, owner))
        .exec(db)
        .await?;
    Ok(touched.rows_affected > 0)
}

/// Adds a message to a context of `owner` and moves the context's `updated_at`, in one
/// transaction; `None` when `owner` has no such context.
pub async fn insert_message(
    db: &Pool,
    context_id: Uuid,
    owner: Uuid,
    message: &NewMessage<'_>,
) -> Result<Option<MessageRow>, DbErr> {
    let rows = insert_messages(db, context_id, owner, std::slice::from_ref(message), None).await?;
    Ok(rows.and_then(|rows| rows.into_iter().next()))
}

/// Adds messages, in order, to a context of `owner` with `execution_id`, and moves the
/// context's `updated_at`, in one transaction; `None` (nothing added) when `owner` has no
/// such context, for instance because it was deleted meanwhile. The messages share the
/// transaction's time; their ids (time-ordered) keep their order.
pub async fn insert_messages(
    db: &Pool,
    context_id: Uuid,
    owner: Uuid,
    messages: &[NewMessage<'_>],
    execution_id: Option<Uuid>,
) -> Result<Option<Vec<MessageRow>>, DbErr> {
    let txn = db.orm().begin().await?;
    if !touch(&txn, context_id, owner).await? {
        txn.rollback().await?;
        return Ok(None);
    }
    let mut rows = Vec::with_capacity(messages.len());
    for message in messages {
        let row = context_message::ActiveModel {
            id: Set(message.id),
            context_id: Set(context_id),
            role: Set(message.role.to_owned()),
            content: Set(message.content.to_vec()),
            execution_id: Set(execution_id),
            created_at: NotSet,
        }
        .insert(&txn)
        .await?;
        rows.push(row.into());
    }
    txn.commit().await?;
    Ok(Some(rows))
}

/// The `limit` most recent messages of a context of `owner`, oldest first (the list's
/// order); none when `owner` has no such context.
pub async fn recent_messages(
    db: &Pool,
    context_id: Uuid,
    owner: Uuid,
    limit: u64,
) -> Result<Vec<MessageRow>, DbErr> {
    let owned_context = context::Entity::find()
        .select_only()
        .column(context::Column::Id)
        .filter(owned(context_id, owner))
        .into_query();
    let mut rows: Vec<MessageRow> = context_message::Entity::find()
        .filter(context_message::Column::ContextId.in_subquery(owned_context))
        .order_by_desc(context_message::Column::CreatedAt)
        .order_by_desc(context_message::Column::Id)
        .limit(limit)
        .all(db.orm())
        .await?
        .into_iter()
        .map(MessageRow::from)
        .collect();
    rows.reverse();
    Ok(rows)
}

/// Deletes a message of a context of `owner` and moves the context's `updated_at`, in one
/// transaction; nothing changes unless both exist.
pub async fn delete_message(
    db: &Pool,
    context_id: Uuid,
    owner: Uuid,
    message_id: Uuid,
) -> Result<MessageRemoval, DbErr> {
    let txn = db.orm().begin().await?;
    if !touch(&txn, context_id, owner).await? {
        txn.rollback().await?;
        return Ok(MessageRemoval::NoContext);
    }
    let deleted = context_message::Entity::delete_many()
        .filter(context_message::Column::Id.eq(message_id))
        .filter(context_message::Column::ContextId.eq(context_id))
        .exec(&txn)
        .await?;
    if deleted.rows_affected == 0 {
        txn.rollback().await?;
        return Ok(MessageRemoval::NoMessage);
    }
    txn.commit().await?;
    Ok(MessageRemoval::Removed)
}

/// Deletes the contexts (with their messages) not updated for `max_age_seconds`; how many.
pub async fn delete_not_updated_for(db: &Pool, max_age_seconds: f64) -> Result<u64, DbErr> {
    entities::delete_older_than::<context::Entity>(
        db.orm(),
        context::Column::UpdatedAt,
        max_age_seconds,
    )
    .await
}

/// The base statement of the context list: the contexts of `owner` (every column of the
/// table; a page reads those of [`ContextRow`]).
pub fn list_base(owner: Uuid) -> SelectStatement {
    context::Entity::find()
        .filter(context::Column::ApiKeyId.eq(owner))
        .into_query()
}

/// The base statement of a context's message list.
pub fn message_list_base(context_id: Uuid) -> SelectStatement {
    context_message::Entity::find()
        .filter(context_message::Column::ContextId.eq(context_id))
        .into_query()
}
