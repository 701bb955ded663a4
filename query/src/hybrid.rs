//! The statement of a hybrid search: the vector list and the lexical list of one scope, fused
//! by reciprocal rank, in one statement.
//!
//! ```text
//! WITH vec AS (<nearest candidates: id, score>),                  -- the query vector is $1
//!      lex AS (<fragments holding any word of the query: id, score>),
//!      vr  AS (SELECT id, row_number() OVER (ORDER BY score, id) AS r FROM vec),
//!      lr  AS (SELECT id, row_number() OVER (ORDER BY score DESC, id) AS r FROM lex),
//!      fused AS (SELECT coalesce(vr.id, lr.id) AS id, vr.r AS similarity_rank,
//!                       lr.r AS full_text_rank,
//!                       coalesce(w_s / (rrf_k + vr.r), 0) + coalesce(w_t / (rrf_k + lr.r), 0)
//!                         AS score
//!                FROM (SELECT * FROM vr WHERE r <= candidates) vr FULL JOIN lr USING (id)
//!                ORDER BY score DESC, id LIMIT k)
//! SELECT <fragment columns>, score, similarity_rank, full_text_rank
//! FROM fused JOIN fragments ON fragments.id = fused.id ORDER BY score DESC, id
//! ```
//!
//! The vector list is the nearest-neighbour selection of [`crate::search`] (a walk of the
//! HNSW index or the exact path, as the caller chose), which may fetch more rows than the
//! candidates a walk needs: its rows are ranked by their exact distance and the first
//! `candidates` kept. Ranks start at 1; ties are broken by fragment id in both lists and in
//! the fused order, so the order is a function of the two lists.

use sea_query::{
    Alias, CommonTableExpression, Expr, ExprTrait, Order, PostgresQueryBuilder, Query,
    SelectStatement, Values, WithClause,
};

use crate::search::{HIT_COLUMNS, Nearest, Scope, nearest_candidates, scoped_select};

/// The lexical side of a hybrid search.
pub struct Lexical<'a> {
    /// The text search configuration of the query's language (`english`, `simple`, …).
    pub config: &'a str,
    /// The query as the client wrote it.
    pub query: &'a str,
    /// How many fragments the list holds at most.
    pub fetch: u64,
}

/// How the two lists are fused: score = Σ weight / (`rrf_k` + rank) over the lists a fragment
/// is in.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Fusion {
    pub rrf_k: f64,
    pub similarity_weight: f64,
    pub full_text_weight: f64,
}

/// A hybrid search: both lists and how they are fused.
pub struct Hybrid<'a> {
    /// The vector list's selection; its fetch may exceed `candidates` (a walk's margin).
    pub nearest: Nearest<'a>,
    pub lexical: Lexical<'a>,
    /// How many of each list's first fragments take part in the fusion.
    pub candidates: u64,
    pub fusion: Fusion,
    /// Fragments returned at most.
    pub k: u64,
}

/// The query as a `tsquery` that any of its words matches: `plainto_tsquery` (stemming and
/// stop words of the configuration, every word required) with its `&` turned into `|`. A
/// scalar subquery, so Postgres computes it once for the statement, as an index condition.
fn any_word_query(lexical: &Lexical<'_>) -> Expr {
    Expr::cust_with_values(
        "(SELECT replace(plainto_tsquery($1::regconfig, $2)::text, ' & ', ' | ')::tsquery)",
        [lexical.config.to_owned(), lexical.query.to_owned()],
    )
}

/// The lexical list: the fragments of the scope holding any word of the query, by descending
/// cover density rank (`ts_rank_cd`, normalised by 1 + the logarithm of the fragment's
/// length), then id: `id`, `score`.
pub fn lexical_candidates(scope: &Scope<'_>, lexical: &Lexical<'_>) -> SelectStatement {
    let rank = Expr::cust_with_exprs(
        r#"ts_rank_cd("fragments"."tsv", $1, 1)::double precision"#,
        [any_word_query(lexical)],
    );
    let mut select = scoped_select(scope);
    select
        .clear_selects()
        .column((Alias::new("fragments"), Alias::new("id")))
        .expr_as(rank, Alias::new("score"))
        .and_where(Expr::cust_with_exprs(
            r#""fragments"."tsv" @@ $1"#,
            [any_word_query(lexical)],
        ))
        .order_by(Alias::new("score"), Order::Desc)
        .order_by((Alias::new("fragments"), Alias::new("id")), Order::Asc)
        .limit(lexical.fetch);
    select
}

fn cte(name: &str, select: SelectStatement) -> CommonTableExpression {
    let mut cte = CommonTableExpression::new();
    cte.table_name(Alias::new(name)).query(select);
    cte
}

/// `SELECT id, row_number() OVER (ORDER BY <order>) AS r FROM <list>`.
fn ranked(list: &str, order: &str) -> SelectStatement {
    Query::select()
        .column(Alias::new("id"))
        .expr_as(
            Expr::cust(format!("row_number() OVER (ORDER BY {order})")),
            Alias::new("r"),
        )
        .from(Alias::new(list))
        .to_owned()
}

/// The hybrid statement (see the module's documentation), built.
pub fn hybrid(scope: &Scope<'_>, hybrid: &Hybrid<'_>) -> (String, Values) {
    let (vr, lr, fused) = (Alias::new("vr"), Alias::new("lr"), Alias::new("fused"));
    let id = Alias::new("id");
    let rank = Alias::new("r");

    let mut first_vectors = Query::select();
    first_vectors
        .columns([id.clone(), rank.clone()])
        .from(vr.clone())
        .and_where(Expr::col(rank.clone()).lte(hybrid.candidates));
    let fusion = hybrid.fusion;
    let contribution = |list: &str, weight: f64| {
        Expr::cust_with_values(
            format!(r#"coalesce($1 / ($2 + "{list}"."r"), 0)"#),
            [weight, fusion.rrf_k],
        )
    };
    let mut fuse = Query::select();
    fuse.expr_as(Expr::cust(r#"coalesce("vr"."id", "lr"."id")"#), id.clone())
        .expr_as(
            Expr::col((vr.clone(), rank.clone())),
            Alias::new("similarity_rank"),
        )
        .expr_as(
            Expr::col((lr.clone(), rank.clone())),
            Alias::new("full_text_rank"),
        )
        .expr_as(
            contribution("vr", fusion.similarity_weight)
                .add(contribution("lr", fusion.full_text_weight)),
            Alias::new("score"),
        )
        .from_subquery(first_vectors, vr.clone())
        .full_outer_join(
            lr.clone(),
            Expr::col((lr.clone(), id.clone())).equals((vr.clone(), id.clone())),
        )
        .order_by(Alias::new("score"), Order::Desc)
        .order_by(id.clone(), Order::Asc)
        .limit(hybrid.k);

    let f = Alias::new("fragments");
    let mut select = Query::select();
    select
        .columns(HIT_COLUMNS.map(|c| (f.clone(), Alias::new(c))))
        .columns([
            (fused.clone(), Alias::new("score")),
            (fused.clone(), Alias::new("similarity_rank")),
            (fused.clone(), Alias::new("full_text_rank")),
        ])
        .from(fused.clone())
        .inner_join(
            f.clone(),
            Expr::col((f, id.clone())).equals((fused.clone(), id.clone())),
        )
        .order_by((fused.clone(), Alias::new("score")), Order::Desc)
        .order_by((fused.clone(), id), Order::Asc);

    let with = WithClause::new()
        .cte(cte("vec", nearest_candidates(scope, &hybrid.nearest)))
        .cte(cte("lex", lexical_candidates(scope, &hybrid.lexical)))
        .cte(cte("vr", ranked("vec", r#""score", "id""#)))
        .cte(cte("lr", ranked("lex", r#""score" DESC, "id""#)))
        .cte(cte("fused", fuse))
        .to_owned();
    select.with(with).build(PostgresQueryBuilder)
}
