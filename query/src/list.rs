//! List machinery shared by every list operation: query-string parsing (pagination, `count`,
//! `order_by`, field filters), cursor encoding and the SQL of one page.
//!
//! CONTRACT (implemented in submodules; the service depends on exactly these items):
//!
//! ```text
//! parse_list_query(spec, raw_query, reserved) -> Result<ListRequest, ListQueryError>
//! build_page_query(spec, &ListRequest, base: SelectStatement) -> SelectStatement
//! build_count_query(spec, &ListRequest, base: SelectStatement) -> SelectStatement
//! finish_page(spec, &ListRequest, rows: Vec<serde_json::Value>) -> Page
//! encode_cursor(&[serde_json::Value]) -> String
//! decode_cursor(&str) -> Result<Cursor, ListQueryError>
//! ```
//!
//! The parts live in `cursor` (cursor encoding), `list_filters` (field filters and
//! `query_info`), `order` (`order_by`, ORDER BY, keyset conditions) and `pagination` (the
//! request as a whole); this module re-exports what the service uses.

use serde_json::{Map, Value};

pub use crate::cursor::{decode_cursor, encode_cursor};
pub use crate::pagination::{
    DEFAULT_PAGE_SIZE, build_count_query, build_page_query, finish_page, parse_list_query,
};

/// The SQL type of a filterable or sortable field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldKind {
    /// `uuid` column; filter values must parse as UUIDs.
    Uuid,
    /// `text` column.
    Text,
    /// `boolean` column; filter values `true` / `false`.
    Bool,
    /// `timestamptz` column; filter values RFC 3339 with `Z` or an explicit offset.
    Timestamp,
    /// `bigint` column.
    Integer,
}

/// Which filter forms a field accepts as query parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FilterOps {
    /// `field=value`.
    pub eq: bool,
    /// `field$contains=value` (repeatable, all must match; `%` and `_` act as wildcards, a
    /// backslash is literal).
    pub contains: bool,
    /// `field$startswith=value`.
    pub startswith: bool,
    /// `field$gt`, `field$ge`, `field$lt`, `field$le`.
    pub compare: bool,
}

impl FilterOps {
    /// No filter at all (field only sortable).
    pub const NONE: Self = Self {
        eq: false,
        contains: false,
        startswith: false,
        compare: false,
    };
    /// Equality only.
    pub const EQ: Self = Self {
        eq: true,
        contains: false,
        startswith: false,
        compare: false,
    };
    /// Equality and `$contains` (e.g. `description`).
    pub const EQ_CONTAINS: Self = Self {
        eq: true,
        contains: true,
        startswith: false,
        compare: false,
    };
    /// The "‡" set: equality, `$contains`, `$startswith`, comparisons (e.g. `name`).
    pub const TEXT_ALL: Self = Self {
        eq: true,
        contains: true,
        startswith: true,
        compare: true,
    };
    /// The "†" set: equality and comparisons (timestamps).
    pub const EQ_COMPARE: Self = Self {
        eq: true,
        contains: false,
        startswith: false,
        compare: true,
    };
}

/// One field of a listed resource.
#[derive(Debug, Clone, Copy)]
pub struct FieldSpec {
    /// Name in the API (query parameter prefix, `order_by` value, key in the JSON object).
    pub name: &'static str,
    /// Column in `ListSpec::table`.
    pub column: &'static str,
    pub kind: FieldKind,
    /// Whether the column may hold NULL (affects keyset conditions).
    pub nullable: bool,
    pub filters: FilterOps,
    /// Whether `order_by` accepts this field.
    pub sortable: bool,
}

impl FieldSpec {
    /// A field whose column has the field's name.
    pub const fn new(
        name: &'static str,
        kind: FieldKind,
        nullable: bool,
        filters: FilterOps,
        sortable: bool,
    ) -> Self {
        Self {
            name,
            column: name,
            kind,
            nullable,
            filters,
            sortable,
        }
    }

    /// `id`: equality, sortable.
    pub const ID: Self = Self::new("id", FieldKind::Uuid, false, FilterOps::EQ, true);
    /// `name`: the full text filter set ("‡"), sortable.
    pub const NAME: Self = Self::new("name", FieldKind::Text, false, FilterOps::TEXT_ALL, true);
    /// `description`: equality and `$contains`, nullable, not sortable.
    pub const DESCRIPTION: Self = Self::new(
        "description",
        FieldKind::Text,
        true,
        FilterOps::EQ_CONTAINS,
        false,
    );
    /// `created_at`: equality and comparisons ("†"), sortable.
    pub const CREATED_AT: Self = Self::new(
        "created_at",
        FieldKind::Timestamp,
        false,
        FilterOps::EQ_COMPARE,
        true,
    );
    /// `updated_at`: equality and comparisons ("†"), sortable.
    pub const UPDATED_AT: Self = Self::new(
        "updated_at",
        FieldKind::Timestamp,
        false,
        FilterOps::EQ_COMPARE,
        true,
    );
}

/// Static description of one list operation.
#[derive(Debug, Clone, Copy)]
pub struct ListSpec {
    /// Table (or alias) the fields' columns belong to; columns are qualified with it.
    pub table: &'static str,
    pub fields: &'static [FieldSpec],
    /// `query_info` lists every filter of the operation, `null` (or `[]` for repeatable ones)
    /// when unset (the embedding provider list).
    pub echo_unset_filters: bool,
    /// Default order when no `order_by` is given: field names, ascending (normally `["id"]`).
    pub default_order: &'static [&'static str],
}

/// A sort key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OrderField {
    pub field: &'static str,
    pub descending: bool,
}

/// How a page is selected.
#[derive(Debug, Clone, PartialEq)]
pub enum PageRequest {
    /// Cursor mode. Exactly one of `first` / `last` is set (`first` 25 when neither was given).
    Cursor {
        first: Option<u64>,
        after: Option<Cursor>,
        last: Option<u64>,
        before: Option<Cursor>,
    },
    /// Offset mode (`limit` default 25, `offset` default 0).
    Offset { limit: u64, offset: u64 },
}

/// A decoded cursor: the values of the `order_by` fields of one object, in order.
#[derive(Debug, Clone, PartialEq)]
pub struct Cursor(pub Vec<Value>);

/// One field filter from the query string, already type-checked.
#[derive(Debug, Clone, PartialEq)]
pub struct FieldFilter {
    pub field: &'static str,
    pub op: FilterOp,
    pub value: Value,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FilterOp {
    Eq,
    Contains,
    StartsWith,
    Gt,
    Ge,
    Lt,
    Le,
}

/// A parsed list request.
#[derive(Debug, Clone, PartialEq)]
pub struct ListRequest {
    pub page: PageRequest,
    pub count: bool,
    /// The effective order (the explicit `order_by`, else `ListSpec::default_order`).
    pub order_by: Vec<OrderField>,
    /// Whether `order_by` was given (`page_info.order_by` is null otherwise).
    pub explicit_order: bool,
    pub filters: Vec<FieldFilter>,
    /// The envelope's `query_info`.
    pub query_info: Map<String, Value>,
}

/// Why a list query string was refused. The service maps these to the interface's responses.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ListQueryError {
    /// 400 plain text `Failed to deserialize query string: <reason>`.
    #[error("Failed to deserialize query string: {0}")]
    QueryString(String),
    /// 400 JSON `Pagination error`.
    #[error("Pagination error")]
    Pagination,
    /// 400 JSON `Invalid order_by parameter`, details = the rejected values as sent.
    #[error("Invalid order_by parameter")]
    InvalidOrderBy(Vec<String>),
}

/// One page, ready to be wrapped in the list envelope (`count` is added by the caller).
#[derive(Debug, Clone, PartialEq)]
pub struct Page {
    pub data: Vec<Value>,
    /// `page_info` without `count`.
    pub page_info: Map<String, Value>,
}
