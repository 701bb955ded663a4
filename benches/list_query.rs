//! Cost of the list machinery on a heavy request: parsing a query string with 20 filters and
//! 3 order fields plus an `after` cursor, building the page SELECT and rendering it for
//! PostgreSQL. This runs on every list request, so it must stay negligible next to the query.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use sea_query::{PostgresQueryBuilder, Query};
use serde_json::json;
use trove::service::api_keys::API_KEY_LIST;
use trove_query::list::{build_page_query, encode_cursor, parse_list_query};

/// 20 filters, 3 order fields, a cursor for those fields.
fn query_string() -> String {
    let cursor = encode_cursor(&[
        json!("2024-05-01T10:00:00.000000Z"),
        json!("key-042"),
        json!("0190a0f1-7f5e-7c3a-9d5b-3a1f2e4d5c6b"),
    ]);
    [
        "id=0190a0f1-7f5e-7c3a-9d5b-3a1f2e4d5c6b",
        "name=production",
        "name$contains=prod",
        "name$contains=key",
        "name$contains=%25_x",
        "name$startswith=pro",
        "name$gt=a",
        "name$ge=b",
        "name$lt=y",
        "name$le=z",
        "description=main+key",
        "description$contains=deploy",
        "active=true",
        "expiration$gt=2024-01-01T00:00:00Z",
        "expiration$le=2030-01-01T00:00:00%2B02:00",
        "created_at$ge=2023-01-01T00:00:00Z",
        "created_at$lt=2025-01-01T00:00:00Z",
        "created_at$le=2025-06-01T00:00:00-05:00",
        "updated_at$gt=2023-06-01T00:00:00Z",
        "updated_at$le=2026-01-01T00:00:00Z",
        "order_by=-created_at",
        "order_by=%2Bname",
        "order_by=id",
        "first=50",
        "count=true",
    ]
    .join("&")
        + "&after="
        + &cursor
}

fn bench_list_query(c: &mut Criterion) {
    let raw = query_string();
    c.bench_function("list_query_20_filters_3_orders", |b| {
        b.iter(|| {
            let req = parse_list_query(&API_KEY_LIST, Some(black_box(raw.as_str())), &[]);
            let Ok(req) = req else {
                panic!("benchmark query must parse: {req:?}")
            };
            let base = Query::select()
                .columns([("api_keys", "id"), ("api_keys", "name")])
                .from("api_keys")
                .to_owned();
            black_box(build_page_query(&API_KEY_LIST, &req, base).build(PostgresQueryBuilder))
        });
    });
}

criterion_group!(benches, bench_list_query);
criterion_main!(benches);
