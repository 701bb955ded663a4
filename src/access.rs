//! The access vocabulary: permission bits, object types and permission entries. A leaf:
//! error kinds, the store and the key check all speak it, and it imports none of them.

use std::fmt;

use uuid::Uuid;

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

    pub const fn union(self, other: AccessLevel) -> AccessLevel {
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

    /// Parses a key.
    pub fn parse(key: &str) -> Result<Self, UnknownObjectType> {
        Self::ALL
            .into_iter()
            .find(|t| t.key() == key)
            .ok_or(UnknownObjectType)
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

/// A key that names no object type (rendered as 400 `Invalid object type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("unknown object type")]
pub struct UnknownObjectType;

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
