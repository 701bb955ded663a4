//! Installation: once, at the first `trove serve` on a database, in one transaction.

use sqlx::PgPool;

use crate::auth::{AccessLevel, ObjectType, TYPE_ENTRY_ID};
use crate::config::MasterKey;
use crate::crypto::hash_key_secret;

/// Why installing failed.
#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
    #[error("TROVE_MASTER_KEY_ID and TROVE_MASTER_KEY_SECRET are required at installation")]
    MissingMasterKey,
}

/// Installs if the database has no installation record yet. Returns whether it installed.
pub async fn install_if_needed(
    pool: &PgPool,
    master: Option<&MasterKey>,
) -> Result<bool, InstallError> {
    let mut tx = pool.begin().await?;
    // Serializes concurrent first starts: the second waits, then sees the record.
    sqlx::query("LOCK TABLE installation IN EXCLUSIVE MODE")
        .execute(&mut *tx)
        .await?;
    let installed: bool = sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM installation)")
        .fetch_one(&mut *tx)
        .await?;
    if installed {
        return Ok(false);
    }
    let master = master.ok_or(InstallError::MissingMasterKey)?;
    sqlx::query(
        "INSERT INTO api_keys (id, name, description, secret_hash, active, is_master)
         VALUES ($1, 'master', NULL, $2, true, true)",
    )
    .bind(master.id)
    .bind(hash_key_secret(master.id, master.secret.expose()))
    .execute(&mut *tx)
    .await?;
    for object_type in ObjectType::ALL {
        let classifications: Vec<String> = if object_type == ObjectType::Pipelines {
            vec!["*".to_owned()]
        } else {
            Vec::new()
        };
        sqlx::query(
            "INSERT INTO permissions (api_key_id, object_type, object_id, permission, classifications)
             VALUES ($1, $2, $3, $4, $5)",
        )
        .bind(master.id)
        .bind(object_type.key())
        .bind(TYPE_ENTRY_ID)
        .bind(i16::from(AccessLevel::ALL.bits()))
        .bind(classifications)
        .execute(&mut *tx)
        .await?;
    }
    sqlx::query("INSERT INTO installation (id, master_key_id) VALUES (1, $1)")
        .bind(master.id)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    tracing::info!(master_key_id = %master.id, "installed: master key created");
    Ok(true)
}
