//! The `local` embedding provider: transformer models from `TROVE_MODELS_DIR`.
//!
//! Models are loaded once per process (on the blocking pool, since reading and converting
//! the weights takes a moment) and shared; every embedding call runs on the blocking pool
//! too, so the async runtime never stalls on a forward pass.

use std::collections::HashMap;
use std::ops::Range;
use std::path::PathBuf;
use std::sync::{Arc, LazyLock};

use tokio::sync::Mutex;
use trove_embed::{EmbedError, LocalModel};

use super::embedding::EmbedFailure;

/// The model installation seeds as `default` when it loads.
pub const DEFAULT_MODEL: &str = "all-MiniLM-L6-v2";

/// A loaded local model.
pub struct LocalEmbedder {
    model: Arc<LocalModel>,
}

impl LocalEmbedder {
    /// Embeds texts on the blocking pool; one vector per text, in order.
    pub async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedFailure> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        let model = Arc::clone(&self.model);
        let texts = texts.to_vec();
        tokio::task::spawn_blocking(move || {
            let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
            model.embed(&refs)
        })
        .await
        .map_err(|e| EmbedFailure::Compute(e.to_string()))?
        .map_err(|e| EmbedFailure::Compute(e.to_string()))
    }

    /// Token byte spans of `text` with the model's tokenizer (for the `token` splitter's
    /// `embedding-model` tokenizer). CPU work: call it from a blocking thread.
    pub fn token_spans(&self, text: &str) -> Vec<Range<usize>> {
        self.model.token_spans(text)
    }

    /// Size of the embeddings.
    pub fn dimensions(&self) -> usize {
        self.model.dimensions()
    }
}

/// Every model this process loaded, by folder root, canonical name and thread count: each
/// is loaded once and kept for the life of the process (several applications in one process
/// share them).
type LoadedModels = HashMap<(PathBuf, &'static str, usize), Arc<LocalEmbedder>>;
static LOADED: LazyLock<Mutex<LoadedModels>> = LazyLock::new(Mutex::default);

/// Local models from one models folder.
#[derive(Clone, Default)]
pub struct LocalModels {
    models_dir: Option<PathBuf>,
    threads: usize,
}

impl LocalModels {
    /// Models from `models_dir`, each computing on `threads` threads (0: one per core).
    pub fn new(models_dir: Option<PathBuf>, threads: usize) -> Self {
        Self {
            models_dir,
            threads,
        }
    }

    /// The loaded model `model_name` (a FastEmbed name, with or without organisation,
    /// any case), loading it on first use. Concurrent first uses load it once.
    pub async fn get(&self, model_name: &str) -> Result<Arc<LocalEmbedder>, EmbedFailure> {
        let canonical = trove_embed::canonical_model_name(model_name)
            .ok_or_else(|| EmbedFailure::Load(format!("unknown model {model_name}")))?;
        let Some(dir) = self.models_dir.clone() else {
            return Err(EmbedFailure::Load(
                "TROVE_MODELS_DIR is not set: no local models are available".to_owned(),
            ));
        };
        let key = (dir.clone(), canonical, self.threads);
        let mut loaded = LOADED.lock().await;
        if let Some(embedder) = loaded.get(&key) {
            return Ok(Arc::clone(embedder));
        }
        let threads = self.threads;
        let model = tokio::task::spawn_blocking(move || LocalModel::load(&dir, canonical, threads))
            .await
            .map_err(|e| EmbedFailure::Load(e.to_string()))?
            .map_err(|e| match e {
                EmbedError::UnknownModel(name) => {
                    EmbedFailure::Load(format!("unknown model {name}"))
                }
                EmbedError::Load(reason) | EmbedError::Compute(reason) => {
                    EmbedFailure::Load(reason)
                }
            })?;
        tracing::info!(
            model = canonical,
            dimensions = model.dimensions(),
            "local embedding model loaded"
        );
        let embedder = Arc::new(LocalEmbedder {
            model: Arc::new(model),
        });
        loaded.insert(key, Arc::clone(&embedder));
        Ok(embedder)
    }

    /// The dimensions of all-MiniLM-L6-v2 when it loads and embeds a probe sentence;
    /// `None` (with a log line saying why) otherwise.
    pub async fn probe_default(&self) -> Option<i32> {
        let dir = self.models_dir.as_ref()?;
        let outcome = match self.get(DEFAULT_MODEL).await {
            Ok(model) => model.embed(&["Trove".to_owned()]).await,
            Err(e) => Err(e),
        };
        match outcome {
            Ok(vectors) => vectors
                .first()
                .map(Vec::len)
                .filter(|n| *n > 0)
                .and_then(|n| i32::try_from(n).ok()),
            Err(e) => {
                tracing::warn!(reason = %e, models_dir = %dir.display(), "local {DEFAULT_MODEL} did not load; the default embedding model uses the hash provider");
                None
            }
        }
    }
}
