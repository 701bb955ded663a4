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
//! - A string value holding U+0000, which no stored text holds (nor can a bound one), is
//!   never bound; the comparison gives what it gives with a value no document holds: `$eq`,
//!   `$like`, `$ilike` with it are false and `$neq` true where the field has a value
//!   (`CASE WHEN field IS NOT NULL THEN FALSE|TRUE END`, unknown where it has none), such
//!   values leave `$in` / `$not-in` lists and `$teq` expansions (a list left with none is
//!   false / true the same way), and an ordering compares with the part before the first
//!   U+0000 (`$gt`/`$ge` as `>`, `$lt`/`$le` as `<=`; exact where text sorts by code point, as
//!   under the `C` collations).
//!
//! Lists are bound as one parameter of the field's array type (`= ANY($1)`, `<> ALL($1)`
//! with a `text[]`, `bigint[]`, `double precision[]` or `boolean[]` value), which the planner
//! sees as a constant array rather than text to parse for every row; a list of more than
//! 1,000 values as `IN` / `NOT IN (SELECT unnest($1))`, which the database hashes once
//! without estimating each value (the same three-valued results: unknown where the field is
//! missing or null, the lists holding no null). A list
//! holding an integer beyond 64 bits is bound as a Postgres array literal cast to `bigint[]`
//! instead, so the database refuses it when the statement runs, as it refuses such a single
//! value.
//!
//! Constants are folded (`x AND TRUE` → `x`, `x OR TRUE` → `TRUE`, `NOT NOT x` → `x`, …),
//! nested `AND`s and `OR`s are flattened; each rewrite holds in three-valued logic. So a chain
//! of `$not`, `$and` or `$or` of any depth compiles to a shallow expression. Under an OR
//! the `$eq`s and `$in`s of one field become one `= ANY(list)`, under an AND its `$neq`s and
//! `$not-in`s one `<> ALL(list)` (both forms are unknown exactly where the field is missing
//! or null), so a filter of tens of thousands of such comparisons binds one array. A part of
//! the filter that combines 64 or more comparisons of one integer field, and nothing else,
//! becomes one test of the set of integers it admits (`x <@ CAST($1 AS int8multirange)`, the
//! field read as `bigint`), which the database evaluates once per row by a binary search
//! rather than once per comparison ([`Tree::range_sets`]).
//!
//! Filters nest to any depth, so nothing here recurses over the filter: the typed filter and
//! the boolean expression are flat lists of nodes. The result is a sea-query expression when
//! it is small enough for sea-query's recursive rendering (every filter of ordinary size);
//! larger ones (tens of thousands of conditions, deep alternations of `AND` and `OR`) are
//! rendered here, without recursion, into one SQL expression with its bound values
//! ([`compile_flat`] gives that form for any filter).

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::fmt::Write as _;

use sea_query::extension::postgres::{PgExpr as _, PgFunc};
use sea_query::{Alias, ArrayType, Condition, Expr, ExprTrait as _, Value};

use crate::like::close_trailing_escape;

use super::ast::{CompareOp, LikeOp, MembershipOp, is_field_name};
use super::ranges::RangeSet;
use super::teq::TeqExpansions;
use super::validate::{
    DeclaredType, FieldType, TypedCondition, TypedFilter, TypedNode, TypedOperation, TypedValue,
};

/// Expressions up to this rendering depth (see [`Tree::sea_query_depth`]) are built as
/// sea-query expressions; deeper ones are rendered by [`Tree::flat_expr`]. sea-query renders
/// (and drops) expressions recursively, `a AND b AND c` as a chain one level per operand.
const SEA_QUERY_DEPTH: usize = 256;

/// The fewest comparisons of one integer field that [`Tree::range_sets`] turns into one range
/// set test: fewer keep the comparisons a metadata index serves.
const RANGE_SET_MIN_LEAVES: usize = 64;

/// A `$in` / `$not-in` list longer than this is tested as `field IN (SELECT unnest(list))` /
/// `NOT IN`: the database hashes the list once, by a semi-join where the test is a condition of
/// the whole filter, else by a hashed subplan. As `= ANY(list)`, the planner estimates the
/// test element by element (about 4 µs each, twice per search: 150,000 integers took 1.2 s
/// before the statement ran).
const LONG_LIST: usize = 1_000;

/// Most interval steps spent computing one range set (a few milliseconds).
const RANGE_SET_MAX_WORK: usize = 4_000_000;

/// The condition selecting the rows of `table` (a table name or alias whose `metadata`
/// column holds the metadata) that `filter` matches.
///
/// `teq` holds the taxonomy expansion of the filter's `$teq` starting points; one missing
/// there matches its starting value only. Call [`super::validate_teq`] with the same
/// expansion first: this function does not check it.
pub fn compile(filter: &TypedFilter, table: &str, teq: &TeqExpansions) -> Condition {
    let tree = Compiler { table, teq }.tree(filter);
    let expr = if tree.sea_query_depth() <= SEA_QUERY_DEPTH {
        tree.sea_query_expr(tree.root)
    } else {
        tree.flat_expr()
    };
    Condition::all().add(expr)
}

/// [`compile`] rendered as one SQL expression with its bound values, whatever the filter's
/// size: the form [`compile`] gives the largest filters, for tests that compare both.
pub fn compile_flat(filter: &TypedFilter, table: &str, teq: &TeqExpansions) -> Condition {
    Condition::all().add(Compiler { table, teq }.tree(filter).flat_expr())
}

struct Compiler<'a> {
    table: &'a str,
    teq: &'a TeqExpansions,
}

impl Compiler<'_> {
    /// The folded expression of a typed filter. Children come after their parents in
    /// `filter.nodes`, so going through the list backwards meets every child first.
    fn tree(&self, filter: &TypedFilter) -> Tree {
        let mut tree = Tree::default();
        let mut compiled = vec![0; filter.nodes.len()];
        for (index, node) in filter.nodes.iter().enumerate().rev() {
            compiled[index] = match node {
                TypedNode::Fields(conditions) => {
                    let parts = conditions
                        .iter()
                        .map(|condition| self.condition(&mut tree, condition))
                        .collect();
                    tree.and(parts)
                }
                TypedNode::And(children) => {
                    tree.and(children.iter().map(|child| compiled[*child]).collect())
                }
                TypedNode::Or(children) => {
                    let mut parts = Vec::with_capacity(children.len());
                    let mut always = false;
                    for (position, child) in children.iter().enumerate() {
                        if filter.nodes[*child].is_empty_object() {
                            // Rule 4: `{}` first matches everything; later it matches nothing.
                            if position == 0 {
                                always = true;
                                break;
                            }
                            continue;
                        }
                        parts.push(compiled[*child]);
                    }
                    if always {
                        tree.push(Logic::Const(true))
                    } else {
                        tree.or(parts)
                    }
                }
                TypedNode::Not(child) => tree.not(compiled[*child]),
            };
        }
        tree.root = compiled
            .first()
            .copied()
            .unwrap_or_else(|| tree.push(Logic::Const(true)));
        tree.range_sets();
        tree
    }

    fn condition(&self, tree: &mut Tree, condition: &TypedCondition) -> usize {
        let field = || self.field(&condition.field, condition.field_type);
        let test = match &condition.operation {
            TypedOperation::Compare {
                op,
                value: TypedValue::String(value),
            } if holds_nul(value) => nul_comparison(*op, value),
            TypedOperation::Compare { op, value } => Test::Compare(*op, bound(value)),
            // A pattern holding U+0000 matches only text holding it.
            TypedOperation::Like { pattern, .. } if holds_nul(pattern) => Test::Known(false),
            TypedOperation::Like { op, pattern } => {
                Test::Like(*op, close_trailing_escape(pattern).into_owned())
            }
            TypedOperation::Membership { op, values } => {
                if values.is_empty() {
                    // Only boolean fields get here (validation); rule 3.
                    return tree.push(Logic::Const(*op == MembershipOp::NotIn));
                }
                let storable: Vec<TypedValue> = values
                    .iter()
                    .filter(|value| !matches!(value, TypedValue::String(s) if holds_nul(s)))
                    .cloned()
                    .collect();
                match (storable.is_empty(), op) {
                    (false, _) => {
                        Test::Membership(*op, array_param(&storable, condition.field_type))
                    }
                    (true, op) => Test::Known(*op == MembershipOp::NotIn),
                }
            }
            TypedOperation::Teq(start) => {
                let parts = self
                    .teq
                    .reached(start)
                    .iter()
                    .map(|(reached_field, values)| {
                        let values: Vec<&str> = values
                            .iter()
                            .map(String::as_str)
                            .filter(|value| !holds_nul(value))
                            .collect();
                        let test = if values.is_empty() {
                            Test::Known(false)
                        } else {
                            Test::Membership(MembershipOp::In, Bound::Value(string_array(values)))
                        };
                        tree.push(Logic::Leaf(Leaf {
                            field: self.field(reached_field, FieldType::String),
                            range_field: None,
                            test,
                        }))
                    })
                    .collect();
                return tree.or(parts);
            }
        };
        let range_field = (condition.field_type == FieldType::Integer).then(|| {
            let column = format!("\"{}\".\"metadata\"", self.table);
            integer_range_field_sql(&column, &condition.field)
        });
        tree.push(Logic::Leaf(Leaf {
            field: field(),
            range_field,
            test,
        }))
    }

    /// The typed expression of a metadata field: exactly the expression metadata indexes are
    /// built on, qualified with the table.
    fn field(&self, field: &str, field_type: FieldType) -> String {
        // The field name is an identifier (grammar) declared by the schema: it becomes a SQL
        // string constant (or a quoted key of a path literal), as in the index expression, and
        // cannot leave its quotes. A bound parameter there would hide the expression from the
        // planner's index matching. The table is one of the callers' constant names.
        debug_assert!(is_field_name(field), "field names are identifiers");
        let column = format!("\"{}\".\"metadata\"", self.table);
        field_sql(&column, field, field_type)
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

/// An integer field read as `bigint` for a range set test: NULL where the stored value is
/// missing, null or not a 64-bit integer. Such values of the pipeline's own field (`5.0`,
/// beyond 64 bits) are recorded at submission and make filters on the field fail (rule 6)
/// whatever the expression; a metadata index on the `numeric` read does not serve it.
fn integer_range_field_sql(column: &str, field: &str) -> String {
    debug_assert!(is_field_name(field), "field names are identifiers");
    format!("JSON_VALUE({column}, '$.\"{field}\"' RETURNING bigint NULL ON ERROR)")
}

/// A value bound as a parameter: as it is, or as text the database casts (and refuses) when
/// the statement runs.
#[derive(Debug)]
enum Bound {
    Value(Value),
    /// `CAST($n AS <type>)`.
    Cast(String, &'static str),
}

impl Bound {
    /// The list and the SQL of a membership test of it, when it is a list of more than
    /// [`LONG_LIST`] values: `IN` or `NOT IN (SELECT unnest(<list>))`.
    fn long_list(&self, op: MembershipOp) -> Option<(&Value, &'static str)> {
        match self {
            Bound::Value(list @ Value::Array(_, Some(values))) if values.len() > LONG_LIST => {
                let keyword = match op {
                    MembershipOp::In => "IN",
                    MembershipOp::NotIn => "NOT IN",
                };
                Some((list, keyword))
            }
            _ => None,
        }
    }

    fn expr(&self) -> Expr {
        match self {
            Bound::Value(value) => Expr::val(value.clone()),
            Bound::Cast(text, sql_type) => Expr::val(text.as_str()).cast_as(Alias::new(*sql_type)),
        }
    }
}

/// Whether `text` holds U+0000, which Postgres text cannot.
fn holds_nul(text: &str) -> bool {
    str::contains(text, '\0')
}

/// The test of a string comparison with a value holding U+0000, which no stored text holds:
/// what the comparison gives with a value no field holds (`$eq` false, `$neq` true, each
/// where the field has a value); an ordering compares with the part before the first U+0000,
/// the smallest character (exact where text sorts by code point, as under the `C`
/// collations): a text without U+0000 is above the value exactly when it is above that part.
fn nul_comparison(op: CompareOp, value: &str) -> Test {
    let before = value.split('\0').next().unwrap_or_default();
    let against = |op| Test::Compare(op, Bound::Value(Value::from(before)));
    match op {
        CompareOp::Eq => Test::Known(false),
        CompareOp::Neq => Test::Known(true),
        CompareOp::Gt | CompareOp::Ge => against(CompareOp::Gt),
        CompareOp::Lt | CompareOp::Le => against(CompareOp::Le),
    }
}

/// The SQL of [`Test::Known`].
fn known_sql(field: &str, result: bool) -> String {
    let result = if result { "TRUE" } else { "FALSE" };
    format!("CASE WHEN ({field}) IS NOT NULL THEN {result} END")
}

/// A value as a bound parameter of its field's type.
fn bound(value: &TypedValue) -> Bound {
    match value {
        TypedValue::String(s) => Bound::Value(Value::from(s.as_str())),
        TypedValue::Integer(i) => Bound::Value(Value::from(*i)),
        // Bound as text: the cast refuses it when the statement runs.
        TypedValue::OutOfRangeInteger(u) => Bound::Cast(u.to_string(), "bigint"),
        TypedValue::Number(n) => Bound::Value(Value::from(*n)),
        TypedValue::Boolean(b) => Bound::Value(Value::from(*b)),
    }
}

/// A non-empty list of values of one field type as one bound array of the field's type; a
/// list holding an integer beyond 64 bits as an array literal cast to `bigint[]`.
fn array_param(values: &[TypedValue], field_type: FieldType) -> Bound {
    let array = |array_type: ArrayType, elements: Vec<Value>| {
        Bound::Value(Value::Array(array_type, Some(Box::new(elements))))
    };
    let elements = values.iter().map(|value| match value {
        TypedValue::String(s) => Value::from(s.as_str()),
        TypedValue::Integer(i) => Value::from(*i),
        TypedValue::OutOfRangeInteger(u) => Value::from(u.to_string()),
        TypedValue::Number(n) => Value::from(*n),
        TypedValue::Boolean(b) => Value::from(*b),
    });
    match field_type {
        FieldType::String => array(ArrayType::String, elements.collect()),
        FieldType::Number => array(ArrayType::Double, elements.collect()),
        FieldType::Boolean => array(ArrayType::Bool, elements.collect()),
        FieldType::Integer => {
            if values
                .iter()
                .any(|value| matches!(value, TypedValue::OutOfRangeInteger(_)))
            {
                Bound::Cast(integer_literal(values), "bigint[]")
            } else {
                array(ArrayType::BigInt, elements.collect())
            }
        }
    }
}

/// Integers as a Postgres array literal (`{1,18446744073709551615}`).
fn integer_literal(values: &[TypedValue]) -> String {
    let mut literal = String::from("{");
    for (position, value) in values.iter().enumerate() {
        if position > 0 {
            literal.push(',');
        }
        // Writing to a String cannot fail.
        let _ = match value {
            TypedValue::Integer(i) => write!(literal, "{i}"),
            TypedValue::OutOfRangeInteger(u) => write!(literal, "{u}"),
            TypedValue::String(_) | TypedValue::Number(_) | TypedValue::Boolean(_) => Ok(()),
        };
    }
    literal.push('}');
    literal
}

/// Strings as one bound `text[]` value.
fn string_array<'a>(values: impl IntoIterator<Item = &'a str>) -> Value {
    Value::Array(
        ArrayType::String,
        Some(Box::new(values.into_iter().map(Value::from).collect())),
    )
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

/// One comparison of a field: the field's SQL expression and the test applied to it.
#[derive(Debug)]
struct Leaf {
    field: String,
    /// For an integer field, its SQL read as `bigint`, which a range set test uses.
    range_field: Option<String>,
    test: Test,
}

#[derive(Debug)]
enum Test {
    Compare(CompareOp, Bound),
    /// `CASE WHEN field IS NOT NULL THEN <result> END`: what a comparison with a value no stored
    /// text holds gives (`result` where the field has a value, unknown where it has none).
    Known(bool),
    Like(LikeOp, String),
    Membership(MembershipOp, Bound),
    /// `field <@ CAST('<literal>' AS int8multirange)`: the field (read as `bigint`) lies in a
    /// range set.
    InRanges(String),
}

impl Leaf {
    fn sea_query_expr(&self) -> Expr {
        let field = Expr::cust(self.field.clone());
        match &self.test {
            Test::Compare(op, value) => {
                let value = value.expr();
                match op {
                    CompareOp::Eq => field.eq(value),
                    CompareOp::Neq => field.ne(value),
                    CompareOp::Gt => field.gt(value),
                    CompareOp::Ge => field.gte(value),
                    CompareOp::Lt => field.lt(value),
                    CompareOp::Le => field.lte(value),
                }
            }
            Test::Known(result) => Expr::cust(known_sql(&self.field, *result)),
            Test::Like(LikeOp::Like, pattern) => field.like(pattern.as_str()),
            Test::Like(LikeOp::ILike, pattern) => field.ilike(pattern.as_str()),
            Test::Membership(op, list) if let Some((values, keyword)) = list.long_list(*op) => {
                Expr::cust_with_values(
                    format!("({}) {keyword} (SELECT unnest($1))", self.field),
                    [values.clone()],
                )
            }
            Test::Membership(MembershipOp::In, list) => field.eq(PgFunc::any(list.expr())),
            Test::Membership(MembershipOp::NotIn, list) => field.ne(PgFunc::all(list.expr())),
            Test::InRanges(literal) => Expr::cust_with_values(
                format!("({}) <@ CAST($1 AS int8multirange)", self.field),
                [Value::from(literal.as_str())],
            ),
        }
    }

    /// Writes the comparison as SQL, its value as the next numbered parameter.
    fn write_flat(&self, sql: &mut String, values: &mut Vec<Value>) {
        if let Test::Membership(op, list) = &self.test
            && let Some((list, keyword)) = list.long_list(*op)
        {
            values.push(list.clone());
            let _ = write!(
                sql,
                "({}) {keyword} (SELECT unnest(${}))",
                self.field,
                values.len()
            );
            return;
        }
        let (operator, value, suffix) = match &self.test {
            Test::Known(result) => {
                sql.push_str(&known_sql(&self.field, *result));
                return;
            }
            Test::Compare(op, value) => {
                let operator = match op {
                    CompareOp::Eq => "=",
                    CompareOp::Neq => "<>",
                    CompareOp::Gt => ">",
                    CompareOp::Ge => ">=",
                    CompareOp::Lt => "<",
                    CompareOp::Le => "<=",
                };
                (operator, value.clone_parts(), "")
            }
            Test::Like(op, pattern) => {
                let operator = match op {
                    LikeOp::Like => "LIKE",
                    LikeOp::ILike => "ILIKE",
                };
                (operator, (Value::from(pattern.as_str()), None), "")
            }
            Test::Membership(MembershipOp::In, list) => ("= ANY(", list.clone_parts(), ")"),
            Test::Membership(MembershipOp::NotIn, list) => ("<> ALL(", list.clone_parts(), ")"),
            Test::InRanges(literal) => (
                "<@",
                (Value::from(literal.as_str()), Some("int8multirange")),
                "",
            ),
        };
        values.push(value.0);
        let number = values.len();
        let _ = match value.1 {
            None => write!(sql, "({}) {operator} ${number}{suffix}", self.field),
            Some(sql_type) => write!(
                sql,
                "({}) {operator} CAST(${number} AS {sql_type}){suffix}",
                self.field
            ),
        };
    }
}

/// The element types of the lists [`Tree::merge_lists`] builds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum ElementType {
    Text,
    BigInt,
    Double,
    Bool,
}

impl ElementType {
    /// The type of a bound scalar, `None` for any other value.
    fn of(value: &Value) -> Option<Self> {
        match value {
            Value::String(Some(_)) => Some(Self::Text),
            Value::BigInt(Some(_)) => Some(Self::BigInt),
            Value::Double(Some(_)) => Some(Self::Double),
            Value::Bool(Some(_)) => Some(Self::Bool),
            _ => None,
        }
    }

    fn of_array(array_type: &ArrayType) -> Option<Self> {
        match array_type {
            ArrayType::String => Some(Self::Text),
            ArrayType::BigInt => Some(Self::BigInt),
            ArrayType::Double => Some(Self::Double),
            ArrayType::Bool => Some(Self::Bool),
            _ => None,
        }
    }

    fn array_type(self) -> ArrayType {
        match self {
            Self::Text => ArrayType::String,
            Self::BigInt => ArrayType::BigInt,
            Self::Double => ArrayType::Double,
            Self::Bool => ArrayType::Bool,
        }
    }
}

impl Leaf {
    /// Whether this compares an integer field with 64-bit values: [`Leaf::range_set`] holds.
    fn compares_integers(&self) -> bool {
        self.range_field.is_some()
            && match &self.test {
                Test::Compare(_, Bound::Value(value)) => matches!(value, Value::BigInt(Some(_))),
                Test::Membership(
                    _,
                    Bound::Value(Value::Array(ArrayType::BigInt, Some(values))),
                ) => values
                    .iter()
                    .all(|value| matches!(value, Value::BigInt(Some(_)))),
                _ => false,
            }
    }

    /// The values of an integer field this comparison admits, for a range set test; `None`
    /// for other fields, and for values bound as text to cast (beyond 64 bits).
    fn range_set(&self) -> Option<RangeSet> {
        self.range_field.as_ref()?;
        let integer = |value: &Value| match value {
            Value::BigInt(Some(value)) => Some(*value),
            _ => None,
        };
        match &self.test {
            Test::Compare(op, Bound::Value(value)) => {
                Some(RangeSet::comparison(*op, integer(value)?))
            }
            Test::Membership(op, Bound::Value(Value::Array(ArrayType::BigInt, Some(values)))) => {
                let list =
                    RangeSet::values(values.iter().map(integer).collect::<Option<Vec<_>>>()?);
                Some(match op {
                    MembershipOp::In => list,
                    MembershipOp::NotIn => list.complement(),
                })
            }
            _ => None,
        }
    }

    /// The values this comparison tests the field against as a list test `op` would: an
    /// `$eq` (for `In`) or `$neq` (for `NotIn`) of a bound value, or a bound list of `op`.
    /// `None` for every other comparison, and for values bound as text to cast.
    fn list_values(&self, op: MembershipOp) -> Option<(ElementType, Vec<Value>)> {
        let single = match op {
            MembershipOp::In => CompareOp::Eq,
            MembershipOp::NotIn => CompareOp::Neq,
        };
        match &self.test {
            Test::Compare(compare, Bound::Value(value)) if *compare == single => {
                Some((ElementType::of(value)?, vec![value.clone()]))
            }
            Test::Membership(list_op, Bound::Value(Value::Array(array_type, Some(values))))
                if *list_op == op =>
            {
                Some((ElementType::of_array(array_type)?, values.to_vec()))
            }
            _ => None,
        }
    }
}

impl Bound {
    /// The bound value and the type it is cast to, if any.
    fn clone_parts(&self) -> (Value, Option<&'static str>) {
        match self {
            Bound::Value(value) => (value.clone(), None),
            Bound::Cast(text, sql_type) => (Value::from(text.as_str()), Some(*sql_type)),
        }
    }
}

/// A node of a boolean expression under construction, with constants kept apart so they
/// fold; children are indices into [`Tree::nodes`].
#[derive(Debug)]
enum Logic {
    Const(bool),
    Leaf(Leaf),
    And(Vec<usize>),
    Or(Vec<usize>),
    Not(usize),
}

/// A boolean expression as a flat list of nodes: no walk over it recurses, and dropping it
/// does not either. Every node is the child of at most one other.
#[derive(Debug, Default)]
struct Tree {
    nodes: Vec<Logic>,
    root: usize,
}

impl Tree {
    fn push(&mut self, node: Logic) -> usize {
        self.nodes.push(node);
        self.nodes.len() - 1
    }

    /// AND of `parts`: TRUE when empty; FALSE absorbs (`unknown AND FALSE` is FALSE); the
    /// parts of an AND part are taken in.
    fn and(&mut self, parts: Vec<usize>) -> usize {
        let mut kept = Vec::with_capacity(parts.len());
        for part in parts {
            match &mut self.nodes[part] {
                Logic::Const(true) => {}
                Logic::Const(false) => return self.push(Logic::Const(false)),
                Logic::And(inner) => kept.append(inner),
                _ => kept.push(part),
            }
        }
        let kept = self.merge_lists(kept, MembershipOp::NotIn);
        match kept.as_slice() {
            [] => self.push(Logic::Const(true)),
            [only] => *only,
            _ => self.push(Logic::And(kept)),
        }
    }

    /// OR of `parts`: FALSE when empty; TRUE absorbs (`unknown OR TRUE` is TRUE); the parts
    /// of an OR part are taken in.
    fn or(&mut self, parts: Vec<usize>) -> usize {
        let mut kept = Vec::with_capacity(parts.len());
        for part in parts {
            match &mut self.nodes[part] {
                Logic::Const(false) => {}
                Logic::Const(true) => return self.push(Logic::Const(true)),
                Logic::Or(inner) => kept.append(inner),
                _ => kept.push(part),
            }
        }
        let kept = self.merge_lists(kept, MembershipOp::In);
        match kept.as_slice() {
            [] => self.push(Logic::Const(false)),
            [only] => *only,
            _ => self.push(Logic::Or(kept)),
        }
    }

    /// The parts of an AND (`op` `NotIn`) or an OR (`op` `In`) with the comparisons of each
    /// field that one list test expresses merged into it, at the place of the first: in an
    /// OR, the `$eq`s and `$in`s of a field are one `= ANY(all their values)`; in an AND, its
    /// `$neq`s and `$not-in`s one `<> ALL(…)`. Both forms are unknown exactly where the field
    /// is missing or null, and otherwise agree, so the rewrite holds in three-valued logic;
    /// a filter of tens of thousands of such comparisons becomes one bound array.
    fn merge_lists(&mut self, parts: Vec<usize>, op: MembershipOp) -> Vec<usize> {
        // (field, element type) → (its place in `merged`, the values of its parts, how many).
        let mut groups: HashMap<(String, ElementType), (usize, Vec<Value>, usize)> = HashMap::new();
        let mut merged: Vec<usize> = Vec::with_capacity(parts.len());
        for part in parts {
            let candidate = match &self.nodes[part] {
                Logic::Leaf(leaf) => leaf.list_values(op).map(|list| (leaf.field.clone(), list)),
                _ => None,
            };
            let Some((field, (element_type, values))) = candidate else {
                merged.push(part);
                continue;
            };
            match groups.entry((field, element_type)) {
                Entry::Occupied(mut group) => {
                    let (_, list, count) = group.get_mut();
                    list.extend(values);
                    *count += 1;
                }
                Entry::Vacant(slot) => {
                    slot.insert((merged.len(), values, 1));
                    merged.push(part);
                }
            }
        }
        for ((field, element_type), (position, values, count)) in groups {
            if count > 1 {
                let range_field = match &self.nodes[merged[position]] {
                    Logic::Leaf(first) => first.range_field.clone(),
                    _ => None,
                };
                let list = Value::Array(element_type.array_type(), Some(Box::new(values)));
                merged[position] = self.push(Logic::Leaf(Leaf {
                    field,
                    range_field,
                    test: Test::Membership(op, Bound::Value(list)),
                }));
            }
        }
        merged
    }

    /// Replaces each largest part of the tree that combines only comparisons of one integer
    /// field, with at least [`RANGE_SET_MIN_LEAVES`] of them, by one test of the range set it
    /// admits (`x <@ CAST($1 AS int8multirange)`). Where the field is missing or null, every
    /// comparison, and so every AND, OR and NOT of them (no constant is left among them once
    /// folded), is unknown, as is the test; elsewhere the part is plain set logic. The
    /// database then reads the field once per row and tests it by a binary search, instead of
    /// reading and comparing it once per comparison (60,000 range comparisons over 5,000
    /// fragments ran past a 30-second timeout). Smaller parts keep their comparisons, which a
    /// metadata index on the field can serve.
    fn range_sets(&mut self) {
        let info = self.single_integer_field_parts();
        let mut pending = vec![self.root];
        while let Some(index) = pending.pop() {
            if let Some((_, leaves)) = info[index]
                && leaves >= RANGE_SET_MIN_LEAVES
                && let Some(leaf) = self.range_set_leaf(index)
            {
                self.nodes[index] = Logic::Leaf(leaf);
                continue;
            }
            match &self.nodes[index] {
                Logic::And(parts) | Logic::Or(parts) => pending.extend(parts.iter().copied()),
                Logic::Not(part) => pending.push(*part),
                Logic::Const(_) | Logic::Leaf(_) => {}
            }
        }
    }

    /// For each node reachable from the root that combines only comparisons of one integer
    /// field: a leaf naming the field, and how many comparisons it combines.
    fn single_integer_field_parts(&self) -> Vec<Option<(usize, usize)>> {
        let mut info: Vec<Option<(usize, usize)>> = vec![None; self.nodes.len()];
        // Post-order without recursion: a node is summed up once its parts are.
        let mut pending = vec![(self.root, false)];
        while let Some((index, parts_done)) = pending.pop() {
            let parts: &[usize] = match &self.nodes[index] {
                Logic::And(parts) | Logic::Or(parts) => parts,
                Logic::Not(part) => std::slice::from_ref(part),
                Logic::Leaf(leaf) => {
                    info[index] = leaf.compares_integers().then_some((index, 1));
                    continue;
                }
                Logic::Const(_) => continue,
            };
            if !parts_done {
                pending.push((index, true));
                pending.extend(parts.iter().map(|part| (*part, false)));
                continue;
            }
            let mut summed: Option<(usize, usize)> = None;
            for part in parts {
                summed = match (info[*part], summed) {
                    (Some(part_info), None) => Some(part_info),
                    (Some((leaf, leaves)), Some((first, count)))
                        if self.range_field(leaf) == self.range_field(first) =>
                    {
                        Some((first, count + leaves))
                    }
                    _ => {
                        summed = None;
                        break;
                    }
                };
            }
            info[index] = summed;
        }
        info
    }

    /// The `bigint` read of a leaf's integer field.
    fn range_field(&self, leaf: usize) -> Option<&str> {
        match &self.nodes[leaf] {
            Logic::Leaf(leaf) => leaf.range_field.as_deref(),
            _ => None,
        }
    }

    /// The range set test of the part at `root` (comparisons of one integer field), or
    /// `None` when computing it would take more than [`RANGE_SET_MAX_WORK`] steps (a deep
    /// alternation of AND and OR whose set grows at every level).
    fn range_set_leaf(&self, root: usize) -> Option<Leaf> {
        let mut work: usize = 0;
        let mut sets: Vec<RangeSet> = Vec::new();
        let mut field = None;
        let mut pending = vec![(root, false)];
        while let Some((index, parts_done)) = pending.pop() {
            let set = match &self.nodes[index] {
                Logic::Leaf(leaf) => {
                    field = field.or(leaf.range_field.as_ref());
                    leaf.range_set()?
                }
                Logic::Const(_) => return None,
                Logic::Not(part) if !parts_done => {
                    pending.extend([(index, true), (*part, false)]);
                    continue;
                }
                Logic::And(parts) | Logic::Or(parts) if !parts_done => {
                    pending.push((index, true));
                    pending.extend(parts.iter().map(|part| (*part, false)));
                    continue;
                }
                Logic::Not(_) => sets.pop()?.complement(),
                Logic::And(parts) | Logic::Or(parts) => {
                    let operands = sets.split_off(sets.len().checked_sub(parts.len())?);
                    if matches!(self.nodes[index], Logic::And(_)) {
                        RangeSet::intersection(operands)
                    } else {
                        RangeSet::union(operands)
                    }
                }
            };
            work += set.len().max(1);
            if work > RANGE_SET_MAX_WORK {
                return None;
            }
            sets.push(set);
        }
        Some(Leaf {
            field: field?.clone(),
            range_field: None,
            test: Test::InRanges(sets.pop()?.multirange_literal()),
        })
    }

    fn not(&mut self, part: usize) -> usize {
        match self.nodes[part] {
            Logic::Const(value) => self.push(Logic::Const(!value)),
            Logic::Not(inner) => inner,
            _ => self.push(Logic::Not(part)),
        }
    }

    /// The nesting depth of the sea-query expression of the tree: an AND or OR of `n` parts
    /// nests `n` deep (sea-query joins two expressions at a time).
    fn sea_query_depth(&self) -> usize {
        let mut deepest: usize = 0;
        let mut pending = vec![(self.root, 1_usize)];
        while let Some((index, depth)) = pending.pop() {
            deepest = deepest.max(depth);
            match &self.nodes[index] {
                Logic::Const(_) | Logic::Leaf(_) => {}
                Logic::And(parts) | Logic::Or(parts) => {
                    pending.extend(parts.iter().map(|part| (*part, depth + parts.len())));
                }
                Logic::Not(part) => pending.push((*part, depth + 1)),
            }
        }
        deepest
    }

    /// The sea-query expression of a node; recursive, for trees within [`SEA_QUERY_DEPTH`].
    fn sea_query_expr(&self, index: usize) -> Expr {
        let join = |parts: &[usize], and: bool| {
            parts
                .iter()
                .map(|part| self.sea_query_expr(*part))
                .reduce(|a, b| if and { a.and(b) } else { a.or(b) })
                .unwrap_or(Expr::Constant(Value::from(and)))
        };
        match &self.nodes[index] {
            Logic::Const(value) => Expr::Constant(Value::from(*value)),
            Logic::Leaf(leaf) => leaf.sea_query_expr(),
            Logic::And(parts) => join(parts, true),
            Logic::Or(parts) => join(parts, false),
            Logic::Not(part) => self.sea_query_expr(*part).not(),
        }
    }

    /// The tree as one custom SQL expression with its values as numbered parameters, written
    /// without recursion: every part of an AND or OR and the operand of a NOT is
    /// parenthesised.
    fn flat_expr(&self) -> Expr {
        if let Logic::Const(value) = self.nodes[self.root] {
            return Expr::Constant(Value::from(value));
        }
        enum Step {
            Node(usize),
            Text(&'static str),
        }
        let mut sql = String::new();
        let mut values = Vec::new();
        let mut pending = vec![Step::Node(self.root)];
        while let Some(step) = pending.pop() {
            let index = match step {
                Step::Text(text) => {
                    sql.push_str(text);
                    continue;
                }
                Step::Node(index) => index,
            };
            match &self.nodes[index] {
                Logic::Const(true) => sql.push_str("TRUE"),
                Logic::Const(false) => sql.push_str("FALSE"),
                Logic::Leaf(leaf) => leaf.write_flat(&mut sql, &mut values),
                Logic::And(parts) | Logic::Or(parts) => {
                    let joiner = if matches!(self.nodes[index], Logic::And(_)) {
                        ") AND ("
                    } else {
                        ") OR ("
                    };
                    pending.push(Step::Text(")"));
                    for (position, part) in parts.iter().enumerate().rev() {
                        pending.push(Step::Node(*part));
                        if position > 0 {
                            pending.push(Step::Text(joiner));
                        }
                    }
                    pending.push(Step::Text("("));
                }
                Logic::Not(part) => {
                    pending.push(Step::Text(")"));
                    pending.push(Step::Node(*part));
                    pending.push(Step::Text("NOT ("));
                }
            }
        }
        Expr::cust_with_values(sql, values)
    }
}

#[cfg(test)]
mod tests {
    use sea_query::{PostgresQueryBuilder, Query};

    use super::*;

    fn leaf(tree: &mut Tree, name: &str) -> usize {
        tree.push(Logic::Leaf(Leaf {
            field: format!("\"{name}\""),
            range_field: None,
            test: Test::Compare(CompareOp::Eq, Bound::Value(Value::from(1_i64))),
        }))
    }

    fn is_const(tree: &Tree, index: usize, expected: bool) -> bool {
        matches!(tree.nodes[index], Logic::Const(value) if value == expected)
    }

    fn constant(tree: &mut Tree, value: bool) -> usize {
        tree.push(Logic::Const(value))
    }

    #[test]
    fn empty_and_is_true_and_empty_or_is_false() {
        let mut tree = Tree::default();
        let and = tree.and(vec![]);
        let or = tree.or(vec![]);
        assert!(is_const(&tree, and, true));
        assert!(is_const(&tree, or, false));
    }

    #[test]
    fn constants_fold() {
        let mut tree = Tree::default();
        let (a, f) = (leaf(&mut tree, "a"), constant(&mut tree, false));
        let and = tree.and(vec![a, f]);
        assert!(is_const(&tree, and, false));
        let t = constant(&mut tree, true);
        let or = tree.or(vec![a, t]);
        assert!(is_const(&tree, or, true));
        assert_eq!(tree.and(vec![a, t]), a);
        assert_eq!(tree.or(vec![f, a]), a);
        let not_true = tree.not(t);
        assert!(is_const(&tree, not_true, false));
        let not_a = tree.not(a);
        assert_eq!(tree.not(not_a), a);
    }

    #[test]
    fn nested_and_flattens() {
        let mut tree = Tree::default();
        let (a, b, c) = (
            leaf(&mut tree, "a"),
            leaf(&mut tree, "b"),
            leaf(&mut tree, "c"),
        );
        let inner = tree.and(vec![a, b]);
        let outer = tree.and(vec![inner, c]);
        assert!(matches!(&tree.nodes[outer], Logic::And(parts) if parts.len() == 3));
    }

    fn sql_of(expr: Expr) -> (String, usize) {
        let (sql, values) = Query::select()
            .expr(Expr::val(0_i64))
            .cond_where(Condition::all().add(expr))
            .build(PostgresQueryBuilder);
        (sql, values.0.len())
    }

    #[test]
    fn flat_rendering_parenthesises_and_numbers_parameters() {
        let mut tree = Tree::default();
        let (a, b, c) = (
            leaf(&mut tree, "a"),
            leaf(&mut tree, "b"),
            leaf(&mut tree, "c"),
        );
        let or = tree.or(vec![b, c]);
        let not = tree.not(or);
        tree.root = tree.and(vec![a, not]);
        assert_eq!(
            sql_of(tree.flat_expr()),
            (
                r#"SELECT $1 WHERE (("a") = $2) AND (NOT ((("b") = $3) OR (("c") = $4)))"#
                    .to_owned(),
                4
            )
        );
    }

    /// A chain alternating AND and OR far deeper than any stack allows recursion: measured,
    /// rendered and dropped without recursing.
    #[test]
    fn deep_alternations_render_without_recursion() {
        let mut tree = Tree::default();
        let mut node = leaf(&mut tree, "x");
        for level in 0..200_000 {
            let other = leaf(&mut tree, "y");
            node = if level % 2 == 0 {
                tree.and(vec![other, node])
            } else {
                tree.or(vec![other, node])
            };
        }
        tree.root = node;
        assert!(tree.sea_query_depth() > 200_000);
        let (sql, values) = sql_of(tree.flat_expr());
        assert_eq!(values, 200_002);
        assert!(sql.ends_with(&")".repeat(200_000)), "balanced");
    }

    #[test]
    fn array_literals_quote_strings() {
        let mut literal = String::new();
        push_quoted(&mut literal, r#"a"b\c,{NULL}"#);
        assert_eq!(literal, r#""a\"b\\c,{NULL}""#);
    }

    #[test]
    fn integer_literals_keep_values_beyond_64_bits() {
        let values = [
            TypedValue::Integer(-1),
            TypedValue::OutOfRangeInteger(u64::MAX),
        ];
        assert_eq!(integer_literal(&values), "{-1,18446744073709551615}");
    }
}
