//! Taxonomies and their entries. A link (parent field and value → child field and value) is
//! stored once across all taxonomies (`UNIQUE (parent_field, parent_value, child_field,
//! child_value)`); the taxonomy that stored it first holds it.

use std::collections::{HashMap, HashSet};

use chrono::{DateTime, Utc};
use sea_orm::{ActiveModelTrait, DbErr, EntityTrait, Set};
use sea_query::{Alias, Expr, ExprTrait, Query, SelectStatement};
use sea_query_sqlx::SqlxBinder;
use serde::Serialize;
use sqlx::{AssertSqlSafe, PgConnection, PgPool};
use uuid::Uuid;

use super::Pool;
use super::api_keys::delete_with_entries;
use super::entities::{self, taxonomy};
use crate::access::ObjectType;
use crate::time::rfc3339;

/// A taxonomy as the API shows it.
#[derive(Debug, Clone, sqlx::FromRow, Serialize)]
pub struct TaxonomyRow {
    pub id: Uuid,
    pub name: String,
    pub description: Option<String>,
    #[serde(with = "rfc3339")]
    pub created_at: DateTime<Utc>,
    #[serde(with = "rfc3339")]
    pub updated_at: DateTime<Utc>,
}

/// A link as a request names it: parent field and value → child field and value.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, sqlx::FromRow)]
pub struct Link {
    /// Metadata field of the parent (an identifier).
    pub parent_field: String,
    /// Value of the parent (non-empty).
    pub parent_value: String,
    /// Metadata field of the child (an identifier).
    pub child_field: String,
    /// Value of the child (non-empty).
    pub child_value: String,
}

/// A stored entry as the API shows it (entry list, `added`).
#[derive(Debug, Clone, sqlx::FromRow, Serialize)]
pub struct EntryRow {
    pub id: Uuid,
    pub parent_field: String,
    pub parent_value: String,
    pub child_field: String,
    pub child_value: String,
    #[serde(with = "rfc3339")]
    pub created_at: DateTime<Utc>,
}

impl EntryRow {
    /// The link this entry stores.
    pub fn link(&self) -> Link {
        Link {
            parent_field: self.parent_field.clone(),
            parent_value: self.parent_value.clone(),
            child_field: self.child_field.clone(),
            child_value: self.child_value.clone(),
        }
    }
}

/// The columns of [`EntryRow`].
macro_rules! entry_columns {
    () => {
        "id, parent_field, parent_value, child_field, child_value, created_at"
    };
}

const TAXONOMY_COLUMNS: [&str; 5] = ["id", "name", "description", "created_at", "updated_at"];

const ENTRY_COLUMNS: [&str; 6] = [
    "id",
    "parent_field",
    "parent_value",
    "child_field",
    "child_value",
    "created_at",
];

/// How often links whose holder vanished between the insert and the lookup (a concurrent
/// removal) are tried again.
const ADD_ATTEMPTS: usize = 5;

impl From<taxonomy::Model> for TaxonomyRow {
    fn from(m: taxonomy::Model) -> Self {
        Self {
            id: m.id,
            name: m.name,
            description: m.description,
            created_at: m.created_at,
            updated_at: m.updated_at,
        }
    }
}

/// One taxonomy by id.
pub async fn get(db: &Pool, id: Uuid) -> Result<Option<TaxonomyRow>, DbErr> {
    let row = taxonomy::Entity::find_by_id(id).one(db.orm()).await?;
    Ok(row.map(TaxonomyRow::from))
}

/// Inserts a taxonomy (name already validated; a used name is a unique violation).
pub async fn insert(
    db: &Pool,
    id: Uuid,
    name: &str,
    description: Option<&str>,
) -> Result<TaxonomyRow, DbErr> {
    let row = taxonomy::ActiveModel {
        id: Set(id),
        name: Set(name.to_owned()),
        description: Set(description.map(str::to_owned)),
        ..Default::default()
    }
    .insert(db.orm())
    .await?;
    Ok(row.into())
}

/// Writes the full state of a taxonomy's editable fields.
pub async fn update(
    db: &Pool,
    id: Uuid,
    name: &str,
    description: Option<&str>,
) -> Result<Option<TaxonomyRow>, DbErr> {
    let changes = taxonomy::ActiveModel {
        name: Set(name.to_owned()),
        description: Set(description.map(str::to_owned)),
        ..Default::default()
    };
    let row = entities::update_by_id(db.orm(), id, changes).await?;
    Ok(row.map(TaxonomyRow::from))
}

/// Deletes a taxonomy, its entries (cascade) and every permission entry on it, in one
/// transaction.
pub async fn delete(db: &Pool, id: Uuid) -> Result<bool, DbErr> {
    delete_with_entries::<taxonomy::Entity>(db, ObjectType::Taxonomies, id).await
}

/// The links as four parallel arrays (bound as `text[]` and read back with `unnest`).
fn columns(links: &[&Link]) -> [Vec<String>; 4] {
    let mut out: [Vec<String>; 4] = Default::default();
    for link in links {
        out[0].push(link.parent_field.clone());
        out[1].push(link.parent_value.clone());
        out[2].push(link.child_field.clone());
        out[3].push(link.child_value.clone());
    }
    out
}

/// Inserts the links this statement can store, in the given order; returns the stored
/// entries.
async fn insert_links(
    conn: &mut PgConnection,
    taxonomy_id: Uuid,
    links: &[(Uuid, &Link)],
) -> Result<Vec<EntryRow>, sqlx::Error> {
    let ids: Vec<Uuid> = links.iter().map(|(id, _)| *id).collect();
    let links: Vec<&Link> = links.iter().map(|(_, link)| *link).collect();
    let [parent_fields, parent_values, child_fields, child_values] = columns(&links);
    sqlx::query_as(concat!(
        "INSERT INTO taxonomy_entries
             (id, taxonomy_id, parent_field, parent_value, child_field, child_value)
         SELECT e.id, $1, e.parent_field, e.parent_value, e.child_field, e.child_value
         FROM unnest($2::uuid[], $3::text[], $4::text[], $5::text[], $6::text[])
              WITH ORDINALITY AS e(id, parent_field, parent_value, child_field, child_value, n)
         ORDER BY e.n
         ON CONFLICT (parent_field, parent_value, child_field, child_value) DO NOTHING
         RETURNING ",
        entry_columns!()
    ))
    .bind(taxonomy_id)
    .bind(ids)
    .bind(parent_fields)
    .bind(parent_values)
    .bind(child_fields)
    .bind(child_values)
    .fetch_all(conn)
    .await
}

#[derive(sqlx::FromRow)]
struct HolderRow {
    taxonomy_id: Uuid,
    #[sqlx(flatten)]
    link: Link,
}

/// The taxonomies holding the given links (links nobody holds are absent).
async fn holders(
    conn: &mut PgConnection,
    links: &[&Link],
) -> Result<HashMap<Link, Uuid>, sqlx::Error> {
    let [parent_fields, parent_values, child_fields, child_values] = columns(links);
    let rows: Vec<HolderRow> = sqlx::query_as(
        "SELECT t.taxonomy_id, t.parent_field, t.parent_value, t.child_field, t.child_value
         FROM taxonomy_entries t
         JOIN unnest($1::text[], $2::text[], $3::text[], $4::text[])
              AS e(parent_field, parent_value, child_field, child_value)
           ON t.parent_field = e.parent_field AND t.parent_value = e.parent_value
          AND t.child_field = e.child_field AND t.child_value = e.child_value",
    )
    .bind(parent_fields)
    .bind(parent_values)
    .bind(child_fields)
    .bind(child_values)
    .fetch_all(conn)
    .await?;
    Ok(rows.into_iter().map(|r| (r.link, r.taxonomy_id)).collect())
}

/// What [`add_entries`] did: the entries stored now, and the holder of every other link.
#[derive(Debug, Default)]
pub struct AddOutcome {
    pub added: Vec<EntryRow>,
    pub held: HashMap<Link, Uuid>,
}

/// Stores the links (distinct, validated) in a taxonomy, in one transaction: links nobody
/// holds are inserted (`ON CONFLICT DO NOTHING`), the holders of the others are looked up.
/// `None` when the taxonomy does not exist (it is share-locked for the transaction, so it
/// cannot disappear meanwhile).
pub async fn add_entries(
    pool: &PgPool,
    taxonomy_id: Uuid,
    links: &[Link],
) -> Result<Option<AddOutcome>, sqlx::Error> {
    let mut tx = pool.begin().await?;
    let exists: Option<Uuid> =
        sqlx::query_scalar("SELECT id FROM taxonomies WHERE id = $1 FOR SHARE")
            .bind(taxonomy_id)
            .fetch_optional(&mut *tx)
            .await?;
    if exists.is_none() {
        return Ok(None);
    }
    let mut outcome = AddOutcome::default();
    // Ids follow the request order (so the default `id` order does too); rows are inserted in
    // the links' own order, the same in every transaction, so that two requests adding
    // overlapping links wait for each other instead of deadlocking.
    let mut pending: Vec<(Uuid, &Link)> = links.iter().map(|l| (Uuid::now_v7(), l)).collect();
    pending.sort_by(|a, b| a.1.cmp(b.1));
    for _ in 0..ADD_ATTEMPTS {
        if pending.is_empty() {
            break;
        }
        let added = insert_links(&mut tx, taxonomy_id, &pending).await?;
        let stored: HashSet<Link> = added.iter().map(EntryRow::link).collect();
        outcome.added.extend(added);
        pending.retain(|(_, link)| !stored.contains(*link));
        if pending.is_empty() {
            break;
        }
        // A conflicting insert waited for the other transaction, and this statement's
        // snapshot sees its commit; a link removed since then is tried again.
        let unstored: Vec<&Link> = pending.iter().map(|(_, link)| *link).collect();
        let held = holders(&mut tx, &unstored).await?;
        pending.retain(|(_, link)| !held.contains_key(*link));
        outcome.held.extend(held);
    }
    if !pending.is_empty() {
        return Err(sqlx::Error::Protocol(
            "taxonomy entries changed concurrently; try again".to_owned(),
        ));
    }
    tx.commit().await?;
    Ok(Some(outcome))
}

/// Removes the given links where this taxonomy holds them (others are ignored).
pub async fn remove_entries(
    pool: &PgPool,
    taxonomy_id: Uuid,
    links: &[Link],
) -> Result<u64, sqlx::Error> {
    let links: Vec<&Link> = links.iter().collect();
    let [parent_fields, parent_values, child_fields, child_values] = columns(&links);
    let done = sqlx::query(
        "DELETE FROM taxonomy_entries t
         USING unnest($2::text[], $3::text[], $4::text[], $5::text[])
               AS e(parent_field, parent_value, child_field, child_value)
         WHERE t.taxonomy_id = $1
           AND t.parent_field = e.parent_field AND t.parent_value = e.parent_value
           AND t.child_field = e.child_field AND t.child_value = e.child_value",
    )
    .bind(taxonomy_id)
    .bind(parent_fields)
    .bind(parent_values)
    .bind(child_fields)
    .bind(child_values)
    .execute(pool)
    .await?;
    Ok(done.rows_affected())
}

/// The base statement of the taxonomy list: readable taxonomies only.
pub fn list_base(readable_ids: Option<Vec<Uuid>>) -> SelectStatement {
    let table = Alias::new("taxonomies");
    let mut select = Query::select();
    select.from(table.clone()).columns(
        TAXONOMY_COLUMNS
            .iter()
            .map(|c| (table.clone(), Alias::new(*c))),
    );
    if let Some(ids) = readable_ids {
        select.and_where(Expr::col((table, Alias::new("id"))).is_in(ids));
    }
    select
}

/// The base statement of a taxonomy's entry list.
pub fn entry_list_base(taxonomy_id: Uuid) -> SelectStatement {
    let table = Alias::new("taxonomy_entries");
    let mut select = Query::select();
    select
        .from(table.clone())
        .columns(
            ENTRY_COLUMNS
                .iter()
                .map(|c| (table.clone(), Alias::new(*c))),
        )
        .and_where(Expr::col((table, Alias::new("taxonomy_id"))).eq(taxonomy_id));
    select
}

/// Runs a `$teq` expansion statement (`trove_query::filter::teq_expansion_query`): the links
/// reachable from the filter's starting values, as `(start field, start value, field, value,
/// …)` rows for `TeqExpansions::from_rows`.
pub async fn expansion_rows(
    pool: &PgPool,
    query: sea_query::WithQuery,
) -> Result<Vec<(String, String, String, String, String)>, sqlx::Error> {
    let (sql, values) = query.build_sqlx(sea_query::PostgresQueryBuilder);
    sqlx::query_as_with(AssertSqlSafe(sql), values)
        .fetch_all(pool)
        .await
}
