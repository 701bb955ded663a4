//! Text splitting, in this process or through the sidecar.

use trove_text::{SplitterConfig, TokenizerKind};

use super::local_embedding::LocalModels;
use crate::providers::sidecar_client::SidecarClient;

/// Where texts are split.
#[derive(Clone)]
pub enum TextSplitting {
    /// In this process, on the blocking pool; `token` splitters with the `embedding-model`
    /// tokenizer use the tokenizers of these models.
    InProcess(LocalModels),
    /// Through `trove sidecar`.
    Sidecar(SidecarClient),
}

impl std::fmt::Debug for TextSplitting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::InProcess(_) => f.write_str("InProcess"),
            Self::Sidecar(_) => f.write_str("Sidecar"),
        }
    }
}

/// Whether a configuration splits with a model's tokenizer.
pub fn uses_model_tokenizer(config: &SplitterConfig) -> bool {
    matches!(
        config,
        SplitterConfig::Token {
            tokenizer: TokenizerKind::EmbeddingModel,
            ..
        }
    )
}

impl TextSplitting {
    /// Splits each text; one fragment list per text, in order. `local_model` names the
    /// pipeline's `local` embedding model, whose tokenizer a `token` splitter with the
    /// `embedding-model` tokenizer uses (whitespace tokens without one).
    pub async fn split_all(
        &self,
        config: &SplitterConfig,
        texts: Vec<String>,
        local_model: Option<&str>,
    ) -> Result<Vec<Vec<String>>, String> {
        let local_model = local_model.filter(|_| uses_model_tokenizer(config));
        match self {
            Self::InProcess(models) => {
                let tokenizer = match local_model {
                    Some(name) => Some(models.get(name).await.map_err(|e| e.to_string())?),
                    None => None,
                };
                let config = config.clone();
                tokio::task::spawn_blocking(move || match tokenizer {
                    Some(model) => {
                        let tokenize = |t: &str| model.token_spans(t);
                        texts
                            .iter()
                            .map(|t| trove_text::split_with_tokenizer(&config, t, &tokenize))
                            .collect()
                    }
                    None => texts
                        .iter()
                        .map(|t| trove_text::split(&config, t))
                        .collect(),
                })
                .await
                .map_err(|e| e.to_string())
            }
            Self::Sidecar(client) => client
                .split(
                    config.provider(),
                    &config.to_parameters(),
                    texts,
                    local_model,
                )
                .await
                .map_err(|status| format!("gRPC error: {status}")),
        }
    }
}
