//! Providers: embedders, splitters and language models behind traits.

pub mod embedding;
pub mod hash_embedding;
pub mod llm;
pub mod local_embedding;
pub mod ollama_chat;
pub mod openai_chat;
pub mod openai_embedding;
pub mod rerank;
pub mod sidecar_client;
pub mod splitting;
