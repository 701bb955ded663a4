//! Operations of the `Embeddings` group.

use poem_openapi::OpenApi;

use super::ApiTags;

pub struct EmbeddingApi;

#[OpenApi(tag = "ApiTags::Embeddings")]
impl EmbeddingApi {}
