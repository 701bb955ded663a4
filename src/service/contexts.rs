//! Conversation contexts and their messages (extension `conversations`).
//!
//! A context belongs to the key that created it. Permissions have no effect on contexts (the
//! interface's key check lists `contexts` and `context-messages` among such types): any key
//! may create them, and every other key, the master key included, finds none but its own
//! (404 `Context not found`). Message content is encrypted at rest like fragment text.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::{Map, Value};
use trove_query::list::{FieldKind, FieldSpec, FilterOps, ListRequest, ListSpec};
use uuid::Uuid;

use super::{Change, Envelope, validate_name};
use crate::agents::definition::{RenderedMessage, Role};
use crate::auth::AuthContext;
use crate::auth::license::check_license;
use crate::crypto::at_rest::Cipher;
use crate::error::{ApiError, ApiResult};
use crate::license::License;
use crate::store::Pool;
use crate::store::contexts::{self as store, ContextFields, MessageRemoval, MessageRow};
use crate::store::listing;
use crate::time::rfc3339;

pub use crate::store::contexts::ContextRow;

/// Fields of the context list: those of the other named objects' lists, `name` nullable.
pub const CONTEXT_LIST: ListSpec = ListSpec {
    table: "contexts",
    fields: &[
        FieldSpec::ID,
        FieldSpec {
            nullable: true,
            ..FieldSpec::NAME
        },
        FieldSpec::DESCRIPTION,
        FieldSpec::CREATED_AT,
        FieldSpec::UPDATED_AT,
    ],
    echo_unset_filters: false,
    default_order: &["id"],
};

/// Fields of a context's message list; oldest first by default.
pub const MESSAGE_LIST: ListSpec = ListSpec {
    table: "context_messages",
    fields: &[
        FieldSpec::ID,
        FieldSpec::new("role", FieldKind::Text, false, FilterOps::EQ, false),
        FieldSpec::CREATED_AT,
    ],
    echo_unset_filters: false,
    default_order: &["created_at", "id"],
};

/// A message as the API shows it, its content decrypted.
#[derive(Debug, Clone, Serialize)]
pub struct Message {
    pub id: Uuid,
    pub context_id: Uuid,
    pub role: Role,
    pub content: String,
    /// The agent execution whose answer this is; null for messages posted directly.
    pub execution_id: Option<Uuid>,
    #[serde(with = "rfc3339")]
    pub created_at: DateTime<Utc>,
}

/// Input of a context creation, already deserialized.
#[derive(Debug, Default)]
pub struct NewContext {
    pub name: Option<String>,
    pub description: Option<String>,
    /// `None`: `{}`.
    pub metadata: Option<Map<String, Value>>,
}

/// Input of a context change: omitted fields keep their values; `null` clears `name` and
/// `description`, and resets `metadata` to `{}`.
#[derive(Debug, Default)]
pub struct ContextChange {
    pub name: Change<String>,
    pub description: Change<String>,
    pub metadata: Change<Map<String, Value>>,
}

/// Input of a message, already deserialized.
#[derive(Debug)]
pub struct NewMessage {
    pub role: Role,
    pub content: String,
}

/// `Context not found` with the id.
pub fn not_found(id: Uuid) -> ApiError {
    ApiError::NotFound {
        message: "Context not found",
        id: Some(id),
    }
}

/// `Message not found` with the id.
fn message_not_found(id: Uuid) -> ApiError {
    ApiError::NotFound {
        message: "Message not found",
        id: Some(id),
    }
}

/// A context's name: absent, or 1–255 characters like every other name.
fn validate_optional_name(name: Option<&str>) -> ApiResult<()> {
    name.map_or(Ok(()), validate_name)
}

/// Creates a context owned by the calling key: the license (403), then the name (400).
pub async fn create(
    pool: &Pool,
    license: &License,
    auth: &AuthContext,
    input: NewContext,
) -> ApiResult<ContextRow> {
    check_license(license, pool, None).await?;
    validate_optional_name(input.name.as_deref())?;
    let metadata = Value::Object(input.metadata.unwrap_or_default());
    let fields = ContextFields {
        name: input.name.as_deref(),
        description: input.description.as_deref(),
        metadata: &metadata,
    };
    Ok(store::insert(pool, Uuid::now_v7(), auth.key_id, &fields).await?)
}

/// A context of the calling key; any other is not found.
pub async fn get(pool: &Pool, auth: &AuthContext, id: Uuid) -> ApiResult<ContextRow> {
    get_of_key(pool, auth.key_id, id).await
}

/// A context of the key `key_id` (already verified); any other is not found.
pub async fn get_of_key(pool: &Pool, key_id: Uuid, id: Uuid) -> ApiResult<ContextRow> {
    store::get(pool, id, key_id)
        .await?
        .ok_or_else(|| not_found(id))
}

/// One page of the calling key's contexts: the list envelope.
pub async fn list(pool: &Pool, auth: &AuthContext, request: &ListRequest) -> ApiResult<Envelope> {
    let base = store::list_base(auth.key_id);
    listing::list::<ContextRow>(pool, &CONTEXT_LIST, request, base).await
}

/// Changes a context of the calling key: existence (404), the license (403), the merged
/// fields (400); `updated_at` moves.
pub async fn update(
    pool: &Pool,
    license: &License,
    auth: &AuthContext,
    id: Uuid,
    change: ContextChange,
) -> ApiResult<ContextRow> {
    let current = get(pool, auth, id).await?;
    check_license(license, pool, None).await?;
    let name = change.name.nullable(current.name);
    validate_optional_name(name.as_deref())?;
    let description = change.description.nullable(current.description);
    let metadata = match change.metadata {
        Change::Omitted => current.metadata,
        Change::Null => Value::Object(Map::new()),
        Change::Value(metadata) => Value::Object(metadata),
    };
    let fields = ContextFields {
        name: name.as_deref(),
        description: description.as_deref(),
        metadata: &metadata,
    };
    store::update(pool, id, auth.key_id, &fields)
        .await?
        .ok_or_else(|| not_found(id))
}

/// Deletes a context of the calling key with its messages.
pub async fn delete(pool: &Pool, auth: &AuthContext, id: Uuid) -> ApiResult<()> {
    if store::delete(pool, id, auth.key_id).await? {
        Ok(())
    } else {
        Err(not_found(id))
    }
}

/// A stored message as the API shows it.
fn decrypted(cipher: &Cipher, row: MessageRow) -> ApiResult<Message> {
    let role = [Role::System, Role::User, Role::Assistant]
        .into_iter()
        .find(|role| role.as_str() == row.role)
        .ok_or_else(|| ApiError::Internal(format!("stored message role {:?}", row.role)))?;
    let content = cipher
        .decrypt_text(&row.content)
        .map_err(|_| ApiError::Decryption)?;
    Ok(Message {
        id: row.id,
        context_id: row.context_id,
        role,
        content,
        execution_id: row.execution_id,
        created_at: row.created_at,
    })
}

/// One page of the messages of a context of the calling key (404 otherwise): the list
/// envelope, contents decrypted.
pub async fn list_messages(
    pool: &Pool,
    cipher: &Cipher,
    auth: &AuthContext,
    id: Uuid,
    request: &ListRequest,
) -> ApiResult<Envelope> {
    get(pool, auth, id).await?;
    let base = store::message_list_base(id);
    listing::list_mapped(pool, &MESSAGE_LIST, request, base, |row: MessageRow| {
        let message = decrypted(cipher, row)?;
        serde_json::to_value(message).map_err(|e| ApiError::Internal(e.to_string()))
    })
    .await
}

/// Adds a message to a context of the calling key (404 otherwise), after the license (403);
/// the context's `updated_at` moves.
pub async fn add_message(
    pool: &Pool,
    cipher: &Cipher,
    license: &License,
    auth: &AuthContext,
    id: Uuid,
    input: NewMessage,
) -> ApiResult<Message> {
    if let Err(refused) = check_license(license, pool, None).await {
        // A missing context is reported before the license; the insert below finds it
        // otherwise, in the statement that adds the message.
        get(pool, auth, id).await?;
        return Err(refused);
    }
    let content = cipher.encrypt(input.content.as_bytes());
    let message = store::NewMessage {
        id: Uuid::now_v7(),
        role: input.role.as_str(),
        content: &content,
    };
    let row = store::insert_message(pool, id, auth.key_id, &message)
        .await?
        .ok_or_else(|| not_found(id))?;
    Ok(Message {
        id: row.id,
        context_id: row.context_id,
        role: input.role,
        content: input.content,
        execution_id: row.execution_id,
        created_at: row.created_at,
    })
}

/// The `k` most recent messages of a context of the calling key, oldest first, as an agent
/// renders them (none when the context is gone).
pub async fn history(
    pool: &Pool,
    cipher: &Cipher,
    auth: &AuthContext,
    id: Uuid,
    k: u32,
) -> ApiResult<Vec<RenderedMessage>> {
    let rows = store::recent_messages(pool, id, auth.key_id, u64::from(k)).await?;
    rows.into_iter()
        .map(|row| {
            let message = decrypted(cipher, row)?;
            Ok(RenderedMessage {
                role: message.role,
                content: message.content,
            })
        })
        .collect()
}

/// One exchange of an agent execution: the user's turn and the model's complete answer.
pub struct Exchange {
    pub execution_id: Uuid,
    pub user: String,
    pub answer: String,
}

/// Appends an exchange to a context of the calling key, both messages with the execution's
/// id, and moves the context's `updated_at`, in one transaction. A context deleted meanwhile
/// gets nothing, without error; whether the exchange was stored.
pub async fn append_exchange(
    pool: &Pool,
    cipher: &Cipher,
    key_id: Uuid,
    id: Uuid,
    exchange: &Exchange,
) -> ApiResult<bool> {
    let user = cipher.encrypt(exchange.user.as_bytes());
    let answer = cipher.encrypt(exchange.answer.as_bytes());
    let messages = [
        store::NewMessage {
            id: Uuid::now_v7(),
            role: Role::User.as_str(),
            content: &user,
        },
        store::NewMessage {
            id: Uuid::now_v7(),
            role: Role::Assistant.as_str(),
            content: &answer,
        },
    ];
    let stored =
        store::insert_messages(pool, id, key_id, &messages, Some(exchange.execution_id)).await?;
    Ok(stored.is_some())
}

/// Deletes a message of a context of the calling key; the context's `updated_at` moves.
pub async fn delete_message(
    pool: &Pool,
    auth: &AuthContext,
    id: Uuid,
    message_id: Uuid,
) -> ApiResult<()> {
    match store::delete_message(pool, id, auth.key_id, message_id).await? {
        MessageRemoval::Removed => Ok(()),
        MessageRemoval::NoContext => Err(not_found(id)),
        MessageRemoval::NoMessage => Err(message_not_found(message_id)),
    }
}

/// Deletes the contexts (with their messages) not updated for `retention`
/// (`TROVE_CONTEXT_RETENTION`); how many.
pub async fn delete_expired(pool: &Pool, retention: Duration) -> ApiResult<u64> {
    Ok(store::delete_not_updated_for(pool, retention.as_secs_f64()).await?)
}

/// How often `trove serve` looks for contexts past `retention`: every tenth of it, from once
/// a second to once a minute, so a context outlives its retention by at most a tenth (or a
/// minute) and a long retention costs one cheap statement a minute.
pub fn retention_sweep_period(retention: Duration) -> Duration {
    (retention / 10).clamp(Duration::from_secs(1), Duration::from_secs(60))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sweep_runs_every_tenth_of_the_retention_within_a_second_and_a_minute() {
        let period = |seconds| retention_sweep_period(Duration::from_secs(seconds)).as_secs();
        assert_eq!(period(1), 1);
        assert_eq!(period(30), 3);
        assert_eq!(period(300), 30);
        assert_eq!(period(3600), 60);
        assert_eq!(period(30 * 24 * 3600), 60);
    }
}
