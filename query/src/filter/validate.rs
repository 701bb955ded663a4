//! Pass 2: the schema. [`validate`] checks a parsed [`Filter`] against the pipeline's metadata
//! JSON Schema and gives a [`TypedFilter`] whose every comparison knows its field's declared
//! type and whose values have that type. The taxonomy half of `$teq` needs the taxonomy
//! entries, so it is a separate step: [`validate_teq`], once the expansion has been read.
//!
//! Every error here is the interface's 400 `Schema error` (no details); the variants say why,
//! for logs and tests.

use std::collections::{BTreeMap, HashSet};
use std::fmt;

use serde_json::Value;

use super::ast::{
    CompareOp, FieldCondition, Filter, LikeOp, MembershipOp, Operation, Scalar, ValueKind,
};
use super::teq::{TeqExpansions, TeqStart};

/// The type a pipeline's schema declares for a top-level property (`["t", "null"]` counts as
/// `t`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeclaredType {
    String,
    Integer,
    Number,
    Boolean,
    /// Declared, validated in documents, never comparable.
    Object,
}

impl DeclaredType {
    /// The type a schema names (`"string"`, …); `None` for other names.
    pub fn from_name(name: &str) -> Option<Self> {
        Some(match name {
            "string" => DeclaredType::String,
            "integer" => DeclaredType::Integer,
            "number" => DeclaredType::Number,
            "boolean" => DeclaredType::Boolean,
            "object" => DeclaredType::Object,
            _ => return None,
        })
    }

    /// The type of a property schema: `"t"` or a pair of `"t"` and `"null"`. `None` for
    /// anything else (§5.2 refuses such schemas; a filter cannot use the field).
    fn of_property(property: &Value) -> Option<Self> {
        match property.get("type")? {
            Value::String(name) => Self::from_name(name),
            Value::Array(names) => {
                let mut non_null = names.iter().filter(|name| *name != "null");
                match (non_null.next(), non_null.next()) {
                    (Some(Value::String(name)), None) => Self::from_name(name),
                    _ => None,
                }
            }
            _ => None,
        }
    }
}

impl fmt::Display for DeclaredType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DeclaredType::String => "string",
            DeclaredType::Integer => "integer",
            DeclaredType::Number => "number",
            DeclaredType::Boolean => "boolean",
            DeclaredType::Object => "object",
        })
    }
}

/// The comparable field types: what the SQL expression of a field reads (see
/// [`super::compile`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FieldType {
    /// `(metadata ->> 'f')`, compared in the database collation.
    String,
    /// A JSON number as `numeric`.
    Integer,
    /// A JSON number as `double precision`.
    Number,
    /// A JSON boolean as `boolean`, false before true.
    Boolean,
}

impl FieldType {
    /// The comparable type of a declared one; `None` for objects.
    pub(crate) fn of(declared: DeclaredType) -> Option<Self> {
        Some(match declared {
            DeclaredType::String => FieldType::String,
            DeclaredType::Integer => FieldType::Integer,
            DeclaredType::Number => FieldType::Number,
            DeclaredType::Boolean => FieldType::Boolean,
            DeclaredType::Object => return None,
        })
    }
}

/// Why a filter does not fit the pipeline's schema: always the interface's 400 `Schema error`.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SchemaError {
    #[error("field `{field}` is not declared in the metadata schema")]
    UndeclaredField { field: String },
    #[error("field `{field}` is an object and cannot be compared")]
    ObjectField { field: String },
    #[error("field `{field}` has no type usable in filters")]
    UnsupportedFieldType { field: String },
    #[error("`{operator}` on {declared} field `{field}` with a {value} value")]
    TypeMismatch {
        field: String,
        operator: &'static str,
        declared: DeclaredType,
        value: ValueKind,
    },
    #[error("`{operator}` needs a string field; `{field}` is {declared}")]
    PatternOnNonString {
        field: String,
        operator: &'static str,
        declared: DeclaredType,
    },
    #[error("empty `{operator}` list on {declared} field `{field}`")]
    EmptyList {
        field: String,
        operator: &'static str,
        declared: DeclaredType,
    },
    #[error("`$teq` needs a string field; `{field}` is {declared}")]
    TeqOnNonString {
        field: String,
        declared: DeclaredType,
    },
    #[error(
        "`$teq` on `{field}` reaches field `{reached_field}` through taxonomy `{taxonomy_id}`, \
         which is not a declared string field"
    )]
    TeqReachesNonString {
        field: String,
        taxonomy_id: String,
        reached_field: String,
    },
}

/// A filter checked against a schema: every comparison names a declared field of a
/// comparable type and carries values of that type. Build it with [`validate`].
#[derive(Debug, Clone, PartialEq)]
pub struct TypedFilter {
    /// The filter's nodes, the root first; every node comes before its children, which are
    /// indices into this list. A flat list, so that no walk over a deep filter recurses.
    pub(crate) nodes: Vec<TypedNode>,
    /// The schema's top-level properties (`None`: a type filters cannot use), kept for
    /// [`validate_teq`].
    declared: BTreeMap<String, Option<DeclaredType>>,
    /// The distinct integer fields compared, in order of appearance.
    integer_fields: Vec<String>,
    /// The distinct `$teq` starting points, in order of appearance.
    teq_starts: Vec<TeqStart>,
}

/// A node of [`Filter`] with typed comparisons; children are indices into
/// [`TypedFilter::nodes`].
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum TypedNode {
    Fields(Vec<TypedCondition>),
    And(Vec<usize>),
    Or(Vec<usize>),
    Not(usize),
}

impl TypedNode {
    /// Whether this is the empty field map `{}`.
    pub(crate) fn is_empty_object(&self) -> bool {
        matches!(self, TypedNode::Fields(conditions) if conditions.is_empty())
    }
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct TypedCondition {
    pub field: String,
    pub field_type: FieldType,
    pub operation: TypedOperation,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum TypedOperation {
    Compare {
        op: CompareOp,
        value: TypedValue,
    },
    Like {
        op: LikeOp,
        pattern: String,
    },
    /// Empty only on boolean fields.
    Membership {
        op: MembershipOp,
        values: Vec<TypedValue>,
    },
    Teq(TeqStart),
}

/// A value converted to its field's type.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum TypedValue {
    String(String),
    Integer(i64),
    /// An integer above `i64::MAX` for an integer field: bound as text and cast to `bigint`,
    /// so the database refuses it when the statement runs (the interface's 500).
    OutOfRangeInteger(u64),
    /// Integers given for number fields are converted here (nearest double, as the database
    /// converts `bigint` to `double precision`).
    Number(f64),
    Boolean(bool),
}

impl TypedFilter {
    /// The distinct integer fields the filter compares, in the order they appear: the fields
    /// rule 6 concerns (see [`unconvertible_integer_fields`]).
    pub fn integer_fields(&self) -> Vec<String> {
        self.integer_fields.clone()
    }

    /// The distinct `$teq` starting points, in the order they appear. The service reads their
    /// expansion with [`super::teq_expansion_query`] before compiling.
    pub fn teq_starts(&self) -> Vec<TeqStart> {
        self.teq_starts.clone()
    }

    /// Records what the conditions of a field map contribute to
    /// [`TypedFilter::integer_fields`] and [`TypedFilter::teq_starts`].
    fn record(
        &mut self,
        conditions: &[TypedCondition],
        integers: &mut HashSet<String>,
        starts: &mut HashSet<TeqStart>,
    ) {
        for condition in conditions {
            if condition.field_type == FieldType::Integer
                && integers.insert(condition.field.clone())
            {
                self.integer_fields.push(condition.field.clone());
            }
            if let TypedOperation::Teq(start) = &condition.operation
                && starts.insert(start.clone())
            {
                self.teq_starts.push(start.clone());
            }
        }
    }
}

/// The top-level fields of `metadata` (a document's, already valid against `schema`) that the
/// schema declares integer and whose value the database cannot read as a 64-bit integer
/// (rule 6): JSON Schema counts `5.0` and `1e3` as integers, and places no bound on them,
/// while an integer here is 64-bit and written without a fraction. Every filter on such a
/// field fails while the document is stored.
pub fn unconvertible_integer_fields(schema: &Value, metadata: &Value) -> Vec<String> {
    let (Some(properties), Some(values)) = (
        schema.get("properties").and_then(Value::as_object),
        metadata.as_object(),
    ) else {
        return Vec::new();
    };
    values
        .iter()
        .filter(|(name, value)| {
            let declared_integer = properties.get(*name).and_then(DeclaredType::of_property)
                == Some(DeclaredType::Integer);
            // serde_json keeps a number as i64 only when it is written as an integer within
            // 64 bits: exactly what the database reads back as `bigint`.
            declared_integer && matches!(value, Value::Number(n) if n.as_i64().is_none())
        })
        .map(|(name, _)| name.clone())
        .collect()
}

/// Checks `filter` against a pipeline's metadata JSON Schema (rule 1, rule 3 and the `$teq`
/// field rule; the taxonomy half of rule 5 is [`validate_teq`]). The first error in document
/// order wins. The walk keeps its own list of pending nodes, so a filter of any depth is
/// checked in linear time and constant stack.
pub fn validate(filter: &Filter, schema: &Value) -> Result<TypedFilter, SchemaError> {
    let declared: BTreeMap<String, Option<DeclaredType>> = schema
        .get("properties")
        .and_then(Value::as_object)
        .map(|properties| {
            properties
                .iter()
                .map(|(name, property)| (name.clone(), DeclaredType::of_property(property)))
                .collect()
        })
        .unwrap_or_default();
    let mut typed = TypedFilter {
        nodes: Vec::new(),
        declared,
        integer_fields: Vec::new(),
        teq_starts: Vec::new(),
    };
    let mut integers = HashSet::new();
    let mut starts = HashSet::new();
    // Depth first, children in document order: a node's whole subtree is checked before its
    // next sibling, so conditions are checked (and recorded) in the order they are written.
    let mut pending: Vec<(&Filter, Option<usize>)> = vec![(filter, None)];
    while let Some((filter, parent)) = pending.pop() {
        let index = typed.nodes.len();
        let node = match filter {
            Filter::Fields(conditions) => {
                let conditions = conditions
                    .iter()
                    .map(|condition| type_condition(condition, &typed.declared))
                    .collect::<Result<Vec<_>, _>>()?;
                typed.record(&conditions, &mut integers, &mut starts);
                TypedNode::Fields(conditions)
            }
            Filter::And(filters) => TypedNode::And(Vec::with_capacity(filters.len())),
            Filter::Or(filters) => TypedNode::Or(Vec::with_capacity(filters.len())),
            // The child's index is set when the child is reached.
            Filter::Not(_) => TypedNode::Not(index),
        };
        typed.nodes.push(node);
        if let Some(parent) = parent {
            match &mut typed.nodes[parent] {
                TypedNode::And(children) | TypedNode::Or(children) => children.push(index),
                TypedNode::Not(child) => *child = index,
                TypedNode::Fields(_) => {}
            }
        }
        match filter {
            Filter::Fields(_) => {}
            Filter::And(filters) | Filter::Or(filters) => {
                pending.extend(filters.iter().rev().map(|f| (f, Some(index))));
            }
            Filter::Not(filter) => pending.push((filter, Some(index))),
        }
    }
    Ok(typed)
}

/// Checks that every field a `$teq` reaches through its taxonomy is a declared string field
/// (rule 5). `expansions` holds what [`super::teq_expansion_query`] returned; starting points
/// it lacks reach only themselves, which [`validate`] has already checked.
pub fn validate_teq(filter: &TypedFilter, expansions: &TeqExpansions) -> Result<(), SchemaError> {
    for start in filter.teq_starts() {
        for reached_field in expansions.reached(&start).keys() {
            if filter.declared.get(reached_field.as_str()) != Some(&Some(DeclaredType::String)) {
                return Err(SchemaError::TeqReachesNonString {
                    field: start.field.clone(),
                    taxonomy_id: start.taxonomy_id.clone(),
                    reached_field: reached_field.clone(),
                });
            }
        }
    }
    Ok(())
}

fn type_condition(
    condition: &FieldCondition,
    declared: &BTreeMap<String, Option<DeclaredType>>,
) -> Result<TypedCondition, SchemaError> {
    let field = &condition.field;
    let declared_type = match declared.get(field.as_str()) {
        None => {
            return Err(SchemaError::UndeclaredField {
                field: field.clone(),
            });
        }
        Some(None) => {
            return Err(SchemaError::UnsupportedFieldType {
                field: field.clone(),
            });
        }
        Some(Some(declared_type)) => *declared_type,
    };
    let Some(field_type) = FieldType::of(declared_type) else {
        return Err(SchemaError::ObjectField {
            field: field.clone(),
        });
    };
    let operator = condition.operation.operator_name();
    let mismatch = |value: ValueKind| SchemaError::TypeMismatch {
        field: field.clone(),
        operator,
        declared: declared_type,
        value,
    };
    let operation = match &condition.operation {
        Operation::Compare { op, value } => TypedOperation::Compare {
            op: *op,
            value: convert(field_type, value).ok_or_else(|| mismatch(value.kind()))?,
        },
        Operation::Like { op, pattern } => {
            if field_type != FieldType::String {
                return Err(SchemaError::PatternOnNonString {
                    field: field.clone(),
                    operator,
                    declared: declared_type,
                });
            }
            TypedOperation::Like {
                op: *op,
                pattern: pattern.clone(),
            }
        }
        Operation::Membership { op, values } => {
            if values.is_empty() && field_type != FieldType::Boolean {
                return Err(SchemaError::EmptyList {
                    field: field.clone(),
                    operator,
                    declared: declared_type,
                });
            }
            if let Some(kind) = values.kind()
                && !accepts(field_type, kind)
            {
                return Err(mismatch(kind));
            }
            TypedOperation::Membership {
                op: *op,
                values: values
                    .values()
                    .iter()
                    .map(|value| convert(field_type, value).ok_or_else(|| mismatch(value.kind())))
                    .collect::<Result<_, _>>()?,
            }
        }
        Operation::Teq { value, taxonomy_id } => {
            if field_type != FieldType::String {
                return Err(SchemaError::TeqOnNonString {
                    field: field.clone(),
                    declared: declared_type,
                });
            }
            TypedOperation::Teq(TeqStart {
                field: field.clone(),
                value: value.clone(),
                taxonomy_id: taxonomy_id.clone(),
            })
        }
    };
    Ok(TypedCondition {
        field: field.clone(),
        field_type,
        operation,
    })
}

/// Whether a field of `field_type` accepts values of `kind` (integers are numbers too).
fn accepts(field_type: FieldType, kind: ValueKind) -> bool {
    matches!(
        (field_type, kind),
        (FieldType::String, ValueKind::String)
            | (FieldType::Integer, ValueKind::Integer)
            | (FieldType::Number, ValueKind::Integer | ValueKind::Number)
            | (FieldType::Boolean, ValueKind::Boolean)
    )
}

/// `value` as a value of `field_type`, or `None` when the field does not accept it.
fn convert(field_type: FieldType, value: &Scalar) -> Option<TypedValue> {
    Some(match (field_type, value) {
        (FieldType::String, Scalar::String(s)) => TypedValue::String(s.clone()),
        (FieldType::Integer, Scalar::Integer(i)) => TypedValue::Integer(*i),
        (FieldType::Integer, Scalar::LargeInteger(u)) => TypedValue::OutOfRangeInteger(*u),
        // Nearest double, exactly what Postgres' `bigint::double precision` gives.
        (FieldType::Number, Scalar::Integer(i)) => TypedValue::Number(*i as f64),
        (FieldType::Number, Scalar::LargeInteger(u)) => TypedValue::Number(*u as f64),
        (FieldType::Number, Scalar::Number(n)) => TypedValue::Number(*n),
        (FieldType::Boolean, Scalar::Boolean(b)) => TypedValue::Boolean(*b),
        _ => return None,
    })
}
