//! Pipeline classifications and their inheritance hierarchy.

use std::collections::{HashMap, HashSet};

use crate::error::ApiError;

fn invalid(reason: String) -> ApiError {
    ApiError::InvalidParameter(reason)
}

/// Validates a classification set and hierarchy (addendum §5.1): at least one classification;
/// each 1–255 characters, not `*`, no duplicates; hierarchy pairs of declared names, no
/// self-pair, no cycle.
pub fn check(classifications: &[String], hierarchy: &[(String, String)]) -> Result<(), ApiError> {
    if classifications.is_empty() {
        return Err(invalid(
            "At least one classification is required".to_owned(),
        ));
    }
    let mut seen = HashSet::new();
    for name in classifications {
        if !crate::names::has_valid_length(name) || name == "*" || !seen.insert(name.as_str()) {
            return Err(invalid(format!("Invalid classification: {name}")));
        }
    }
    let mut edges: HashMap<&str, Vec<&str>> = HashMap::new();
    for (classification, inherited) in hierarchy {
        for name in [classification, inherited] {
            if !seen.contains(name.as_str()) {
                return Err(invalid(format!(
                    "Unknown classification in hierarchy: {name}"
                )));
            }
        }
        if classification == inherited {
            return Err(invalid(
                "Classification hierarchy contains a cycle".to_owned(),
            ));
        }
        edges
            .entry(classification.as_str())
            .or_default()
            .push(inherited.as_str());
    }
    if has_cycle(&edges) {
        return Err(invalid(
            "Classification hierarchy contains a cycle".to_owned(),
        ));
    }
    Ok(())
}

fn has_cycle(edges: &HashMap<&str, Vec<&str>>) -> bool {
    // Iterative three-colour depth-first search.
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        InProgress,
        Done,
    }
    let mut marks: HashMap<&str, Mark> = HashMap::new();
    for &start in edges.keys() {
        if marks.contains_key(start) {
            continue;
        }
        let mut stack: Vec<(&str, usize)> = vec![(start, 0)];
        marks.insert(start, Mark::InProgress);
        while let Some((node, next)) = stack.pop() {
            let children = edges.get(node).map(Vec::as_slice).unwrap_or_default();
            if let Some(&child) = children.get(next) {
                stack.push((node, next + 1));
                match marks.get(child) {
                    Some(Mark::InProgress) => return true,
                    Some(Mark::Done) => {}
                    None => {
                        marks.insert(child, Mark::InProgress);
                        stack.push((child, 0));
                    }
                }
            } else {
                marks.insert(node, Mark::Done);
            }
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| (*x).to_owned()).collect()
    }

    fn pairs(v: &[(&str, &str)]) -> Vec<(String, String)> {
        v.iter()
            .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
            .collect()
    }

    #[test]
    fn rules() {
        assert!(
            check(
                &s(&["a", "b", "c"]),
                &pairs(&[("a", "b"), ("b", "c"), ("a", "c")])
            )
            .is_ok()
        );
        let err = |c: &[&str], h: &[(&str, &str)]| match check(&s(c), &pairs(h)) {
            Err(ApiError::InvalidParameter(reason)) => reason,
            other => panic!("{other:?}"),
        };
        assert_eq!(err(&[], &[]), "At least one classification is required");
        assert_eq!(err(&["*"], &[]), "Invalid classification: *");
        assert_eq!(err(&["a", "a"], &[]), "Invalid classification: a");
        assert_eq!(err(&[""], &[]), "Invalid classification: ");
        assert_eq!(
            err(&["a"], &[("a", "z")]),
            "Unknown classification in hierarchy: z"
        );
        assert_eq!(
            err(&["a"], &[("a", "a")]),
            "Classification hierarchy contains a cycle"
        );
        assert_eq!(
            err(&["a", "b", "c"], &[("a", "b"), ("b", "c"), ("c", "a")]),
            "Classification hierarchy contains a cycle"
        );
    }
}
