//! The search statements: the SELECT of every search kind over `fragments`, built with
//! sea-query from a scope (pipeline, classifications, metadata filter, current versions only).
//! Every value is bound; what varies in the text, an association's vector table and its
//! dimension, is passed in by the store, which renders them from a UUID and an integer, and a
//! walk's LIMIT when it is a constant of the caller's code ([`Fetch::Constant`]).
//!
//! A nearest-neighbour statement binds the query vector once, as its first value (`$1`): the
//! score in the SELECT list is the first expression holding a value, and a walk's ordering and
//! threshold refer to `$1` again. The score is always the exact distance. The HNSW index
//! holds the vectors normalised in half precision and serves `ORDER BY <its key> <=> <$1 made
//! the same way>` ([`half_precision_cosine`]); the exact path orders and bounds the score
//! where a fenced subquery computed it, an ordering no index serves.

use sea_query::{
    Alias, BinOper, Cond, Condition, Expr, ExprTrait, JoinType, Order, PostgresQueryBuilder, Query,
    SelectStatement, Values,
};
use uuid::Uuid;

/// What every search kind shares: the pipeline, the classifications the reader may see
/// (resolved, non-empty) and the compiled metadata filter over `fragments`.
pub struct Scope<'a> {
    pub pipeline_id: Uuid,
    pub classifications: &'a [String],
    pub filter: Option<Condition>,
}

fn fragments() -> Alias {
    Alias::new("fragments")
}

/// The fragment columns a search returns (with `score`).
pub const HIT_COLUMNS: [&str; 7] = [
    "id",
    "document_id",
    "version",
    "order_id",
    "classification",
    "metadata",
    "content",
];

/// SELECT of the fragment columns FROM `fragments` with the scope's conditions: the pipeline,
/// current versions only, the classifications and the filter.
pub fn scoped_select(scope: &Scope<'_>) -> SelectStatement {
    scoped(scope, true)
}

fn scoped(scope: &Scope<'_>, with_classifications: bool) -> SelectStatement {
    let f = fragments();
    let mut select = Query::select();
    select
        .from(f.clone())
        .columns(HIT_COLUMNS.map(|c| (f.clone(), Alias::new(c))))
        .and_where(Expr::col((f.clone(), Alias::new("pipeline_id"))).eq(scope.pipeline_id))
        .and_where(Expr::col((f.clone(), Alias::new("expired_at"))).is_null());
    if with_classifications {
        select.and_where(
            Expr::col((f, Alias::new("classification")))
                .is_in(scope.classifications.iter().cloned()),
        );
    }
    if let Some(filter) = &scope.filter {
        select.cond_where(Cond::all().add(filter.clone()));
    }
    select
}

/// The statement whose plan estimates how many fragments a scope admits: its conditions,
/// selecting a constant. When the scope names `every_classification` of the pipeline, its
/// classification condition is left out: each fragment has one of them, and the planner's
/// estimate of `classification IN (…)` over all of a column's values falls to about 0.70 when
/// their sampled frequencies sum to just over 1 in floating point (it then combines them as
/// independent events instead of disjoint ones: 1 − (1 − ⅓)³).
pub fn scope_rows(scope: &Scope<'_>, every_classification: bool) -> SelectStatement {
    let mut select = scoped(scope, !every_classification);
    select.clear_selects().expr(Expr::val(1));
    select
}

/// pgvector's distance operators.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Distance {
    /// `<=>`: 1 − cosine similarity; the operator the HNSW index serves.
    Cosine,
    /// `<->`: euclidean distance.
    Euclidean,
    /// `<#>`: negative inner product.
    NegativeInnerProduct,
}

impl Distance {
    fn operator(self) -> &'static str {
        match self {
            Self::Cosine => "<=>",
            Self::Euclidean => "<->",
            Self::NegativeInnerProduct => "<#>",
        }
    }

    /// The distance of `v.embedding` to the vector bound as `$1`.
    fn to_first_value(self) -> &'static str {
        match self {
            Self::Cosine => r#"("v"."embedding" <=> $1)"#,
            Self::Euclidean => r#"("v"."embedding" <-> $1)"#,
            Self::NegativeInnerProduct => r#"("v"."embedding" <#> $1)"#,
        }
    }
}

/// Where the exact path reads a scope's conditions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExactScope {
    /// In the vector table's own copy of them, through its indexes
    /// ([`distances_in_vector_table`]).
    VectorTable,
    /// In `fragments`, when no index serves them, the vectors then read by key
    /// ([`distances_by_key`]).
    Fragments,
}

/// A nearest-neighbour selection.
pub struct Nearest<'a> {
    /// The association's vector table (`fragment_id`, `embedding`, and the fragment's
    /// `classification`, `metadata` and `live`), joined as `v`.
    pub vector_table: &'a str,
    /// The query vector.
    pub vector: &'a [f32],
    /// The distance reported as `score` and bounded by `threshold`.
    pub distance: Distance,
    /// The distance the rows are ordered by (cosine for unit vectors, whose cosine order is
    /// every distance's order, so the HNSW index serves it).
    pub order: Distance,
    /// The dimension of the association's HNSW index, when the walk is to use it: a cosine
    /// order is then taken on the vectors as the index holds them, normalised to unit length
    /// in half precision ([`half_precision_cosine`]), and the fetched rows are sorted by their
    /// exact score afterwards. `None` (the index is being built again) orders by the exact
    /// distance, which no index serves.
    pub index_dimensions: Option<u32>,
    /// Order by an expression the index cannot serve (an exact scan of the scope), reading
    /// the scope where it says; `None`: walk the index.
    pub exact: Option<ExactScope>,
    /// Largest `score` returned.
    pub threshold: Option<f64>,
    /// LIMIT.
    pub fetch: Fetch,
    /// Also select `embedding` (MMR).
    pub with_embeddings: bool,
    /// What the caller's checks, made earlier, must still find for the statement to return
    /// rows. Postgres tests it once, before reading any.
    pub gate: Option<Gate<'a>>,
}

/// The state a search's checks were made in, which its statement confirms (see [`gate`]).
pub struct Gate<'a> {
    /// The value of the search epoch (`search_epoch.n`), which moves with every change to a key,
    /// its permissions or a pipeline's configuration.
    pub epoch: i64,
    /// An expression of the association's estimated vector count (the store's), and the value
    /// it had: the search's path and walk were planned from it.
    pub vector_count: (&'a str, f32),
    /// The integer fields the filter compares that no stored version of the pipeline was
    /// recorded as holding a value the database cannot convert in (rule 6 of the filter
    /// language): still none.
    pub unrecorded_integer_fields: &'a [String],
}

/// The condition of a [`Gate`] on a search of `pipeline_id`.
pub fn gate(pipeline_id: Uuid, gate: &Gate<'_>) -> Expr {
    let (count, counted) = gate.vector_count;
    let mut condition = Expr::cust_with_values(
        format!("(SELECT n FROM search_epoch) = $1 AND {count} = $2"),
        [
            sea_query::Value::BigInt(Some(gate.epoch)),
            sea_query::Value::Float(Some(counted)),
        ],
    );
    if !gate.unrecorded_integer_fields.is_empty() {
        let u = Alias::new("u");
        let recorded = Query::select()
            .expr(Expr::cust("1"))
            .from_as(Alias::new("metadata_unconvertible"), u.clone())
            .and_where(Expr::col((u.clone(), Alias::new("pipeline_id"))).eq(pipeline_id))
            .and_where(
                Expr::col((u, Alias::new("field")))
                    .is_in(gate.unrecorded_integer_fields.iter().cloned()),
            )
            .to_owned();
        condition = condition.and(Expr::exists(recorded).not());
    }
    condition
}

/// The rows a nearest-neighbour statement returns at most (its LIMIT).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fetch {
    /// A count that follows from the request, bound as a value.
    Bound(u64),
    /// A constant of the caller's code (never a request's value), written into the walk's
    /// text. With a bound LIMIT, Postgres costs a generic plan for a tenth of the table's rows,
    /// so it plans every execution again (about 0.25 ms of each unrestricted search on 59,833
    /// fragments, against 0.025 for the generic plan it reuses once nothing in the LIMIT is a
    /// parameter). The exact path binds it like any count.
    Constant(u64),
}

impl Fetch {
    /// The count.
    pub fn rows(self) -> u64 {
        match self {
            Self::Bound(rows) | Self::Constant(rows) => rows,
        }
    }
}

/// The statement of a nearest-neighbour selection within a scope, built: its text and the
/// values it binds.
///
/// The exact path ranks the admitted vectors and joins just the first `fetch` back to their
/// fragments (and vectors, for MMR): see [`exact_nearest`].
/// A walk joins each candidate to its fragment, which the scope tests.
pub fn nearest(scope: &Scope<'_>, query: &Nearest<'_>) -> (String, Values) {
    if let Some(source) = query.exact {
        return exact_nearest(scope, query, source).build(PostgresQueryBuilder);
    }
    let mut select = walk(scope, query);
    if query.with_embeddings {
        let v = Alias::new("v");
        select.expr_as(
            Expr::col((v, Alias::new("embedding"))),
            Alias::new("embedding"),
        );
    }
    if let Some(confirmed) = &query.gate {
        select.and_where(gate(scope.pipeline_id, confirmed));
    }
    match query.fetch {
        Fetch::Bound(rows) => select.limit(rows).build(PostgresQueryBuilder),
        Fetch::Constant(rows) => {
            let (sql, values) = select.build(PostgresQueryBuilder);
            (format!("{sql} LIMIT {rows}"), values)
        }
    }
}

/// The nearest fragments' ids and scores only (`id`, `score`), at most `query.fetch` of them
/// (bound), in the walk's order or the exact order: the vector list of a hybrid search. The
/// query vector is the statement's first value, as in [`nearest`]; the gate and embeddings of
/// `query` do not apply.
pub fn nearest_candidates(scope: &Scope<'_>, query: &Nearest<'_>) -> SelectStatement {
    if let Some(source) = query.exact {
        return ranked_distances(scope, query, source);
    }
    let mut select = walk(scope, query);
    select
        .clear_selects()
        .column((fragments(), Alias::new("id")))
        .expr_as(score(query, Alias::new("v")), Alias::new("score"))
        .limit(query.fetch.rows());
    select
}

/// A walk of the association's index within the scope: each candidate joined to its fragment,
/// which the scope tests, in the index's order, with the score; no LIMIT.
fn walk(scope: &Scope<'_>, query: &Nearest<'_>) -> SelectStatement {
    let v = Alias::new("v");
    let mut select = scoped_select(scope);
    select.expr_as(score(query, v.clone()), Alias::new("score"));
    select
        .join_as(
            JoinType::InnerJoin,
            Alias::new(query.vector_table),
            v.clone(),
            Expr::col((v.clone(), Alias::new("fragment_id")))
                .equals((fragments(), Alias::new("id"))),
        )
        .and_where(Expr::col((v, Alias::new("live"))))
        .order_by_expr(walk_order(query), Order::Asc);
    bound(&mut select, query);
    select
}

/// The cosine distance between `v.embedding` and the vector bound as `$1` as the association's
/// HNSW index computes it: both normalised to unit length and stored in half precision
/// (`halfvec`, two bytes a dimension; normalising first keeps every value within its range).
/// The index's expression is the same text ([`half_precision_cosine_key`]), which is what lets
/// the planner walk it for this ordering.
pub fn half_precision_cosine(dimensions: u32) -> String {
    format!(
        "{} <=> (l2_normalize($1)::halfvec({dimensions}))",
        half_precision_cosine_key(r#""v"."embedding""#, dimensions)
    )
}

/// The key of an association's HNSW index on the vector column `column`.
pub fn half_precision_cosine_key(column: &str, dimensions: u32) -> String {
    format!("(l2_normalize({column})::halfvec({dimensions}))")
}

/// The ordering of a walk: the index's own distance when it serves the order, else the
/// exact one.
fn walk_order(query: &Nearest<'_>) -> Expr {
    match query.index_dimensions {
        Some(dimensions) if query.order == Distance::Cosine => {
            Expr::cust(half_precision_cosine(dimensions))
        }
        _ => Expr::cust(query.order.to_first_value()),
    }
}

/// The distance of the vectors of `table` (a name or alias) reported as `score`: the
/// statement's first expression holding a value, so the query vector becomes `$1`.
fn score(query: &Nearest<'_>, table: Alias) -> Expr {
    Expr::col((table, Alias::new("embedding"))).binary(
        BinOper::Custom(query.distance.operator()),
        Expr::val(pgvector::Vector::from(query.vector.to_vec())),
    )
}

/// Adds the threshold, if any, on the score.
fn bound(select: &mut SelectStatement, query: &Nearest<'_>) {
    if let Some(threshold) = query.threshold {
        select.and_where(Expr::cust(query.distance.to_first_value()).lte(threshold));
    }
}

/// The exact path: the distances of the vectors the scope admits, computed in a subquery `d`
/// that its `OFFSET` (0, bound like every value) keeps from being flattened, so each distance is
/// computed once and no index can serve the ordering on its output; ranked in `t`, the first
/// `fetch` joined back to their fragments. Ordering by the distance expression itself computed
/// it twice for each vector, once for the sort key and once for the score (and a third time
/// under a threshold). `d` reads the scope where `source` says.
fn exact_nearest(scope: &Scope<'_>, query: &Nearest<'_>, source: ExactScope) -> SelectStatement {
    let f = fragments();
    let (v, t) = (Alias::new("v"), Alias::new("t"));
    let table = Alias::new(query.vector_table);
    let ranked = ranked_distances(scope, query, source);
    let mut select = Query::select();
    select
        .columns(HIT_COLUMNS.map(|c| (f.clone(), Alias::new(c))))
        .column((t.clone(), Alias::new("score")))
        .from_subquery(ranked, t.clone())
        .inner_join(
            f.clone(),
            Expr::col((f, Alias::new("id"))).equals((t.clone(), Alias::new("id"))),
        );
    if query.with_embeddings {
        select.column((v.clone(), Alias::new("embedding"))).join_as(
            JoinType::InnerJoin,
            table,
            v.clone(),
            Expr::col((v, Alias::new("fragment_id"))).equals((t.clone(), Alias::new("id"))),
        );
    }
    if let Some(confirmed) = &query.gate {
        select.and_where(gate(scope.pipeline_id, confirmed));
    }
    select.order_by((t, Alias::new("score")), Order::Asc);
    select
}

/// The first `fetch` of the distances of the vectors the scope admits (within the threshold),
/// nearest first: `id` and `score`, read where `source` says.
fn ranked_distances(scope: &Scope<'_>, query: &Nearest<'_>, source: ExactScope) -> SelectStatement {
    let d = Alias::new("d");
    let (id, score_column) = (Alias::new("id"), Alias::new("score"));
    let distances = match source {
        ExactScope::VectorTable => distances_in_vector_table(scope, query),
        ExactScope::Fragments => distances_by_key(scope, query),
    };
    let mut ranked = Query::select();
    ranked
        .columns([(d.clone(), id), (d.clone(), score_column.clone())])
        .from_subquery(distances, d.clone())
        .order_by((d.clone(), score_column.clone()), Order::Asc)
        .limit(query.fetch.rows());
    if let Some(threshold) = query.threshold {
        ranked.and_where(Expr::col((d, score_column)).lte(threshold));
    }
    ranked
}

/// The distances of the vectors the scope admits, read from the vector table alone: it holds
/// each fragment's classification, metadata and whether it is current (`live`), with indexes
/// on the classification and the declared fields of the live rows. It is named `fragments`
/// here, so that the filter compiled over `fragments` applies to it unchanged (the name is the
/// subquery's own: the statement's `fragments` outside it is the table). On a 5 % scope of
/// 59,833 fragments read through an index: 2.7–3.1 ms, against 4.6–5.4 ms by key
/// ([`distances_by_key`]).
fn distances_in_vector_table(scope: &Scope<'_>, query: &Nearest<'_>) -> SelectStatement {
    let f = fragments();
    let mut distances = distances_from(query, f.clone());
    distances
        .and_where(Expr::col((f.clone(), Alias::new("live"))))
        .and_where(
            Expr::col((f, Alias::new("classification")))
                .is_in(scope.classifications.iter().cloned()),
        );
    if let Some(filter) = &scope.filter {
        distances.cond_where(Cond::all().add(filter.clone()));
    }
    distances
}

/// The distances of the vectors the scope admits, the scope read from `fragments`: its keys
/// gathered into an array and their vectors read by key in one index scan (which visits the
/// keys in index order, so neighbouring keys share their descent and leaf page). The vectors
/// are not joined to the scope as a table: the planner then chose by its own estimate between
/// key lookups and a hash over a scan of the whole vector table (a 5 % scope of 59,833: 43–60
/// ms hashed against 6–12 ms by key). Where no index serves the scope's conditions, a scan of
/// `fragments` reads far fewer bytes than one of the vector table (at 1,000,000 fragments of
/// 384 dimensions, 732 MB for `fragments` with its indexes against 2,997 for the vector table
/// with its own, 976 of them the HNSW index): a 1 % filter took 374 ms so against 414 through
/// the vector table (38.9 against 40.9 at 100,000).
fn distances_by_key(scope: &Scope<'_>, query: &Nearest<'_>) -> SelectStatement {
    let v = Alias::new("v");
    let mut keys = scoped_select(scope);
    keys.clear_selects().column((fragments(), Alias::new("id")));
    let mut distances = distances_from(query, v);
    distances.and_where(Expr::cust_with_expr(
        r#""v"."fragment_id" = ANY(ARRAY($1))"#,
        keys,
    ));
    distances
}

/// `SELECT fragment_id AS id, <distance> AS score FROM <vector table> AS alias OFFSET 0`, to
/// which the caller adds the scope's conditions.
fn distances_from(query: &Nearest<'_>, alias: Alias) -> SelectStatement {
    let mut distances = Query::select();
    distances
        .expr_as(
            Expr::col((alias.clone(), Alias::new("fragment_id"))),
            Alias::new("id"),
        )
        .expr_as(score(query, alias.clone()), Alias::new("score"))
        .from_as(Alias::new(query.vector_table), alias)
        .offset(0);
    distances
}

/// The statement of a full-text search within a scope: every remaining word of `query`
/// (parsed with the text search configuration `config`) must appear; the score is the rank
/// divided by 1 + the logarithm of the fragment's length; highest first.
///
/// The query is parsed in a subquery, which Postgres evaluates once per statement: a generic
/// plan would otherwise parse it again for every fragment it ranks (100 ms a fragment for a
/// query of 20,000 words), and a custom plan while planning, where the recursion over a query
/// of 50,000 words exceeds Postgres's stack.
pub fn full_text(
    scope: &Scope<'_>,
    config: &str,
    query: &str,
    k: u64,
    threshold: Option<f64>,
) -> SelectStatement {
    let tsquery = Expr::cust_with_values(
        "(SELECT plainto_tsquery($1::regconfig, $2))",
        [config.to_owned(), query.to_owned()],
    );
    let rank = Expr::cust_with_exprs(
        r#"ts_rank("fragments"."tsv", $1, 1)::double precision"#,
        [tsquery.clone()],
    );
    let mut select = scoped_select(scope);
    select
        .expr_as(rank.clone(), Alias::new("score"))
        .and_where(Expr::cust_with_exprs(
            r#""fragments"."tsv" @@ $1"#,
            [tsquery],
        ))
        .order_by(Alias::new("score"), Order::Desc)
        .limit(k);
    if let Some(threshold) = threshold {
        select.and_where(rank.gte(threshold));
    }
    select
}
