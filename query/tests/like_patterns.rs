//! The LIKE patterns built from user text, read from the bound values of real statements and
//! checked with a reference matcher of Postgres' LIKE (backslash the escape character):
//!
//! - list filters `$contains` / `$startswith`: the value is a substring / prefix in which `%`
//!   and `_` are wildcards (interface rule 7) and everything else, backslash included, is
//!   literal; without `%` and `_` that is exactly `str::contains` / `str::starts_with`;
//! - metadata filters `$like` / `$ilike`: the user's pattern keeps its meaning, and a final
//!   unpaired backslash becomes a literal backslash.
//!
//! No pattern may end in an unpaired backslash: Postgres refuses it when the statement runs.

#![expect(clippy::unwrap_used, reason = "tests fail loudly")]

mod common;
mod filter_common;

use common::API_KEYS;
use proptest::prelude::*;
use sea_query::{Alias, PostgresQueryBuilder, Query};
use trove_query::filter::{self, TeqExpansions};
use trove_query::list::{build_page_query, parse_list_query};

/// One element of a LIKE pattern.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Token {
    Literal(char),
    /// `_`
    One,
    /// `%`
    Any,
}

/// Reads a LIKE pattern with backslash as the escape character (`\x` is a literal `x`).
/// `None` when it ends in an unpaired backslash, which Postgres refuses.
fn tokens(pattern: &str) -> Option<Vec<Token>> {
    let mut chars = pattern.chars();
    let mut tokens = Vec::new();
    while let Some(c) = chars.next() {
        tokens.push(match c {
            '\\' => Token::Literal(chars.next()?),
            '%' => Token::Any,
            '_' => Token::One,
            c => Token::Literal(c),
        });
    }
    Some(tokens)
}

/// Whether the whole of `text` matches `tokens`, character by character.
fn matches(tokens: &[Token], text: &str) -> bool {
    let text: Vec<char> = text.chars().collect();
    // rest[j]: tokens[i..] match text[j..], for the current i (from the end).
    let mut rest = vec![false; text.len() + 1];
    rest[text.len()] = true;
    for token in tokens.iter().rev() {
        let mut here = vec![false; text.len() + 1];
        for j in (0..=text.len()).rev() {
            here[j] = match *token {
                Token::Any => rest[j] || (j < text.len() && here[j + 1]),
                Token::One => j < text.len() && rest[j + 1],
                Token::Literal(c) => j < text.len() && text[j] == c && rest[j + 1],
            };
        }
        rest = here;
    }
    rest[0]
}

/// `text LIKE pattern`, for a pattern Postgres accepts.
fn like(text: &str, pattern: &str) -> bool {
    matches(&tokens(pattern).unwrap(), text)
}

fn bound_string(value: &sea_query::Value) -> String {
    match value {
        sea_query::Value::String(Some(s)) => s.to_string(),
        other => panic!("not a string: {other:?}"),
    }
}

/// The pattern a list query `name<suffix>=<text>` binds.
fn list_pattern(suffix: &str, text: &str) -> String {
    let query = form_urlencoded::Serializer::new(String::new())
        .append_pair(&format!("name{suffix}"), text)
        .finish();
    let req = parse_list_query(&API_KEYS, Some(&query), &[]).unwrap();
    let base = Query::select()
        .column(("api_keys", "id"))
        .from("api_keys")
        .to_owned();
    let (_, values) = build_page_query(&API_KEYS, &req, base).build(PostgresQueryBuilder);
    bound_string(&values.0[0])
}

/// The pattern the metadata filter `{"title": {<operator>: <pattern>}}` binds.
fn filter_pattern(operator: &str, pattern: &str) -> String {
    let json = serde_json::json!({ "title": { operator: pattern } }).to_string();
    let typed = filter_common::typed(&json).unwrap();
    let condition = filter::compile(&typed, "fragments", &TeqExpansions::new());
    let (_, values) = Query::select()
        .column(Alias::new("id"))
        .from(Alias::new("fragments"))
        .cond_where(condition)
        .build(PostgresQueryBuilder);
    bound_string(&values.0[0])
}

/// The tokens `text` stands for in `$contains` / `$startswith`: `%` and `_` wildcards, every
/// other character literal.
fn wildcard_tokens(text: &str) -> Vec<Token> {
    text.chars()
        .map(|c| match c {
            '%' => Token::Any,
            '_' => Token::One,
            c => Token::Literal(c),
        })
        .collect()
}

/// Short strings of LIKE metacharacters, backslashes (trailing ones included) and multibyte
/// characters.
fn text(alphabet: &[char]) -> BoxedStrategy<String> {
    prop::collection::vec(prop::sample::select(alphabet.to_vec()), 0..=6)
        .prop_map(String::from_iter)
        .boxed()
}

const ALL: &[char] = &['a', 'b', '%', '_', '\\', '\\', 'é', '日', '🦀'];
const NO_WILDCARDS: &[char] = &['a', 'b', '\\', '\\', 'é', '日', '🦀'];

/// A value around `text` half the time, so that matches are frequent.
fn value_and_text(alphabet: &'static [char]) -> BoxedStrategy<(String, String)> {
    (text(alphabet), text(ALL), text(ALL), any::<bool>())
        .prop_map(|(text, before, after, around)| {
            let value = if around {
                format!("{before}{text}{after}")
            } else {
                before
            };
            (value, text)
        })
        .boxed()
}

proptest! {
    #[test]
    fn contains_is_a_substring_test((value, text) in value_and_text(NO_WILDCARDS)) {
        let pattern = list_pattern("$contains", &text);
        prop_assert!(tokens(&pattern).is_some(), "unpaired escape in {pattern:?}");
        prop_assert_eq!(like(&value, &pattern), value.contains(&text), "{:?}", pattern);
    }

    #[test]
    fn startswith_is_a_prefix_test((value, text) in value_and_text(NO_WILDCARDS)) {
        let pattern = list_pattern("$startswith", &text);
        prop_assert!(tokens(&pattern).is_some(), "unpaired escape in {pattern:?}");
        prop_assert_eq!(like(&value, &pattern), value.starts_with(&text), "{:?}", pattern);
    }

    #[test]
    fn contains_and_startswith_keep_wildcards_only((value, text) in value_and_text(ALL)) {
        let inner = wildcard_tokens(&text);
        let contains = [vec![Token::Any], inner.clone(), vec![Token::Any]].concat();
        let startswith = [inner, vec![Token::Any]].concat();
        for (suffix, expected) in [("$contains", contains), ("$startswith", startswith)] {
            let pattern = list_pattern(suffix, &text);
            prop_assert_eq!(tokens(&pattern), Some(expected.clone()), "{}", suffix);
            prop_assert_eq!(like(&value, &pattern), matches(&expected, &value));
            // Wildcards only widen: the value itself always matches.
            prop_assert!(like(&text, &pattern));
        }
    }

    #[test]
    fn like_patterns_keep_their_meaning_and_become_valid(
        pattern in text(ALL),
        operator in prop::sample::select(vec!["$like", "$ilike"]),
    ) {
        let bound = filter_pattern(operator, &pattern);
        let compiled = tokens(&bound);
        prop_assert!(compiled.is_some(), "unpaired escape in {bound:?}");
        match tokens(&pattern) {
            // A valid pattern is bound as given.
            Some(_) => prop_assert_eq!(&bound, &pattern),
            // Otherwise only its final backslash changes, into a literal one.
            None => {
                let head = &pattern[..pattern.len() - 1];
                let mut expected = tokens(head).unwrap();
                expected.push(Token::Literal('\\'));
                prop_assert_eq!(&compiled, &Some(expected));
            }
        }
    }
}

#[test]
fn reference_matcher() {
    assert!(like("abc", "a%"));
    assert!(like("abc", "_b_"));
    assert!(!like("abc", "b%"));
    assert!(like("50%", r"50\%"));
    assert!(!like("500", r"50\%"));
    assert!(like(r"a\b", r"a\\b"));
    assert!(like("日本", "_本"));
    assert!(like("", "%"));
    assert!(!like("", "_"));
    assert_eq!(tokens(r"a\"), None);
    assert_eq!(tokens(r"a\\\"), None);
    assert!(tokens(r"a\\").is_some());
}

#[test]
fn trailing_backslashes_reach_the_database_valid() {
    // `name$contains=dir\` and `name$startswith=\`.
    assert_eq!(list_pattern("$contains", r"dir\"), r"%dir\\%");
    assert_eq!(list_pattern("$startswith", r"\"), r"\\%");
    assert!(like(r"C:\dir\", &list_pattern("$contains", r"dir\")));
    assert!(!like(r"C:\dir", &list_pattern("$contains", r"dir\")));
    // `50%` keeps `%` a wildcard (interface rule 7).
    assert!(like("500", &list_pattern("$contains", "50%")));

    // `$like: "%\"` matches the values ending in a backslash, and only those.
    let bound = filter_pattern("$like", r"%\");
    assert_eq!(bound, r"%\\");
    assert!(like(r"C:\", &bound));
    assert!(!like("C:", &bound));
    // Paired and escaping backslashes keep their meaning.
    assert_eq!(filter_pattern("$ilike", r"a\\"), r"a\\");
    assert_eq!(filter_pattern("$like", r"100\%"), r"100\%");
    assert_eq!(filter_pattern("$like", r"a\\\"), r"a\\\\");
}
