//! Local (offline) sentence embeddings for Trove's `local` embedding provider.
//!
//! [`LocalModel::load`] resolves a FastEmbed text-embedding model name to a folder under
//! `TROVE_MODELS_DIR` (spec addendum §9.3) holding a Hugging Face BERT encoder
//! (`config.json`, `tokenizer.json`, `model.safetensors`), and [`LocalModel::embed`]
//! computes mean-pooled, L2-normalised sentence embeddings with the same numbers as
//! sentence-transformers (cosine ≥ 0.9999, in practice ~1 − 1e-7).
//!
//! The forward pass is hand-written over `gemm`'s matrix products (AVX-512/AVX2 kernels
//! chosen at run time) with packed, unpadded sequences; see `bert.rs`.

mod bert;
mod kernels;
mod matmul;

use std::ops::Range;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use tokenizers::{Tokenizer, TruncationDirection, TruncationParams, TruncationStrategy};

/// The FastEmbed text-embedding model names (Qdrant's fastembed and fastembed-rs),
/// with their organisation prefix. [`LocalModel::load`] accepts these names with or
/// without the prefix, in any case.
pub const FASTEMBED_MODELS: &[&str] = &[
    "BAAI/bge-small-en",
    "BAAI/bge-base-en",
    "BAAI/bge-small-en-v1.5",
    "BAAI/bge-base-en-v1.5",
    "BAAI/bge-large-en-v1.5",
    "BAAI/bge-small-zh-v1.5",
    "BAAI/bge-large-zh-v1.5",
    "BAAI/bge-m3",
    "sentence-transformers/all-MiniLM-L6-v2",
    "sentence-transformers/all-MiniLM-L12-v2",
    "sentence-transformers/all-mpnet-base-v2",
    "sentence-transformers/paraphrase-multilingual-MiniLM-L12-v2",
    "sentence-transformers/paraphrase-multilingual-mpnet-base-v2",
    "nomic-ai/nomic-embed-text-v1",
    "nomic-ai/nomic-embed-text-v1.5",
    "intfloat/multilingual-e5-small",
    "intfloat/multilingual-e5-base",
    "intfloat/multilingual-e5-large",
    "mixedbread-ai/mxbai-embed-large-v1",
    "Alibaba-NLP/gte-base-en-v1.5",
    "Alibaba-NLP/gte-large-en-v1.5",
    "thenlper/gte-base",
    "thenlper/gte-large",
    "lightonai/modernbert-embed-large",
    "jinaai/jina-embeddings-v2-small-en",
    "jinaai/jina-embeddings-v2-base-en",
    "jinaai/jina-embeddings-v2-base-de",
    "jinaai/jina-embeddings-v2-base-code",
    "jinaai/jina-embeddings-v2-base-zh",
    "jinaai/jina-embeddings-v2-base-es",
    "snowflake/snowflake-arctic-embed-xs",
    "snowflake/snowflake-arctic-embed-s",
    "snowflake/snowflake-arctic-embed-m",
    "snowflake/snowflake-arctic-embed-m-long",
    "snowflake/snowflake-arctic-embed-l",
    "Qdrant/clip-ViT-B-32-text",
    "google/embeddinggemma-300m",
];

/// Errors of this crate. `Display` is the reason text only; the service wraps it
/// (`Unknown FastEmbed embedding model: <model>`, `Failed loading embedding model:
/// <reason>`, `Failed computing embeddings: <reason>`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EmbedError {
    /// Not a FastEmbed text-embedding model name; holds the name as given.
    #[error("{0}")]
    UnknownModel(String),
    /// The model folder or one of its files is missing, unreadable or unsupported.
    #[error("{0}")]
    Load(String),
    /// Tokenization or the forward pass failed.
    #[error("{0}")]
    Compute(String),
}

/// A loaded local embedding model. `Send + Sync`: share it behind an `Arc` and call
/// [`LocalModel::embed`] from blocking threads; each call runs on the model's own
/// thread pool of `threads` threads.
pub struct LocalModel {
    model: bert::Bert,
    tokenizer: Tokenizer,
    /// The same tokenizer without truncation, for [`LocalModel::token_spans`].
    span_tokenizer: Tokenizer,
    max_seq_length: usize,
    pool: rayon::ThreadPool,
    threads: usize,
}

#[derive(Deserialize)]
struct SentenceBertConfig {
    max_seq_length: Option<usize>,
}

impl std::fmt::Debug for LocalModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalModel")
            .field("dimensions", &self.dimensions())
            .field("max_seq_length", &self.max_seq_length)
            .field("threads", &self.threads)
            .finish_non_exhaustive()
    }
}

/// The canonical FastEmbed name for `name` (with or without organisation prefix, any
/// case), or `None`.
pub fn canonical_model_name(name: &str) -> Option<&'static str> {
    let wanted = name.trim();
    FASTEMBED_MODELS.iter().copied().find(|full| {
        let short = full.rsplit('/').next().unwrap_or(full);
        full.eq_ignore_ascii_case(wanted) || short.eq_ignore_ascii_case(wanted)
    })
}

/// The model folder for `name` under `models_dir` (§9.3): the first existing of
/// `<dir>/<name>` and `<dir>/<name without prefix>`, then the canonical spellings, then
/// a case-insensitive match of the name without prefix among the folder's entries.
fn model_folder(models_dir: &Path, name: &str, canonical: &str) -> Result<PathBuf, EmbedError> {
    let given = name.trim();
    let strip = |n: &str| n.rsplit('/').next().unwrap_or(n).to_owned();
    let mut candidates: Vec<String> = Vec::new();
    for c in [
        given.to_owned(),
        strip(given),
        canonical.to_owned(),
        strip(canonical),
    ] {
        if !c.is_empty() && !candidates.contains(&c) {
            candidates.push(c);
        }
    }
    for c in &candidates {
        let p = models_dir.join(c);
        if p.is_dir() {
            return Ok(p);
        }
    }
    let short = strip(canonical);
    if let Ok(entries) = std::fs::read_dir(models_dir) {
        for e in entries.flatten() {
            if e.file_name().to_string_lossy().eq_ignore_ascii_case(&short) && e.path().is_dir() {
                return Ok(e.path());
            }
        }
    }
    Err(EmbedError::Load(format!(
        "model folder not found: no {} in {}",
        candidates.join(" or "),
        models_dir.display()
    )))
}

fn read_json<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<T, EmbedError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| EmbedError::Load(format!("{}: {e}", path.display())))?;
    serde_json::from_str(&text).map_err(|e| EmbedError::Load(format!("{}: {e}", path.display())))
}

impl LocalModel {
    /// Resolves `name` (e.g. "all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2",
    /// any case) to a folder under `models_dir`; `Err(UnknownModel)` for names that are
    /// not FastEmbed text-embedding model names, `Err(Load(reason))` for a
    /// missing/unreadable folder or files. `threads` = 0 means one per available core.
    pub fn load(models_dir: &Path, name: &str, threads: usize) -> Result<Self, EmbedError> {
        let canonical =
            canonical_model_name(name).ok_or_else(|| EmbedError::UnknownModel(name.to_owned()))?;
        let dir = model_folder(models_dir, name, canonical)?;

        let cfg: bert::BertConfig = read_json(&dir.join("config.json"))?;
        let st_path = dir.join("sentence_bert_config.json");
        let max_seq_length = if st_path.is_file() {
            read_json::<SentenceBertConfig>(&st_path)?.max_seq_length
        } else {
            None
        }
        .unwrap_or(cfg.max_position_embeddings.min(512))
        .min(cfg.max_position_embeddings);
        if max_seq_length == 0 {
            return Err(EmbedError::Load(
                "max_seq_length must be positive".to_owned(),
            ));
        }

        let tok_path = dir.join("tokenizer.json");
        let mut span_tokenizer = Tokenizer::from_file(&tok_path)
            .map_err(|e| EmbedError::Load(format!("{}: {e}", tok_path.display())))?;
        span_tokenizer.with_padding(None);
        span_tokenizer
            .with_truncation(None)
            .map_err(|e| EmbedError::Load(format!("{}: {e}", tok_path.display())))?;
        let mut tokenizer = span_tokenizer.clone();
        tokenizer
            .with_truncation(Some(TruncationParams {
                direction: TruncationDirection::Right,
                max_length: max_seq_length,
                strategy: TruncationStrategy::LongestFirst,
                stride: 0,
            }))
            .map_err(|e| EmbedError::Load(format!("{}: {e}", tok_path.display())))?;

        if !dir.join("model.safetensors").is_file() {
            let hint = if dir.join("model.onnx").is_file() {
                " (model.onnx is not supported: this build reads model.safetensors)"
            } else {
                ""
            };
            return Err(EmbedError::Load(format!(
                "{}: model.safetensors not found{hint}",
                dir.display()
            )));
        }
        let model = bert::Bert::load(&dir, cfg).map_err(EmbedError::Load)?;

        let threads = if threads == 0 {
            std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1)
        } else {
            threads
        };
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(|i| format!("trove-embed-{i}"))
            .build()
            .map_err(|e| EmbedError::Load(format!("thread pool: {e}")))?;
        Ok(Self {
            model,
            tokenizer,
            span_tokenizer,
            max_seq_length,
            pool,
            threads,
        })
    }

    /// Size of the embeddings.
    pub fn dimensions(&self) -> usize {
        self.model.hidden_size()
    }

    /// Maximum number of tokens (special tokens included) an input is truncated to.
    pub fn max_seq_length(&self) -> usize {
        self.max_seq_length
    }

    /// Embeds a batch: mean pooling over each text's tokens, L2-normalised, truncation
    /// at `max_seq_length`. The batch is sorted by length and cut into groups of whole
    /// texts that the threads run through the encoder; texts are packed without padding
    /// (attention runs per text at its own length), which gives the numbers of a
    /// padded, masked batch without its wasted work. Results are in input order.
    pub fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        self.pool.install(|| {
            let ids: Vec<Vec<u32>> = texts
                .iter()
                .map(|t| {
                    self.tokenizer
                        .encode_fast(*t, true)
                        .map(|e| e.get_ids().to_vec())
                        .map_err(|e| EmbedError::Compute(format!("tokenization failed: {e}")))
                })
                .collect::<Result<_, _>>()?;
            if ids.iter().any(|s| s.len() > self.max_seq_length) {
                return Err(EmbedError::Compute("tokenizer did not truncate".to_owned()));
            }
            self.model
                .embed(&ids, self.threads)
                .map_err(EmbedError::Compute)
        })
    }

    /// Token byte spans of a text with this model's tokenizer (used by the token
    /// splitter): one range per token, special tokens excluded, no truncation. Falls
    /// back to whitespace-separated words if the tokenizer fails.
    pub fn token_spans(&self, text: &str) -> Vec<Range<usize>> {
        match self.span_tokenizer.encode(text, false) {
            Ok(enc) => enc
                .get_offsets()
                .iter()
                .filter(|(s, e)| e > s)
                .map(|&(s, e)| s..e)
                .collect(),
            Err(_) => whitespace_spans(text),
        }
    }
}

fn whitespace_spans(text: &str) -> Vec<Range<usize>> {
    let mut out = Vec::new();
    let mut start = None;
    for (i, c) in text.char_indices() {
        match (c.is_whitespace(), start) {
            (true, Some(s)) => {
                out.push(s..i);
                start = None;
            }
            (false, None) => start = Some(i),
            _ => {}
        }
    }
    if let Some(s) = start {
        out.push(s..text.len());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_resolve_with_or_without_prefix_in_any_case() {
        assert_eq!(
            canonical_model_name("all-MiniLM-L6-v2"),
            Some("sentence-transformers/all-MiniLM-L6-v2")
        );
        assert_eq!(
            canonical_model_name("SENTENCE-TRANSFORMERS/ALL-MINILM-L6-V2"),
            Some("sentence-transformers/all-MiniLM-L6-v2")
        );
        assert_eq!(
            canonical_model_name("bge-small-en-v1.5"),
            Some("BAAI/bge-small-en-v1.5")
        );
        assert_eq!(canonical_model_name("gpt-4"), None);
        assert_eq!(canonical_model_name("../all-MiniLM-L6-v2"), None);
        assert_eq!(canonical_model_name(""), None);
    }

    #[test]
    fn unknown_and_missing_models() {
        let dir = std::env::temp_dir().join(format!("trove-embed-empty-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        match LocalModel::load(&dir, "not-a-model", 1) {
            Err(e) => assert_eq!(e, EmbedError::UnknownModel("not-a-model".to_owned())),
            Ok(_) => panic!("loaded an unknown model"),
        }
        match LocalModel::load(&dir, "bge-small-en-v1.5", 1) {
            Err(EmbedError::Load(reason)) => {
                assert!(reason.contains("bge-small-en-v1.5"), "{reason}")
            }
            other => panic!("unexpected {other:?}"),
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn whitespace_fallback() {
        assert_eq!(whitespace_spans(" ab  c\n"), vec![1..3, 5..6]);
    }

    fn assert_send_sync<T: Send + Sync>() {}

    #[test]
    fn model_is_send_and_sync() {
        assert_send_sync::<LocalModel>();
    }
}
