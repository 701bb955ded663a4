//! Properties of the whole pipeline (parse → validate → compile) over generated input:
//! nothing panics, and no value ever reaches the SQL text (every one is a bound parameter).
//! The comparison with Postgres itself is the root package's `tests/filter_differential.rs`.

#![expect(clippy::unwrap_used, reason = "tests fail loudly")]

mod filter_common;

use filter_common::schema;
use proptest::prelude::*;
use sea_query::{Alias, PostgresQueryBuilder, Query};
use serde_json::{Map, Value, json};
use trove_query::filter::{self, Filter, TeqExpansions};

/// Any JSON, biased towards the filter's own vocabulary so that parsing gets deep.
fn arbitrary_json() -> impl Strategy<Value = Value> {
    let key = prop::sample::select(vec![
        "$and", "$or", "$not", "$eq", "$neq", "$gt", "$like", "$in", "$not-in", "$teq", "$ne",
        "title", "year", "price", "draft", "author", "a.b", "",
    ]);
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|i| json!(i)),
        any::<u64>().prop_map(|u| json!(u)),
        (-1e6f64..1e6).prop_map(|f| json!(f)),
        "[a-z%_\\\\]{0,4}".prop_map(Value::String),
    ];
    leaf.prop_recursive(5, 64, 4, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::vec((key.clone(), inner), 0..3).prop_map(|entries| {
                Value::Object(
                    entries
                        .into_iter()
                        .map(|(k, v)| (k.to_owned(), v))
                        .collect::<Map<_, _>>(),
                )
            }),
        ]
    })
}

/// Values that would be visible if spliced into SQL: every one starts with `zq`.
fn marked_string() -> impl Strategy<Value = String> {
    "zq[a-z' \\\\%_\"$]{0,6}"
}

/// Valid filters over the test schema with marked string values.
fn valid_filter() -> impl Strategy<Value = Value> {
    let string_op = prop::sample::select(vec![
        "$eq", "$neq", "$gt", "$ge", "$lt", "$le", "$like", "$ilike",
    ]);
    let condition = prop_oneof![
        (string_op, marked_string()).prop_map(|(op, v)| json!({"title": {op: v}})),
        prop::collection::vec(marked_string(), 1..4)
            .prop_map(|v| json!({"category": {"$not-in": v}})),
        (marked_string(), marked_string()).prop_map(|(v, t)| json!({"topic": {"$teq": [v, t]}})),
        any::<i64>().prop_map(|i| json!({"year": {"$ge": i}})),
        (-1e9f64..1e9).prop_map(|f| json!({"price": {"$lt": f}})),
        prop::collection::vec(any::<bool>(), 0..3).prop_map(|v| json!({"draft": {"$in": v}})),
        Just(json!({})),
    ];
    condition.prop_recursive(4, 32, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(|v| json!({"$and": v})),
            prop::collection::vec(inner.clone(), 0..4).prop_map(|v| json!({"$or": v})),
            inner.prop_map(|f| json!({"$not": f})),
        ]
    })
}

fn compile_to_sql(filter: &Filter) -> Option<(String, usize)> {
    let typed = filter::validate(filter, &schema()).ok()?;
    let teq = TeqExpansions::new();
    filter::validate_teq(&typed, &teq).ok()?;
    let (sql, values) = Query::select()
        .column(Alias::new("id"))
        .from(Alias::new("fragments"))
        .cond_where(filter::compile(&typed, "fragments", &teq))
        .build(PostgresQueryBuilder);
    Some((sql, values.0.len()))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_json_never_panics(json in arbitrary_json()) {
        let text = json.to_string();
        if let Ok(filter) = serde_json::from_str::<Filter>(&text) {
            let _ = compile_to_sql(&filter);
            if let Ok(typed) = filter::validate(&filter, &schema()) {
                let _ = filter::teq_expansion_query(&typed.teq_starts());
            }
        }
        let _ = Filter::parse_query_param(&text);
    }

    #[test]
    fn every_value_is_bound(json in valid_filter()) {
        let text = json.to_string();
        let filter = serde_json::from_str::<Filter>(&text).unwrap();
        let (sql, bound) = compile_to_sql(&filter).unwrap();
        prop_assert!(!sql.contains("zq"), "a value reached the SQL text: {sql}");
        // Placeholders $1..$n, each bound.
        let placeholders = (1..=bound).filter(|n| sql.contains(&format!("${n}"))).count();
        prop_assert_eq!(placeholders, bound, "{}", sql);
        prop_assert!(!sql.contains(&format!("${}", bound + 1)), "{}", sql);
        // The only string constants in the text are field names, bare or as the quoted key
        // of a JSON path (`'$."year"'`).
        for (i, part) in sql.split('\'').enumerate() {
            if i % 2 == 1 {
                let name = part
                    .strip_prefix("$.\"")
                    .and_then(|key| key.strip_suffix('"'))
                    .unwrap_or(part);
                prop_assert!(filter::is_field_name(name), "constant '{}' in {}", part, sql);
            }
        }
    }
}
