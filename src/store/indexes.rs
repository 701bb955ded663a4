//! Metadata indexes: a row per index and an index on `fragments` over the pipeline id and the
//! expression the metadata filter compiles for that field's declared type. The pipeline id is
//! a key column rather than a partial-index predicate, so statements that bind the pipeline id
//! can use the index under generic plans too.

use chrono::{DateTime, Utc};
use sea_orm::{ColumnTrait, DbErr, EntityTrait, QueryFilter};
use sea_query::{Alias, Expr, ExprTrait, Query, SelectStatement};
use serde::Serialize;
use sqlx::{AssertSqlSafe, PgConnection};
use uuid::Uuid;

use super::Pool;
use super::entities::pipeline_index;
use crate::metadata_schema::{self, is_identifier};
use crate::time::rfc3339;

/// A metadata index.
#[derive(Debug, Clone, sqlx::FromRow, Serialize)]
pub struct IndexRow {
    pub id: Uuid,
    pub pipeline_id: Uuid,
    pub field: String,
    #[serde(with = "rfc3339")]
    pub created_at: DateTime<Utc>,
}

fn index_name(id: Uuid) -> String {
    format!("pidx_{}", id.simple())
}

/// The SQL expression of a field of a declared type, as the metadata filter compiles it
/// (`trove_query::filter::typed_field_sql` over the unqualified `metadata` column), so the
/// planner matches one to the other. It never fails, whatever JSON a row holds, so an index
/// on one pipeline's field can cover every row of `fragments`.
pub fn typed_field_expression(field: &str, declared_type: &str) -> Option<String> {
    // Field names are identifiers (checked by the schema rules), so quoting them in a string
    // literal cannot break out of it.
    if !is_identifier(field) {
        return None;
    }
    let declared = trove_query::filter::DeclaredType::from_name(declared_type)?;
    trove_query::filter::typed_field_sql("metadata", field, declared).map(|sql| format!("({sql})"))
}

/// Key of the advisory lock under which the objects Trove keeps on declared fields (statistics,
/// indexes) are created and dropped (two pipelines declaring the same field at once would
/// otherwise race on the object's name).
const FIELD_OBJECTS_LOCK: i64 = 0x7472_6f76_655f_7374;

/// The prefix of the indexes Trove keeps on declared fields (see [`sync_declared_field_indexes`]).
const DECLARED_INDEX_PREFIX: &str = "mfidx_";

/// A declared top-level field of a schema that a filter can compare (not an object), with the
/// typed expression the filter compiles for it.
struct DeclaredField {
    name: String,
    /// A digest of the field and its declared type: the objects Trove keeps on the field are
    /// named from it, one per (type, field), shared by every pipeline declaring it so.
    digest: String,
    expression: String,
    /// The schema asks for the field's index (`metadata_schema::indexed`).
    indexed: bool,
}

fn declared_fields(schema: &serde_json::Value) -> Vec<DeclaredField> {
    use sha2::{Digest, Sha256};
    metadata_schema::properties(schema)
        .iter()
        .filter_map(|(field, property)| {
            let declared_type = metadata_schema::property_type(property)?;
            let expression = typed_field_expression(field, declared_type)?;
            let digest = Sha256::digest(format!("{declared_type}:{field}").as_bytes());
            Some(DeclaredField {
                name: field.clone(),
                digest: digest.iter().take(12).map(|b| format!("{b:02x}")).collect(),
                expression,
                indexed: metadata_schema::indexed(schema, property),
            })
        })
        .collect()
}

async fn lock_field_objects(conn: &mut PgConnection) -> Result<(), sqlx::Error> {
    sqlx::query("SELECT pg_advisory_xact_lock($1)")
        .bind(FIELD_OBJECTS_LOCK)
        .execute(conn)
        .await?;
    Ok(())
}

/// Creates the planner's statistics on the typed expression of every declared top-level
/// field of `schema` (`CREATE STATISTICS … ON (expression) FROM fragments`), where they do not
/// exist yet. With them the planner estimates a filter on a field without a metadata index
/// from the data (its values' frequencies and histogram) instead of a fixed guess (0.5 % for
/// an equality), which decides whether a filtered vector search scans exactly
/// (`retrieval::cost::choose`). They are filled by the next `ANALYZE` of `fragments`.
pub async fn ensure_field_statistics(
    conn: &mut PgConnection,
    schema: &serde_json::Value,
) -> Result<(), sqlx::Error> {
    let fields = declared_fields(schema);
    if fields.is_empty() {
        return Ok(());
    }
    lock_field_objects(conn).await?;
    for field in fields {
        // The name is rendered from a digest and the expression comes from
        // `typed_field_expression`: neither can alter the statement.
        sqlx::raw_sql(AssertSqlSafe(format!(
            "CREATE STATISTICS IF NOT EXISTS mstat_{} ON {} FROM fragments",
            field.digest, field.expression
        )))
        .execute(&mut *conn)
        .await?;
    }
    Ok(())
}

/// Makes the indexes Trove keeps on declared fields match the pipelines' schemas: one index on
/// `fragments` per (type, field) that some pipeline declares and indexes (every declared
/// top-level field that is not an object, unless the schema says `"x-trove-index": false`:
/// `metadata_schema::indexed`), over the pipeline id and the field's typed expression,
/// holding the fragments where that expression has a value (so fragments of pipelines without
/// the field cost it only the test); those no pipeline asks for any more are dropped. A filter
/// on such a field then reads the fragments it admits through the index, as through a metadata
/// index. In the caller's transaction, without statement timeout for the rest of it: building
/// an index reads every fragment, and inserts into `fragments` wait for it.
pub async fn sync_declared_field_indexes(conn: &mut PgConnection) -> Result<(), sqlx::Error> {
    lock_field_objects(conn).await?;
    let schemas: Vec<serde_json::Value> =
        sqlx::query_scalar("SELECT metadata_schema FROM pipelines")
            .fetch_all(&mut *conn)
            .await?;
    let wanted: std::collections::BTreeMap<String, String> = schemas
        .iter()
        .flat_map(declared_fields)
        .filter(|field| field.indexed)
        .map(|field| {
            (
                format!("{DECLARED_INDEX_PREFIX}{}", field.digest),
                field.expression,
            )
        })
        .collect();
    let existing: Vec<String> = sqlx::query_scalar(
        "SELECT i.relname::text FROM pg_index AS x
         JOIN pg_class AS i ON i.oid = x.indexrelid
         WHERE x.indrelid = 'fragments'::regclass AND starts_with(i.relname::text, $1)",
    )
    .bind(DECLARED_INDEX_PREFIX)
    .fetch_all(&mut *conn)
    .await?;
    drop_unwanted(conn, &existing, &wanted).await?;
    // Names are the prefix and a digest, expressions come from `typed_field_expression`:
    // nothing can alter the statements.
    for (name, expression) in wanted.iter().filter(|(name, _)| !existing.contains(name)) {
        sqlx::raw_sql(AssertSqlSafe(format!(
            "CREATE INDEX IF NOT EXISTS {name} ON fragments (pipeline_id, {expression}) \
             WHERE {expression} IS NOT NULL"
        )))
        .execute(&mut *conn)
        .await?;
    }
    Ok(())
}

/// Lifts the statement timeout for the rest of the caller's transaction (building an index
/// reads a whole table) and drops the indexes of `existing` that `wanted` does not name. Names
/// read back from the catalog reach the statement only if they are plain identifiers.
async fn drop_unwanted<V>(
    conn: &mut PgConnection,
    existing: &[String],
    wanted: &std::collections::BTreeMap<String, V>,
) -> Result<(), sqlx::Error> {
    sqlx::query("SET LOCAL statement_timeout = 0")
        .execute(&mut *conn)
        .await?;
    let stale = existing.iter().filter(|name| {
        !wanted.contains_key(*name) && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
    });
    for name in stale {
        sqlx::raw_sql(AssertSqlSafe(format!("DROP INDEX IF EXISTS {name}")))
            .execute(&mut *conn)
            .await?;
    }
    Ok(())
}

/// The prefix of the indexes on the declared fields of associations' vector tables (see
/// [`sync_vector_field_indexes`]).
const VECTOR_FIELD_INDEX_PREFIX: &str = "vf_";

/// The associations (all, or `pipeline_id`'s) with their pipelines' schemas and the fields of
/// their metadata indexes.
#[derive(sqlx::FromRow)]
struct AssociationFields {
    vector_embedding_id: Uuid,
    metadata_schema: serde_json::Value,
    indexed_fields: Vec<String>,
}

/// Makes the indexes on the live rows of each association's vector table (all of them, or
/// those of `pipeline_id`) match its pipeline: one per declared field that the pipeline's
/// schema indexes ([`sync_declared_field_indexes`]) or a metadata index of the pipeline names,
/// over the field's typed expression, holding the rows where it has a value. An exact search
/// reads the vectors its filter admits through them (`trove_query::search::nearest`). Those no
/// longer asked for are dropped. In the caller's transaction, without statement timeout for the
/// rest of it.
pub async fn sync_vector_field_indexes(
    conn: &mut PgConnection,
    pipeline_id: Option<Uuid>,
) -> Result<(), sqlx::Error> {
    lock_field_objects(conn).await?;
    let associations: Vec<AssociationFields> = sqlx::query_as(
        "SELECT ve.id AS vector_embedding_id, p.metadata_schema,
                ARRAY(SELECT i.field FROM pipeline_indexes i WHERE i.pipeline_id = p.id) AS indexed_fields
         FROM vector_embeddings ve JOIN pipelines p ON p.id = ve.pipeline_id
         WHERE $1::uuid IS NULL OR p.id = $1",
    )
    .bind(pipeline_id)
    .fetch_all(&mut *conn)
    .await?;
    let mut wanted = std::collections::BTreeMap::new();
    for association in &associations {
        let table = super::vectors::table_name(association.vector_embedding_id);
        for field in declared_fields(&association.metadata_schema) {
            if field.indexed || association.indexed_fields.contains(&field.name) {
                let name = format!(
                    "{VECTOR_FIELD_INDEX_PREFIX}{}_{}",
                    association.vector_embedding_id.simple(),
                    field.digest
                );
                wanted.insert(name, (table.clone(), field.expression));
            }
        }
    }
    let tables: Vec<String> = associations
        .iter()
        .map(|a| super::vectors::table_name(a.vector_embedding_id))
        .collect();
    let existing: Vec<String> = sqlx::query_scalar(
        "SELECT i.relname::text FROM pg_index AS x
         JOIN pg_class AS i ON i.oid = x.indexrelid
         JOIN pg_class AS t ON t.oid = x.indrelid
         WHERE t.relname::text = ANY($1) AND starts_with(i.relname::text, $2)",
    )
    .bind(&tables)
    .bind(VECTOR_FIELD_INDEX_PREFIX)
    .fetch_all(&mut *conn)
    .await?;
    drop_unwanted(conn, &existing, &wanted).await?;
    // Names are the prefix, a UUID and a digest, tables are rendered from UUIDs and expressions
    // come from `typed_field_expression`: nothing can alter the statements.
    let mut grown = std::collections::BTreeSet::new();
    for (name, (table, expression)) in wanted.iter().filter(|(name, _)| !existing.contains(name)) {
        sqlx::raw_sql(AssertSqlSafe(format!(
            "CREATE INDEX IF NOT EXISTS {name} ON {table} ({expression}) \
             WHERE live AND {expression} IS NOT NULL"
        )))
        .execute(&mut *conn)
        .await?;
        grown.insert(table);
    }
    // The planner estimates a condition on an index's expression from statistics that only an
    // analysis of the table gathers: without them a 1 % filter on two fields of 59,833
    // vectors took 7.9 ms, against 2.3 with them.
    for table in grown {
        sqlx::raw_sql(AssertSqlSafe(format!("ANALYZE {table}")))
            .execute(&mut *conn)
            .await?;
    }
    Ok(())
}

impl From<pipeline_index::Model> for IndexRow {
    fn from(m: pipeline_index::Model) -> Self {
        Self {
            id: m.id,
            pipeline_id: m.pipeline_id,
            field: m.field,
            created_at: m.created_at,
        }
    }
}

/// Creates the index row, the expression index on `fragments` and the one on the live rows of
/// the pipeline's vector table ([`sync_vector_field_indexes`]), in one transaction (without
/// statement timeout for the rest of it).
pub async fn create(
    db: &Pool,
    id: Uuid,
    pipeline_id: Uuid,
    field: &str,
    expression: &str,
) -> Result<IndexRow, sqlx::Error> {
    let mut tx = db.begin().await?;
    let row: IndexRow = sqlx::query_as(
        "INSERT INTO pipeline_indexes (id, pipeline_id, field) VALUES ($1, $2, $3)
         RETURNING id, pipeline_id, field, created_at",
    )
    .bind(id)
    .bind(pipeline_id)
    .bind(field)
    .fetch_one(&mut *tx)
    .await?;
    // Building the index reads every fragment: it may take longer than the session's
    // statement timeout, which is lifted until the transaction ends.
    sqlx::query("SET LOCAL statement_timeout = 0")
        .execute(&mut *tx)
        .await?;
    // The name is rendered from a UUID, the expression comes from `typed_field_expression`:
    // neither can alter the statement.
    let name = index_name(id);
    sqlx::raw_sql(AssertSqlSafe(format!(
        "CREATE INDEX {name} ON fragments (pipeline_id, ({expression}))"
    )))
    .execute(&mut *tx)
    .await?;
    sync_vector_field_indexes(&mut tx, Some(pipeline_id)).await?;
    tx.commit().await?;
    Ok(row)
}

/// Drops an index and deletes its row, and the index on the pipeline's vector table that no
/// longer has a reason to be (the caller's transaction).
pub async fn drop_index(conn: &mut PgConnection, id: Uuid) -> Result<(), sqlx::Error> {
    let name = index_name(id);
    sqlx::raw_sql(AssertSqlSafe(format!("DROP INDEX IF EXISTS {name}")))
        .execute(&mut *conn)
        .await?;
    let pipeline_id: Option<Uuid> =
        sqlx::query_scalar("DELETE FROM pipeline_indexes WHERE id = $1 RETURNING pipeline_id")
            .bind(id)
            .fetch_optional(&mut *conn)
            .await?;
    if let Some(pipeline_id) = pipeline_id {
        sync_vector_field_indexes(conn, Some(pipeline_id)).await?;
    }
    Ok(())
}

/// The ids of a pipeline's indexes.
pub async fn index_ids(
    conn: &mut PgConnection,
    pipeline_id: Uuid,
) -> Result<Vec<Uuid>, sqlx::Error> {
    sqlx::query_scalar("SELECT id FROM pipeline_indexes WHERE pipeline_id = $1")
        .bind(pipeline_id)
        .fetch_all(conn)
        .await
}

/// One index of a pipeline.
pub async fn get(db: &Pool, pipeline_id: Uuid, id: Uuid) -> Result<Option<IndexRow>, DbErr> {
    let row = pipeline_index::Entity::find_by_id(id)
        .filter(pipeline_index::Column::PipelineId.eq(pipeline_id))
        .one(db.orm())
        .await?;
    Ok(row.map(IndexRow::from))
}

/// The base of the index list of a pipeline.
pub fn list_base(pipeline_id: Uuid) -> SelectStatement {
    let t = Alias::new("pipeline_indexes");
    let mut select = Query::select();
    select
        .from(t.clone())
        .columns(["id", "pipeline_id", "field", "created_at"].map(|c| (t.clone(), Alias::new(c))))
        .and_where(Expr::col((t, Alias::new("pipeline_id"))).eq(pipeline_id));
    select
}
