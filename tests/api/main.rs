//! Integration tests through HTTP against real Postgres and NATS. One binary, one module per
//! feature.

#![expect(clippy::unwrap_used, clippy::expect_used, reason = "tests fail loudly")]

#[path = "../support/database.rs"]
mod database;
mod helpers;
#[path = "../support/postgres.rs"]
mod postgres;

mod agents;
mod api_keys;
mod auth;
mod contexts;
mod conversations;
mod core;
mod deferred_index;
mod deployment;
mod docs;
mod documents;
mod embedding;
mod enriched;
mod examples;
mod fake_llm;
mod files;
mod filter_fuzz;
mod hostile_input;
mod hybrid;
mod ingestion;
mod large_filters;
mod license;
mod lists;
mod llm_chat;
mod llms;
mod local_models;
mod mcp;
mod mcp_client;
mod nats_cluster;
mod pipelines;
mod read_replicas;
mod relay;
mod rerank;
mod resource_permissions;
mod schemathesis;
mod search;
mod sidecar;
mod statistics_metrics;
mod taxonomies;
mod text_splitters;
mod vector_embeddings;
mod worker;
