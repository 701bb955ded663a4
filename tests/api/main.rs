//! Integration tests through HTTP against real Postgres and NATS. One binary, one module per
//! feature.

mod helpers;

mod api_keys;
mod core;
