//! Vector storage: one table per pipeline–model association, with the model's fixed dimension
//! and an HNSW index, so that an approximate search scans only that pipeline's vectors.
//!
//! DDL cannot bind identifiers or type modifiers. The only values that reach the text below
//! are a UUID rendered as 32 hex digits and an integer dimension checked to be 1..=2000, so no
//! input can change the statement's shape.

use sqlx::{AssertSqlSafe, PgConnection};
use uuid::Uuid;

/// The name of an association's vector table.
pub fn table_name(vector_embedding_id: Uuid) -> String {
    format!("vectors_{}", vector_embedding_id.simple())
}

/// Creates the table and its HNSW index (cosine distance, the default strategy).
pub async fn create_table(
    conn: &mut PgConnection,
    vector_embedding_id: Uuid,
    dimensions: i32,
) -> Result<(), sqlx::Error> {
    debug_assert!(
        (1..=2000).contains(&dimensions),
        "dimensions are validated at model creation"
    );
    let dimensions = dimensions.clamp(1, 2000);
    let table = table_name(vector_embedding_id);
    sqlx::raw_sql(AssertSqlSafe(format!(
        "CREATE TABLE {table} (
            fragment_id uuid PRIMARY KEY REFERENCES fragments (id) ON DELETE CASCADE,
            embedding   vector({dimensions}) NOT NULL
        );
        CREATE INDEX {table}_hnsw ON {table} USING hnsw (embedding vector_cosine_ops);"
    )))
    .execute(conn)
    .await?;
    Ok(())
}

/// Drops an association's table (with its index).
pub async fn drop_table(
    conn: &mut PgConnection,
    vector_embedding_id: Uuid,
) -> Result<(), sqlx::Error> {
    let table = table_name(vector_embedding_id);
    sqlx::raw_sql(AssertSqlSafe(format!("DROP TABLE IF EXISTS {table}")))
        .execute(conn)
        .await?;
    Ok(())
}

/// Inserts the vectors of fragments in one statement: `flat` holds `ids.len()` vectors of
/// `dimensions` values each, back to back, bound as one `real[]`.
pub async fn insert(
    conn: &mut PgConnection,
    vector_embedding_id: Uuid,
    dimensions: i32,
    ids: &[Uuid],
    flat: &[f32],
) -> Result<(), sqlx::Error> {
    debug_assert_eq!(
        flat.len(),
        ids.len() * usize::try_from(dimensions).unwrap_or(0)
    );
    let table = table_name(vector_embedding_id);
    sqlx::query(AssertSqlSafe(format!(
        "INSERT INTO {table} (fragment_id, embedding)
         SELECT ($1::uuid[])[i], (($2::real[])[(i - 1) * $3 + 1 : i * $3])::vector
         FROM generate_series(1, cardinality($1::uuid[])) AS i"
    )))
    .bind(ids)
    .bind(flat)
    .bind(dimensions)
    .execute(conn)
    .await?;
    Ok(())
}
