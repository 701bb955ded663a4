//! API keys and permission entries.

use chrono::{DateTime, Utc};
use sea_query::{Alias, Expr, ExprTrait, Query, SelectStatement};
use serde::Serialize;
use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

use crate::access::{AccessLevel, ObjectType, PermissionEntry};
use crate::time::rfc3339;

/// An API key as the API shows it (never with its secret hash).
#[derive(Debug, Clone, sqlx::FromRow, Serialize, poem_openapi::Object)]
#[oai(rename = "ApiKey")]
pub struct ApiKeyRow {
    pub id: Uuid,
    pub name: String,
    #[oai(nullable)]
    pub description: Option<String>,
    pub active: bool,
    #[serde(with = "rfc3339::option")]
    #[oai(nullable)]
    pub expiration: Option<DateTime<Utc>>,
    #[serde(with = "rfc3339")]
    pub created_at: DateTime<Utc>,
    #[serde(with = "rfc3339")]
    pub updated_at: DateTime<Utc>,
    #[serde(skip)]
    #[oai(skip)]
    pub is_master: bool,
}

/// What the key check needs: the key, its hash and its entries.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct KeyForAuth {
    pub id: Uuid,
    pub name: String,
    pub description: Option<String>,
    pub secret_hash: Vec<u8>,
    pub active: bool,
    pub expiration: Option<DateTime<Utc>>,
    pub is_master: bool,
}

#[derive(sqlx::FromRow)]
struct EntryRow {
    object_type: String,
    object_id: Uuid,
    permission: i16,
    classifications: Vec<String>,
}

/// The columns of [`ApiKeyRow`], as a literal for `concat!` (SQL text is never formatted).
macro_rules! key_columns {
    () => {
        "id, name, description, active, expiration, created_at, updated_at, is_master"
    };
}

/// Reads a key and its permission entries for the key check, in one statement: a row per
/// entry (or one row without an entry), the key's columns on each.
pub async fn key_for_auth(
    pool: &PgPool,
    id: Uuid,
) -> Result<Option<(KeyForAuth, Vec<PermissionEntry>)>, sqlx::Error> {
    #[derive(sqlx::FromRow)]
    struct Row {
        #[sqlx(flatten)]
        key: KeyForAuth,
        object_type: Option<String>,
        object_id: Option<Uuid>,
        permission: Option<i16>,
        classifications: Option<Vec<String>>,
    }
    let rows: Vec<Row> = sqlx::query_as(
        "SELECT k.id, k.name, k.description, k.secret_hash, k.active, k.expiration, k.is_master,
                p.object_type, p.object_id, p.permission, p.classifications
         FROM api_keys AS k LEFT JOIN permissions AS p ON p.api_key_id = k.id
         WHERE k.id = $1 ORDER BY p.object_type, p.object_id",
    )
    .bind(id)
    .fetch_all(pool)
    .await?;
    let mut rows = rows.into_iter().peekable();
    let Some(first) = rows.peek() else {
        return Ok(None);
    };
    let key = first.key.clone();
    let entries = rows
        .filter_map(|r| {
            entry(EntryRow {
                object_type: r.object_type?,
                object_id: r.object_id?,
                permission: r.permission?,
                classifications: r.classifications?,
            })
        })
        .collect();
    Ok(Some((key, entries)))
}

/// An entry row as [`PermissionEntry`]; rows are written only through `ObjectType` and
/// `AccessLevel`, so both parse.
fn entry(r: EntryRow) -> Option<PermissionEntry> {
    let object_type = ObjectType::parse(&r.object_type).ok()?;
    let level = AccessLevel::from_bits(i64::from(r.permission))?;
    Some(PermissionEntry {
        object_type,
        object_id: r.object_id,
        level,
        classifications: r.classifications,
    })
}

/// Every permission entry of a key, ordered by object type then object id.
pub async fn entries(pool: &PgPool, key_id: Uuid) -> Result<Vec<PermissionEntry>, sqlx::Error> {
    let rows: Vec<EntryRow> = sqlx::query_as(
        "SELECT object_type, object_id, permission, classifications FROM permissions
         WHERE api_key_id = $1 ORDER BY object_type, object_id",
    )
    .bind(key_id)
    .fetch_all(pool)
    .await?;
    Ok(rows.into_iter().filter_map(entry).collect())
}

/// One key by id.
pub async fn get(pool: &PgPool, id: Uuid) -> Result<Option<ApiKeyRow>, sqlx::Error> {
    sqlx::query_as(concat!(
        "SELECT ",
        key_columns!(),
        " FROM api_keys WHERE id = $1"
    ))
    .bind(id)
    .fetch_optional(pool)
    .await
}

/// Inserts a key and its entries (one transaction, the caller's).
pub async fn insert(
    conn: &mut PgConnection,
    id: Uuid,
    name: &str,
    description: Option<&str>,
    secret_hash: &[u8],
) -> Result<ApiKeyRow, sqlx::Error> {
    sqlx::query_as(concat!(
        "INSERT INTO api_keys (id, name, description, secret_hash) VALUES ($1, $2, $3, $4) RETURNING ",
        key_columns!()
    ))
    .bind(id)
    .bind(name)
    .bind(description)
    .bind(secret_hash)
    .fetch_one(conn)
    .await
}

/// Writes the full state of a key's editable fields.
pub async fn update(
    pool: &PgPool,
    id: Uuid,
    name: &str,
    description: Option<&str>,
    active: bool,
    expiration: Option<DateTime<Utc>>,
) -> Result<Option<ApiKeyRow>, sqlx::Error> {
    sqlx::query_as(concat!(
        "UPDATE api_keys SET name = $2, description = $3, active = $4, expiration = $5, updated_at = now()
         WHERE id = $1 RETURNING ",
        key_columns!()
    ))
    .bind(id)
    .bind(name)
    .bind(description)
    .bind(active)
    .bind(expiration)
    .fetch_optional(pool)
    .await
}

/// Deletes a key, its entries (cascade) and every entry other keys hold on it.
pub async fn delete(pool: &PgPool, id: Uuid) -> Result<bool, sqlx::Error> {
    let mut tx = pool.begin().await?;
    sqlx::query("DELETE FROM permissions WHERE object_type = 'api-keys' AND object_id = $1")
        .bind(id)
        .execute(&mut *tx)
        .await?;
    let deleted = sqlx::query("DELETE FROM api_keys WHERE id = $1")
        .bind(id)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(deleted.rows_affected() > 0)
}

/// Sets (level > 0) or removes (level 0) one entry.
pub async fn put_entry(
    conn: &mut PgConnection,
    key_id: Uuid,
    object_type: ObjectType,
    object_id: Uuid,
    level: AccessLevel,
    classifications: &[String],
) -> Result<(), sqlx::Error> {
    if level == AccessLevel::NONE {
        sqlx::query(
            "DELETE FROM permissions WHERE api_key_id = $1 AND object_type = $2 AND object_id = $3",
        )
        .bind(key_id)
        .bind(object_type.key())
        .bind(object_id)
        .execute(conn)
        .await?;
    } else {
        sqlx::query(
            "INSERT INTO permissions (api_key_id, object_type, object_id, permission, classifications)
             VALUES ($1, $2, $3, $4, $5)
             ON CONFLICT (api_key_id, object_type, object_id)
             DO UPDATE SET permission = EXCLUDED.permission, classifications = EXCLUDED.classifications",
        )
        .bind(key_id)
        .bind(object_type.key())
        .bind(object_id)
        .bind(i16::from(level.bits()))
        .bind(classifications)
        .execute(conn)
        .await?;
    }
    Ok(())
}

/// Deletes every entry held on an object (the object was deleted).
pub async fn delete_entries_on(
    conn: &mut PgConnection,
    object_type: ObjectType,
    object_id: Uuid,
) -> Result<(), sqlx::Error> {
    sqlx::query("DELETE FROM permissions WHERE object_type = $1 AND object_id = $2")
        .bind(object_type.key())
        .bind(object_id)
        .execute(conn)
        .await?;
    Ok(())
}

/// The base statement of the key list: readable keys only.
pub fn list_base(readable_ids: Option<Vec<Uuid>>) -> SelectStatement {
    let table = Alias::new("api_keys");
    let mut select = Query::select();
    select.from(table.clone()).columns(
        [
            "id",
            "name",
            "description",
            "active",
            "expiration",
            "created_at",
            "updated_at",
            "is_master",
        ]
        .map(|c| (table.clone(), Alias::new(c))),
    );
    if let Some(ids) = readable_ids {
        select.and_where(Expr::col((table, Alias::new("id"))).is_in(ids));
    }
    select
}

/// Whether an object of the type exists (permission entries on objects must name one).
pub async fn object_exists(
    pool: &PgPool,
    object_type: ObjectType,
    id: Uuid,
) -> Result<bool, sqlx::Error> {
    let sql = match object_type {
        ObjectType::ApiKeys => "SELECT EXISTS (SELECT 1 FROM api_keys WHERE id = $1)",
        ObjectType::Documents => "SELECT EXISTS (SELECT 1 FROM documents WHERE id = $1)",
        ObjectType::EmbeddingModels => {
            "SELECT EXISTS (SELECT 1 FROM embedding_models WHERE id = $1)"
        }
        ObjectType::EmbeddingProviders => {
            "SELECT EXISTS (SELECT 1 FROM embedding_providers WHERE id = $1)"
        }
        ObjectType::Pipelines => "SELECT EXISTS (SELECT 1 FROM pipelines WHERE id = $1)",
        ObjectType::TextSplitterProviders => {
            "SELECT EXISTS (SELECT 1 FROM text_splitter_providers WHERE id = $1)"
        }
        ObjectType::TextSplitters => "SELECT EXISTS (SELECT 1 FROM text_splitters WHERE id = $1)",
        ObjectType::Taxonomies => "SELECT EXISTS (SELECT 1 FROM taxonomies WHERE id = $1)",
        ObjectType::Agents => "SELECT EXISTS (SELECT 1 FROM agents WHERE id = $1)",
        ObjectType::Llms => "SELECT EXISTS (SELECT 1 FROM llms WHERE id = $1)",
        // Types with no stored objects in this release: nothing exists to name.
        _ => return Ok(false),
    };
    sqlx::query_scalar(sql).bind(id).fetch_one(pool).await
}
