//! Pass 2, the schema: every `Schema error` cause of the interface, and what is accepted.
//! The schema is `filter_common::schema()`: `title`, `topic` strings, `category` string or
//! null, `year` integer, `price` number or null, `draft` boolean, `author` object, `weird`
//! without a type.

#![expect(clippy::unwrap_used, reason = "tests fail loudly")]

mod filter_common;

use filter_common::{parse, typed};
use serde_json::json;
use trove_query::filter::{
    DeclaredType, SchemaError, TeqExpansions, TeqStart, ValueKind, unconvertible_integer_fields,
    validate, validate_teq,
};

#[track_caller]
fn refused(json: &str, expected: SchemaError) {
    assert_eq!(typed(json).unwrap_err(), expected, "{json}");
}

#[track_caller]
fn accepted(json: &str) {
    if let Err(error) = typed(json) {
        panic!("{json}: {error}");
    }
}

fn mismatch(
    field: &str,
    operator: &'static str,
    declared: DeclaredType,
    value: ValueKind,
) -> SchemaError {
    SchemaError::TypeMismatch {
        field: field.into(),
        operator,
        declared,
        value,
    }
}

#[test]
fn undeclared_fields() {
    let undeclared = || SchemaError::UndeclaredField {
        field: "nope".into(),
    };
    refused(r#"{"nope": {"$eq": 1}}"#, undeclared());
    refused(
        r#"{"$not": {"$or": [{"title": {"$eq": "x"}}, {"nope": {"$eq": 1}}]}}"#,
        undeclared(),
    );
    refused(
        r#"{"$and": [{}, {"nope": {"$teq": ["x", "t"]}}]}"#,
        undeclared(),
    );
    // The default schema declares nothing.
    let parsed = parse(r#"{"title": {"$eq": "x"}}"#).unwrap();
    assert_eq!(
        validate(&parsed, &json!({"type": "object", "properties": {}})).unwrap_err(),
        SchemaError::UndeclaredField {
            field: "title".into()
        }
    );
    assert_eq!(
        validate(&parsed, &json!({})).unwrap_err(),
        SchemaError::UndeclaredField {
            field: "title".into()
        }
    );
}

#[test]
fn object_fields_cannot_be_compared() {
    let object = || SchemaError::ObjectField {
        field: "author".into(),
    };
    refused(r#"{"author": {"$eq": "x"}}"#, object());
    refused(r#"{"author": {"$like": "x%"}}"#, object());
    refused(r#"{"author": {"$in": ["x"]}}"#, object());
    refused(r#"{"author": {"$in": []}}"#, object());
    refused(r#"{"author": {"$teq": ["x", "t"]}}"#, object());
}

#[test]
fn fields_without_a_usable_type() {
    refused(
        r#"{"weird": {"$eq": "x"}}"#,
        SchemaError::UnsupportedFieldType {
            field: "weird".into(),
        },
    );
    let parsed = parse(r#"{"f": {"$eq": "x"}}"#).unwrap();
    for property in [
        json!({"type": ["string", "integer"]}),
        json!({"type": ["null"]}),
        json!({"type": "array"}),
        json!({"type": 5}),
    ] {
        let schema = json!({"properties": {"f": property}});
        assert_eq!(
            validate(&parsed, &schema).unwrap_err(),
            SchemaError::UnsupportedFieldType { field: "f".into() },
            "{schema}"
        );
    }
}

#[test]
fn values_must_have_the_declared_type() {
    use DeclaredType as D;
    use ValueKind as V;
    refused(
        r#"{"title": {"$eq": 1}}"#,
        mismatch("title", "$eq", D::String, V::Integer),
    );
    refused(
        r#"{"title": {"$neq": true}}"#,
        mismatch("title", "$neq", D::String, V::Boolean),
    );
    refused(
        r#"{"year": {"$gt": "1965"}}"#,
        mismatch("year", "$gt", D::Integer, V::String),
    );
    // 5.0 is a number, not an integer.
    refused(
        r#"{"year": {"$ge": 5.0}}"#,
        mismatch("year", "$ge", D::Integer, V::Number),
    );
    refused(
        r#"{"year": {"$eq": 18446744073709551616}}"#,
        mismatch("year", "$eq", D::Integer, V::Number),
    );
    refused(
        r#"{"price": {"$lt": "9.99"}}"#,
        mismatch("price", "$lt", D::Number, V::String),
    );
    refused(
        r#"{"price": {"$le": false}}"#,
        mismatch("price", "$le", D::Number, V::Boolean),
    );
    refused(
        r#"{"draft": {"$eq": 0}}"#,
        mismatch("draft", "$eq", D::Boolean, V::Integer),
    );
    refused(
        r#"{"draft": {"$eq": "true"}}"#,
        mismatch("draft", "$eq", D::Boolean, V::String),
    );
    refused(
        r#"{"category": {"$eq": 1.5}}"#,
        mismatch("category", "$eq", D::String, V::Number),
    );
}

#[test]
fn list_values_must_have_the_declared_type() {
    use DeclaredType as D;
    use ValueKind as V;
    refused(
        r#"{"title": {"$in": [1, 2]}}"#,
        mismatch("title", "$in", D::String, V::Integer),
    );
    refused(
        r#"{"year": {"$not-in": ["a"]}}"#,
        mismatch("year", "$not-in", D::Integer, V::String),
    );
    // Integers and numbers together make a list of numbers.
    refused(
        r#"{"year": {"$in": [1, 2.5]}}"#,
        mismatch("year", "$in", D::Integer, V::Number),
    );
    refused(
        r#"{"draft": {"$in": [1]}}"#,
        mismatch("draft", "$in", D::Boolean, V::Integer),
    );
    refused(
        r#"{"price": {"$in": [true]}}"#,
        mismatch("price", "$in", D::Number, V::Boolean),
    );
}

#[test]
fn patterns_only_on_strings() {
    refused(
        r#"{"year": {"$like": "19%"}}"#,
        SchemaError::PatternOnNonString {
            field: "year".into(),
            operator: "$like",
            declared: DeclaredType::Integer,
        },
    );
    refused(
        r#"{"draft": {"$ilike": "t%"}}"#,
        SchemaError::PatternOnNonString {
            field: "draft".into(),
            operator: "$ilike",
            declared: DeclaredType::Boolean,
        },
    );
    refused(
        r#"{"price": {"$like": "1%"}}"#,
        SchemaError::PatternOnNonString {
            field: "price".into(),
            operator: "$like",
            declared: DeclaredType::Number,
        },
    );
}

#[test]
fn empty_lists_only_on_booleans() {
    for (field, declared) in [
        ("title", DeclaredType::String),
        ("category", DeclaredType::String),
        ("year", DeclaredType::Integer),
        ("price", DeclaredType::Number),
    ] {
        for operator in ["$in", "$not-in"] {
            refused(
                &format!(r#"{{"{field}": {{"{operator}": []}}}}"#),
                SchemaError::EmptyList {
                    field: field.into(),
                    operator,
                    declared,
                },
            );
        }
    }
    accepted(r#"{"draft": {"$in": []}}"#);
    accepted(r#"{"draft": {"$not-in": []}}"#);
}

#[test]
fn teq_only_on_strings() {
    for (field, declared) in [
        ("year", DeclaredType::Integer),
        ("price", DeclaredType::Number),
        ("draft", DeclaredType::Boolean),
    ] {
        refused(
            &format!(r#"{{"{field}": {{"$teq": ["x", "t"]}}}}"#),
            SchemaError::TeqOnNonString {
                field: field.into(),
                declared,
            },
        );
    }
    accepted(r#"{"category": {"$teq": ["x", "t"]}}"#);
}

#[test]
fn teq_must_reach_only_declared_strings() {
    let filter = typed(r#"{"$not": {"category": {"$teq": ["science", "t1"]}}}"#).unwrap();
    let start = TeqStart {
        field: "category".into(),
        value: "science".into(),
        taxonomy_id: "t1".into(),
    };
    let reaching = |field: &str| {
        let mut teq = TeqExpansions::new();
        teq.insert(start.clone(), "topic".into(), "optics".into());
        teq.insert(start.clone(), field.into(), "x".into());
        teq
    };
    validate_teq(&filter, &TeqExpansions::new()).unwrap();
    validate_teq(&filter, &reaching("topic")).unwrap();
    validate_teq(&filter, &reaching("title")).unwrap();
    for field in ["year", "price", "draft", "author", "weird", "undeclared"] {
        assert_eq!(
            validate_teq(&filter, &reaching(field)).unwrap_err(),
            SchemaError::TeqReachesNonString {
                field: "category".into(),
                taxonomy_id: "t1".into(),
                reached_field: field.into(),
            },
            "{field}"
        );
    }
    // Expansions of another taxonomy do not concern this filter.
    let mut other = TeqExpansions::new();
    other.insert(
        TeqStart {
            taxonomy_id: "t2".into(),
            ..start.clone()
        },
        "year".into(),
        "1".into(),
    );
    validate_teq(&filter, &other).unwrap();
}

#[test]
fn teq_starts_are_distinct_and_in_order() {
    let filter = typed(
        r#"{"$or": [{"category": {"$teq": ["b", "t"]}}, {"$not": {"topic": {"$teq": ["a", "t"]}}},
                    {"category": {"$teq": ["b", "t"]}}, {"category": {"$teq": ["b", "u"]}}]}"#,
    )
    .unwrap();
    let starts: Vec<(String, String, String)> = filter
        .teq_starts()
        .into_iter()
        .map(|s| (s.field, s.value, s.taxonomy_id))
        .collect();
    assert_eq!(
        starts,
        [
            ("category", "b", "t"),
            ("topic", "a", "t"),
            ("category", "b", "u")
        ]
        .map(|(a, b, c)| (a.to_owned(), b.to_owned(), c.to_owned()))
    );
}

#[test]
fn accepted_filters() {
    accepted(r#"{"price": {"$eq": 10}}"#);
    accepted(r#"{"price": {"$in": [1, 2.5, 18446744073709551615]}}"#);
    // Valid for the schema; the database refuses it as out of range for bigint (500).
    accepted(r#"{"year": {"$eq": 9223372036854775808}}"#);
    accepted(r#"{"year": {"$in": [-9223372036854775808, 9223372036854775807]}}"#);
    accepted(r#"{"category": {"$like": "a\\%"}, "title": {"$ilike": "%"}}"#);
    accepted(r#"{"draft": {"$gt": false}}"#);
    accepted(r#"{"title": {"$lt": "2024-01-01"}}"#);
    accepted("{}");
    accepted(r#"{"$and": [{"$or": []}, {"$not": {}}]}"#);
}

#[test]
fn the_first_error_in_document_order_wins() {
    refused(
        r#"{"$and": [{"year": {"$like": "x"}}, {"nope": {"$eq": 1}}]}"#,
        SchemaError::PatternOnNonString {
            field: "year".into(),
            operator: "$like",
            declared: DeclaredType::Integer,
        },
    );
}

#[test]
fn messages_are_lowercase_and_name_the_field() {
    let error = typed(r#"{"year": {"$ge": 5.0}}"#).unwrap_err();
    assert_eq!(
        error.to_string(),
        "`$ge` on integer field `year` with a number value"
    );
    let error = typed(r#"{"nope": {"$eq": 1}}"#).unwrap_err();
    assert_eq!(
        error.to_string(),
        "field `nope` is not declared in the metadata schema"
    );
}

/// Rule 6 concerns integer fields only: the values a document may hold there (JSON Schema's
/// integers) that the database cannot read as 64-bit integers.
#[test]
fn unconvertible_stored_values_are_integers_with_a_fraction_or_beyond_64_bits() {
    let schema = filter_common::schema();
    let metadata = serde_json::from_str::<serde_json::Value>(
        r#"{"year": 5.0, "price": 5.0, "title": "5.0", "draft": true}"#,
    )
    .unwrap();
    assert_eq!(unconvertible_integer_fields(&schema, &metadata), ["year"]);
    for (text, unconvertible) in [
        ("1965", false),
        ("-9223372036854775808", false),
        ("9223372036854775807", false),
        ("9223372036854775808", true),
        ("100000000000000000000", true),
        ("1e3", true),
        ("-0.0", true),
        ("null", false),
    ] {
        let metadata: serde_json::Value =
            serde_json::from_str(&format!(r#"{{"year": {text}}}"#)).unwrap();
        assert_eq!(
            unconvertible_integer_fields(&schema, &metadata).len(),
            usize::from(unconvertible),
            "{text}"
        );
    }
    // Undeclared fields and non-objects say nothing.
    assert!(unconvertible_integer_fields(&schema, &json!({"other": 1.5})).is_empty());
    assert!(unconvertible_integer_fields(&schema, &json!([1.5])).is_empty());
    assert!(unconvertible_integer_fields(&json!({}), &json!({"year": 1.5})).is_empty());
}

#[test]
fn a_filter_lists_the_integer_fields_it_compares() {
    let filter = typed(
        r#"{"$or": [{"year": {"$gt": 1}, "title": {"$eq": "a"}}, {"$not": {"year": {"$in": [2]}}},
                    {"price": {"$lt": 3}}, {"draft": {"$eq": true}}]}"#,
    )
    .unwrap();
    assert_eq!(filter.integer_fields(), ["year"]);
    assert!(
        typed(r#"{"title": {"$eq": "a"}}"#)
            .unwrap()
            .integer_fields()
            .is_empty()
    );
}
