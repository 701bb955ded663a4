//! `parse_list_query` and `finish_page`: the query-string contract of list operations
//! (interface §List operations, addendum §4).

#![expect(clippy::unwrap_used, reason = "tests fail loudly")]

mod common;

use common::{API_KEYS, API_KEYS_ECHO, FRAGMENTS, ID1, ID2};
use serde_json::{Value, json};
use trove_query::list::{
    Cursor, FieldFilter, FilterOp, ListQueryError, ListRequest, ListSpec, OrderField, PageRequest,
    decode_cursor, encode_cursor, finish_page, parse_list_query,
};

fn parse(q: &str) -> Result<ListRequest, ListQueryError> {
    parse_list_query(&API_KEYS, Some(q), &[])
}

fn ok(q: &str) -> ListRequest {
    parse(q).unwrap_or_else(|e| panic!("{q:?} should parse: {e:?}"))
}

fn query_string_error(q: &str) -> String {
    match parse(q) {
        Err(ListQueryError::QueryString(reason)) => reason,
        other => panic!("{q:?} should be a query-string error, got {other:?}"),
    }
}

fn rejected_order(q: &str) -> Vec<String> {
    match parse(q) {
        Err(ListQueryError::InvalidOrderBy(values)) => values,
        other => panic!("{q:?} should be an order_by error, got {other:?}"),
    }
}

fn assert_pagination(q: &str) {
    assert_eq!(parse(q), Err(ListQueryError::Pagination), "{q:?}");
}

fn cursor(values: Value) -> String {
    let Value::Array(values) = values else {
        panic!("cursor values must be an array")
    };
    encode_cursor(&values)
}

fn asc(field: &'static str) -> OrderField {
    OrderField {
        field,
        descending: false,
    }
}

fn desc(field: &'static str) -> OrderField {
    OrderField {
        field,
        descending: true,
    }
}

fn first(n: u64) -> PageRequest {
    PageRequest::Cursor {
        first: Some(n),
        after: None,
        last: None,
        before: None,
    }
}

// ---------------------------------------------------------------------------------------------
// Pagination modes and defaults

#[test]
fn no_parameters_is_cursor_mode_first_25_default_order() {
    for req in [parse_list_query(&API_KEYS, None, &[]).unwrap(), ok("")] {
        assert_eq!(req.page, first(25));
        assert!(!req.count);
        assert_eq!(req.order_by, vec![asc("id")]);
        assert!(!req.explicit_order);
        assert!(req.filters.is_empty());
        assert!(req.query_info.is_empty());
    }
}

#[test]
fn cursor_mode_sizes() {
    assert_eq!(ok("first=10").page, first(10));
    assert_eq!(ok("first=0").page, first(0));
    assert_eq!(
        ok("last=7").page,
        PageRequest::Cursor {
            first: None,
            after: None,
            last: Some(7),
            before: None
        }
    );
}

#[test]
fn after_alone_defaults_to_first_25_and_before_alone_to_last_25() {
    let c = cursor(json!([ID1]));
    assert_eq!(
        ok(&format!("after={c}")).page,
        PageRequest::Cursor {
            first: Some(25),
            after: Some(Cursor(vec![json!(ID1)])),
            last: None,
            before: None
        }
    );
    assert_eq!(
        ok(&format!("before={c}")).page,
        PageRequest::Cursor {
            first: None,
            after: None,
            last: Some(25),
            before: Some(Cursor(vec![json!(ID1)]))
        }
    );
    assert_eq!(
        ok(&format!("last=3&before={c}")).page,
        PageRequest::Cursor {
            first: None,
            after: None,
            last: Some(3),
            before: Some(Cursor(vec![json!(ID1)]))
        }
    );
}

#[test]
fn offset_mode_defaults() {
    assert_eq!(
        ok("limit=10").page,
        PageRequest::Offset {
            limit: 10,
            offset: 0
        }
    );
    assert_eq!(
        ok("offset=5").page,
        PageRequest::Offset {
            limit: 25,
            offset: 5
        }
    );
    assert_eq!(
        ok("limit=0&offset=0").page,
        PageRequest::Offset {
            limit: 0,
            offset: 0
        }
    );
}

#[test]
fn count_parameter() {
    assert!(ok("count=true").count);
    assert!(!ok("count=false").count);
    assert!(ok("limit=3&count=true").count);
}

// ---------------------------------------------------------------------------------------------
// Pagination errors (interface rule 2)

#[test]
fn mixing_cursor_and_offset_parameters_is_a_pagination_error() {
    let c = cursor(json!([ID1]));
    for q in [
        "first=1&limit=1".to_owned(),
        "first=1&offset=1".to_owned(),
        "last=1&limit=1".to_owned(),
        "offset=0&last=1".to_owned(),
        format!("after={c}&limit=2"),
        format!("before={c}&offset=2"),
    ] {
        assert_pagination(&q);
    }
}

#[test]
fn conflicting_cursor_parameters_are_pagination_errors() {
    let c = cursor(json!([ID1]));
    assert_pagination("first=1&last=1");
    assert_pagination(&format!("after={c}&before={c}"));
    assert_pagination(&format!("after={c}&last=2"));
    assert_pagination(&format!("before={c}&first=2"));
    assert_pagination(&format!("first=2&after={c}&last=2&before={c}"));
}

#[test]
fn unreadable_cursors_are_pagination_errors() {
    use base64::Engine as _;
    let b64 = |bytes: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes);
    assert_pagination("after=%%%not-base64");
    assert_pagination("after=");
    assert_pagination(&format!("after={}", b64(b"not json")));
    assert_pagination(&format!("before={}", b64(br#"{"id":1}"#)));
    assert_pagination(&format!("after={}", b64(b"\"a string\"")));
}

#[test]
fn cursor_with_wrong_number_of_values_is_a_pagination_error() {
    assert_pagination(&format!("after={}", cursor(json!([]))));
    assert_pagination(&format!("after={}", cursor(json!([ID1, ID2]))));
    // Two order fields, one value.
    assert_pagination(&format!(
        "order_by=name&order_by=id&after={}",
        cursor(json!(["x"]))
    ));
    // A default-order cursor reused with an explicit order of another length.
    assert_pagination(&format!(
        "order_by=-created_at&order_by=id&before={}",
        cursor(json!([ID1]))
    ));
}

#[test]
fn cursor_values_must_fit_the_order_field_kinds() {
    // uuid field: a number, a non-UUID string, null on a non-nullable field.
    assert_pagination(&format!("after={}", cursor(json!([42]))));
    assert_pagination(&format!("after={}", cursor(json!(["not-a-uuid"]))));
    assert_pagination(&format!("after={}", cursor(json!([null]))));
    // timestamp field: not RFC 3339.
    assert_pagination(&format!(
        "order_by=created_at&order_by=id&after={}",
        cursor(json!(["2024-01-01", ID1]))
    ));
    // text field: a number.
    assert_pagination(&format!("order_by=name&after={}", cursor(json!([1]))));
    // integer field: a string, a float.
    let fragments = |q: &str| parse_list_query(&FRAGMENTS, Some(q), &[]);
    assert_eq!(
        fragments(&format!("after={}", cursor(json!(["3"])))),
        Err(ListQueryError::Pagination)
    );
    assert_eq!(
        fragments(&format!("after={}", cursor(json!([3.5])))),
        Err(ListQueryError::Pagination)
    );
    assert!(fragments(&format!("after={}", cursor(json!([3])))).is_ok());
}

#[test]
fn nullable_order_fields_accept_null_cursor_values() {
    let req = ok(&format!(
        "order_by=expiration&order_by=id&after={}",
        cursor(json!([null, ID1]))
    ));
    assert_eq!(
        req.page,
        PageRequest::Cursor {
            first: Some(25),
            after: Some(Cursor(vec![Value::Null, json!(ID1)])),
            last: None,
            before: None
        }
    );
    ok(&format!(
        "order_by=-expiration&order_by=id&before={}",
        cursor(json!(["2024-01-01T00:00:00+02:00", ID1]))
    ));
}

// ---------------------------------------------------------------------------------------------
// Query-string errors (400 plain text)

#[test]
fn bad_integers_are_query_string_errors() {
    for q in [
        "first=abc",
        "first=-1",
        "last=1.5",
        "limit=-3",
        "offset=x",
        "first=",
        "limit=+5",
    ] {
        let reason = query_string_error(q);
        let name = q.split('=').next().unwrap();
        assert!(reason.starts_with(&format!("{name}: ")), "{q}: {reason}");
    }
    assert_eq!(
        query_string_error("first=-1"),
        "first: invalid digit found in string"
    );
}

#[test]
fn bad_booleans_are_query_string_errors() {
    assert!(query_string_error("count=yes").starts_with("count: "));
    assert!(query_string_error("count=1").starts_with("count: "));
    assert!(query_string_error("active=TRUE").starts_with("active: "));
    assert!(query_string_error("active=").starts_with("active: "));
}

#[test]
fn bad_uuids_are_query_string_errors() {
    let reason = query_string_error("id=not-a-uuid");
    assert!(reason.starts_with("id: UUID parsing failed: "), "{reason}");
}

#[test]
fn bad_timestamps_are_query_string_errors() {
    for q in [
        "created_at=yesterday",
        "created_at$gt=2024-01-01",
        "updated_at$le=2024-01-01T00:00:00",
        "expiration=2024-13-01T00:00:00Z",
    ] {
        let reason = query_string_error(q);
        let name = q.split('=').next().unwrap();
        assert!(reason.starts_with(&format!("{name}: ")), "{q}: {reason}");
    }
}

#[test]
fn unencoded_plus_in_a_timestamp_offset_is_a_query_string_error() {
    let reason = query_string_error("created_at$gt=2024-01-01T01:00:00+01:00");
    assert!(reason.starts_with("created_at$gt: "), "{reason}");
    // The same offset percent-encoded is fine; a negative offset needs no encoding.
    ok("created_at$gt=2024-01-01T01:00:00%2B01:00");
    ok("created_at$gt=2024-01-01T01:00:00-01:00");
}

#[test]
fn duplicate_non_repeatable_filters_are_query_string_errors() {
    assert_eq!(
        query_string_error("name=a&name=b"),
        "duplicate field `name`"
    );
    assert_eq!(
        query_string_error("name$gt=a&name$gt=b"),
        "duplicate field `name$gt`"
    );
    assert_eq!(
        query_string_error(&format!("id={ID1}&id={ID2}")),
        "duplicate field `id`"
    );
    // `$contains` is repeatable; `name` and `name$startswith` are distinct parameters.
    ok("name$contains=a&name$contains=b&name=c&name$startswith=d");
}

#[test]
fn duplicate_pagination_parameters_are_query_string_errors() {
    let c = cursor(json!([ID1]));
    assert_eq!(
        query_string_error("first=1&first=2"),
        "duplicate field `first`"
    );
    assert_eq!(
        query_string_error("last=1&last=1"),
        "duplicate field `last`"
    );
    assert_eq!(
        query_string_error("limit=1&limit=2"),
        "duplicate field `limit`"
    );
    assert_eq!(
        query_string_error("offset=1&offset=2"),
        "duplicate field `offset`"
    );
    assert_eq!(
        query_string_error("count=true&count=true"),
        "duplicate field `count`"
    );
    assert_eq!(
        query_string_error(&format!("after={c}&after={c}")),
        "duplicate field `after`"
    );
    assert_eq!(
        query_string_error(&format!("before={c}&before={c}")),
        "duplicate field `before`"
    );
    // Detected before the second value is parsed.
    assert_eq!(
        query_string_error("first=1&first=x"),
        "duplicate field `first`"
    );
}

#[test]
fn query_string_error_message() {
    let err = parse("first=1&first=2").unwrap_err();
    assert_eq!(
        err.to_string(),
        "Failed to deserialize query string: duplicate field `first`"
    );
}

#[test]
fn error_precedence_query_string_then_order_by_then_pagination() {
    assert!(matches!(
        parse("order_by=bogus&first=1&limit=1&active=maybe"),
        Err(ListQueryError::QueryString(_))
    ));
    assert_eq!(
        parse("order_by=bogus&first=1&limit=1"),
        Err(ListQueryError::InvalidOrderBy(vec!["bogus".to_owned()]))
    );
}

// ---------------------------------------------------------------------------------------------
// order_by

#[test]
fn order_by_directions() {
    let req = ok("order_by=-name");
    assert_eq!(req.order_by, vec![desc("name")]);
    assert!(req.explicit_order);
    assert_eq!(ok("order_by=%2Bname").order_by, vec![asc("name")]);
    assert_eq!(ok("order_by=name").order_by, vec![asc("name")]);
    assert_eq!(
        ok("order_by=-created_at&order_by=expiration&order_by=%2Bid").order_by,
        vec![desc("created_at"), asc("expiration"), asc("id")]
    );
}

#[test]
fn explicit_order_replaces_the_default_without_tie_breaker() {
    assert_eq!(ok("order_by=created_at").order_by, vec![asc("created_at")]);
}

#[test]
fn unencoded_plus_in_order_by_is_rejected_as_decoded() {
    assert_eq!(rejected_order("order_by=+name"), vec![" name"]);
}

#[test]
fn unknown_and_unsortable_order_fields_are_rejected() {
    assert_eq!(rejected_order("order_by=bogus"), vec!["bogus"]);
    assert_eq!(
        rejected_order("order_by=-description"),
        vec!["-description"]
    );
    assert_eq!(rejected_order("order_by=active"), vec!["active"]);
    assert_eq!(rejected_order("order_by="), vec![""]);
    assert_eq!(rejected_order("order_by=-"), vec!["-"]);
    assert_eq!(rejected_order("order_by=--name"), vec!["--name"]);
}

#[test]
fn every_rejected_order_value_is_reported_in_request_order() {
    assert_eq!(
        rejected_order(
            "order_by=bogus&order_by=name&order_by=+x&order_by=description&order_by=&order_by=-id"
        ),
        vec!["bogus", " x", "description", ""]
    );
}

// ---------------------------------------------------------------------------------------------
// Filters and query_info

#[test]
fn filters_are_typed_and_echoed() {
    let req = ok(&format!(
        "id={}&name=a+b%26c&name$contains=x&name$contains=%25y_&name$startswith=pre\
         &description=d&description$contains=e&active=false\
         &expiration$le=2030-01-01T00:00:00Z&created_at$gt=2024-01-01T01:00:00%2B01:00\
         &updated_at$ge=2024-06-01T12:00:00.5-02:00&updated_at$lt=2024-06-02T00:00:00.123456789Z\
         &first=3&count=true&order_by=name",
        ID1.to_uppercase()
    ));
    assert_eq!(
        Value::Object(req.query_info.clone()),
        json!({
            "id": ID1,
            "name": "a b&c",
            "name$contains": ["x", "%y_"],
            "name$startswith": "pre",
            "description": "d",
            "description$contains": ["e"],
            "active": false,
            "expiration$le": "2030-01-01T00:00:00.000000Z",
            "created_at$gt": "2024-01-01T00:00:00.000000Z",
            "updated_at$ge": "2024-06-01T14:00:00.500000Z",
            "updated_at$lt": "2024-06-02T00:00:00.123456Z",
        })
    );
    let filter = |field, op, value| FieldFilter { field, op, value };
    assert_eq!(
        req.filters,
        vec![
            filter("id", FilterOp::Eq, json!(ID1)),
            filter("name", FilterOp::Eq, json!("a b&c")),
            filter("name", FilterOp::Contains, json!("x")),
            filter("name", FilterOp::Contains, json!("%y_")),
            filter("name", FilterOp::StartsWith, json!("pre")),
            filter("description", FilterOp::Eq, json!("d")),
            filter("description", FilterOp::Contains, json!("e")),
            filter("active", FilterOp::Eq, json!(false)),
            filter(
                "expiration",
                FilterOp::Le,
                json!("2030-01-01T00:00:00.000000Z")
            ),
            filter(
                "created_at",
                FilterOp::Gt,
                json!("2024-01-01T00:00:00.000000Z")
            ),
            filter(
                "updated_at",
                FilterOp::Ge,
                json!("2024-06-01T14:00:00.500000Z")
            ),
            filter(
                "updated_at",
                FilterOp::Lt,
                json!("2024-06-02T00:00:00.123456Z")
            ),
        ]
    );
}

#[test]
fn integer_filters() {
    let req = parse_list_query(&FRAGMENTS, Some("order_id$ge=10&order_id=-3"), &[]).unwrap();
    assert_eq!(
        Value::Object(req.query_info),
        json!({"order_id$ge": 10, "order_id": -3})
    );
    assert!(matches!(
        parse_list_query(&FRAGMENTS, Some("order_id=1.5"), &[]),
        Err(ListQueryError::QueryString(reason)) if reason.starts_with("order_id: ")
    ));
}

#[test]
fn unknown_parameters_and_disallowed_operators_are_ignored() {
    let req = ok(
        "foo=bar&name$foo=x&description$startswith=x&id$gt=1&active$contains=t\
                  &expiration$contains=x&created_at$startswith=2024&$gt=1&=x&&bare",
    );
    assert!(req.filters.is_empty());
    assert!(req.query_info.is_empty());
    assert_eq!(req.page, first(25));
}

#[test]
fn reserved_parameters_are_skipped() {
    let req = parse_list_query(
        &API_KEYS,
        Some("name=x&first=oops&version=7"),
        &["name", "first"],
    )
    .unwrap();
    assert!(req.filters.is_empty());
    assert_eq!(req.page, first(25));
}

#[test]
fn echo_unset_filters_lists_every_filter() {
    let req = parse_list_query(
        &API_KEYS_ECHO,
        Some("name$contains=a&created_at$lt=2024-01-01T00:00:00Z&limit=2"),
        &[],
    )
    .unwrap();
    assert_eq!(
        Value::Object(req.query_info),
        json!({
            "id": null,
            "name": null, "name$contains": ["a"], "name$startswith": null,
            "name$gt": null, "name$ge": null, "name$lt": null, "name$le": null,
            "description": null, "description$contains": [],
            "active": null,
            "expiration": null, "expiration$gt": null, "expiration$ge": null,
            "expiration$lt": null, "expiration$le": null,
            "created_at": null, "created_at$gt": null, "created_at$ge": null,
            "created_at$lt": "2024-01-01T00:00:00.000000Z", "created_at$le": null,
            "updated_at": null, "updated_at$gt": null, "updated_at$ge": null,
            "updated_at$lt": null, "updated_at$le": null,
        })
    );
    // Without echo, only what was recognized.
    assert_eq!(
        Value::Object(ok("active=true").query_info),
        json!({"active": true})
    );
}

// ---------------------------------------------------------------------------------------------
// finish_page

fn key(id: &str, name: &str) -> Value {
    json!({"id": id, "name": name, "created_at": "2024-01-01T00:00:00.000000Z", "expiration": null})
}

fn page_info(spec: &ListSpec, req: &ListRequest, rows: Vec<Value>) -> (Vec<Value>, Value) {
    let page = finish_page(spec, req, rows);
    (page.data, Value::Object(page.page_info))
}

fn id_cursor(id: &str) -> String {
    cursor(json!([id]))
}

#[test]
fn finish_first_page_with_more_rows() {
    let req = ok("first=2");
    let (a, b, c) = (key("a", "x"), key("b", "y"), key("c", "z"));
    let (data, info) = page_info(&API_KEYS, &req, vec![a.clone(), b.clone(), c]);
    assert_eq!(data, vec![a, b]);
    assert_eq!(
        info,
        json!({
            "before": id_cursor("a"), "after": id_cursor("b"),
            "has_next": true, "has_prev": false, "order_by": null,
        })
    );
}

#[test]
fn finish_first_page_without_more_rows() {
    let req = ok("first=2");
    let (data, info) = page_info(&API_KEYS, &req, vec![key("a", "x"), key("b", "y")]);
    assert_eq!(data.len(), 2);
    assert_eq!(info["has_next"], json!(false));
    assert_eq!(info["has_prev"], json!(false));
}

#[test]
fn finish_after_page() {
    let req = ok(&format!("first=2&after={}", id_cursor(ID1)));
    let (data, info) = page_info(&API_KEYS, &req, vec![key("b", "y")]);
    assert_eq!(data, vec![key("b", "y")]);
    assert_eq!(
        info,
        json!({
            "before": id_cursor("b"), "after": id_cursor("b"),
            "has_next": false, "has_prev": true, "order_by": null,
        })
    );
    // Empty page after a cursor: still has_prev, no cursors.
    let (data, info) = page_info(&API_KEYS, &req, vec![]);
    assert!(data.is_empty());
    assert_eq!(
        info,
        json!({"has_next": false, "has_prev": true, "order_by": null})
    );
}

#[test]
fn finish_last_page_restores_natural_order() {
    // Natural order a < b < c < d; `last=2` reads d, c, b (one extra) backwards.
    let req = ok("last=2");
    let rows = vec![key("d", "w"), key("c", "z"), key("b", "y")];
    let (data, info) = page_info(&API_KEYS, &req, rows);
    assert_eq!(data, vec![key("c", "z"), key("d", "w")]);
    assert_eq!(
        info,
        json!({
            "before": id_cursor("c"), "after": id_cursor("d"),
            "has_next": false, "has_prev": true, "order_by": null,
        })
    );
    // Exactly `last` rows: nothing before.
    let (data, info) = page_info(&API_KEYS, &req, vec![key("b", "y"), key("a", "x")]);
    assert_eq!(data, vec![key("a", "x"), key("b", "y")]);
    assert_eq!(info["has_prev"], json!(false));
}

#[test]
fn finish_before_page() {
    let req = ok(&format!("last=2&before={}", id_cursor(ID2)));
    let (data, info) = page_info(&API_KEYS, &req, vec![key("b", "y")]);
    assert_eq!(data, vec![key("b", "y")]);
    assert_eq!(info["has_next"], json!(true));
    assert_eq!(info["has_prev"], json!(false));
    let (_, info) = page_info(&API_KEYS, &req, vec![]);
    assert_eq!(
        info,
        json!({"has_next": true, "has_prev": false, "order_by": null})
    );
}

#[test]
fn finish_first_zero_and_last_zero() {
    let (data, info) = page_info(&API_KEYS, &ok("first=0"), vec![]);
    assert!(data.is_empty());
    assert_eq!(
        info,
        json!({"has_next": true, "has_prev": false, "order_by": null})
    );
    // Even if the caller fetched a row anyway.
    let (data, _) = page_info(&API_KEYS, &ok("first=0"), vec![key("a", "x")]);
    assert!(data.is_empty());
    let (data, info) = page_info(&API_KEYS, &ok("last=0"), vec![]);
    assert!(data.is_empty());
    assert_eq!(
        info,
        json!({"has_next": false, "has_prev": true, "order_by": null})
    );
}

#[test]
fn finish_offset_page() {
    let req = ok("limit=2&offset=4&order_by=-name&order_by=created_at");
    let rows = vec![key("a", "x"), key("b", "y")];
    let (data, info) = page_info(&API_KEYS, &req, rows.clone());
    assert_eq!(data, rows);
    assert_eq!(
        info,
        json!({"limit": 2, "offset": 4, "order_by": ["-name", "created_at"]})
    );
}

#[test]
fn finish_cursor_values_follow_the_explicit_order() {
    let req = ok("order_by=name&order_by=-expiration&first=5");
    let (_, info) = page_info(
        &API_KEYS,
        &req,
        vec![key("a", "x"), json!({"name": "only"})],
    );
    assert_eq!(info["order_by"], json!(["name", "-expiration"]));
    assert_eq!(info["before"], json!(cursor(json!(["x", null]))));
    // A missing field is null in the cursor.
    assert_eq!(info["after"], json!(cursor(json!(["only", null]))));
}

#[test]
fn page_cursors_are_accepted_back() {
    let req = ok("order_by=-created_at&order_by=id&first=1");
    let row = json!({"id": ID1, "created_at": "2024-01-01T00:00:00.000000Z"});
    let page = finish_page(&API_KEYS, &req, vec![row.clone(), row]);
    let after = page.page_info["after"].as_str().unwrap();
    let next = ok(&format!(
        "order_by=-created_at&order_by=id&first=1&after={after}"
    ));
    let PageRequest::Cursor { after: Some(c), .. } = next.page else {
        panic!("cursor page")
    };
    assert_eq!(c, decode_cursor(after).unwrap());
    assert_eq!(c.0, vec![json!("2024-01-01T00:00:00.000000Z"), json!(ID1)]);
}

#[test]
fn a_nul_character_in_a_value_is_a_query_string_error() {
    assert_eq!(
        query_string_error("name=a%00b"),
        "name: the NUL character (U+0000) is not allowed"
    );
    assert_eq!(
        query_string_error("first=2&name$contains=%00"),
        "name$contains: the NUL character (U+0000) is not allowed"
    );
    ok("name=a%2500b");
}
