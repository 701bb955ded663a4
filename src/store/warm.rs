//! Connections handed out most recently used first.
//!
//! sqlx's pool hands out the connection that has been idle longest. After a burst of
//! concurrent requests has opened a dozen or more connections, consecutive requests of one
//! client therefore land on a different server process each time, and a process that has not
//! worked for a while runs the same search statement about 0.3 ms slower (the search benchmark
//! at 60,000 fragments: the search's library call took 2.52 ms on the service's pool of 32
//! against 2.15 ms on the bench's pool of 4, and 1.94 against 1.99 with the service's pool cut
//! to 3); sqlx also tests each connection returned with a round trip. The hot paths (the key
//! check and a search) take their connections from this stack instead: the connections parked
//! last, up to [`CAPACITY`], are handed out first; the rest go back to sqlx's pool.
//!
//! A connection is parked only by [`Connection::park`], called once its statements have
//! completed. One dropped otherwise (an error, a request cancelled mid-statement) goes back
//! to sqlx's pool, which tests it on release as it does every connection.
//!
//! A connection parked here remembers the `hnsw.ef_search` its session was given, so that a
//! walk sets its candidate list once for a run of searches rather than before each
//! ([`Connection::use_ef_search`]); one from sqlx's pool may have been given any.

use std::ops::{Deref, DerefMut};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sqlx::pool::PoolConnection;
use sqlx::{PgConnection, PgPool, Postgres};

/// Connections kept out of sqlx's pool for reuse: the busiest hot path (8 concurrent
/// searches) holds two each. At most half the pool, so that the statements that take their
/// connections from sqlx's pool always find some.
const CAPACITY: usize = 16;

/// A connection that sat here this long is pinged before reuse, as sqlx's pool does with one
/// idle that long (the server may have closed it).
const PING_AFTER: Duration = super::PING_AFTER_IDLE;

struct Parked {
    connection: PoolConnection<Postgres>,
    ef_search: Option<u64>,
    since: Instant,
}

/// The stack of recently returned connections, and how many it keeps.
pub(super) struct WarmConnections(Mutex<Vec<Parked>>, usize);

impl std::fmt::Debug for WarmConnections {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WarmConnections").finish_non_exhaustive()
    }
}

impl WarmConnections {
    /// A stack for a pool of `max_connections`.
    pub(super) fn new(max_connections: u32) -> Self {
        let half = usize::try_from(max_connections / 2).unwrap_or(CAPACITY);
        Self(Mutex::default(), half.clamp(1, CAPACITY))
    }

    fn pop(&self) -> Option<Parked> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).pop()
    }

    fn park(&self, connection: PoolConnection<Postgres>, ef_search: Option<u64>) {
        let mut stack = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if stack.len() < self.1 {
            stack.push(Parked {
                connection,
                ef_search,
                since: Instant::now(),
            });
        }
        // Otherwise `connection` drops here, back to sqlx's pool.
    }

    /// Returns every parked connection to sqlx's pool (before the pool closes, which waits for
    /// them).
    pub(super) fn release_all(&self) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clear();
    }
}

/// A connection taken from [`WarmConnections`] or from the pool. [`Connection::park`] keeps
/// it for the next taker; dropped, it goes back to sqlx's pool.
pub struct Connection {
    connection: PoolConnection<Postgres>,
    warm: Arc<WarmConnections>,
    /// The session's `hnsw.ef_search`, when known.
    ef_search: Option<u64>,
}

impl Connection {
    /// Keeps the connection for the next taker: every statement run on it has completed.
    pub fn park(self) {
        let Self {
            connection,
            warm,
            ef_search,
        } = self;
        warm.park(connection, ef_search);
    }

    /// Gives the session `hnsw.ef_search = ef_search`, unless it is known to have it.
    pub async fn use_ef_search(&mut self, ef_search: u64) -> Result<(), sqlx::Error> {
        if self.ef_search == Some(ef_search) {
            return Ok(());
        }
        self.ef_search = None;
        sqlx::query("SELECT set_config('hnsw.ef_search', $1, false)")
            .bind(ef_search.to_string())
            .execute(&mut *self.connection)
            .await?;
        self.ef_search = Some(ef_search);
        Ok(())
    }
}

impl Deref for Connection {
    type Target = PgConnection;

    fn deref(&self) -> &PgConnection {
        &self.connection
    }
}

impl DerefMut for Connection {
    fn deref_mut(&mut self) -> &mut PgConnection {
        &mut self.connection
    }
}

/// The most recently parked connection that still answers, else one from `pool`.
pub(super) async fn acquire(
    pool: &PgPool,
    warm: &Arc<WarmConnections>,
) -> Result<Connection, sqlx::Error> {
    while let Some(Parked {
        mut connection,
        ef_search,
        since,
    }) = warm.pop()
    {
        if since.elapsed() >= PING_AFTER && sqlx::Connection::ping(&mut *connection).await.is_err()
        {
            // Not parked again: the pool replaces it.
            connection.close_on_drop();
            continue;
        }
        return Ok(Connection {
            connection,
            warm: Arc::clone(warm),
            ef_search,
        });
    }
    Ok(Connection {
        connection: pool.acquire().await?,
        warm: Arc::clone(warm),
        ef_search: None,
    })
}
