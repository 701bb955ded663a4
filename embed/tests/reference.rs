//! Checks trove-embed against sentence-transformers on the real model.
//!
//! The model folder comes from `$TROVE_MODELS_DIR` (scripts/test sets it); these tests
//! only print a note and pass when the variable is unset. The reference vectors are
//! written by scripts/reference-embeddings.py.

use std::io::Write;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use serde::Deserialize;
use trove_embed::{EmbedError, LocalModel};

#[derive(Deserialize)]
struct Reference {
    max_seq_length: usize,
    dimensions: usize,
    items: Vec<Item>,
}

#[derive(Deserialize)]
struct Item {
    text: String,
    tokens: usize,
    embedding: Vec<f32>,
}

fn models_dir() -> Option<PathBuf> {
    match std::env::var_os("TROVE_MODELS_DIR") {
        Some(d) if !d.is_empty() => Some(PathBuf::from(d)),
        _ => {
            // Written to stderr directly so that the note shows without --nocapture.
            let _ = writeln!(
                std::io::stderr(),
                "note: TROVE_MODELS_DIR is unset; skipping the local model test"
            );
            None
        }
    }
}

fn model() -> Option<Arc<LocalModel>> {
    static MODEL: OnceLock<Arc<LocalModel>> = OnceLock::new();
    let dir = models_dir()?;
    Some(
        MODEL
            .get_or_init(|| match LocalModel::load(&dir, "all-MiniLM-L6-v2", 2) {
                Ok(m) => Arc::new(m),
                Err(e) => panic!("loading all-MiniLM-L6-v2 from {}: {e}", dir.display()),
            })
            .clone(),
    )
}

fn reference() -> Reference {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/reference.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn cosine(a: &[f32], b: &[f32]) -> f64 {
    let dot: f64 = a
        .iter()
        .zip(b)
        .map(|(x, y)| f64::from(*x) * f64::from(*y))
        .sum();
    let na: f64 = a.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
    let nb: f64 = b.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
    dot / (na * nb)
}

fn check(label: &str, reference: &Reference, got: &[Vec<f32>]) {
    assert_eq!(got.len(), reference.items.len());
    let mut worst = (1.0f64, "");
    for (item, e) in reference.items.iter().zip(got) {
        assert_eq!(e.len(), reference.dimensions);
        let norm: f64 = e.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
        assert!(
            (norm - 1.0).abs() < 1e-5,
            "{label}: norm {norm} for {:?}",
            item.text
        );
        let c = cosine(e, &item.embedding);
        assert!(
            c >= 0.9999,
            "{label}: cosine {c} < 0.9999 for {:?}",
            item.text
        );
        if c < worst.0 {
            worst = (c, item.text.as_str());
        }
    }
    let short: String = worst.1.chars().take(40).collect();
    eprintln!(
        "{label}: min cosine {:.9} (1 - cos = {:.1e}) for {short:?}",
        worst.0,
        1.0 - worst.0
    );
}

#[test]
fn embeddings_match_sentence_transformers() {
    let Some(model) = model() else { return };
    let reference = reference();
    assert_eq!(model.dimensions(), reference.dimensions);
    assert_eq!(model.max_seq_length(), reference.max_seq_length);
    let texts: Vec<&str> = reference.items.iter().map(|i| i.text.as_str()).collect();

    let batch = model.embed(&texts).unwrap_or_else(|e| panic!("embed: {e}"));
    check("batch of 20", &reference, &batch);

    let single: Vec<Vec<f32>> = texts
        .iter()
        .map(|t| {
            model
                .embed(&[*t])
                .unwrap_or_else(|e| panic!("embed: {e}"))
                .remove(0)
        })
        .collect();
    check("one by one", &reference, &single);
}

#[test]
fn long_text_is_truncated_at_max_seq_length() {
    let Some(model) = model() else { return };
    let reference = reference();
    for item in &reference.items {
        let spans = model.token_spans(&item.text);
        if item.tokens < reference.max_seq_length {
            // [CLS] and [SEP] are not in the spans.
            assert_eq!(spans.len() + 2, item.tokens, "{:?}", item.text);
        } else {
            assert!(
                spans.len() + 2 > reference.max_seq_length,
                "{:?}",
                item.text
            );
        }
    }
}

#[test]
fn token_spans_are_byte_ranges_of_the_text() {
    let Some(model) = model() else { return };
    assert_eq!(model.token_spans("Hello world"), vec![0..5, 6..11]);
    let text = "Tokenization: naïve 🎉 café";
    let spans = model.token_spans(text);
    assert!(!spans.is_empty());
    let mut last = 0;
    for s in &spans {
        assert!(
            s.start >= last && s.end > s.start && s.end <= text.len(),
            "{s:?}"
        );
        assert!(
            text.get(s.clone()).is_some(),
            "{s:?} is not on a char boundary"
        );
        last = s.end;
    }
    assert_eq!(text.get(spans[0].clone()), Some("Token"));
    assert!(model.token_spans("").is_empty());
}

#[test]
fn edge_inputs() {
    let Some(model) = model() else { return };
    assert!(
        model
            .embed(&[])
            .unwrap_or_else(|e| panic!("{e}"))
            .is_empty()
    );
    let e = model
        .embed(&["", "   ", "a"])
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(e.len(), 3);
    for v in &e {
        assert_eq!(v.len(), 384);
        assert!(v.iter().all(|x| x.is_finite()));
    }
}

#[test]
fn concurrent_calls_give_the_same_vectors() {
    let Some(model) = model() else { return };
    let texts = [
        "first concurrent text",
        "second one, a bit longer than the first",
    ];
    let expected = model.embed(&texts).unwrap_or_else(|e| panic!("{e}"));
    let handles: Vec<_> = (0..3)
        .map(|_| {
            let m = model.clone();
            std::thread::spawn(move || m.embed(&texts))
        })
        .collect();
    for h in handles {
        let got = h
            .join()
            .unwrap_or_else(|_| panic!("thread panicked"))
            .unwrap_or_else(|e| panic!("{e}"));
        for (a, b) in got.iter().zip(&expected) {
            assert!(cosine(a, b) > 0.999_999);
        }
    }
}

#[test]
fn names_and_folders() {
    let Some(dir) = models_dir() else { return };
    for name in ["sentence-transformers/all-MiniLM-L6-v2", "ALL-MINILM-L6-V2"] {
        match LocalModel::load(&dir, name, 1) {
            Ok(m) => assert_eq!((m.dimensions(), m.max_seq_length()), (384, 256)),
            Err(e) => panic!("{name}: {e}"),
        }
    }
    match LocalModel::load(&dir, "text-embedding-3-small", 1) {
        Err(e) => {
            assert_eq!(
                e,
                EmbedError::UnknownModel("text-embedding-3-small".to_owned())
            );
            assert_eq!(e.to_string(), "text-embedding-3-small");
        }
        Ok(_) => panic!("loaded an unknown model"),
    }
    match LocalModel::load(&dir.join("does-not-exist"), "all-MiniLM-L6-v2", 1) {
        Err(EmbedError::Load(reason)) => assert!(reason.contains("all-MiniLM-L6-v2"), "{reason}"),
        other => panic!("unexpected {other:?}"),
    }
}
