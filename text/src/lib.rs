//! Pure text processing for Trove.
//!
//! Nothing in this crate performs IO or is async, and everything is deterministic:
//!
//! - [`splitter`]: the text splitter providers of ADDENDUM §10.1 (`recursive-character`,
//!   `character`, `token`): parameter parsing and validation ([`SplitterConfig`]) and the
//!   splitting itself ([`split`], [`split_with_tokenizer`]).
//! - [`language`]: the Postgres text search configuration to use for a text
//!   ([`text_search_config`]), from its detected language.

pub mod language;
pub mod splitter;

pub use language::{
    DetectedLanguage, detect_language, likeliest_text_search_config, text_search_config,
};
pub use splitter::{
    SplitterConfig, SplitterConfigError, TokenizerKind, split, split_with_tokenizer,
};
