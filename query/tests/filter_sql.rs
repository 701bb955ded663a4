//! Snapshots of compiled metadata filters (`SELECT id FROM fragments WHERE <condition>`, SQL
//! text and bound values), stored in the workspace's top-level `snapshots/` folder as
//! `filter_*.snap`. The schema is `filter_common::schema()`.

#![expect(clippy::unwrap_used, clippy::expect_used, reason = "tests fail loudly")]

mod filter_common;

use filter_common::render;
use sea_query::PostgresQueryBuilder;
use trove_query::filter::{TeqExpansions, TeqStart, teq_expansion_query};

fn snapshot_text(name: &str, description: &str, body: String) {
    insta::with_settings!({
        snapshot_path => concat!(env!("CARGO_MANIFEST_DIR"), "/../snapshots"),
        prepend_module_to_snapshot => false,
        omit_expression => true,
        description => description,
    }, {
        insta::assert_snapshot!(name, body);
    });
}

fn snapshot(name: &str, json: &str) {
    snapshot_text(name, json, render(json, &TeqExpansions::new()));
}

fn snapshot_teq(name: &str, json: &str, teq: &TeqExpansions) {
    snapshot_text(
        name,
        &format!("{json}\nexpansion: {teq:?}"),
        render(json, teq),
    );
}

/// Field and a value of each comparable type.
const TYPED_VALUES: [(&str, &str, &str); 4] = [
    ("string", "title", r#""Dune""#),
    ("integer", "year", "1965"),
    ("number", "price", "9.99"),
    ("boolean", "draft", "false"),
];

#[test]
fn comparisons_on_every_type() {
    for (op, suffix) in [
        ("$eq", "eq"),
        ("$neq", "neq"),
        ("$gt", "gt"),
        ("$ge", "ge"),
        ("$lt", "lt"),
        ("$le", "le"),
    ] {
        for (type_name, field, value) in TYPED_VALUES {
            let json = format!(r#"{{"{field}": {{"{op}": {value}}}}}"#);
            snapshot(&format!("filter_{suffix}_{type_name}"), &json);
        }
    }
}

#[test]
fn integers_on_number_fields_and_large_integers() {
    snapshot(
        "filter_eq_number_integer_value",
        r#"{"price": {"$eq": 10}}"#,
    );
    snapshot(
        "filter_eq_integer_above_i64",
        r#"{"year": {"$eq": 9223372036854775808}}"#,
    );
    snapshot(
        "filter_eq_integer_extremes",
        r#"{"$and": [{"year": {"$ge": -9223372036854775808}}, {"year": {"$le": 9223372036854775807}}]}"#,
    );
}

#[test]
fn patterns() {
    snapshot("filter_like", r#"{"title": {"$like": "Du%"}}"#);
    snapshot("filter_ilike", r#"{"title": {"$ilike": "%dune_"}}"#);
    snapshot(
        "filter_like_escapes",
        r#"{"title": {"$like": "100\\% pure\\_\\\\%"}}"#,
    );
    // A final unpaired backslash becomes a literal one (doubled); pairs before it stay.
    snapshot(
        "filter_like_trailing_backslash",
        r#"{"title": {"$like": "C:\\"}, "topic": {"$ilike": "a\\\\\\"}}"#,
    );
    snapshot(
        "filter_like_quotes",
        r#"{"title": {"$like": "it's a \"quote\"; DROP TABLE fragments; --"}}"#,
    );
}

#[test]
fn membership_on_every_type() {
    let lists = [
        (
            "string",
            "title",
            r#"["Dune", "it's", "a\"b\\c", "NULL", "x,{y}"]"#,
        ),
        ("integer", "year", "[1965, -1, 9223372036854775807]"),
        ("number", "price", "[9.99, 10, 1e300, -0.5]"),
        ("boolean", "draft", "[true]"),
    ];
    for (op, suffix) in [("$in", "in"), ("$not-in", "not_in")] {
        for (type_name, field, list) in lists {
            let json = format!(r#"{{"{field}": {{"{op}": {list}}}}}"#);
            snapshot(&format!("filter_{suffix}_{type_name}"), &json);
        }
    }
    snapshot("filter_in_empty_boolean", r#"{"draft": {"$in": []}}"#);
    snapshot(
        "filter_not_in_empty_boolean",
        r#"{"draft": {"$not-in": []}}"#,
    );
    snapshot(
        "filter_not_not_in_empty_boolean",
        r#"{"$not": {"draft": {"$not-in": []}}}"#,
    );
    snapshot(
        "filter_in_integer_above_i64",
        "{\"year\": {\"$in\": [1, 18446744073709551615]}}",
    );
}

#[test]
fn logical_forms() {
    snapshot("filter_empty", "{}");
    snapshot(
        "filter_field_map",
        r#"{"title": {"$eq": "Dune"}, "year": {"$gt": 1960}, "draft": {"$eq": false}}"#,
    );
    snapshot("filter_and_empty", r#"{"$and": []}"#);
    snapshot("filter_or_empty", r#"{"$or": []}"#);
    snapshot(
        "filter_and",
        r#"{"$and": [{"title": {"$eq": "Dune"}}, {"year": {"$lt": 2000}}]}"#,
    );
    snapshot(
        "filter_or",
        r#"{"$or": [{"title": {"$eq": "Dune"}}, {"year": {"$lt": 2000}}]}"#,
    );
    snapshot("filter_not", r#"{"$not": {"title": {"$eq": "Dune"}}}"#);
    snapshot(
        "filter_not_and",
        r#"{"$not": {"$and": [{"title": {"$eq": "Dune"}}, {"year": {"$lt": 2000}}]}}"#,
    );
    snapshot(
        "filter_not_or",
        r#"{"$not": {"$or": [{"title": {"$eq": "Dune"}}, {"year": {"$lt": 2000}}]}}"#,
    );
    snapshot(
        "filter_not_not",
        r#"{"$not": {"$not": {"title": {"$eq": "Dune"}}}}"#,
    );
    snapshot("filter_not_empty", r#"{"$not": {}}"#);
    snapshot(
        "filter_or_empty_object_first",
        r#"{"$or": [{}, {"title": {"$eq": "Dune"}}]}"#,
    );
    snapshot(
        "filter_or_empty_object_later",
        r#"{"$or": [{"title": {"$eq": "Dune"}}, {}, {"year": {"$eq": 1965}}]}"#,
    );
    snapshot("filter_or_only_empty_object", r#"{"$or": [{}]}"#);
    snapshot(
        "filter_or_empty_and_later",
        r#"{"$or": [{"title": {"$eq": "Dune"}}, {"$and": []}]}"#,
    );
    snapshot(
        "filter_and_empty_object",
        r#"{"$and": [{}, {"title": {"$eq": "Dune"}}]}"#,
    );
    snapshot(
        "filter_nested",
        r#"{"$and": [
            {"$or": [{"title": {"$like": "D%"}}, {"$not": {"year": {"$in": [1965, 1984]}}}]},
            {"$not": {"$and": [{"price": {"$ge": 5}}, {"$or": [{"draft": {"$eq": true}}, {"category": {"$neq": "sf"}}]}]}},
            {"title": {"$ilike": "%e"}, "year": {"$not-in": [2000]}}
        ]}"#,
    );
}

/// Comparisons of one field that one list test expresses are merged into it: equalities
/// and `$in`s under an `$or`, inequalities and `$not-in`s under an `$and` (or a field map's
/// nested `$and`s); other operators, other fields and the other connective stay apart.
#[test]
fn comparisons_merged_into_lists() {
    snapshot(
        "filter_or_of_equalities",
        r#"{"$or": [{"year": {"$eq": 1965}}, {"title": {"$eq": "Dune"}}, {"year": {"$in": [1984, 1990]}},
                    {"year": {"$gt": 2000}}, {"title": {"$eq": "Emma"}}, {"year": {"$eq": 2001}}]}"#,
    );
    snapshot(
        "filter_and_of_inequalities",
        r#"{"$and": [{"year": {"$neq": 1965}}, {"year": {"$not-in": [1984]}}, {"title": {"$neq": "Dune"}},
                     {"$and": [{"year": {"$neq": 2001}}]}, {"price": {"$neq": 1}}]}"#,
    );
    snapshot(
        "filter_and_of_equalities_unmerged",
        r#"{"$and": [{"year": {"$eq": 1965}}, {"year": {"$eq": 1984}}, {"$or": [{"year": {"$neq": 1}}, {"year": {"$neq": 2}}]}]}"#,
    );
}

/// Many comparisons of one integer field (64 or more) become one range set test; other
/// fields beside them, and fewer comparisons, stay as they are.
#[test]
fn many_comparisons_of_an_integer_field_become_a_range_set() {
    let ranges: Vec<String> = (0..40)
        .map(|n| {
            format!(
                r#"{{"year": {{"$lt": {}}}}}, {{"year": {{"$gt": {}}}}}"#,
                -n,
                3_000 + n
            )
        })
        .collect();
    snapshot(
        "filter_range_set_or",
        &format!(r#"{{"$or": [{}]}}"#, ranges.join(", ")),
    );
    let intervals: Vec<String> = (0..32)
        .map(|n| {
            format!(
                r#"{{"$and": [{{"year": {{"$ge": {}}}}}, {{"$not": {{"year": {{"$in": [{}, {}]}}}}}}]}}"#,
                n * 10,
                n * 10 + 1,
                n * 10 + 2
            )
        })
        .collect();
    snapshot(
        "filter_range_set_nested_beside_other_fields",
        &format!(
            r#"{{"$and": [{{"title": {{"$eq": "Dune"}}}}, {{"$or": [{}]}}]}}"#,
            intervals.join(", ")
        ),
    );
}

fn start(field: &str, value: &str, taxonomy_id: &str) -> TeqStart {
    TeqStart {
        field: field.into(),
        value: value.into(),
        taxonomy_id: taxonomy_id.into(),
    }
}

const TAXONOMY: &str = "0190a0f1-7f5e-7c3a-9d5b-3a1f2e4d5c6b";

#[test]
fn teq_conditions() {
    snapshot_teq(
        "filter_teq_no_expansion",
        &format!(r#"{{"category": {{"$teq": ["science", "{TAXONOMY}"]}}}}"#),
        &TeqExpansions::new(),
    );
    let teq = TeqExpansions::from_rows(
        [
            ("category", "science", TAXONOMY, "category", "science"),
            ("category", "science", TAXONOMY, "category", "physics"),
            ("category", "science", TAXONOMY, "topic", "optics"),
            ("category", "science", TAXONOMY, "topic", "quanta"),
        ]
        .map(|(a, b, c, d, e)| (a.into(), b.into(), c.into(), d.into(), e.into())),
    );
    snapshot_teq(
        "filter_teq_across_fields",
        &format!(r#"{{"category": {{"$teq": ["science", "{TAXONOMY}"]}}}}"#),
        &teq,
    );
    snapshot_teq(
        "filter_teq_not",
        &format!(r#"{{"$not": {{"category": {{"$teq": ["science", "{TAXONOMY}"]}}}}}}"#),
        &teq,
    );
    snapshot_teq(
        "filter_teq_unknown_taxonomy",
        r#"{"category": {"$teq": ["science", "not-a-taxonomy"]}}"#,
        &teq,
    );
}

#[test]
fn teq_expansion_sql() {
    let query = teq_expansion_query(&[
        start("category", "science", TAXONOMY),
        start("topic", "optics", "not-a-uuid"),
        start("category", "art", "0190A0F1-7F5E-7C3A-9D5B-3A1F2E4D5C6C"),
        start("category", "science", TAXONOMY),
    ])
    .expect("two starts name possible taxonomies");
    let (sql, values) = query.build(PostgresQueryBuilder);
    snapshot_text(
        "filter_teq_expansion_query",
        "science (TAXONOMY), optics (not a UUID: not read), art (upper-case UUID), science again",
        format!("{sql}\n\n{:#?}", values.0),
    );
}

/// Values holding U+0000 are never bound: each comparison becomes what it means for text that
/// cannot hold it.
#[test]
fn values_holding_nul() {
    let cases = [
        ("eq", r#"{"title": {"$eq": "a\u0000b"}}"#),
        ("neq", r#"{"title": {"$neq": "\u0000"}}"#),
        ("gt", r#"{"title": {"$gt": "Du\u0000ne"}}"#),
        ("le", r#"{"title": {"$le": "Du\u0000ne"}}"#),
        ("like", r#"{"title": {"$ilike": "%\u0000%"}}"#),
        ("in", r#"{"title": {"$in": ["Dune", "a\u0000"]}}"#),
        ("in_only", r#"{"title": {"$in": ["\u0000"]}}"#),
        (
            "not_in_only",
            r#"{"title": {"$not-in": ["\u0000", "x\u0000"]}}"#,
        ),
        (
            "deep",
            r#"{"$or": [{"$not": {"title": {"$eq": "\u0000"}}}, {"$and": [{"year": {"$eq": 1965}}, {"title": {"$like": "\u0000"}}]}]}"#,
        ),
    ];
    for (name, json) in cases {
        let rendered = render(json, &TeqExpansions::new());
        assert!(!rendered.contains('\0'), "{name}: {rendered}");
        snapshot_text(&format!("filter_nul_{name}"), json, rendered);
    }
    let teq = TeqExpansions::from_rows(
        [
            ("category", "sci\0", TAXONOMY, "category", "sci\0"),
            ("category", "sci\0", TAXONOMY, "topic", "optics"),
        ]
        .map(|(a, b, c, d, e)| (a.into(), b.into(), c.into(), d.into(), e.into())),
    );
    let json = format!(r#"{{"category": {{"$teq": ["sci\u0000", "{TAXONOMY}"]}}}}"#);
    snapshot_teq("filter_nul_teq", &json, &teq);
    assert!(
        teq_expansion_query(&[start("category", "sci\0", TAXONOMY)]).is_none(),
        "a start holding U+0000 is not read"
    );
}

/// The condition keeps its meaning when the caller adds conditions of its own (OR at the top
/// of the filter must stay parenthesized under the caller's AND).
#[test]
fn combined_with_the_callers_conditions() {
    use sea_query::{Alias, Cond, Expr, ExprTrait as _, Query};
    use trove_query::filter::{compile, validate, validate_teq};

    let json = r#"{"$or": [{"title": {"$eq": "Dune"}}, {"$not": {"year": {"$lt": 2000}}}]}"#;
    let typed = validate(
        &filter_common::parse(json).unwrap(),
        &filter_common::schema(),
    )
    .unwrap();
    validate_teq(&typed, &TeqExpansions::new()).unwrap();
    let (sql, values) = Query::select()
        .column(Alias::new("id"))
        .from(Alias::new("fragments"))
        .and_where(Expr::col((Alias::new("fragments"), Alias::new("pipeline_id"))).eq(7))
        .cond_where(
            Cond::all()
                .add(compile(&typed, "fragments", &TeqExpansions::new()))
                .add(Expr::col((Alias::new("fragments"), Alias::new("expired_at"))).is_null()),
        )
        .build(PostgresQueryBuilder);
    snapshot_text(
        "filter_combined_with_caller_conditions",
        json,
        format!("{sql}\n\n{:#?}", values.0),
    );
}

/// Lists of more than 1,000 values are tested as `IN` / `NOT IN (SELECT unnest($n))`, bound as
/// one array, in both renderings (sea-query's and the flat one for huge filters); shorter
/// lists keep `= ANY` / `<> ALL`.
#[test]
fn long_lists_are_tested_against_the_unnested_array() {
    use sea_query::{Alias, Query};
    use trove_query::filter;
    let integers = |n: i64| (0..n).map(|i| i.to_string()).collect::<Vec<_>>().join(",");
    let strings = |n: i64| {
        (0..n)
            .map(|i| format!(r#""s{i}""#))
            .collect::<Vec<_>>()
            .join(",")
    };
    let cases = [
        (
            "in",
            format!(r#"{{"year": {{"$in": [{}]}}}}"#, integers(1001)),
        ),
        (
            "not_in_under_or",
            format!(
                r#"{{"$or": [{{"title": {{"$not-in": [{}]}}}}, {{"year": {{"$gt": 2000}}}}]}}"#,
                strings(1001)
            ),
        ),
        (
            "short",
            format!(r#"{{"year": {{"$in": [{}]}}}}"#, integers(1000)),
        ),
    ];
    for (name, json) in cases {
        let typed = filter_common::typed(&json).unwrap();
        let teq = TeqExpansions::new();
        let mut rendered = Vec::new();
        for condition in [
            filter::compile(&typed, "fragments", &teq),
            filter::compile_flat(&typed, "fragments", &teq),
        ] {
            let (sql, values) = Query::select()
                .column(Alias::new("id"))
                .from(Alias::new("fragments"))
                .cond_where(condition)
                .build(PostgresQueryBuilder);
            let arrays: Vec<usize> = values
                .0
                .iter()
                .filter_map(|value| match value {
                    sea_query::Value::Array(_, Some(values)) => Some(values.len()),
                    _ => None,
                })
                .collect();
            rendered.push(format!("{sql}\n\narrays bound: {arrays:?}"));
        }
        snapshot_text(
            &format!("filter_long_list_{name}"),
            name,
            rendered.join("\n\n"),
        );
    }
}
