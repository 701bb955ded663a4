#![expect(clippy::unwrap_used, reason = "tests fail loudly")]

use std::cell::Cell;
use std::ops::Range;

use serde_json::{Value, json};
use unicode_segmentation::UnicodeSegmentation;

use super::*;

fn recursive(separators: &[&str], chunk_size: usize, chunk_overlap: usize) -> SplitterConfig {
    SplitterConfig::RecursiveCharacter {
        separators: separators.iter().map(|s| (*s).to_owned()).collect(),
        chunk_size,
        chunk_overlap,
    }
}

fn character(separator: &str, chunk_size: usize, chunk_overlap: usize) -> SplitterConfig {
    SplitterConfig::Character {
        separator: separator.to_owned(),
        chunk_size,
        chunk_overlap,
    }
}

fn token(chunk_size: usize, chunk_overlap: usize) -> SplitterConfig {
    SplitterConfig::Token {
        chunk_size,
        chunk_overlap,
        tokenizer: TokenizerKind::Whitespace,
    }
}

fn seeded() -> Vec<SplitterConfig> {
    PROVIDERS
        .iter()
        .map(|provider| SplitterConfig::default_for(provider).unwrap())
        .collect()
}

fn chars(s: &str) -> usize {
    s.chars().count()
}

/// Every fragment occurs in `text` starting and ending on grapheme boundaries.
fn assert_whole_graphemes(text: &str, fragments: &[String]) {
    let boundaries: Vec<usize> = text
        .grapheme_indices(true)
        .map(|(index, _)| index)
        .chain([text.len()])
        .collect();
    for fragment in fragments {
        let found = text.match_indices(fragment.as_str()).any(|(start, _)| {
            boundaries.contains(&start) && boundaries.contains(&(start + fragment.len()))
        });
        assert!(
            found,
            "fragment {fragment:?} is not made of whole graphemes of {text:?}"
        );
    }
}

fn err(provider: &str, parameters: Value) -> String {
    SplitterConfig::from_parameters(provider, &parameters)
        .unwrap_err()
        .to_string()
}

// ---------------------------------------------------------------- empty and blank texts

#[test]
fn empty_text_gives_no_fragment() {
    for config in seeded() {
        assert!(split(&config, "").is_empty(), "{config:?}");
    }
    assert!(split(&recursive(&[""], 1, 0), "").is_empty());
    assert!(split(&character("", 1, 0), "").is_empty());
}

#[test]
fn whitespace_only_text_gives_no_fragment() {
    let blank = " \n\n \t\r\n\u{00a0}\u{2003} \n";
    for config in seeded() {
        assert!(split(&config, blank).is_empty(), "{config:?}");
    }
    for config in [
        recursive(&["\n\n", "\n", " ", ""], 2, 1),
        recursive(&[""], 1, 0),
        character("\n", 1, 0),
        character("", 3, 1),
        token(1, 0),
    ] {
        assert!(split(&config, blank).is_empty(), "{config:?}");
    }
}

// ---------------------------------------------------------------- long words

#[test]
fn recursive_cuts_a_huge_word_into_graphemes_within_chunk_size() {
    let word = "a".repeat(2500);
    let config = SplitterConfig::default_for("recursive-character").unwrap();
    let fragments = split(&config, &word);
    let sizes: Vec<usize> = fragments.iter().map(|f| chars(f)).collect();
    // 1000-char chunks stepping 800 (200 of overlap).
    assert_eq!(sizes, [1000, 1000, 900]);

    let text = format!("intro {word} outro");
    let fragments = split(&recursive(&["\n\n", "\n", " ", ""], 100, 10), &text);
    assert!(fragments.iter().all(|f| chars(f) <= 100), "{fragments:?}");
    assert_eq!(fragments.first().map(String::as_str), Some("intro"));
    // " outro" follows the too-long piece: it is merged on its own.
    assert_eq!(fragments.last().map(String::as_str), Some("outro"));
    let a_count: usize = fragments.iter().map(|f| f.matches('a').count()).sum();
    assert!(a_count >= 2500);
}

#[test]
fn recursive_without_empty_separator_keeps_a_huge_word_whole() {
    let text = format!("short {} end", "x".repeat(50));
    let fragments = split(&recursive(&[" "], 10, 2), &text);
    assert_eq!(fragments, ["short", &"x".repeat(50), "end"]);
}

#[test]
fn character_keeps_a_longer_piece_whole() {
    let long = "x".repeat(50);
    let text = format!("short\n\n{long}\n\nend");
    let fragments = split(&character("\n\n", 10, 2), &text);
    assert_eq!(fragments, ["short", long.as_str(), "end"]);
}

// ---------------------------------------------------------------- separators

#[test]
fn recursive_keeps_the_separator_at_the_start_of_the_next_piece() {
    // Pieces "aaaa", "\n\nbb", "\n\ncc": the separator is counted with the piece after it, so
    // "bb" and "cc" (4 + 4 chars) do not fit together in 7 chars...
    let fragments = split(&recursive(&["\n\n", ""], 7, 0), "aaaa\n\nbb\n\ncc");
    assert_eq!(fragments, ["aaaa", "bb", "cc"]);
    // ...while `character` removes it and counts it once between pieces (2 + 2 + 2).
    let fragments = split(&character("\n\n", 7, 0), "aaaa\n\nbb\n\ncc");
    assert_eq!(fragments, ["aaaa", "bb\n\ncc"]);
    // "aaaa" + "\n\nbb" is 8 chars: it fits exactly in 8.
    let fragments = split(&recursive(&["\n\n", ""], 8, 0), "aaaa\n\nbb\n\ncc");
    assert_eq!(fragments, ["aaaa\n\nbb", "cc"]);
}

#[test]
fn separators_at_text_boundaries() {
    let text = "\n\nHello world.\n\nSecond paragraph.\n\n";
    let fragments = split(&recursive(&["\n\n", "\n", " ", ""], 20, 0), text);
    assert_eq!(fragments, ["Hello world.", "Second paragraph."]);
    let fragments = split(&character("\n\n", 20, 0), text);
    assert_eq!(fragments, ["Hello world.", "Second paragraph."]);
    // Consecutive separators give no empty fragment.
    let fragments = split(&character("\n\n", 5, 0), "\n\n\n\n\n\nab\n\n\n\n\n\ncd\n\n");
    assert_eq!(fragments, ["ab", "cd"]);
    // The whole text fits: one fragment, trimmed.
    let config = SplitterConfig::default_for("recursive-character").unwrap();
    assert_eq!(split(&config, text), ["Hello world.\n\nSecond paragraph."]);
}

#[test]
fn recursive_picks_the_first_separator_present() {
    // No "\n\n": lines are used; no "\n" in a line: words.
    let text = "one two three\nfour five six";
    let fragments = split(&recursive(&["\n\n", "\n", " ", ""], 14, 0), text);
    assert_eq!(fragments, ["one two three", "four five six"]);
    // Both lines are too long for 9: each is split on " "; the second line's pieces are
    // "\nfour", " five", " six" (the "\n" it starts with counts).
    let fragments = split(&recursive(&["\n\n", "\n", " ", ""], 9, 0), text);
    assert_eq!(fragments, ["one two", "three", "four", "five six"]);
}

#[test]
fn recursive_with_no_separator_present_keeps_the_text() {
    let fragments = split(&recursive(&["|"], 3, 0), "abcdef");
    assert_eq!(fragments, ["abcdef"]);
    let fragments = split(&recursive(&["|"], 30, 0), "abc|def");
    assert_eq!(fragments, ["abc|def"]);
}

#[test]
fn character_joins_pieces_with_the_separator() {
    let fragments = split(&character(", ", 10, 0), "aa, bb, cc, dd, ee");
    assert_eq!(fragments, ["aa, bb, cc", "dd, ee"]);
    // The empty separator splits into graphemes and joins them back.
    let fragments = split(&character("", 3, 0), "abcdefg");
    assert_eq!(fragments, ["abc", "def", "g"]);
}

#[test]
fn separator_inside_a_grapheme_is_not_used() {
    // "\n" inside "\r\n" is not a cut point: the line stays whole.
    let fragments = split(&character("\n", 3, 0), "ab\r\ncd");
    assert_eq!(fragments, ["ab\r\ncd"]);
    let fragments = split(&character("\n", 3, 0), "ab\ncd");
    assert_eq!(fragments, ["ab", "cd"]);
    // "e" followed by a combining acute is not the separator "e" for `character`.
    let fragments = split(&character("e", 2, 0), "xe\u{301}yez");
    assert_eq!(fragments, ["xe\u{301}y", "z"]);
}

// ---------------------------------------------------------------- overlap

fn words(count: usize) -> String {
    (0..count)
        .map(|i| format!("w{i:02}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The longest suffix of `previous` that is a prefix of `next`.
fn shared(previous: &str, next: &str) -> usize {
    (0..=next.len().min(previous.len()))
        .rev()
        .find(|&k| next.is_char_boundary(k) && previous.ends_with(&next[..k]))
        .map_or(0, |k| chars(&next[..k]))
}

#[test]
fn recursive_overlap_is_at_most_chunk_overlap() {
    let text = words(100);
    let fragments = split(&recursive(&["\n\n", "\n", " ", ""], 20, 8), &text);
    assert_eq!(fragments[0], "w00 w01 w02 w03 w04");
    assert_eq!(fragments[1], "w03 w04 w05 w06 w07");
    for pair in fragments.windows(2) {
        assert!(chars(&pair[0]) <= 20 && chars(&pair[1]) <= 20);
        let k = shared(&pair[0], &pair[1]);
        assert!(k > 0 && k <= 8, "{pair:?} share {k}");
    }
    // Every word is kept, in order.
    let mut seen: Vec<&str> = Vec::new();
    for fragment in &fragments {
        for word in fragment.split(' ') {
            if seen.last() < Some(&word) {
                seen.push(word);
            }
        }
    }
    assert_eq!(seen.join(" "), text);
}

#[test]
fn zero_overlap_shares_nothing() {
    let text = words(50);
    let fragments = split(&recursive(&["\n\n", "\n", " ", ""], 20, 0), &text);
    assert_eq!(fragments.join(" "), text);
    let fragments = split(&character(" ", 20, 0), &text);
    assert_eq!(fragments.join(" "), text);
}

#[test]
fn character_overlap_is_at_most_chunk_overlap() {
    let text = words(60).replace(' ', "\n\n");
    let fragments = split(&character("\n\n", 23, 10), &text);
    assert_eq!(fragments[0], "w00\n\nw01\n\nw02\n\nw03\n\nw04");
    assert_eq!(fragments[1], "w03\n\nw04\n\nw05\n\nw06\n\nw07");
    for pair in fragments.windows(2) {
        assert!(chars(&pair[0]) <= 23);
        let k = shared(&pair[0], &pair[1]);
        assert!(k > 0 && k <= 10, "{pair:?} share {k}");
    }
}

#[test]
fn token_windows_step_by_size_minus_overlap() {
    let text = "one two three four five six seven";
    let fragments = split(&token(3, 1), text);
    assert_eq!(
        fragments,
        ["one two three", "three four five", "five six seven"]
    );
    let fragments = split(&token(3, 0), text);
    assert_eq!(fragments, ["one two three", "four five six", "seven"]);
    // The last window is the first one reaching the last token.
    let fragments = split(&token(4, 3), "a b c d e");
    assert_eq!(fragments, ["a b c d", "b c d e"]);
    let fragments = split(&token(100, 10), text);
    assert_eq!(fragments, [text]);
}

#[test]
fn token_fragments_are_original_spans() {
    let text = "  alpha\t beta\n\ngamma   delta  ";
    let fragments = split(&token(2, 0), text);
    assert_eq!(fragments, ["alpha\t beta", "gamma   delta"]);
}

// ---------------------------------------------------------------- multi-byte text

#[test]
fn zwj_emoji_is_never_split() {
    let family = "👨\u{200d}👩\u{200d}👧\u{200d}👦";
    assert_eq!(chars(family), 7);
    let text = format!("ab{family}cd");
    let fragments = split(&recursive(&[""], 3, 0), &text);
    assert_eq!(fragments, ["ab", family, "cd"]);
    let fragments = split(&character("", 3, 0), &text);
    assert_eq!(fragments, ["ab", family, "cd"]);
    // With room for it, it is merged with its neighbours (sizes in chars: 7 + 2).
    let fragments = split(&recursive(&[""], 9, 0), &text);
    assert_eq!(fragments, [format!("ab{family}"), "cd".to_owned()]);
    let fragments = split(&token(1, 0), &format!("x {family} y"));
    assert_eq!(fragments, ["x", family, "y"]);
}

#[test]
fn combining_accents_stay_with_their_letter() {
    let text = "e\u{301}e\u{301}e\u{301}";
    let fragments = split(&recursive(&[""], 3, 0), text);
    assert_eq!(fragments, ["e\u{301}", "e\u{301}", "e\u{301}"]);
    let fragments = split(&recursive(&[""], 4, 2), text);
    assert_eq!(fragments, ["e\u{301}e\u{301}", "e\u{301}e\u{301}"]);
    assert_whole_graphemes(text, &fragments);
    // A space carrying a combining mark is not trimmed away from it.
    let fragments = split(&recursive(&[" ", ""], 3, 0), "ab \u{301}cd");
    assert_whole_graphemes("ab \u{301}cd", &fragments);
}

#[test]
fn cjk_sizes_are_in_chars_not_bytes() {
    let text = "漢字漢字漢字";
    let fragments = split(&recursive(&["\n\n", "\n", " ", ""], 4, 1), text);
    assert_eq!(fragments, ["漢字漢字", "字漢字"]);
    assert!(fragments.iter().all(|f| chars(f) <= 4 && f.len() > 4));
    let config = SplitterConfig::default_for("recursive-character").unwrap();
    let long = "日本語のテキスト。".repeat(200); // 1800 chars, 5400 bytes
    let fragments = split(&config, &long);
    assert_eq!(
        fragments.iter().map(|f| chars(f)).collect::<Vec<_>>(),
        [1000, 1000]
    );
}

#[test]
fn mixed_multibyte_text_is_cut_on_grapheme_boundaries() {
    let text =
        "Café ☕ naïve e\u{301}cole 🇫🇷🇩🇪 👍🏽 日本語 👩\u{200d}💻 fin.\n\nΚαλημέρα κόσμε — ünïcödé.";
    for size in 1..12 {
        for config in [
            recursive(&["\n\n", "\n", " ", ""], size, size / 2),
            recursive(&[""], size, size.saturating_sub(1)),
            character("", size, size / 3),
            character(" ", size, 0),
        ] {
            let fragments = split(&config, text);
            assert!(!fragments.is_empty());
            assert_whole_graphemes(text, &fragments);
        }
    }
    // Regional indicators pair up: flags are never halved.
    let fragments = split(&recursive(&[""], 2, 0), "🇫🇷🇩🇪");
    assert_eq!(fragments, ["🇫🇷", "🇩🇪"]);
}

// ---------------------------------------------------------------- caller tokenizer

#[test]
fn embedding_model_windows_use_the_caller_spans() {
    let config = SplitterConfig::Token {
        chunk_size: 2,
        chunk_overlap: 1,
        tokenizer: TokenizerKind::EmbeddingModel,
    };
    let text = "unbelievable things";
    // Sub-word tokens, given out of order, with an empty special-token span.
    let tokenize = |_: &str| -> Vec<Range<usize>> { vec![0..0, 6..12, 0..2, 2..6, 13..19] };
    let fragments = split_with_tokenizer(&config, text, &tokenize);
    assert_eq!(fragments, ["unbeli", "believable", "evable things"]);
    // `split` falls back to whitespace tokens.
    assert_eq!(split(&config, text), ["unbelievable things"]);
}

#[test]
fn embedding_model_spans_are_widened_to_graphemes() {
    let config = SplitterConfig::Token {
        chunk_size: 1,
        chunk_overlap: 0,
        tokenizer: TokenizerKind::EmbeddingModel,
    };
    let text = "a👍🏽b";
    // Byte-level tokens cutting the emoji (even inside a UTF-8 sequence), and one past the end.
    let tokenize = |_: &str| -> Vec<Range<usize>> { vec![0..1, 1..3, 3..9, 9..10, 9..99] };
    let fragments = split_with_tokenizer(&config, text, &tokenize);
    assert_eq!(fragments, ["a", "👍🏽", "👍🏽", "b", "b"]);
}

#[test]
fn caller_tokenizer_is_ignored_by_other_configurations() {
    let calls = Cell::new(0);
    let tokenize = |_: &str| -> Vec<Range<usize>> {
        calls.set(calls.get() + 1);
        Vec::new()
    };
    let text = "some words here";
    for config in seeded() {
        assert_eq!(
            split_with_tokenizer(&config, text, &tokenize),
            split(&config, text)
        );
    }
    assert_eq!(calls.get(), 0);
}

// ---------------------------------------------------------------- hand-built configurations

#[test]
fn invalid_hand_built_configurations_do_not_panic() {
    let text = "a b c d e f";
    for config in [
        recursive(&[], 3, 1),
        recursive(&[" "], 0, 0),
        recursive(&[" "], 2, 5),
        character(" ", 0, 3),
        token(0, 0),
        token(2, 2),
        token(2, 9),
    ] {
        let fragments = split(&config, text);
        assert!(!fragments.is_empty(), "{config:?}");
    }
}

// ---------------------------------------------------------------- parameters

#[test]
fn defaults_of_each_provider() {
    assert_eq!(
        SplitterConfig::from_parameters("recursive-character", &json!({})).unwrap(),
        recursive(&["\n\n", "\n", " ", ""], 1000, 200)
    );
    assert_eq!(
        SplitterConfig::from_parameters("character", &json!({})).unwrap(),
        character("\n\n", 1000, 200)
    );
    assert_eq!(
        SplitterConfig::from_parameters("token", &json!({})).unwrap(),
        token(256, 32)
    );
    assert_eq!(
        SplitterConfig::from_parameters("token", &Value::Null).unwrap(),
        token(256, 32)
    );
}

#[test]
fn seeded_configurations_parameters() {
    let parameters: Vec<Value> = seeded().iter().map(SplitterConfig::to_parameters).collect();
    assert_eq!(
        parameters,
        [
            json!({"separators": ["\n\n", "\n", " ", ""], "chunk_size": 1000, "chunk_overlap": 200}),
            json!({"separator": "\n\n", "chunk_size": 1000, "chunk_overlap": 200}),
            json!({"chunk_size": 256, "chunk_overlap": 32, "tokenizer": "whitespace"}),
        ]
    );
    for config in seeded() {
        let back = SplitterConfig::from_parameters(config.provider(), &config.to_parameters());
        assert_eq!(back.unwrap(), config);
    }
    assert_eq!(SplitterConfig::default_for("nope"), None);
}

#[test]
fn given_parameters_are_kept_and_unknown_keys_ignored() {
    let config = SplitterConfig::from_parameters(
        "recursive-character",
        &json!({"separators": [". ", ""], "chunk_size": 50, "chunk_overlap": 0, "strip": false}),
    )
    .unwrap();
    assert_eq!(config, recursive(&[". ", ""], 50, 0));
    assert_eq!(
        config.to_parameters(),
        json!({"separators": [". ", ""], "chunk_size": 50, "chunk_overlap": 0})
    );
    let config = SplitterConfig::from_parameters(
        "character",
        &json!({"separator": "", "chunk_size": 10, "chunk_overlap": 9, "extra": [1]}),
    )
    .unwrap();
    assert_eq!(config, character("", 10, 9));
    let config = SplitterConfig::from_parameters(
        "token",
        &json!({"tokenizer": "embedding-model", "chunk_size": 1, "chunk_overlap": 0}),
    )
    .unwrap();
    assert_eq!(
        config.to_parameters(),
        json!({"chunk_size": 1, "chunk_overlap": 0, "tokenizer": "embedding-model"})
    );
    // null takes the default.
    let config = SplitterConfig::from_parameters(
        "character",
        &json!({"separator": null, "chunk_size": null, "chunk_overlap": null}),
    )
    .unwrap();
    assert_eq!(config, character("\n\n", 1000, 200));
}

#[test]
fn unknown_provider() {
    assert_eq!(
        SplitterConfig::from_parameters("semantic", &json!({})),
        Err(SplitterConfigError::ProviderNotFound("semantic".to_owned()))
    );
    assert_eq!(
        err("Token", json!({})),
        "Text splitter provider not found: Token"
    );
    assert_eq!(err("", json!({})), "Text splitter provider not found: ");
}

#[test]
fn parameter_validation_errors() {
    let cases = [
        ("token", json!([]), "parameters must be an object"),
        ("token", json!("x"), "parameters must be an object"),
        (
            "token",
            json!({"chunk_size": 0}),
            "chunk_size must be a positive integer",
        ),
        (
            "token",
            json!({"chunk_size": -5}),
            "chunk_size must be a positive integer",
        ),
        (
            "token",
            json!({"chunk_size": 10.5}),
            "chunk_size must be a positive integer",
        ),
        (
            "token",
            json!({"chunk_size": "10"}),
            "chunk_size must be a positive integer",
        ),
        (
            "character",
            json!({"chunk_overlap": -1}),
            "chunk_overlap must be a non-negative integer",
        ),
        (
            "character",
            json!({"chunk_overlap": true}),
            "chunk_overlap must be a non-negative integer",
        ),
        (
            "character",
            json!({"chunk_size": 100}),
            "chunk_overlap must be smaller than chunk_size",
        ),
        (
            "recursive-character",
            json!({"chunk_size": 10, "chunk_overlap": 10}),
            "chunk_overlap must be smaller than chunk_size",
        ),
        (
            "token",
            json!({"chunk_size": 1, "chunk_overlap": 1}),
            "chunk_overlap must be smaller than chunk_size",
        ),
        (
            "recursive-character",
            json!({"separators": []}),
            "separators must be a non-empty list of strings",
        ),
        (
            "recursive-character",
            json!({"separators": ["\n", 1]}),
            "separators must be a non-empty list of strings",
        ),
        (
            "recursive-character",
            json!({"separators": "\n"}),
            "separators must be a non-empty list of strings",
        ),
        (
            "character",
            json!({"separator": ["\n"]}),
            "separator must be a string",
        ),
        (
            "token",
            json!({"tokenizer": "bpe"}),
            "tokenizer must be one of whitespace, embedding-model",
        ),
        (
            "token",
            json!({"tokenizer": 1}),
            "tokenizer must be one of whitespace, embedding-model",
        ),
    ];
    for (provider, parameters, reason) in cases {
        assert_eq!(
            SplitterConfig::from_parameters(provider, &parameters),
            Err(SplitterConfigError::InvalidParameters(reason.to_owned())),
            "{provider} {parameters}"
        );
        assert_eq!(
            err(provider, parameters),
            format!("Invalid text splitter parameters: {reason}")
        );
    }
}

// ---------------------------------------------------------------- seeded configurations

#[test]
fn seeded_configurations_split_a_long_document() {
    let paragraph = |i: usize| {
        format!(
            "Paragraph {i}. {}",
            (0..60)
                .map(|w| format!("word{w}"))
                .collect::<Vec<_>>()
                .join(" ")
        )
    };
    let text = (0..20).map(paragraph).collect::<Vec<_>>().join("\n\n");
    let [recursive, character, token] = <[SplitterConfig; 3]>::try_from(seeded()).unwrap();

    let fragments = split(&recursive, &text);
    assert!(fragments.len() > 1);
    assert!(fragments.iter().all(|f| chars(f) <= 1000));
    // Paragraphs (about 430 chars) are merged two by two at most.
    assert!(fragments.iter().all(|f| f.starts_with("Paragraph")));

    let fragments = split(&character, &text);
    assert!(fragments.iter().all(|f| chars(f) <= 1000));
    assert_eq!(fragments.len(), 10);

    let fragments = split(&token, &text);
    let counts: Vec<usize> = fragments
        .iter()
        .map(|f| f.split_whitespace().count())
        .collect();
    // 20 × 62 = 1240 tokens; windows start every 224 tokens.
    assert_eq!(counts, [256, 256, 256, 256, 256, 120]);
}
