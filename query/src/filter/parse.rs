//! Pass 1: the grammar. [`Filter`] deserializes from JSON with serde, so a grammar violation
//! in a request body fails while the body is deserialized (the service answers 422 with
//! serde's message, which ends with line and column), and the document list's `metadata`
//! parameter goes through [`Filter::parse_query_param`].
//!
//! Nesting has no limit but the text's size: the JSON reader's recursion limit is disabled
//! where a filter is read ([`Filter::from_json`], the service's bodies that hold filters), and
//! the stack grows on the heap as a nested filter is read. Everything after parsing walks the
//! tree without recursion.

use std::collections::HashSet;
use std::fmt;

use serde::de::{self, Deserialize, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use super::ast::{
    CompareOp, FieldCondition, Filter, LikeOp, MembershipOp, OPERATOR_NAMES, Operation, Scalar,
    ScalarList, TEQ, is_field_name,
};

impl Filter {
    /// Parses the document list's `metadata` query parameter (already URL-decoded JSON).
    ///
    /// The error is serde's reason (with line and column); the service answers 400 plain text
    /// `Failed to deserialize query string: <reason>`.
    pub fn parse_query_param(raw: &str) -> Result<Filter, String> {
        Self::from_json(raw).map_err(|error| error.to_string())
    }

    /// Parses a filter from JSON text without the JSON reader's nesting limit (filters nest to
    /// any depth). Bodies that hold filters are read the same way: a
    /// [`serde_json::Deserializer`] with its recursion limit disabled.
    pub fn from_json(json: &str) -> Result<Filter, serde_json::Error> {
        let mut deserializer = serde_json::Deserializer::from_str(json);
        deserializer.disable_recursion_limit();
        let filter = Filter::deserialize(&mut deserializer)?;
        deserializer.end()?;
        Ok(filter)
    }
}

/// Free stack below which parsing a nested filter moves to a new stack segment.
const STACK_RED_ZONE: usize = 64 * 1024;
/// Size of each new stack segment.
const STACK_SEGMENT: usize = 2 * 1024 * 1024;

impl<'de> Deserialize<'de> for Filter {
    /// Every nested filter is read through here, so this is where the stack grows: when less
    /// than [`STACK_RED_ZONE`] is left, parsing goes on in a new heap-allocated segment. With
    /// the JSON reader's recursion limit disabled, a filter nests as deep as its text allows.
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        stacker::maybe_grow(STACK_RED_ZONE, STACK_SEGMENT, || {
            deserializer.deserialize_map(FilterVisitor)
        })
    }
}

struct FilterVisitor;

impl<'de> Visitor<'de> for FilterVisitor {
    type Value = Filter;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a metadata filter object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Filter, A::Error> {
        let mut fields: Vec<FieldCondition> = Vec::new();
        // Names seen, so a map with many fields stays linear.
        let mut seen: HashSet<String> = HashSet::new();
        let mut logical: Option<(String, Filter)> = None;
        while let Some(key) = map.next_key::<String>()? {
            if key.starts_with('$') {
                if !matches!(key.as_str(), "$and" | "$or" | "$not") {
                    return Err(de::Error::custom(format_args!(
                        "unknown logical operator `{key}`, expected `$and`, `$or` or `$not` \
                         (comparison operators go inside a field: {{\"field\": {{\"$eq\": value}}}})"
                    )));
                }
                if let Some(first) = fields.first() {
                    return Err(de::Error::custom(format_args!(
                        "logical operator `{key}` cannot share an object with field conditions (`{}`)",
                        first.field
                    )));
                }
                if let Some((first, _)) = &logical {
                    return Err(de::Error::custom(format_args!(
                        "two logical operators in one object (`{first}` and `{key}`), expected exactly one"
                    )));
                }
                let filter = match key.as_str() {
                    "$and" => Filter::And(map.next_value()?),
                    "$or" => Filter::Or(map.next_value()?),
                    _ => Filter::Not(Box::new(map.next_value()?)),
                };
                logical = Some((key, filter));
                continue;
            }
            if let Some((operator, _)) = &logical {
                return Err(de::Error::custom(format_args!(
                    "field `{key}` cannot share an object with logical operator `{operator}`"
                )));
            }
            if !is_field_name(&key) {
                return Err(de::Error::custom(format_args!(
                    "invalid field name `{key}`: a top-level field name is letters, digits and \
                     underscores, not starting with a digit"
                )));
            }
            if !seen.insert(key.clone()) {
                return Err(de::Error::custom(format_args!("duplicate field `{key}`")));
            }
            let Comparison(operation) = map.next_value()?;
            fields.push(FieldCondition {
                field: key,
                operation,
            });
        }
        Ok(match logical {
            Some((_, filter)) => filter,
            None => Filter::Fields(fields),
        })
    }
}

/// A comparison object `{op: value}` with exactly one operator.
struct Comparison(Operation);

impl<'de> Deserialize<'de> for Comparison {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(ComparisonVisitor)
    }
}

struct ComparisonVisitor;

impl<'de> Visitor<'de> for ComparisonVisitor {
    type Value = Comparison;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a comparison object with exactly one operator, such as {\"$eq\": value}")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Comparison, A::Error> {
        let Some(operator) = map.next_key::<String>()? else {
            return Err(de::Error::custom(
                "empty comparison object, expected exactly one operator",
            ));
        };
        let operation = if let Some(op) = CompareOp::from_name(&operator) {
            Operation::Compare {
                op,
                value: map.next_value()?,
            }
        } else if let Some(op) = LikeOp::from_name(&operator) {
            Operation::Like {
                op,
                pattern: map.next_value::<Pattern>()?.0,
            }
        } else if let Some(op) = MembershipOp::from_name(&operator) {
            Operation::Membership {
                op,
                values: map.next_value()?,
            }
        } else if operator == TEQ {
            let TeqValue(value, taxonomy_id) = map.next_value()?;
            Operation::Teq { value, taxonomy_id }
        } else {
            return Err(de::Error::custom(format_args!(
                "unknown operator `{operator}`, expected one of {OperatorList}"
            )));
        };
        if let Some(second) = map.next_key::<String>()? {
            return Err(de::Error::custom(format_args!(
                "two operators in one comparison (`{operator}` and `{second}`), expected exactly one"
            )));
        }
        Ok(Comparison(operation))
    }
}

/// Renders the operator names as "`$eq`, `$neq`, …".
struct OperatorList;

impl fmt::Display for OperatorList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, name) in OPERATOR_NAMES.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "`{name}`")?;
        }
        Ok(())
    }
}

impl<'de> Deserialize<'de> for Scalar {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(ScalarVisitor)
    }
}

struct ScalarVisitor;

impl Visitor<'_> for ScalarVisitor {
    type Value = Scalar;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string, number or boolean")
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Scalar, E> {
        Ok(Scalar::Boolean(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Scalar, E> {
        Ok(Scalar::Integer(v))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Scalar, E> {
        Ok(i64::try_from(v).map_or(Scalar::LargeInteger(v), Scalar::Integer))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Scalar, E> {
        Ok(Scalar::Number(v))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Scalar, E> {
        Ok(Scalar::String(v.to_owned()))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Scalar, E> {
        Ok(Scalar::String(v))
    }
}

impl<'de> Deserialize<'de> for ScalarList {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_seq(ScalarListVisitor)
    }
}

struct ScalarListVisitor;

impl<'de> Visitor<'de> for ScalarListVisitor {
    type Value = ScalarList;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an array of strings, numbers or booleans of one type")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<ScalarList, A::Error> {
        let mut values = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1024));
        while let Some(value) = seq.next_element::<Scalar>()? {
            values.push(value);
        }
        ScalarList::new(values).map_err(|(first, other)| {
            de::Error::custom(format_args!(
                "mixed types in a list ({first} and {other}), expected values of one type"
            ))
        })
    }
}

/// The string of `$like` / `$ilike`.
struct Pattern(String);

impl<'de> Deserialize<'de> for Pattern {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_string(PatternVisitor)
    }
}

struct PatternVisitor;

impl Visitor<'_> for PatternVisitor {
    type Value = Pattern;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a pattern string")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Pattern, E> {
        Ok(Pattern(v.to_owned()))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Pattern, E> {
        Ok(Pattern(v))
    }
}

/// The `[value, taxonomy identifier]` of `$teq`.
struct TeqValue(String, String);

impl<'de> Deserialize<'de> for TeqValue {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_seq(TeqVisitor)
    }
}

struct TeqVisitor;

impl<'de> Visitor<'de> for TeqVisitor {
    type Value = TeqValue;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an array of two strings: value and taxonomy identifier")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<TeqValue, A::Error> {
        let Some(value) = seq.next_element::<String>()? else {
            return Err(de::Error::invalid_length(0, &self));
        };
        let Some(taxonomy_id) = seq.next_element::<String>()? else {
            return Err(de::Error::invalid_length(1, &self));
        };
        let mut length = 2;
        while seq.next_element::<IgnoredAny>()?.is_some() {
            length += 1;
        }
        if length != 2 {
            return Err(de::Error::invalid_length(length, &self));
        }
        Ok(TeqValue(value, taxonomy_id))
    }
}
