//! Authorization vocabulary: access levels, object types, the authenticated key and its
//! permission entries, and the license.

pub mod key_check;
pub mod license;

use std::fmt;

use serde_json::{Value, json};
use uuid::Uuid;

use crate::error::ApiError;

/// The all-zero object id that marks a permission entry on a whole object type.
pub const TYPE_ENTRY_ID: Uuid = Uuid::nil();

/// A set of permission bits: read 4, write 2, execute 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AccessLevel(u8);

impl AccessLevel {
    pub const NONE: Self = Self(0);
    pub const READ: Self = Self(4);
    pub const WRITE: Self = Self(2);
    pub const EXECUTE: Self = Self(1);
    pub const ALL: Self = Self(7);

    /// The level from an integer 0..=7; other values are refused.
    pub fn from_bits(bits: i64) -> Option<Self> {
        u8::try_from(bits).ok().filter(|b| *b <= 7).map(Self)
    }

    pub fn bits(self) -> u8 {
        self.0
    }

    /// Whether every bit of `needed` is held.
    pub fn contains(self, needed: AccessLevel) -> bool {
        self.0 & needed.0 == needed.0
    }

    /// The bits of `needed` that are not held.
    pub fn missing(self, needed: AccessLevel) -> AccessLevel {
        AccessLevel(needed.0 & !self.0)
    }

    pub fn union(self, other: AccessLevel) -> AccessLevel {
        AccessLevel(self.0 | other.0)
    }
}

impl fmt::Display for AccessLevel {
    /// The interface's form: `AccessLevel(READ | EXECUTE)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = [(4, "READ"), (2, "WRITE"), (1, "EXECUTE")]
            .iter()
            .filter(|(bit, _)| self.0 & bit != 0)
            .map(|(_, name)| *name)
            .collect();
        if names.is_empty() {
            write!(f, "AccessLevel(0x0)")
        } else {
            write!(f, "AccessLevel({})", names.join(" | "))
        }
    }
}

/// The object types permissions are held on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ObjectType {
    Agents,
    ApiKeys,
    ContextMessages,
    Contexts,
    Documents,
    EmbeddingModels,
    EmbeddingProviders,
    Llms,
    Permissions,
    Pipelines,
    Taxonomies,
    TextSplitterProviders,
    TextSplitters,
}

impl ObjectType {
    /// Every object type, in alphabetical order of their keys.
    pub const ALL: [ObjectType; 13] = [
        Self::Agents,
        Self::ApiKeys,
        Self::ContextMessages,
        Self::Contexts,
        Self::Documents,
        Self::EmbeddingModels,
        Self::EmbeddingProviders,
        Self::Llms,
        Self::Permissions,
        Self::Pipelines,
        Self::Taxonomies,
        Self::TextSplitterProviders,
        Self::TextSplitters,
    ];

    /// The key used in permission objects and messages (`api-keys`).
    pub fn key(self) -> &'static str {
        match self {
            Self::Agents => "agents",
            Self::ApiKeys => "api-keys",
            Self::ContextMessages => "context-messages",
            Self::Contexts => "contexts",
            Self::Documents => "documents",
            Self::EmbeddingModels => "embedding-models",
            Self::EmbeddingProviders => "embedding-providers",
            Self::Llms => "llms",
            Self::Permissions => "permissions",
            Self::Pipelines => "pipelines",
            Self::Taxonomies => "taxonomies",
            Self::TextSplitterProviders => "text-splitter-providers",
            Self::TextSplitters => "text-splitters",
        }
    }

    /// Parses a key; unknown keys are `Invalid object type`.
    pub fn parse(key: &str) -> Result<Self, ApiError> {
        Self::ALL
            .into_iter()
            .find(|t| t.key() == key)
            .ok_or(ApiError::InvalidObjectType)
    }

    /// The display name of long-form 404s and license messages (`Api Key`).
    pub fn display_name(self) -> &'static str {
        match self {
            Self::Agents => "Agent",
            Self::ApiKeys => "Api Key",
            Self::ContextMessages => "Context Message",
            Self::Contexts => "Context",
            Self::Documents => "Document",
            Self::EmbeddingModels => "Embedding Model",
            Self::EmbeddingProviders => "Embedding Provider",
            Self::Llms => "LLM",
            Self::Permissions => "Permission",
            Self::Pipelines => "Pipeline",
            Self::Taxonomies => "Taxonomy",
            Self::TextSplitterProviders => "Text Splitter Provider",
            Self::TextSplitters => "Text Splitter",
        }
    }
}

/// One permission entry of a key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PermissionEntry {
    pub object_type: ObjectType,
    pub object_id: Uuid,
    pub level: AccessLevel,
    /// Classification allow-list (`pipelines` entries only; `*` permits all).
    pub classifications: Vec<String>,
}

/// The key that made the request, with all its permission entries, read from the database
/// on this request (no cache, so deactivation takes effect immediately on every replica).
#[derive(Debug, Clone)]
pub struct AuthContext {
    pub key_id: Uuid,
    pub name: String,
    pub description: Option<String>,
    pub is_master: bool,
    pub entries: Vec<PermissionEntry>,
}

impl AuthContext {
    /// The level held on a whole object type.
    pub fn type_level(&self, object_type: ObjectType) -> AccessLevel {
        self.entries
            .iter()
            .filter(|e| e.object_type == object_type && e.object_id == TYPE_ENTRY_ID)
            .fold(AccessLevel::NONE, |acc, e| acc.union(e.level))
    }

    /// The level held on one object: the type entry combined with the object's own entry.
    pub fn object_level(&self, object_type: ObjectType, object_id: Uuid) -> AccessLevel {
        self.entries
            .iter()
            .filter(|e| {
                e.object_type == object_type
                    && (e.object_id == TYPE_ENTRY_ID || e.object_id == object_id)
            })
            .fold(AccessLevel::NONE, |acc, e| acc.union(e.level))
    }

    /// The classification allow-list on a pipeline (or on the type when `pipeline` is
    /// `None`): the union of the type entry's and the object entry's lists.
    pub fn allow_list(&self, pipeline: Option<Uuid>) -> Vec<String> {
        let mut list: Vec<String> = self
            .entries
            .iter()
            .filter(|e| {
                e.object_type == ObjectType::Pipelines
                    && (e.object_id == TYPE_ENTRY_ID || Some(e.object_id) == pipeline)
            })
            .flat_map(|e| e.classifications.iter().cloned())
            .collect();
        list.sort();
        list.dedup();
        list
    }

    /// Whether the allow-list permits every classification (`*`).
    pub fn allows_all_classifications(&self, pipeline: Option<Uuid>) -> bool {
        self.allow_list(pipeline).iter().any(|c| c == "*")
    }

    /// Requires `needed` on the whole type (creates): else 403 with id `None`.
    pub fn require_type(
        &self,
        object_type: ObjectType,
        needed: AccessLevel,
    ) -> Result<(), ApiError> {
        let held = self.type_level(object_type);
        if held.contains(needed) {
            Ok(())
        } else {
            Err(ApiError::AccessDenied {
                level: needed,
                object_type,
                id: None,
            })
        }
    }

    /// Requires `needed` on one object that the key can already read: else 403 `Some(id)`.
    pub fn require_object(
        &self,
        object_type: ObjectType,
        id: Uuid,
        needed: AccessLevel,
    ) -> Result<(), ApiError> {
        let held = self.object_level(object_type, id);
        if held.contains(needed) {
            Ok(())
        } else {
            Err(ApiError::AccessDenied {
                level: needed,
                object_type,
                id: Some(id),
            })
        }
    }

    /// Whether the key can read the object (lack of read is reported as "not found").
    pub fn can_read(&self, object_type: ObjectType, id: Uuid) -> bool {
        self.object_level(object_type, id)
            .contains(AccessLevel::READ)
    }

    /// The ids of objects of a type on which the key holds `needed` through object entries
    /// (lists add these to what the type entry grants).
    pub fn object_ids_with(&self, object_type: ObjectType, needed: AccessLevel) -> Vec<Uuid> {
        self.entries
            .iter()
            .filter(|e| {
                e.object_type == object_type
                    && e.object_id != TYPE_ENTRY_ID
                    && e.level.contains(needed)
            })
            .map(|e| e.object_id)
            .collect()
    }

    /// What a list of this type may show: `None` for every object (read on the type), else
    /// the ids readable through object entries.
    pub fn readable_ids(&self, object_type: ObjectType) -> Option<Vec<Uuid>> {
        if self.type_level(object_type).contains(AccessLevel::READ) {
            None
        } else {
            Some(self.object_ids_with(object_type, AccessLevel::READ))
        }
    }

    /// The `{access_level, classifications}` object of every type (`POST /login`,
    /// `GET /permissions`).
    pub fn type_permissions_json(&self) -> Value {
        let mut map = serde_json::Map::new();
        for object_type in ObjectType::ALL {
            let classifications = if object_type == ObjectType::Pipelines {
                self.allow_list(None)
            } else {
                Vec::new()
            };
            map.insert(
                object_type.key().to_owned(),
                json!({
                    "access_level": self.type_level(object_type).bits(),
                    "classifications": classifications,
                }),
            );
        }
        Value::Object(map)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn access_level_display_matches_the_interface() {
        assert_eq!(AccessLevel::READ.to_string(), "AccessLevel(READ)");
        assert_eq!(AccessLevel(5).to_string(), "AccessLevel(READ | EXECUTE)");
        assert_eq!(
            AccessLevel(7).to_string(),
            "AccessLevel(READ | WRITE | EXECUTE)"
        );
    }

    #[test]
    fn object_types_round_trip() {
        for t in ObjectType::ALL {
            assert_eq!(ObjectType::parse(t.key()).ok(), Some(t));
        }
        assert!(ObjectType::parse("widgets").is_err());
    }
}
