//! Executes the list statements `trove-query` builds: one page plus, when asked, the count.

use sea_query::{PostgresQueryBuilder, SelectStatement};
use sea_query_sqlx::SqlxBinder;
use serde::Serialize;
use serde_json::{Map, Value};
// Statements built by sea-query: every value is a bound parameter, the text holds none.
use sqlx::postgres::PgRow;
use sqlx::{AssertSqlSafe, PgPool};
use trove_query::list::{ListRequest, ListSpec, build_count_query, build_page_query, finish_page};

use crate::error::{ApiError, ApiResult};

/// The list envelope: `data`, `page_info`, `query_info`.
#[derive(Debug, Serialize)]
pub struct Envelope {
    pub data: Vec<Value>,
    pub page_info: Map<String, Value>,
    pub query_info: Map<String, Value>,
}

/// Runs one list operation. `base` selects the rows the key may see (columns, FROM, and the
/// visibility condition); rows are read as `T` and serialized as the API shows them.
pub async fn list<T>(
    pool: &PgPool,
    spec: &ListSpec,
    request: &ListRequest,
    base: SelectStatement,
) -> ApiResult<Envelope>
where
    T: for<'r> sqlx::FromRow<'r, PgRow> + Serialize + Send + Unpin,
{
    list_mapped(pool, spec, request, base, |row: T| {
        serde_json::to_value(row).map_err(|e| ApiError::Internal(e.to_string()))
    })
    .await
}

/// Like [`list`], with the rows turned into API objects by `to_object` (for rows that need
/// decryption or other work before they can be shown).
pub async fn list_mapped<T, F>(
    pool: &PgPool,
    spec: &ListSpec,
    request: &ListRequest,
    base: SelectStatement,
    to_object: F,
) -> ApiResult<Envelope>
where
    T: for<'r> sqlx::FromRow<'r, PgRow> + Send + Unpin,
    F: Fn(T) -> ApiResult<Value>,
{
    let (sql, values) =
        build_page_query(spec, request, base.clone()).build_sqlx(PostgresQueryBuilder);
    let rows: Vec<T> = sqlx::query_as_with(AssertSqlSafe(sql), values)
        .fetch_all(pool)
        .await?;
    let rows = rows
        .into_iter()
        .map(to_object)
        .collect::<ApiResult<Vec<_>>>()?;
    let page = finish_page(spec, request, rows);
    let mut page_info = page.page_info;
    if request.count {
        let (sql, values) = build_count_query(spec, request, base).build_sqlx(PostgresQueryBuilder);
        let count: i64 = sqlx::query_scalar_with(AssertSqlSafe(sql), values)
            .fetch_one(pool)
            .await?;
        page_info.insert("count".to_owned(), Value::from(count));
    }
    Ok(Envelope {
        data: page.data,
        page_info,
        query_info: request.query_info.clone(),
    })
}
