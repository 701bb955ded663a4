//! Fuzzing of the metadata filter pipeline: parse, validate, compile and execute.
//!
//! proptest generates filters of three kinds: arbitrary JSON (any value, keys drawn mostly
//! from the filter language's names), near-valid filters (the grammar with wrong types,
//! unknown operators, mixed lists, misplaced logical operators, undeclared and object fields,
//! integers beyond 64 bits, strings holding U+0000) and large ones (chains of `$not`, `$and`,
//! `$or` up to 3,000 deep (alternating `$and` and `$or` up to 1,500),
//! lists of up to 20,000 values). Every case goes through the library (`Filter::from_json`,
//! `validate`, `validate_teq`, `compile` and SQL rendering, which must not panic); one case in
//! `TROVE_FILTER_FUZZ_HTTP_EVERY` (default 4) also runs through HTTP against a pipeline with
//! documents, alternately as a search's `filters` and as the document list's `metadata`. The
//! service must answer 200, the grammar's 422 (or the list's 400 plain text), 400 `Schema
//! error` exactly when the library's validation refuses it, or the interface's 500 for an
//! integer beyond 64 bits; no other status, and no case slower than 5 seconds.
//!
//! `TROVE_FILTER_FUZZ_CASES` sets the number of cases (default 10,000),
//! `TROVE_FILTER_FUZZ_SEED` the generator's seed (default 0: the same cases on every run).
//! The run prints its cases, HTTP requests, statuses and the slowest case.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use proptest::prelude::*;
use proptest::strategy::{Strategy, ValueTree};
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use reqwest::{Method, StatusCode};
use sea_query::{Alias, PostgresQueryBuilder, Query};
use serde_json::{Map, Value, json};
use trove_query::filter::{self, Filter, TeqExpansions};

use crate::helpers::{TestApp, percent_encode, spawn_app_without_worker};

/// The longest a case may take (generous: the machine is shared).
const CASE_BOUND: Duration = Duration::from_secs(5);

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(default)
}

fn schema() -> Value {
    json!({"type": "object", "properties": {
        "year": {"type": "integer"}, "name": {"type": "string"}, "score": {"type": "number"},
        "flag": {"type": "boolean"}, "obj": {"type": "object"}}})
}

const FIELDS: [&str; 7] = [
    "year", "name", "score", "flag", "obj", "missing", "bad.name",
];
const OPERATORS: [&str; 15] = [
    "$eq", "$neq", "$gt", "$ge", "$lt", "$le", "$like", "$ilike", "$in", "$not-in", "$teq", "$ne",
    "$gte", "$nin", "$exists",
];

fn text() -> BoxedStrategy<String> {
    prop_oneof![
        "[a-z]{0,4}",
        "[ -~]{0,8}",
        "[a-zé☃%_\\\\]{0,6}",
        Just("NULL".to_owned()),
        // U+0000, which no stored value holds.
        "[a-z%\\x00]{1,4}",
    ]
    .boxed()
}

fn scalar() -> BoxedStrategy<Value> {
    prop_oneof![
        4 => (-3i64..3000).prop_map(Value::from),
        1 => any::<i64>().prop_map(Value::from),
        1 => (i64::MAX as u64..=u64::MAX).prop_map(Value::from),
        2 => any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(Value::from),
        3 => text().prop_map(Value::from),
        2 => any::<bool>().prop_map(Value::from),
        1 => Just(Value::Null),
    ]
    .boxed()
}

fn key() -> BoxedStrategy<String> {
    prop_oneof![
        3 => proptest::sample::select(&FIELDS[..]).prop_map(str::to_owned),
        3 => proptest::sample::select(&OPERATORS[..]).prop_map(str::to_owned),
        2 => proptest::sample::select(&["$and", "$or", "$not"][..]).prop_map(str::to_owned),
        1 => "[$a-z_.]{0,5}",
    ]
    .boxed()
}

/// Any JSON value, keys mostly from the language.
fn arbitrary_json() -> BoxedStrategy<Value> {
    scalar()
        .prop_recursive(6, 64, 6, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                proptest::collection::vec((key(), inner), 0..5)
                    .prop_map(|pairs| Value::Object(pairs.into_iter().collect::<Map<_, _>>())),
            ]
        })
        .boxed()
}

/// The operand of an operator: mostly of a fitting shape, sometimes not.
fn operand() -> BoxedStrategy<Value> {
    prop_oneof![
        4 => scalar(),
        3 => proptest::collection::vec(scalar(), 0..6).prop_map(Value::Array),
        2 => proptest::collection::vec((-5i64..3000).prop_map(Value::from), 0..40).prop_map(Value::Array),
        1 => proptest::collection::vec(text().prop_map(Value::from), 0..3).prop_map(Value::Array),
        1 => arbitrary_json(),
    ]
    .boxed()
}

fn comparison() -> BoxedStrategy<Value> {
    prop_oneof![
        8 => (proptest::sample::select(&OPERATORS[..]), operand())
            .prop_map(|(op, value)| json!({ op: value })),
        1 => Just(json!({})),
        1 => (operand(), operand()).prop_map(|(a, b)| json!({"$eq": a, "$lt": b})),
        1 => scalar(),
    ]
    .boxed()
}

/// A field with a comparison that fits its declared type.
fn fitting() -> BoxedStrategy<(String, Value)> {
    let ordering = proptest::sample::select(&OPERATORS[..6]);
    let lists = proptest::sample::select(&["$in", "$not-in"][..]);
    prop_oneof![
        (ordering.clone(), -3i64..3000).prop_map(|(op, v)| ("year".to_owned(), json!({ op: v }))),
        (ordering.clone(), text()).prop_map(|(op, v)| ("name".to_owned(), json!({ op: v }))),
        (
            ordering.clone(),
            any::<f64>().prop_filter("finite", |f| f.is_finite())
        )
            .prop_map(|(op, v)| ("score".to_owned(), json!({ op: v }))),
        (ordering, any::<bool>()).prop_map(|(op, v)| ("flag".to_owned(), json!({ op: v }))),
        (
            lists.clone(),
            proptest::collection::vec(2015i64..2030, 1..8)
        )
            .prop_map(|(op, v)| ("year".to_owned(), json!({ op: v }))),
        (lists.clone(), proptest::collection::vec(text(), 1..5))
            .prop_map(|(op, v)| ("name".to_owned(), json!({ op: v }))),
        (lists, proptest::collection::vec(any::<bool>(), 0..3))
            .prop_map(|(op, v)| ("flag".to_owned(), json!({ op: v }))),
        (proptest::sample::select(&["$like", "$ilike"][..]), text())
            .prop_map(|(op, v)| ("name".to_owned(), json!({ op: v }))),
        text().prop_map(|v| (
            "name".to_owned(),
            json!({"$teq": [v, "0190a0f1-7f5e-7c3a-9d5b-3a1f2e4d5c6b"]})
        )),
    ]
    .boxed()
}

fn field_map() -> BoxedStrategy<Value> {
    let any_pair = (
        prop_oneof![
            6 => proptest::sample::select(&FIELDS[..]).prop_map(str::to_owned),
            1 => key(),
        ],
        comparison(),
    );
    proptest::collection::vec(prop_oneof![6 => fitting(), 1 => any_pair], 0..4)
        .prop_map(|pairs| Value::Object(pairs.into_iter().collect()))
        .boxed()
}

/// Filters following the grammar most of the time.
fn near_valid() -> BoxedStrategy<Value> {
    field_map()
        .prop_recursive(5, 48, 5, |inner| {
            prop_oneof![
                3 => proptest::collection::vec(inner.clone(), 0..5).prop_map(|v| json!({"$and": v})),
                3 => proptest::collection::vec(inner.clone(), 0..5).prop_map(|v| json!({"$or": v})),
                3 => inner.clone().prop_map(|f| json!({"$not": f})),
                1 => inner.clone().prop_map(|f| json!({"$and": f})),
                1 => (inner.clone(), field_map()).prop_map(|(f, fields)| {
                    let mut object = fields.as_object().cloned().unwrap_or_default();
                    object.insert("$or".to_owned(), json!([f]));
                    Value::Object(object)
                }),
            ]
        })
        .boxed()
}

/// Large filters as text: deep chains and long lists.
fn large() -> BoxedStrategy<String> {
    let leaf = prop_oneof![
        Just(r#"{"year":{"$gt":2022}}"#.to_owned()),
        Just(r#"{"name":{"$like":"c%"}}"#.to_owned()),
        Just(r#"{}"#.to_owned()),
        Just(r#"{"year":2020}"#.to_owned()),
    ];
    prop_oneof![
        (0usize..3000, 0usize..4, leaf).prop_map(|(depth, kind, leaf)| {
            let (open, close) = match kind {
                0 => (r#"{"$not":"#.to_owned(), "}"),
                1 => (r#"{"$and":["#.to_owned(), "]}"),
                2 => (r#"{"$or":[{"flag":{"$eq":true}},"#.to_owned(), "]}"),
                _ => (
                    r#"{"$and":[{"score":{"$ge":0}},{"$or":[{"flag":{"$eq":false}},"#.to_owned(),
                    "]}]}",
                ),
            };
            // Alternating `$and` and `$or` cost the database's planner time growing faster
            // than their depth (0.5 s at 3,000 levels): those chains stay shorter.
            let depth = if kind == 3 { depth / 4 } else { depth };
            format!("{}{leaf}{}", open.repeat(depth), close.repeat(depth))
        }),
        (
            0usize..20_000,
            prop_oneof![Just("$in"), Just("$not-in")],
            any::<bool>()
        )
            .prop_map(|(count, op, strings)| {
                let values: Vec<Value> = (0..count)
                    .map(|n| {
                        if strings {
                            Value::from(format!("{n:x}"))
                        } else {
                            Value::from(n)
                        }
                    })
                    .collect();
                let field = if strings { "name" } else { "year" };
                json!({ field: { op: values } }).to_string()
            }),
    ]
    .boxed()
}

fn case() -> BoxedStrategy<String> {
    prop_oneof![
        3 => arbitrary_json().prop_map(|v| v.to_string()),
        6 => near_valid().prop_map(|v| v.to_string()),
        1 => large(),
    ]
    .boxed()
}

/// What the library makes of a filter's text: `Err(false)` a grammar error, `Err(true)` a
/// schema error, `Ok(())` compiled and rendered.
fn library(text: &str, schema: &Value) -> Result<(), bool> {
    let parsed = Filter::from_json(text).map_err(|_| false)?;
    let typed = filter::validate(&parsed, schema).map_err(|_| true)?;
    let expansions = TeqExpansions::new();
    filter::validate_teq(&typed, &expansions).map_err(|_| true)?;
    let _ = typed.integer_fields();
    let _ = filter::teq_expansion_query(&typed.teq_starts());
    let (sql, _) = Query::select()
        .column(Alias::new("id"))
        .from(Alias::new("fragments"))
        .cond_where(filter::compile(&typed, "fragments", &expansions))
        .build(PostgresQueryBuilder);
    assert!(sql.starts_with("SELECT"), "{sql:.200}");
    Ok(())
}

/// A 500 the interface documents for filters, with the database's message: an integer beyond
/// 64 bits, or an expression nested beyond what the database's parser takes (its stack holds
/// 10,000 grammar symbols: `AND` and `OR` alternating a few thousand deep, which no rewriting
/// flattens; chains of one operator are flattened before they reach it).
fn documented_500(message: &str) -> bool {
    message.contains("out of range for type bigint") || message.starts_with("memory exhausted")
}

async fn pipeline(app: &TestApp) -> String {
    let pid = app
        .new_pipeline_id(json!({"metadata_schema": schema()}))
        .await;
    for (n, metadata) in [
        json!({"year": 2020, "name": "cats", "score": 0.5, "flag": true, "obj": {"a": 1}}),
        json!({"year": 2023, "name": "c%t", "score": -1.0, "flag": false}),
        json!({"name": "NULL", "score": 1e300}),
        json!({"name": "é☃", "flag": true}),
        json!({}),
    ]
    .into_iter()
    .enumerate()
    {
        let reply = app
            .submit(
                &pid,
                &json!({"external_identifier": format!("d{n}"), "classification": "public",
                        "text": format!("fuzz document {n}"), "metadata": metadata}),
            )
            .await;
        assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
    }
    let outcome = app.step().await;
    assert_eq!(outcome.stored, 5, "{outcome:?}");
    pid
}

/// Sends the filter through HTTP; returns the status, or a description of what is wrong.
async fn through_http(
    app: &TestApp,
    pid: &str,
    text: &str,
    as_search: bool,
    expected: Result<(), bool>,
) -> Result<StatusCode, String> {
    let reply = if as_search {
        let body = format!(
            r#"{{"query":"fuzz document","type":"similarity","classification":"public","params":{{"k":3}},"filters":{text}}}"#
        );
        app.req(Method::POST, &format!("/pipelines/{pid}/search"))
            .as_master()
            .header("content-type", "application/json")
            .body(body)
            .try_send()
            .await
            .map_err(|e| e.to_string())?
    } else {
        app.get(&format!(
            "/pipelines/{pid}/documents?metadata={}",
            percent_encode(text)
        ))
        .await
    };
    let fits = match (reply.status, expected) {
        (StatusCode::OK, Ok(())) => true,
        (StatusCode::UNPROCESSABLE_ENTITY, Err(false)) if as_search => reply
            .text
            .starts_with("Failed to deserialize the JSON body into the target type: "),
        (StatusCode::BAD_REQUEST, Err(false)) if !as_search => reply
            .text
            .starts_with("Failed to deserialize query string: metadata: "),
        (StatusCode::BAD_REQUEST, Err(true)) => reply.message() == "Schema error",
        (StatusCode::INTERNAL_SERVER_ERROR, Ok(())) => documented_500(reply.message()),
        _ => false,
    };
    if fits {
        Ok(reply.status)
    } else {
        Err(format!(
            "library {expected:?}, service {} {:.300}",
            reply.status, reply.text
        ))
    }
}

#[tokio::test]
async fn filters_never_fail_outside_the_interface() {
    let cases = env_number("TROVE_FILTER_FUZZ_CASES", 10_000);
    let http_every = env_number("TROVE_FILTER_FUZZ_HTTP_EVERY", 4).max(1);
    let seed = env_number("TROVE_FILTER_FUZZ_SEED", 0);
    let app = spawn_app_without_worker().await;
    let pid = pipeline(&app).await;
    let schema = schema();
    let mut seed_bytes = [0u8; 32];
    seed_bytes[..8].copy_from_slice(&seed.to_le_bytes());
    let mut runner = TestRunner::new_with_rng(
        Config::default(),
        TestRng::from_seed(RngAlgorithm::ChaCha, &seed_bytes),
    );
    let strategy = case();
    let started = Instant::now();
    let mut statuses: BTreeMap<u16, u64> = BTreeMap::new();
    let mut library_outcomes = [0u64; 3];
    let mut slowest = (Duration::ZERO, String::new());
    let mut requests = 0u64;
    for n in 0..cases {
        let text = strategy.new_tree(&mut runner).expect("a case").current();
        let case_started = Instant::now();
        let expected = library(&text, &schema);
        library_outcomes[match expected {
            Ok(()) => 0,
            Err(false) => 1,
            Err(true) => 2,
        }] += 1;
        if n.is_multiple_of(http_every) {
            requests += 1;
            // The document list's URL holds about 64 KB.
            let as_search = (n / http_every).is_multiple_of(2) || text.len() > 16_000;
            // `"filters": null` is no filter at all.
            let expected = if as_search && text == "null" {
                Ok(())
            } else {
                expected
            };
            match through_http(&app, &pid, &text, as_search, expected).await {
                Ok(status) => *statuses.entry(status.as_u16()).or_default() += 1,
                Err(problem) => panic!(
                    "case {n} (seed {seed}, {}): {problem}\nfilter: {text:.2000}",
                    if as_search { "search" } else { "document list" }
                ),
            }
        }
        let elapsed = case_started.elapsed();
        if elapsed > slowest.0 {
            slowest = (elapsed, text.chars().take(120).collect());
        }
        assert!(
            elapsed < CASE_BOUND,
            "case {n} (seed {seed}) took {elapsed:?}: {text:.300}"
        );
    }
    eprintln!(
        "filter fuzz: {cases} cases (seed {seed}) in {:.1?}: library compiled {}, grammar \
         refused {}, schema refused {}; {requests} through HTTP, statuses {statuses:?}; \
         slowest case {:.1?}: {}",
        started.elapsed(),
        library_outcomes[0],
        library_outcomes[1],
        library_outcomes[2],
        slowest.0,
        slowest.1
    );
    assert!(
        library_outcomes.iter().all(|count| *count > 0),
        "every outcome occurs"
    );
}
