//! Pass 3: SQL. [`compile`] turns a [`TypedFilter`] into a sea-query condition over a table
//! with a `metadata jsonb` column (`fragments`, `documents`), every value bound.
//!
//! The semantics are SQL's three-valued logic, which is what rules 2–4 describe:
//!
//! - A field is read as the expression a metadata index is built on
//!   (`src/store/indexes.rs`): `(metadata ->> 'f')` for strings; for the other types
//!   `JSON_VALUE(metadata, '$."f"' RETURNING numeric NULL ON ERROR)` (integers; `double
//!   precision` for numbers, `boolean` for booleans), which reads NULL where the stored value
//!   does not convert, so the expression never fails whatever a row holds: an index on one
//!   pipeline's field covers every row of the table, other pipelines' included. Integers
//!   compare as `numeric`, exactly, as 64-bit integers do. A missing field and JSON null both
//!   read as SQL NULL, so every comparison with them is unknown, never true: `$neq` and
//!   `$not-in` included, and `NOT unknown` is unknown, so a `$not` around a single comparison
//!   is not satisfied either. `NOT (unknown AND false)` is `NOT false`: a `$not` around an
//!   `$and` whose other condition fails is satisfied. The WHERE clause keeps only rows whose
//!   condition is true.
//! - Rule 6 (a stored value that does not convert to the declared type makes every filter on
//!   the field fail) is not a property of the expression: only integer fields can hold such
//!   values once documents are validated (`5.0`, integers beyond 64 bits; see
//!   [`super::unconvertible_integer_fields`]), and the service refuses filters on fields where
//!   it recorded one. An integer filter value beyond 64 bits is bound as text cast to `bigint`,
//!   which the database refuses when the statement runs.
//! - `$and` / a field map is AND (empty: TRUE); `$or` is OR (empty: FALSE); inside `$or` an
//!   empty object `{}` first makes the `$or` TRUE and anywhere later contributes nothing
//!   (rule 4).
//! - `$in` / `$not-in` compare with `= ANY(list)` / `<> ALL(list)`; on a boolean field an empty
//!   list is the constant FALSE / TRUE (rule 3), for every document, missing field included.
//! - `$like` / `$ilike` are `LIKE` / `ILIKE` with the pattern bound as given: `%`, `_` and
//!   Postgres' default escape character, backslash. A final unpaired backslash, which
//!   Postgres would refuse, is a literal backslash (bound as `\\`).
//!
//! Lists are bound as one parameter holding a Postgres array literal, cast to the element
//! type (`= ANY(CAST($1 AS bigint[]))`): sea-query's native array values need the
//! `postgres-array` feature of both sea-query and sea-query-sqlx, which the workspace does not
//! enable. The literal quotes every string, so no element can be read as NULL or split.
//!
//! Constants are folded (`x AND TRUE` → `x`, `x OR TRUE` → `TRUE`, `NOT NOT x` → `x`, …);
//! each rewrite holds in three-valued logic.

use std::fmt::Write as _;

use sea_query::extension::postgres::{PgExpr as _, PgFunc};
use sea_query::{Alias, Condition, Expr, ExprTrait as _, Value};

use crate::like::close_trailing_escape;

use super::ast::{CompareOp, LikeOp, MembershipOp, is_field_name};
use super::teq::TeqExpansions;
use super::validate::{
    DeclaredType, FieldType, TypedCondition, TypedFilter, TypedNode, TypedOperation, TypedValue,
};

/// The condition selecting the rows of `table` (a table name or alias whose `metadata`
/// column holds the metadata) that `filter` matches.
///
/// `teq` holds the taxonomy expansion of the filter's `$teq` starting points; one missing
/// there matches its starting value only. Call [`super::validate_teq`] with the same
/// expansion first: this function does not check it.
pub fn compile(filter: &TypedFilter, table: &str, teq: &TeqExpansions) -> Condition {
    let compiler = Compiler { table, teq };
    Condition::all().add(compiler.node(&filter.root).into_expr())
}

struct Compiler<'a> {
    table: &'a str,
    teq: &'a TeqExpansions,
}

impl Compiler<'_> {
    fn node(&self, node: &TypedNode) -> Logic {
        match node {
            TypedNode::Fields(conditions) => {
                Logic::and(conditions.iter().map(|c| self.condition(c)).collect())
            }
            TypedNode::And(nodes) => Logic::and(nodes.iter().map(|n| self.node(n)).collect()),
            TypedNode::Or(nodes) => {
                let mut parts = Vec::with_capacity(nodes.len());
                for (position, node) in nodes.iter().enumerate() {
                    if matches!(node, TypedNode::Fields(conditions) if conditions.is_empty()) {
                        // Rule 4: `{}` first matches everything; later it matches nothing.
                        if position == 0 {
                            return Logic::Const(true);
                        }
                        continue;
                    }
                    parts.push(self.node(node));
                }
                Logic::or(parts)
            }
            TypedNode::Not(node) => Logic::not(self.node(node)),
        }
    }

    fn condition(&self, condition: &TypedCondition) -> Logic {
        let field = || self.field(&condition.field, condition.field_type);
        match &condition.operation {
            TypedOperation::Compare { op, value } => {
                let value = bound(value);
                Logic::Leaf(match op {
                    CompareOp::Eq => field().eq(value),
                    CompareOp::Neq => field().ne(value),
                    CompareOp::Gt => field().gt(value),
                    CompareOp::Ge => field().gte(value),
                    CompareOp::Lt => field().lt(value),
                    CompareOp::Le => field().lte(value),
                })
            }
            TypedOperation::Like { op, pattern } => {
                let pattern = close_trailing_escape(pattern);
                Logic::Leaf(match op {
                    LikeOp::Like => field().like(&*pattern),
                    LikeOp::ILike => field().ilike(&*pattern),
                })
            }
            TypedOperation::Membership { op, values } => {
                if values.is_empty() {
                    // Only boolean fields get here (validation); rule 3.
                    return Logic::Const(*op == MembershipOp::NotIn);
                }
                let list = array_param(values, condition.field_type);
                Logic::Leaf(match op {
                    MembershipOp::In => field().eq(PgFunc::any(list)),
                    MembershipOp::NotIn => field().ne(PgFunc::all(list)),
                })
            }
            TypedOperation::Teq(start) => Logic::or(
                self.teq
                    .reached(start)
                    .iter()
                    .map(|(reached_field, values)| {
                        Logic::Leaf(self.field(reached_field, FieldType::String).eq(PgFunc::any(
                            text_array_param(values.iter().map(String::as_str)),
                        )))
                    })
                    .collect(),
            ),
        }
    }

    /// The typed expression of a metadata field: exactly the expression metadata indexes are
    /// built on, qualified with the table.
    fn field(&self, field: &str, field_type: FieldType) -> Expr {
        // The field name is an identifier (grammar) declared by the schema: it becomes a SQL
        // string constant (or a quoted key of a path literal), as in the index expression, and
        // cannot leave its quotes. A bound parameter there would hide the expression from the
        // planner's index matching. The table is one of the callers' constant names.
        debug_assert!(is_field_name(field), "field names are identifiers");
        let column = format!("\"{}\".\"metadata\"", self.table);
        Expr::cust(field_sql(&column, field, field_type))
    }
}

/// The SQL a metadata field of a declared type is read with, over the JSON column `column`
/// (`metadata`, or a qualified `"t"."metadata"`): strings as `column ->> 'f'`; integers,
/// numbers and booleans as `JSON_VALUE(column, '$."f"' RETURNING numeric NULL ON ERROR)`
/// (`double precision`, `boolean`), which reads NULL where the stored value does not convert,
/// so the expression never fails. Filters compile to it and metadata indexes are built on it
/// (`src/store/indexes.rs`), so the planner matches one to the other. `field` must be an
/// identifier: it is written inside the expression's quotes. `None` for `object` fields.
pub fn typed_field_sql(column: &str, field: &str, declared: DeclaredType) -> Option<String> {
    FieldType::of(declared).map(|field_type| field_sql(column, field, field_type))
}

fn field_sql(column: &str, field: &str, field_type: FieldType) -> String {
    debug_assert!(is_field_name(field), "field names are identifiers");
    let sql_type = match field_type {
        FieldType::String => return format!("{column} ->> '{field}'"),
        FieldType::Integer => "numeric",
        FieldType::Number => "double precision",
        FieldType::Boolean => "boolean",
    };
    format!("JSON_VALUE({column}, '$.\"{field}\"' RETURNING {sql_type} NULL ON ERROR)")
}

/// A value as a bound parameter of its field's type.
fn bound(value: &TypedValue) -> Expr {
    match value {
        TypedValue::String(s) => Expr::val(s.as_str()),
        TypedValue::Integer(i) => Expr::val(*i),
        // Bound as text: the cast refuses it when the statement runs.
        TypedValue::OutOfRangeInteger(u) => Expr::val(u.to_string()).cast_as(Alias::new("bigint")),
        TypedValue::Number(n) => Expr::val(*n),
        TypedValue::Boolean(b) => Expr::val(*b),
    }
}

/// A non-empty list of values of one field type, as one bound array literal cast to the
/// field's array type.
fn array_param(values: &[TypedValue], field_type: FieldType) -> Expr {
    let element_type = match field_type {
        FieldType::String => "text[]",
        FieldType::Integer => "bigint[]",
        FieldType::Number => "double precision[]",
        FieldType::Boolean => "boolean[]",
    };
    let mut literal = String::from("{");
    for (position, value) in values.iter().enumerate() {
        if position > 0 {
            literal.push(',');
        }
        // Writing to a String cannot fail.
        let _ = match value {
            TypedValue::String(s) => {
                push_quoted(&mut literal, s);
                Ok(())
            }
            TypedValue::Integer(i) => write!(literal, "{i}"),
            TypedValue::OutOfRangeInteger(u) => write!(literal, "{u}"),
            // Shortest representation that reads back as the same double.
            TypedValue::Number(n) => write!(literal, "{n:e}"),
            TypedValue::Boolean(b) => write!(literal, "{b}"),
        };
    }
    literal.push('}');
    Expr::val(literal).cast_as(Alias::new(element_type))
}

/// Strings as one bound `text[]` parameter (`CAST($1 AS text[])`).
pub(crate) fn text_array_param<'a>(values: impl IntoIterator<Item = &'a str>) -> Expr {
    let mut literal = String::from("{");
    for (position, value) in values.into_iter().enumerate() {
        if position > 0 {
            literal.push(',');
        }
        push_quoted(&mut literal, value);
    }
    literal.push('}');
    Expr::val(literal).cast_as(Alias::new("text[]"))
}

/// Appends `value` as a double-quoted element of a Postgres array literal: inside quotes
/// only `"` and `\` need a backslash, and a quoted `NULL` is the string.
fn push_quoted(literal: &mut String, value: &str) {
    literal.push('"');
    for c in value.chars() {
        if c == '"' || c == '\\' {
            literal.push('\\');
        }
        literal.push(c);
    }
    literal.push('"');
}

/// A boolean expression under construction, with constants kept apart so they fold.
#[derive(Debug)]
enum Logic {
    Const(bool),
    Leaf(Expr),
    And(Vec<Logic>),
    Or(Vec<Logic>),
    Not(Box<Logic>),
}

impl Logic {
    /// AND of `parts`: TRUE when empty; FALSE absorbs (`unknown AND FALSE` is FALSE).
    fn and(parts: Vec<Logic>) -> Logic {
        let mut kept = Vec::with_capacity(parts.len());
        for part in parts {
            match part {
                Logic::Const(true) => {}
                Logic::Const(false) => return Logic::Const(false),
                Logic::And(inner) => kept.extend(inner),
                other => kept.push(other),
            }
        }
        match kept.len() {
            0 => Logic::Const(true),
            1 => kept.pop().unwrap_or(Logic::Const(true)),
            _ => Logic::And(kept),
        }
    }

    /// OR of `parts`: FALSE when empty; TRUE absorbs (`unknown OR TRUE` is TRUE).
    fn or(parts: Vec<Logic>) -> Logic {
        let mut kept = Vec::with_capacity(parts.len());
        for part in parts {
            match part {
                Logic::Const(false) => {}
                Logic::Const(true) => return Logic::Const(true),
                Logic::Or(inner) => kept.extend(inner),
                other => kept.push(other),
            }
        }
        match kept.len() {
            0 => Logic::Const(false),
            1 => kept.pop().unwrap_or(Logic::Const(false)),
            _ => Logic::Or(kept),
        }
    }

    fn not(part: Logic) -> Logic {
        match part {
            Logic::Const(value) => Logic::Const(!value),
            Logic::Not(inner) => *inner,
            other => Logic::Not(Box::new(other)),
        }
    }

    fn into_expr(self) -> Expr {
        match self {
            Logic::Const(value) => Expr::Constant(Value::from(value)),
            Logic::Leaf(expr) => expr,
            Logic::And(parts) => Self::fold(parts, |a, b| a.and(b)),
            Logic::Or(parts) => Self::fold(parts, |a, b| a.or(b)),
            Logic::Not(part) => part.into_expr().not(),
        }
    }

    fn fold(parts: Vec<Logic>, join: impl Fn(Expr, Expr) -> Expr) -> Expr {
        parts
            .into_iter()
            .map(Logic::into_expr)
            .reduce(join)
            .unwrap_or(Expr::Constant(Value::from(true)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leaf(name: &'static str) -> Logic {
        Logic::Leaf(Expr::col(Alias::new(name)))
    }

    fn is_const(logic: &Logic, expected: bool) -> bool {
        matches!(logic, Logic::Const(value) if *value == expected)
    }

    #[test]
    fn empty_and_is_true_and_empty_or_is_false() {
        assert!(is_const(&Logic::and(vec![]), true));
        assert!(is_const(&Logic::or(vec![]), false));
    }

    #[test]
    fn constants_fold() {
        assert!(is_const(
            &Logic::and(vec![leaf("a"), Logic::Const(false)]),
            false
        ));
        assert!(is_const(
            &Logic::or(vec![leaf("a"), Logic::Const(true)]),
            true
        ));
        assert!(matches!(
            Logic::and(vec![leaf("a"), Logic::Const(true)]),
            Logic::Leaf(_)
        ));
        assert!(matches!(
            Logic::or(vec![Logic::Const(false), leaf("a")]),
            Logic::Leaf(_)
        ));
        assert!(is_const(&Logic::not(Logic::Const(true)), false));
        assert!(matches!(Logic::not(Logic::not(leaf("a"))), Logic::Leaf(_)));
    }

    #[test]
    fn nested_and_flattens() {
        let logic = Logic::and(vec![Logic::and(vec![leaf("a"), leaf("b")]), leaf("c")]);
        assert!(matches!(logic, Logic::And(parts) if parts.len() == 3));
    }

    #[test]
    fn array_literals_quote_strings() {
        let mut literal = String::new();
        push_quoted(&mut literal, r#"a"b\c,{NULL}"#);
        assert_eq!(literal, r#""a\"b\\c,{NULL}""#);
    }

    #[test]
    fn number_literals_read_back_exactly() {
        for n in [0.1, -2.5, 1e300, 5e-324, f64::MAX, 123456789.125] {
            let text = format!("{n:e}");
            assert_eq!(text.parse::<f64>().ok(), Some(n), "{text}");
        }
    }
}
