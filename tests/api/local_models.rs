//! The `local` provider through HTTP: the seeded `default` model is all-MiniLM-L6-v2 when it
//! loads from `TROVE_MODELS_DIR`, its vectors match sentence-transformers, searches rank by
//! meaning, and the `token` splitter's `embedding-model` tokenizer uses the model's
//! tokenizer, in process and through the sidecar.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use reqwest::StatusCode;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::helpers::{
    AppOptions, TestApp, assert_error, free_port, spawn_app, spawn_app_with,
    spawn_app_without_worker, str_of,
};

/// The models folder `scripts/test` installs (all-MiniLM-L6-v2 from its PyPI wheel).
fn models_dir() -> PathBuf {
    PathBuf::from(
        std::env::var("TROVE_MODELS_DIR")
            .expect("TROVE_MODELS_DIR must name the models folder (scripts/test sets it)"),
    )
}

#[derive(Deserialize)]
struct Reference {
    items: Vec<ReferenceItem>,
}

#[derive(Deserialize)]
struct ReferenceItem {
    text: String,
    embedding: Vec<f64>,
}

/// Vectors computed once with sentence-transformers (`scripts/reference-embeddings.py`).
fn reference() -> Reference {
    let path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("embed/tests/fixtures/reference.json");
    serde_json::from_str(&std::fs::read_to_string(&path).expect("reference fixture"))
        .expect("reference JSON")
}

fn cosine(a: &[f64], b: &[f64]) -> f64 {
    let dot: f64 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let na: f64 = a.iter().map(|x| x * x).sum::<f64>().sqrt();
    let nb: f64 = b.iter().map(|x| x * x).sum::<f64>().sqrt();
    dot / (na * nb)
}

fn numbers(value: &Value) -> Vec<f64> {
    value
        .as_array()
        .unwrap_or_else(|| panic!("not an array: {value}"))
        .iter()
        .map(|x| x.as_f64().expect("number"))
        .collect()
}

async fn query_vector(app: &TestApp, model_id: &str, text: &str) -> Vec<f64> {
    let reply = app
        .post(
            &format!("/embedding-models/{model_id}/query"),
            &json!({ "text": text }),
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(reply.body["dimensions"], 384, "{}", reply.text);
    numbers(&reply.body["embedding"])
}

#[tokio::test]
async fn installation_seeds_local_minilm_when_it_loads() {
    let app = spawn_app().await;
    let reply = app.get("/embedding-models?name=default").await;
    let model = &reply.body["data"][0];
    assert_eq!(model["provider"], "local", "{}", reply.text);
    assert_eq!(model["model_name"], "all-MiniLM-L6-v2");
    assert_eq!(model["parameters"], json!({}));
    assert_eq!(model["dimensions"], 384);
}

#[tokio::test]
async fn installation_seeds_the_hash_embedder_when_the_model_does_not_load() {
    let missing = std::env::temp_dir().join(format!("trove-no-models-{}", uuid::Uuid::new_v4()));
    let app = spawn_app_with(AppOptions {
        env: HashMap::from([("TROVE_MODELS_DIR".to_owned(), missing.display().to_string())]),
        ..AppOptions::default()
    })
    .await;
    let reply = app.get("/embedding-models?name=default").await;
    let model = &reply.body["data"][0];
    assert_eq!(model["provider"], "hash", "{}", reply.text);
    assert_eq!(model["model_name"], "feature-hash");
    assert_eq!(model["parameters"], json!({"dimensions": 384}));
    assert_eq!(model["dimensions"], 384);
}

#[tokio::test]
async fn the_default_model_matches_sentence_transformers() {
    let app = spawn_app().await;
    let id = app.seeded("/embedding-models", "default").await;
    for item in reference().items.iter().take(8) {
        let got = query_vector(&app, &id, &item.text).await;
        let similarity = cosine(&got, &item.embedding);
        assert!(
            similarity >= 0.9999,
            "{:?}: cosine {similarity} to the sentence-transformers vector",
            item.text
        );
    }
}

#[tokio::test]
async fn local_models_are_named_as_fastembed_names_them() {
    let app = spawn_app().await;
    let reference = reference();
    let first = reference.items.first().expect("reference items");
    for (name, model_name) in [
        ("full", "sentence-transformers/all-MiniLM-L6-v2"),
        ("any-case", "ALL-minilm-l6-V2"),
    ] {
        let reply = app
            .post(
                "/embedding-models",
                &json!({"name": name, "provider": "local", "model_name": model_name, "dimensions": 384}),
            )
            .await;
        assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
        assert_eq!(reply.body["model_name"], model_name);
        let got = query_vector(&app, str_of(&reply.body, "id"), &first.text).await;
        assert!(cosine(&got, &first.embedding) >= 0.9999);
    }
    let reply = app
        .post(
            "/embedding-models",
            &json!({"name": "wrong-size", "provider": "local", "model_name": "all-MiniLM-L6-v2", "dimensions": 512}),
        )
        .await;
    assert_error(&reply, StatusCode::BAD_REQUEST, "Invalid parameter");
    assert_eq!(
        reply.body["error"]["details"]["error"],
        "Failed to create embedding model: expected embedding size 512, got 384"
    );
}

const DOCS: [(&str, &str); 3] = [
    (
        "cats",
        "Cats are small domesticated felines. They purr, sleep most of the day and chase mice.",
    ),
    (
        "bonds",
        "Government bonds pay a fixed coupon; their prices fall when interest rates rise.",
    ),
    (
        "volcano",
        "Lava flows from an erupting volcano and cools into basalt rock.",
    ),
];

#[tokio::test]
async fn similarity_search_with_minilm_ranks_by_meaning() {
    let app = spawn_app_without_worker().await;
    let pid = app.new_pipeline_id(json!({})).await;
    for (name, text) in DOCS {
        app.submit_text(&pid, name, text).await;
    }
    assert_eq!(app.step().await.stored, DOCS.len());
    // Queries that share no word with their document.
    for (query, expected) in [
        ("kitten pets at home", "cats"),
        ("investing in fixed income securities", "bonds"),
        ("magma eruption geology", "volcano"),
    ] {
        let reply = app
            .post(
                &format!("/pipelines/{pid}/search"),
                &json!({"query": query, "type": "similarity", "classification": "public", "params": {"k": 3}}),
            )
            .await;
        assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
        let hits = reply.body.as_array().expect("hits");
        assert_eq!(hits.len(), 3);
        assert_eq!(
            hits[0]["page_content"],
            DOCS.iter().find(|(n, _)| *n == expected).unwrap().1,
            "{query}: {}",
            reply.text
        );
    }
}

/// A text whose long words are several word pieces each.
const PIECES: &str = "Antidisestablishmentarianism notwithstanding, electroencephalography and \
    pseudopseudohypoparathyroidism remain uncharacteristically incomprehensible.";

/// Fragments of PIECES split by a token splitter of `chunk_size` word pieces with the
/// model's own tokenizer (computed here with the model crate).
fn expected_pieces(chunk_size: usize) -> Vec<String> {
    let model = trove_embed::LocalModel::load(&models_dir(), "all-MiniLM-L6-v2", 1).expect("model");
    let config = trove_text::SplitterConfig::from_parameters(
        "token",
        &json!({"chunk_size": chunk_size, "chunk_overlap": 0, "tokenizer": "embedding-model"}),
    )
    .expect("config");
    let fragments =
        trove_text::split_with_tokenizer(&config, PIECES, &|t: &str| model.token_spans(t));
    let whitespace = trove_text::split(&config, PIECES);
    assert!(
        fragments.len() > whitespace.len(),
        "word pieces make more windows than words"
    );
    fragments
}

async fn token_pipeline(app: &TestApp) -> String {
    let splitter = app
        .post(
            "/text-splitters",
            &json!({"name": "pieces", "provider": "token",
                    "parameters": {"chunk_size": 6, "chunk_overlap": 0, "tokenizer": "embedding-model"}}),
        )
        .await;
    assert_eq!(splitter.status, StatusCode::CREATED, "{}", splitter.text);
    app.new_pipeline_id(json!({"default_text_splitter_id": splitter.body["id"]}))
        .await
}

async fn fragment_texts(app: &TestApp, pid: &str, doc: &str) -> Vec<String> {
    let reply = app
        .get(&format!("/pipelines/{pid}/documents/{doc}/fragments"))
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    reply.body["data"]
        .as_array()
        .expect("fragments")
        .iter()
        .map(|f| f["page_content"].as_str().expect("text").to_owned())
        .collect()
}

#[tokio::test]
async fn the_token_splitter_counts_the_models_word_pieces() {
    let app = spawn_app_without_worker().await;
    let pid = token_pipeline(&app).await;
    let doc = app.submit_text(&pid, "pieces", PIECES).await;
    assert_eq!(app.step().await.stored, 1);
    assert_eq!(
        fragment_texts(&app, &pid, str_of(&doc, "id")).await,
        expected_pieces(6)
    );
}

async fn app_with_sidecar(models: Option<PathBuf>) -> TestApp {
    let port = free_port();
    let addr = format!("127.0.0.1:{port}").parse().expect("address");
    tokio::spawn(trove::sidecar::serve(
        addr,
        models,
        0,
        std::future::pending(),
    ));
    spawn_app_with(AppOptions {
        no_worker: true,
        env: HashMap::from([(
            "TROVE_SIDECAR_URL".to_owned(),
            format!("http://127.0.0.1:{port}"),
        )]),
        ..AppOptions::default()
    })
    .await
}

#[tokio::test]
async fn the_sidecar_embeds_and_tokenizes_with_its_local_models() {
    let app = app_with_sidecar(Some(models_dir())).await;
    let id = app.seeded("/embedding-models", "default").await;
    let item = &reference().items[1];
    let got = query_vector(&app, &id, &item.text).await;
    assert!(cosine(&got, &item.embedding) >= 0.9999);

    let pid = token_pipeline(&app).await;
    let doc = app.submit_text(&pid, "pieces", PIECES).await;
    let outcome = trove::startup::build_worker(&app.state)
        .await
        .expect("worker")
        .step(Duration::from_millis(300))
        .await
        .expect("step");
    assert_eq!(outcome.stored, 1, "{outcome:?}");
    assert_eq!(
        fragment_texts(&app, &pid, str_of(&doc, "id")).await,
        expected_pieces(6)
    );
}

#[tokio::test]
async fn a_sidecar_without_the_model_answers_a_grpc_error() {
    let app = app_with_sidecar(None).await;
    let id = app.seeded("/embedding-models", "default").await;
    let reply = app
        .post(
            &format!("/embedding-models/{id}/query"),
            &json!({"text": "hello"}),
        )
        .await;
    assert_error(&reply, StatusCode::INTERNAL_SERVER_ERROR, "Internal error");
    let detail = reply.body["error"]["details"]["error"]
        .as_str()
        .unwrap_or_default();
    assert!(
        detail.starts_with("gRPC error: ") && detail.contains("TROVE_MODELS_DIR is not set"),
        "{}",
        reply.text
    );
}
