//! The metadata filter language (interface §"Metadata filter language", addendum §8, §15.24).
//!
//! # Grammar
//!
//! ```text
//! filter      = field-map | logical
//! field-map   = "{" [ field ":" comparison { "," field ":" comparison } ] "}"
//!                                     ; each field once; "{}" = no restriction
//! logical     = "{" "\"$and\"" ":" "[" [ filter { "," filter } ] "]" "}"
//!             | "{" "\"$or\""  ":" "[" [ filter { "," filter } ] "]" "}"
//!             | "{" "\"$not\"" ":" filter "}"
//!                                     ; alone in its object, nesting to any depth
//! field       = string matching [A-Za-z_][A-Za-z0-9_]*   ; a top-level field
//! comparison  = "{" operator ":" operand "}"               ; exactly one operator
//! operator    → operand:
//!   "$eq" "$neq" "$gt" "$ge" "$lt" "$le"  → scalar
//!   "$like" "$ilike"                      → string (pattern: % any, _ one, \ escapes)
//!   "$in" "$not-in"                       → "[" [ scalar { "," scalar } ] "]"
//!                                           (all strings, all booleans, or all numeric)
//!   "$teq"                                → "[" string "," string "]"  (value, taxonomy id)
//! scalar      = string | integer | number | boolean      ; never null, array or object
//! integer     = a JSON number without fraction or exponent (kept as i64; `5.0` is a number)
//! ```
//!
//! Everything else is refused while deserializing, with serde's message: shorthand
//! `{"f": value}`, unknown operators (`$ne`, `$gte`, `$lte`, `$nin`, `$exists`, `$contains`,
//! `$regex`, …), two operators in one comparison, a logical operator beside fields or another
//! logical operator, a value of the wrong shape, mixed types in a list, field names that are
//! not identifiers (so `author.name` is a grammar error), the same field twice in one map.
//!
//! # Passes
//!
//! 1. **Parse** ([`Filter`]'s `Deserialize`, [`Filter::parse_query_param`]): grammar only.
//!    In a JSON body the error is 422 `Failed to deserialize the JSON body into the target
//!    type: <reason>`; in the document list's `metadata` parameter 400 plain text
//!    `Failed to deserialize query string: <reason>`.
//! 2. **Validate** ([`validate`], then [`validate_teq`] once the taxonomy expansion is read):
//!    the pipeline's schema. Errors are [`SchemaError`], all 400 `Schema error`.
//! 3. **Compile** ([`compile`]): a sea-query [`sea_query::Condition`] with every value bound.
//!
//! With `$teq` the service reads the taxonomy between 2 and 3:
//!
//! ```text
//! let typed = filter::validate(&filter, &schema)?;                 // 400 Schema error
//! let expansions = match filter::teq_expansion_query(&typed.teq_starts()) {
//!     Some(query) => TeqExpansions::from_rows(run(query)),          // (5 text columns)
//!     None => TeqExpansions::new(),
//! };
//! filter::validate_teq(&typed, &expansions)?;                       // 400 Schema error
//! let condition = filter::compile(&typed, "fragments", &expansions);
//! ```

mod ast;
mod compile;
mod parse;
mod ranges;
mod teq;
mod validate;

pub use ast::{
    CompareOp, FieldCondition, Filter, LikeOp, MembershipOp, Operation, Scalar, ScalarList,
    ValueKind, is_field_name,
};
pub(crate) use compile::text_array_param;
pub use compile::{compile, compile_flat, typed_field_sql};
pub use teq::{TeqExpansions, TeqStart, teq_expansion_query};
pub use validate::{
    DeclaredType, SchemaError, TypedFilter, unconvertible_integer_fields, validate, validate_teq,
};
