//! Shared by the filter tests: a pipeline schema and helpers to parse, validate and render.

#![allow(
    dead_code,
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "included by several test crates, each using a part of it"
)]

use sea_query::{Alias, PostgresQueryBuilder, Query};
use serde_json::{Value, json};
use trove_query::filter::{self, Filter, SchemaError, TeqExpansions, TypedFilter};

/// A pipeline schema with one field of each kind.
pub fn schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "title": {"type": "string"},
            "category": {"type": ["string", "null"]},
            "topic": {"type": "string"},
            "year": {"type": "integer"},
            "price": {"type": ["number", "null"]},
            "draft": {"type": "boolean"},
            "author": {"type": "object", "properties": {"name": {"type": "string"}}},
            "weird": {"description": "no type"}
        },
        "required": ["title"]
    })
}

/// Parses a filter from JSON text (the body path).
pub fn parse(json: &str) -> Result<Filter, String> {
    Filter::from_json(json).map_err(|e| e.to_string())
}

/// Parses and validates against [`schema`].
pub fn typed(json: &str) -> Result<TypedFilter, SchemaError> {
    let parsed = parse(json).unwrap_or_else(|e| panic!("{json}: {e}"));
    filter::validate(&parsed, &schema())
}

/// `SELECT id FROM fragments WHERE <condition>`: SQL text and bound values.
pub fn render(json: &str, teq: &TeqExpansions) -> String {
    let typed = typed(json).unwrap_or_else(|e| panic!("{json}: {e}"));
    filter::validate_teq(&typed, teq).unwrap_or_else(|e| panic!("{json}: {e}"));
    let condition = filter::compile(&typed, "fragments", teq);
    let (sql, values) = Query::select()
        .column(Alias::new("id"))
        .from(Alias::new("fragments"))
        .cond_where(condition)
        .build(PostgresQueryBuilder);
    format!("{sql}\n\n{:#?}", values.0)
}
