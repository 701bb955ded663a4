//! Pure SQL compilation for Trove.
//!
//! Nothing in this crate performs IO or is async: every function takes what it needs from the
//! database as plain values (a schema, a hierarchy, a cursor) and returns sea-query statements
//! whose values are all bound parameters.

pub mod classification;
pub mod filter;
pub mod hybrid;
pub mod list;
pub mod search;

// The list machinery's parts; `list` re-exports their public items.
mod cursor;
mod like;
mod list_filters;
mod order;
mod pagination;
