//! `$teq`: a value or any value beneath it in a taxonomy (rule 5).
//!
//! The expansion is read at search time, before compiling: the service runs
//! [`teq_expansion_query`] for the filter's [`TeqStart`]s, collects the rows into
//! [`TeqExpansions`], checks them with [`super::validate_teq`] and passes them to
//! [`super::compile`], which turns each `$teq` into an OR over the fields reached of
//! `(metadata ->> 'f') = ANY(values of f)`.
//!
//! Decisions:
//! - The walk follows the links of the given taxonomy only. Links are unique across
//!   taxonomies, so a link held by another taxonomy is not followed even when it continues a
//!   path; naming a taxonomy needs no permission on it (addendum §8).
//! - The walk goes from parent to child at any depth and across fields; ancestors and
//!   siblings are never reached. Values compare exactly (case-sensitive).
//! - Cycles are allowed: the recursive CTE uses `UNION` (not `UNION ALL`), so each
//!   (start, field, value) row is produced once and the walk ends.
//! - A taxonomy identifier that is not a UUID, an unknown taxonomy, or a value without
//!   entries reaches nothing but the starting value, which always matches.

use std::collections::{BTreeMap, BTreeSet};

use sea_query::{
    Alias, Asterisk, CommonTableExpression, Expr, ExprTrait as _, Query, UnionType, Value,
    ValueTuple, WithClause, WithQuery,
};
use uuid::Uuid;

/// The name of the recursive CTE.
const REACH: &str = "teq_reach";
/// The taxonomy link table (migrations/0003_taxonomies.sql).
const ENTRIES: &str = "taxonomy_entries";

/// Where a `$teq` starts: its field and `[value, taxonomy identifier]` as the filter gives
/// them.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TeqStart {
    pub field: String,
    pub value: String,
    /// As written in the filter; it need not be a valid identifier.
    pub taxonomy_id: String,
}

/// For each `$teq` starting point, the (field, value) pairs its taxonomy reaches.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TeqExpansions {
    reached: BTreeMap<TeqStart, BTreeMap<String, BTreeSet<String>>>,
}

impl TeqExpansions {
    /// No expansion: every `$teq` matches its starting value only.
    pub fn new() -> Self {
        Self::default()
    }

    /// Collects the rows of [`teq_expansion_query`]:
    /// `(start_field, start_value, taxonomy_id, field, value)`.
    pub fn from_rows<I>(rows: I) -> Self
    where
        I: IntoIterator<Item = (String, String, String, String, String)>,
    {
        let mut expansions = Self::new();
        for (start_field, start_value, taxonomy_id, field, value) in rows {
            expansions.insert(
                TeqStart {
                    field: start_field,
                    value: start_value,
                    taxonomy_id,
                },
                field,
                value,
            );
        }
        expansions
    }

    /// Records that `start` reaches `value` of `field`.
    pub fn insert(&mut self, start: TeqStart, field: String, value: String) {
        self.reached
            .entry(start)
            .or_default()
            .entry(field)
            .or_default()
            .insert(value);
    }

    /// The values `start` matches, by field: the starting value and everything recorded for
    /// it.
    pub fn reached(&self, start: &TeqStart) -> BTreeMap<String, BTreeSet<String>> {
        let mut reached = self.reached.get(start).cloned().unwrap_or_default();
        reached
            .entry(start.field.clone())
            .or_default()
            .insert(start.value.clone());
        reached
    }
}

/// The statement reading the expansion of `starts` from `taxonomy_entries`: rows
/// `(start_field, start_value, taxonomy_id, field, value)`, the starting pair included, each
/// once. `None` when no start names a taxonomy that can exist (no `$teq`, or identifiers that
/// are not UUIDs): nothing needs to be read.
///
/// ```text
/// WITH RECURSIVE teq_reach (start_field, start_value, taxonomy_id, taxonomy, field, value) AS (
///     SELECT * FROM (VALUES ($1, $2, $3, $4, $5, $6), …) AS teq_start
///     UNION
///     SELECT r.start_field, r.start_value, r.taxonomy_id, r.taxonomy, e.child_field, e.child_value
///     FROM teq_reach r JOIN taxonomy_entries e
///       ON e.taxonomy_id = r.taxonomy AND e.parent_field = r.field AND e.parent_value = r.value
/// )
/// SELECT start_field, start_value, taxonomy_id, field, value FROM teq_reach
/// ```
pub fn teq_expansion_query(starts: &[TeqStart]) -> Option<WithQuery> {
    let mut seeds: Vec<ValueTuple> = Vec::new();
    let mut seen: BTreeSet<&TeqStart> = BTreeSet::new();
    for start in starts {
        // The identifier is compared with a `uuid` column; one that does not parse cannot
        // name a taxonomy, and binding it would make the statement fail.
        let Ok(taxonomy) = Uuid::parse_str(&start.taxonomy_id) else {
            continue;
        };
        // No stored value holds U+0000 (nor can a bound one): such a start reaches nothing.
        if start.value.contains('\0') {
            continue;
        }
        if !seen.insert(start) {
            continue;
        }
        seeds.push(ValueTuple::Many(vec![
            Value::from(start.field.clone()),
            Value::from(start.value.clone()),
            Value::from(start.taxonomy_id.clone()),
            Value::from(taxonomy),
            Value::from(start.field.clone()),
            Value::from(start.value.clone()),
        ]));
    }
    if seeds.is_empty() {
        return None;
    }

    let reach = Alias::new(REACH);
    let entries = Alias::new(ENTRIES);
    let reach_col = |column: &str| Expr::col((reach.clone(), Alias::new(column)));
    let entry_col = |column: &str| Expr::col((entries.clone(), Alias::new(column)));

    let mut walk = Query::select();
    walk.exprs([
        reach_col("start_field"),
        reach_col("start_value"),
        reach_col("taxonomy_id"),
        reach_col("taxonomy"),
        entry_col("child_field"),
        entry_col("child_value"),
    ])
    .from(reach.clone())
    .inner_join(
        entries.clone(),
        entry_col("taxonomy_id")
            .equals((reach.clone(), Alias::new("taxonomy")))
            .and(entry_col("parent_field").equals((reach.clone(), Alias::new("field"))))
            .and(entry_col("parent_value").equals((reach.clone(), Alias::new("value")))),
    );

    let mut seed = Query::select();
    seed.column(Asterisk)
        .from_values(seeds, Alias::new("teq_start"))
        .union(UnionType::Distinct, walk);

    let mut cte = CommonTableExpression::new();
    cte.table_name(reach.clone())
        .columns(
            [
                "start_field",
                "start_value",
                "taxonomy_id",
                "taxonomy",
                "field",
                "value",
            ]
            .map(Alias::new),
        )
        .query(seed);

    let mut with = WithClause::new();
    with.recursive(true).cte(cte);

    let mut select = Query::select();
    select
        .columns(
            [
                "start_field",
                "start_value",
                "taxonomy_id",
                "field",
                "value",
            ]
            .map(Alias::new),
        )
        .from(reach);
    Some(select.with(with))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn start(field: &str, value: &str, taxonomy_id: &str) -> TeqStart {
        TeqStart {
            field: field.into(),
            value: value.into(),
            taxonomy_id: taxonomy_id.into(),
        }
    }

    const TAXONOMY: &str = "0190a0f1-7f5e-7c3a-9d5b-3a1f2e4d5c6b";

    #[test]
    fn no_query_without_a_possible_taxonomy() {
        assert!(teq_expansion_query(&[]).is_none());
        assert!(teq_expansion_query(&[start("s", "x", "not-a-uuid")]).is_none());
        assert!(teq_expansion_query(&[start("s", "x", TAXONOMY)]).is_some());
    }

    #[test]
    fn duplicate_starts_are_seeded_once() {
        let query = teq_expansion_query(&[start("s", "x", TAXONOMY), start("s", "x", TAXONOMY)]);
        let values = query.map(|q| q.build(sea_query::PostgresQueryBuilder).1.0);
        assert_eq!(values.map(|v| v.len()), Some(6));
    }

    #[test]
    fn reached_always_holds_the_start() {
        let expansions = TeqExpansions::new();
        let reached = expansions.reached(&start("s", "x", "t"));
        assert_eq!(reached.len(), 1);
        assert!(reached["s"].contains("x"));
    }

    #[test]
    fn rows_group_by_start_and_field() {
        let row = |f: &str, v: &str, t: &str, rf: &str, rv: &str| {
            (f.into(), v.into(), t.into(), rf.into(), rv.into())
        };
        let expansions = TeqExpansions::from_rows([
            row("s", "x", "t1", "s", "x"),
            row("s", "x", "t1", "s", "y"),
            row("s", "x", "t1", "u", "z"),
            row("s", "x", "t2", "s", "w"),
        ]);
        let reached = expansions.reached(&start("s", "x", "t1"));
        assert_eq!(reached.len(), 2);
        assert_eq!(reached["s"].iter().collect::<Vec<_>>(), ["x", "y"]);
        assert_eq!(reached["u"].iter().collect::<Vec<_>>(), ["z"]);
        let other = expansions.reached(&start("s", "x", "t2"));
        assert_eq!(other["s"].iter().collect::<Vec<_>>(), ["w", "x"]);
    }
}
