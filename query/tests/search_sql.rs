//! Snapshots of the search statements (PostgreSQL text and bound values), stored in the
//! workspace's top-level `snapshots/` folder as `search_*.snap`: similarity through the HNSW
//! index (and while it is built again), the exact path, MMR candidates and full text, with and
//! without a metadata filter, a taxonomy expansion, and the classifications each
//! classification form resolves to.

#![expect(clippy::unwrap_used, clippy::expect_used, reason = "tests fail loudly")]

mod filter_common;

use sea_query::{Condition, PostgresQueryBuilder, SelectStatement, Values};
use trove_query::classification::{ClassificationRequest, SearchType, resolve};
use trove_query::filter::{self, TeqExpansions};
use trove_query::hybrid::{Fusion, Hybrid, Lexical, hybrid};
use trove_query::search::{
    Distance, ExactScope, Fetch, Gate, Nearest, Scope, full_text, nearest, scope_rows,
};
use uuid::Uuid;

const PIPELINE: Uuid = Uuid::from_u128(0x0190_a0f1_7f5e_7c3a_9d5b_3a1f_2e4d_5c6b);
const TABLE: &str = "vectors_0190a0f17f5e7c3a9d5b3a1f2e4d5c6c";
const TAXONOMY: &str = "0190a0f1-7f5e-7c3a-9d5b-3a1f2e4d5c6d";

fn render((sql, values): &(String, Values)) -> String {
    format!("{sql}\n\n{:#?}", values.0)
}

fn snapshot(name: &str, description: &str, statement: &SelectStatement) {
    snapshot_built(name, description, &statement.build(PostgresQueryBuilder));
}

fn snapshot_built(name: &str, description: &str, statement: &(String, Values)) {
    insta::with_settings!({
        snapshot_path => concat!(env!("CARGO_MANIFEST_DIR"), "/../snapshots"),
        prepend_module_to_snapshot => false,
        omit_expression => true,
        description => description,
    }, {
        insta::assert_snapshot!(name, render(statement));
    });
}

/// The query vector is the statement's first value (`$1`, which the statement's text names
/// again) and no other value is a vector.
fn assert_vector_first_and_once(sql: &str, values: &Values) {
    assert!(
        matches!(values.0.first(), Some(sea_query::Value::Vector(Some(_)))),
        "{values:?}"
    );
    let vectors = values
        .0
        .iter()
        .filter(|v| matches!(v, sea_query::Value::Vector(_)))
        .count();
    assert_eq!(vectors, 1, "{sql}");
}

fn condition(json: &str, teq: &TeqExpansions) -> Condition {
    let typed = filter_common::typed(json).unwrap_or_else(|e| panic!("{json}: {e}"));
    filter::validate_teq(&typed, teq).unwrap();
    filter::compile(&typed, "fragments", teq)
}

fn scope<'a>(classifications: &'a [String], filter: Option<Condition>) -> Scope<'a> {
    Scope {
        pipeline_id: PIPELINE,
        classifications,
        filter,
    }
}

fn similarity(distance: Distance, order: Distance, exact: Option<ExactScope>) -> Nearest<'static> {
    Nearest {
        vector_table: TABLE,
        vector: &[0.6, 0.8],
        distance,
        order,
        index_dimensions: Some(2),
        exact,
        threshold: None,
        fetch: Fetch::Constant(5),
        with_embeddings: false,
        gate: None,
    }
}

fn public() -> Vec<String> {
    vec!["public".to_owned()]
}

#[test]
fn similarity_statements() {
    let classifications = public();
    let plain = scope(&classifications, None);
    snapshot_built(
        "search_similarity_index",
        "cosine, HNSW walk, k 5",
        &nearest(
            &plain,
            &similarity(Distance::Cosine, Distance::Cosine, None),
        ),
    );
    snapshot_built(
        "search_similarity_unit_vectors_euclidean",
        "euclidean score on unit vectors: ordered by the indexed cosine distance",
        &nearest(
            &plain,
            &similarity(Distance::Euclidean, Distance::Cosine, None),
        ),
    );
    let mut gated = similarity(Distance::Cosine, Distance::Cosine, None);
    gated.gate = Some(Gate {
        epoch: 7,
        vector_count: ("vector_count()", 1200.0),
        unrecorded_integer_fields: &[],
    });
    snapshot_built(
        "search_similarity_index_gated",
        "cosine, HNSW walk, k 5, only while the search epoch is 7 and the vectors 1,200",
        &nearest(&plain, &gated),
    );
    let mut rebuilding = similarity(Distance::Cosine, Distance::Cosine, None);
    rebuilding.index_dimensions = None;
    snapshot_built(
        "search_similarity_index_rebuilding",
        "cosine while the HNSW index is being built again: ordered by the exact distance",
        &nearest(&plain, &rebuilding),
    );
    let mut bounded = similarity(
        Distance::NegativeInnerProduct,
        Distance::NegativeInnerProduct,
        None,
    );
    bounded.threshold = Some(-0.5);
    snapshot_built(
        "search_similarity_threshold",
        "negative inner product on other vectors, threshold -0.5",
        &nearest(&plain, &bounded),
    );
    snapshot_built(
        "search_similarity_exact",
        "cosine, exact path (an ordering the index cannot serve)",
        &nearest(
            &plain,
            &similarity(
                Distance::Cosine,
                Distance::Cosine,
                Some(ExactScope::VectorTable),
            ),
        ),
    );
    let filtered = scope(
        &classifications,
        Some(condition(
            r#"{"year": {"$ge": 2020}}"#,
            &TeqExpansions::new(),
        )),
    );
    // A restricted scope fetches k rows, a count of the request: bound.
    let mut k5 = similarity(Distance::Cosine, Distance::Cosine, None);
    k5.fetch = Fetch::Bound(5);
    snapshot_built(
        "search_similarity_filter",
        r#"cosine, HNSW walk, k 5, filter {"year": {"$ge": 2020}}"#,
        &nearest(&filtered, &k5),
    );
    k5.exact = Some(ExactScope::Fragments);
    snapshot_built(
        "search_similarity_filter_exact_by_key",
        r#"cosine, exact path, k 5, filter {"year": {"$ge": 2020}} tested in `fragments` (no index serves it), the vectors read by key"#,
        &nearest(&filtered, &k5),
    );
    k5.exact = Some(ExactScope::VectorTable);
    snapshot_built(
        "search_similarity_filter_exact",
        r#"cosine, exact path, k 5, filter {"year": {"$ge": 2020}} tested in the vector table"#,
        &nearest(&filtered, &k5),
    );
    let year = ["year".to_owned()];
    k5.gate = Some(Gate {
        epoch: 7,
        vector_count: ("vector_count()", 1200.0),
        unrecorded_integer_fields: &year,
    });
    snapshot_built(
        "search_similarity_filter_exact_gated",
        r#"cosine, exact path, k 5, filter {"year": {"$ge": 2020}}, only while the search epoch is 7, the vectors 1,200 and no version recorded with a year that does not convert"#,
        &nearest(&filtered, &k5),
    );
}

#[test]
fn mmr_candidates_carry_their_embeddings() {
    let classifications = public();
    let mut candidates = similarity(Distance::Cosine, Distance::Cosine, None);
    candidates.fetch = Fetch::Bound(50);
    candidates.with_embeddings = true;
    candidates.threshold = Some(0.8);
    snapshot_built(
        "search_mmr_candidates",
        "MMR candidates: fetch_k 50, with embeddings, threshold 0.8",
        &nearest(&scope(&classifications, None), &candidates),
    );
    candidates.exact = Some(ExactScope::VectorTable);
    snapshot_built(
        "search_mmr_candidates_exact",
        "MMR candidates on the exact path: the vector table's rows ranked, then fragments and vectors joined back",
        &nearest(&scope(&classifications, None), &candidates),
    );
}

#[test]
fn full_text_statements() {
    let classifications = public();
    snapshot(
        "search_full_text",
        "english configuration, k 5",
        &full_text(
            &scope(&classifications, None),
            "english",
            "purring cats",
            5,
            None,
        ),
    );
    let teq = TeqExpansions::from_rows(
        [
            ("category", "science", TAXONOMY, "category", "science"),
            ("category", "science", TAXONOMY, "topic", "optics"),
        ]
        .map(|(a, b, c, d, e)| (a.into(), b.into(), c.into(), d.into(), e.into())),
    );
    let filter = condition(
        &format!(r#"{{"category": {{"$teq": ["science", "{TAXONOMY}"]}}}}"#),
        &teq,
    );
    snapshot(
        "search_full_text_taxonomy_threshold",
        "simple configuration, k 10, threshold 0.1, a $teq filter expanded across fields",
        &full_text(
            &scope(&classifications, Some(filter)),
            "simple",
            "optics",
            10,
            Some(0.1),
        ),
    );
}

#[test]
fn classification_forms_reach_the_statement_as_names() {
    let declared = ["public", "internal", "restricted"].map(str::to_owned);
    let hierarchy = [("internal", "public"), ("restricted", "internal")]
        .map(|(a, b)| (a.to_owned(), b.to_owned()));
    for (name, request) in [
        (
            "search_classification_string",
            ClassificationRequest::hierarchical(vec!["internal".to_owned()]),
        ),
        (
            "search_classification_array",
            ClassificationRequest::hierarchical(vec!["public".to_owned(), "nope".to_owned()]),
        ),
        (
            "search_classification_exact",
            ClassificationRequest {
                classifications: vec!["restricted".to_owned()],
                search_type: SearchType::ExactValidate,
            },
        ),
    ] {
        let names = resolve(&request, &declared, &hierarchy).expect("resolves");
        snapshot_built(
            name,
            &format!("{request:?}"),
            &nearest(
                &scope(&names, None),
                &similarity(Distance::Cosine, Distance::Cosine, None),
            ),
        );
    }
}

#[test]
fn the_scope_estimate_selects_nothing_but_keeps_every_condition() {
    let classifications = public();
    let filter = condition(r#"{"title": {"$eq": "Dune"}}"#, &TeqExpansions::new());
    snapshot(
        "search_scope_rows",
        r#"the scope of a search with filter {"title": {"$eq": "Dune"}}"#,
        &scope_rows(&scope(&classifications, Some(filter.clone())), false),
    );
    snapshot(
        "search_scope_rows_every_classification",
        r#"the same scope naming every classification of its pipeline"#,
        &scope_rows(&scope(&classifications, Some(filter)), true),
    );
}

#[test]
fn the_vector_is_the_first_value_and_bound_once() {
    let classifications = public();
    let filter = condition(r#"{"year": {"$ge": 2020}}"#, &TeqExpansions::new());
    let mut query = similarity(Distance::Euclidean, Distance::Cosine, None);
    query.threshold = Some(1.0);
    let (sql, values) = nearest(&scope(&classifications, Some(filter)), &query);
    assert_vector_first_and_once(&sql, &values);
    assert_eq!(
        sql.matches("$1").count(),
        3,
        "score, order, threshold: {sql}"
    );
}

fn hybrid_of<'a>(nearest: Nearest<'a>, query: &'a str, k: u64) -> Hybrid<'a> {
    Hybrid {
        nearest,
        lexical: Lexical {
            config: "english",
            query,
            fetch: 100,
        },
        candidates: 100,
        fusion: Fusion {
            rrf_k: 60.0,
            similarity_weight: 1.0,
            full_text_weight: 1.0,
        },
        k,
    }
}

#[test]
fn hybrid_statements() {
    let classifications = public();
    let mut walk = similarity(Distance::Cosine, Distance::Cosine, None);
    walk.fetch = Fetch::Bound(150);
    snapshot_built(
        "search_hybrid_index",
        "the vector list a walk of 150 candidates, the lexical list of 100, k 10",
        &hybrid(
            &scope(&classifications, None),
            &hybrid_of(walk, "purring cats", 10),
        ),
    );
    let filter = condition(r#"{"year": {"$ge": 2020}}"#, &TeqExpansions::new());
    let mut exact = similarity(
        Distance::Cosine,
        Distance::Cosine,
        Some(ExactScope::VectorTable),
    );
    exact.fetch = Fetch::Bound(100);
    exact.threshold = Some(0.8);
    let mut weighted = hybrid_of(exact, "optics", 5);
    weighted.fusion = Fusion {
        rrf_k: 10.0,
        similarity_weight: 0.7,
        full_text_weight: 0.3,
    };
    snapshot_built(
        "search_hybrid_exact_filter",
        "the vector list exact under a filter with a threshold, rrf_k 10, weights 0.7 / 0.3, k 5",
        &hybrid(&scope(&classifications, Some(filter)), &weighted),
    );
}

#[test]
fn a_hybrid_statement_binds_the_vector_first_and_once() {
    let classifications = public();
    let mut walk = similarity(Distance::Cosine, Distance::Cosine, None);
    walk.fetch = Fetch::Bound(120);
    let (sql, values) = hybrid(&scope(&classifications, None), &hybrid_of(walk, "cats", 5));
    assert_vector_first_and_once(&sql, &values);
    assert!(sql.starts_with(r#"WITH "vec" AS (SELECT"#), "{sql}");
}
