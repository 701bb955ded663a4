//! The filter as the request states it: one AST enum ([`Filter`]) and the operator and value
//! types of its comparisons. Only the grammar has been checked when a value of these types
//! exists; nothing here knows the pipeline's schema.

use std::fmt;

/// A metadata filter (see the module documentation of [`crate::filter`] for the grammar).
///
/// Filters nest to any depth: dropping and cloning one do not recurse.
#[derive(Debug, PartialEq)]
pub enum Filter {
    /// A field map `{field: {op: value}, ...}`: every condition must hold. Empty (`{}`) means
    /// no restriction, except in a later position of an `$or` (rule 4). Conditions keep the
    /// order of the request; a field appears at most once.
    Fields(Vec<FieldCondition>),
    /// `{"$and": [filters]}`; empty is always true.
    And(Vec<Filter>),
    /// `{"$or": [filters]}`; empty is never true.
    Or(Vec<Filter>),
    /// `{"$not": filter}`.
    Not(Box<Filter>),
}

impl Filter {
    /// Whether this is the empty field map `{}`.
    pub fn is_empty_object(&self) -> bool {
        matches!(self, Filter::Fields(conditions) if conditions.is_empty())
    }

    /// Moves this filter's sub-filters onto `pending`, leaving it without any.
    fn take_children(&mut self, pending: &mut Vec<Filter>) {
        match self {
            Filter::Fields(_) => {}
            Filter::And(filters) | Filter::Or(filters) => pending.append(filters),
            Filter::Not(filter) => pending.push(std::mem::replace(
                filter.as_mut(),
                Filter::Fields(Vec::new()),
            )),
        }
    }
}

/// Cloned without recursion: children are built before their parents, on a list.
impl Clone for Filter {
    fn clone(&self) -> Self {
        enum Step<'a> {
            Enter(&'a Filter),
            Build(&'a Filter),
        }
        let mut steps = vec![Step::Enter(self)];
        // The copies of finished sub-filters, in document order.
        let mut built: Vec<Filter> = Vec::new();
        while let Some(step) = steps.pop() {
            match step {
                Step::Enter(filter) => {
                    steps.push(Step::Build(filter));
                    match filter {
                        Filter::Fields(_) => {}
                        Filter::And(filters) | Filter::Or(filters) => {
                            steps.extend(filters.iter().rev().map(Step::Enter));
                        }
                        Filter::Not(filter) => steps.push(Step::Enter(filter)),
                    }
                }
                Step::Build(filter) => {
                    let copy = match filter {
                        Filter::Fields(conditions) => Filter::Fields(conditions.clone()),
                        Filter::And(filters) => {
                            Filter::And(built.split_off(built.len() - filters.len()))
                        }
                        Filter::Or(filters) => {
                            Filter::Or(built.split_off(built.len() - filters.len()))
                        }
                        Filter::Not(_) => {
                            Filter::Not(Box::new(built.pop().unwrap_or(Filter::Fields(Vec::new()))))
                        }
                    };
                    built.push(copy);
                }
            }
        }
        built.pop().unwrap_or(Filter::Fields(Vec::new()))
    }
}

/// Filters nest to any depth (a 2 MB body holds a quarter of a million `$not`), so a filter is
/// dropped without recursion: each node's sub-filters are moved to a list before it goes.
impl Drop for Filter {
    fn drop(&mut self) {
        let mut pending = Vec::new();
        self.take_children(&mut pending);
        while let Some(mut filter) = pending.pop() {
            filter.take_children(&mut pending);
        }
    }
}

/// One `field: {op: value}` entry of a field map.
#[derive(Debug, Clone, PartialEq)]
pub struct FieldCondition {
    /// A top-level metadata field: `[A-Za-z_][A-Za-z0-9_]*`.
    pub field: String,
    pub operation: Operation,
}

/// The single operator of a comparison object, with its value.
#[derive(Debug, Clone, PartialEq)]
pub enum Operation {
    /// `$eq $neq $gt $ge $lt $le` with one scalar.
    Compare { op: CompareOp, value: Scalar },
    /// `$like $ilike` with a pattern (`%`, `_`, backslash escapes).
    Like { op: LikeOp, pattern: String },
    /// `$in $not-in` with values of one type (possibly none).
    Membership {
        op: MembershipOp,
        values: ScalarList,
    },
    /// `$teq` with `[value, taxonomy identifier]`.
    Teq { value: String, taxonomy_id: String },
}

impl Operation {
    /// The operator's name as written in a filter (`$eq`, `$not-in`, …).
    pub fn operator_name(&self) -> &'static str {
        match self {
            Operation::Compare { op, .. } => op.name(),
            Operation::Like { op, .. } => op.name(),
            Operation::Membership { op, .. } => op.name(),
            Operation::Teq { .. } => TEQ,
        }
    }
}

/// The name of the taxonomy operator.
pub(crate) const TEQ: &str = "$teq";

/// Every operator name the grammar knows, in the interface's order (used in error messages).
pub(crate) const OPERATOR_NAMES: [&str; 11] = [
    "$eq", "$neq", "$gt", "$ge", "$lt", "$le", "$like", "$ilike", "$in", "$not-in", TEQ,
];

/// The ordering comparisons.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompareOp {
    Eq,
    Neq,
    Gt,
    Ge,
    Lt,
    Le,
}

impl CompareOp {
    pub const ALL: [CompareOp; 6] = [
        CompareOp::Eq,
        CompareOp::Neq,
        CompareOp::Gt,
        CompareOp::Ge,
        CompareOp::Lt,
        CompareOp::Le,
    ];

    /// The operator of a name (`$eq` → `Eq`).
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|op| op.name() == name)
    }

    pub fn name(self) -> &'static str {
        match self {
            CompareOp::Eq => "$eq",
            CompareOp::Neq => "$neq",
            CompareOp::Gt => "$gt",
            CompareOp::Ge => "$ge",
            CompareOp::Lt => "$lt",
            CompareOp::Le => "$le",
        }
    }
}

/// The pattern operators.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LikeOp {
    /// `$like`: SQL `LIKE`, case-sensitive.
    Like,
    /// `$ilike`: SQL `ILIKE`, case-insensitive.
    ILike,
}

impl LikeOp {
    pub fn from_name(name: &str) -> Option<Self> {
        [LikeOp::Like, LikeOp::ILike]
            .into_iter()
            .find(|op| op.name() == name)
    }

    pub fn name(self) -> &'static str {
        match self {
            LikeOp::Like => "$like",
            LikeOp::ILike => "$ilike",
        }
    }
}

/// The list operators.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MembershipOp {
    /// `$in`: the value is one of the list.
    In,
    /// `$not-in`: the value is none of the list.
    NotIn,
}

impl MembershipOp {
    pub fn from_name(name: &str) -> Option<Self> {
        [MembershipOp::In, MembershipOp::NotIn]
            .into_iter()
            .find(|op| op.name() == name)
    }

    pub fn name(self) -> &'static str {
        match self {
            MembershipOp::In => "$in",
            MembershipOp::NotIn => "$not-in",
        }
    }
}

/// One comparison value.
#[derive(Debug, Clone, PartialEq)]
pub enum Scalar {
    String(String),
    /// A JSON number without fraction or exponent that fits 64 bits, kept exactly.
    Integer(i64),
    /// A JSON integer above `i64::MAX` (up to `u64::MAX`). It is an integer, so the schema
    /// accepts it for integer fields, where the database then refuses it as out of range for
    /// `bigint` (the interface's 500); on number fields it is a number. Integer literals beyond
    /// `u64::MAX` (or below `i64::MIN`) reach the parser as floating-point numbers and are
    /// [`Scalar::Number`].
    LargeInteger(u64),
    /// A JSON number with a fraction or an exponent (`5.0` is a number, not an integer).
    Number(f64),
    Boolean(bool),
}

impl Scalar {
    /// The kind of JSON value this is.
    pub fn kind(&self) -> ValueKind {
        match self {
            Scalar::String(_) => ValueKind::String,
            Scalar::Integer(_) | Scalar::LargeInteger(_) => ValueKind::Integer,
            Scalar::Number(_) => ValueKind::Number,
            Scalar::Boolean(_) => ValueKind::Boolean,
        }
    }
}

/// The kinds of comparison values. An integer is also a number: a list mixing integers and
/// numbers is a list of numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueKind {
    String,
    Integer,
    Number,
    Boolean,
}

impl fmt::Display for ValueKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ValueKind::String => "string",
            ValueKind::Integer => "integer",
            ValueKind::Number => "number",
            ValueKind::Boolean => "boolean",
        })
    }
}

/// The values of `$in` / `$not-in`: all strings, all booleans, or all numeric (integers and
/// numbers). The parser guarantees this; [`ScalarList::new`] checks it.
#[derive(Debug, Clone, PartialEq)]
pub struct ScalarList(Vec<Scalar>);

impl ScalarList {
    /// A list of values of one type, or the two kinds that differ.
    pub fn new(values: Vec<Scalar>) -> Result<Self, (ValueKind, ValueKind)> {
        let mut kind: Option<ValueKind> = None;
        for value in &values {
            kind = Some(match (kind, value.kind()) {
                (None, k) => k,
                (Some(a), b) if a == b => a,
                (Some(ValueKind::Integer | ValueKind::Number), ValueKind::Integer) => {
                    ValueKind::Number
                }
                (Some(ValueKind::Integer | ValueKind::Number), ValueKind::Number) => {
                    ValueKind::Number
                }
                (Some(a), b) => return Err((a, b)),
            });
        }
        Ok(Self(values))
    }

    /// The values, in request order.
    pub fn values(&self) -> &[Scalar] {
        &self.0
    }

    /// The list's kind: `Integer` when every value is an integer, `Number` when at least one
    /// has a fraction or exponent; `None` for the empty list.
    pub fn kind(&self) -> Option<ValueKind> {
        self.0.iter().map(Scalar::kind).reduce(|a, b| match (a, b) {
            (ValueKind::Integer, ValueKind::Integer) => ValueKind::Integer,
            (ValueKind::Integer | ValueKind::Number, ValueKind::Integer | ValueKind::Number) => {
                ValueKind::Number
            }
            (a, _) => a,
        })
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// Whether a name is a metadata field identifier: `[A-Za-z_][A-Za-z0-9_]*`.
pub fn is_field_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn field_names() {
        for ok in ["a", "_", "_a1", "Author_Name", "x9"] {
            assert!(is_field_name(ok), "{ok}");
        }
        for bad in ["", "1a", "a.b", "a-b", "a b", "é", "$and"] {
            assert!(!is_field_name(bad), "{bad}");
        }
    }

    #[test]
    fn list_kinds() {
        let list = |v: Vec<Scalar>| ScalarList::new(v);
        assert_eq!(list(vec![]).map(|l| l.kind()), Ok(None));
        assert_eq!(
            list(vec![Scalar::Integer(1), Scalar::LargeInteger(u64::MAX)]).map(|l| l.kind()),
            Ok(Some(ValueKind::Integer))
        );
        assert_eq!(
            list(vec![Scalar::Integer(1), Scalar::Number(1.5)]).map(|l| l.kind()),
            Ok(Some(ValueKind::Number))
        );
        assert_eq!(
            list(vec![Scalar::Integer(1), Scalar::String("a".into())]),
            Err((ValueKind::Integer, ValueKind::String))
        );
        assert_eq!(
            list(vec![Scalar::Boolean(true), Scalar::Number(1.0)]),
            Err((ValueKind::Boolean, ValueKind::Number))
        );
    }
}
