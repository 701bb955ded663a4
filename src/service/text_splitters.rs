//! Text splitter providers (read-only) and text splitters: creation, changes, deletion.

use super::Change;
use serde_json::{Map, Value};
use trove_query::list::{FieldKind, FieldSpec, FilterOps, ListRequest, ListSpec};
use trove_text::SplitterConfig;
use uuid::Uuid;

use super::{Envelope, validate_name};
use crate::access::{AccessLevel, ObjectType};
use crate::auth::AuthContext;
use crate::auth::license::check_license;
use crate::error::{ApiError, ApiResult};
use crate::license::License;
use crate::store::Pool;
use crate::store::listing;
use crate::store::text_splitters as store;

pub use crate::store::text_splitters::{ProviderRow, SplitterRow};

/// Fields of the text splitter provider list (addendum §4).
pub const PROVIDER_LIST: ListSpec = ListSpec {
    table: "text_splitter_providers",
    fields: &[
        FieldSpec::ID,
        FieldSpec::NAME,
        FieldSpec::CREATED_AT,
        FieldSpec::UPDATED_AT,
    ],
    echo_unset_filters: false,
    default_order: &["id"],
};

/// Fields of the text splitter list (addendum §4).
pub const SPLITTER_LIST: ListSpec = ListSpec {
    table: "text_splitters",
    fields: &[
        FieldSpec::ID,
        FieldSpec::NAME,
        FieldSpec::DESCRIPTION,
        FieldSpec::new("provider", FieldKind::Text, false, FilterOps::EQ, true),
        FieldSpec::CREATED_AT,
        FieldSpec::UPDATED_AT,
    ],
    echo_unset_filters: false,
    default_order: &["id"],
};

/// Input of a splitter creation, already deserialized.
pub struct NewSplitter {
    pub name: String,
    pub description: Option<String>,
    pub provider: String,
    /// `None` (omitted or null) is `{}`.
    pub parameters: Option<Map<String, Value>>,
}

/// Input of a splitter change (`provider` is fixed).
pub struct SplitterChange {
    pub name: Change<String>,
    pub description: Change<String>,
    /// Replaces the parameters whole; `null` counts as omitted.
    pub parameters: Change<Map<String, Value>>,
}

/// `Text Splitter not found` with the id.
pub fn splitter_not_found(id: Uuid) -> ApiError {
    ApiError::NotFound {
        message: "Text Splitter not found",
        id: Some(id),
    }
}

/// `Text Splitter provider not found` with the id.
pub fn provider_not_found(id: Uuid) -> ApiError {
    ApiError::NotFound {
        message: "Text Splitter provider not found",
        id: Some(id),
    }
}

/// Validates a provider name and parameters; returns the parameters with defaults filled.
/// Unknown provider and bad values are 400 `Invalid parameter` with the crate's reason.
pub fn validated_parameters(provider: &str, parameters: &Value) -> ApiResult<Value> {
    SplitterConfig::from_parameters(provider, parameters)
        .map(|config| config.to_parameters())
        .map_err(|e| ApiError::InvalidParameter(e.to_string()))
}

/// One page of the text splitter providers the caller can read: the list envelope.
pub async fn list_providers(
    pool: &Pool,
    auth: &AuthContext,
    request: &ListRequest,
) -> ApiResult<Envelope> {
    let base = store::provider_list_base(auth.readable_ids(ObjectType::TextSplitterProviders));
    listing::list::<ProviderRow>(pool, &PROVIDER_LIST, request, base).await
}

/// One page of the text splitters the caller can read: the list envelope.
pub async fn list(pool: &Pool, auth: &AuthContext, request: &ListRequest) -> ApiResult<Envelope> {
    let base = store::list_base(auth.readable_ids(ObjectType::TextSplitters));
    listing::list::<SplitterRow>(pool, &SPLITTER_LIST, request, base).await
}

/// Reads a provider the caller can read; missing or unreadable are both 404.
pub async fn get_provider_readable(
    pool: &Pool,
    auth: &AuthContext,
    id: Uuid,
) -> ApiResult<ProviderRow> {
    if !auth.can_read(ObjectType::TextSplitterProviders, id) {
        return Err(provider_not_found(id));
    }
    store::get_provider(pool, id)
        .await?
        .ok_or_else(|| provider_not_found(id))
}

/// Reads a splitter the caller can read; missing or unreadable are both 404.
pub async fn get_readable(pool: &Pool, auth: &AuthContext, id: Uuid) -> ApiResult<SplitterRow> {
    if !auth.can_read(ObjectType::TextSplitters, id) {
        return Err(splitter_not_found(id));
    }
    store::get(pool, id)
        .await?
        .ok_or_else(|| splitter_not_found(id))
}

/// Creates a splitter: W on the type (403) and W on the provider (404 `Text Splitter not
/// found`), then the license, then name, provider and parameters (400), then uniqueness (409).
pub async fn create(
    pool: &Pool,
    license: &License,
    auth: &AuthContext,
    input: NewSplitter,
) -> ApiResult<SplitterRow> {
    auth.require_type(ObjectType::TextSplitters, AccessLevel::WRITE)?;
    // An unknown provider is a validation error (400), reported after the license; a known
    // one the key cannot write is reported as "not found".
    if let Some(provider) = store::provider_by_name(pool, &input.provider).await?
        && !auth
            .object_level(ObjectType::TextSplitterProviders, provider.id)
            .contains(AccessLevel::WRITE)
    {
        return Err(ApiError::NotFound {
            message: "Text Splitter not found",
            id: None,
        });
    }
    check_license(license, pool, Some(ObjectType::TextSplitters)).await?;
    validate_name(&input.name)?;
    let parameters = Value::Object(input.parameters.unwrap_or_default());
    let parameters = validated_parameters(&input.provider, &parameters)?;
    Ok(store::insert(
        pool,
        Uuid::new_v4(),
        &input.name,
        input.description.as_deref(),
        &input.provider,
        &parameters,
    )
    .await?)
}

/// Changes a splitter's name, description or parameters (re-validated against its provider).
pub async fn update(
    pool: &Pool,
    license: &License,
    auth: &AuthContext,
    id: Uuid,
    change: SplitterChange,
) -> ApiResult<SplitterRow> {
    let current = get_readable(pool, auth, id).await?;
    auth.require_object(ObjectType::TextSplitters, id, AccessLevel::WRITE)?;
    check_license(license, pool, None).await?;

    let name = change.name.required(current.name.clone());
    validate_name(&name)?;
    let description = change.description.nullable(current.description.clone());
    let parameters = match change.parameters {
        Change::Value(p) => Value::Object(p),
        Change::Null | Change::Omitted => current.parameters.clone(),
    };
    let parameters = validated_parameters(&current.provider, &parameters)?;
    store::update(pool, id, &name, description.as_deref(), &parameters)
        .await?
        .ok_or_else(|| splitter_not_found(id))
}

/// Deletes a splitter unless a pipeline's default or a pending version's override uses it
/// (409 `Conflict related error`).
pub async fn delete(pool: &Pool, auth: &AuthContext, id: Uuid) -> ApiResult<()> {
    get_readable(pool, auth, id).await?;
    auth.require_object(ObjectType::TextSplitters, id, AccessLevel::WRITE)?;
    // A splitter still referenced is a restrict violation: 409 `Conflict related error`.
    if store::delete(pool, id).await? {
        Ok(())
    } else {
        Err(splitter_not_found(id))
    }
}
