//! Trove: a knowledge retrieval and agent service.
//!
//! The crate is organised as the design describes: `http` (transport), `service` (logic),
//! `store` (SQL), `auth`, `ingest`, and the start-up glue.

pub mod access;
pub mod agents;
pub mod auth;
pub mod config;
pub mod crypto;
pub mod error;
pub mod http;
pub mod ingest;
pub mod license;
pub mod mcp;
pub mod metadata_schema;
pub mod metrics;
pub mod names;
pub mod providers;
pub mod retrieval;
pub mod service;
pub mod sidecar;
pub mod startup;
pub mod state;
pub mod store;
pub mod telemetry;
pub mod time;
pub mod upload;
