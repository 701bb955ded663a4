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
pub mod context;
pub mod context_message;
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
use sea_orm::{ActiveModelTrait, ColumnTrait, ConnectionTrait, DbErr, EntityTrait, QueryFilter};
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
    update_one_where(db, Expr::col("id").eq(id), changes).await
}

/// [`update_by_id`] for the row `condition` selects (an id and more, such as its owner): the
/// row as written, `None` when no row matches.
pub(crate) async fn update_one_where<A, C>(
    db: &C,
    condition: Expr,
    changes: A,
) -> Result<Option<<A::Entity as EntityTrait>::Model>, DbErr>
where
    A: ActiveModelTrait,
    C: ConnectionTrait,
{
    let rows = <A::Entity as EntityTrait>::update_many()
        .set(changes)
        .col_expr("updated_at", Expr::current_timestamp())
        .filter(condition)
        .exec_with_returning(db)
        .await?;
    Ok(rows.into_iter().next())
}

/// `now() - make_interval(secs => max_age_seconds)`: the oldest time a row may carry to be
/// younger than `max_age_seconds`, in the database's clock.
pub(crate) fn age_cutoff(max_age_seconds: f64) -> Expr {
    Expr::cust_with_values("now() - make_interval(secs => $1)", [max_age_seconds])
}

/// Deletes the rows of `E` whose time `column` is `max_age_seconds` old or older (in the
/// database's clock); how many.
pub(crate) async fn delete_older_than<E: EntityTrait>(
    db: &impl ConnectionTrait,
    column: E::Column,
    max_age_seconds: f64,
) -> Result<u64, DbErr> {
    let deleted = E::delete_many()
        .filter(column.into_expr().lte(age_cutoff(max_age_seconds)))
        .exec(db)
        .await?;
    Ok(deleted.rows_affected)
}
