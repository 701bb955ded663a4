//! Storage: the only code that runs SQL. Statements are either static SQL with bound
//! parameters or sea-query statements built by `trove-query`.

pub mod api_keys;
pub mod documents;
pub mod embedding;
pub mod indexes;
pub mod install;
pub mod listing;
pub mod migrations;
pub mod pipelines;
pub mod taxonomies;
pub mod text_splitters;
pub mod vectors;

use std::time::Duration;

use sqlx::PgPool;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

/// How long a pooled connection may sit idle before it is pinged on acquire.
const PING_AFTER_IDLE: Duration = Duration::from_secs(1);

/// Opens a connection pool. Connections are made lazily, so a database that is down at
/// start is reported per request (`Database connection error`), not by a crash.
pub fn connect_lazy(url: &str, max_connections: u32) -> Result<PgPool, sqlx::Error> {
    let options: PgConnectOptions = url.parse()?;
    // Every session searches HNSW indexes with iterative scans and a candidate list of
    // SESSION_EF_SEARCH, so a search needs no transaction of its own to set them (pgvector
    // takes these placeholders up when it loads).
    let options = options.application_name("trove").options([
        ("hnsw.iterative_scan", "relaxed_order".to_owned()),
        (
            "hnsw.ef_search",
            crate::retrieval::search::SESSION_EF_SEARCH.to_string(),
        ),
    ]);
    Ok(PgPoolOptions::new()
        .max_connections(max_connections)
        .acquire_timeout(Duration::from_secs(5))
        // A connection idle for a while is pinged before use (the server may have closed it);
        // one just returned to the pool is not, which saves a round trip per statement.
        .test_before_acquire(false)
        .before_acquire(|conn, meta| {
            Box::pin(async move {
                if meta.idle_for >= PING_AFTER_IDLE {
                    sqlx::Connection::ping(conn).await?;
                }
                Ok(true)
            })
        })
        .connect_lazy_with(options))
}
