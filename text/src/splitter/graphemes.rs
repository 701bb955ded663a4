//! Grapheme-cluster helpers shared by the splitters (extended grapheme clusters, UAX #29).

use std::ops::Range;

use unicode_segmentation::{GraphemeCursor, UnicodeSegmentation};

/// Length in Unicode scalar values: the unit of every character size (Python's `len`).
pub(crate) fn char_len(s: &str) -> usize {
    s.chars().count()
}

/// Whether byte offset `pos` of `text` is a grapheme cluster boundary (0 and `text.len()` are;
/// an offset past the end or inside a UTF-8 sequence is not).
pub(crate) fn is_boundary(text: &str, pos: usize) -> bool {
    if pos == 0 || pos == text.len() {
        return true;
    }
    if pos > text.len() || !text.is_char_boundary(pos) {
        return false;
    }
    // The whole text is given as the chunk, so the cursor never asks for more context.
    GraphemeCursor::new(pos, text.len(), true)
        .is_boundary(text, 0)
        .unwrap_or(false)
}

/// The last grapheme boundary at or before `pos` (clamped to the text).
pub(crate) fn floor_boundary(text: &str, pos: usize) -> usize {
    let mut pos = pos.min(text.len());
    while !is_boundary(text, pos) {
        pos -= 1;
    }
    pos
}

/// The first grapheme boundary at or after `pos` (clamped to the text).
pub(crate) fn ceil_boundary(text: &str, pos: usize) -> usize {
    let mut pos = pos.min(text.len());
    while !is_boundary(text, pos) {
        pos += 1;
    }
    pos
}

fn is_whitespace_cluster(cluster: &str) -> bool {
    cluster.chars().all(char::is_whitespace)
}

/// `s` without its leading and trailing whitespace, removed by whole grapheme clusters (a
/// cluster is whitespace when all its chars are `White_Space`): a space carrying a combining
/// mark is kept, so trimming never splits a cluster. `s` must start on a cluster boundary of
/// the text it comes from (every piece the splitters make does).
pub(crate) fn trim(s: &str) -> &str {
    let start = s
        .grapheme_indices(true)
        .find(|(_, cluster)| !is_whitespace_cluster(cluster))
        .map_or(s.len(), |(index, _)| index);
    let rest = &s[start..];
    let end = rest
        .grapheme_indices(true)
        .rev()
        .find(|(_, cluster)| !is_whitespace_cluster(cluster))
        .map_or(0, |(index, cluster)| index + cluster.len());
    &rest[..end]
}

/// Byte spans of the whitespace tokenizer: maximal runs of grapheme clusters that are not
/// whitespace.
pub(crate) fn whitespace_tokens(text: &str) -> Vec<Range<usize>> {
    let mut tokens = Vec::new();
    let mut start = None;
    for (index, cluster) in text.grapheme_indices(true) {
        match (is_whitespace_cluster(cluster), start) {
            (true, Some(token_start)) => {
                tokens.push(token_start..index);
                start = None;
            }
            (false, None) => start = Some(index),
            _ => {}
        }
    }
    if let Some(token_start) = start {
        tokens.push(token_start..text.len());
    }
    tokens
}

/// Occurrences of a non-empty `separator` in `text`, left to right and non-overlapping (as
/// Python's `re.split` on an escaped literal), keeping only those that start on a grapheme
/// boundary and, when `require_end`, also end on one. A refused occurrence does not hide an
/// overlapping one that starts later.
pub(crate) struct SeparatorMatches<'a> {
    text: &'a str,
    separator: &'a str,
    position: usize,
    require_end: bool,
}

impl<'a> SeparatorMatches<'a> {
    pub(crate) fn new(text: &'a str, separator: &'a str, require_end: bool) -> Self {
        SeparatorMatches {
            text,
            separator,
            position: 0,
            require_end,
        }
    }
}

impl Iterator for SeparatorMatches<'_> {
    type Item = Range<usize>;

    fn next(&mut self) -> Option<Range<usize>> {
        if self.separator.is_empty() {
            return None;
        }
        loop {
            let found = self.text.get(self.position..)?.find(self.separator)?;
            let start = self.position + found;
            let end = start + self.separator.len();
            if is_boundary(self.text, start) && (!self.require_end || is_boundary(self.text, end)) {
                self.position = end;
                return Some(start..end);
            }
            // Retry one char further: an overlapping occurrence may be acceptable.
            let step = self.text[start..].chars().next().map_or(1, char::len_utf8);
            self.position = start + step;
        }
    }
}
