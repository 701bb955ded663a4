//! Metadata indexes: a row per index and an index on `fragments` over the pipeline id and the
//! expression the metadata filter compiles for that field's declared type. The pipeline id is
//! a key column rather than a partial-index predicate, so statements that bind the pipeline id
//! can use the index under generic plans too.

use chrono::{DateTime, Utc};
use sea_query::{Alias, Expr, ExprTrait, Query, SelectStatement};
use serde::Serialize;
use sqlx::{AssertSqlSafe, PgConnection};
use uuid::Uuid;

use crate::service::metadata_schema::is_identifier;
use crate::time::rfc3339;

/// A metadata index.
#[derive(Debug, Clone, sqlx::FromRow, Serialize, poem_openapi::Object)]
#[oai(rename = "PipelineIndex")]
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
/// (`trove_query::filter::compile`): the same expression tree, so the planner matches one to
/// the other. It never fails, whatever JSON a row holds, so an index on one pipeline's field
/// can cover every row of `fragments`.
pub fn typed_field_expression(field: &str, declared_type: &str) -> Option<String> {
    // Field names are identifiers (checked by the schema rules), so quoting them in a string
    // literal cannot break out of it.
    if !is_identifier(field) {
        return None;
    }
    let where_json_is = |json_type: &str, value: String| {
        format!("(CASE WHEN jsonb_typeof(metadata -> '{field}') = '{json_type}' THEN {value} END)")
    };
    Some(match declared_type {
        "string" => format!("(metadata ->> '{field}')"),
        "integer" => where_json_is("number", format!("(metadata -> '{field}')::numeric")),
        "number" => where_json_is(
            "number",
            format!("(metadata ->> '{field}')::double precision"),
        ),
        "boolean" => where_json_is("boolean", format!("(metadata -> '{field}')::boolean")),
        _ => return None,
    })
}

/// Creates the index row and the expression index in the caller's transaction.
pub async fn create(
    conn: &mut PgConnection,
    id: Uuid,
    pipeline_id: Uuid,
    field: &str,
    expression: &str,
) -> Result<IndexRow, sqlx::Error> {
    let row: IndexRow = sqlx::query_as(
        "INSERT INTO pipeline_indexes (id, pipeline_id, field) VALUES ($1, $2, $3)
         RETURNING id, pipeline_id, field, created_at",
    )
    .bind(id)
    .bind(pipeline_id)
    .bind(field)
    .fetch_one(&mut *conn)
    .await?;
    // The name is rendered from a UUID, the expression comes from `typed_field_expression`:
    // neither can alter the statement.
    let name = index_name(id);
    sqlx::raw_sql(AssertSqlSafe(format!(
        "CREATE INDEX {name} ON fragments (pipeline_id, ({expression}))"
    )))
    .execute(&mut *conn)
    .await?;
    Ok(row)
}

pub async fn drop_index(conn: &mut PgConnection, id: Uuid) -> Result<(), sqlx::Error> {
    let name = index_name(id);
    sqlx::raw_sql(AssertSqlSafe(format!("DROP INDEX IF EXISTS {name}")))
        .execute(&mut *conn)
        .await?;
    sqlx::query("DELETE FROM pipeline_indexes WHERE id = $1")
        .bind(id)
        .execute(&mut *conn)
        .await?;
    Ok(())
}

pub async fn index_ids(
    conn: &mut PgConnection,
    pipeline_id: Uuid,
) -> Result<Vec<Uuid>, sqlx::Error> {
    sqlx::query_scalar("SELECT id FROM pipeline_indexes WHERE pipeline_id = $1")
        .bind(pipeline_id)
        .fetch_all(conn)
        .await
}

pub async fn get(
    conn: &mut PgConnection,
    pipeline_id: Uuid,
    id: Uuid,
) -> Result<Option<IndexRow>, sqlx::Error> {
    sqlx::query_as("SELECT id, pipeline_id, field, created_at FROM pipeline_indexes WHERE pipeline_id = $1 AND id = $2")
        .bind(pipeline_id)
        .bind(id)
        .fetch_optional(conn)
        .await
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
