//! Compares `recursive-character` and `character` with LangChain's own output
//! (`langchain-text-splitters` 1.1.3, `RecursiveCharacterTextSplitter` and
//! `CharacterTextSplitter` with their defaults) on random texts without combining marks, ZWJ
//! sequences or "\r\n", where grapheme clusters and chars coincide. LangChain's fragments were
//! stripped and empty ones dropped, as Trove does (LangChain leaves a too-long piece kept whole
//! unstripped). Regenerate with `fixtures/gen_langchain_cases.py`.
#![expect(clippy::unwrap_used, reason = "tests fail loudly")]

use serde_json::Value;
use trove_text::{SplitterConfig, split};

#[test]
fn matches_langchain_on_recorded_cases() {
    let cases: Vec<Value> =
        serde_json::from_str(include_str!("fixtures/langchain_cases.json")).unwrap();
    assert!(cases.len() >= 100);
    let mut mismatches = Vec::new();
    for (index, case) in cases.iter().enumerate() {
        let config = SplitterConfig::from_parameters(
            case["provider"].as_str().unwrap(),
            &case["parameters"],
        )
        .unwrap();
        let text = case["text"].as_str().unwrap();
        let expected: Vec<&str> = case["fragments"]
            .as_array()
            .unwrap()
            .iter()
            .map(|fragment| fragment.as_str().unwrap())
            .collect();
        let got = split(&config, text);
        if got != expected {
            mismatches.push(format!(
                "case {index}: {config:?}\n text: {text:?}\n langchain: {expected:?}\n trove:     {got:?}"
            ));
        }
    }
    assert!(mismatches.is_empty(), "{}", mismatches.join("\n"));
}
