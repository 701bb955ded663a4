//! Transport-free logic per resource; HTTP, MCP and the worker call these functions.

pub mod agents;
pub mod api_keys;
pub mod classifications;
pub mod contexts;
pub mod documents;
pub mod embedding_models;
pub mod filters;
pub mod llms;
pub mod pipelines;
pub mod search;
pub mod taxonomies;
pub mod text_splitters;
pub mod vector_embeddings;

/// The list envelope the list functions return: `data`, `page_info`, `query_info`.
pub use crate::store::listing::Envelope;

/// One field of a change (PATCH): omitted, `null`, or a value (addendum §1: omitted fields
/// keep their values; `null` clears a nullable field and counts as omitted for another).
#[derive(Debug, Clone, Default, PartialEq)]
pub enum Change<T> {
    #[default]
    Omitted,
    Null,
    Value(T),
}

impl<T> Change<T> {
    /// The value, when one was given.
    pub fn value(&self) -> Option<&T> {
        match self {
            Self::Value(value) => Some(value),
            Self::Omitted | Self::Null => None,
        }
    }

    /// The new state of a nullable field whose current state is `current`.
    pub fn nullable(self, current: Option<T>) -> Option<T> {
        match self {
            Self::Value(value) => Some(value),
            Self::Null => None,
            Self::Omitted => current,
        }
    }

    /// The change with its value transformed.
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Change<U> {
        match self {
            Self::Value(value) => Change::Value(f(value)),
            Self::Null => Change::Null,
            Self::Omitted => Change::Omitted,
        }
    }

    /// The new value of a field that cannot be null (`null` counts as omitted).
    pub fn required(self, current: T) -> T {
        match self {
            Self::Value(value) => value,
            Self::Omitted | Self::Null => current,
        }
    }
}

/// Validates a `name` field: 1–255 characters.
pub fn validate_name(name: &str) -> Result<(), crate::error::ApiError> {
    if crate::names::has_valid_length(name) {
        Ok(())
    } else {
        Err(crate::error::ApiError::InvalidParameter(
            "Invalid name".to_owned(),
        ))
    }
}
