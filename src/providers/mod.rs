//! Providers: embedders, splitters and language models behind traits.

pub mod hash_embedding;
