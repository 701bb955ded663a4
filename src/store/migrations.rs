//! Numbered, forward-only migrations embedded in the binary.
//!
//! Each file runs in its own transaction under an advisory lock, so several processes starting
//! at once apply each migration exactly once. A database that holds a version this binary does
//! not know, or an applied file whose checksum changed, is refused.

use sha2::{Digest, Sha256};
use sqlx::{Connection, PgPool};

/// One embedded migration.
#[derive(Debug, Clone, Copy)]
pub struct Migration {
    pub version: i32,
    pub name: &'static str,
    pub sql: &'static str,
}

/// Every migration, in order. `migrations_are_contiguous` checks this list against the folder.
pub const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "api_keys",
        sql: include_str!("../../migrations/0001_api_keys.sql"),
    },
    Migration {
        version: 2,
        name: "knowledge",
        sql: include_str!("../../migrations/0002_knowledge.sql"),
    },
    Migration {
        version: 3,
        name: "taxonomies",
        sql: include_str!("../../migrations/0003_taxonomies.sql"),
    },
    Migration {
        version: 4,
        name: "vector_norms",
        sql: include_str!("../../migrations/0004_vector_norms.sql"),
    },
    Migration {
        version: 5,
        name: "metadata_index_keys",
        sql: include_str!("../../migrations/0005_metadata_index_keys.sql"),
    },
    Migration {
        version: 6,
        name: "inline_document_texts",
        sql: include_str!("../../migrations/0006_inline_document_texts.sql"),
    },
    Migration {
        version: 7,
        name: "total_metadata_expressions",
        sql: include_str!("../../migrations/0007_total_metadata_expressions.sql"),
    },
    Migration {
        version: 8,
        name: "metadata_field_statistics",
        sql: include_str!("../../migrations/0008_metadata_field_statistics.sql"),
    },
    Migration {
        version: 9,
        name: "agents_llms",
        sql: include_str!("../../migrations/0009_agents_llms.sql"),
    },
    Migration {
        version: 10,
        name: "job_outbox",
        sql: include_str!("../../migrations/0010_job_outbox.sql"),
    },
    Migration {
        version: 11,
        name: "deferred_vector_index",
        sql: include_str!("../../migrations/0011_deferred_vector_index.sql"),
    },
    Migration {
        version: 12,
        name: "declared_field_indexes",
        sql: include_str!("../../migrations/0012_declared_field_indexes.sql"),
    },
    Migration {
        version: 13,
        name: "half_precision_vector_index",
        sql: include_str!("../../migrations/0013_half_precision_vector_index.sql"),
    },
    Migration {
        version: 14,
        name: "search_epoch",
        sql: include_str!("../../migrations/0014_search_epoch.sql"),
    },
    Migration {
        version: 15,
        name: "scope_in_vector_tables",
        sql: include_str!("../../migrations/0015_scope_in_vector_tables.sql"),
    },
    Migration {
        version: 16,
        name: "contexts",
        sql: include_str!("../../migrations/0016_contexts.sql"),
    },
    Migration {
        version: 17,
        name: "word_counts",
        sql: include_str!("../../migrations/0017_word_counts.sql"),
    },
    Migration {
        version: 18,
        name: "document_files",
        sql: include_str!("../../migrations/0018_document_files.sql"),
    },
    Migration {
        version: 19,
        name: "vector_embedding_backfill",
        sql: include_str!("../../migrations/0019_vector_embedding_backfill.sql"),
    },
    Migration {
        version: 20,
        name: "postings",
        sql: include_str!("../../migrations/0020_postings.sql"),
    },
    Migration {
        version: 21,
        name: "fragment_tsvector",
        sql: include_str!("../../migrations/0021_fragment_tsvector.sql"),
    },
    Migration {
        version: 22,
        name: "narrow_word_counts",
        sql: include_str!("../../migrations/0022_narrow_word_counts.sql"),
    },
];

/// Key of the advisory lock held while migrating (any fixed number unique to Trove).
const LOCK_KEY: i64 = 0x7472_6f76_655f_6d67;

/// Why migrating failed.
#[derive(Debug, thiserror::Error)]
pub enum MigrateError {
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
    #[error("the database holds migration {0}, which this release does not know")]
    UnknownVersion(i32),
    #[error("migration {0} was changed after it was applied (checksum mismatch)")]
    ChecksumMismatch(i32),
}

fn checksum(sql: &str) -> Vec<u8> {
    Sha256::digest(sql.as_bytes()).to_vec()
}

/// Applies every pending migration, then creates the indexes on declared fields that a vector
/// table lacks (those of tables that a migration gave the fields' columns:
/// `indexes::sync_vector_field_indexes`). Returns how many migrations were applied.
pub async fn migrate(pool: &PgPool) -> Result<usize, MigrateError> {
    let mut conn = pool.acquire().await?;
    // Waiting for another instance's migrations and migrating may take longer than the
    // session's statement timeout: this session has none until it is done.
    sqlx::query("SET statement_timeout = 0")
        .execute(&mut *conn)
        .await?;
    let migrated = match migrate_on(&mut conn).await {
        Ok(applied) => sync_vector_field_indexes(&mut conn).await.map(|()| applied),
        Err(error) => Err(error),
    };
    // Back to the session's own value (set when it connected).
    let reset = sqlx::query("RESET statement_timeout")
        .execute(&mut *conn)
        .await;
    let applied = migrated?;
    reset?;
    Ok(applied)
}

async fn sync_vector_field_indexes(conn: &mut sqlx::PgConnection) -> Result<(), MigrateError> {
    let mut tx = sqlx::Connection::begin(conn).await?;
    super::indexes::sync_vector_field_indexes(&mut tx, None).await?;
    tx.commit().await?;
    Ok(())
}

/// [`migrate`] on a connection without statement timeout.
async fn migrate_on(conn: &mut sqlx::PgConnection) -> Result<usize, MigrateError> {
    sqlx::query("SELECT pg_advisory_lock($1)")
        .bind(LOCK_KEY)
        .execute(&mut *conn)
        .await?;
    let result = migrate_locked(conn).await;
    // Unlock even when migrating failed; the connection returns to the pool afterwards.
    let unlock = sqlx::query("SELECT pg_advisory_unlock($1)")
        .bind(LOCK_KEY)
        .execute(&mut *conn)
        .await;
    let applied = result?;
    unlock?;
    Ok(applied)
}

async fn migrate_locked(conn: &mut sqlx::PgConnection) -> Result<usize, MigrateError> {
    sqlx::raw_sql(
        "CREATE TABLE IF NOT EXISTS _trove_migrations (
            version    integer PRIMARY KEY,
            name       text NOT NULL,
            checksum   bytea NOT NULL,
            applied_at timestamptz NOT NULL DEFAULT now()
        )",
    )
    .execute(&mut *conn)
    .await?;
    let applied: Vec<(i32, Vec<u8>)> =
        sqlx::query_as("SELECT version, checksum FROM _trove_migrations ORDER BY version")
            .fetch_all(&mut *conn)
            .await?;
    check_applied(&applied)?;

    let mut count = 0;
    for migration in MIGRATIONS
        .iter()
        .filter(|m| !applied.iter().any(|(v, _)| *v == m.version))
    {
        let mut tx = conn.begin().await?;
        sqlx::raw_sql(migration.sql).execute(&mut *tx).await?;
        sqlx::query("INSERT INTO _trove_migrations (version, name, checksum) VALUES ($1, $2, $3)")
            .bind(migration.version)
            .bind(migration.name)
            .bind(checksum(migration.sql))
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        tracing::info!(
            version = migration.version,
            name = migration.name,
            "migration applied"
        );
        count += 1;
    }
    Ok(count)
}

fn check_applied(applied: &[(i32, Vec<u8>)]) -> Result<(), MigrateError> {
    for (version, sum) in applied {
        let Some(known) = MIGRATIONS.iter().find(|m| m.version == *version) else {
            return Err(MigrateError::UnknownVersion(*version));
        };
        if checksum(known.sql) != *sum {
            return Err(MigrateError::ChecksumMismatch(*version));
        }
    }
    Ok(())
}

/// Whether every migration of this release is applied (the worker waits for this).
pub async fn is_current(pool: &PgPool) -> Result<bool, sqlx::Error> {
    let exists: bool = sqlx::query_scalar("SELECT to_regclass('_trove_migrations') IS NOT NULL")
        .fetch_one(pool)
        .await?;
    if !exists {
        return Ok(false);
    }
    let max: Option<i32> = sqlx::query_scalar("SELECT max(version) FROM _trove_migrations")
        .fetch_one(pool)
        .await?;
    Ok(max == MIGRATIONS.last().map(|m| m.version))
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "tests fail loudly")]
mod tests {
    use super::*;

    #[test]
    fn migrations_are_contiguous() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/migrations");
        let mut files: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".sql"))
            .collect();
        files.sort();
        assert_eq!(files.len(), MIGRATIONS.len(), "every file is embedded");
        for (i, (file, m)) in files.iter().zip(MIGRATIONS).enumerate() {
            let expected_version = i32::try_from(i + 1).unwrap();
            assert_eq!(m.version, expected_version);
            assert_eq!(file, &format!("{:04}_{}.sql", m.version, m.name));
        }
    }

    #[test]
    fn changed_or_unknown_versions_are_refused() {
        let ok = vec![(1, checksum(MIGRATIONS[0].sql))];
        assert!(check_applied(&ok).is_ok());
        assert!(matches!(
            check_applied(&[(1, vec![0])]),
            Err(MigrateError::ChecksumMismatch(1))
        ));
        assert!(matches!(
            check_applied(&[(999, vec![])]),
            Err(MigrateError::UnknownVersion(999))
        ));
    }
}
