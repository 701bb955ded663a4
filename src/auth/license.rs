//! The license: an optional expiry and per-object-type count limits, read at start from the
//! file named by `TROVE_LICENSE`.

use std::collections::BTreeMap;
use std::path::Path;

use chrono::{DateTime, Utc};
use serde::Deserialize;
use sqlx::PgPool;

use super::ObjectType;
use crate::error::ApiError;

/// The object types whose counts a license can limit.
pub const COUNTED_TYPES: [ObjectType; 8] = [
    ObjectType::Agents,
    ObjectType::ApiKeys,
    ObjectType::Documents,
    ObjectType::EmbeddingModels,
    ObjectType::Llms,
    ObjectType::Pipelines,
    ObjectType::Taxonomies,
    ObjectType::TextSplitters,
];

/// A loaded license.
#[derive(Debug, Clone, Default)]
pub struct License {
    pub expires_at: Option<DateTime<Utc>>,
    pub limits: BTreeMap<ObjectType, i64>,
}

#[derive(Deserialize)]
struct LicenseFile {
    #[serde(default)]
    expires_at: Option<DateTime<Utc>>,
    #[serde(default)]
    limits: BTreeMap<String, i64>,
}

impl License {
    /// No expiry and no limits (no `TROVE_LICENSE`).
    pub fn unlimited() -> Self {
        Self::default()
    }

    /// Reads and parses a license file; unknown keys are ignored.
    pub fn from_file(path: &Path) -> Result<Self, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        Self::from_json(&text)
    }

    /// Parses the license document.
    pub fn from_json(text: &str) -> Result<Self, String> {
        let file: LicenseFile =
            serde_json::from_str(text).map_err(|e| format!("invalid license: {e}"))?;
        let mut limits = BTreeMap::new();
        for (key, limit) in file.limits {
            // Unknown object types are ignored, like unknown keys.
            if let Ok(object_type) = ObjectType::parse(&key) {
                limits.insert(object_type, limit);
            }
        }
        Ok(Self {
            expires_at: file.expires_at,
            limits,
        })
    }

    /// Checks the license before a create or change. `creating` names the type of an object
    /// this operation adds (`None` for changes), `adds` whether it really adds one (a new
    /// document version of an existing document adds none).
    pub async fn check(&self, pool: &PgPool, creating: Option<ObjectType>) -> Result<(), ApiError> {
        if let Some(expires_at) = self.expires_at
            && expires_at <= Utc::now()
        {
            return Err(ApiError::LicenseExpired);
        }
        if self.limits.is_empty() {
            return Ok(());
        }
        let mut exceeded = Vec::new();
        let mut created_count = None;
        for (object_type, limit) in &self.limits {
            let count = count_objects(pool, *object_type).await?;
            if count > *limit {
                exceeded.push(*object_type);
            }
            if Some(*object_type) == creating {
                created_count = Some((count, *limit));
            }
        }
        if !exceeded.is_empty() {
            // `ObjectType`'s order is the alphabetical order of the keys.
            exceeded.sort();
            return Err(ApiError::LicenseExceeded(exceeded));
        }
        if let (Some(object_type), Some((count, limit))) = (creating, created_count)
            && count + 1 > limit
        {
            return Err(ApiError::LicenseLimit(object_type));
        }
        Ok(())
    }
}

/// How many objects of a type exist (seeded objects count). Types whose storage does not
/// exist in this release count 0.
async fn count_objects(pool: &PgPool, object_type: ObjectType) -> Result<i64, ApiError> {
    let Some(sql) = counted_table(object_type) else {
        return Ok(0);
    };
    let count: i64 = sqlx::query_scalar(sql).fetch_one(pool).await?;
    Ok(count)
}

/// The count statement of a type, for the types stored in this release.
fn counted_table(object_type: ObjectType) -> Option<&'static str> {
    match object_type {
        ObjectType::ApiKeys => Some("SELECT count(*) FROM api_keys"),
        ObjectType::Documents => Some("SELECT count(DISTINCT id) FROM documents"),
        ObjectType::EmbeddingModels => Some("SELECT count(*) FROM embedding_models"),
        ObjectType::Pipelines => Some("SELECT count(*) FROM pipelines"),
        ObjectType::TextSplitters => Some("SELECT count(*) FROM text_splitters"),
        ObjectType::Taxonomies => Some("SELECT count(*) FROM taxonomies"),
        _ => None,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_ignores_unknown_keys() {
        let l = License::from_json(
            r#"{"expires_at": null, "limits": {"api-keys": 3, "widgets": 1}, "customer": "x"}"#,
        )
        .unwrap();
        assert_eq!(l.limits.get(&ObjectType::ApiKeys), Some(&3));
        assert_eq!(l.limits.len(), 1);
        assert!(l.expires_at.is_none());
        assert!(License::from_json("{").is_err());
    }
}
