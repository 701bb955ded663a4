//! Snapshots of the SQL of list pages (PostgreSQL text and bound values), stored in the
//! workspace's top-level `snapshots/` folder.

#![expect(clippy::unwrap_used, reason = "tests fail loudly")]

mod common;

use common::{API_KEYS, ID1, ID2};
use sea_query::{Cond, Expr, ExprTrait as _, PostgresQueryBuilder, Query, SelectStatement};
use serde_json::{Value, json};
use trove_query::list::{
    ListSpec, build_count_query, build_page_query, encode_cursor, parse_list_query,
};

/// What the service passes as `base`: FROM, columns, no WHERE of its own.
fn base() -> SelectStatement {
    Query::select()
        .columns([
            ("api_keys", "id"),
            ("api_keys", "name"),
            ("api_keys", "expiration"),
        ])
        .from("api_keys")
        .to_owned()
}

fn cursor(values: Value) -> String {
    let Value::Array(values) = values else {
        panic!("cursor values must be an array")
    };
    encode_cursor(&values)
}

fn render(query: &SelectStatement) -> String {
    let (sql, values) = query.build(PostgresQueryBuilder);
    format!("{sql}\n\n{:#?}", values.0)
}

fn snapshot(name: &str, query_string: &str, sql: String) {
    insta::with_settings!({
        snapshot_path => concat!(env!("CARGO_MANIFEST_DIR"), "/../snapshots"),
        prepend_module_to_snapshot => false,
        omit_expression => true,
        description => query_string,
    }, {
        insta::assert_snapshot!(name, sql);
    });
}

fn page_with(spec: &ListSpec, name: &str, query_string: &str, base: SelectStatement) {
    let req = parse_list_query(spec, Some(query_string), &[])
        .unwrap_or_else(|e| panic!("{query_string:?}: {e:?}"));
    snapshot(
        name,
        query_string,
        render(&build_page_query(spec, &req, base)),
    );
}

fn page(name: &str, query_string: &str) {
    page_with(&API_KEYS, name, query_string, base());
}

#[test]
fn cursor_first_default() {
    page("list_cursor_first_default", "");
}

#[test]
fn cursor_first() {
    page("list_cursor_first", "first=10");
}

#[test]
fn cursor_first_zero() {
    page("list_cursor_first_zero", "first=0");
}

#[test]
fn cursor_first_after_ascending() {
    page(
        "list_cursor_first_after_asc",
        &format!("first=10&after={}", cursor(json!([ID1]))),
    );
}

#[test]
fn cursor_after_mixed_directions() {
    page(
        "list_cursor_after_mixed_directions",
        &format!(
            "order_by=-created_at&order_by=name&order_by=-id&first=10&after={}",
            cursor(json!(["2024-01-02T03:04:05.000006Z", "key", ID1]))
        ),
    );
}

#[test]
fn cursor_after_null_on_nullable_ascending() {
    // ASC NULLS LAST: nothing follows NULL in `expiration`; only ties on it continue by id.
    page(
        "list_cursor_after_null_nullable_asc",
        &format!(
            "order_by=expiration&order_by=id&after={}",
            cursor(json!([null, ID1]))
        ),
    );
}

#[test]
fn cursor_after_null_on_nullable_descending() {
    // DESC NULLS FIRST: every non-NULL `expiration` follows NULL.
    page(
        "list_cursor_after_null_nullable_desc",
        &format!(
            "order_by=-expiration&order_by=id&after={}",
            cursor(json!([null, ID1]))
        ),
    );
}

#[test]
fn cursor_after_value_on_nullable_ascending() {
    // ASC NULLS LAST: NULLs follow every value.
    page(
        "list_cursor_after_value_nullable_asc",
        &format!(
            "order_by=expiration&order_by=id&after={}",
            cursor(json!(["2030-01-01T00:00:00+02:00", ID1]))
        ),
    );
}

#[test]
fn cursor_last_before() {
    page(
        "list_cursor_last_before",
        &format!(
            "order_by=name&order_by=-created_at&order_by=id&last=10&before={}",
            cursor(json!(["key", "2024-01-02T03:04:05Z", ID1]))
        ),
    );
}

#[test]
fn cursor_before_null_on_nullable() {
    // Before NULL in ASC NULLS LAST: every non-NULL value, or a NULL with a smaller id.
    page(
        "list_cursor_before_null_nullable_asc",
        &format!(
            "order_by=expiration&order_by=id&before={}",
            cursor(json!([null, ID2]))
        ),
    );
}

#[test]
fn cursor_last() {
    page(
        "list_cursor_last",
        "last=5&order_by=-expiration&order_by=id",
    );
}

#[test]
fn offset() {
    page(
        "list_offset",
        "limit=10&offset=20&order_by=-name&order_by=id",
    );
}

#[test]
fn offset_default_order() {
    page("list_offset_default_order", "offset=50");
}

#[test]
fn count() {
    let qs = "name$contains=prod&active=true&first=10&order_by=-name&count=true";
    let req = parse_list_query(&API_KEYS, Some(qs), &[]).unwrap();
    snapshot(
        "list_count",
        qs,
        render(&build_count_query(&API_KEYS, &req, base())),
    );
}

#[test]
fn filter_eq_uuid() {
    page("list_filter_eq_uuid", &format!("id={ID1}"));
}

#[test]
fn filter_eq_text() {
    page(
        "list_filter_eq_text",
        "name=my+key%27%3B+DROP+TABLE+api_keys",
    );
}

#[test]
fn filter_eq_bool() {
    page("list_filter_eq_bool", "active=false");
}

#[test]
fn filter_eq_timestamp() {
    page(
        "list_filter_eq_timestamp",
        "expiration=2024-01-01T01:00:00%2B01:00",
    );
}

#[test]
fn filter_contains() {
    page(
        "list_filter_contains",
        "name$contains=pro&name$contains=d_%25&description$contains=x",
    );
}

#[test]
fn filter_startswith() {
    page("list_filter_startswith", "name$startswith=prod");
}

#[test]
fn filter_backslashes_are_literal() {
    // `a\` and `\%`: backslashes doubled, `%` still a wildcard.
    page(
        "list_filter_backslash",
        "name$contains=a%5C&name$startswith=%5C%25",
    );
}

#[test]
fn filter_gt() {
    page("list_filter_gt", "created_at$gt=2024-01-01T00:00:00Z");
}

#[test]
fn filter_ge() {
    page("list_filter_ge", "name$ge=m");
}

#[test]
fn filter_lt() {
    page(
        "list_filter_lt",
        "updated_at$lt=2024-06-01T00:00:00.25-05:30",
    );
}

#[test]
fn filter_le() {
    page("list_filter_le", "expiration$le=2030-01-01T00:00:00Z");
}

#[test]
fn filters_all_combined() {
    page(
        "list_filters_all",
        &format!(
            "id={ID1}&name=k&name$contains=a&name$contains=b&name$startswith=k&name$gt=a\
             &name$ge=b&name$lt=y&name$le=z&description=d&description$contains=e&active=true\
             &expiration=2030-01-01T00:00:00Z&expiration$gt=2024-01-01T00:00:00Z\
             &expiration$ge=2024-01-02T00:00:00Z&expiration$lt=2031-01-01T00:00:00Z\
             &expiration$le=2031-01-02T00:00:00Z&created_at=2024-01-01T00:00:00Z\
             &created_at$gt=2023-01-01T00:00:00Z&created_at$ge=2023-01-02T00:00:00Z\
             &created_at$lt=2025-01-01T00:00:00Z&created_at$le=2025-01-02T00:00:00Z\
             &updated_at=2024-01-01T00:00:00Z&updated_at$gt=2023-01-01T00:00:00Z\
             &updated_at$ge=2023-01-02T00:00:00Z&updated_at$lt=2025-01-01T00:00:00Z\
             &updated_at$le=2025-01-02T00:00:00Z&first=10&after={}",
            cursor(json!([ID2]))
        ),
    );
}

#[test]
fn base_where_is_kept() {
    // The service's visibility condition (here an OR) stays intact and ANDed with the rest.
    let base = base()
        .cond_where(
            Cond::any()
                .add(Expr::col(("api_keys", "owner_id")).eq(uuid::Uuid::nil()))
                .add(Expr::col(("api_keys", "public")).eq(true)),
        )
        .to_owned();
    page_with(
        &API_KEYS,
        "list_base_where_kept",
        &format!(
            "name$contains=x&order_by=expiration&order_by=id&after={}",
            cursor(json!(["2030-01-01T00:00:00Z", ID1]))
        ),
        base,
    );
}
