//! Embedders: the `hash`, `openai` and `local` providers behind one enum.
//!
//! An [`Embedder`] is built from a stored embedding model (provider, model name, parameters
//! with secrets decrypted) and embeds batches of texts. Building one is cheap for `hash` and
//! `openai`; `local` models are loaded once and shared (see [`EmbedderCache`]).

use std::sync::Arc;

use serde_json::{Map, Value};

use super::hash_embedding::hash_embedding;
use crate::config::Config;
use crate::crypto::at_rest::Cipher;
use crate::error::ApiError;
use crate::store::embedding::StoredModel;
use crate::store::install::DefaultEmbedding;

/// The provider of an embedding model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProviderKind {
    Local,
    OpenAi,
    Hash,
}

impl ProviderKind {
    /// Parses a provider name; unknown names are `None` (`Unknown provider type: <provider>`).
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "local" => Some(Self::Local),
            "openai" => Some(Self::OpenAi),
            "hash" => Some(Self::Hash),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Local => "local",
            Self::OpenAi => "openai",
            Self::Hash => "hash",
        }
    }
}

/// What an embedder needs of a stored model.
#[derive(Debug, Clone)]
pub struct ModelSpec {
    pub provider: ProviderKind,
    pub model_name: String,
    /// All parameters, secrets decrypted.
    pub parameters: Value,
    /// The stored size (after creation); `None` while probing at creation.
    pub dimensions: Option<usize>,
}

/// Why embedding failed; the service reports `Internal error` with
/// `details.error` = `Failed computing embeddings: <reason>` (or the variant's own text).
#[derive(Debug, Clone, thiserror::Error)]
pub enum EmbedFailure {
    #[error("Failed computing embeddings: {0}")]
    Compute(String),
    /// The model server refused the request for what it holds (an answer of 4xx other than
    /// 429, such as an input longer than the model reads): sending it again cannot succeed.
    #[error("Failed computing embeddings: {0}")]
    Refused(String),
    #[error("Received empty embedding vector")]
    Empty,
    #[error("Failed loading embedding model: {0}")]
    Load(String),
    #[error("gRPC error: {0}")]
    Grpc(String),
}

/// A ready embedder.
#[derive(Clone)]
pub enum Embedder {
    Hash {
        dimensions: usize,
    },
    /// Filled in by the OpenAI-compatible provider.
    OpenAi(Arc<super::openai_embedding::OpenAiEmbedder>),
    /// Filled in by the local provider.
    Local(Arc<super::local_embedding::LocalEmbedder>),
    /// A local model served by `trove sidecar`.
    Sidecar {
        client: crate::providers::sidecar_client::SidecarClient,
        model_name: String,
    },
}

impl Embedder {
    /// Embeds texts, one vector per text, in order.
    pub async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedFailure> {
        let vectors = match self {
            Self::Hash { dimensions } => texts
                .iter()
                .map(|t| hash_embedding(t, *dimensions))
                .collect(),
            Self::OpenAi(embedder) => embedder.embed(texts).await?,
            Self::Local(embedder) => embedder.embed(texts).await?,
            Self::Sidecar { client, model_name } => client
                .embed(model_name, texts.to_vec())
                .await
                .map_err(|status| EmbedFailure::Grpc(status.to_string()))?,
        };
        if vectors.iter().any(|v: &Vec<f32>| v.is_empty()) {
            return Err(EmbedFailure::Empty);
        }
        Ok(vectors)
    }
}

/// Builds and keeps embedders (local models are loaded once per process).
#[derive(Clone, Default)]
pub struct EmbedderCache {
    local: super::local_embedding::LocalModels,
    http: reqwest::Client,
    /// Local models run in the sidecar when it is configured.
    sidecar: Option<crate::providers::sidecar_client::SidecarClient>,
}

impl EmbedderCache {
    pub fn new(
        config: &Config,
        sidecar: Option<crate::providers::sidecar_client::SidecarClient>,
    ) -> Self {
        Self {
            local: super::local_embedding::LocalModels::new(
                config.models_dir.clone(),
                config.embed_threads,
            ),
            http: reqwest::Client::new(),
            sidecar,
        }
    }

    /// The local models of this process (shared with in-process splitting).
    pub fn local_models(&self) -> &super::local_embedding::LocalModels {
        &self.local
    }

    /// The embedder of a model.
    pub async fn embedder(&self, spec: &ModelSpec) -> Result<Embedder, EmbedFailure> {
        match spec.provider {
            ProviderKind::Hash => {
                let dimensions = spec
                    .parameters
                    .get("dimensions")
                    .and_then(Value::as_u64)
                    .and_then(|d| usize::try_from(d).ok())
                    .unwrap_or(384);
                Ok(Embedder::Hash { dimensions })
            }
            ProviderKind::OpenAi => Ok(Embedder::OpenAi(Arc::new(
                super::openai_embedding::OpenAiEmbedder::new(self.http.clone(), spec)?,
            ))),
            ProviderKind::Local => match &self.sidecar {
                Some(client) => Ok(Embedder::Sidecar {
                    client: client.clone(),
                    model_name: spec.model_name.clone(),
                }),
                None => Ok(Embedder::Local(self.local.get(&spec.model_name).await?)),
            },
        }
    }
}

/// Which `default` embedding model installation seeds: local all-MiniLM-L6-v2 when it loads
/// from `TROVE_MODELS_DIR`, else the hash embedder.
pub async fn default_embedding_at_install(config: &Config) -> DefaultEmbedding {
    let models =
        super::local_embedding::LocalModels::new(config.models_dir.clone(), config.embed_threads);
    match models.probe_default().await {
        Some(dimensions) => DefaultEmbedding::Local { dimensions },
        None => DefaultEmbedding::Hash,
    }
}

/// What an embedder needs of a stored model, secrets decrypted.
pub fn model_spec(cipher: &Cipher, stored: &StoredModel) -> Result<ModelSpec, ApiError> {
    let provider = ProviderKind::parse(&stored.row.provider).ok_or_else(|| {
        ApiError::Internal(format!("Unknown provider type: {}", stored.row.provider))
    })?;
    Ok(ModelSpec {
        provider,
        model_name: stored.row.model_name.clone(),
        parameters: Value::Object(all_parameters(cipher, stored)?),
        dimensions: usize::try_from(stored.row.dimensions).ok(),
    })
}

/// The stored model's parameters with its secret ones decrypted and merged in.
fn all_parameters(cipher: &Cipher, stored: &StoredModel) -> Result<Map<String, Value>, ApiError> {
    let mut parameters = match &stored.row.parameters {
        Value::Object(map) => map.clone(),
        _ => Map::new(),
    };
    if let Some(encrypted) = &stored.secret_parameters {
        let text = cipher
            .decrypt_text(encrypted)
            .map_err(|_| ApiError::Decryption)?;
        match serde_json::from_str::<Value>(&text) {
            Ok(Value::Object(secret)) => parameters.extend(secret),
            _ => return Err(ApiError::Decryption),
        }
    }
    Ok(parameters)
}
