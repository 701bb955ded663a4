//! The length rule every name follows (pipelines, classifications, agents, LLMs, keys, …).

/// The most characters a name may have.
pub const MAX_NAME_CHARS: usize = 255;

/// Whether `name` has 1 to [`MAX_NAME_CHARS`] characters (characters, not bytes).
pub fn has_valid_length(name: &str) -> bool {
    (1..=MAX_NAME_CHARS).contains(&name.chars().count())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_have_1_to_255_characters() {
        assert!(!has_valid_length(""));
        assert!(has_valid_length("a"));
        assert!(has_valid_length(&"é".repeat(255)));
        assert!(!has_valid_length(&"a".repeat(256)));
    }
}
