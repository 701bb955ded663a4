//! Text splitters (ADDENDUM §10.1): a document's text → its fragments, in order (`order_id`
//! is the index in the returned vector).
//!
//! # Common rules
//!
//! - Sizes of `recursive-character` and `character` count Unicode scalar values (Rust `char`s,
//!   Python's `len`), never bytes.
//! - No cut ever falls inside an extended grapheme cluster (UAX #29, `unicode-segmentation`):
//!   a separator occurrence is used only where it starts on a cluster boundary (and, for
//!   `character`, where it also ends on one, since the separator is removed); the empty
//!   separator `""` cuts between clusters, not chars; caller-given token spans are widened to
//!   cluster boundaries.
//! - Every fragment is trimmed (whole whitespace clusters, `White_Space` chars) and empty
//!   fragments are dropped: an empty or whitespace-only text gives no fragment.
//!
//! # `recursive-character` — LangChain `RecursiveCharacterTextSplitter`
//!
//! Reproduced rules (LangChain's default `keep_separator=True`, i.e. `"start"`;
//! `strip_whitespace=True`; `is_separator_regex=False`; `length_function=len`):
//!
//! 1. Pick the first separator of the list that occurs in the text; the empty separator
//!    always "occurs". If none occurs, the last separator is used (it cuts nothing) and there is
//!    no finer separator left.
//! 2. Cut the text before each occurrence: the separator stays at the **start of the following
//!    piece** (`"a\n\nb"` → `"a"`, `"\n\nb"`). Empty pieces are dropped.
//! 3. Pieces strictly shorter than `chunk_size` are collected; a piece of `chunk_size` chars or
//!    more first flushes the collected pieces through the merge (below), then is split again
//!    recursively with the separators after the chosen one, or, when there are none, kept
//!    whole (so with a custom list lacking `""`, or for one grapheme cluster longer than
//!    `chunk_size`, a fragment can exceed `chunk_size`).
//! 4. Merge (`_merge_splits`, joining with `""` because separators are kept in the pieces):
//!    append pieces while the chunk stays within `chunk_size`; when the next piece does not
//!    fit, emit the chunk (trimmed, dropped if empty), then drop pieces from its front until
//!    the rest is at most `chunk_overlap` chars **and** the next piece fits; the rest starts
//!    the next chunk. So consecutive fragments share at most `chunk_overlap` chars, always
//!    whole pieces (no overlap when the pieces are large).
//!
//! Since sizes are measured before trimming, no fragment produced by a merge exceeds
//! `chunk_size`.
//!
//! # `character` — LangChain `CharacterTextSplitter`
//!
//! LangChain's default `keep_separator=False`: the text is cut at every occurrence of
//! `separator`, which is removed; empty pieces are dropped; the pieces are merged as above but
//! joined with (and counting) the separator between them. A piece longer than `chunk_size`
//! stays whole as its own fragment.
//!
//! # `token` — LangChain `split_text_on_tokens`
//!
//! Windows of `chunk_size` tokens starting every `chunk_size − chunk_overlap` tokens; the last
//! window is the first one reaching the last token. A fragment is the original text from the
//! window's first token start to its last token end. `whitespace` tokens are maximal runs of
//! non-whitespace grapheme clusters; `embedding-model` tokens come from the caller
//! ([`split_with_tokenizer`]), [`split`] falls back to whitespace.
//!
//! # Deliberate differences from LangChain
//!
//! - The empty separator yields grapheme clusters instead of code points (spec: no split inside
//!   a grapheme); so do separator occurrences inside a cluster (e.g. `"\n"` inside `"\r\n"`),
//!   which are not used.
//! - A too-long piece kept whole by `recursive-character` is trimmed too (LangChain appends it
//!   untrimmed); trimming removes whole whitespace clusters.
//! - `token` fragments are spans of the original text rather than decoded token ids, and
//!   whitespace tokenization replaces tiktoken's `gpt2` encoding.
//! - No regex separators (`is_separator_regex`), no `keep_separator` choice, no
//!   `length_function`: they are not parameters of Trove's providers.

mod config;
mod graphemes;
mod separators;
mod token;

#[cfg(test)]
mod tests;

use std::ops::Range;

pub use config::{
    DEFAULT_CHUNK_OVERLAP, DEFAULT_CHUNK_SIZE, DEFAULT_SEPARATOR, DEFAULT_SEPARATORS,
    DEFAULT_TOKEN_CHUNK_OVERLAP, DEFAULT_TOKEN_CHUNK_SIZE, PROVIDERS, SplitterConfig,
    SplitterConfigError, TokenizerKind,
};

use separators::Sizes;

/// Splits `text` into fragments. `token` with `tokenizer` `embedding-model` uses the
/// whitespace tokenizer here; see [`split_with_tokenizer`].
pub fn split(config: &SplitterConfig, text: &str) -> Vec<String> {
    split_with_tokenizer(config, text, &graphemes::whitespace_tokens)
}

/// Splits `text` into fragments, `token` with `tokenizer` `embedding-model` making its windows
/// over the byte spans `tokenize(text)` returns (the pipeline's `local` model tokenizer's
/// offsets; spans may be unordered, empty, overlapping or off grapheme boundaries: empty ones
/// are ignored, the others widened to cluster boundaries and sorted). Every other
/// configuration ignores `tokenize` and behaves as [`split`].
pub fn split_with_tokenizer(
    config: &SplitterConfig,
    text: &str,
    tokenize: &dyn Fn(&str) -> Vec<Range<usize>>,
) -> Vec<String> {
    let (chunk_size, chunk_overlap) = config.chunk_sizes();
    let sizes = Sizes {
        // A hand-built configuration may break the rules; never loop or panic on it.
        chunk_size: chunk_size.max(1),
        chunk_overlap: chunk_overlap.min(chunk_size.saturating_sub(1)),
    };
    match config {
        SplitterConfig::RecursiveCharacter { separators, .. } => {
            let mut out = Vec::new();
            separators::split_recursive(text, separators, sizes, &mut out);
            out
        }
        SplitterConfig::Character { separator, .. } => {
            let mut out = Vec::new();
            separators::split_character(text, separator, sizes, &mut out);
            out
        }
        SplitterConfig::Token { tokenizer, .. } => {
            let tokens = match tokenizer {
                TokenizerKind::Whitespace => graphemes::whitespace_tokens(text),
                TokenizerKind::EmbeddingModel => token::sanitize(text, tokenize(text)),
            };
            token::windows(text, &tokens, sizes.chunk_size, sizes.chunk_overlap)
        }
    }
}
