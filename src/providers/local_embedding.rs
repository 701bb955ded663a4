//! The `local` embedding provider: transformer models from `TROVE_MODELS_DIR`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::embedding::EmbedFailure;

/// A loaded local model.
pub struct LocalEmbedder;

impl LocalEmbedder {
    pub async fn embed(&self, _texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedFailure> {
        Err(EmbedFailure::Compute(
            "the local provider is not available in this build".to_owned(),
        ))
    }
}

/// Local models loaded by this process.
#[derive(Clone, Default)]
pub struct LocalModels {
    #[allow(dead_code, reason = "used by the provider implementation")]
    models_dir: Option<PathBuf>,
}

impl LocalModels {
    pub fn new(models_dir: Option<PathBuf>) -> Self {
        Self { models_dir }
    }

    pub async fn get(&self, model_name: &str) -> Result<Arc<LocalEmbedder>, EmbedFailure> {
        Err(EmbedFailure::Load(format!(
            "local model {model_name} is not available in this build"
        )))
    }
}

/// The dimensions of all-MiniLM-L6-v2 when it loads from `models_dir`.
pub fn probe_default(_models_dir: Option<&Path>) -> Option<i32> {
    None
}
