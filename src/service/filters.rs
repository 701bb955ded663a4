//! Metadata filters against a pipeline: schema validation, `$teq` expansion read from the
//! taxonomy links at search time, then compilation to a condition over a table's `metadata`.

use sea_query::{Condition, PostgresQueryBuilder};
use sea_query_sqlx::SqlxBinder;
use sqlx::AssertSqlSafe;
use trove_query::filter::{
    Filter, TeqExpansions, compile, teq_expansion_query, validate, validate_teq,
};

use crate::error::{ApiError, ApiResult};
use crate::startup::AppState;
use crate::store::pipelines::PipelineRow;

/// Compiles `filter` for `pipeline`; a filter that does not fit the schema is `Schema error`.
pub async fn compile_for_pipeline(
    state: &AppState,
    pipeline: &PipelineRow,
    filter: &Filter,
    table: &str,
) -> ApiResult<Option<Condition>> {
    let typed = validate(filter, &pipeline.metadata_schema).map_err(|_| ApiError::Schema)?;
    let expansions = match teq_expansion_query(&typed.teq_starts()) {
        Some(query) => {
            let (sql, values) = query.build_sqlx(PostgresQueryBuilder);
            let rows: Vec<(String, String, String, String, String)> =
                sqlx::query_as_with(AssertSqlSafe(sql), values)
                    .fetch_all(&state.pool)
                    .await?;
            TeqExpansions::from_rows(rows)
        }
        None => TeqExpansions::new(),
    };
    validate_teq(&typed, &expansions).map_err(|_| ApiError::Schema)?;
    Ok(Some(compile(&typed, table, &expansions)))
}
