//! Ordering of list pages: the `order_by` parameter, the ORDER BY clause and the keyset
//! condition that continues a page from a cursor.
//!
//! NULL placement follows the PostgreSQL defaults (ASC NULLS LAST, DESC NULLS FIRST), i.e.
//! NULL sorts as the greatest value in both directions. It is written out explicitly so the
//! keyset conditions below, which encode the same rule, cannot drift from the ORDER BY.

use sea_query::{Cond, Condition, Expr, ExprTrait as _, NullOrdering, Order, SelectStatement};
use serde_json::Value;

use crate::list::{Cursor, FieldKind, FieldSpec, FilterOps, ListSpec, OrderField};
use crate::list_filters::{bind, column_expr, field_spec, sql_value};

/// The field behind an order key. A default-order name the spec does not declare falls back
/// to a nullable text column of the same name, so the keyset stays NULL-safe.
pub(crate) fn order_field_spec(spec: &ListSpec, name: &'static str) -> FieldSpec {
    field_spec(spec, name).copied().unwrap_or(FieldSpec {
        name,
        column: name,
        kind: FieldKind::Text,
        nullable: true,
        filters: FilterOps::NONE,
        sortable: false,
    })
}

/// `spec.default_order`, ascending.
pub(crate) fn default_order(spec: &ListSpec) -> Vec<OrderField> {
    spec.default_order
        .iter()
        .map(|&field| OrderField {
            field,
            descending: false,
        })
        .collect()
}

/// Parses the `order_by` values. Every value that is not an optional `-`/`+` followed by a
/// sortable field is reported, as decoded and in request order.
pub(crate) fn parse_order(
    spec: &ListSpec,
    values: &[String],
) -> Result<Vec<OrderField>, Vec<String>> {
    let mut order = Vec::with_capacity(values.len());
    let mut rejected = Vec::new();
    for value in values {
        let (descending, name) = if let Some(name) = value.strip_prefix('-') {
            (true, name)
        } else if let Some(name) = value.strip_prefix('+') {
            (false, name)
        } else {
            (false, value.as_str())
        };
        match field_spec(spec, name).filter(|f| f.sortable) {
            Some(field) => order.push(OrderField {
                field: field.name,
                descending,
            }),
            None => rejected.push(value.clone()),
        }
    }
    if rejected.is_empty() {
        Ok(order)
    } else {
        Err(rejected)
    }
}

/// `page_info.order_by`: null for the default order, else `["name", "-created_at"]`.
pub(crate) fn order_by_json(order: &[OrderField], explicit: bool) -> Value {
    if !explicit {
        return Value::Null;
    }
    order
        .iter()
        .map(|o| {
            Value::String(if o.descending {
                format!("-{}", o.field)
            } else {
                o.field.to_owned()
            })
        })
        .collect()
}

/// Whether a decoded cursor fits the order: one value per field, each of the field's kind
/// (null only on nullable fields).
pub(crate) fn cursor_fits(spec: &ListSpec, order: &[OrderField], cursor: &Cursor) -> bool {
    cursor.0.len() == order.len()
        && order.iter().zip(&cursor.0).all(|(o, value)| {
            let field = order_field_spec(spec, o.field);
            if value.is_null() {
                field.nullable
            } else {
                sql_value(field.kind, value).is_some()
            }
        })
}

/// Appends the ORDER BY of `order`; `reverse` flips every direction and NULL placement (for
/// `last`/`before` pages, which are read backwards and restored by `finish_page`).
pub(crate) fn apply_order(
    spec: &ListSpec,
    order: &[OrderField],
    reverse: bool,
    query: &mut SelectStatement,
) {
    for o in order {
        let column = order_field_spec(spec, o.field).column;
        let (direction, nulls) = if o.descending != reverse {
            (Order::Desc, NullOrdering::First)
        } else {
            (Order::Asc, NullOrdering::Last)
        };
        query.order_by_with_nulls((spec.table, column), direction, nulls);
    }
}

/// Which side of the cursor a page lies on, in the natural (requested) order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Side {
    /// Rows strictly after the cursor (`after`).
    After,
    /// Rows strictly before the cursor (`before`).
    Before,
}

/// `col` strictly greater than `value` when NULL is the greatest value; `None` means FALSE.
fn greater(col: Expr, field: &FieldSpec, value: &Value) -> Option<Expr> {
    if value.is_null() {
        return None;
    }
    let gt = col.clone().gt(bind(field.kind, value));
    Some(if field.nullable {
        gt.or(col.is_null())
    } else {
        gt
    })
}

/// `col` strictly less than `value` when NULL is the greatest value (never FALSE).
fn less(col: Expr, field: &FieldSpec, value: &Value) -> Expr {
    if value.is_null() {
        col.is_not_null()
    } else {
        col.lt(bind(field.kind, value))
    }
}

/// `col` equal to `value`, NULL equal to NULL.
fn equal(col: Expr, field: &FieldSpec, value: &Value) -> Expr {
    if value.is_null() {
        col.is_null()
    } else {
        col.eq(bind(field.kind, value))
    }
}

/// The keyset condition selecting rows strictly on `side` of `cursor` in `order`:
/// `(a ≻ va) OR (a = va AND b ≻ vb) OR …`, where `≻` is "beyond" in each field's direction
/// with NULL as the greatest value. The expanded form (rather than a row comparison) is what
/// makes mixed directions and NULLs correct. Terms that are FALSE are left out; an empty
/// disjunction renders as FALSE.
pub(crate) fn keyset_condition(
    spec: &ListSpec,
    order: &[OrderField],
    cursor: &Cursor,
    side: Side,
) -> Condition {
    let mut any = Cond::any();
    let mut equal_prefix: Vec<Expr> = Vec::with_capacity(order.len());
    for (o, value) in order.iter().zip(&cursor.0) {
        let field = order_field_spec(spec, o.field);
        let col = column_expr(spec, o.field);
        // "After" in an ascending field, or "before" in a descending one, means greater.
        let beyond = if (side == Side::After) != o.descending {
            greater(col.clone(), &field, value)
        } else {
            Some(less(col.clone(), &field, value))
        };
        if let Some(beyond) = beyond {
            let term = equal_prefix
                .iter()
                .cloned()
                .fold(Cond::all(), Condition::add);
            any = any.add(term.add(beyond));
        }
        equal_prefix.push(equal(col, &field, value));
    }
    any
}
