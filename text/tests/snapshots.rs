//! Snapshots of each provider's fragments for a fixed multi-paragraph text
//! (`text/snapshots/`; review changes with `cargo insta review`).
#![expect(clippy::unwrap_used, reason = "tests fail loudly")]

use serde_json::{Value, json};
use trove_text::{SplitterConfig, split};

const TEXT: &str = "\
Trove stores plain-text documents in pipelines. Each pipeline binds documents to an embedding \
model, a default text splitter, classifications and a metadata schema.

A submitted document is processed asynchronously: it is split into fragments, the fragments are \
embedded and stored.
Only then is the document searchable.

Search returns fragments — similarity, maximal marginal relevance or full-text — restricted by \
classifications.\n\n\n\nCafé, naïve, 日本語のテキスト, 👩\u{200d}💻 and 🇫🇷 travel through unharmed.
";

fn fragments(provider: &str, parameters: Value) -> Vec<String> {
    let config = SplitterConfig::from_parameters(provider, &parameters).unwrap();
    split(&config, TEXT)
}

fn check(name: &str, provider: &str, parameters: Value) {
    let output = json!({
        "provider": provider,
        "parameters": SplitterConfig::from_parameters(provider, &parameters).unwrap().to_parameters(),
        "fragments": fragments(provider, parameters),
    });
    insta::with_settings!({
        snapshot_path => concat!(env!("CARGO_MANIFEST_DIR"), "/snapshots"),
        prepend_module_to_snapshot => false,
        omit_expression => true,
    }, {
        insta::assert_json_snapshot!(name, output);
    });
}

#[test]
fn recursive_character_small_chunks() {
    check(
        "recursive_character_120_30",
        "recursive-character",
        json!({"chunk_size": 120, "chunk_overlap": 30}),
    );
}

#[test]
fn recursive_character_seeded() {
    check(
        "recursive_character_seeded",
        "recursive-character",
        json!({}),
    );
}

#[test]
fn character_small_chunks() {
    check(
        "character_120_30",
        "character",
        json!({"chunk_size": 120, "chunk_overlap": 30}),
    );
}

#[test]
fn character_lines() {
    check(
        "character_newline_60_0",
        "character",
        json!({"separator": "\n", "chunk_size": 60, "chunk_overlap": 0}),
    );
}

#[test]
fn token_small_windows() {
    check(
        "token_16_4",
        "token",
        json!({"chunk_size": 16, "chunk_overlap": 4}),
    );
}

#[test]
fn token_seeded() {
    check("token_seeded", "token", json!({}));
}
