//! `recursive-character` and `character`: LangChain's separator splitting and merging.

use unicode_segmentation::UnicodeSegmentation;

use super::graphemes::{SeparatorMatches, char_len, trim};

/// Sizes shared by the merging steps.
#[derive(Clone, Copy)]
pub(crate) struct Sizes {
    pub(crate) chunk_size: usize,
    pub(crate) chunk_overlap: usize,
}

/// LangChain `_split_text_with_regex(text, sep, keep_separator=True)`: cut before every
/// occurrence, the separator staying at the start of the following piece; empty pieces
/// dropped. The empty separator cuts between grapheme clusters (LangChain: between chars).
fn split_keeping_separator<'a>(text: &'a str, separator: &str) -> Vec<&'a str> {
    if separator.is_empty() {
        return text.graphemes(true).collect();
    }
    let mut pieces = Vec::new();
    let mut last = 0;
    for occurrence in SeparatorMatches::new(text, separator, false) {
        if occurrence.start > last {
            pieces.push(&text[last..occurrence.start]);
        }
        last = occurrence.start;
    }
    if last < text.len() {
        pieces.push(&text[last..]);
    }
    pieces
}

/// LangChain `_split_text_with_regex(text, sep, keep_separator=False)`: the text between
/// occurrences, separators removed, empty pieces dropped. The empty separator cuts between
/// grapheme clusters.
fn split_removing_separator<'a>(text: &'a str, separator: &str) -> Vec<&'a str> {
    if separator.is_empty() {
        return text.graphemes(true).collect();
    }
    let mut pieces = Vec::new();
    let mut last = 0;
    for occurrence in SeparatorMatches::new(text, separator, true) {
        if occurrence.start > last {
            pieces.push(&text[last..occurrence.start]);
        }
        last = occurrence.end;
    }
    if last < text.len() {
        pieces.push(&text[last..]);
    }
    pieces
}

/// LangChain `TextSplitter._join_docs`: join, strip, `None` when empty.
fn join(pieces: &[(&str, usize)], separator: &str, out: &mut Vec<String>) {
    let joined = pieces
        .iter()
        .map(|(piece, _)| *piece)
        .collect::<Vec<_>>()
        .join(separator);
    let trimmed = trim(&joined);
    if !trimmed.is_empty() {
        out.push(trimmed.to_owned());
    }
}

/// LangChain `TextSplitter._merge_splits`, step for step: pieces are appended to the current
/// chunk while it stays within `chunk_size` (counting one `separator` between pieces); when the
/// next piece does not fit, the chunk is emitted and pieces are dropped from its front until
/// what remains is at most `chunk_overlap` long and leaves room for the next piece. The kept
/// tail starts the next chunk: that is the overlap, made of whole pieces. A piece longer than
/// `chunk_size` becomes a chunk of its own.
fn merge(splits: &[&str], separator: &str, sizes: Sizes, out: &mut Vec<String>) {
    let separator_len = char_len(separator);
    let mut current: std::collections::VecDeque<(&str, usize)> = Default::default();
    let mut total = 0usize;
    for &piece in splits {
        let len = char_len(piece);
        let joint = |current_len: usize| if current_len > 0 { separator_len } else { 0 };
        if total + len + joint(current.len()) > sizes.chunk_size && !current.is_empty() {
            join(current.make_contiguous(), separator, out);
            while total > sizes.chunk_overlap
                || (total + len + joint(current.len()) > sizes.chunk_size && total > 0)
            {
                let Some((_, first_len)) = current.pop_front() else {
                    break;
                };
                // `total` is the sum of the lengths plus one separator between pieces.
                total = total.saturating_sub(first_len + joint(current.len()));
            }
        }
        current.push_back((piece, len));
        total += len + if current.len() > 1 { separator_len } else { 0 };
    }
    join(current.make_contiguous(), separator, out);
}

/// LangChain `RecursiveCharacterTextSplitter._split_text` (keep_separator=True).
pub(crate) fn split_recursive(
    text: &str,
    separators: &[String],
    sizes: Sizes,
    out: &mut Vec<String>,
) {
    // The first separator present in the text (the empty one always is), and the ones after it
    // for the pieces that are still too long. When none is present, the last one is used (it
    // cuts nothing) and nothing is left to recurse with.
    let mut separator = separators.last().map_or("", String::as_str);
    let mut rest: &[String] = &[];
    for (index, candidate) in separators.iter().enumerate() {
        if candidate.is_empty() {
            separator = candidate;
            break;
        }
        if SeparatorMatches::new(text, candidate, false)
            .next()
            .is_some()
        {
            separator = candidate;
            rest = &separators[index + 1..];
            break;
        }
    }

    let mut good: Vec<&str> = Vec::new();
    for piece in split_keeping_separator(text, separator) {
        if char_len(piece) < sizes.chunk_size {
            good.push(piece);
            continue;
        }
        if !good.is_empty() {
            merge(&good, "", sizes, out);
            good.clear();
        }
        if rest.is_empty() {
            // Too long and nothing finer to cut with (a custom list without "", or a single
            // grapheme cluster longer than chunk_size): kept whole, trimmed.
            let trimmed = trim(piece);
            if !trimmed.is_empty() {
                out.push(trimmed.to_owned());
            }
        } else {
            split_recursive(piece, rest, sizes, out);
        }
    }
    if !good.is_empty() {
        merge(&good, "", sizes, out);
    }
}

/// LangChain `CharacterTextSplitter.split_text` (keep_separator=False).
pub(crate) fn split_character(text: &str, separator: &str, sizes: Sizes, out: &mut Vec<String>) {
    let pieces = split_removing_separator(text, separator);
    merge(&pieces, separator, sizes, out);
}
