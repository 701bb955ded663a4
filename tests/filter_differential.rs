//! Differential test of the metadata filter compiler (`trove_query::filter`) against Postgres.
//!
//! proptest generates random filters over a small schema (`s`, `t` strings, `i` integer, `n`
//! number, `b` boolean), every operator and logical form nested to depth 3; each runs as
//! compiled SQL over one table of generated documents (fields present, null or missing) and
//! the selected ids must equal those of `Rules`, a plain evaluator of the interface's rules
//! written here, independently of the compiler, on the filter's JSON. `$teq` runs through the
//! expansion query on the real `taxonomy_entries` table (migration 0003). Each filter also runs
//! in the flat form (`filter::compile_flat`) that the largest filters compile to, which must
//! select the same rows.
//!
//! Needs `TROVE_TEST_DATABASE_URL`, an admin Postgres URL: each test creates a scratch
//! database `trove_filterdiff_<random>` (byte-order collation, so the evaluator compares
//! strings as Rust does) and drops it at the end. `PROPTEST_CASES` overrides the number of
//! filters (default 3000).

#![expect(clippy::unwrap_used, clippy::expect_used, reason = "tests fail loudly")]

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;
use proptest::strategy::ValueTree as _;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use sea_query::{Alias, Order, PostgresQueryBuilder, Query};
use sea_query_sqlx::SqlxBinder as _;
use serde_json::{Map, Value, json};
use sqlx::{AssertSqlSafe, Connection, PgConnection};
use trove_query::filter::{
    self, Filter, SchemaError, TeqExpansions, TypedFilter, teq_expansion_query,
};
use uuid::Uuid;

// ---- scratch database ---------------------------------------------------------------------

#[path = "support/database.rs"]
mod database;

use database::{admin_url, url_with_db};

/// Runs `body` with a connection to a fresh scratch database (byte-order collation), and
/// drops the database afterwards, also when `body` panics.
fn with_scratch_database(body: impl FnOnce(&tokio::runtime::Runtime, &mut PgConnection)) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let admin = admin_url();
    let name = format!("trove_filterdiff_{}", Uuid::new_v4().simple());
    let mut admin_conn = runtime
        .block_on(PgConnection::connect(&admin))
        .expect("TROVE_TEST_DATABASE_URL reachable");
    runtime
        .block_on(
            sqlx::raw_sql(AssertSqlSafe(format!(
                "CREATE DATABASE {name} TEMPLATE template0 ENCODING 'UTF8' \
                 LOCALE_PROVIDER libc LC_COLLATE 'C' LC_CTYPE 'C'"
            )))
            .execute(&mut admin_conn),
        )
        .expect("create scratch database");
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut conn = runtime
            .block_on(PgConnection::connect(&url_with_db(&admin, &name)))
            .expect("connect scratch database");
        body(&runtime, &mut conn);
        let _ = runtime.block_on(conn.close());
    }));
    let dropped = runtime.block_on(
        sqlx::raw_sql(AssertSqlSafe(format!(
            "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
        )))
        .execute(&mut admin_conn),
    );
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
    dropped.expect("drop scratch database");
}

fn execute(runtime: &tokio::runtime::Runtime, conn: &mut PgConnection, sql: &str) {
    runtime
        .block_on(sqlx::raw_sql(AssertSqlSafe(sql.to_owned())).execute(&mut *conn))
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
}

/// Creates `docs(id, metadata)` and the taxonomy tables of the real migration.
fn create_tables(runtime: &tokio::runtime::Runtime, conn: &mut PgConnection) {
    execute(
        runtime,
        conn,
        "CREATE TABLE docs (id int PRIMARY KEY, metadata jsonb NOT NULL)",
    );
    execute(
        runtime,
        conn,
        include_str!("../migrations/0003_taxonomies.sql"),
    );
}

fn insert_docs(
    runtime: &tokio::runtime::Runtime,
    conn: &mut PgConnection,
    docs: &[Map<String, Value>],
) {
    for (id, metadata) in docs.iter().enumerate() {
        runtime
            .block_on(
                sqlx::query("INSERT INTO docs (id, metadata) VALUES ($1, $2)")
                    .bind(i32::try_from(id).unwrap())
                    .bind(Value::Object(metadata.clone()))
                    .execute(&mut *conn),
            )
            .unwrap();
    }
}

/// Runs the compiled filter: `SELECT id FROM docs WHERE <filter> ORDER BY id`.
fn select_ids(
    runtime: &tokio::runtime::Runtime,
    conn: &mut PgConnection,
    typed: &TypedFilter,
    teq: &TeqExpansions,
) -> Result<Vec<i32>, sqlx::Error> {
    select_ids_with(runtime, conn, filter::compile(typed, "docs", teq))
}

/// Runs a condition: `SELECT id FROM docs WHERE <condition> ORDER BY id`.
fn select_ids_with(
    runtime: &tokio::runtime::Runtime,
    conn: &mut PgConnection,
    condition: sea_query::Condition,
) -> Result<Vec<i32>, sqlx::Error> {
    let (sql, values) = Query::select()
        .column(Alias::new("id"))
        .from(Alias::new("docs"))
        .cond_where(condition)
        .order_by(Alias::new("id"), Order::Asc)
        .build_sqlx(PostgresQueryBuilder);
    runtime.block_on(sqlx::query_scalar_with(AssertSqlSafe(sql), values).fetch_all(&mut *conn))
}

/// Reads the `$teq` expansion of a typed filter, as the service does.
fn read_expansion(
    runtime: &tokio::runtime::Runtime,
    conn: &mut PgConnection,
    typed: &TypedFilter,
) -> TeqExpansions {
    let Some(query) = teq_expansion_query(&typed.teq_starts()) else {
        return TeqExpansions::new();
    };
    let (sql, values) = query.build_sqlx(PostgresQueryBuilder);
    let rows: Vec<(String, String, String, String, String)> = runtime
        .block_on(sqlx::query_as_with(AssertSqlSafe(sql), values).fetch_all(&mut *conn))
        .expect("expansion query runs");
    TeqExpansions::from_rows(rows)
}

// ---- the schema, taxonomies and value pools -----------------------------------------------

fn schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "s": {"type": "string"},
            "t": {"type": ["string", "null"]},
            "i": {"type": "integer"},
            "n": {"type": ["number", "null"]},
            "b": {"type": "boolean"}
        }
    })
}

const T1: &str = "0190a0f1-7f5e-7c3a-9d5b-3a1f2e4d5c01";
const T2: &str = "0190a0f1-7f5e-7c3a-9d5b-3a1f2e4d5c02";
/// Reaches fields that are not declared strings.
const T3: &str = "0190a0f1-7f5e-7c3a-9d5b-3a1f2e4d5c03";
const UNKNOWN_TAXONOMY: &str = "0190a0f1-7f5e-7c3a-9d5b-3a1f2e4d5cff";

/// Taxonomy links `(taxonomy, parent field, parent value, child field, child value)`, unique
/// across taxonomies as in the service; T1 has a cycle, T2 continues paths of T1 (not
/// followed from a T1 start).
const LINKS: &[(&str, &str, &str, &str, &str)] = &[
    (T1, "s", "a", "s", "b"),
    (T1, "s", "b", "t", "a"),
    (T1, "t", "a", "s", "a"),
    (T1, "s", "b", "t", "%"),
    (T1, "t", "%", "t", "é"),
    (T1, "s", "", "s", "_"),
    (T1, "t", "B", "s", "ab"),
    (T2, "s", "a", "t", "b"),
    (T2, "t", "b", "s", "B"),
    (T2, "s", "B", "t", "ab"),
    (T2, "t", "a", "t", "_"),
    (T3, "s", "é", "i", "1"),
    (T3, "s", "\\", "u", "x"),
    (T3, "t", "b", "s", "a"),
];

fn insert_taxonomies(runtime: &tokio::runtime::Runtime, conn: &mut PgConnection) {
    for (n, taxonomy) in [T1, T2, T3].into_iter().enumerate() {
        runtime
            .block_on(
                sqlx::query("INSERT INTO taxonomies (id, name) VALUES ($1, $2)")
                    .bind(Uuid::parse_str(taxonomy).unwrap())
                    .bind(format!("taxonomy {n}"))
                    .execute(&mut *conn),
            )
            .unwrap();
    }
    for (taxonomy, parent_field, parent_value, child_field, child_value) in LINKS {
        runtime
            .block_on(
                sqlx::query(
                    "INSERT INTO taxonomy_entries (id, taxonomy_id, parent_field, parent_value, \
                     child_field, child_value) VALUES ($1, $2, $3, $4, $5, $6)",
                )
                .bind(Uuid::new_v4())
                .bind(Uuid::parse_str(taxonomy).unwrap())
                .bind(parent_field)
                .bind(parent_value)
                .bind(child_field)
                .bind(child_value)
                .execute(&mut *conn),
            )
            .unwrap();
    }
}

/// Strings of up to three characters, LIKE metacharacters and a two-byte letter included.
fn string_value() -> BoxedStrategy<String> {
    prop::collection::vec(
        prop::sample::select(vec!['a', 'b', 'B', '%', '_', '\\', 'é']),
        0..=3,
    )
    .prop_map(|chars| chars.into_iter().collect())
    .boxed()
}

/// LIKE patterns, some ending with an unpaired backslash (a literal backslash for Trove).
fn pattern() -> BoxedStrategy<String> {
    prop::collection::vec(
        prop::sample::select(vec!['a', 'b', 'A', 'B', '%', '%', '_', '_', '\\', 'é']),
        0..=4,
    )
    .prop_map(|chars| chars.into_iter().collect())
    .boxed()
}

fn integer_value() -> BoxedStrategy<i64> {
    prop_oneof![
        6 => -3i64..=3,
        1 => Just(i64::MIN),
        1 => Just(i64::MAX),
        1 => Just(9_007_199_254_740_993),
    ]
    .boxed()
}

/// JSON numbers: halves (so `2.0` beside the integer `2`), integers, extremes.
fn number_value() -> BoxedStrategy<Value> {
    prop_oneof![
        4 => (-6i64..=6).prop_map(|x| json!(x as f64 / 2.0)),
        3 => (-3i64..=3).prop_map(|x| json!(x)),
        1 => Just(json!(0.1)),
        1 => Just(json!(1e300)),
        1 => Just(json!(-5e-324)),
        1 => Just(json!(9_007_199_254_740_993_i64)),
    ]
    .boxed()
}

/// `$teq` starting values: mostly values with taxonomy links.
fn teq_value() -> BoxedStrategy<String> {
    prop_oneof![
        3 => prop::sample::select(vec!["a", "b", "B", "", "%", "é", "\\", "_", "ab"])
            .prop_map(str::to_owned),
        1 => string_value(),
    ]
    .boxed()
}

fn taxonomy_ref() -> BoxedStrategy<String> {
    prop::sample::select(vec![
        T1.to_owned(),
        T1.to_uppercase(),
        T2.to_owned(),
        T3.to_owned(),
        UNKNOWN_TAXONOMY.to_owned(),
        "not-a-uuid".to_owned(),
    ])
    .boxed()
}

// ---- documents ----------------------------------------------------------------------------

fn field_value(field: &str) -> BoxedStrategy<Value> {
    match field {
        "s" | "t" => string_value().prop_map(Value::String).boxed(),
        "i" => integer_value().prop_map(|i| json!(i)).boxed(),
        "n" => number_value(),
        _ => any::<bool>().prop_map(Value::Bool).boxed(),
    }
}

/// `Some(value)`, `Some(null)` or `None` (missing).
fn presence(field: &'static str) -> BoxedStrategy<Option<Value>> {
    prop_oneof![
        6 => field_value(field).prop_map(Some),
        2 => Just(Some(Value::Null)),
        2 => Just(None),
    ]
    .boxed()
}

fn document() -> impl Strategy<Value = Map<String, Value>> {
    (
        presence("s"),
        presence("t"),
        presence("i"),
        presence("n"),
        presence("b"),
    )
        .prop_map(|(s, t, i, n, b)| {
            let mut doc = Map::new();
            for (field, value) in [("s", s), ("t", t), ("i", i), ("n", n), ("b", b)] {
                if let Some(value) = value {
                    doc.insert(field.to_owned(), value);
                }
            }
            doc
        })
}

// ---- filters ------------------------------------------------------------------------------

fn compare_op() -> BoxedStrategy<&'static str> {
    prop::sample::select(vec!["$eq", "$neq", "$gt", "$ge", "$lt", "$le"]).boxed()
}

fn membership_op() -> BoxedStrategy<&'static str> {
    prop::sample::select(vec!["$in", "$not-in"]).boxed()
}

fn op_value(op: &str, value: Value) -> Value {
    let mut object = Map::new();
    object.insert(op.to_owned(), value);
    Value::Object(object)
}

/// A comparison object valid for `field`'s type.
fn comparison(field: &'static str) -> BoxedStrategy<(&'static str, Value)> {
    let comparison = match field {
        "s" | "t" => prop_oneof![
            4 => (compare_op(), string_value()).prop_map(|(op, v)| op_value(op, json!(v))),
            3 => (prop::sample::select(vec!["$like", "$ilike"]), pattern())
                .prop_map(|(op, p)| op_value(op, json!(p))),
            3 => (membership_op(), prop::collection::vec(string_value(), 1..=3))
                .prop_map(|(op, v)| op_value(op, json!(v))),
            3 => (teq_value(), taxonomy_ref())
                .prop_map(|(v, t)| op_value("$teq", json!([v, t]))),
        ]
        .boxed(),
        "i" => prop_oneof![
            2 => (compare_op(), integer_value()).prop_map(|(op, v)| op_value(op, json!(v))),
            1 => (membership_op(), prop::collection::vec(integer_value(), 1..=3))
                .prop_map(|(op, v)| op_value(op, json!(v))),
        ]
        .boxed(),
        "n" => prop_oneof![
            2 => (compare_op(), number_value()).prop_map(|(op, v)| op_value(op, v)),
            1 => (membership_op(), prop::collection::vec(number_value(), 1..=3))
                .prop_map(|(op, v)| op_value(op, Value::Array(v))),
        ]
        .boxed(),
        _ => prop_oneof![
            2 => (compare_op(), any::<bool>()).prop_map(|(op, v)| op_value(op, json!(v))),
            1 => (membership_op(), prop::collection::vec(any::<bool>(), 0..=2))
                .prop_map(|(op, v)| op_value(op, json!(v))),
        ]
        .boxed(),
    };
    comparison.prop_map(move |c| (field, c)).boxed()
}

/// A field map of up to two conditions (`{}` a third of the time).
fn field_map() -> BoxedStrategy<Value> {
    let any_condition = prop_oneof![
        comparison("s"),
        comparison("t"),
        comparison("i"),
        comparison("n"),
        comparison("b"),
    ];
    conditions_map(any_condition.boxed())
}

/// A field map of up to two conditions drawn from `condition`.
fn conditions_map(condition: BoxedStrategy<(&'static str, Value)>) -> BoxedStrategy<Value> {
    prop::collection::vec(condition, 0..=2)
        .prop_map(|conditions| {
            let mut map = Map::new();
            for (field, comparison) in conditions {
                map.entry(field).or_insert(comparison);
            }
            Value::Object(map)
        })
        .boxed()
}

/// Filters nested to depth 3: over every field, or (a quarter of the time) over the integer
/// field alone, the filters whose many copies the compiler turns into a range set test.
fn filter_json() -> impl Strategy<Value = Value> {
    prop_oneof![
        3 => nested(field_map()),
        1 => nested(conditions_map(comparison("i"))),
    ]
}

fn nested(field_map: BoxedStrategy<Value>) -> BoxedStrategy<Value> {
    field_map
        .prop_recursive(3, 48, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..=3).prop_map(|v| json!({"$and": v})),
                prop::collection::vec(inner.clone(), 0..=3).prop_map(|v| json!({"$or": v})),
                inner.prop_map(|f| json!({"$not": f})),
            ]
        })
        .boxed()
}

/// Filters that select what `filter` selects, with 64 copies of each of its comparisons: an
/// `$or` and an `$and` of 64 copies of it (both connectives are idempotent, in three-valued
/// logic too), which the compiler turns into one range set test when `filter` only compares
/// the integer field.
fn copies(filter: &Value) -> [Value; 2] {
    let many = vec![filter.clone(); 64];
    [json!({"$or": many.clone()}), json!({"$and": many})]
}

// ---- the rules, evaluated directly ----------------------------------------------------------

/// The interface's filter rules over one document, in three-valued logic: `None` is
/// "unknown" (a comparison with a missing or null field); a document matches when `Some(true)`.
struct Rules<'a> {
    links: BTreeMap<Uuid, Children<'a>>,
}

/// Within one taxonomy: parent (field, value) → children.
type Children<'a> = BTreeMap<(&'a str, &'a str), Vec<(&'a str, &'a str)>>;

fn and3(a: Option<bool>, b: Option<bool>) -> Option<bool> {
    match (a, b) {
        (Some(false), _) | (_, Some(false)) => Some(false),
        (Some(true), Some(true)) => Some(true),
        _ => None,
    }
}

fn or3(a: Option<bool>, b: Option<bool>) -> Option<bool> {
    match (a, b) {
        (Some(true), _) | (_, Some(true)) => Some(true),
        (Some(false), Some(false)) => Some(false),
        _ => None,
    }
}

/// Kleene AND of all (TRUE when none). Not a short-circuit: unknown does not decide.
fn all3(values: impl IntoIterator<Item = Option<bool>>) -> Option<bool> {
    let mut result = Some(true);
    for value in values {
        result = and3(result, value);
    }
    result
}

/// Kleene OR of all (FALSE when none).
fn any3(values: impl IntoIterator<Item = Option<bool>>) -> Option<bool> {
    let mut result = Some(false);
    for value in values {
        result = or3(result, value);
    }
    result
}

impl<'a> Rules<'a> {
    fn new(links: &'a [(&'a str, &'a str, &'a str, &'a str, &'a str)]) -> Self {
        let mut by_taxonomy: BTreeMap<Uuid, Children<'a>> = BTreeMap::new();
        for (taxonomy, pf, pv, cf, cv) in links {
            by_taxonomy
                .entry(Uuid::parse_str(taxonomy).unwrap())
                .or_default()
                .entry((*pf, *pv))
                .or_default()
                .push((*cf, *cv));
        }
        Self { links: by_taxonomy }
    }

    /// Rule 5: the starting pair and every descendant through the given taxonomy's links.
    fn teq_reach(&self, field: &str, value: &str, taxonomy: &str) -> BTreeSet<(String, String)> {
        let mut reached = BTreeSet::from([(field.to_owned(), value.to_owned())]);
        let Some(links) = Uuid::parse_str(taxonomy)
            .ok()
            .and_then(|id| self.links.get(&id))
        else {
            return reached;
        };
        let mut pending = vec![(field.to_owned(), value.to_owned())];
        while let Some((f, v)) = pending.pop() {
            for (cf, cv) in links.get(&(f.as_str(), v.as_str())).into_iter().flatten() {
                let child = ((*cf).to_owned(), (*cv).to_owned());
                if reached.insert(child.clone()) {
                    pending.push(child);
                }
            }
        }
        reached
    }

    /// Whether every `$teq` of the filter reaches only declared string fields.
    fn teq_fields_valid(&self, filter: &Value) -> bool {
        match filter {
            Value::Object(map) => map.iter().all(|(key, value)| match key.as_str() {
                "$and" | "$or" => value
                    .as_array()
                    .unwrap()
                    .iter()
                    .all(|f| self.teq_fields_valid(f)),
                "$not" => self.teq_fields_valid(value),
                field => match value.get("$teq") {
                    Some(teq) => self
                        .teq_reach(field, teq[0].as_str().unwrap(), teq[1].as_str().unwrap())
                        .iter()
                        .all(|(f, _)| f == "s" || f == "t"),
                    None => true,
                },
            }),
            _ => unreachable!("filters are objects"),
        }
    }

    fn eval(&self, filter: &Value, doc: &Map<String, Value>) -> Option<bool> {
        let map = filter.as_object().unwrap();
        if let Some(filters) = map.get("$and") {
            return all3(
                filters
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|f| self.eval(f, doc)),
            );
        }
        if let Some(filters) = map.get("$or") {
            let filters = filters.as_array().unwrap();
            let is_empty_object = |f: &Value| f.as_object().is_some_and(Map::is_empty);
            // Rule 4.
            if filters.first().is_some_and(is_empty_object) {
                return Some(true);
            }
            return any3(
                filters
                    .iter()
                    .filter(|f| !is_empty_object(f))
                    .map(|f| self.eval(f, doc)),
            );
        }
        if let Some(inner) = map.get("$not") {
            return self.eval(inner, doc).map(|b| !b);
        }
        all3(
            map.iter()
                .map(|(field, comparison)| self.compare(field, comparison, doc)),
        )
    }

    fn compare(&self, field: &str, comparison: &Value, doc: &Map<String, Value>) -> Option<bool> {
        let (op, operand) = comparison.as_object().unwrap().iter().next().unwrap();
        let stored = doc.get(field).filter(|v| !v.is_null());
        // Rule 3: empty lists (boolean fields only) hold or fail for every document.
        if let Some(list) = operand.as_array()
            && list.is_empty()
        {
            return Some(op == "$not-in");
        }
        if op == "$teq" {
            let reached = self.teq_reach(
                field,
                operand[0].as_str().unwrap(),
                operand[1].as_str().unwrap(),
            );
            let mut by_field: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
            for (f, v) in &reached {
                by_field.entry(f).or_default().push(v);
            }
            return any3(by_field.iter().map(|(f, values)| {
                doc.get(*f)
                    .filter(|v| !v.is_null())
                    .map(|v| values.contains(&v.as_str().unwrap()))
            }));
        }
        // Rule 2: a missing or null field satisfies no comparison.
        let stored = stored?;
        Some(match op.as_str() {
            "$like" => like(stored.as_str().unwrap(), operand.as_str().unwrap(), false),
            "$ilike" => like(stored.as_str().unwrap(), operand.as_str().unwrap(), true),
            "$in" => operand
                .as_array()
                .unwrap()
                .iter()
                .any(|v| order(field, stored, v).is_eq()),
            "$not-in" => operand
                .as_array()
                .unwrap()
                .iter()
                .all(|v| order(field, stored, v).is_ne()),
            _ => {
                let ordering = order(field, stored, operand);
                match op.as_str() {
                    "$eq" => ordering.is_eq(),
                    "$neq" => ordering.is_ne(),
                    "$gt" => ordering.is_gt(),
                    "$ge" => ordering.is_ge(),
                    "$lt" => ordering.is_lt(),
                    "$le" => ordering.is_le(),
                    other => unreachable!("operator {other}"),
                }
            }
        })
    }
}

/// Rule 1: the stored value against the filter value, in the field's declared type: strings
/// by bytes (collation C), integers as 64-bit, numbers as doubles (integers converted),
/// booleans false before true.
fn order(field: &str, stored: &Value, value: &Value) -> std::cmp::Ordering {
    match field {
        "s" | "t" => stored.as_str().unwrap().cmp(value.as_str().unwrap()),
        "i" => stored.as_i64().unwrap().cmp(&value.as_i64().unwrap()),
        "n" => stored
            .as_f64()
            .unwrap()
            .partial_cmp(&value.as_f64().unwrap())
            .unwrap(),
        _ => stored.as_bool().unwrap().cmp(&value.as_bool().unwrap()),
    }
}

/// SQL LIKE: `%` any sequence, `_` one character, backslash escapes the next character;
/// case-insensitive folds ASCII letters (ILIKE under collation C).
fn like(text: &str, pattern: &str, case_insensitive: bool) -> bool {
    enum Token {
        Literal(char),
        One,
        Any,
    }
    let fold = |s: &str| {
        if case_insensitive {
            s.to_ascii_lowercase()
        } else {
            s.to_owned()
        }
    };
    let text: Vec<char> = fold(text).chars().collect();
    let mut tokens = Vec::new();
    let mut chars = fold(pattern).chars().collect::<Vec<_>>().into_iter();
    while let Some(c) = chars.next() {
        tokens.push(match c {
            // A final unpaired backslash is a literal backslash.
            '\\' => Token::Literal(chars.next().unwrap_or('\\')),
            '%' => Token::Any,
            '_' => Token::One,
            c => Token::Literal(c),
        });
    }
    // matches[i][j]: tokens[i..] match text[j..].
    let mut matches = vec![vec![false; text.len() + 1]; tokens.len() + 1];
    matches[tokens.len()][text.len()] = true;
    for i in (0..tokens.len()).rev() {
        for j in (0..=text.len()).rev() {
            matches[i][j] = match tokens[i] {
                Token::Any => matches[i + 1][j] || (j < text.len() && matches[i][j + 1]),
                Token::One => j < text.len() && matches[i + 1][j + 1],
                Token::Literal(c) => j < text.len() && text[j] == c && matches[i + 1][j + 1],
            };
        }
    }
    matches[0][0]
}

// ---- the tests ----------------------------------------------------------------------------

fn cases() -> Config {
    let mut config = Config {
        failure_persistence: None,
        ..Config::default()
    };
    if std::env::var_os("PROPTEST_CASES").is_none() {
        config.cases = 3000;
    }
    config
}

#[test]
fn compiled_filters_select_what_the_rules_select() {
    with_scratch_database(|runtime, conn| {
        create_tables(runtime, conn);
        insert_taxonomies(runtime, conn);
        // The documents are the same on every run; the filters are not.
        let mut doc_runner = TestRunner::deterministic();
        let docs: Vec<Map<String, Value>> = (0..200)
            .map(|_| document().new_tree(&mut doc_runner).unwrap().current())
            .collect();
        insert_docs(runtime, conn, &docs);

        let rules = Rules::new(LINKS);
        let schema = schema();
        let conn = RefCell::new(conn);
        let config = cases();
        let cases = config.cases;
        let started = std::time::Instant::now();
        let stats = RefCell::new((0usize, 0usize, 0usize, 0usize));
        let mut runner = TestRunner::new(config);
        let result = runner.run(&filter_json(), |filter_json| {
            let text = filter_json.to_string();
            let parsed: Filter = serde_json::from_str(&text)
                .map_err(|e| TestCaseError::fail(format!("grammar refused {text}: {e}")))?;
            let typed = filter::validate(&parsed, &schema)
                .map_err(|e| TestCaseError::fail(format!("schema refused {text}: {e}")))?;
            let mut conn = conn.borrow_mut();
            let teq = read_expansion(runtime, &mut conn, &typed);
            let teq_valid = rules.teq_fields_valid(&filter_json);
            match filter::validate_teq(&typed, &teq) {
                Ok(()) => prop_assert!(teq_valid, "validate_teq accepted {text}"),
                Err(SchemaError::TeqReachesNonString { .. }) if !teq_valid => {
                    stats.borrow_mut().2 += 1;
                    return Ok(());
                }
                Err(e) => return Err(TestCaseError::fail(format!("{text}: {e}"))),
            }
            let selected = select_ids(runtime, &mut conn, &typed, &teq)
                .map_err(|e| TestCaseError::fail(format!("{text}: {e}")))?;
            // The form the largest filters compile to selects the same rows.
            let flat = select_ids_with(
                runtime,
                &mut conn,
                filter::compile_flat(&typed, "docs", &teq),
            )
            .map_err(|e| TestCaseError::fail(format!("{text} (flat): {e}")))?;
            prop_assert_eq!(&flat, &selected, "flat form of {}", text);
            for copied in copies(&filter_json) {
                let copied_text = copied.to_string();
                let typed = filter::validate(&serde_json::from_value(copied).unwrap(), &schema)
                    .map_err(|e| TestCaseError::fail(format!("schema refused copies: {e}")))?;
                let teq = read_expansion(runtime, &mut conn, &typed);
                let (sql, _) = Query::select()
                    .cond_where(filter::compile(&typed, "docs", &teq))
                    .build(PostgresQueryBuilder);
                if sql.contains("int8multirange") {
                    stats.borrow_mut().3 += 1;
                }
                let rows = select_ids(runtime, &mut conn, &typed, &teq)
                    .map_err(|e| TestCaseError::fail(format!("{copied_text}: {e}")))?;
                prop_assert_eq!(&rows, &selected, "64 copies of {}", text);
            }
            let expected: Vec<i32> = docs
                .iter()
                .enumerate()
                .filter(|(_, doc)| rules.eval(&filter_json, doc) == Some(true))
                .map(|(id, _)| i32::try_from(id).unwrap())
                .collect();
            {
                let mut stats = stats.borrow_mut();
                stats.0 += 1;
                if !selected.is_empty() && selected.len() < docs.len() {
                    stats.1 += 1;
                }
            }
            if selected != expected {
                let differ: Vec<(i32, &Map<String, Value>)> = docs
                    .iter()
                    .enumerate()
                    .map(|(id, doc)| (i32::try_from(id).unwrap(), doc))
                    .filter(|(id, _)| selected.contains(id) != expected.contains(id))
                    .take(5)
                    .collect();
                return Err(TestCaseError::fail(format!(
                    "{text}\nselected {} rows, the rules {}; differing documents: {differ:?}",
                    selected.len(),
                    expected.len()
                )));
            }
            Ok(())
        });
        let (compared, selective, teq_refused, range_sets) = *stats.borrow();
        eprintln!(
            "filter differential: {cases} cases, {compared} compared ({selective} selecting \
             some but not all documents, {range_sets} whose copies compiled to a range set), \
             {teq_refused} refused by validate_teq, in {:.1?}",
            started.elapsed()
        );
        if let Err(failure) = result {
            panic!("{failure}");
        }
        assert!(
            range_sets * 20 > compared,
            "too few filters compiled to range sets: {range_sets} of {compared}"
        );
        assert!(
            selective * 4 > compared,
            "too few selective filters to be meaningful"
        );
    });
}

#[test]
fn examples_of_the_rules() {
    // A few fixed cases, so a regression names the rule it breaks.
    with_scratch_database(|runtime, conn| {
        create_tables(runtime, conn);
        insert_taxonomies(runtime, conn);
        let docs: Vec<Map<String, Value>> = [
            json!({"s": "a", "i": 1, "b": true}),
            json!({"s": null, "i": 2}),
            json!({"i": 3, "b": false}),
            json!({"s": "b", "t": "x"}),
        ]
        .into_iter()
        .map(|v| v.as_object().unwrap().clone())
        .collect();
        insert_docs(runtime, conn, &docs);
        let schema = schema();
        let mut run = |json: &str| -> Vec<i32> {
            let typed = filter::validate(&serde_json::from_str(json).unwrap(), &schema).unwrap();
            let teq = read_expansion(runtime, conn, &typed);
            filter::validate_teq(&typed, &teq).unwrap();
            select_ids(runtime, conn, &typed, &teq).unwrap()
        };
        // Rule 2: missing and null never satisfy a comparison, not even $neq, $not-in, $not.
        assert_eq!(run(r#"{"s": {"$neq": "a"}}"#), [3]);
        assert_eq!(run(r#"{"s": {"$not-in": ["a"]}}"#), [3]);
        assert_eq!(run(r#"{"$not": {"s": {"$eq": "a"}}}"#), [3]);
        // ... but a $not around an $and whose other condition fails is satisfied.
        assert_eq!(
            run(r#"{"$not": {"$and": [{"s": {"$eq": "a"}}, {"i": {"$eq": 1}}]}}"#),
            [1, 2, 3]
        );
        // Rule 3: empty lists on booleans.
        assert_eq!(run(r#"{"b": {"$in": []}}"#), Vec::<i32>::new());
        assert_eq!(run(r#"{"b": {"$not-in": []}}"#), [0, 1, 2, 3]);
        // Booleans order false before true.
        assert_eq!(run(r#"{"b": {"$gt": false}}"#), [0]);
        // Rule 4: {} first in $or matches everything, later nothing.
        assert_eq!(run(r#"{"$or": [{}, {"i": {"$eq": 1}}]}"#), [0, 1, 2, 3]);
        assert_eq!(run(r#"{"$or": [{"i": {"$eq": 1}}, {}]}"#), [0]);
        assert_eq!(run(r#"{"$or": []}"#), Vec::<i32>::new());
        assert_eq!(run(r#"{"$and": []}"#), [0, 1, 2, 3]);
        // Rule 5: descendants across fields, through the given taxonomy only.
        let teq = |value: &str, taxonomy: &str| {
            format!(r#"{{"s": {{"$teq": ["{value}", "{taxonomy}"]}}}}"#)
        };
        assert_eq!(run(&teq("a", T1)), [0, 3]); // a → b (s), and b → t:a, t:% …
        assert_eq!(run(&teq("b", T1)), [0, 3]); // b → t:a → s:a (cycle)
        assert_eq!(run(&teq("a", "not-a-uuid")), [0]);
        assert_eq!(run(&teq("a", UNKNOWN_TAXONOMY)), [0]);
        assert_eq!(run(&teq("zzz", T1)), Vec::<i32>::new());
        // Ancestors do not match: nothing leads to s:a in T2.
        assert_eq!(run(&teq("B", T2)), Vec::<i32>::new());
    });
}

/// The compiled expressions read any stored JSON without failing: a value of another JSON
/// type than the declared one (as another pipeline may store under the same name) reads as
/// no value, or as what its text converts to (`"yes"` as true, as Postgres reads booleans),
/// and an integer written `5.0` as the number it is. Rule 6 (such a value makes
/// filters on the field fail) is the service's, from its record of those values
/// (`tests/api/pipelines.rs`). Integer filter values beyond 64 bits are refused by the
/// database.
#[test]
fn stored_values_never_fail_and_out_of_range_filter_values_are_refused() {
    with_scratch_database(|runtime, conn| {
        create_tables(runtime, conn);
        let docs: Vec<Map<String, Value>> = [
            json!({"i": 1, "s": "a", "n": 1.5, "b": true}),
            json!({"i": 5.0, "s": "b"}),
            json!({"i": "one", "s": 2, "n": "x", "b": "yes"}),
            json!({"i": 99_999_999_999_999_999_999.0_f64}),
        ]
        .into_iter()
        .map(|v| v.as_object().unwrap().clone())
        .collect();
        insert_docs(runtime, conn, &docs);
        let schema = schema();
        let mut run = |json: &str| {
            let typed = filter::validate(&serde_json::from_str(json).unwrap(), &schema).unwrap();
            select_ids(runtime, conn, &typed, &TeqExpansions::new())
        };
        assert_eq!(run(r#"{"i": {"$eq": 1}}"#).unwrap(), [0]);
        assert_eq!(run(r#"{"i": {"$eq": 5}}"#).unwrap(), [1]);
        assert_eq!(run(r#"{"i": {"$gt": 2}}"#).unwrap(), [1, 3]);
        assert_eq!(run(r#"{"n": {"$lt": 2}}"#).unwrap(), [0]);
        assert_eq!(run(r#"{"b": {"$eq": true}}"#).unwrap(), [0, 2]);
        assert_eq!(run(r#"{"b": {"$eq": false}}"#).unwrap(), Vec::<i32>::new());
        assert_eq!(run(r#"{"b": {"$not-in": []}}"#).unwrap(), [0, 1, 2, 3]);
        assert_eq!(run(r#"{"s": {"$eq": "b"}}"#).unwrap(), [1]);
        // An integer above 64 bits is valid grammar and schema, refused by the database.
        let error = run(r#"{"i": {"$eq": 9223372036854775808}}"#)
            .unwrap_err()
            .to_string();
        assert!(error.contains("out of range for type bigint"), "{error}");
        let error = run(r#"{"i": {"$in": [1, 9223372036854775808]}}"#)
            .unwrap_err()
            .to_string();
        assert!(error.contains("out of range for type bigint"), "{error}");
    });
}

#[test]
fn metadata_indexes_serve_compiled_filters() {
    with_scratch_database(|runtime, conn| {
        create_tables(runtime, conn);
        // The service's own index expressions (src/store/indexes.rs).
        for (field, declared) in [
            ("s", "string"),
            ("i", "integer"),
            ("n", "number"),
            ("b", "boolean"),
        ] {
            let expression =
                trove::store::indexes::typed_field_expression(field, declared).unwrap();
            execute(
                runtime,
                conn,
                &format!("CREATE INDEX docs_{field}_idx ON docs (({expression}))"),
            );
        }
        execute(runtime, conn, "ANALYZE docs");
        execute(runtime, conn, "SET enable_seqscan = off");
        let schema = schema();
        for mode in ["force_custom_plan", "force_generic_plan"] {
            execute(runtime, conn, &format!("SET plan_cache_mode = {mode}"));
            for (json, index) in [
                (r#"{"s": {"$eq": "a"}}"#, "docs_s_idx"),
                (r#"{"s": {"$in": ["a", "b"]}}"#, "docs_s_idx"),
                (r#"{"i": {"$gt": 1}}"#, "docs_i_idx"),
                (r#"{"i": {"$in": [1, 2]}}"#, "docs_i_idx"),
                (r#"{"n": {"$le": 2.5}}"#, "docs_n_idx"),
                (r#"{"b": {"$eq": true}}"#, "docs_b_idx"),
            ] {
                let typed =
                    filter::validate(&serde_json::from_str(json).unwrap(), &schema).unwrap();
                let (sql, values) = Query::select()
                    .column(Alias::new("id"))
                    .from(Alias::new("docs"))
                    .cond_where(filter::compile(&typed, "docs", &TeqExpansions::new()))
                    .build_sqlx(PostgresQueryBuilder);
                let plan: Vec<String> = runtime
                    .block_on(
                        sqlx::query_scalar_with(AssertSqlSafe(format!("EXPLAIN {sql}")), values)
                            .fetch_all(&mut *conn),
                    )
                    .unwrap();
                let plan = plan.join("\n");
                assert!(plan.contains(index), "{mode} {json}:\n{plan}");
            }
        }
    });
}
