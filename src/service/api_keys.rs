//! API keys and permissions: creation, changes, deletion, and the granting rules.

use super::Change;
use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::Serialize;
use trove_query::list::{FieldKind, FieldSpec, FilterOps, ListRequest, ListSpec};
use uuid::Uuid;

use super::{Envelope, validate_name};
use crate::access::{AccessLevel, ObjectType, PermissionEntry, TYPE_ENTRY_ID};
use crate::auth::AuthContext;
use crate::auth::license::check_license;
use crate::crypto::{generate_key_secret, hash_key_secret};
use crate::error::{ApiError, ApiResult};
use crate::license::License;
use crate::store::Pool;
use crate::store::api_keys::{self as store, EntryWrite};
use crate::store::listing;
use crate::time::rfc3339;

pub use crate::store::api_keys::ApiKeyRow;

/// Fields of the API key list (addendum §4).
pub const API_KEY_LIST: ListSpec = ListSpec {
    table: "api_keys",
    fields: &[
        FieldSpec::ID,
        FieldSpec::NAME,
        FieldSpec::DESCRIPTION,
        FieldSpec::new("active", FieldKind::Bool, false, FilterOps::EQ, false),
        FieldSpec::new(
            "expiration",
            FieldKind::Timestamp,
            true,
            FilterOps::EQ_COMPARE,
            true,
        ),
        FieldSpec::CREATED_AT,
        FieldSpec::UPDATED_AT,
    ],
    echo_unset_filters: false,
    default_order: &["id"],
};

/// One page of the API keys the caller can read, without secrets: the list envelope.
pub async fn list(pool: &Pool, auth: &AuthContext, request: &ListRequest) -> ApiResult<Envelope> {
    let base = store::list_base(auth.readable_ids(ObjectType::ApiKeys));
    listing::list::<ApiKeyRow>(pool, &API_KEY_LIST, request, base).await
}

/// A created key, the only time its secret is shown.
#[derive(Debug, Serialize)]
pub struct CreatedKey {
    pub id: Uuid,
    pub name: String,
    pub description: Option<String>,
    pub secret: String,
    pub active: bool,
    #[serde(with = "rfc3339::option")]
    pub expiration: Option<DateTime<Utc>>,
    #[serde(with = "rfc3339")]
    pub created_at: DateTime<Utc>,
    #[serde(with = "rfc3339")]
    pub updated_at: DateTime<Utc>,
}

/// Input of a key creation, already deserialized.
pub struct NewKey {
    pub name: String,
    pub description: Option<String>,
    pub permissions: BTreeMap<String, AccessLevel>,
    pub classifications: Vec<String>,
}

/// Input of a key change.
pub struct KeyChange {
    pub name: Change<String>,
    pub description: Change<String>,
    pub active: Change<bool>,
    pub expiration: Change<DateTime<Utc>>,
}

/// One requested entry change.
pub struct EntryChange {
    pub object_type: String,
    pub object_id: Uuid,
    pub level: AccessLevel,
    pub classifications: Vec<String>,
}

/// The 403 that protects a key (the master key, or oneself).
fn write_denied(id: Uuid) -> ApiError {
    ApiError::AccessDenied {
        level: AccessLevel::WRITE,
        object_type: ObjectType::ApiKeys,
        id: Some(id),
    }
}

/// Reads a key the caller can read; missing or unreadable are both `ApiKey not found`.
pub async fn get_readable(pool: &Pool, auth: &AuthContext, id: Uuid) -> ApiResult<ApiKeyRow> {
    if !auth.can_read(ObjectType::ApiKeys, id) {
        return Err(ApiError::api_key_not_found(id));
    }
    store::get(pool, id)
        .await?
        .ok_or_else(|| ApiError::api_key_not_found(id))
}

/// Whether the caller may grant or revoke `old` → `new` on a type or an object: it must hold
/// every bit of both values there and, for pipelines, `*` or every classification of both.
fn check_grant(
    auth: &AuthContext,
    object_type: ObjectType,
    object_id: Uuid,
    old: Option<&PermissionEntry>,
    new_level: AccessLevel,
    new_classifications: &[String],
) -> ApiResult<()> {
    let old_level = old.map_or(AccessLevel::NONE, |e| e.level);
    let needed = old_level.union(new_level);
    let (held, id) = if object_id == TYPE_ENTRY_ID {
        (auth.type_level(object_type), None)
    } else {
        (auth.object_level(object_type, object_id), Some(object_id))
    };
    let denied = ApiError::AccessDenied {
        level: needed,
        object_type,
        id,
    };
    if !held.contains(needed) {
        return Err(denied);
    }
    if object_type == ObjectType::Pipelines {
        let pipeline = (object_id != TYPE_ENTRY_ID).then_some(object_id);
        if !auth.allows_all_classifications(pipeline) {
            let allowed = auth.allow_list(pipeline);
            let old_classifications = old
                .map(|e| e.classifications.as_slice())
                .unwrap_or_default();
            let all_held = new_classifications
                .iter()
                .chain(old_classifications)
                .all(|c| allowed.contains(c));
            if !all_held {
                return Err(denied);
            }
        }
    }
    Ok(())
}

/// Creates a key with type entries. The secret is returned once.
pub async fn create(
    pool: &Pool,
    license: &License,
    auth: &AuthContext,
    input: NewKey,
) -> ApiResult<CreatedKey> {
    auth.require_type(ObjectType::ApiKeys, AccessLevel::WRITE)?;
    check_license(license, pool, Some(ObjectType::ApiKeys)).await?;
    validate_name(&input.name)?;
    let mut entries = Vec::new();
    for (key, level) in &input.permissions {
        let object_type = ObjectType::parse(key)?;
        let classifications = if object_type == ObjectType::Pipelines {
            input.classifications.clone()
        } else {
            Vec::new()
        };
        entries.push(EntryWrite {
            object_type,
            object_id: TYPE_ENTRY_ID,
            level: *level,
            classifications,
        });
    }
    for entry in &entries {
        check_grant(
            auth,
            entry.object_type,
            TYPE_ENTRY_ID,
            None,
            entry.level,
            &entry.classifications,
        )?;
    }

    let id = Uuid::new_v4();
    let secret = generate_key_secret();
    let secret_hash = hash_key_secret(id, &secret);
    let key = store::NewKey {
        id,
        name: &input.name,
        description: input.description.as_deref(),
        secret_hash: &secret_hash,
    };
    let row = store::insert(pool, key, &entries).await?;
    Ok(CreatedKey {
        id: row.id,
        name: row.name,
        description: row.description,
        secret,
        active: row.active,
        expiration: row.expiration,
        created_at: row.created_at,
        updated_at: row.updated_at,
    })
}

/// Changes a key's editable fields.
pub async fn update(
    pool: &Pool,
    license: &License,
    auth: &AuthContext,
    id: Uuid,
    change: KeyChange,
) -> ApiResult<ApiKeyRow> {
    let current = get_readable(pool, auth, id).await?;
    auth.require_object(ObjectType::ApiKeys, id, AccessLevel::WRITE)?;
    check_license(license, pool, None).await?;

    let name = change.name.required(current.name.clone());
    validate_name(&name)?;
    let description = change.description.nullable(current.description.clone());
    let active = change.active.required(current.active);
    let expiration = change.expiration.nullable(current.expiration);
    // The master key stays usable whatever any key asks: an administrator always remains.
    if current.is_master && (!active || expiration.is_some()) {
        return Err(write_denied(id));
    }
    store::update(pool, id, &name, description.as_deref(), active, expiration)
        .await?
        .ok_or_else(|| ApiError::api_key_not_found(id))
}

/// Deletes a key (never oneself, never the master key).
pub async fn delete(pool: &Pool, auth: &AuthContext, id: Uuid) -> ApiResult<()> {
    let current = get_readable(pool, auth, id).await?;
    auth.require_object(ObjectType::ApiKeys, id, AccessLevel::WRITE)?;
    if current.is_master || id == auth.key_id {
        return Err(write_denied(id));
    }
    if !store::delete(pool, id).await? {
        return Err(ApiError::api_key_not_found(id));
    }
    Ok(())
}

/// Every entry of a key the caller can read.
pub async fn entries(pool: &Pool, auth: &AuthContext, id: Uuid) -> ApiResult<Vec<PermissionEntry>> {
    get_readable(pool, auth, id).await?;
    Ok(store::entries(pool, id).await?)
}

/// Applies entry changes all or nothing.
pub async fn change_entries(
    pool: &Pool,
    license: &License,
    auth: &AuthContext,
    id: Uuid,
    changes: Vec<EntryChange>,
) -> ApiResult<()> {
    let target = get_readable(pool, auth, id).await?;
    auth.require_object(ObjectType::ApiKeys, id, AccessLevel::WRITE)?;
    check_license(license, pool, None).await?;
    let mut parsed = Vec::with_capacity(changes.len());
    for change in changes {
        parsed.push((ObjectType::parse(&change.object_type)?, change));
    }
    if target.is_master {
        return Err(write_denied(id));
    }
    let current = store::entries(pool, id).await?;
    for (object_type, change) in &parsed {
        if change.object_id != TYPE_ENTRY_ID
            && !store::object_exists(pool, *object_type, change.object_id).await?
        {
            return Err(ApiError::ObjectNotFound {
                type_name: object_type.display_name(),
                id: change.object_id,
            });
        }
        let old = current
            .iter()
            .find(|e| e.object_type == *object_type && e.object_id == change.object_id);
        let classifications = if *object_type == ObjectType::Pipelines {
            change.classifications.as_slice()
        } else {
            &[]
        };
        check_grant(
            auth,
            *object_type,
            change.object_id,
            old,
            change.level,
            classifications,
        )?;
    }
    let writes: Vec<EntryWrite> = parsed
        .into_iter()
        .map(|(object_type, change)| EntryWrite {
            object_type,
            object_id: change.object_id,
            level: change.level,
            classifications: if object_type == ObjectType::Pipelines {
                change.classifications
            } else {
                Vec::new()
            },
        })
        .collect();
    store::put_entries(pool, id, &writes).await?;
    Ok(())
}
