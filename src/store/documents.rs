//! Document versions, their raw text until processed, and fragments.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use sea_query::{Alias, Expr, ExprTrait, Query, SelectStatement};
use serde::Serialize;
use serde_json::Value;
use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

use crate::time::rfc3339;

/// One document version as the API shows it.
/// Where a document version stands: waiting for a worker, processed, or given up on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DocumentStatus {
    Pending,
    Success,
    Failed,
}

impl DocumentStatus {
    /// The name stored and shown.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Success => "success",
            Self::Failed => "failed",
        }
    }
}

/// A stored status no version can have.
#[derive(Debug, thiserror::Error)]
#[error("unknown document status {0:?}")]
pub struct UnknownStatus(String);

impl TryFrom<String> for DocumentStatus {
    type Error = UnknownStatus;

    fn try_from(text: String) -> Result<Self, UnknownStatus> {
        match text.as_str() {
            "pending" => Ok(Self::Pending),
            "success" => Ok(Self::Success),
            "failed" => Ok(Self::Failed),
            _ => Err(UnknownStatus(text)),
        }
    }
}

#[derive(Debug, Clone, sqlx::FromRow, Serialize)]
pub struct VersionRow {
    pub id: Uuid,
    pub pipeline_id: Uuid,
    pub external_identifier: String,
    pub classification: String,
    pub metadata: Value,
    #[sqlx(try_from = "String")]
    pub status: DocumentStatus,
    /// Microseconds since the Unix epoch; equals `created_at`.
    pub version: i64,
    #[serde(with = "rfc3339")]
    pub created_at: DateTime<Utc>,
    #[serde(with = "rfc3339")]
    pub updated_at: DateTime<Utc>,
    #[serde(with = "rfc3339::option")]
    pub expired_at: Option<DateTime<Utc>>,
}

/// The columns of [`VersionRow`], as a literal for `concat!`.
macro_rules! version_columns {
    () => {
        "id, pipeline_id, external_identifier, classification, metadata, status, version, created_at, updated_at, expired_at"
    };
}

/// The document an external identifier names in a pipeline: its id, its classification and
/// its last version.
pub type Identity = (Uuid, String, i64);

/// The documents that `external_identifiers` already name in a pipeline, in one statement.
pub async fn identities(
    conn: &mut PgConnection,
    pipeline_id: Uuid,
    external_identifiers: &[&str],
) -> Result<HashMap<String, Identity>, sqlx::Error> {
    let rows: Vec<(String, Uuid, String, i64)> = sqlx::query_as(
        "SELECT external_identifier, id, classification, max(version) FROM documents
         WHERE pipeline_id = $1 AND external_identifier = ANY($2)
         GROUP BY external_identifier, id, classification",
    )
    .bind(pipeline_id)
    .bind(external_identifiers)
    .fetch_all(conn)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(identifier, id, classification, version)| {
            (identifier, (id, classification, version))
        })
        .collect())
}

/// Serializes submissions of each external identifier (held until the transaction ends),
/// taking the locks in the order given, in one statement: callers sort them, so that two
/// submissions never wait for each other.
pub async fn lock_identities(
    conn: &mut PgConnection,
    pipeline_id: Uuid,
    external_identifiers: &[&str],
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "SELECT pg_advisory_xact_lock(hashtextextended($1 || '/' || identifier, 0))
         FROM unnest($2::text[]) AS identifier",
    )
    .bind(pipeline_id.to_string())
    .bind(external_identifiers)
    .execute(conn)
    .await?;
    Ok(())
}

/// What a new version stores.
pub struct NewVersion<'a> {
    pub id: Uuid,
    pub version: i64,
    pub created_at: DateTime<Utc>,
    pub pipeline_id: Uuid,
    pub external_identifier: &'a str,
    pub classification: &'a str,
    pub metadata: &'a Value,
    pub text_splitter_id: Option<Uuid>,
    pub expire_older_versions: bool,
    /// The encrypted raw text, or the encrypted bytes of a file.
    pub encrypted_text: &'a [u8],
    /// A file's detected format (`trove_extract::Format::as_str`); `None` for a plain text.
    pub format: Option<&'a str>,
}

/// Inserts `pending` versions, their encrypted texts and the outbox entries of their jobs, in
/// one statement: until `ingest::outbox` removes an entry, the workers' sweep will publish the
/// job again once it is old enough. Returns the versions in the order given.
pub async fn insert(
    conn: &mut PgConnection,
    versions: &[NewVersion<'_>],
) -> Result<Vec<VersionRow>, sqlx::Error> {
    let ids: Vec<Uuid> = versions.iter().map(|v| v.id).collect();
    let numbers: Vec<i64> = versions.iter().map(|v| v.version).collect();
    let created: Vec<DateTime<Utc>> = versions.iter().map(|v| v.created_at).collect();
    let pipelines: Vec<Uuid> = versions.iter().map(|v| v.pipeline_id).collect();
    let identifiers: Vec<&str> = versions.iter().map(|v| v.external_identifier).collect();
    let classifications: Vec<&str> = versions.iter().map(|v| v.classification).collect();
    let metadata: Vec<&Value> = versions.iter().map(|v| v.metadata).collect();
    let splitters: Vec<Option<Uuid>> = versions.iter().map(|v| v.text_splitter_id).collect();
    let expire_older: Vec<bool> = versions.iter().map(|v| v.expire_older_versions).collect();
    let texts: Vec<&[u8]> = versions.iter().map(|v| v.encrypted_text).collect();
    let formats: Vec<Option<&str>> = versions.iter().map(|v| v.format).collect();
    sqlx::query_as(concat!(
        "WITH v AS (
           SELECT * FROM unnest($1::uuid[], $2::int8[], $3::uuid[], $4::text[], $5::text[], $6::jsonb[],
                                $7::uuid[], $8::bool[], $9::timestamptz[], $10::bytea[], $11::text[])
                    WITH ORDINALITY AS u (id, version, pipeline_id, external_identifier, classification,
                                          metadata, text_splitter_id, expire_older_versions, created_at,
                                          text, format, n)
         ), d AS (
           INSERT INTO documents (id, version, pipeline_id, external_identifier, classification, metadata, status,
               text_splitter_id, expire_older_versions, created_at, updated_at)
           SELECT id, version, pipeline_id, external_identifier, classification, metadata, 'pending',
                  text_splitter_id, expire_older_versions, created_at, created_at
           FROM v RETURNING ",
        version_columns!(),
        "), t AS (
           INSERT INTO document_texts (document_id, version, text, format)
           SELECT id, version, text, format FROM v
         ), j AS (
           INSERT INTO job_outbox (document_id, version) SELECT id, version FROM v
         )
         SELECT d.* FROM d JOIN v ON v.id = d.id AND v.version = d.version ORDER BY v.n"
    ))
    .bind(&ids)
    .bind(&numbers)
    .bind(&pipelines)
    .bind(&identifiers)
    .bind(&classifications)
    .bind(&metadata)
    .bind(&splitters)
    .bind(&expire_older)
    .bind(&created)
    .bind(&texts)
    .bind(&formats)
    .fetch_all(&mut *conn)
    .await
}

/// Records the fields of a version whose metadata values the database cannot read as their
/// declared integer type (rule 6 of the filter language; see
/// `trove_query::filter::unconvertible_integer_fields`). The record goes with the version.
pub async fn record_unconvertible(
    conn: &mut PgConnection,
    pipeline_id: Uuid,
    id: Uuid,
    version: i64,
    fields: &[String],
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "INSERT INTO metadata_unconvertible (pipeline_id, field, document_id, version)
         SELECT $1, field, $2, $3 FROM unnest($4::text[]) AS field",
    )
    .bind(pipeline_id)
    .bind(id)
    .bind(version)
    .bind(fields)
    .execute(conn)
    .await?;
    Ok(())
}

/// Fails with the database's own conversion error (`invalid input syntax for type bigint:
/// "5.0"`, `value "…" is out of range for type bigint`) when a stored version of the pipeline
/// holds, in one of `fields`, a value recorded as not convertible: the cast runs on that
/// stored value.
pub async fn refuse_unconvertible(
    pool: &PgPool,
    pipeline_id: Uuid,
    fields: &[String],
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "SELECT CAST(d.metadata ->> u.field AS bigint)
         FROM metadata_unconvertible AS u
         JOIN documents AS d ON d.id = u.document_id AND d.version = u.version
         WHERE u.pipeline_id = $1 AND u.field = ANY($2)
         LIMIT 1",
    )
    .bind(pipeline_id)
    .bind(fields)
    .fetch_optional(pool)
    .await?;
    Ok(())
}

/// Marks a version still `pending` `failed` (its job could not be queued) and drops its raw
/// text and the outbox entry of its job. Returns whether it was pending: a version a worker
/// has taken already had its job delivered, whatever the publisher was told.
pub async fn mark_failed(pool: &PgPool, id: Uuid, version: i64) -> Result<bool, sqlx::Error> {
    let mut tx = pool.begin().await?;
    let updated = sqlx::query(
        "UPDATE documents SET status = 'failed', updated_at = now()
         WHERE id = $1 AND version = $2 AND status = 'pending'",
    )
    .bind(id)
    .bind(version)
    .execute(&mut *tx)
    .await?
    .rows_affected();
    if updated == 0 {
        return Ok(false);
    }
    sqlx::query("DELETE FROM document_texts WHERE document_id = $1 AND version = $2")
        .bind(id)
        .bind(version)
        .execute(&mut *tx)
        .await?;
    sqlx::query("DELETE FROM job_outbox WHERE document_id = $1 AND version = $2")
        .bind(id)
        .bind(version)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(true)
}

/// Why versions of a document failed, where a reason is known: `(version, reason)`.
pub async fn status_reasons(
    pool: &PgPool,
    id: Uuid,
    versions: &[i64],
) -> Result<HashMap<i64, String>, sqlx::Error> {
    let rows: Vec<(i64, String)> = sqlx::query_as(
        "SELECT version, status_reason FROM documents
         WHERE id = $1 AND version = ANY($2) AND status_reason IS NOT NULL",
    )
    .bind(id)
    .bind(versions)
    .fetch_all(pool)
    .await?;
    Ok(rows.into_iter().collect())
}

/// Selects versions of a document: `version` (exact), `as_of` (as it was then), or current.
pub async fn read(
    pool: &PgPool,
    pipeline_id: Uuid,
    id: Uuid,
    version: Option<i64>,
    as_of: Option<i64>,
) -> Result<Vec<VersionRow>, sqlx::Error> {
    match (version, as_of) {
        (Some(version), _) => {
            sqlx::query_as(concat!(
                "SELECT ",
                version_columns!(),
                " FROM documents WHERE pipeline_id = $1 AND id = $2 AND version = $3"
            ))
            .bind(pipeline_id)
            .bind(id)
            .bind(version)
            .fetch_all(pool)
            .await
        }
        (None, Some(as_of)) => {
            // As it was at `as_of`: created by then and not yet expired then.
            sqlx::query_as(concat!(
                "SELECT ",
                version_columns!(),
                " FROM documents WHERE pipeline_id = $1 AND id = $2 AND version <= $3
                  AND (expired_at IS NULL OR expired_at > to_timestamp($3::double precision / 1000000))
                  ORDER BY version DESC"
            ))
            .bind(pipeline_id)
            .bind(id)
            .bind(as_of)
            .fetch_all(pool)
            .await
        }
        (None, None) => {
            sqlx::query_as(concat!(
                "SELECT ",
                version_columns!(),
                " FROM documents WHERE pipeline_id = $1 AND id = $2 AND expired_at IS NULL ORDER BY version DESC"
            ))
            .bind(pipeline_id)
            .bind(id)
            .fetch_all(pool)
            .await
        }
    }
}

/// Every version of a document, newest first.
pub async fn versions(
    pool: &PgPool,
    pipeline_id: Uuid,
    id: Uuid,
) -> Result<Vec<VersionRow>, sqlx::Error> {
    sqlx::query_as(concat!(
        "SELECT ",
        version_columns!(),
        " FROM documents WHERE pipeline_id = $1 AND id = $2 ORDER BY version DESC"
    ))
    .bind(pipeline_id)
    .bind(id)
    .fetch_all(pool)
    .await
}

/// Expires every current version of a document (and its fragments); returns those expired.
pub async fn expire(
    pool: &PgPool,
    pipeline_id: Uuid,
    id: Uuid,
) -> Result<Vec<VersionRow>, sqlx::Error> {
    let mut tx = pool.begin().await?;
    let rows: Vec<VersionRow> = sqlx::query_as(concat!(
        "UPDATE documents SET expired_at = now(), updated_at = now()
         WHERE pipeline_id = $1 AND id = $2 AND expired_at IS NULL RETURNING ",
        version_columns!()
    ))
    .bind(pipeline_id)
    .bind(id)
    .fetch_all(&mut *tx)
    .await?;
    let expired: Vec<Uuid> = sqlx::query_scalar(
        "UPDATE fragments SET expired_at = now() WHERE document_id = $1 AND expired_at IS NULL
         RETURNING id",
    )
    .bind(id)
    .fetch_all(&mut *tx)
    .await?;
    let associations: Vec<Uuid> =
        sqlx::query_scalar("SELECT id FROM vector_embeddings WHERE pipeline_id = $1")
            .bind(pipeline_id)
            .fetch_all(&mut *tx)
            .await?;
    for vector_embedding_id in associations {
        super::vectors::expire(&mut tx, vector_embedding_id, &expired).await?;
    }
    tx.commit().await?;
    let mut rows = rows;
    rows.sort_by_key(|row| std::cmp::Reverse(row.version));
    Ok(rows)
}

/// Deletes every version, fragment, vector and raw text of a document.
///
/// The pipeline's row is locked first (shared), as a pipeline delete locks it (exclusively)
/// before dropping the vector table: otherwise the pipeline delete could hold the vector
/// table while this delete holds the fragments whose vectors it removes, each waiting for the
/// other.
pub async fn delete(pool: &PgPool, pipeline_id: Uuid, id: Uuid) -> Result<u64, sqlx::Error> {
    let mut tx = pool.begin().await?;
    sqlx::query("SELECT 1 FROM pipelines WHERE id = $1 FOR KEY SHARE")
        .bind(pipeline_id)
        .execute(&mut *tx)
        .await?;
    sqlx::query("DELETE FROM fragments WHERE document_id = $1 AND pipeline_id = $2")
        .bind(id)
        .bind(pipeline_id)
        .execute(&mut *tx)
        .await?;
    let deleted = sqlx::query("DELETE FROM documents WHERE id = $1 AND pipeline_id = $2")
        .bind(id)
        .bind(pipeline_id)
        .execute(&mut *tx)
        .await?;
    sqlx::query("DELETE FROM permissions WHERE object_type = 'documents' AND object_id = $1")
        .bind(id)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(deleted.rows_affected())
}

/// The base of the document list: current versions of one pipeline.
pub fn list_base(pipeline_id: Uuid) -> SelectStatement {
    let t = Alias::new("documents");
    let mut select = Query::select();
    select
        .from(t.clone())
        .columns(
            [
                "id",
                "pipeline_id",
                "external_identifier",
                "classification",
                "metadata",
                "status",
                "version",
                "created_at",
                "updated_at",
                "expired_at",
            ]
            .map(|c| (t.clone(), Alias::new(c))),
        )
        .and_where(Expr::col((t.clone(), Alias::new("pipeline_id"))).eq(pipeline_id))
        .and_where(Expr::col((t, Alias::new("expired_at"))).is_null());
    select
}

/// A fragment as the API shows it (text decrypted by the caller).
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct FragmentRow {
    pub id: Uuid,
    pub document_id: Uuid,
    pub version: i64,
    pub order_id: i32,
    pub classification: String,
    pub metadata: Value,
    pub content: Vec<u8>,
    pub expired_at: Option<DateTime<Utc>>,
}

/// Fragments by id (unknown ids omitted), in any order.
pub async fn fragments_by_id(
    pool: &PgPool,
    pipeline_id: Uuid,
    ids: &[Uuid],
) -> Result<Vec<FragmentRow>, sqlx::Error> {
    sqlx::query_as(
        "SELECT id, document_id, version, order_id, classification, metadata, content, expired_at
         FROM fragments WHERE pipeline_id = $1 AND id = ANY($2)",
    )
    .bind(pipeline_id)
    .bind(ids)
    .fetch_all(pool)
    .await
}

/// The base of the fragment list of one document version.
pub fn fragment_list_base(document_id: Uuid, version: i64) -> SelectStatement {
    let t = Alias::new("fragments");
    let mut select = Query::select();
    select
        .from(t.clone())
        .columns(
            [
                "id",
                "document_id",
                "version",
                "order_id",
                "classification",
                "metadata",
                "content",
                "expired_at",
            ]
            .map(|c| (t.clone(), Alias::new(c))),
        )
        .and_where(Expr::col((t.clone(), Alias::new("document_id"))).eq(document_id))
        .and_where(Expr::col((t, Alias::new("version"))).eq(version));
    select
}

/// Embeddings of fragments, from an association's vector table.
pub async fn embeddings(
    pool: &PgPool,
    vector_embedding_id: Uuid,
    fragment_ids: &[Uuid],
) -> Result<Vec<(Uuid, Vec<f32>)>, sqlx::Error> {
    let table = super::vectors::table_name(vector_embedding_id);
    // The table name is rendered from a UUID (see `vectors`); the ids are bound.
    let sql = format!("SELECT fragment_id, embedding FROM {table} WHERE fragment_id = ANY($1)");
    let rows: Vec<(Uuid, pgvector::Vector)> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
        .bind(fragment_ids)
        .fetch_all(pool)
        .await?;
    Ok(rows
        .into_iter()
        .map(|(id, vector)| (id, vector.to_vec()))
        .collect())
}
