//! Pass 1, the grammar: what parses into which AST, and the exact serde message (with line
//! and column) of every grammar violation.

#![expect(clippy::unwrap_used, reason = "tests fail loudly")]

mod filter_common;

use filter_common::parse;
use trove_query::filter::{
    CompareOp, FieldCondition, Filter, LikeOp, MembershipOp, Operation, Scalar, ScalarList,
};

fn field(name: &str, operation: Operation) -> FieldCondition {
    FieldCondition {
        field: name.into(),
        operation,
    }
}

fn compare(op: CompareOp, value: Scalar) -> Operation {
    Operation::Compare { op, value }
}

fn list(values: Vec<Scalar>) -> ScalarList {
    ScalarList::new(values).unwrap()
}

/// Asserts that `json` is refused with exactly `message`.
#[track_caller]
fn refused(json: &str, message: &str) {
    match parse(json) {
        Ok(filter) => panic!("{json} parsed as {filter:?}"),
        Err(error) => assert_eq!(error, message, "{json}"),
    }
}

// ---- what parses ----------------------------------------------------------------------------

#[test]
fn empty_object_is_an_empty_field_map() {
    assert_eq!(parse("{}").unwrap(), Filter::Fields(vec![]));
    assert!(parse("{}").unwrap().is_empty_object());
}

#[test]
fn every_comparison_operator_with_every_scalar() {
    for op in CompareOp::ALL {
        for (json, scalar) in [
            (r#""x""#, Scalar::String("x".into())),
            ("-5", Scalar::Integer(-5)),
            ("5", Scalar::Integer(5)),
            ("5.0", Scalar::Number(5.0)),
            ("5e0", Scalar::Number(5.0)),
            ("-0.25", Scalar::Number(-0.25)),
            ("true", Scalar::Boolean(true)),
            ("false", Scalar::Boolean(false)),
        ] {
            let text = format!(r#"{{"f": {{"{}": {json}}}}}"#, op.name());
            assert_eq!(
                parse(&text).unwrap(),
                Filter::Fields(vec![field("f", compare(op, scalar))]),
                "{text}"
            );
        }
    }
}

#[test]
fn integers_are_kept_exactly() {
    for (json, scalar) in [
        ("9007199254740993", Scalar::Integer(9_007_199_254_740_993)),
        ("9223372036854775807", Scalar::Integer(i64::MAX)),
        ("-9223372036854775808", Scalar::Integer(i64::MIN)),
        (
            "9223372036854775808",
            Scalar::LargeInteger(9_223_372_036_854_775_808),
        ),
        ("18446744073709551615", Scalar::LargeInteger(u64::MAX)),
        // Beyond 64 bits serde_json reads a floating-point number.
        (
            "18446744073709551616",
            Scalar::Number(18_446_744_073_709_551_616.0),
        ),
    ] {
        let text = format!(r#"{{"f": {{"$eq": {json}}}}}"#);
        assert_eq!(
            parse(&text).unwrap(),
            Filter::Fields(vec![field("f", compare(CompareOp::Eq, scalar))]),
            "{text}"
        );
    }
}

#[test]
fn patterns_lists_and_teq() {
    let parsed = parse(
        r#"{"a": {"$like": "x\\%%"}, "b": {"$ilike": "_"}, "c": {"$in": [1, 2]},
            "d": {"$not-in": ["x"]}, "e": {"$in": []}, "f": {"$in": [1, 2.5]},
            "g": {"$teq": ["v", "t"]}}"#,
    )
    .unwrap();
    assert_eq!(
        parsed,
        Filter::Fields(vec![
            field(
                "a",
                Operation::Like {
                    op: LikeOp::Like,
                    pattern: r"x\%%".into()
                }
            ),
            field(
                "b",
                Operation::Like {
                    op: LikeOp::ILike,
                    pattern: "_".into()
                }
            ),
            field(
                "c",
                Operation::Membership {
                    op: MembershipOp::In,
                    values: list(vec![Scalar::Integer(1), Scalar::Integer(2)])
                }
            ),
            field(
                "d",
                Operation::Membership {
                    op: MembershipOp::NotIn,
                    values: list(vec![Scalar::String("x".into())])
                }
            ),
            field(
                "e",
                Operation::Membership {
                    op: MembershipOp::In,
                    values: list(vec![])
                }
            ),
            field(
                "f",
                Operation::Membership {
                    op: MembershipOp::In,
                    values: list(vec![Scalar::Integer(1), Scalar::Number(2.5)])
                }
            ),
            field(
                "g",
                Operation::Teq {
                    value: "v".into(),
                    taxonomy_id: "t".into()
                }
            ),
        ])
    );
}

#[test]
fn logical_operators_nest() {
    let parsed = parse(
        r#"{"$and": [{"$or": [{}, {"a": {"$eq": 1}}]}, {"$not": {"$not": {"b": {"$lt": 2}}}}, {"$and": []}]}"#,
    )
    .unwrap();
    let a = Filter::Fields(vec![field("a", compare(CompareOp::Eq, Scalar::Integer(1)))]);
    let b = Filter::Fields(vec![field("b", compare(CompareOp::Lt, Scalar::Integer(2)))]);
    assert_eq!(
        parsed,
        Filter::And(vec![
            Filter::Or(vec![Filter::Fields(vec![]), a]),
            Filter::Not(Box::new(Filter::Not(Box::new(b)))),
            Filter::And(vec![]),
        ])
    );
}

#[test]
fn deep_nesting_parses() {
    let depth = 60;
    let json = format!(
        "{}{{\"a\": {{\"$eq\": 1}}}}{}",
        "{\"$not\": ".repeat(depth),
        "}".repeat(depth)
    );
    let parsed = parse(&json).unwrap();
    let mut filter = &parsed;
    for _ in 0..depth {
        let Filter::Not(inner) = filter else {
            panic!("expected $not")
        };
        filter = inner;
    }
    assert!(matches!(filter, Filter::Fields(_)));
}

/// Filters nest to any depth, limited only by the size of the text: the JSON reader's
/// recursion limit is off where filters are read, the stack grows as they are read, and a
/// deep filter is dropped without recursion. 2 MB hold 230,000 `$not` or 190,000 `$and`.
#[test]
fn nesting_has_no_limit_but_the_size() {
    let depth = 230_000;
    let nots = format!("{}{{}}{}", "{\"$not\":".repeat(depth), "}".repeat(depth));
    assert!(nots.len() < 2 * 1024 * 1024);
    let parsed = parse(&nots).unwrap();
    let mut filter = &parsed;
    let mut levels = 0;
    while let Filter::Not(inner) = filter {
        filter = inner;
        levels += 1;
    }
    assert_eq!(levels, depth);
    let copy = parsed.clone();
    assert!(matches!(&copy, Filter::Not(_)));
    let depth = 190_000;
    let ands = format!(
        "{}{{\"a\":{{\"$eq\":1}}}}{}",
        "{\"$and\":[{},".repeat(depth),
        "]}".repeat(depth)
    );
    let parsed = parse(&ands).unwrap();
    let copy = parsed.clone();
    assert!(matches!(&copy, Filter::And(parts) if parts.len() == 2));
    // Shallow filters clone to equal values.
    let shallow =
        parse(r#"{"$or":[{"$not":{"a":{"$in":[1,2]}}},{"$and":[{},{"b":{"$eq":"x"}}]}]}"#).unwrap();
    assert_eq!(shallow.clone(), shallow);
    // An error at the bottom of a deep filter drops what was read around it.
    let broken = format!(
        "{}{{\"a\": 1}}{}",
        "{\"$and\":[{},".repeat(depth),
        "]}".repeat(depth)
    );
    let error = parse(&broken).unwrap_err();
    assert!(error.starts_with("invalid type: integer `1`"), "{error}");
    // serde_json's own entry points keep their limit.
    assert!(serde_json::from_str::<Filter>(&nots).is_err());
}

/// A 2 MB body can hold ~80,000 fields: parsing and validation stay linear.
#[test]
fn wide_field_maps_parse() {
    let fields: Vec<String> = (0..80_000)
        .map(|n| format!(r#""f{n}": {{"$eq": {n}}}"#))
        .collect();
    let json = format!("{{{}}}", fields.join(","));
    let Filter::Fields(conditions) = &parse(&json).unwrap() else {
        panic!("a field map")
    };
    assert_eq!(conditions.len(), 80_000);
}

#[test]
fn field_names_are_identifiers() {
    for name in ["a", "_", "A_1", "_9"] {
        assert!(
            parse(&format!(r#"{{"{name}": {{"$eq": 1}}}}"#)).is_ok(),
            "{name}"
        );
    }
}

#[test]
fn query_parameter_form() {
    assert_eq!(
        Filter::parse_query_param(r#"{"a": {"$eq": "x"}}"#).unwrap(),
        Filter::Fields(vec![field(
            "a",
            compare(CompareOp::Eq, Scalar::String("x".into()))
        )])
    );
    assert_eq!(
        Filter::parse_query_param(r#"{"a": "x"}"#).unwrap_err(),
        "invalid type: string \"x\", expected a comparison object with exactly one operator, \
         such as {\"$eq\": value} at line 1 column 9"
    );
    assert_eq!(
        Filter::parse_query_param("{} x").unwrap_err(),
        "trailing characters at line 1 column 4"
    );
    assert_eq!(
        Filter::parse_query_param("").unwrap_err(),
        "EOF while parsing a value at line 1 column 0"
    );
}

// ---- every grammar violation ----------------------------------------------------------------

#[test]
fn not_an_object() {
    refused(
        "null",
        "invalid type: null, expected a metadata filter object at line 1 column 4",
    );
    refused(
        "[]",
        "invalid type: sequence, expected a metadata filter object at line 1 column 0",
    );
    refused(
        r#""x""#,
        "invalid type: string \"x\", expected a metadata filter object at line 1 column 3",
    );
}

#[test]
fn shorthand() {
    refused(
        r#"{"a": 5}"#,
        "invalid type: integer `5`, expected a comparison object with exactly one operator, \
         such as {\"$eq\": value} at line 1 column 7",
    );
    refused(
        r#"{"a": null}"#,
        "invalid type: null, expected a comparison object with exactly one operator, \
         such as {\"$eq\": value} at line 1 column 10",
    );
    refused(
        r#"{"a": [1]}"#,
        "invalid type: sequence, expected a comparison object with exactly one operator, \
         such as {\"$eq\": value} at line 1 column 6",
    );
}

#[test]
fn unknown_operators() {
    for op in [
        "$ne",
        "$gte",
        "$lte",
        "$nin",
        "$exists",
        "$contains",
        "$regex",
        "$EQ",
        "eq",
        "$notin",
    ] {
        refused(
            &format!(r#"{{"a": {{"{op}": 1}}}}"#),
            &format!(
                "unknown operator `{op}`, expected one of `$eq`, `$neq`, `$gt`, `$ge`, `$lt`, \
                 `$le`, `$like`, `$ilike`, `$in`, `$not-in`, `$teq` at line 1 column {}",
                9 + op.len()
            ),
        );
    }
}

#[test]
fn unknown_logical_operators() {
    refused(
        r#"{"$nor": []}"#,
        "unknown logical operator `$nor`, expected `$and`, `$or` or `$not` (comparison \
         operators go inside a field: {\"field\": {\"$eq\": value}}) at line 1 column 7",
    );
    refused(
        r#"{"$eq": 1}"#,
        "unknown logical operator `$eq`, expected `$and`, `$or` or `$not` (comparison \
         operators go inside a field: {\"field\": {\"$eq\": value}}) at line 1 column 6",
    );
}

#[test]
fn two_operators_in_one_comparison() {
    refused(
        r#"{"a": {"$gt": 1, "$lt": 5}}"#,
        "two operators in one comparison (`$gt` and `$lt`), expected exactly one at line 1 column 22",
    );
    refused(
        r#"{"a": {"$eq": 1, "$eq": 1}}"#,
        "two operators in one comparison (`$eq` and `$eq`), expected exactly one at line 1 column 22",
    );
}

#[test]
fn empty_comparison() {
    refused(
        r#"{"a": {}}"#,
        "empty comparison object, expected exactly one operator at line 1 column 8",
    );
}

#[test]
fn logical_operator_beside_fields() {
    refused(
        r#"{"a": {"$eq": 1}, "$and": []}"#,
        "logical operator `$and` cannot share an object with field conditions (`a`) at line 1 column 24",
    );
    refused(
        r#"{"$or": [], "a": {"$eq": 1}}"#,
        "field `a` cannot share an object with logical operator `$or` at line 1 column 15",
    );
    refused(
        r#"{"$and": [], "$or": []}"#,
        "two logical operators in one object (`$and` and `$or`), expected exactly one at line 1 column 18",
    );
}

#[test]
fn logical_operands() {
    refused(
        r#"{"$and": {}}"#,
        "invalid type: map, expected a sequence at line 1 column 9",
    );
    refused(
        r#"{"$or": null}"#,
        "invalid type: null, expected a sequence at line 1 column 12",
    );
    refused(
        r#"{"$not": []}"#,
        "invalid type: sequence, expected a metadata filter object at line 1 column 9",
    );
    refused(
        r#"{"$and": [5]}"#,
        "invalid type: integer `5`, expected a metadata filter object at line 1 column 11",
    );
    refused(
        r#"{"$not": null}"#,
        "invalid type: null, expected a metadata filter object at line 1 column 13",
    );
}

#[test]
fn null_array_or_object_where_one_value_is_required() {
    for (value, shown, column) in [
        ("null", "null", 18),
        ("[1]", "sequence", 15),
        ("{\"x\": 1}", "map", 15),
    ] {
        refused(
            &format!(r#"{{"a": {{"$eq": {value}}}}}"#),
            &format!(
                "invalid type: {shown}, expected a string, number or boolean at line 1 column {column}"
            ),
        );
    }
}

#[test]
fn pattern_must_be_a_string() {
    refused(
        r#"{"a": {"$like": 5}}"#,
        "invalid type: integer `5`, expected a pattern string at line 1 column 17",
    );
    refused(
        r#"{"a": {"$ilike": null}}"#,
        "invalid type: null, expected a pattern string at line 1 column 21",
    );
}

#[test]
fn lists() {
    refused(
        r#"{"a": {"$in": 5}}"#,
        "invalid type: integer `5`, expected an array of strings, numbers or booleans of one type at line 1 column 15",
    );
    refused(
        r#"{"a": {"$in": [1, "x"]}}"#,
        "mixed types in a list (integer and string), expected values of one type at line 1 column 22",
    );
    refused(
        r#"{"a": {"$not-in": [true, 1.5]}}"#,
        "mixed types in a list (boolean and number), expected values of one type at line 1 column 29",
    );
    refused(
        r#"{"a": {"$in": [null]}}"#,
        "invalid type: null, expected a string, number or boolean at line 1 column 19",
    );
    refused(
        r#"{"a": {"$in": [[1]]}}"#,
        "invalid type: sequence, expected a string, number or boolean at line 1 column 16",
    );
}

#[test]
fn teq_needs_two_strings() {
    refused(
        r#"{"a": {"$teq": "x"}}"#,
        "invalid type: string \"x\", expected an array of two strings: value and taxonomy identifier at line 1 column 18",
    );
    refused(
        r#"{"a": {"$teq": ["x"]}}"#,
        "invalid length 1, expected an array of two strings: value and taxonomy identifier at line 1 column 20",
    );
    refused(
        r#"{"a": {"$teq": ["x", "t", "u"]}}"#,
        "invalid length 3, expected an array of two strings: value and taxonomy identifier at line 1 column 30",
    );
    refused(
        r#"{"a": {"$teq": ["x", 1]}}"#,
        "invalid type: integer `1`, expected a string at line 1 column 22",
    );
}

#[test]
fn invalid_field_names() {
    for (name, column) in [
        ("author.name", 14),
        ("1a", 5),
        ("", 3),
        ("a-b", 6),
        ("é", 5),
    ] {
        refused(
            &format!(r#"{{"{name}": {{"$eq": 1}}}}"#),
            &format!(
                "invalid field name `{name}`: a top-level field name is letters, digits and \
                 underscores, not starting with a digit at line 1 column {column}"
            ),
        );
    }
}

#[test]
fn duplicate_fields() {
    refused(
        r#"{"a": {"$eq": 1}, "a": {"$eq": 2}}"#,
        "duplicate field `a` at line 1 column 21",
    );
}

#[test]
fn errors_report_their_position_in_a_larger_body() {
    #[derive(serde::Deserialize, Debug)]
    #[expect(
        dead_code,
        reason = "shared test support: each test binary uses a part of it"
    )]
    struct Body {
        query: String,
        filters: Option<Filter>,
    }
    let body = "{\n  \"query\": \"q\",\n  \"filters\": {\"$or\": [{\"a\": {\"$ne\": 1}}]}\n}";
    let error = serde_json::from_str::<Body>(body).unwrap_err().to_string();
    assert!(error.starts_with("unknown operator `$ne`"), "{error}");
    assert!(error.ends_with("at line 3 column 34"), "{error}");
    let body = r#"{"query": "q", "filters": null}"#;
    assert!(
        serde_json::from_str::<Body>(body)
            .unwrap()
            .filters
            .is_none()
    );
}
