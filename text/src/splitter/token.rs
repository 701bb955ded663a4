//! `token`: windows over token spans.

use std::ops::Range;

use super::graphemes::{ceil_boundary, floor_boundary, trim};

/// Makes caller-given token spans safe to slice with: ends clamped to the text, empty spans
/// dropped (special tokens such as `[CLS]` have empty offsets), both ends widened to grapheme
/// cluster boundaries (a byte-level token inside an emoji or a UTF-8 sequence), sorted by
/// position.
pub(crate) fn sanitize(text: &str, spans: Vec<Range<usize>>) -> Vec<Range<usize>> {
    let mut tokens: Vec<Range<usize>> = spans
        .into_iter()
        .filter_map(|span| {
            let end = span.end.min(text.len());
            let start = span.start.min(end);
            (start < end).then(|| floor_boundary(text, start)..ceil_boundary(text, end))
        })
        .collect();
    tokens.sort_by_key(|span| (span.start, span.end));
    tokens
}

/// LangChain `split_text_on_tokens`: windows of `chunk_size` tokens starting every
/// `chunk_size − chunk_overlap` tokens, the last window being the first that reaches the last
/// token. Each fragment is the original text from the window's first token start to its last
/// token end (not a decoding of token ids), trimmed; empty ones dropped.
pub(crate) fn windows(
    text: &str,
    tokens: &[Range<usize>],
    chunk_size: usize,
    chunk_overlap: usize,
) -> Vec<String> {
    let step = chunk_size.saturating_sub(chunk_overlap).max(1);
    let chunk_size = chunk_size.max(1);
    let mut fragments = Vec::new();
    let mut start = 0;
    while start < tokens.len() {
        let end = (start + chunk_size).min(tokens.len());
        let window = &tokens[start..end];
        let from = window.iter().map(|span| span.start).min().unwrap_or(0);
        let to = window.iter().map(|span| span.end).max().unwrap_or(from);
        if let Some(span) = text.get(from..to) {
            let trimmed = trim(span);
            if !trimmed.is_empty() {
                fragments.push(trimmed.to_owned());
            }
        }
        if end == tokens.len() {
            break;
        }
        start += step;
    }
    fragments
}
