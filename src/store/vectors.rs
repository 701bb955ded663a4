//! Vector storage: one table per pipeline–model association, with the model's fixed dimension
//! and an HNSW index, so that an approximate search scans only that pipeline's vectors.
//!
//! DDL cannot bind identifiers or type modifiers. The only values that reach the text below
//! are a UUID rendered as 32 hex digits and an integer dimension checked to be 1..=2000, so no
//! input can change the statement's shape.

use pgvector::Vector;
use sqlx::{AssertSqlSafe, PgConnection};
use uuid::Uuid;

pub use crate::config::HnswParams;

/// The name of an association's vector table.
pub fn table_name(vector_embedding_id: Uuid) -> String {
    format!("vectors_{}", vector_embedding_id.simple())
}

/// The DDL of an association's HNSW index (cosine distance, the default strategy) on `table`.
pub fn hnsw_index_sql(table: &str, params: HnswParams) -> String {
    format!(
        "CREATE INDEX {table}_hnsw ON {table} USING hnsw (embedding vector_cosine_ops) \
         WITH (m = {}, ef_construction = {})",
        params.m(),
        params.ef_construction()
    )
}

/// Creates the table and its HNSW index.
pub async fn create_table(
    conn: &mut PgConnection,
    vector_embedding_id: Uuid,
    dimensions: i32,
    index: HnswParams,
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
        {};",
        hnsw_index_sql(&table, index)
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

/// How far from 1 a vector's length may be and still count as unit length (a model's
/// normalised output in `f32` is within ~1e-6).
const UNIT_TOLERANCE: f64 = 1e-4;

/// Whether every vector of `flat` (vectors of `dimensions` values, back to back) has unit
/// length.
pub fn all_unit(flat: &[f32], dimensions: usize) -> bool {
    dimensions > 0
        && flat.chunks(dimensions).all(|v| {
            let norm = v
                .iter()
                .map(|x| f64::from(*x) * f64::from(*x))
                .sum::<f64>()
                .sqrt();
            (norm - 1.0).abs() <= UNIT_TOLERANCE
        })
}

/// Inserts the vectors of fragments in one statement: `flat` holds `ids.len()` vectors of
/// `dimensions` values each, back to back, bound as one `vector[]` (pgvector's binary form).
/// Vectors that are not of unit length clear the association's `unit_vectors` flag (in the
/// same transaction).
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
    let width = usize::try_from(dimensions).unwrap_or(0).max(1);
    let vectors: Vec<Vector> = flat
        .chunks(width)
        .map(|values| Vector::from(values.to_vec()))
        .collect();
    sqlx::query(AssertSqlSafe(format!(
        "INSERT INTO {table} (fragment_id, embedding)
         SELECT ($1::uuid[])[i], ($2::vector[])[i]
         FROM generate_series(1, cardinality($1::uuid[])) AS i"
    )))
    .bind(ids)
    .bind(&vectors)
    .execute(&mut *conn)
    .await?;
    if !all_unit(flat, usize::try_from(dimensions).unwrap_or(0)) {
        sqlx::query(
            "UPDATE vector_embeddings SET unit_vectors = false WHERE id = $1 AND unit_vectors",
        )
        .bind(vector_embedding_id)
        .execute(&mut *conn)
        .await?;
    }
    Ok(())
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "tests fail loudly")]
mod tests {
    use super::{HnswParams, all_unit, hnsw_index_sql};

    #[test]
    fn index_parameters_keep_to_pgvector_bounds() {
        assert_eq!(HnswParams::new(10, 64), Ok(HnswParams::DEFAULT));
        assert!(HnswParams::new(8, 16).is_ok());
        assert!(HnswParams::new(1, 64).is_err());
        assert!(HnswParams::new(101, 1000).is_err());
        assert!(HnswParams::new(16, 31).is_err());
        assert!(HnswParams::new(2, 3).is_err());
        assert!(HnswParams::new(16, 1001).is_err());
        assert_eq!(
            hnsw_index_sql("vectors_x", HnswParams::new(12, 40).unwrap()),
            "CREATE INDEX vectors_x_hnsw ON vectors_x USING hnsw (embedding vector_cosine_ops) \
             WITH (m = 12, ef_construction = 40)"
        );
    }

    #[test]
    fn unit_length_is_checked_per_vector() {
        let s = 0.5_f32.sqrt();
        assert!(all_unit(&[1.0, 0.0, s, s], 2));
        assert!(!all_unit(&[1.0, 0.0, 1.0, 1.0], 2));
        assert!(!all_unit(&[0.0, 0.0], 2));
        assert!(all_unit(&[], 2));
        assert!(!all_unit(&[1.0], 0));
    }
}
