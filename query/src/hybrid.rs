//! The statement of a hybrid search: the vector list and the lexical list of one scope, fused
//! by reciprocal rank, in one statement.
//!
//! ```text
//! WITH vec AS (<nearest candidates: id, score>),                  -- the query vector is $1
//!      <the lexical list: terms, lexn, lexw, lexh, lexs, lextf and lex (id, score); see lexical_ctes>,
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
    Alias, CommonTableExpression, Expr, ExprTrait, Func, JoinType, Order, PostgresQueryBuilder,
    Query, SelectStatement, UnionType, Values, WithClause, WithQuery,
};

use crate::search::{HIT_COLUMNS, Nearest, Scope, nearest_candidates, scoped_select};

/// The lexical side of a hybrid search.
pub struct Lexical<'a> {
    /// The text search configuration of the query's likeliest language (`english`, …; `simple`
    /// when none is found): see [`lexical_ctes`] for the words looked for.
    pub config: &'a str,
    /// The query as the client wrote it.
    pub query: &'a str,
    /// How many fragments the list holds at most.
    pub fetch: u64,
}

/// The most of a query the lexical list reads, in bytes: a longer query is cut after its last
/// whole word within them. A text search vector holds at most 1 MB, so Postgres refuses to
/// parse the words of a query of about a megabyte at once.
pub const LEXICAL_QUERY_BYTES: usize = 100_000;

/// What the lexical list reads of `query`: all of it within [`LEXICAL_QUERY_BYTES`], else its
/// words up to the last space within them (their first bytes when there is none).
pub fn lexical_text(query: &str) -> &str {
    if query.len() <= LEXICAL_QUERY_BYTES {
        return query;
    }
    let end = query.floor_char_boundary(LEXICAL_QUERY_BYTES);
    let (head, rest) = query.split_at(end);
    if rest.starts_with(char::is_whitespace) {
        return head;
    }
    head.rfind(char::is_whitespace)
        .map_or(head, |space| &head[..space])
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

/// BM25's saturation of a word's weight by the fragment's length against the average.
pub const BM25_K1: f64 = 1.2;
/// BM25's share of the length normalisation.
pub const BM25_B: f64 = 0.75;

/// The lexical list's common table expressions, in order; the last, `lex`, holds the list's
/// fragments (`id`, `score`), best first by BM25 score, then id:
///
/// ```text
/// terms AS (<the query's words: lexeme, q (the lexeme as a tsquery), df>),
/// lexn AS (<n: the pipeline's fragments with a full-text vector, avgdl: their average length>),
/// lexw AS (<each word's weight w: ln(1 + (n − df + 0.5) / (df + 0.5))>),
/// lexh AS (<the first step's (word, fragment) pairs, from the postings or the full-text index>),
/// lexs AS (<the shortlist: the first fragments of lexh by their sums>),
/// lextf AS (<the shortlist's words with their frequencies tf, from each one's tsv>),
/// lex AS (SELECT id, Σ w × tf × (k1 + 1) / (tf + k1 × norm(dl)) AS score … LIMIT fetch)
/// ```
///
/// where norm(dl) = 1 − b + b × dl / avgdl. The query's words are its lexemes under `config`
/// (stemmed, stop words left out) and, for fragments indexed under another configuration, its
/// words as written (`simple`) that `config` does not treat as stop words.
///
/// The word statistics are the pipeline's, kept in `word_counts` as its fragments are written
/// (see the migration that creates it): `df` counts the pipeline's current fragments holding
/// the word, `n` all of them, a fragment's length `dl` is the size of its stored text and
/// `avgdl` the average. A word none of them holds is left out.
///
/// Two steps, because a word's frequency in a fragment is in the fragment's full-text vector,
/// stored out of line. The first finds the candidates and keeps [`SHORTLIST_FACTOR`] × `fetch`
/// of them (at least [`SHORTLIST_MIN`]); the second reads their vectors once each and ranks
/// them by BM25 over every word of the query. Both scores are rounded to 9 decimals, so that
/// fragments of equal scores are ordered by id whatever order the sums took their terms in.
///
/// The first step reads, when the scope has no metadata filter, the postings (see the
/// migration that creates them): the first [`POSTINGS_PER_WORD`] fragments of each word in
/// order of impact, its BM25 term weight in the fragment, summed with the words' weights. A
/// fragment holding a word beyond its first postings is found through the others only.
///
/// Under a metadata filter, of which a word's first postings may hold none, the first step
/// reads the scope's fragments holding each word through the full-text index instead; each
/// costs about a microsecond, and a word held by most of the pipeline weighs almost nothing.
/// So the words are read from the rarest up while their fragments together stay within
/// [`READ_BUDGET`] (the rarest always), each counted once; the others count only for the
/// fragments found through the rarer ones, in the second step. A fragment holding none of the
/// words read is not in the list.
pub fn lexical_ctes(scope: &Scope<'_>, lexical: &Lexical<'_>) -> Vec<CommonTableExpression> {
    let text = lexical_text(lexical.query);
    let unnest = |vector: Expr| Func::cust("unnest").arg(vector);
    let mut words = Query::select();
    words
        .column(Alias::new("lexeme"))
        .from_function(
            unnest(Expr::cust_with_values(
                "to_tsvector($1::regconfig, $2)",
                [lexical.config, text],
            )),
            Alias::new("stemmed"),
        )
        .union(
            UnionType::Distinct,
            Query::select()
                .column(Alias::new("lexeme"))
                .from_function(
                    unnest(Expr::cust_with_values("to_tsvector('simple', $1)", [text])),
                    Alias::new("written"),
                )
                .and_where(Expr::cust_with_values(
                    r#"to_tsvector($1::regconfig, "lexeme") <> ''::tsvector"#,
                    [lexical.config],
                ))
                .to_owned(),
        );
    // The sum of a word's rows of `word_counts` in the pipeline (`''`: every fragment).
    let counts = |word: Expr, column: &str| {
        Query::select()
            .expr_as(
                Expr::cust(format!(
                    r#"sum("word_counts"."{column}")::double precision"#
                )),
                Alias::new(column),
            )
            .from(Alias::new("word_counts"))
            .and_where(
                Expr::col((Alias::new("word_counts"), Alias::new("pipeline_id")))
                    .eq(scope.pipeline_id),
            )
            .and_where(Expr::col((Alias::new("word_counts"), Alias::new("word"))).eq(word))
            .to_owned()
    };
    // A lexeme as a tsquery of that lexeme alone: quoted, its quotes and backslashes escaped.
    let terms = Query::select()
        .column((Alias::new("words"), Alias::new("lexeme")))
        .expr_as(
            Expr::cust(
                r#"('''' || replace(replace("words"."lexeme", '\', '\\'), '''', '''''') || '''')::tsquery"#,
            ),
            Alias::new("q"),
        )
        .column((Alias::new("s"), Alias::new("fragments")))
        .from_subquery(words, Alias::new("words"))
        .join_lateral(
            JoinType::InnerJoin,
            counts(Expr::col((Alias::new("words"), Alias::new("lexeme"))), "fragments"),
            Alias::new("s"),
            Expr::cust(r#""s"."fragments" > 0"#),
        )
        .to_owned();
    let totals = counts(Expr::val(""), "fragments")
        .expr_as(
            Expr::cust(
                r#"sum("word_counts"."length")::double precision / nullif(sum("word_counts"."fragments"), 0)"#,
            ),
            Alias::new("avgdl"),
        )
        .to_owned();
    let mut weights = Query::select();
    weights
        .columns([
            (Alias::new("terms"), Alias::new("lexeme")),
            (Alias::new("terms"), Alias::new("q")),
        ])
        .expr_as(
            Expr::cust(
                r#"ln(1 + ("lexn"."fragments" - "terms"."fragments" + 0.5) / ("terms"."fragments" + 0.5))"#,
            ),
            Alias::new("w"),
        )
        .from(Alias::new("terms"))
        .cross_join(Alias::new("lexn"));
    let (hits, shortlist) = if scope.filter.is_none() {
        from_postings(scope, lexical.fetch)
    } else {
        from_full_text_index(scope, lexical.fetch, &mut weights)
    };
    // Then the shortlist's word frequencies, one read of each fragment's full-text vector,
    // of which only the query's words are unnested: weighted `A` (the stored vectors hold the
    // default weight `D` only) and the others filtered out in one pass.
    let frequencies = Query::select()
        .column((Alias::new("lexs"), Alias::new("id")))
        .expr_as(
            Expr::cust(r#"octet_length("fragments"."content")::double precision"#),
            Alias::new("dl"),
        )
        .column((Alias::new("u"), Alias::new("lexeme")))
        .expr_as(
            Expr::cust(r#"cardinality("u"."positions")::double precision"#),
            Alias::new("tf"),
        )
        .from(Alias::new("lexs"))
        .inner_join(
            Alias::new("fragments"),
            Expr::col((Alias::new("fragments"), Alias::new("id")))
                .equals((Alias::new("lexs"), Alias::new("id"))),
        )
        .join_lateral(
            JoinType::InnerJoin,
            Query::select()
                .columns([Alias::new("lexeme"), Alias::new("positions")])
                .from_function(
                    unnest(Expr::cust(
                        r#"ts_filter(setweight("fragments"."tsv", 'A', (SELECT array_agg("lexeme") FROM "lexw")), '{a}')"#,
                    )),
                    Alias::new("u"),
                )
                .to_owned(),
            Alias::new("u"),
            Expr::cust("true"),
        )
        .to_owned();
    let score = Expr::cust_with_values(
        r#"round(sum("lexw"."w" * "lextf"."tf" * ($1 + 1) / ("lextf"."tf" + $2 * (1 - $3 + $4 * "lextf"."dl" / "lexn"."avgdl")))::numeric, 9)::double precision"#,
        [BM25_K1, BM25_K1, BM25_B, BM25_B],
    );
    let list = Query::select()
        .column((Alias::new("lextf"), Alias::new("id")))
        .expr_as(score, Alias::new("score"))
        .from(Alias::new("lextf"))
        .inner_join(
            Alias::new("lexw"),
            Expr::col((Alias::new("lexw"), Alias::new("lexeme")))
                .equals((Alias::new("lextf"), Alias::new("lexeme"))),
        )
        .cross_join(Alias::new("lexn"))
        .group_by_col((Alias::new("lextf"), Alias::new("id")))
        .order_by(Alias::new("score"), Order::Desc)
        .order_by((Alias::new("lextf"), Alias::new("id")), Order::Asc)
        .limit(lexical.fetch)
        .to_owned();

    vec![
        cte("terms", terms),
        cte("lexn", totals),
        cte("lexw", weights),
        cte("lexh", hits),
        cte("lexs", shortlist),
        cte("lextf", frequencies),
        cte("lex", list),
    ]
}

/// The first step from the postings (see the migration that creates them), when the scope has
/// no metadata filter: the first [`POSTINGS_PER_WORD`] of each query word among the scope's
/// classifications (at least the shortlist's length), in the index's order of impact, summed
/// by fragment with the words' weights. Every posting is of a current fragment of the
/// pipeline, so the classifications are the whole scope.
fn from_postings(scope: &Scope<'_>, fetch: u64) -> (SelectStatement, SelectStatement) {
    let (lexh, postings) = (Alias::new("lexh"), Alias::new("postings"));
    let shortlist_len = shortlist_len(fetch);
    let first = Query::select()
        .columns([Alias::new("fragment_id"), Alias::new("impact")])
        .from(postings.clone())
        .and_where(Expr::col((postings.clone(), Alias::new("pipeline_id"))).eq(scope.pipeline_id))
        .and_where(Expr::cust(r#""postings"."word" = "lexw"."lexeme""#))
        .and_where(
            Expr::col((postings.clone(), Alias::new("classification")))
                .is_in(scope.classifications.iter().cloned()),
        )
        .order_by((postings.clone(), Alias::new("impact")), Order::Desc)
        .order_by((postings, Alias::new("fragment_id")), Order::Asc)
        .limit(Ord::max(POSTINGS_PER_WORD, shortlist_len))
        .to_owned();
    let p = Alias::new("p");
    let hits = Query::select()
        .column((Alias::new("lexw"), Alias::new("w")))
        .expr_as(
            Expr::col((p.clone(), Alias::new("fragment_id"))),
            Alias::new("id"),
        )
        .column((p.clone(), Alias::new("impact")))
        .from(Alias::new("lexw"))
        .join_lateral(JoinType::InnerJoin, first, p, Expr::cust("true"))
        .to_owned();
    // Rounded in billionths, so that equal sums are ordered by id whatever their terms' order.
    let shortlist = Query::select()
        .column((lexh.clone(), Alias::new("id")))
        .from(lexh.clone())
        .group_by_col((lexh.clone(), Alias::new("id")))
        .order_by_expr(
            Expr::cust(r#"round(sum("lexh"."w" * "lexh"."impact") * 1e9)"#),
            Order::Desc,
        )
        .order_by((lexh, Alias::new("id")), Order::Asc)
        .limit(shortlist_len)
        .to_owned();
    (hits, shortlist)
}

/// The first step through the full-text index, when the scope has a metadata filter (of which
/// the first postings of a word may hold none): the fragments of the scope holding each word
/// read, ranked with each word counted once. Which words are read is a column of `weights`.
fn from_full_text_index(
    scope: &Scope<'_>,
    fetch: u64,
    weights: &mut SelectStatement,
) -> (SelectStatement, SelectStatement) {
    weights.expr_as(
        Expr::cust_with_values(
            r#"row_number() OVER (ORDER BY "terms"."fragments", "terms"."lexeme") = 1 OR sum("terms"."fragments") OVER (ORDER BY "terms"."fragments", "terms"."lexeme") <= $1"#,
            [READ_BUDGET as f64],
        ),
        Alias::new("read"),
    );
    let mut holding = scoped_select(scope);
    holding
        .clear_selects()
        .column((Alias::new("fragments"), Alias::new("id")))
        .expr_as(
            Expr::cust(r#"octet_length("fragments"."content")::double precision"#),
            Alias::new("dl"),
        )
        .and_where(Expr::cust(r#""fragments"."tsv" @@ "lexw"."q""#));
    let f = Alias::new("f");
    let hits = Query::select()
        .column((Alias::new("lexw"), Alias::new("w")))
        .columns([(f.clone(), Alias::new("id")), (f.clone(), Alias::new("dl"))])
        .from(Alias::new("lexw"))
        .join_lateral(JoinType::InnerJoin, holding, f, Expr::cust("true"))
        .and_where(Expr::cust(r#""lexw"."read""#))
        .to_owned();
    // Rounded in billionths as a float (the same order as a `numeric` rounding to 9 decimals,
    // without converting each of the thousands of fragments found). Each row of `lexh` carries
    // its word's weight, so the fragments are summed without joining the words again.
    let held = Expr::cust_with_values(
        r#"round(sum("lexh"."w") * ($1 + 1) / (1 + $2 * (1 - $3 + $4 * any_value("lexh"."dl") / (SELECT "avgdl" FROM "lexn"))) * 1e9)"#,
        [BM25_K1, BM25_K1, BM25_B, BM25_B],
    );
    let shortlist = Query::select()
        .column((Alias::new("lexh"), Alias::new("id")))
        .from(Alias::new("lexh"))
        .group_by_col((Alias::new("lexh"), Alias::new("id")))
        .order_by_expr(held, Order::Desc)
        .order_by((Alias::new("lexh"), Alias::new("id")), Order::Asc)
        .limit(shortlist_len(fetch))
        .to_owned();
    (hits, shortlist)
}

/// How many fragments the first step keeps for a list of `fetch`.
fn shortlist_len(fetch: u64) -> u64 {
    let len = Ord::max(fetch.saturating_mul(SHORTLIST_FACTOR), SHORTLIST_MIN);
    Ord::min(len, i64::MAX.unsigned_abs())
}

/// The first step keeps this many times the list's length…
pub const SHORTLIST_FACTOR: u64 = 4;
/// …and never fewer than this: at the default `fetch_k` 10, 40 changed one answer of the 100
/// of the quality benchmark by one rank and took a sixth off the statement of 100
/// (docs/benchmarks.md).
pub const SHORTLIST_MIN: u64 = 40;

/// The fragments the words read through the full-text index may hold together: see
/// [`lexical_ctes`].
pub const READ_BUDGET: u64 = 5_000;

/// How many of each word's postings the first step reads, best first (see [`lexical_ctes`]).
pub const POSTINGS_PER_WORD: u64 = 300;

/// The lexical list on its own: its fragments' ids, best first.
pub fn lexical_candidates(scope: &Scope<'_>, lexical: &Lexical<'_>) -> WithQuery {
    let mut with = WithClause::new();
    for cte in lexical_ctes(scope, lexical) {
        with.cte(cte);
    }
    Query::select()
        .column(Alias::new("id"))
        .from(Alias::new("lex"))
        .order_by(Alias::new("score"), Order::Desc)
        .order_by(Alias::new("id"), Order::Asc)
        .to_owned()
        .with(with)
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

    let mut with = WithClause::new();
    with.cte(cte("vec", nearest_candidates(scope, &hybrid.nearest)));
    for cte in lexical_ctes(scope, &hybrid.lexical) {
        with.cte(cte);
    }
    let with = with
        .cte(cte("vr", ranked("vec", r#""score", "id""#)))
        .cte(cte("lr", ranked("lex", r#""score" DESC, "id""#)))
        .cte(cte("fused", fuse))
        .to_owned();
    select.with(with).build(PostgresQueryBuilder)
}

#[cfg(test)]
mod tests {
    use super::{LEXICAL_QUERY_BYTES, lexical_text};

    #[test]
    fn a_query_within_the_limit_is_read_whole() {
        assert_eq!(lexical_text("purring cats"), "purring cats");
        let full = "a".repeat(LEXICAL_QUERY_BYTES);
        assert_eq!(lexical_text(&full), full);
    }

    #[test]
    fn a_longer_query_is_cut_after_its_last_whole_word() {
        // Words of 7 bytes and a space: the limit falls inside a word, which is left out.
        let query = "abcdefg ".repeat(LEXICAL_QUERY_BYTES / 8 + 10);
        let read = lexical_text(&query);
        assert!(read.len() <= LEXICAL_QUERY_BYTES);
        assert!(read.ends_with("abcdefg"), "{:?}", &read[read.len() - 10..]);
        assert_eq!(read.len(), LEXICAL_QUERY_BYTES - 1);

        // The limit right after a word: that word is kept.
        let mut query = "b".repeat(LEXICAL_QUERY_BYTES - 4);
        query.push_str(" xyz tail");
        assert_eq!(lexical_text(&query).len(), LEXICAL_QUERY_BYTES);
        assert!(lexical_text(&query).ends_with(" xyz"));
    }

    #[test]
    fn a_long_query_without_spaces_is_cut_at_a_character_boundary() {
        // 'é' is two bytes: the limit falls inside one of them when preceded by one byte.
        let query = format!("x{}", "é".repeat(LEXICAL_QUERY_BYTES));
        let read = lexical_text(&query);
        assert_eq!(read.len(), LEXICAL_QUERY_BYTES - 1);
        assert!(query.starts_with(read));
    }
}
