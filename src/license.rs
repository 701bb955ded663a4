//! The license: an optional expiry and per-object-type count limits, read at start from the
//! file named by `TROVE_LICENSE`.

use std::collections::BTreeMap;
use std::path::Path;

use chrono::{DateTime, Utc};
use serde::Deserialize;

use crate::access::ObjectType;
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

    /// Checks the license before a create or change, given the current count of every
    /// limited type (`counts` yields them in the order of [`License::limits`]). `creating`
    /// names the type of an object this operation adds (`None` for changes).
    pub fn evaluate(
        &self,
        counts: impl IntoIterator<Item = i64>,
        creating: Option<ObjectType>,
    ) -> Result<(), ApiError> {
        self.evaluate_adding(counts, creating.map(|object_type| (object_type, 1)))
    }

    /// [`License::evaluate`] for an operation that adds `n` objects of one type at once.
    pub fn evaluate_adding(
        &self,
        counts: impl IntoIterator<Item = i64>,
        adding: Option<(ObjectType, u64)>,
    ) -> Result<(), ApiError> {
        if self.is_expired() {
            return Err(ApiError::LicenseExpired);
        }
        let mut exceeded = Vec::new();
        let mut created_count = None;
        for ((object_type, limit), count) in self.limits.iter().zip(counts) {
            if count > *limit {
                exceeded.push(*object_type);
            }
            if let Some((created, n)) = adding
                && created == *object_type
            {
                created_count = Some((count, n, *limit));
            }
        }
        if !exceeded.is_empty() {
            // `ObjectType`'s order is the alphabetical order of the keys.
            exceeded.sort();
            return Err(ApiError::LicenseExceeded(exceeded));
        }
        if let (Some((object_type, _)), Some((count, n, limit))) = (adding, created_count)
            && count.saturating_add(i64::try_from(n).unwrap_or(i64::MAX)) > limit
        {
            return Err(ApiError::LicenseLimit(object_type));
        }
        Ok(())
    }

    /// Whether the expiry has passed.
    pub fn is_expired(&self) -> bool {
        self.expires_at
            .is_some_and(|expires_at| expires_at <= Utc::now())
    }
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "tests fail loudly")]
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
