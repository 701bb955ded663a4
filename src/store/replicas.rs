//! Read replicas of the database (`TROVE_DATABASE_READ_URL`): searches read fragments and
//! vectors on them, each usable replica in turn; everything else, the key check included,
//! stays on the primary.
//!
//! `trove serve` checks every replica each [`CHECK_INTERVAL`] ([`ReadReplicas::watch`]): a
//! replica that does not answer, or whose replay is more than `TROVE_READ_REPLICA_MAX_LAG`
//! behind the primary, is skipped until a check finds it usable again (the gauge
//! `trove_read_replica_lag_seconds`, a log line at each change). A replica is not used before
//! its first check. A search whose statement fails on a replica for a reason the primary does
//! not share (the replica went away, has not replayed the pipeline's tables yet, or its
//! recovery cancelled the statement) runs again on the primary.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use prometheus::GaugeVec;
use sqlx::postgres::PgConnectOptions;

use super::Pool;
use crate::config::Secret;

/// How often `trove serve` checks its replicas.
pub const CHECK_INTERVAL: Duration = Duration::from_secs(1);

/// How long a check may wait for a replica's answer before it counts the replica as down.
const CHECK_TIMEOUT: Duration = Duration::from_secs(2);

/// How long a search waits for a replica's connection before it reads on the primary.
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(1);

/// The gauge's value for a replica that did not answer its last check.
const UNREACHABLE: f64 = -1.0;

/// A replica's state, as its last check found it.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Health {
    /// Not checked yet: not used.
    Unchecked,
    /// Behind the primary by at most the allowed lag (seconds).
    Usable(f64),
    /// Behind by more (seconds; `None`: it has replayed no transaction to date).
    Lagging(Option<f64>),
    /// Did not answer.
    Down,
}

impl Health {
    fn is_usable(self) -> bool {
        matches!(self, Health::Usable(_))
    }
}

/// One replica.
struct Replica {
    /// `host:port/database`, for logs and the gauge (never the URL: it may hold a password).
    name: String,
    pool: Pool,
    health: Mutex<Health>,
}

impl Replica {
    fn health(&self) -> MutexGuard<'_, Health> {
        self.health.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The deployment's read replicas (none unless `TROVE_DATABASE_READ_URL` names some).
#[derive(Clone)]
pub struct ReadReplicas {
    replicas: Arc<[Replica]>,
    next: Arc<AtomicUsize>,
    max_lag: Duration,
    lag: GaugeVec,
}

/// A replica a search reads on.
pub struct ReadReplica<'a> {
    replica: &'a Replica,
}

impl ReadReplica<'_> {
    /// The replica's connections.
    pub fn pool(&self) -> &Pool {
        &self.replica.pool
    }

    /// Counts the replica as down until its next check finds it usable (a statement could
    /// not reach it).
    pub fn set_down(&self) {
        let mut health = self.replica.health();
        if *health != Health::Down {
            tracing::warn!(
                replica = %self.replica.name,
                "read replica unreachable; searches read on the primary"
            );
            *health = Health::Down;
        }
    }
}

impl ReadReplicas {
    /// Opens (lazily) a pool of `max_connections` on each replica, with the primary's
    /// session settings.
    pub fn connect(
        urls: &[Secret<String>],
        max_connections: u32,
        statement_timeout: Duration,
        max_lag: Duration,
    ) -> Result<Self, sqlx::Error> {
        let replicas = urls
            .iter()
            .map(|url| {
                let options: PgConnectOptions = url.expose().parse()?;
                Ok(Replica {
                    name: format!(
                        "{}:{}/{}",
                        options.get_host(),
                        options.get_port(),
                        options.get_database().unwrap_or_default()
                    ),
                    pool: super::connect_lazy_waiting(
                        url.expose(),
                        max_connections,
                        statement_timeout,
                        ACQUIRE_TIMEOUT,
                    )?,
                    health: Mutex::new(Health::Unchecked),
                })
            })
            .collect::<Result<Vec<_>, sqlx::Error>>()?;
        let lag = GaugeVec::new(
            prometheus::Opts::new(
                "trove_read_replica_lag_seconds",
                "how far each read replica's replay was behind the primary at its last check \
                 (-1: it did not answer)",
            ),
            &["replica"],
        )
        .unwrap_or_else(|_| unreachable!("valid metric name"));
        Ok(Self {
            replicas: replicas.into(),
            next: Arc::default(),
            max_lag,
            lag,
        })
    }

    /// Whether the deployment has read replicas.
    pub fn is_empty(&self) -> bool {
        self.replicas.is_empty()
    }

    /// The lag gauge, to register with the process's registry.
    pub fn collectors(&self) -> Vec<Box<dyn prometheus::core::Collector>> {
        vec![Box::new(self.lag.clone())]
    }

    /// The next usable replica in turn, `None` when none is (searches then read on the
    /// primary).
    pub fn pick(&self) -> Option<ReadReplica<'_>> {
        let count = self.replicas.len();
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        (0..count)
            .map(|offset| &self.replicas[(start + offset) % count])
            .find(|replica| replica.health().is_usable())
            .map(|replica| ReadReplica { replica })
    }

    /// Checks every replica against the primary each [`CHECK_INTERVAL`], for ever.
    pub async fn watch(self, primary: Pool) {
        if self.is_empty() {
            return;
        }
        let mut before: Option<i64> = None;
        let mut ticks = tokio::time::interval(CHECK_INTERVAL);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            let now = primary_position(&primary).await;
            for replica in self.replicas.iter() {
                let replay = tokio::time::timeout(CHECK_TIMEOUT, replay_of(&replica.pool))
                    .await
                    .ok()
                    .and_then(Result::ok);
                let health = match replay {
                    None => Health::Down,
                    Some(replay) => judge(replay, now, before, self.max_lag),
                };
                self.record(replica, health);
            }
            before = now.or(before);
        }
    }

    /// Sets the gauge and the replica's health, with a log line when it changes use.
    fn record(&self, replica: &Replica, health: Health) {
        let gauge = match health {
            Health::Usable(lag) | Health::Lagging(Some(lag)) => lag,
            Health::Lagging(None) => f64::INFINITY,
            Health::Down | Health::Unchecked => UNREACHABLE,
        };
        self.lag.with_label_values(&[&replica.name]).set(gauge);
        let previous = std::mem::replace(&mut *replica.health(), health);
        if previous.is_usable() == health.is_usable() && previous != Health::Unchecked {
            return;
        }
        let max_lag = self.max_lag.as_secs_f64();
        match health {
            Health::Usable(lag) => {
                tracing::info!(replica = %replica.name, lag_seconds = lag, "read replica in use");
            }
            Health::Lagging(lag) => tracing::warn!(
                replica = %replica.name,
                lag_seconds = lag.unwrap_or(f64::INFINITY),
                max_lag_seconds = max_lag,
                "read replica behind the primary; searches read on the primary"
            ),
            Health::Down | Health::Unchecked => tracing::warn!(
                replica = %replica.name,
                "read replica unreachable; searches read on the primary"
            ),
        }
    }
}

/// What a replica says of its replay.
#[derive(Debug, Clone, Copy)]
struct Replay {
    /// Whether it is a standby (a server that is not replays nothing: its data is its own).
    in_recovery: bool,
    /// The WAL position it has replayed to (bytes).
    replayed: Option<i64>,
    /// Seconds since the commit of the last transaction it replayed.
    since_last_commit: Option<f64>,
}

/// The primary's WAL position (bytes), `None` when it does not answer.
async fn primary_position(primary: &Pool) -> Option<i64> {
    let read = sqlx::query_scalar::<_, i64>("SELECT (pg_current_wal_lsn() - '0/0'::pg_lsn)::int8")
        .fetch_one(primary.pg_pool());
    tokio::time::timeout(CHECK_TIMEOUT, read).await.ok()?.ok()
}

async fn replay_of(pool: &Pool) -> Result<Replay, sqlx::Error> {
    let (in_recovery, replayed, since_last_commit) =
        sqlx::query_as::<_, (bool, Option<i64>, Option<f64>)>(
            "SELECT pg_is_in_recovery(),
                    (pg_last_wal_replay_lsn() - '0/0'::pg_lsn)::int8,
                    extract(epoch FROM clock_timestamp() - pg_last_xact_replay_timestamp())::float8",
        )
        .fetch_one(pool.pg_pool())
        .await?;
    Ok(Replay {
        in_recovery,
        replayed,
        since_last_commit,
    })
}

/// How far behind a replica is: nothing when it has replayed all the primary had written at
/// this check (`now`); at most a check's interval when it has replayed all the primary had
/// at the one before (`before`); otherwise the time since the last commit it replayed, which
/// is its lag while the primary commits (an idle primary writes no commits, and a replica
/// that kept up is then caught by the first two rules).
fn judge(replay: Replay, now: Option<i64>, before: Option<i64>, max_lag: Duration) -> Health {
    if !replay.in_recovery {
        return Health::Usable(0.0);
    }
    let reached =
        |position: Option<i64>| matches!((replay.replayed, position), (Some(r), Some(p)) if r >= p);
    let interval = CHECK_INTERVAL.as_secs_f64();
    let lag = if reached(now) {
        Some(0.0)
    } else if reached(before) {
        Some(
            replay
                .since_last_commit
                .map_or(interval, |s| s.clamp(0.0, interval)),
        )
    } else {
        replay.since_last_commit.map(|s| s.max(0.0))
    };
    match lag {
        Some(lag) if lag <= max_lag.as_secs_f64() => Health::Usable(lag),
        lag => Health::Lagging(lag),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAX: Duration = Duration::from_secs(5);

    fn standby(replayed: i64, since_last_commit: Option<f64>) -> Replay {
        Replay {
            in_recovery: true,
            replayed: Some(replayed),
            since_last_commit,
        }
    }

    #[test]
    fn a_replica_that_replayed_what_the_primary_wrote_is_current() {
        // Idle for a minute, but nothing left to replay.
        assert_eq!(
            judge(standby(100, Some(60.0)), Some(100), Some(90), MAX),
            Health::Usable(0.0)
        );
    }

    #[test]
    fn a_replica_one_check_behind_is_at_most_an_interval_behind() {
        assert_eq!(
            judge(standby(95, Some(60.0)), Some(100), Some(90), MAX),
            Health::Usable(1.0)
        );
        assert_eq!(
            judge(standby(95, Some(0.25)), Some(100), Some(90), MAX),
            Health::Usable(0.25)
        );
    }

    #[test]
    fn a_replica_further_behind_is_judged_by_its_last_replayed_commit() {
        assert_eq!(
            judge(standby(80, Some(3.0)), Some(100), Some(90), MAX),
            Health::Usable(3.0)
        );
        assert_eq!(
            judge(standby(80, Some(7.5)), Some(100), Some(90), MAX),
            Health::Lagging(Some(7.5))
        );
        // Nothing replayed to date, or the primary unreachable and no commit replayed.
        assert_eq!(
            judge(standby(80, None), Some(100), Some(90), MAX),
            Health::Lagging(None)
        );
        assert_eq!(
            judge(standby(80, None), None, None, MAX),
            Health::Lagging(None)
        );
    }

    #[test]
    fn a_server_that_is_not_a_standby_is_current() {
        let primary = Replay {
            in_recovery: false,
            replayed: None,
            since_last_commit: None,
        };
        assert_eq!(judge(primary, Some(100), None, MAX), Health::Usable(0.0));
    }
}
