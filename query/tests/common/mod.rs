//! Test specs shared by the list tests.

#![allow(
    dead_code,
    reason = "included by several test crates, each using a part of it"
)]

use trove_query::list::{FieldKind, FieldSpec, FilterOps, ListSpec};

/// The API-key list (addendum §4).
pub const API_KEY_FIELDS: &[FieldSpec] = &[
    FieldSpec::ID,
    FieldSpec::NAME,
    FieldSpec::DESCRIPTION,
    FieldSpec::new("active", FieldKind::Bool, false, FilterOps::EQ, false),
    FieldSpec::new(
        "expiration",
        FieldKind::Timestamp,
        true,
        FilterOps::EQ_COMPARE,
        true,
    ),
    FieldSpec::CREATED_AT,
    FieldSpec::UPDATED_AT,
];

pub const API_KEYS: ListSpec = ListSpec {
    table: "api_keys",
    fields: API_KEY_FIELDS,
    echo_unset_filters: false,
    default_order: &["id"],
};

/// Same fields, echoing unset filters like the embedding-provider list.
pub const API_KEYS_ECHO: ListSpec = ListSpec {
    echo_unset_filters: true,
    ..API_KEYS
};

/// A list with an integer field (like fragments' `order_id`), default order on it.
pub const FRAGMENTS: ListSpec = ListSpec {
    table: "fragments",
    fields: &[
        FieldSpec::new(
            "order_id",
            FieldKind::Integer,
            false,
            FilterOps::EQ_COMPARE,
            true,
        ),
        FieldSpec {
            name: "id",
            column: "fragment_id",
            kind: FieldKind::Uuid,
            nullable: false,
            filters: FilterOps::NONE,
            sortable: true,
        },
    ],
    echo_unset_filters: false,
    default_order: &["order_id"],
};

pub const ID1: &str = "0190a0f1-7f5e-7c3a-9d5b-3a1f2e4d5c6b";
pub const ID2: &str = "0190a0f1-7f5e-7c3a-9d5b-3a1f2e4d5c6c";
