//! Storage: the only code that runs SQL. The plain CRUD of entities goes through sea-orm
//! (`entities`); the hot paths are static SQL with bound parameters or sea-query statements
//! built by `trove-query`, run by sqlx. Both run on the same pool.

pub mod agents;
pub mod api_keys;
pub mod contexts;
pub mod documents;
pub mod embedding;
pub mod entities;
pub mod indexes;
pub mod ingestion;
pub mod install;
pub mod license;
pub mod listing;
pub mod llms;
pub mod migrations;
pub mod pipelines;
pub mod replicas;
pub mod taxonomies;
pub mod text_splitters;
pub mod vector_embeddings;
pub mod vectors;
mod warm;
pub mod words;

use std::ops::Deref;
use std::sync::Arc;
use std::time::Duration;

use sea_orm::{ConnAcquireErr, DatabaseConnection, DbErr, RuntimeErr, SqlxPostgresConnector};
use sqlx::PgPool;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

use crate::error::ApiError;

/// The database: a pool of connections, and sea-orm's connection over the same pool. Layers
/// above the store hold it and pass it back; only the store runs statements on it.
///
/// It derefs to the sqlx pool, on which the hot paths and the transactions they share run.
#[derive(Clone, Debug)]
pub struct Pool {
    sqlx: PgPool,
    orm: DatabaseConnection,
    warm: Arc<warm::WarmConnections>,
}

impl Pool {
    /// Wraps a pool; sea-orm takes its connections from it.
    pub fn new(sqlx: PgPool) -> Self {
        let orm = SqlxPostgresConnector::from_sqlx_postgres_pool(sqlx.clone());
        let warm = warm::WarmConnections::new(sqlx.options().get_max_connections());
        Self {
            sqlx,
            orm,
            warm: Arc::new(warm),
        }
    }

    /// A connection for a hot path, the most recently parked first (see [`warm`]).
    pub async fn acquire_warm(&self) -> Result<Connection, sqlx::Error> {
        warm::acquire(&self.sqlx, &self.warm).await
    }

    /// Closes the pool once every connection is back (the parked ones first).
    pub async fn close(&self) {
        self.warm.release_all();
        self.sqlx.close().await;
    }

    /// The sqlx pool (for statements generic over the executor).
    pub fn pg_pool(&self) -> &PgPool {
        &self.sqlx
    }

    /// The sea-orm connection, for entities (`entities`).
    pub(crate) fn orm(&self) -> &DatabaseConnection {
        &self.orm
    }
}

impl Deref for Pool {
    type Target = PgPool;

    fn deref(&self) -> &PgPool {
        &self.sqlx
    }
}

/// A connection taken for a hot path (kept across statements of one request).
pub use warm::Connection;

/// A connection as statements take it (a pooled connection or an open transaction derefs to
/// it), for services that run several store functions in one transaction.
pub type DbConnection = sqlx::PgConnection;

/// A failure of a statement.
pub type DatabaseError = sqlx::Error;

/// A failure of a statement on an entity (`entities`).
pub type EntityError = DbErr;

/// `hnsw.ef_search` of every connection (set at connection start with `hnsw.iterative_scan =
/// relaxed_order`), and the base of the candidate list of a restricted HNSW search of 100,000
/// vectors (a search sets the list its walk needs, `retrieval::cost::walk`; an unrestricted one
/// walks `retrieval::cost::UNRESTRICTED_EF_SEARCH` there); pgvector's default of 40 is far
/// below.
pub const SESSION_EF_SEARCH: u64 = 150;

/// Connections of each process's pool on the primary, and on each read replica.
pub const POOL_CONNECTIONS: u32 = 32;

/// How long a pooled connection may sit idle before it is pinged on acquire.
const PING_AFTER_IDLE: Duration = Duration::from_secs(1);

/// Opens a connection pool. Connections are made lazily, so a database that is down at
/// start is reported per request (`Database connection error`), not by a crash.
pub fn connect_lazy(url: &str, max_connections: u32) -> Result<Pool, sqlx::Error> {
    connect_lazy_with_timeout(url, max_connections, Duration::ZERO)
}

/// [`connect_lazy`] whose sessions cancel any statement that runs longer than
/// `statement_timeout` (`TROVE_STATEMENT_TIMEOUT`; zero: no limit), a safety net against
/// statements no index can serve: the statement fails with the database's message
/// (`canceling statement due to statement timeout`, the interface's 500) and the connection
/// stays usable. Schema changes that may take long lift it for themselves: migrations
/// ([`migrations::migrate`]) and metadata index builds ([`indexes::create`]).
pub fn connect_lazy_with_timeout(
    url: &str,
    max_connections: u32,
    statement_timeout: Duration,
) -> Result<Pool, sqlx::Error> {
    connect_lazy_waiting(url, max_connections, statement_timeout, ACQUIRE_TIMEOUT)
}

/// How long a statement waits for a connection of the primary's pool (the server down or every
/// connection busy) before it fails with `Database connection error`.
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(5);

/// [`connect_lazy_with_timeout`] whose statements wait at most `acquire_timeout` for a
/// connection (a read replica's pool waits less: the primary can answer instead).
pub fn connect_lazy_waiting(
    url: &str,
    max_connections: u32,
    statement_timeout: Duration,
    acquire_timeout: Duration,
) -> Result<Pool, sqlx::Error> {
    let options: PgConnectOptions = url.parse()?;
    // Every session searches HNSW indexes with iterative scans and a candidate list of
    // SESSION_EF_SEARCH, so a search needs no transaction of its own to set them (pgvector
    // takes these placeholders up when it loads).
    //
    // Trove's statements are short and many run at once, so sessions plan without parallel
    // workers and without JIT compilation: launching a worker costs milliseconds (more than
    // a search through a metadata index takes) and takes a core from the other requests, and
    // whether a plan launches one changed with the prepared statement's plan mode, so the
    // same search took 3 or 12 ms depending on the connection; JIT compiles for tens of
    // milliseconds whenever an estimate passes `jit_above_cost`, which exact scans of a
    // large pipeline do.
    let options = options.application_name("trove").options([
        ("hnsw.iterative_scan", "relaxed_order".to_owned()),
        ("hnsw.ef_search", SESSION_EF_SEARCH.to_string()),
        ("max_parallel_workers_per_gather", "0".to_owned()),
        ("jit", "off".to_owned()),
        // A metadata filter's long `$in` / `$not-in` list is hashed once per statement: under
        // an OR or a NOT only if its hash table fits in work_mem × this (4 MB × 8), which a
        // list filling a 2 MB body needs.
        ("hash_mem_multiplier", "8".to_owned()),
        (
            "statement_timeout",
            format!("{}ms", statement_timeout.as_millis()),
        ),
    ]);
    let pool = PgPoolOptions::new()
        .max_connections(max_connections)
        .acquire_timeout(acquire_timeout)
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
        .connect_lazy_with(options);
    Ok(Pool::new(pool))
}

/// Database failures as the interface reports them: unique and restrict violations are
/// 409s, a connection that could not be had is `Database connection error`, anything else
/// the database's own message.
impl From<sqlx::Error> for ApiError {
    fn from(err: sqlx::Error) -> ApiError {
        ApiError::from(&err)
    }
}

impl From<&sqlx::Error> for ApiError {
    fn from(err: &sqlx::Error) -> ApiError {
        match err {
            // 23001 is `restrict_violation` (ON DELETE RESTRICT), which sqlx does not classify.
            sqlx::Error::Database(db) if db.code().as_deref() == Some("23001") => {
                ApiError::ConflictRelated
            }
            // A relation or function a read replica has not replayed yet, and statements its
            // recovery cancelled (`40001`, `57P04`).
            sqlx::Error::Database(db)
                if matches!(
                    db.code().as_deref(),
                    Some("42P01" | "42883" | "40001" | "57P04")
                ) =>
            {
                ApiError::DatabaseBehind(db.message().to_owned())
            }
            sqlx::Error::Database(db) => match db.kind() {
                sqlx::error::ErrorKind::UniqueViolation => ApiError::ConflictUnique,
                sqlx::error::ErrorKind::ForeignKeyViolation => ApiError::ConflictRelated,
                _ => ApiError::Database(db.message().to_owned()),
            },
            sqlx::Error::PoolTimedOut | sqlx::Error::Io(_) | sqlx::Error::Tls(_) => {
                ApiError::DatabaseConnection(err.to_string())
            }
            _ => ApiError::Database(err.to_string()),
        }
    }
}

/// sea-orm's failures as the same table: the sqlx error it wraps is mapped as above, and a
/// connection it could not take from the pool as the sqlx error it stands for.
impl From<DbErr> for ApiError {
    fn from(err: DbErr) -> ApiError {
        match &err {
            DbErr::Conn(RuntimeErr::SqlxError(sqlx))
            | DbErr::Exec(RuntimeErr::SqlxError(sqlx))
            | DbErr::Query(RuntimeErr::SqlxError(sqlx)) => ApiError::from(sqlx.as_ref()),
            DbErr::ConnectionAcquire(ConnAcquireErr::Timeout) => {
                ApiError::from(sqlx::Error::PoolTimedOut)
            }
            DbErr::ConnectionAcquire(ConnAcquireErr::ConnectionClosed) => {
                ApiError::from(sqlx::Error::PoolClosed)
            }
            _ => ApiError::Database(err.to_string()),
        }
    }
}
