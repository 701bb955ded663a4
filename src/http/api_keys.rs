//! `/api-keys`, `/login` and `/permissions`.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use poem::Request;
use poem_openapi::types::MaybeUndefined;
use poem_openapi::{Object, OpenApi};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;
use trove_query::list::parse_list_query;
use uuid::Uuid;

use super::ApiTags;
use super::extract::{self, Auth, JsonBody, form_pairs, state};
use super::respond::{Created, Described, EmptyOk, Json, List, NoContent};
use super::schemas::ApiKey;
use crate::access::{AccessLevel, ObjectType, TYPE_ENTRY_ID};
use crate::error::ApiError;
use crate::service::api_keys::{self as service, EntryChange, KeyChange, NewKey};

/// Deserializes a permission value: an integer 0..=7 (else 422 with serde's reason).
fn de_level<'de, D: Deserializer<'de>>(d: D) -> Result<u8, D::Error> {
    let value = u8::deserialize(d)?;
    if value > 7 {
        return Err(serde::de::Error::invalid_value(
            serde::de::Unexpected::Unsigned(u64::from(value)),
            &"an integer from 0 to 7",
        ));
    }
    Ok(value)
}

fn de_levels<'de, D: Deserializer<'de>>(d: D) -> Result<BTreeMap<String, u8>, D::Error> {
    #[derive(Deserialize)]
    struct Level(#[serde(deserialize_with = "de_level")] u8);
    let map = BTreeMap::<String, Level>::deserialize(d)?;
    Ok(map.into_iter().map(|(k, v)| (k, v.0)).collect())
}

/// Body of `POST /api-keys`.
#[derive(Debug, Object, Deserialize)]
pub struct CreateApiKeyBody {
    /// Key name (not unique).
    name: String,
    #[serde(default)]
    description: Option<String>,
    /// Object type → permission bits (read 4, write 2, execute 1).
    #[serde(default, deserialize_with = "de_levels")]
    #[oai(default)]
    permissions: BTreeMap<String, u8>,
    /// Classification allow-list of the `pipelines` entry (`*` permits all).
    #[serde(default)]
    #[oai(default)]
    classifications: Vec<String>,
}

/// Body of `PATCH /api-keys/{api_key_id}`.
#[derive(Debug, Object, Deserialize)]
pub struct UpdateApiKeyBody {
    #[serde(default)]
    name: MaybeUndefined<String>,
    #[serde(default)]
    description: MaybeUndefined<String>,
    #[serde(default)]
    active: MaybeUndefined<bool>,
    #[serde(default)]
    expiration: MaybeUndefined<DateTime<Utc>>,
}

/// One entry of `POST /api-keys/{api_key_id}/permissions`.
#[derive(Debug, Object, Deserialize)]
pub struct PermissionEntryBody {
    object_type: String,
    /// The object; omitted or all-zero for the whole type.
    #[serde(default)]
    object_id: Option<Uuid>,
    /// 0 removes the entry.
    #[serde(deserialize_with = "de_level")]
    permission: u8,
    #[serde(default)]
    #[oai(default)]
    classifications: Vec<String>,
}

/// A created API key with its secret (shown once).
#[derive(Debug, Object, Serialize)]
pub struct CreatedApiKeyObject {
    id: Uuid,
    name: String,
    #[oai(nullable)]
    description: Option<String>,
    /// 48 characters; returned only here.
    secret: String,
    active: bool,
    #[oai(nullable)]
    expiration: Option<DateTime<Utc>>,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
}

/// A permission entry.
#[derive(Debug, Object, Serialize)]
pub struct PermissionEntryObject {
    object_type: String,
    object_id: Uuid,
    permission: u8,
    classifications: Vec<String>,
}

/// A key's permission on an object type.
// Schema only: the permissions are built as JSON (`AuthContext::type_permissions_json`).
#[derive(Debug, Object)]
pub struct TypePermission {
    /// Permission bits: read 4, write 2, execute 1.
    access_level: u8,
    /// The classification allow-list of `pipelines` (`*` permits all); empty for other types.
    classifications: Vec<String>,
}

/// Object type → the key's permission on it.
type TypePermissions = Described<BTreeMap<String, TypePermission>>;

/// Result of `POST /login`.
#[derive(Debug, Object, Serialize)]
pub struct KeyCheckResult {
    message: String,
    key: String,
    #[oai(nullable)]
    description: Option<String>,
    /// Object type → the key's permission on it.
    permissions: TypePermissions,
}

#[derive(Default)]
pub struct ApiKeysApi;

#[OpenApi(tag = "ApiTags::ApiKeys")]
impl ApiKeysApi {
    /// List API keys
    ///
    /// Keys the caller can read, without secrets. Filters: `id`; `name`, `name$contains`,
    /// `name$startswith`, `name$gt|ge|lt|le`; `description`, `description$contains`; `active`;
    /// `expiration`, `created_at`, `updated_at` with `$gt|ge|lt|le`. Cursor (`first`, `after`,
    /// `last`, `before`) or offset (`limit`, `offset`) pagination, `count`, `order_by`.
    #[oai(path = "/api-keys", method = "get")]
    async fn list(&self, auth: Auth, req: &Request) -> poem::Result<Json<List<ApiKey>>> {
        let state = state(req)?;
        let request = parse_list_query(&service::API_KEY_LIST, req.uri().query(), &[])
            .map_err(ApiError::from)?;
        let envelope = service::list(&state.pool, &auth.0, &request).await?;
        Ok(Json(envelope.into()))
    }

    /// Create an API key
    ///
    /// The secret is returned only in this response. Permissions on individual objects are
    /// granted afterwards with `POST /api-keys/{api_key_id}/permissions`.
    #[oai(path = "/api-keys", method = "post")]
    async fn create(
        &self,
        auth: Auth,
        req: &Request,
        body: JsonBody<CreateApiKeyBody>,
    ) -> poem::Result<Created<CreatedApiKeyObject>> {
        let state = state(req)?;
        let body = body.0;
        let mut permissions = BTreeMap::new();
        for (key, bits) in body.permissions {
            permissions.insert(
                key,
                AccessLevel::from_bits(i64::from(bits)).unwrap_or_default(),
            );
        }
        let input = NewKey {
            name: body.name,
            description: body.description,
            permissions,
            classifications: body.classifications,
        };
        let key = service::create(&state.pool, &state.config.license, &auth.0, input).await?;
        Ok(Created(CreatedApiKeyObject {
            id: key.id,
            name: key.name,
            description: key.description,
            secret: key.secret,
            active: key.active,
            expiration: key.expiration,
            created_at: key.created_at,
            updated_at: key.updated_at,
        }))
    }

    /// Get an API key
    #[oai(path = "/api-keys/:api_key_id", method = "get")]
    async fn get(
        &self,
        auth: Auth,
        api_key_id: extract::Path,
        req: &Request,
    ) -> poem::Result<Json<ApiKey>> {
        let state = state(req)?;
        Ok(Json(
            service::get_readable(&state.pool, &auth.0, api_key_id.0)
                .await?
                .into(),
        ))
    }

    /// Update an API key
    ///
    /// Changes `name`, `description`, `active`, `expiration`; omitted fields keep their values,
    /// `null` removes the description or the expiration. Deactivation applies from the next
    /// request.
    #[oai(path = "/api-keys/:api_key_id", method = "patch")]
    async fn update(
        &self,
        auth: Auth,
        api_key_id: extract::Path,
        req: &Request,
        body: JsonBody<UpdateApiKeyBody>,
    ) -> poem::Result<Json<ApiKey>> {
        let state = state(req)?;
        let body = body.0;
        let change = KeyChange {
            name: body.name.into(),
            description: body.description.into(),
            active: body.active.into(),
            expiration: body.expiration.into(),
        };
        Ok(Json(
            service::update(
                &state.pool,
                &state.config.license,
                &auth.0,
                api_key_id.0,
                change,
            )
            .await?
            .into(),
        ))
    }

    /// Delete an API key
    ///
    /// Deletes the key and its permission entries. A key cannot delete itself.
    #[oai(path = "/api-keys/:api_key_id", method = "delete")]
    async fn delete(
        &self,
        auth: Auth,
        api_key_id: extract::Path,
        req: &Request,
    ) -> poem::Result<NoContent> {
        let state = state(req)?;
        service::delete(&state.pool, &auth.0, api_key_id.0).await?;
        Ok(NoContent)
    }

    /// List a key's permission entries
    #[oai(path = "/api-keys/:api_key_id/permissions", method = "get")]
    async fn list_permissions(
        &self,
        auth: Auth,
        api_key_id: extract::Path,
        req: &Request,
    ) -> poem::Result<Json<Vec<PermissionEntryObject>>> {
        let state = state(req)?;
        let entries = service::entries(&state.pool, &auth.0, api_key_id.0).await?;
        Ok(Json(
            entries
                .into_iter()
                .map(|e| PermissionEntryObject {
                    object_type: e.object_type.key().to_owned(),
                    object_id: e.object_id,
                    permission: e.level.bits(),
                    classifications: e.classifications,
                })
                .collect(),
        ))
    }

    /// Change a key's permission entries
    ///
    /// Adds, changes or removes (permission 0) entries, all in one transaction. A key cannot
    /// grant or revoke a permission it does not hold.
    #[oai(path = "/api-keys/:api_key_id/permissions", method = "post")]
    async fn change_permissions(
        &self,
        auth: Auth,
        api_key_id: extract::Path,
        req: &Request,
        body: JsonBody<Vec<PermissionEntryBody>>,
    ) -> poem::Result<EmptyOk> {
        let state = state(req)?;
        let changes = body
            .0
            .into_iter()
            .map(|e| EntryChange {
                object_type: e.object_type,
                object_id: e.object_id.unwrap_or(TYPE_ENTRY_ID),
                level: AccessLevel::from_bits(i64::from(e.permission)).unwrap_or_default(),
                classifications: e.classifications,
            })
            .collect();
        service::change_entries(
            &state.pool,
            &state.config.license,
            &auth.0,
            api_key_id.0,
            changes,
        )
        .await?;
        Ok(EmptyOk)
    }

    /// Check a key
    ///
    /// Needs a valid key and no permission. Returns the key's name and its permissions on
    /// every object type.
    #[oai(path = "/login", method = "post")]
    async fn login(&self, auth: Auth) -> poem::Result<Created<KeyCheckResult>> {
        Ok(Created(KeyCheckResult {
            message: "OK".to_owned(),
            key: auth.0.name.clone(),
            description: auth.0.description.clone(),
            permissions: Described::new(auth.0.type_permissions_json()),
        }))
    }

    /// Permissions of the calling key on every object type
    #[oai(path = "/permissions", method = "get")]
    async fn my_permissions(&self, auth: Auth) -> poem::Result<Json<TypePermissions>> {
        Ok(Json(Described::new(auth.0.type_permissions_json())))
    }

    /// Permissions of the calling key on several objects of one type
    ///
    /// Repeat `object_id` for each object. Returns each id mapped to its permission (0..7).
    #[oai(path = "/permissions/:object_type", method = "get")]
    async fn permissions_on_objects(
        &self,
        auth: Auth,
        object_type: poem_openapi::param::Path<String>,
        req: &Request,
    ) -> poem::Result<Json<Described<BTreeMap<String, u8>>>> {
        let object_type = ObjectType::parse(&object_type.0).map_err(ApiError::from)?;
        let mut map = serde_json::Map::new();
        for (name, value) in form_pairs(req.uri().query()) {
            if name != "object_id" {
                continue;
            }
            let id = Uuid::parse_str(&value).map_err(|e| {
                ApiError::query_string(format!("object_id: UUID parsing failed: {e}"))
            })?;
            map.insert(
                id.to_string(),
                Value::from(auth.0.object_level(object_type, id).bits()),
            );
        }
        Ok(Json(Described::new(Value::Object(map))))
    }

    /// Permission of the calling key on one object
    #[oai(path = "/permissions/:object_type/:object_id", method = "get")]
    async fn permission_on_object(
        &self,
        auth: Auth,
        object_type: poem_openapi::param::Path<String>,
        object_id: extract::Path,
    ) -> poem::Result<Json<u8>> {
        let object_type = ObjectType::parse(&object_type.0).map_err(ApiError::from)?;
        Ok(Json(auth.0.object_level(object_type, object_id.0).bits()))
    }
}
