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
    license.evaluate(counts, creating)
}
