//! Object counts for the license check.

use crate::access::ObjectType;

use sqlx::PgPool;

/// How many objects of a type exist (seeded objects count). Types with no storage of their
/// own count 0.
pub async fn count_objects(pool: &PgPool, object_type: ObjectType) -> Result<i64, sqlx::Error> {
    let Some(sql) = counted_table(object_type) else {
        return Ok(0);
    };
    sqlx::query_scalar(sql).fetch_one(pool).await
}

/// The count statement of a type, for the types with storage of their own.
fn counted_table(object_type: ObjectType) -> Option<&'static str> {
    match object_type {
        ObjectType::ApiKeys => Some("SELECT count(*) FROM api_keys"),
        ObjectType::Documents => Some("SELECT count(DISTINCT id) FROM documents"),
        ObjectType::EmbeddingModels => Some("SELECT count(*) FROM embedding_models"),
        ObjectType::Pipelines => Some("SELECT count(*) FROM pipelines"),
        ObjectType::TextSplitters => Some("SELECT count(*) FROM text_splitters"),
        ObjectType::Taxonomies => Some("SELECT count(*) FROM taxonomies"),
        ObjectType::Agents => Some("SELECT count(*) FROM agents"),
        ObjectType::Llms => Some("SELECT count(*) FROM llms"),
        _ => None,
    }
}
