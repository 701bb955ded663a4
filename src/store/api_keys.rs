//! API keys and permission entries.

use chrono::{DateTime, Utc};
use sea_orm::sea_query::OnConflict;
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, DbErr, EntityTrait, PrimaryKeyTrait,
    QueryFilter, QueryOrder, Set, TransactionTrait,
};
use sea_query::{Alias, Expr, ExprTrait, Query, SelectStatement};
use serde::Serialize;
use sqlx::PgPool;
use uuid::Uuid;

use super::Pool;
use super::entities::{self, api_key, permission};
use crate::access::{AccessLevel, ObjectType, PermissionEntry};
use crate::time::rfc3339;

/// An API key as the API shows it (never with its secret hash).
#[derive(Debug, Clone, sqlx::FromRow, Serialize)]
pub struct ApiKeyRow {
    pub id: Uuid,
    pub name: String,
    pub description: Option<String>,
    pub active: bool,
    #[serde(with = "rfc3339::option")]
    pub expiration: Option<DateTime<Utc>>,
    #[serde(with = "rfc3339")]
    pub created_at: DateTime<Utc>,
    #[serde(with = "rfc3339")]
    pub updated_at: DateTime<Utc>,
    #[serde(skip)]
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

impl From<api_key::Model> for ApiKeyRow {
    fn from(m: api_key::Model) -> Self {
        Self {
            id: m.id,
            name: m.name,
            description: m.description,
            active: m.active,
            expiration: m.expiration,
            created_at: m.created_at,
            updated_at: m.updated_at,
            is_master: m.is_master,
        }
    }
}

/// One permission entry to write: a level above 0 sets it, 0 removes it.
#[derive(Debug, Clone)]
pub struct EntryWrite {
    pub object_type: ObjectType,
    /// The object, or `TYPE_ENTRY_ID` for the type entry.
    pub object_id: Uuid,
    pub level: AccessLevel,
    pub classifications: Vec<String>,
}

/// A key as the key check reads it, with its permission entries (`None`: no such key).
pub type KeyRead = Option<(KeyForAuth, Vec<PermissionEntry>)>;

/// Reads a key and its permission entries for the key check, in one statement (one row, the
/// entries aggregated: see [`KEY_COLUMNS`]).
pub async fn key_for_auth(
    connection: &mut sqlx::PgConnection,
    id: Uuid,
) -> Result<KeyRead, sqlx::Error> {
    let row = sqlx::query(sqlx::AssertSqlSafe(format!(
        "SELECT {KEY_COLUMNS} FROM (SELECT 1) AS one \
         LEFT JOIN api_keys AS auth_key ON auth_key.id = $1"
    )))
    .bind(id)
    .fetch_one(connection)
    .await?;
    key_from_columns(&row)
}

/// The key check's read as columns of a larger statement that joins `api_keys AS auth_key`
/// (see `pipelines::key_and_search_context`): the key's columns prefixed `auth_`, and its
/// entries as one JSON array of `[object_type, object_id, permission, classifications]`.
pub(super) const KEY_COLUMNS: &str = "auth_key.id AS auth_id, auth_key.name AS auth_name, \
     auth_key.description AS auth_description, auth_key.secret_hash AS auth_secret_hash, \
     auth_key.active AS auth_active, auth_key.expiration AS auth_expiration, \
     auth_key.is_master AS auth_is_master, \
     (SELECT coalesce(json_agg(json_build_array(p.object_type, p.object_id, p.permission, \
         p.classifications) ORDER BY p.object_type, p.object_id), '[]') \
      FROM permissions AS p WHERE p.api_key_id = auth_key.id) AS auth_permissions";

/// The key and its entries from [`KEY_COLUMNS`] (`None`: no such key).
pub(super) fn key_from_columns(row: &sqlx::postgres::PgRow) -> Result<KeyRead, sqlx::Error> {
    use sqlx::Row;
    let Some(id) = row.try_get::<Option<Uuid>, _>("auth_id")? else {
        return Ok(None);
    };
    let key = KeyForAuth {
        id,
        name: row.try_get("auth_name")?,
        description: row.try_get("auth_description")?,
        secret_hash: row.try_get("auth_secret_hash")?,
        active: row.try_get("auth_active")?,
        expiration: row.try_get("auth_expiration")?,
        is_master: row.try_get("auth_is_master")?,
    };
    type EntryColumns = (String, Uuid, i16, Vec<String>);
    let sqlx::types::Json(entries): sqlx::types::Json<Vec<EntryColumns>> =
        row.try_get("auth_permissions")?;
    let entries = entries
        .into_iter()
        .filter_map(|(object_type, object_id, permission, classifications)| {
            entry(permission::Model {
                api_key_id: id,
                object_type,
                object_id,
                permission,
                classifications,
            })
        })
        .collect();
    Ok(Some((key, entries)))
}

/// An entry row as [`PermissionEntry`]; rows are written only through `ObjectType` and
/// `AccessLevel`, so both parse.
fn entry(r: permission::Model) -> Option<PermissionEntry> {
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
pub async fn entries(db: &Pool, key_id: Uuid) -> Result<Vec<PermissionEntry>, DbErr> {
    let rows = permission::Entity::find()
        .filter(permission::Column::ApiKeyId.eq(key_id))
        .order_by_asc(permission::Column::ObjectType)
        .order_by_asc(permission::Column::ObjectId)
        .all(db.orm())
        .await?;
    Ok(rows.into_iter().filter_map(entry).collect())
}

/// One key by id.
pub async fn get(db: &Pool, id: Uuid) -> Result<Option<ApiKeyRow>, DbErr> {
    let key = api_key::Entity::find_by_id(id).one(db.orm()).await?;
    Ok(key.map(ApiKeyRow::from))
}

/// What a new key stores.
pub struct NewKey<'a> {
    pub id: Uuid,
    pub name: &'a str,
    pub description: Option<&'a str>,
    pub secret_hash: &'a [u8],
}

/// Inserts a key and its entries, in one transaction.
pub async fn insert(
    db: &Pool,
    key: NewKey<'_>,
    entries: &[EntryWrite],
) -> Result<ApiKeyRow, DbErr> {
    let txn = db.orm().begin().await?;
    let row = api_key::ActiveModel {
        id: Set(key.id),
        name: Set(key.name.to_owned()),
        description: Set(key.description.map(str::to_owned)),
        secret_hash: Set(key.secret_hash.to_vec()),
        ..Default::default()
    }
    .insert(&txn)
    .await?;
    for write in entries {
        put_entry(&txn, key.id, write).await?;
    }
    txn.commit().await?;
    Ok(row.into())
}

/// Writes the full state of a key's editable fields.
pub async fn update(
    db: &Pool,
    id: Uuid,
    name: &str,
    description: Option<&str>,
    active: bool,
    expiration: Option<DateTime<Utc>>,
) -> Result<Option<ApiKeyRow>, DbErr> {
    let changes = api_key::ActiveModel {
        name: Set(name.to_owned()),
        description: Set(description.map(str::to_owned)),
        active: Set(active),
        expiration: Set(expiration),
        ..Default::default()
    };
    let row = entities::update_by_id(db.orm(), id, changes).await?;
    Ok(row.map(ApiKeyRow::from))
}

/// Deletes a key, its entries (cascade) and every entry other keys hold on it.
pub async fn delete(db: &Pool, id: Uuid) -> Result<bool, DbErr> {
    delete_with_entries::<api_key::Entity>(db, ObjectType::ApiKeys, id).await
}

/// Deletes the row `id` of `E` and every permission entry on it (as object of
/// `object_type`), in one transaction; whether the row existed.
pub(super) async fn delete_with_entries<E>(
    db: &Pool,
    object_type: ObjectType,
    id: Uuid,
) -> Result<bool, DbErr>
where
    E: EntityTrait,
    Uuid: Into<<E::PrimaryKey as PrimaryKeyTrait>::ValueType>,
{
    let txn = db.orm().begin().await?;
    delete_entries_on(&txn, object_type, id).await?;
    let deleted = E::delete_by_id(id).exec(&txn).await?;
    txn.commit().await?;
    Ok(deleted.rows_affected > 0)
}

/// Applies entry writes to a key, all or nothing.
pub async fn put_entries(db: &Pool, key_id: Uuid, writes: &[EntryWrite]) -> Result<(), DbErr> {
    let txn = db.orm().begin().await?;
    for write in writes {
        put_entry(&txn, key_id, write).await?;
    }
    txn.commit().await
}

/// Sets (level > 0) or removes (level 0) one entry.
async fn put_entry(
    db: &impl ConnectionTrait,
    key_id: Uuid,
    write: &EntryWrite,
) -> Result<(), DbErr> {
    let object_type = write.object_type.key();
    if write.level == AccessLevel::NONE {
        permission::Entity::delete_many()
            .filter(permission::Column::ApiKeyId.eq(key_id))
            .filter(permission::Column::ObjectType.eq(object_type))
            .filter(permission::Column::ObjectId.eq(write.object_id))
            .exec(db)
            .await?;
        return Ok(());
    }
    let entry = permission::ActiveModel {
        api_key_id: Set(key_id),
        object_type: Set(object_type.to_owned()),
        object_id: Set(write.object_id),
        permission: Set(i16::from(write.level.bits())),
        classifications: Set(write.classifications.clone()),
    };
    permission::Entity::insert(entry)
        .on_conflict(
            OnConflict::columns([
                permission::Column::ApiKeyId,
                permission::Column::ObjectType,
                permission::Column::ObjectId,
            ])
            .update_columns([
                permission::Column::Permission,
                permission::Column::Classifications,
            ])
            .to_owned(),
        )
        .exec_without_returning(db)
        .await?;
    Ok(())
}

/// Deletes every entry held on an object (the object is being deleted).
pub(super) async fn delete_entries_on(
    db: &impl ConnectionTrait,
    object_type: ObjectType,
    object_id: Uuid,
) -> Result<(), DbErr> {
    permission::Entity::delete_many()
        .filter(permission::Column::ObjectType.eq(object_type.key()))
        .filter(permission::Column::ObjectId.eq(object_id))
        .exec(db)
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
        // Types with no storage of their own, and contexts, which only their key may see
        // (permissions have no effect on them): nothing exists to name.
        _ => return Ok(false),
    };
    sqlx::query_scalar(sql).bind(id).fetch_one(pool).await
}
