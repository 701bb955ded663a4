//! The gRPC sidecar: with `TROVE_SIDECAR_URL`, workers split (and embed with `local`
//! models) through it; when it is unreachable, the group fails and its jobs return to the
//! queue.

use std::collections::HashMap;
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::json;

use crate::helpers::{AppOptions, TestApp, free_port, spawn_app_with};

async fn app_with_sidecar(url: String) -> TestApp {
    spawn_app_with(AppOptions {
        no_worker: true,
        env: HashMap::from([("TROVE_SIDECAR_URL".to_owned(), url)]),
        ..AppOptions::default()
    })
    .await
}

async fn pipeline_with_document(app: &TestApp, text: &str) -> (String, String) {
    let model = app.get("/embedding-models?name=default").await.body["data"][0]["id"].clone();
    let splitter = app.get("/text-splitters?name=character").await.body["data"][0]["id"].clone();
    let pipeline = app
        .post(
            "/pipelines",
            &json!({"name": "sidecar", "embedding_model_id": model, "default_text_splitter_id": splitter, "classifications": ["c"]}),
        )
        .await;
    assert_eq!(pipeline.status, StatusCode::CREATED, "{}", pipeline.text);
    let pid = pipeline.body["id"].as_str().unwrap().to_owned();
    let doc = app
        .post(
            &format!("/pipelines/{pid}/documents"),
            &json!({"external_identifier": "d", "classification": "c", "text": text}),
        )
        .await;
    assert_eq!(doc.status, StatusCode::CREATED, "{}", doc.text);
    (pid, doc.body["id"].as_str().unwrap().to_owned())
}

#[tokio::test]
async fn workers_split_through_the_sidecar() {
    let port = free_port();
    let addr = format!("127.0.0.1:{port}").parse().unwrap();
    tokio::spawn(trove::sidecar::serve(
        addr,
        std::env::var_os("TROVE_MODELS_DIR").map(Into::into),
        0,
        std::future::pending(),
    ));
    let app = app_with_sidecar(format!("http://127.0.0.1:{port}")).await;
    let paragraphs: Vec<String> = (0..5)
        .map(|i| format!("Paragraph {i}. {}", "word ".repeat(300)))
        .collect();
    let text = paragraphs.join("\n\n");
    let (pid, doc) = pipeline_with_document(&app, &text).await;

    let worker = trove::startup::build_worker(&app.state).await.unwrap();
    let outcome = worker.step(Duration::from_millis(300)).await.unwrap();
    assert_eq!(outcome.stored, 1, "{outcome:?}");

    let fragments = app
        .get(&format!(
            "/pipelines/{pid}/documents/{doc}/fragments?count=true"
        ))
        .await;
    let config = trove_text::SplitterConfig::default_for("character").unwrap();
    let expected = trove_text::split(&config, &text);
    let got: Vec<String> = fragments.body["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["page_content"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        got, expected,
        "the sidecar splits exactly as in-process splitting"
    );
}

#[tokio::test]
async fn an_unreachable_sidecar_fails_the_group_and_keeps_the_document_pending() {
    let port = free_port();
    let app = app_with_sidecar(format!("http://127.0.0.1:{port}")).await;
    let (pid, doc) = pipeline_with_document(&app, "some text").await;
    let worker = trove::startup::build_worker(&app.state).await.unwrap();
    let outcome = worker.step(Duration::from_millis(300)).await.unwrap();
    assert_eq!(outcome.failed, 1, "{outcome:?}");
    let read = app.get(&format!("/pipelines/{pid}/documents/{doc}")).await;
    assert_eq!(read.body[0]["status"], "pending");
    assert!(
        worker
            .metrics
            .render()
            .contains("service_document_queue_failed{description=")
    );
}
