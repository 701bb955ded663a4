//! sea-orm entities of the tables whose plain CRUD (create, read one, update, delete) goes
//! through sea-orm. Each mirrors its table in `migrations/`; defaults (`created_at`,
//! `updated_at`, `active`, …) stay the database's, so inserts leave those columns unset and
//! read them back with `RETURNING`.
//!
//! The statements that must stay in one round trip or in a shape the planner sees (the key
//! check, search and its context, list pages, the worker's bulk statements, document
//! submission) are sea-query statements or static SQL run by sqlx, not through these.

pub mod agent;
pub mod agent_trace;
pub mod api_key;
pub mod embedding_model;
pub mod embedding_provider;
pub mod llm;
pub mod permission;
pub mod pipeline;
pub mod pipeline_index;
pub mod taxonomy;
pub mod text_splitter;
pub mod text_splitter_provider;

use sea_orm::sea_query::{Expr, ExprTrait};
use sea_orm::{ActiveModelTrait, ConnectionTrait, DbErr, EntityTrait, QueryFilter};
use uuid::Uuid;

/// Writes `changes` to the row whose `id` is `id` and sets its `updated_at` to the
/// statement's time (`CURRENT_TIMESTAMP`, the transaction's `now()`), in one
/// `UPDATE … RETURNING`: the row as written, `None` when there is none. For the tables with
/// both columns.
pub(crate) async fn update_by_id<A, C>(
    db: &C,
    id: Uuid,
    changes: A,
) -> Result<Option<<A::Entity as EntityTrait>::Model>, DbErr>
where
    A: ActiveModelTrait,
    C: ConnectionTrait,
{
    let rows = <A::Entity as EntityTrait>::update_many()
        .set(changes)
        .col_expr("updated_at", Expr::current_timestamp())
        .filter(Expr::col("id").eq(id))
        .exec_with_returning(db)
        .await?;
    Ok(rows.into_iter().next())
}
