//! The `openai` embedding provider: any OpenAI-compatible `/v1/embeddings` server.

use super::embedding::{EmbedFailure, ModelSpec};

/// An OpenAI-compatible embeddings client.
pub struct OpenAiEmbedder {
    #[allow(dead_code, reason = "used by the provider implementation")]
    client: reqwest::Client,
}

impl OpenAiEmbedder {
    pub fn new(client: reqwest::Client, _spec: &ModelSpec) -> Result<Self, EmbedFailure> {
        Ok(Self { client })
    }

    pub async fn embed(&self, _texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedFailure> {
        Err(EmbedFailure::Compute(
            "the openai provider is not available in this build".to_owned(),
        ))
    }
}
