//! The list request as a whole: parsing the query string, the page and count SELECTs, and the
//! page envelope built from the fetched rows.

use sea_query::{Asterisk, Expr, Func, SelectStatement};
use serde_json::{Map, Value};

use crate::cursor::{decode_cursor, encode_cursor};
use crate::list::{Cursor, ListQueryError, ListRequest, ListSpec, OrderField, Page, PageRequest};
use crate::list_filters::{FilterCollector, apply_filters};
use crate::order::{
    Side, apply_order, cursor_fits, default_order, keyset_condition, order_by_json, parse_order,
};

/// Page size when neither `first`/`last` nor `limit` is given (interface §Limits).
pub const DEFAULT_PAGE_SIZE: u64 = 25;

/// The largest LIMIT/OFFSET bound: PostgreSQL takes `bigint`, and the sqlx binding of an
/// unsigned value above `i64::MAX` panics, so larger requests are clamped (same result).
const MAX_BOUND: u64 = i64::MAX.unsigned_abs();

/// The decoded `(name, value)` pairs of a query string (`application/x-www-form-urlencoded`:
/// `+` is a space, invalid UTF-8 replaced), in order; empty pieces are skipped and a piece
/// without `=` has an empty value.
fn query_pairs(raw: &str) -> form_urlencoded::Parse<'_> {
    form_urlencoded::parse(raw.as_bytes())
}

fn duplicate(name: &str) -> ListQueryError {
    // serde's derive wording, which the interface's `Failed to deserialize query string`
    // message carries.
    ListQueryError::QueryString(format!("duplicate field `{name}`"))
}

/// Stores a parameter that may appear once. The duplicate is detected before the value is
/// parsed, as a derived deserializer does.
fn set_once<T>(
    slot: &mut Option<T>,
    name: &str,
    raw: &str,
    parse: impl FnOnce(&str) -> Result<T, String>,
) -> Result<(), ListQueryError> {
    if slot.is_some() {
        return Err(duplicate(name));
    }
    let value =
        parse(raw).map_err(|reason| ListQueryError::QueryString(format!("{name}: {reason}")))?;
    *slot = Some(value);
    Ok(())
}

fn parse_size(raw: &str) -> Result<u64, String> {
    raw.parse::<u64>().map_err(|e| e.to_string())
}

/// The pagination parameters as given.
#[derive(Default)]
struct PaginationParams {
    first: Option<u64>,
    after: Option<String>,
    last: Option<u64>,
    before: Option<String>,
    limit: Option<u64>,
    offset: Option<u64>,
    count: Option<bool>,
}

impl PaginationParams {
    /// Takes the parameter if it is a pagination parameter; `Ok(false)` otherwise.
    fn offer(&mut self, name: &str, raw: &str) -> Result<bool, ListQueryError> {
        let text = |s: &str| Ok(s.to_owned());
        match name {
            "first" => set_once(&mut self.first, name, raw, parse_size)?,
            "last" => set_once(&mut self.last, name, raw, parse_size)?,
            "limit" => set_once(&mut self.limit, name, raw, parse_size)?,
            "offset" => set_once(&mut self.offset, name, raw, parse_size)?,
            "after" => set_once(&mut self.after, name, raw, text)?,
            "before" => set_once(&mut self.before, name, raw, text)?,
            "count" => set_once(&mut self.count, name, raw, |s| {
                s.parse::<bool>().map_err(|e| e.to_string())
            })?,
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// Chooses the mode and checks the combination (interface rule 2) and the cursor.
    fn resolve(self, spec: &ListSpec, order: &[OrderField]) -> Result<PageRequest, ListQueryError> {
        let Self {
            first,
            after,
            last,
            before,
            limit,
            offset,
            count: _,
        } = self;
        let cursor_mode = first.is_some() || after.is_some() || last.is_some() || before.is_some();
        let offset_mode = limit.is_some() || offset.is_some();
        if cursor_mode && offset_mode {
            return Err(ListQueryError::Pagination);
        }
        if offset_mode {
            return Ok(PageRequest::Offset {
                limit: limit.unwrap_or(DEFAULT_PAGE_SIZE),
                offset: offset.unwrap_or(0),
            });
        }
        let forward = first.is_some() || after.is_some();
        let backward = last.is_some() || before.is_some();
        if forward && backward {
            // first+last, after+before, after+last, before+first: no single direction.
            return Err(ListQueryError::Pagination);
        }
        let decode = |raw: Option<String>| -> Result<Option<Cursor>, ListQueryError> {
            let Some(raw) = raw else { return Ok(None) };
            let cursor = decode_cursor(&raw)?;
            if cursor_fits(spec, order, &cursor) {
                Ok(Some(cursor))
            } else {
                Err(ListQueryError::Pagination)
            }
        };
        if backward {
            Ok(PageRequest::Cursor {
                first: None,
                after: None,
                last: Some(last.unwrap_or(DEFAULT_PAGE_SIZE)),
                before: decode(before)?,
            })
        } else {
            Ok(PageRequest::Cursor {
                first: Some(first.unwrap_or(DEFAULT_PAGE_SIZE)),
                after: decode(after)?,
                last: None,
                before: None,
            })
        }
    }
}

/// Parses the query string of a list operation.
///
/// `raw_query` is the query string as received (percent-encoded, `+` for space). Names in
/// `reserved` belong to the operation and are skipped; names that are neither pagination,
/// `order_by` nor a filter of `spec` are ignored (interface rule 10).
///
/// Errors are reported in this precedence: a malformed or duplicated parameter
/// ([`ListQueryError::QueryString`], first in request order, as a deserializer would), then
/// `order_by` ([`ListQueryError::InvalidOrderBy`], every rejected value), then pagination
/// ([`ListQueryError::Pagination`]) — a cursor can only be checked against a valid order.
pub fn parse_list_query(
    spec: &ListSpec,
    raw_query: Option<&str>,
    reserved: &[&str],
) -> Result<ListRequest, ListQueryError> {
    let mut pagination = PaginationParams::default();
    let mut order_values: Vec<String> = Vec::new();
    let mut filters = FilterCollector::new(spec);
    for (name, value) in query_pairs(raw_query.unwrap_or("")) {
        if reserved.contains(&name.as_ref()) {
            continue;
        }
        if value.contains('\0') {
            // Postgres text cannot hold U+0000: no stored value can equal or contain it.
            return Err(ListQueryError::QueryString(format!(
                "{name}: the NUL character (U+0000) is not allowed"
            )));
        }
        if name == "order_by" {
            order_values.push(value.into_owned());
        } else if !pagination.offer(&name, &value)? {
            // `false` (not a filter either) means an unknown parameter: ignored.
            filters.offer(&name, &value)?;
        }
    }
    let explicit_order = !order_values.is_empty();
    let order_by = if explicit_order {
        parse_order(spec, &order_values).map_err(ListQueryError::InvalidOrderBy)?
    } else {
        default_order(spec)
    };
    let count = pagination.count.unwrap_or(false);
    let page = pagination.resolve(spec, &order_by)?;
    let (filters, query_info) = filters.finish();
    Ok(ListRequest {
        page,
        count,
        order_by,
        explicit_order,
        filters,
        query_info,
    })
}

/// LIMIT of a cursor page: one extra row tells whether another page follows.
fn fetch_limit(size: u64) -> u64 {
    if size == 0 {
        0
    } else {
        size.min(MAX_BOUND - 1) + 1
    }
}

/// The SELECT of one page: `base` (FROM, columns, the service's own WHERE) plus the filters,
/// the keyset condition of the cursor, the ORDER BY and the LIMIT (and OFFSET).
///
/// Any ORDER BY already on `base` is replaced: the keyset only works with exactly the list's
/// order. `base` must express its WHERE with `and_where`/`cond_where` (sea-query panics when
/// those are mixed with `and_or_where`).
pub fn build_page_query(
    spec: &ListSpec,
    req: &ListRequest,
    base: SelectStatement,
) -> SelectStatement {
    let mut query = base;
    apply_filters(spec, &req.filters, &mut query);
    query.clear_order_by();
    match &req.page {
        PageRequest::Offset { limit, offset } => {
            apply_order(spec, &req.order_by, false, &mut query);
            query
                .limit((*limit).min(MAX_BOUND))
                .offset((*offset).min(MAX_BOUND));
        }
        PageRequest::Cursor {
            first,
            after,
            last,
            before,
        } => {
            if let Some(cursor) = after {
                query.cond_where(keyset_condition(spec, &req.order_by, cursor, Side::After));
            }
            if let Some(cursor) = before {
                query.cond_where(keyset_condition(spec, &req.order_by, cursor, Side::Before));
            }
            // `last` pages are read backwards from the end (or from `before`).
            let (size, backward) = match (first, last) {
                (Some(n), _) => (*n, false),
                (None, Some(n)) => (*n, true),
                (None, None) => (DEFAULT_PAGE_SIZE, false),
            };
            apply_order(spec, &req.order_by, backward, &mut query);
            query.limit(fetch_limit(size));
        }
    }
    query
}

/// `SELECT COUNT(*)` over `base` and the filters, for `page_info.count`: the selected columns
/// of `base` are replaced; no cursor, order or limit applies.
pub fn build_count_query(
    spec: &ListSpec,
    req: &ListRequest,
    base: SelectStatement,
) -> SelectStatement {
    let mut query = base;
    apply_filters(spec, &req.filters, &mut query);
    query
        .clear_selects()
        .clear_order_by()
        .expr(Func::count(Expr::col(Asterisk)));
    query
}

/// The cursor of one API object: its values of the order fields (null when absent).
fn cursor_of(order: &[OrderField], row: &Value) -> Value {
    let values: Vec<Value> = order
        .iter()
        .map(|o| row.get(o.field).cloned().unwrap_or(Value::Null))
        .collect();
    Value::String(encode_cursor(&values))
}

fn to_usize(n: u64) -> usize {
    usize::try_from(n).unwrap_or(usize::MAX)
}

/// Builds the page from the rows the page query returned (API objects keyed by field name,
/// in SQL order, including the possible extra row; reversed for `last` pages).
///
/// Cursor mode: `has_next`/`has_prev` follow interface rules 3 and 5 (`has_prev` is true
/// whenever `after` was given; symmetrically `has_next` whenever `before` was given);
/// `before`/`after` are the cursors of the first and last objects, absent on an empty page.
/// `page_info.count` is left to the caller.
pub fn finish_page(_spec: &ListSpec, req: &ListRequest, rows: Vec<Value>) -> Page {
    let mut rows = rows;
    let mut page_info = Map::new();
    match &req.page {
        PageRequest::Offset { limit, offset } => {
            page_info.insert("limit".to_owned(), Value::from(*limit));
            page_info.insert("offset".to_owned(), Value::from(*offset));
        }
        PageRequest::Cursor {
            first,
            after,
            last,
            before,
        } => {
            let (has_next, has_prev) = match (first, last) {
                (None, Some(n)) => {
                    let n = to_usize(*n);
                    let more = rows.len() > n;
                    rows.truncate(n);
                    rows.reverse();
                    (before.is_some(), n == 0 || more)
                }
                (first, _) => {
                    let n = to_usize(first.unwrap_or(DEFAULT_PAGE_SIZE));
                    let more = rows.len() > n;
                    rows.truncate(n);
                    (n == 0 || more, after.is_some())
                }
            };
            if let (Some(first_row), Some(last_row)) = (rows.first(), rows.last()) {
                page_info.insert("before".to_owned(), cursor_of(&req.order_by, first_row));
                page_info.insert("after".to_owned(), cursor_of(&req.order_by, last_row));
            }
            page_info.insert("has_next".to_owned(), Value::Bool(has_next));
            page_info.insert("has_prev".to_owned(), Value::Bool(has_prev));
        }
    }
    page_info.insert(
        "order_by".to_owned(),
        order_by_json(&req.order_by, req.explicit_order),
    );
    Page {
        data: rows,
        page_info,
    }
}
