//! Pipelines, their embedding model association, classifications and hierarchy.

use chrono::{DateTime, Utc};
use sea_orm::{DbErr, EntityTrait, QuerySelect, Set};
use sea_query::{Alias, Expr, ExprTrait, Query, SelectStatement};
use serde::ser::SerializeMap;
use serde::{Serialize, Serializer};
use serde_json::Value;
use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

use super::Pool;
use super::api_keys::KeyRead;
use super::entities::{self, embedding_model, pipeline, text_splitter};
use crate::time::rfc3339;

/// A pipeline with its (optional) embedding model, as one row.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct PipelineRow {
    pub id: Uuid,
    pub name: String,
    pub description: Option<String>,
    pub default_text_splitter_id: Uuid,
    pub has_full_text_search: bool,
    pub metadata_schema: Value,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub ve_id: Option<Uuid>,
    pub ve_dimensions: Option<i32>,
    pub em_id: Option<Uuid>,
    pub em_name: Option<String>,
    pub em_description: Option<String>,
    pub em_provider: Option<String>,
    pub em_model_name: Option<String>,
    pub em_parameters: Option<Value>,
    pub em_dimensions: Option<i32>,
    pub em_created_at: Option<DateTime<Utc>>,
    pub em_updated_at: Option<DateTime<Utc>>,
    /// Every association of the pipeline (`vector_embeddings::associations_json_sql`), in the
    /// rows the API shows; absent from a search's context.
    #[sqlx(default)]
    pub associations: Option<Value>,
}

impl PipelineRow {
    /// The embedding model object of the association, when there is one.
    fn embedding_model(&self) -> Option<Value> {
        let (Some(id), Some(created), Some(updated)) =
            (self.em_id, self.em_created_at, self.em_updated_at)
        else {
            return None;
        };
        Some(serde_json::json!({
            "id": id,
            "name": self.em_name,
            "description": self.em_description,
            "provider": self.em_provider,
            "model_name": self.em_model_name,
            "parameters": self.em_parameters,
            "dimensions": self.em_dimensions,
            "created_at": rfc3339::format(&created),
            "updated_at": rfc3339::format(&updated),
        }))
    }
}

impl Serialize for PipelineRow {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(11))?;
        map.serialize_entry("id", &self.id)?;
        map.serialize_entry("name", &self.name)?;
        map.serialize_entry("description", &self.description)?;
        map.serialize_entry("default_text_splitter_id", &self.default_text_splitter_id)?;
        map.serialize_entry("default_vector_embedding_id", &self.ve_id)?;
        // The interface's map lists the `ready` associations; the extension field
        // `vector_embeddings` every one, with its status and backfill.
        let associations = self
            .associations
            .clone()
            .map(super::vector_embeddings::parse);
        let mut models = serde_json::Map::new();
        match &associations {
            Some(associations) => {
                for association in associations.iter().filter(|a| a.is_ready()) {
                    let model = serde_json::to_value(&association.embedding_model)
                        .map_err(serde::ser::Error::custom)?;
                    models.insert(association.id.to_string(), model);
                }
            }
            None => {
                if let (Some(ve_id), Some(model)) = (self.ve_id, self.embedding_model()) {
                    models.insert(ve_id.to_string(), model);
                }
            }
        }
        map.serialize_entry("embedding_models", &models)?;
        // Only on a pipeline that holds a model added through the extension, so that every
        // other pipeline object is exactly the interface's.
        if let Some(associations) = associations
            .as_ref()
            .filter(|a| a.iter().any(|a| a.fragments_total.is_some()))
        {
            map.serialize_entry("vector_embeddings", associations)?;
        }
        map.serialize_entry("has_full_text_search", &self.has_full_text_search)?;
        map.serialize_entry("metadata_schema", &self.metadata_schema)?;
        map.serialize_entry("created_at", &rfc3339::format(&self.created_at))?;
        map.serialize_entry("updated_at", &rfc3339::format(&self.updated_at))?;
        map.end()
    }
}

/// The SELECT of pipeline rows (FROM `pipelines`, joined to the association and the model).
pub fn select_base() -> SelectStatement {
    let p = Alias::new("pipelines");
    let ve = Alias::new("vector_embeddings");
    let em = Alias::new("embedding_models");
    let mut select = Query::select();
    select
        .from(p.clone())
        .columns(
            [
                "id",
                "name",
                "description",
                "default_text_splitter_id",
                "has_full_text_search",
                "metadata_schema",
                "created_at",
                "updated_at",
            ]
            .map(|c| (p.clone(), Alias::new(c))),
        )
        .expr_as(
            Expr::col((ve.clone(), Alias::new("id"))),
            Alias::new("ve_id"),
        )
        .expr_as(
            Expr::col((ve.clone(), Alias::new("dimensions"))),
            Alias::new("ve_dimensions"),
        );
    for column in [
        "id",
        "name",
        "description",
        "provider",
        "model_name",
        "parameters",
        "dimensions",
        "created_at",
        "updated_at",
    ] {
        select.expr_as(
            Expr::col((em.clone(), Alias::new(column))),
            Alias::new(format!("em_{column}")),
        );
    }
    select
        .left_join(
            ve.clone(),
            Expr::col((ve.clone(), Alias::new("pipeline_id")))
                .equals((p.clone(), Alias::new("id")))
                .and(Expr::col((ve.clone(), Alias::new("is_default")))),
        )
        .left_join(
            em.clone(),
            Expr::col((em, Alias::new("id"))).equals((ve, Alias::new("embedding_model_id"))),
        );
    select
}

/// [`select_base`] with every association of the pipeline, as the API shows pipelines.
fn select_shown() -> SelectStatement {
    let mut select = select_base();
    select.expr_as(
        Expr::cust(super::vector_embeddings::associations_json_sql(
            "\"pipelines\".\"id\"",
        )),
        Alias::new("associations"),
    );
    select
}

/// The base of the pipeline list: readable pipelines only.
pub fn list_base(readable_ids: Option<Vec<Uuid>>) -> SelectStatement {
    let mut select = select_shown();
    if let Some(ids) = readable_ids {
        select.and_where(Expr::col((Alias::new("pipelines"), Alias::new("id"))).is_in(ids));
    }
    select
}

/// One pipeline by id.
pub async fn get(pool: &PgPool, id: Uuid) -> Result<Option<PipelineRow>, sqlx::Error> {
    use sea_query::PostgresQueryBuilder;
    use sea_query_sqlx::SqlxBinder;
    let mut select = select_shown();
    select.and_where(Expr::col((Alias::new("pipelines"), Alias::new("id"))).eq(id));
    let (sql, values) = select.build_sqlx(PostgresQueryBuilder);
    sqlx::query_as_with(sqlx::AssertSqlSafe(sql), values)
        .fetch_optional(pool)
        .await
}

/// What a document submission reads of its pipeline, in one statement: the metadata schema,
/// and whether `classification` is one of the pipeline's classifications. `None` when the
/// pipeline does not exist.
pub async fn submission_context(
    pool: &PgPool,
    id: Uuid,
    classification: &str,
) -> Result<Option<(Value, bool)>, sqlx::Error> {
    sqlx::query_as(
        "SELECT p.metadata_schema,
                EXISTS (SELECT 1 FROM classifications c WHERE c.pipeline_id = p.id AND c.name = $2)
         FROM pipelines p WHERE p.id = $1",
    )
    .bind(id)
    .bind(classification)
    .fetch_optional(pool)
    .await
}

/// What a search reads of its pipeline, in one statement: the pipeline with its association
/// and model, the model's encrypted secret parameters, whether every stored vector has unit
/// length, the planner's estimate of the association's vector count, and the classifications
/// with their hierarchy.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct SearchContext {
    #[sqlx(flatten)]
    pub pipeline: PipelineRow,
    pub em_secret_parameters: Option<Vec<u8>>,
    pub ve_unit_vectors: Option<bool>,
    /// The planner's estimate of the rows of the association's vector table: `reltuples` per
    /// page times its pages now (negative or absent when the table was never analysed).
    pub ve_estimated_rows: Option<f32>,
    /// The association's HNSW index is dropped for a burst of ingestion (see
    /// `ingest::deferred_index`): every vector search is exact until it is built.
    pub ve_index_deferred: Option<bool>,
    pub classification_names: Vec<String>,
    pub hierarchy_from: Vec<String>,
    pub hierarchy_to: Vec<String>,
    /// Integer fields on which a stored version holds a value that does not convert (rule 6
    /// of the filter language).
    pub unconvertible_fields: Vec<String>,
    /// The pipeline's metadata indexes (they change how a scope's fragments are reached).
    pub metadata_index_ids: Vec<Uuid>,
    /// The search epoch this context was read at (see `migrations/0014_search_epoch.sql`).
    pub search_epoch: i64,
}

impl SearchContext {
    /// The hierarchy as (classification, inherited) pairs.
    pub fn hierarchy(&self) -> Vec<(String, String)> {
        self.hierarchy_from
            .iter()
            .cloned()
            .zip(self.hierarchy_to.iter().cloned())
            .collect()
    }

    /// The association's model as stored, when the pipeline has one.
    pub fn stored_model(&self) -> Option<crate::store::embedding::StoredModel> {
        let p = &self.pipeline;
        Some(crate::store::embedding::StoredModel {
            row: crate::store::embedding::ModelRow {
                id: p.em_id?,
                name: p.em_name.clone()?,
                description: p.em_description.clone(),
                provider: p.em_provider.clone()?,
                model_name: p.em_model_name.clone()?,
                parameters: p.em_parameters.clone()?,
                dimensions: p.em_dimensions?,
                created_at: p.em_created_at?,
                updated_at: p.em_updated_at?,
            },
            secret_parameters: self.em_secret_parameters.clone(),
        })
    }
}

/// Reads a pipeline's [`SearchContext`] in one round trip.
pub async fn search_context<'e>(
    db: impl sqlx::PgExecutor<'e>,
    id: Uuid,
) -> Result<Option<SearchContext>, sqlx::Error> {
    let (sql, values) = search_context_statement(id);
    sqlx::query_as_with(sqlx::AssertSqlSafe(sql), values)
        .fetch_optional(db)
        .await
}

/// The search epoch (`migrations/0014_search_epoch.sql`) as the primary has it.
pub async fn search_epoch(conn: &mut PgConnection) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar("SELECT n FROM search_epoch")
        .fetch_one(conn)
        .await
}

/// The key check's read of `key_id` and the [`SearchContext`] of `pipeline_id`, in one
/// statement: a search's two reads before its statement, one round trip instead of two.
pub async fn key_and_search_context(
    connection: &mut PgConnection,
    key_id: Uuid,
    pipeline_id: Uuid,
) -> Result<(KeyRead, Option<SearchContext>), sqlx::Error> {
    use sqlx::{FromRow, Row};
    let (context_sql, mut values) = search_context_statement(pipeline_id);
    values.0.0.push(sea_query::Value::Uuid(Some(key_id)));
    let sql = format!(
        "SELECT {}, context.* FROM (SELECT 1) AS one \
         LEFT JOIN api_keys AS auth_key ON auth_key.id = ${} \
         LEFT JOIN ({context_sql}) AS context ON true",
        super::api_keys::KEY_COLUMNS,
        values.0.0.len()
    );
    let row = sqlx::query_with(sqlx::AssertSqlSafe(sql), values)
        .fetch_one(connection)
        .await?;
    let key = super::api_keys::key_from_columns(&row)?;
    let context = match row.try_get::<Option<Uuid>, _>("id")? {
        Some(_) => Some(SearchContext::from_row(&row)?),
        None => None,
    };
    Ok((key, context))
}

/// The statement of [`search_context`].
fn search_context_statement(id: Uuid) -> (String, sea_query_sqlx::SqlxValues) {
    use sea_query::PostgresQueryBuilder;
    use sea_query_sqlx::SqlxBinder;
    let mut select = select_base();
    select
        .expr_as(
            Expr::col((
                Alias::new("embedding_models"),
                Alias::new("secret_parameters"),
            )),
            Alias::new("em_secret_parameters"),
        )
        .expr_as(
            Expr::col((Alias::new("vector_embeddings"), Alias::new("unit_vectors"))),
            Alias::new("ve_unit_vectors"),
        )
        // The vector table's name is derived from the association id inside the statement
        // (`store::vectors::table_name`): `vectors_` and the id's 32 hex digits. Its row count
        // is estimated as the planner does: the analysed rows per page times the pages the
        // table has now, so rows stored since the last `ANALYZE` count (after a bulk
        // ingestion the worker stops analysing a table that has grown past five groups, and
        // `reltuples` alone lagged autovacuum by a minute: searches took a 5 % scope for the
        // whole table and walked it with too short a list).
        .expr_as(
            Expr::cust(super::vectors::estimated_rows_sql(
                "to_regclass('vectors_' || replace(\"vector_embeddings\".\"id\"::text, '-', ''))",
            )),
            Alias::new("ve_estimated_rows"),
        )
        .expr_as(
            Expr::cust("\"vector_embeddings\".\"deferred_index_m\" IS NOT NULL"),
            Alias::new("ve_index_deferred"),
        )
        .expr_as(
            Expr::cust("(SELECT n FROM search_epoch)"),
            Alias::new("search_epoch"),
        )
        .and_where(Expr::col((Alias::new("pipelines"), Alias::new("id"))).eq(id));
    // The classification names, the hierarchy pairs as two parallel arrays, the fields rule 6
    // refuses filters on, and the metadata indexes.
    for (aggregate, source, alias) in [
        (
            "c.name ORDER BY c.name",
            "classifications AS c",
            "classification_names",
        ),
        (
            "c.classification ORDER BY c.classification, c.inherited",
            "classification_hierarchy AS c",
            "hierarchy_from",
        ),
        (
            "c.inherited ORDER BY c.classification, c.inherited",
            "classification_hierarchy AS c",
            "hierarchy_to",
        ),
        (
            "DISTINCT c.field",
            "metadata_unconvertible AS c",
            "unconvertible_fields",
        ),
        (
            "c.id ORDER BY c.id",
            "pipeline_indexes AS c",
            "metadata_index_ids",
        ),
    ] {
        select.expr_as(
            Expr::cust(format!(
                "coalesce((SELECT array_agg({aggregate}) FROM {source} WHERE c.pipeline_id = \"pipelines\".\"id\"), '{{}}')"
            )),
            Alias::new(alias),
        );
    }
    select.build_sqlx(PostgresQueryBuilder)
}

/// What a new pipeline stores.
pub struct NewPipeline<'a> {
    pub id: Uuid,
    pub name: &'a str,
    pub description: Option<&'a str>,
    pub default_text_splitter_id: Uuid,
    pub has_full_text_search: bool,
    pub metadata_schema: &'a Value,
}

pub async fn insert(conn: &mut PgConnection, p: &NewPipeline<'_>) -> Result<(), sqlx::Error> {
    sqlx::query(
        "INSERT INTO pipelines (id, name, description, default_text_splitter_id, has_full_text_search, metadata_schema)
         VALUES ($1, $2, $3, $4, $5, $6)",
    )
    .bind(p.id)
    .bind(p.name)
    .bind(p.description)
    .bind(p.default_text_splitter_id)
    .bind(p.has_full_text_search)
    .bind(p.metadata_schema)
    .execute(conn)
    .await?;
    Ok(())
}

/// Inserts the association a pipeline is created with: its default, `ready`.
pub async fn insert_vector_embedding(
    conn: &mut PgConnection,
    id: Uuid,
    pipeline_id: Uuid,
    embedding_model_id: Uuid,
    dimensions: i32,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "INSERT INTO vector_embeddings (id, pipeline_id, embedding_model_id, dimensions, is_default)
         VALUES ($1, $2, $3, $4, true)",
    )
        .bind(id)
        .bind(pipeline_id)
        .bind(embedding_model_id)
        .bind(dimensions)
        .execute(conn)
        .await?;
    Ok(())
}

/// Writes the editable fields.
pub async fn update(
    db: &Pool,
    id: Uuid,
    name: &str,
    description: Option<&str>,
    default_text_splitter_id: Uuid,
    metadata_schema: &Value,
) -> Result<(), DbErr> {
    let changes = pipeline::ActiveModel {
        name: Set(name.to_owned()),
        description: Set(description.map(str::to_owned)),
        default_text_splitter_id: Set(default_text_splitter_id),
        metadata_schema: Set(metadata_schema.clone()),
        ..Default::default()
    };
    entities::update_by_id(db.orm(), id, changes).await?;
    Ok(())
}

/// Replaces the classifications and hierarchy (the caller's transaction).
pub async fn replace_classifications(
    conn: &mut PgConnection,
    pipeline_id: Uuid,
    classifications: &[String],
    hierarchy: &[(String, String)],
) -> Result<(), sqlx::Error> {
    sqlx::query("DELETE FROM classification_hierarchy WHERE pipeline_id = $1")
        .bind(pipeline_id)
        .execute(&mut *conn)
        .await?;
    sqlx::query("DELETE FROM classifications WHERE pipeline_id = $1")
        .bind(pipeline_id)
        .execute(&mut *conn)
        .await?;
    sqlx::query("INSERT INTO classifications (pipeline_id, name) SELECT $1, unnest($2::text[])")
        .bind(pipeline_id)
        .bind(classifications)
        .execute(&mut *conn)
        .await?;
    let (from, to): (Vec<String>, Vec<String>) = hierarchy.iter().cloned().unzip();
    sqlx::query(
        "INSERT INTO classification_hierarchy (pipeline_id, classification, inherited)
         SELECT $1, c, i FROM unnest($2::text[], $3::text[]) AS h (c, i) ON CONFLICT DO NOTHING",
    )
    .bind(pipeline_id)
    .bind(from)
    .bind(to)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// The classifications (by name) and hierarchy pairs of a pipeline.
pub async fn classifications(
    pool: &PgPool,
    pipeline_id: Uuid,
) -> Result<(Vec<String>, Vec<(String, String)>), sqlx::Error> {
    // One round trip: the names, then the hierarchy pairs as two parallel arrays.
    let (names, from, to): (Vec<String>, Vec<String>, Vec<String>) = sqlx::query_as(
        "SELECT
           coalesce((SELECT array_agg(name ORDER BY name) FROM classifications
                     WHERE pipeline_id = $1), '{}'),
           coalesce((SELECT array_agg(classification ORDER BY classification, inherited)
                     FROM classification_hierarchy WHERE pipeline_id = $1), '{}'),
           coalesce((SELECT array_agg(inherited ORDER BY classification, inherited)
                     FROM classification_hierarchy WHERE pipeline_id = $1), '{}')",
    )
    .bind(pipeline_id)
    .fetch_one(pool)
    .await?;
    let pairs = from.into_iter().zip(to).collect();
    Ok((names, pairs))
}

/// Whether any stored version (expired included) carries a classification outside `kept`.
pub async fn versions_outside(
    pool: &PgPool,
    pipeline_id: Uuid,
    kept: &[String],
) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM documents WHERE pipeline_id = $1 AND NOT (classification = ANY($2)))")
        .bind(pipeline_id)
        .bind(kept)
        .fetch_one(pool)
        .await
}

/// Deletes a pipeline with everything it holds: documents, fragments, vectors, indexes,
/// classifications, the association and permission entries.
pub async fn delete(pool: &PgPool, id: Uuid) -> Result<(), sqlx::Error> {
    let mut tx = pool.begin().await?;
    // First the pipeline's row, which document deletes lock too (see `documents::delete`):
    // they finish before the vector table is dropped.
    sqlx::query("SELECT 1 FROM pipelines WHERE id = $1 FOR UPDATE")
        .bind(id)
        .execute(&mut *tx)
        .await?;
    for index in super::indexes::index_ids(&mut tx, id).await? {
        super::indexes::drop_index(&mut tx, index).await?;
    }
    let associations: Vec<Uuid> =
        sqlx::query_scalar("SELECT id FROM vector_embeddings WHERE pipeline_id = $1")
            .bind(id)
            .fetch_all(&mut *tx)
            .await?;
    for association in associations {
        super::vectors::drop_table(&mut tx, association).await?;
    }
    // The fragments' word statistics go with the pipeline: not counted out one by one.
    sqlx::query("SELECT set_config('trove.deleting_pipeline', $1::text, true)")
        .bind(id)
        .execute(&mut *tx)
        .await?;
    sqlx::query("DELETE FROM fragments WHERE pipeline_id = $1")
        .bind(id)
        .execute(&mut *tx)
        .await?;
    sqlx::query("DELETE FROM pipelines WHERE id = $1")
        .bind(id)
        .execute(&mut *tx)
        .await?;
    sqlx::query("DELETE FROM permissions WHERE object_type = 'pipelines' AND object_id = $1")
        .bind(id)
        .execute(&mut *tx)
        .await?;
    tx.commit().await
}

/// Whether an embedding model exists (and its dimensions).
pub async fn embedding_model_dimensions(db: &Pool, id: Uuid) -> Result<Option<i32>, DbErr> {
    embedding_model::Entity::find_by_id(id)
        .select_only()
        .column(embedding_model::Column::Dimensions)
        .into_tuple()
        .one(db.orm())
        .await
}

/// Whether a text splitter exists.
pub async fn text_splitter_exists(db: &Pool, id: Uuid) -> Result<bool, DbErr> {
    let found: Option<Uuid> = text_splitter::Entity::find_by_id(id)
        .select_only()
        .column(text_splitter::Column::Id)
        .into_tuple()
        .one(db.orm())
        .await?;
    Ok(found.is_some())
}

/// Sets `updated_at` of a pipeline whose classifications changed.
pub async fn touch(conn: &mut PgConnection, pipeline_id: Uuid) -> Result<(), sqlx::Error> {
    sqlx::query("UPDATE pipelines SET updated_at = now() WHERE id = $1")
        .bind(pipeline_id)
        .execute(conn)
        .await?;
    Ok(())
}

/// What a search reads of an association other than the pipeline's default: the fields of
/// [`SearchContext`] that describe the association, its status and backfill progress.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct AssociationContext {
    pub ve_id: Uuid,
    pub ve_dimensions: i32,
    #[sqlx(flatten)]
    pub model: crate::store::embedding::ModelRow,
    pub secret_parameters: Option<Vec<u8>>,
    pub unit_vectors: bool,
    pub estimated_rows: Option<f32>,
    pub index_deferred: bool,
    pub status: String,
    pub fragments_total: Option<i64>,
    pub fragments_done: Option<i64>,
}

/// The association of `pipeline_id` whose id, or whose model's id, is `requested`.
pub async fn association_context(
    pool: &PgPool,
    pipeline_id: Uuid,
    requested: Uuid,
) -> Result<Option<AssociationContext>, sqlx::Error> {
    sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT ve.id AS ve_id, ve.dimensions AS ve_dimensions,
                em.id, em.name, em.description, em.provider, em.model_name, em.parameters,
                em.dimensions, em.created_at, em.updated_at, em.secret_parameters,
                ve.unit_vectors, {} AS estimated_rows,
                ve.deferred_index_m IS NOT NULL AS index_deferred, ve.status,
                b.fragments_total, b.fragments_done
         FROM vector_embeddings ve
         JOIN embedding_models em ON em.id = ve.embedding_model_id
         LEFT JOIN vector_embedding_backfills b ON b.vector_embedding_id = ve.id
         WHERE ve.pipeline_id = $1 AND (ve.id = $2 OR ve.embedding_model_id = $2)",
        super::vectors::estimated_rows_sql(
            "to_regclass('vectors_' || replace(ve.id::text, '-', ''))"
        )
    )))
    .bind(pipeline_id)
    .bind(requested)
    .fetch_optional(pool)
    .await
}

impl SearchContext {
    /// The context with `association` in place of the default's.
    pub fn use_association(&mut self, association: AssociationContext) {
        let p = &mut self.pipeline;
        p.ve_id = Some(association.ve_id);
        p.ve_dimensions = Some(association.ve_dimensions);
        let model = association.model;
        p.em_id = Some(model.id);
        p.em_name = Some(model.name);
        p.em_description = model.description;
        p.em_provider = Some(model.provider);
        p.em_model_name = Some(model.model_name);
        p.em_parameters = Some(model.parameters);
        p.em_dimensions = Some(model.dimensions);
        p.em_created_at = Some(model.created_at);
        p.em_updated_at = Some(model.updated_at);
        self.em_secret_parameters = association.secret_parameters;
        self.ve_unit_vectors = Some(association.unit_vectors);
        self.ve_estimated_rows = association.estimated_rows;
        self.ve_index_deferred = Some(association.index_deferred);
    }
}
