//! The license check before creates and changes: the counts of the limited types, read from
//! the store, against the license's limits.

use crate::access::ObjectType;
use crate::error::ApiError;
use crate::license::License;
use crate::store;

/// Checks `license` before a create or change; `creating` names the type of an object this
/// operation adds (`None` for changes). Counts are read only when the license has limits.
pub async fn check_license(
    license: &License,
    pool: &store::Pool,
    creating: Option<ObjectType>,
) -> Result<(), ApiError> {
    check_license_adding(license, pool, creating.map(|object_type| (object_type, 1))).await
}

/// [`check_license`] for a create that adds `count` objects of one type at once (a batch of
/// document submissions).
pub async fn check_license_for(
    license: &License,
    pool: &store::Pool,
    object_type: ObjectType,
    count: usize,
) -> Result<(), ApiError> {
    let count = u64::try_from(count).unwrap_or(u64::MAX);
    check_license_adding(license, pool, Some((object_type, count))).await
}

async fn check_license_adding(
    license: &License,
    pool: &store::Pool,
    adding: Option<(ObjectType, u64)>,
) -> Result<(), ApiError> {
    if license.is_expired() {
        return Err(ApiError::LicenseExpired);
    }
    if license.limits.is_empty() {
        return Ok(());
    }
    let mut counts = Vec::with_capacity(license.limits.len());
    for object_type in license.limits.keys() {
        counts.push(store::license::count_objects(pool, *object_type).await?);
    }
    license.evaluate_adding(counts, adding)
}
