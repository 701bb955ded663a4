//! Installation: once, at the first `trove serve` on a database, in one transaction.

use serde_json::{Value, json};
use sqlx::PgPool;
use uuid::Uuid;

use crate::access::{AccessLevel, ObjectType, TYPE_ENTRY_ID};
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

/// What installation seeds as the `default` embedding model.
#[derive(Debug, Clone, PartialEq)]
pub enum DefaultEmbedding {
    /// `local` / `all-MiniLM-L6-v2`, when that model loads from `TROVE_MODELS_DIR`.
    Local { dimensions: i32 },
    /// `hash` / `feature-hash` / 384 dimensions otherwise.
    Hash,
}

/// Whether the database holds an installation record.
pub async fn is_installed(pool: &PgPool) -> Result<bool, InstallError> {
    Ok(
        sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM installation)")
            .fetch_one(pool)
            .await?,
    )
}

/// Installs if the database has no installation record yet. Returns whether it installed.
pub async fn install_if_needed(
    pool: &PgPool,
    master: Option<&MasterKey>,
    default_embedding: DefaultEmbedding,
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
    seed_providers_and_defaults(&mut tx, &default_embedding).await?;
    sqlx::query("INSERT INTO installation (id, master_key_id) VALUES (1, $1)")
        .bind(master.id)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    match default_embedding {
        DefaultEmbedding::Local { .. } => {
            tracing::info!("installed: default embedding model is local all-MiniLM-L6-v2")
        }
        DefaultEmbedding::Hash => tracing::info!(
            "installed: default embedding model is hash feature-hash (384 dimensions); all-MiniLM-L6-v2 did not load from TROVE_MODELS_DIR"
        ),
    }
    tracing::info!(master_key_id = %master.id, "installed: master key created");
    Ok(true)
}

/// Parameter description of a provider: name → `{type, required, default, secret}`.
fn parameter(ty: &str, required: bool, default: Value, secret: bool) -> Value {
    json!({"type": ty, "required": required, "default": default, "secret": secret})
}

/// Seeds the read-only providers, the three text splitters and the `default` embedding model.
async fn seed_providers_and_defaults(
    tx: &mut sqlx::PgConnection,
    default_embedding: &DefaultEmbedding,
) -> Result<(), sqlx::Error> {
    seed_embedding_providers(tx).await?;
    seed_text_splitters(tx).await?;
    seed_default_embedding_model(tx, default_embedding).await
}

/// The embedding providers `local`, `openai` and `hash`, with their parameter descriptions.
async fn seed_embedding_providers(tx: &mut sqlx::PgConnection) -> Result<(), sqlx::Error> {
    let embedding_providers = [
        (
            "local",
            "Local transformer models from TROVE_MODELS_DIR (mean pooling, L2-normalised)",
            json!({}),
        ),
        (
            "openai",
            "Any OpenAI-compatible /v1/embeddings server",
            json!({
                "base_url": parameter("string", true, Value::Null, false),
                "api_key": parameter("string", true, Value::Null, true),
                "dimensions": parameter("integer", false, Value::Null, false),
            }),
        ),
        (
            "hash",
            "Deterministic feature hashing of normalised tokens (air-gapped installs, tests)",
            json!({"dimensions": parameter("integer", false, json!(384), false)}),
        ),
    ];
    for (name, description, parameters) in embedding_providers {
        sqlx::query("INSERT INTO embedding_providers (id, name, description, parameters) VALUES ($1, $2, $3, $4)")
            .bind(Uuid::new_v4())
            .bind(name)
            .bind(description)
            .bind(parameters)
            .execute(&mut *tx)
            .await?;
    }
    Ok(())
}

/// The text splitter providers `recursive-character`, `character` and `token`, and one text
/// splitter of each, named after it, with its default parameters.
async fn seed_text_splitters(tx: &mut sqlx::PgConnection) -> Result<(), sqlx::Error> {
    let splitter_providers = [
        (
            "recursive-character",
            "Recursive character splitting (LangChain RecursiveCharacterTextSplitter semantics)",
            json!({
                "separators": parameter("array", false, json!(["\n\n", "\n", " ", ""]), false),
                "chunk_size": parameter("integer", false, json!(1000), false),
                "chunk_overlap": parameter("integer", false, json!(200), false),
            }),
            json!({"separators": ["\n\n", "\n", " ", ""], "chunk_size": 1000, "chunk_overlap": 200}),
        ),
        (
            "character",
            "Split on one separator, merge up to chunk_size with overlap",
            json!({
                "separator": parameter("string", false, json!("\n\n"), false),
                "chunk_size": parameter("integer", false, json!(1000), false),
                "chunk_overlap": parameter("integer", false, json!(200), false),
            }),
            json!({"separator": "\n\n", "chunk_size": 1000, "chunk_overlap": 200}),
        ),
        (
            "token",
            "Windows of chunk_size tokens stepping chunk_size - chunk_overlap",
            json!({
                "chunk_size": parameter("integer", false, json!(256), false),
                "chunk_overlap": parameter("integer", false, json!(32), false),
                "tokenizer": parameter("string", false, json!("whitespace"), false),
            }),
            json!({"chunk_size": 256, "chunk_overlap": 32, "tokenizer": "whitespace"}),
        ),
    ];
    for (name, description, parameters, splitter_parameters) in splitter_providers {
        sqlx::query("INSERT INTO text_splitter_providers (id, name, description, parameters) VALUES ($1, $2, $3, $4)")
            .bind(Uuid::new_v4())
            .bind(name)
            .bind(description)
            .bind(parameters)
            .execute(&mut *tx)
            .await?;
        sqlx::query("INSERT INTO text_splitters (id, name, description, provider, parameters) VALUES ($1, $2, NULL, $2, $3)")
            .bind(Uuid::new_v4())
            .bind(name)
            .bind(splitter_parameters)
            .execute(&mut *tx)
            .await?;
    }
    Ok(())
}

/// The `default` embedding model: `local` all-MiniLM-L6-v2 when it loaded, else `hash`.
async fn seed_default_embedding_model(
    tx: &mut sqlx::PgConnection,
    default_embedding: &DefaultEmbedding,
) -> Result<(), sqlx::Error> {
    let (provider, model_name, parameters, dimensions) = match default_embedding {
        DefaultEmbedding::Local { dimensions } => {
            ("local", "all-MiniLM-L6-v2", json!({}), *dimensions)
        }
        DefaultEmbedding::Hash => ("hash", "feature-hash", json!({"dimensions": 384}), 384),
    };
    sqlx::query(
        "INSERT INTO embedding_models (id, name, description, provider, model_name, parameters, dimensions)
         VALUES ($1, 'default', NULL, $2, $3, $4, $5)",
    )
    .bind(Uuid::new_v4())
    .bind(provider)
    .bind(model_name)
    .bind(parameters)
    .bind(dimensions)
    .execute(&mut *tx)
    .await?;
    Ok(())
}
