//! Transport-free logic per resource; HTTP, MCP and the worker call these functions.

pub mod agents;
pub mod api_keys;
pub mod classifications;
pub mod documents;
pub mod embedding_models;
pub mod filters;
pub mod llms;
pub mod pipelines;
pub mod search;
pub mod taxonomies;
pub mod text_splitters;

/// The list envelope the list functions return: `data`, `page_info`, `query_info`.
pub use crate::store::listing::Envelope;

/// Validates a `name` field: 1–255 characters.
pub fn validate_name(name: &str) -> Result<(), crate::error::ApiError> {
    let len = name.chars().count();
    if (1..=255).contains(&len) {
        Ok(())
    } else {
        Err(crate::error::ApiError::InvalidParameter(
            "Invalid name".to_owned(),
        ))
    }
}
