//! Classification matching for search (interface §"Search", "Classification forms"; §12.4
//! uses the same forms for agent executions).
//!
//! A request names the reader's classifications in one of three forms:
//!
//! ```text
//! "public"                                          hierarchical, undefined names ignored
//! ["public", "internal"]                            hierarchical, undefined names ignored
//! {"classifications": [...], "search_type": 0..3}   search_type bit 2: hierarchical,
//!                                                   bit 1: undefined names are an error
//! ```
//!
//! | `search_type` | matching | undefined names |
//! |---|---|---|
//! | 0 | exact | ignored |
//! | 1 | exact | `Classification not found` (404) |
//! | 2 (default) | hierarchical | ignored |
//! | 3 | hierarchical | `Classification not found` (404) |
//!
//! Any other `search_type` fails deserialization (422). Hierarchical matching adds every
//! classification the named ones inherit, transitively: a pair `(a, b)` means a reader holding
//! `a` also sees `b`. [`resolve`] gives the final set; an empty set means no results.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use sea_query::extension::postgres::PgFunc;
use sea_query::{Alias, Condition, Expr, ExprTrait as _, Value};
use serde::de::{self, Deserialize, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use crate::filter::text_array_param;

/// How the named classifications are matched (the `search_type` bit field).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SearchType {
    /// 0: exactly the named classifications; undefined names ignored.
    ExactIgnoreUndefined,
    /// 1: exactly the named classifications; an undefined name is an error.
    ExactValidate,
    /// 2 (the default): the named classifications and everything they inherit; undefined
    /// names ignored.
    #[default]
    HierarchicalIgnoreUndefined,
    /// 3: the named classifications and everything they inherit; an undefined name is an
    /// error.
    HierarchicalValidate,
}

impl SearchType {
    /// Bit 2: hierarchical matching.
    pub const HIERARCHICAL: u64 = 2;
    /// Bit 1: undefined names are an error.
    pub const VALIDATE: u64 = 1;

    /// The search type of a `search_type` value, `None` outside 0..=3.
    pub fn from_bits(bits: u64) -> Option<Self> {
        Some(match bits {
            0 => SearchType::ExactIgnoreUndefined,
            1 => SearchType::ExactValidate,
            2 => SearchType::HierarchicalIgnoreUndefined,
            3 => SearchType::HierarchicalValidate,
            _ => return None,
        })
    }

    /// The `search_type` value.
    pub fn bits(self) -> u64 {
        match self {
            SearchType::ExactIgnoreUndefined => 0,
            SearchType::ExactValidate => 1,
            SearchType::HierarchicalIgnoreUndefined => 2,
            SearchType::HierarchicalValidate => 3,
        }
    }

    pub fn is_hierarchical(self) -> bool {
        self.bits() & Self::HIERARCHICAL != 0
    }

    pub fn validates(self) -> bool {
        self.bits() & Self::VALIDATE != 0
    }
}

/// The `classification` of a search or agent execution, in any of its forms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClassificationRequest {
    /// The names as given (order kept, duplicates allowed).
    pub classifications: Vec<String>,
    /// String and array forms: [`SearchType::HierarchicalIgnoreUndefined`].
    pub search_type: SearchType,
}

impl ClassificationRequest {
    /// Hierarchical matching of `classifications`, undefined names ignored (the string and
    /// array forms).
    pub fn hierarchical(classifications: Vec<String>) -> Self {
        Self {
            classifications,
            search_type: SearchType::default(),
        }
    }
}

/// Why a classification request cannot be served.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClassificationError {
    /// A name the pipeline does not define, under `search_type` 1 or 3: 404
    /// `Classification not found`.
    #[error("classification `{name}` is not defined in the pipeline")]
    ClassificationNotFound { name: String },
}

/// The classifications whose documents the reader may see, sorted and without duplicates.
///
/// `declared` are the pipeline's classifications, `hierarchy` its pairs
/// `(classification, inherited classification)`. Under hierarchical matching every
/// classification reachable through the pairs is added (cycles are harmless). Names the
/// pipeline does not define are an error under validation and dropped otherwise. An empty
/// result means the search returns nothing.
pub fn resolve(
    request: &ClassificationRequest,
    declared: &[String],
    hierarchy: &[(String, String)],
) -> Result<Vec<String>, ClassificationError> {
    let declared: BTreeSet<&str> = declared.iter().map(String::as_str).collect();
    let mut allowed: BTreeSet<&str> = BTreeSet::new();
    for name in &request.classifications {
        if declared.contains(name.as_str()) {
            allowed.insert(name);
        } else if request.search_type.validates() {
            return Err(ClassificationError::ClassificationNotFound { name: name.clone() });
        }
    }
    if request.search_type.is_hierarchical() {
        let mut inherits: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for (reader, inherited) in hierarchy {
            inherits.entry(reader).or_default().push(inherited);
        }
        let mut pending: Vec<&str> = allowed.iter().copied().collect();
        while let Some(name) = pending.pop() {
            for inherited in inherits.get(name).into_iter().flatten() {
                if allowed.insert(inherited) {
                    pending.push(inherited);
                }
            }
        }
    }
    Ok(allowed.into_iter().map(str::to_owned).collect())
}

/// The condition `"<table>"."classification" = ANY(<allowed>)`, one bound `text[]`
/// parameter; FALSE when `allowed` is empty.
pub fn classification_condition(table: &str, allowed: &[String]) -> Condition {
    let column = Expr::col((Alias::new(table), Alias::new("classification")));
    Condition::all().add(if allowed.is_empty() {
        Expr::Constant(Value::from(false))
    } else {
        column.eq(PgFunc::any(text_array_param(
            allowed.iter().map(String::as_str),
        )))
    })
}

impl<'de> Deserialize<'de> for ClassificationRequest {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(RequestVisitor)
    }
}

struct RequestVisitor;

impl<'de> Visitor<'de> for RequestVisitor {
    type Value = ClassificationRequest;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(
            "a classification string, an array of strings, or an object \
             {\"classifications\": [...], \"search_type\": 0..3}",
        )
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(ClassificationRequest::hierarchical(vec![v.to_owned()]))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
        Ok(ClassificationRequest::hierarchical(vec![v]))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut names = Vec::new();
        while let Some(name) = seq.next_element::<String>()? {
            names.push(name);
        }
        Ok(ClassificationRequest::hierarchical(names))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut classifications: Option<Vec<String>> = None;
        let mut search_type: Option<SearchType> = None;
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "classifications" => {
                    if classifications.is_some() {
                        return Err(de::Error::duplicate_field("classifications"));
                    }
                    classifications = Some(map.next_value()?);
                }
                "search_type" => {
                    if search_type.is_some() {
                        return Err(de::Error::duplicate_field("search_type"));
                    }
                    search_type = Some(map.next_value::<SearchTypeValue>()?.0);
                }
                // Fields not defined are ignored at every level (interface §Search).
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        let Some(classifications) = classifications else {
            return Err(de::Error::missing_field("classifications"));
        };
        Ok(ClassificationRequest {
            classifications,
            search_type: search_type.unwrap_or_default(),
        })
    }
}

/// `search_type`: an integer 0..=3; null counts as absent.
struct SearchTypeValue(SearchType);

impl<'de> Deserialize<'de> for SearchTypeValue {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(SearchTypeVisitor)
    }
}

struct SearchTypeVisitor;

impl Visitor<'_> for SearchTypeVisitor {
    type Value = SearchTypeValue;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a search_type of 0, 1, 2 or 3")
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
        SearchType::from_bits(v)
            .map(SearchTypeValue)
            .ok_or_else(|| E::invalid_value(de::Unexpected::Unsigned(v), &self))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
        u64::try_from(v)
            .ok()
            .and_then(SearchType::from_bits)
            .map(SearchTypeValue)
            .ok_or_else(|| E::invalid_value(de::Unexpected::Signed(v), &self))
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(SearchTypeValue(SearchType::default()))
    }
}

#[cfg(test)]
mod tests {
    #![expect(clippy::unwrap_used, reason = "tests fail loudly")]

    use super::*;
    use sea_query::{PostgresQueryBuilder, Query};

    fn names(values: &[&str]) -> Vec<String> {
        values.iter().map(|s| (*s).to_owned()).collect()
    }

    fn pairs(values: &[(&str, &str)]) -> Vec<(String, String)> {
        values
            .iter()
            .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
            .collect()
    }

    fn parse(json: &str) -> Result<ClassificationRequest, String> {
        serde_json::from_str(json).map_err(|e| e.to_string())
    }

    /// secret inherits internal, internal inherits public.
    fn pipeline() -> (Vec<String>, Vec<(String, String)>) {
        (
            names(&["public", "internal", "secret", "hr"]),
            pairs(&[("secret", "internal"), ("internal", "public")]),
        )
    }

    fn resolved(json: &str) -> Result<Vec<String>, ClassificationError> {
        let (declared, hierarchy) = pipeline();
        resolve(&parse(json).unwrap(), &declared, &hierarchy)
    }

    #[test]
    fn string_and_array_forms_are_hierarchical_and_ignore_undefined() {
        assert_eq!(
            parse(r#""secret""#).unwrap(),
            ClassificationRequest::hierarchical(names(&["secret"]))
        );
        assert_eq!(
            resolved(r#""secret""#).unwrap(),
            names(&["internal", "public", "secret"])
        );
        assert_eq!(
            resolved(r#"["internal", "nope", "hr"]"#).unwrap(),
            names(&["hr", "internal", "public"])
        );
        assert_eq!(resolved("[]").unwrap(), Vec::<String>::new());
        assert_eq!(resolved(r#"["nope"]"#).unwrap(), Vec::<String>::new());
    }

    #[test]
    fn search_type_0_exact_ignoring_undefined() {
        assert_eq!(
            resolved(r#"{"classifications": ["secret", "nope"], "search_type": 0}"#).unwrap(),
            names(&["secret"])
        );
    }

    #[test]
    fn search_type_1_exact_validating() {
        assert_eq!(
            resolved(r#"{"classifications": ["secret"], "search_type": 1}"#).unwrap(),
            names(&["secret"])
        );
        assert_eq!(
            resolved(r#"{"classifications": ["secret", "nope"], "search_type": 1}"#),
            Err(ClassificationError::ClassificationNotFound {
                name: "nope".into()
            })
        );
    }

    #[test]
    fn search_type_2_hierarchical_ignoring_undefined_is_the_default() {
        for json in [
            r#"{"classifications": ["internal", "nope"], "search_type": 2}"#,
            r#"{"classifications": ["internal", "nope"]}"#,
            r#"{"classifications": ["internal", "nope"], "search_type": null}"#,
        ] {
            assert_eq!(
                resolved(json).unwrap(),
                names(&["internal", "public"]),
                "{json}"
            );
        }
    }

    #[test]
    fn search_type_3_hierarchical_validating() {
        assert_eq!(
            resolved(r#"{"classifications": ["internal"], "search_type": 3}"#).unwrap(),
            names(&["internal", "public"])
        );
        assert_eq!(
            resolved(r#"{"classifications": ["internal", "nope"], "search_type": 3}"#),
            Err(ClassificationError::ClassificationNotFound {
                name: "nope".into()
            })
        );
    }

    #[test]
    fn other_search_types_and_shapes_fail_deserialization() {
        for json in [
            r#"{"classifications": ["a"], "search_type": 4}"#,
            r#"{"classifications": ["a"], "search_type": -1}"#,
            r#"{"classifications": ["a"], "search_type": 2.0}"#,
            r#"{"classifications": ["a"], "search_type": "2"}"#,
            r#"{"search_type": 2}"#,
            r#"{"classifications": "a"}"#,
            r#"{"classifications": ["a", 1]}"#,
            r#"["a", null]"#,
            "5",
            "null",
        ] {
            assert!(parse(json).is_err(), "{json}");
        }
        let error = parse(r#"{"classifications": ["a"], "search_type": 4}"#).unwrap_err();
        assert_eq!(
            error,
            "invalid value: integer `4`, expected a search_type of 0, 1, 2 or 3 at line 1 column 43"
        );
    }

    #[test]
    fn unknown_object_fields_are_ignored() {
        assert_eq!(
            parse(r#"{"classifications": ["a"], "k": 5, "search_type": 1}"#).unwrap(),
            ClassificationRequest {
                classifications: names(&["a"]),
                search_type: SearchType::ExactValidate
            }
        );
    }

    #[test]
    fn cycles_in_the_hierarchy_terminate() {
        let declared = names(&["a", "b", "c", "d"]);
        let hierarchy = pairs(&[("a", "b"), ("b", "c"), ("c", "a"), ("d", "d")]);
        let request = ClassificationRequest::hierarchical(names(&["b"]));
        assert_eq!(
            resolve(&request, &declared, &hierarchy).unwrap(),
            names(&["a", "b", "c"])
        );
        let request = ClassificationRequest::hierarchical(names(&["d"]));
        assert_eq!(
            resolve(&request, &declared, &hierarchy).unwrap(),
            names(&["d"])
        );
    }

    #[test]
    fn inheritance_is_one_way() {
        // public does not see internal or secret.
        assert_eq!(resolved(r#""public""#).unwrap(), names(&["public"]));
    }

    #[test]
    fn bits() {
        for bits in 0..4 {
            let search_type = SearchType::from_bits(bits).unwrap();
            assert_eq!(search_type.bits(), bits);
            assert_eq!(search_type.is_hierarchical(), bits & 2 != 0);
            assert_eq!(search_type.validates(), bits & 1 != 0);
        }
        assert_eq!(SearchType::from_bits(4), None);
    }

    /// Snapshots of each `search_type`: request, resolved set, SQL condition over `fragments`.
    fn snapshot(name: &str, json: &str) {
        let (declared, hierarchy) = pipeline();
        let request = parse(json).unwrap();
        let body = match resolve(&request, &declared, &hierarchy) {
            Ok(allowed) => {
                let (sql, values) = Query::select()
                    .column(Alias::new("id"))
                    .from(Alias::new("fragments"))
                    .cond_where(classification_condition("fragments", &allowed))
                    .build(PostgresQueryBuilder);
                format!("allowed: {allowed:?}\n\n{sql}\n\n{:#?}", values.0)
            }
            Err(error) => format!("error: {error:?}"),
        };
        insta::with_settings!({
            snapshot_path => concat!(env!("CARGO_MANIFEST_DIR"), "/../snapshots"),
            prepend_module_to_snapshot => false,
            omit_expression => true,
            description => format!(
                "{json}\ndeclared: {declared:?}\nhierarchy: {hierarchy:?}"
            ),
        }, {
            insta::assert_snapshot!(name, body);
        });
    }

    #[test]
    fn snapshots() {
        snapshot("classification_string", r#""secret""#);
        snapshot("classification_array", r#"["internal", "hr", "nope"]"#);
        snapshot("classification_empty_array", "[]");
        snapshot(
            "classification_search_type_0",
            r#"{"classifications": ["secret", "nope"], "search_type": 0}"#,
        );
        snapshot(
            "classification_search_type_1",
            r#"{"classifications": ["secret"], "search_type": 1}"#,
        );
        snapshot(
            "classification_search_type_1_undefined",
            r#"{"classifications": ["secret", "nope"], "search_type": 1}"#,
        );
        snapshot(
            "classification_search_type_2",
            r#"{"classifications": ["secret", "nope"], "search_type": 2}"#,
        );
        snapshot(
            "classification_search_type_default",
            r#"{"classifications": ["internal"]}"#,
        );
        snapshot(
            "classification_search_type_3",
            r#"{"classifications": ["internal"], "search_type": 3}"#,
        );
        snapshot(
            "classification_search_type_3_undefined",
            r#"{"classifications": ["internal", "nope"], "search_type": 3}"#,
        );
        snapshot(
            "classification_no_defined_name",
            r#"{"classifications": ["nope"], "search_type": 2}"#,
        );
    }
}
