//! Taxonomies: creation, changes, deletion, and the links (entries) they hold.

use super::Change;
use std::collections::HashSet;

use serde::Serialize;
use trove_query::list::{FieldKind, FieldSpec, FilterOps, ListRequest, ListSpec};
use uuid::Uuid;

use super::{Envelope, validate_name};
use crate::access::{AccessLevel, ObjectType};
use crate::auth::AuthContext;
use crate::auth::license::check_license;
use crate::error::{ApiError, ApiResult};
use crate::license::License;
use crate::metadata_schema::is_identifier;
use crate::store::Pool;
use crate::store::listing;
use crate::store::taxonomies as store;

pub use crate::store::taxonomies::{EntryRow, Link, TaxonomyRow};

/// Fields of the taxonomy list (addendum §4).
pub const TAXONOMY_LIST: ListSpec = ListSpec {
    table: "taxonomies",
    fields: &[
        FieldSpec::new("id", FieldKind::Uuid, false, FilterOps::EQ, true),
        FieldSpec::new("name", FieldKind::Text, false, FilterOps::TEXT_ALL, true),
        FieldSpec::new(
            "description",
            FieldKind::Text,
            true,
            FilterOps::EQ_CONTAINS,
            false,
        ),
        FieldSpec::new(
            "created_at",
            FieldKind::Timestamp,
            false,
            FilterOps::EQ_COMPARE,
            true,
        ),
        FieldSpec::new(
            "updated_at",
            FieldKind::Timestamp,
            false,
            FilterOps::EQ_COMPARE,
            true,
        ),
    ],
    echo_unset_filters: false,
    default_order: &["id"],
};

/// Fields of a taxonomy's entry list (addendum §4).
pub const ENTRY_LIST: ListSpec = ListSpec {
    table: "taxonomy_entries",
    fields: &[
        FieldSpec::new("id", FieldKind::Uuid, false, FilterOps::NONE, true),
        FieldSpec::new("parent_field", FieldKind::Text, false, FilterOps::EQ, true),
        FieldSpec::new("parent_value", FieldKind::Text, false, FilterOps::EQ, true),
        FieldSpec::new("child_field", FieldKind::Text, false, FilterOps::EQ, true),
        FieldSpec::new("child_value", FieldKind::Text, false, FilterOps::EQ, true),
        FieldSpec::new(
            "created_at",
            FieldKind::Timestamp,
            false,
            FilterOps::NONE,
            true,
        ),
    ],
    echo_unset_filters: false,
    default_order: &["id"],
};

/// Input of a taxonomy creation, already deserialized.
pub struct NewTaxonomy {
    pub name: String,
    pub description: Option<String>,
}

/// Input of a taxonomy change.
pub struct TaxonomyChange {
    pub name: Change<String>,
    pub description: Change<String>,
}

/// A link that was not added, with the taxonomy holding it.
#[derive(Debug, Clone, Serialize)]
pub struct SkippedEntry {
    pub parent_field: String,
    pub parent_value: String,
    pub child_field: String,
    pub child_value: String,
    /// The taxonomy holding the link (this one for a repeat or a duplicate in the request).
    pub taxonomy_id: Uuid,
}

/// Result of `POST /taxonomies/{taxonomy_id}/entries`, both lists in request order.
#[derive(Debug, Clone, Serialize)]
pub struct AddedEntries {
    /// Links stored by this request.
    pub added: Vec<EntryRow>,
    /// Links already stored (in this or another taxonomy), or repeated in the request.
    pub skipped: Vec<SkippedEntry>,
}

/// `Taxonomy not found` with the id.
pub fn not_found(id: Uuid) -> ApiError {
    ApiError::NotFound {
        message: "Taxonomy not found",
        id: Some(id),
    }
}

fn invalid_entry(reason: &str) -> ApiError {
    ApiError::InvalidParameter(format!("Invalid taxonomy entry: {reason}"))
}

/// Checks one link: identifier field names, non-empty values, parent different from child.
pub fn validate_link(link: &Link) -> ApiResult<()> {
    for (name, field) in [
        ("parent_field", &link.parent_field),
        ("child_field", &link.child_field),
    ] {
        if !is_identifier(field) {
            return Err(invalid_entry(&format!(
                "{name} {field:?} is not an identifier"
            )));
        }
    }
    for (name, value) in [
        ("parent_value", &link.parent_value),
        ("child_value", &link.child_value),
    ] {
        if value.is_empty() {
            return Err(invalid_entry(&format!("{name} is empty")));
        }
    }
    if link.parent_field == link.child_field && link.parent_value == link.child_value {
        return Err(invalid_entry(&format!(
            "parent and child are the same ({} = {:?})",
            link.parent_field, link.parent_value
        )));
    }
    Ok(())
}

/// Reads a taxonomy the caller can read; missing or unreadable are both 404.
pub async fn get_readable(pool: &Pool, auth: &AuthContext, id: Uuid) -> ApiResult<TaxonomyRow> {
    if !auth.can_read(ObjectType::Taxonomies, id) {
        return Err(not_found(id));
    }
    store::get(pool, id).await?.ok_or_else(|| not_found(id))
}

/// Requires `needed` on a taxonomy: 404 when missing or unreadable, 403 for another bit.
pub async fn require(
    pool: &Pool,
    auth: &AuthContext,
    id: Uuid,
    needed: AccessLevel,
) -> ApiResult<TaxonomyRow> {
    let row = get_readable(pool, auth, id).await?;
    auth.require_object(ObjectType::Taxonomies, id, needed)?;
    Ok(row)
}

/// One page of the taxonomies the caller can read: the list envelope.
pub async fn list(pool: &Pool, auth: &AuthContext, request: &ListRequest) -> ApiResult<Envelope> {
    let base = store::list_base(auth.readable_ids(ObjectType::Taxonomies));
    listing::list::<TaxonomyRow>(pool, &TAXONOMY_LIST, request, base).await
}

/// One page of the entries of a taxonomy the caller can read (404 otherwise): the list
/// envelope.
pub async fn list_entries(
    pool: &Pool,
    auth: &AuthContext,
    id: Uuid,
    request: &ListRequest,
) -> ApiResult<Envelope> {
    require(pool, auth, id, AccessLevel::READ).await?;
    let base = store::entry_list_base(id);
    listing::list::<EntryRow>(pool, &ENTRY_LIST, request, base).await
}

/// Creates a taxonomy: W on the type (403), the license, the name (400), uniqueness (409).
pub async fn create(
    pool: &Pool,
    license: &License,
    auth: &AuthContext,
    input: NewTaxonomy,
) -> ApiResult<TaxonomyRow> {
    auth.require_type(ObjectType::Taxonomies, AccessLevel::WRITE)?;
    check_license(license, pool, Some(ObjectType::Taxonomies)).await?;
    validate_name(&input.name)?;
    Ok(store::insert(
        pool,
        Uuid::new_v4(),
        &input.name,
        input.description.as_deref(),
    )
    .await?)
}

/// Changes a taxonomy's name or description.
pub async fn update(
    pool: &Pool,
    license: &License,
    auth: &AuthContext,
    id: Uuid,
    change: TaxonomyChange,
) -> ApiResult<TaxonomyRow> {
    let current = require(pool, auth, id, AccessLevel::WRITE).await?;
    check_license(license, pool, None).await?;
    let name = change.name.required(current.name);
    validate_name(&name)?;
    let description = change.description.nullable(current.description);
    store::update(pool, id, &name, description.as_deref())
        .await?
        .ok_or_else(|| not_found(id))
}

/// Deletes a taxonomy with its entries and the permission entries on it.
pub async fn delete(pool: &Pool, auth: &AuthContext, id: Uuid) -> ApiResult<()> {
    require(pool, auth, id, AccessLevel::WRITE).await?;
    if store::delete(pool, id).await? {
        Ok(())
    } else {
        Err(not_found(id))
    }
}

/// Adds links to a taxonomy: W (404/403), the license, then every link is validated before
/// anything is written. Links stored anywhere already, and repeats inside the request, are
/// skipped with the taxonomy holding them.
pub async fn add_entries(
    pool: &Pool,
    license: &License,
    auth: &AuthContext,
    id: Uuid,
    links: Vec<Link>,
) -> ApiResult<AddedEntries> {
    require(pool, auth, id, AccessLevel::WRITE).await?;
    check_license(license, pool, None).await?;
    for link in &links {
        validate_link(link)?;
    }
    let mut seen = HashSet::new();
    let distinct: Vec<Link> = links
        .iter()
        .filter(|link| seen.insert(*link))
        .cloned()
        .collect();
    let mut outcome = store::add_entries(pool, id, &distinct)
        .await?
        .ok_or_else(|| not_found(id))?;

    let mut added_rows: std::collections::HashMap<Link, EntryRow> = outcome
        .added
        .drain(..)
        .map(|row| (row.link(), row))
        .collect();
    let mut result = AddedEntries {
        added: Vec::new(),
        skipped: Vec::new(),
    };
    for link in links {
        if let Some(row) = added_rows.remove(&link) {
            result.added.push(row);
            continue;
        }
        // Added earlier in this request, or held already (by this or another taxonomy).
        let holder = outcome.held.get(&link).copied().unwrap_or(id);
        result.skipped.push(SkippedEntry {
            parent_field: link.parent_field,
            parent_value: link.parent_value,
            child_field: link.child_field,
            child_value: link.child_value,
            taxonomy_id: holder,
        });
    }
    Ok(result)
}

/// Removes links this taxonomy holds; links it does not hold are ignored.
pub async fn remove_entries(
    pool: &Pool,
    auth: &AuthContext,
    id: Uuid,
    links: Vec<Link>,
) -> ApiResult<()> {
    require(pool, auth, id, AccessLevel::WRITE).await?;
    store::remove_entries(pool, id, &links).await?;
    Ok(())
}
