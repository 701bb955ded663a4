//! LIKE patterns made from user text. Postgres' default escape character is backslash: `\x`
//! is a literal `x`, and a pattern ending in an unpaired backslash is refused when the
//! statement runs (`LIKE pattern must not end with escape character`).

use std::borrow::Cow;

/// `text` as part of a LIKE pattern in which `%` and `_` stay wildcards (interface rule 7 for
/// `$contains` / `$startswith`) and every other character is literal, backslash included:
/// each `\` is doubled. The result never ends in an unpaired backslash.
pub(crate) fn wildcard_text(text: &str) -> Cow<'_, str> {
    if text.contains('\\') {
        Cow::Owned(text.replace('\\', r"\\"))
    } else {
        Cow::Borrowed(text)
    }
}

/// A user's LIKE pattern (`%`, `_`, backslash escapes) made valid: a final unpaired backslash
/// escapes nothing, so it becomes a literal backslash (`\\`). The rest keeps its meaning.
pub(crate) fn close_trailing_escape(pattern: &str) -> Cow<'_, str> {
    let trailing = pattern.bytes().rev().take_while(|b| *b == b'\\').count();
    if trailing % 2 == 1 {
        Cow::Owned(format!("{pattern}\\"))
    } else {
        Cow::Borrowed(pattern)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wildcard_text_doubles_backslashes_only() {
        assert_eq!(wildcard_text("plain"), "plain");
        assert_eq!(wildcard_text("50%_x"), "50%_x");
        assert_eq!(wildcard_text(r"a\b"), r"a\\b");
        assert_eq!(wildcard_text(r"dir\"), r"dir\\");
        assert_eq!(wildcard_text(r"\%é\\"), r"\\%é\\\\");
    }

    #[test]
    fn only_an_unpaired_final_backslash_is_closed() {
        assert_eq!(close_trailing_escape(""), "");
        assert_eq!(close_trailing_escape("Du%"), "Du%");
        assert_eq!(close_trailing_escape(r"a\"), r"a\\");
        assert_eq!(close_trailing_escape(r"a\\"), r"a\\");
        assert_eq!(close_trailing_escape(r"a\\\"), r"a\\\\");
        assert_eq!(close_trailing_escape(r"\"), r"\\");
        assert_eq!(close_trailing_escape(r"100\%\_é\"), r"100\%\_é\\");
    }
}
