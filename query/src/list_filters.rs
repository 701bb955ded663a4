//! Field filters of list operations: recognizing `field`, `field$contains`, … parameters,
//! typing their values, echoing them in `query_info`, and their SQL conditions.

use chrono::{DateTime, SecondsFormat, Utc};
use sea_query::{Expr, ExprTrait as _, SelectStatement};
use serde_json::{Map, Value};
use uuid::Uuid;

use crate::like::wildcard_text;
use crate::list::{
    FieldFilter, FieldKind, FieldSpec, FilterOp, FilterOps, ListQueryError, ListSpec,
};

/// Every operator, in the order `query_info` echoes unset filters (the order is irrelevant for
/// a JSON object but keeps iteration deterministic).
const ALL_OPS: [FilterOp; 7] = [
    FilterOp::Eq,
    FilterOp::Contains,
    FilterOp::StartsWith,
    FilterOp::Gt,
    FilterOp::Ge,
    FilterOp::Lt,
    FilterOp::Le,
];

impl FilterOp {
    /// The suffix appended to the field name to form the query parameter (`""` for equality).
    pub fn suffix(self) -> &'static str {
        match self {
            FilterOp::Eq => "",
            FilterOp::Contains => "$contains",
            FilterOp::StartsWith => "$startswith",
            FilterOp::Gt => "$gt",
            FilterOp::Ge => "$ge",
            FilterOp::Lt => "$lt",
            FilterOp::Le => "$le",
        }
    }

    /// Whether the parameter may be given several times (all values must match).
    pub fn is_repeatable(self) -> bool {
        matches!(self, FilterOp::Contains)
    }

    /// Whether the value is a LIKE pattern fragment (always text) rather than a typed value.
    fn is_pattern(self) -> bool {
        matches!(self, FilterOp::Contains | FilterOp::StartsWith)
    }

    fn from_suffix(suffix: &str) -> Option<Self> {
        ALL_OPS.into_iter().find(|op| op.suffix() == suffix)
    }
}

impl FilterOps {
    /// Whether this set accepts `op`.
    pub fn allows(self, op: FilterOp) -> bool {
        match op {
            FilterOp::Eq => self.eq,
            FilterOp::Contains => self.contains,
            FilterOp::StartsWith => self.startswith,
            FilterOp::Gt | FilterOp::Ge | FilterOp::Lt | FilterOp::Le => self.compare,
        }
    }
}

/// The field of `spec` named `name`.
pub(crate) fn field_spec(spec: &ListSpec, name: &str) -> Option<&'static FieldSpec> {
    spec.fields.iter().find(|f| f.name == name)
}

/// The qualified column of a field. A name the spec does not declare (a hand-built request)
/// is used as the column itself rather than dropped, so the mistake surfaces as an SQL error
/// instead of silently widening the result.
pub(crate) fn column_expr(spec: &ListSpec, name: &'static str) -> Expr {
    let column = field_spec(spec, name).map_or(name, |f| f.column);
    Expr::col((spec.table, column))
}

/// Converts a JSON value (filter value or cursor value) to the bound SQL value of `kind`.
/// `None` when the JSON does not fit the kind (including JSON null).
pub(crate) fn sql_value(kind: FieldKind, value: &Value) -> Option<sea_query::Value> {
    match kind {
        FieldKind::Uuid => value
            .as_str()
            .and_then(|s| Uuid::parse_str(s).ok())
            .map(Into::into),
        FieldKind::Text => value.as_str().map(|s| s.to_owned().into()),
        FieldKind::Bool => value.as_bool().map(Into::into),
        FieldKind::Integer => value.as_i64().map(Into::into),
        FieldKind::Timestamp => value
            .as_str()
            .and_then(|s| DateTime::parse_from_rfc3339(s).ok())
            .map(|t| t.with_timezone(&Utc).into()),
    }
}

/// Binds `value` as `kind`; a value that does not fit (only possible in a hand-built request,
/// since parsing validates) is bound as its text so PostgreSQL rejects the type mismatch loudly.
pub(crate) fn bind(kind: FieldKind, value: &Value) -> Expr {
    match sql_value(kind, value) {
        Some(v) => Expr::val(v),
        None => match value {
            Value::String(s) => Expr::val(s.clone()),
            other => Expr::val(other.to_string()),
        },
    }
}

/// Types the raw query-string value of a recognized filter parameter.
fn typed_value(
    field: &FieldSpec,
    op: FilterOp,
    param: &str,
    raw: &str,
) -> Result<Value, ListQueryError> {
    if op.is_pattern() {
        return Ok(Value::String(raw.to_owned()));
    }
    let fail = |reason: String| ListQueryError::QueryString(format!("{param}: {reason}"));
    match field.kind {
        FieldKind::Text => Ok(Value::String(raw.to_owned())),
        FieldKind::Uuid => Uuid::parse_str(raw)
            .map(|u| Value::String(u.hyphenated().to_string()))
            .map_err(|e| fail(format!("UUID parsing failed: {e}"))),
        FieldKind::Bool => raw
            .parse::<bool>()
            .map(Value::Bool)
            .map_err(|e| fail(e.to_string())),
        FieldKind::Integer => raw
            .parse::<i64>()
            .map(|i| Value::Number(i.into()))
            .map_err(|e| fail(e.to_string())),
        FieldKind::Timestamp => DateTime::parse_from_rfc3339(raw)
            .map(|t| {
                Value::String(
                    t.with_timezone(&Utc)
                        .to_rfc3339_opts(SecondsFormat::Micros, true),
                )
            })
            .map_err(|e| fail(format!("invalid RFC 3339 timestamp: {e}"))),
    }
}

/// Accumulates the filter parameters of one query string.
pub(crate) struct FilterCollector<'a> {
    spec: &'a ListSpec,
    filters: Vec<FieldFilter>,
    query_info: Map<String, Value>,
}

impl<'a> FilterCollector<'a> {
    pub(crate) fn new(spec: &'a ListSpec) -> Self {
        Self {
            spec,
            filters: Vec::new(),
            query_info: Map::new(),
        }
    }

    /// Offers one decoded query parameter. `Ok(false)` when it is not a filter of this list
    /// (the caller ignores it, as the interface ignores unknown parameters).
    pub(crate) fn offer(&mut self, name: &str, raw: &str) -> Result<bool, ListQueryError> {
        let (field_name, suffix) = name.find('$').map_or((name, ""), |i| name.split_at(i));
        let Some(op) = FilterOp::from_suffix(suffix) else {
            return Ok(false);
        };
        let Some(field) = field_spec(self.spec, field_name) else {
            return Ok(false);
        };
        if !field.filters.allows(op) {
            return Ok(false);
        }
        let value = typed_value(field, op, name, raw)?;
        if op.is_repeatable() {
            let entry = self
                .query_info
                .entry(name.to_owned())
                .or_insert_with(|| Value::Array(Vec::new()));
            if let Value::Array(values) = entry {
                values.push(value.clone());
            }
        } else {
            if self.query_info.contains_key(name) {
                // Same wording as serde's derive, which the interface's message reflects.
                return Err(ListQueryError::QueryString(format!(
                    "duplicate field `{name}`"
                )));
            }
            self.query_info.insert(name.to_owned(), value.clone());
        }
        self.filters.push(FieldFilter {
            field: field.name,
            op,
            value,
        });
        Ok(true)
    }

    /// The recognized filters (request order) and the `query_info` object.
    pub(crate) fn finish(mut self) -> (Vec<FieldFilter>, Map<String, Value>) {
        if self.spec.echo_unset_filters {
            for field in self.spec.fields {
                for op in ALL_OPS.into_iter().filter(|op| field.filters.allows(*op)) {
                    let unset = if op.is_repeatable() {
                        Value::Array(Vec::new())
                    } else {
                        Value::Null
                    };
                    self.query_info
                        .entry(format!("{}{}", field.name, op.suffix()))
                        .or_insert(unset);
                }
            }
        }
        (self.filters, self.query_info)
    }
}

/// The SQL condition of one filter.
fn filter_condition(spec: &ListSpec, filter: &FieldFilter) -> Expr {
    let field = field_spec(spec, filter.field);
    let kind = field.map_or(FieldKind::Text, |f| f.kind);
    let col = column_expr(spec, filter.field);
    let text = || {
        filter
            .value
            .as_str()
            .map_or_else(|| filter.value.to_string(), str::to_owned)
    };
    // LIKE needs text; non-text columns are cast so an operator allowed on them still works.
    let like_col = || {
        if kind == FieldKind::Text {
            col.clone()
        } else {
            col.clone().cast_as("text")
        }
    };
    match filter.op {
        // `%` and `_` in the value deliberately stay wildcards (interface rule 7); a backslash
        // is literal.
        FilterOp::Contains => like_col().like(format!("%{}%", wildcard_text(&text()))),
        FilterOp::StartsWith => like_col().like(format!("{}%", wildcard_text(&text()))),
        FilterOp::Eq => col.eq(bind(kind, &filter.value)),
        FilterOp::Gt => col.gt(bind(kind, &filter.value)),
        FilterOp::Ge => col.gte(bind(kind, &filter.value)),
        FilterOp::Lt => col.lt(bind(kind, &filter.value)),
        FilterOp::Le => col.lte(bind(kind, &filter.value)),
    }
}

/// ANDs every filter onto `query`'s WHERE (after whatever the base already holds).
pub(crate) fn apply_filters(spec: &ListSpec, filters: &[FieldFilter], query: &mut SelectStatement) {
    for filter in filters {
        query.and_where(filter_condition(spec, filter));
    }
}

#[cfg(test)]
mod tests {
    use sea_query::{PostgresQueryBuilder, Query};
    use serde_json::json;

    use super::*;

    const SPEC: ListSpec = ListSpec {
        table: "t",
        fields: &[FieldSpec {
            name: "id",
            column: "id_col",
            kind: FieldKind::Uuid,
            nullable: false,
            filters: FilterOps::TEXT_ALL,
            sortable: true,
        }],
        echo_unset_filters: false,
        default_order: &["id"],
    };

    fn sql(filters: &[FieldFilter]) -> String {
        let mut query = Query::select().column("x").from("t").to_owned();
        apply_filters(&SPEC, filters, &mut query);
        query.to_string(PostgresQueryBuilder)
    }

    #[test]
    fn like_on_a_non_text_column_casts_it() {
        let filter = FieldFilter {
            field: "id",
            op: FilterOp::StartsWith,
            value: json!("01"),
        };
        assert_eq!(
            sql(&[filter]),
            r#"SELECT "x" FROM "t" WHERE CAST("t"."id_col" AS text) LIKE '01%'"#
        );
    }

    #[test]
    fn patterns_keep_wildcards_and_double_backslashes() {
        for (op, text, pattern) in [
            (FilterOp::Contains, r"50%\", r"%50%\\%"),
            (FilterOp::StartsWith, r"a_\b", r"a_\\b%"),
        ] {
            let filter = FieldFilter {
                field: "id",
                op,
                value: json!(text),
            };
            let mut query = Query::select().column("x").from("t").to_owned();
            apply_filters(&SPEC, &[filter], &mut query);
            let (_, values) = query.build(PostgresQueryBuilder);
            assert_eq!(values.0, [sea_query::Value::from(pattern)]);
        }
    }

    #[test]
    fn hand_built_mismatches_stay_visible_in_sql() {
        // Not a UUID: bound as text so PostgreSQL refuses the comparison instead of matching.
        let filter = FieldFilter {
            field: "id",
            op: FilterOp::Eq,
            value: json!(12),
        };
        assert_eq!(
            sql(&[filter]),
            r#"SELECT "x" FROM "t" WHERE "t"."id_col" = '12'"#
        );
        // Unknown field: its name is used as the column.
        let filter = FieldFilter {
            field: "other",
            op: FilterOp::Gt,
            value: json!("a"),
        };
        assert_eq!(
            sql(&[filter]),
            r#"SELECT "x" FROM "t" WHERE "t"."other" > 'a'"#
        );
    }

    #[test]
    fn operators_and_suffixes() {
        for op in ALL_OPS {
            assert_eq!(FilterOp::from_suffix(op.suffix()), Some(op));
            assert!(FilterOps::TEXT_ALL.allows(op));
            assert!(!FilterOps::NONE.allows(op));
        }
        assert!(FilterOps::EQ_COMPARE.allows(FilterOp::Le));
        assert!(!FilterOps::EQ_COMPARE.allows(FilterOp::Contains));
        assert!(FilterOps::EQ_CONTAINS.allows(FilterOp::Contains));
        assert!(!FilterOps::EQ_CONTAINS.allows(FilterOp::StartsWith));
    }
}
