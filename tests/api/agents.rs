//! Agents (`/agents`), retrieval dry runs, executions and their traces through HTTP, against
//! real Postgres and NATS, the seeded embedding model and the fake model server.

use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::fake_llm::{Answer, FakeLlm};
use crate::helpers::{AppOptions, TestApp, spawn_app_with};
use crate::llms::{openai_llm, within};

/// A pipeline (full-text search on) with three public documents ingested; its id.
async fn pipeline_with_documents(app: &TestApp) -> String {
    let pid = app
        .new_pipeline_id(json!({"has_full_text_search": true}))
        .await;
    for (name, text) in [
        ("cats", "Cats purr and sleep in the sun all afternoon."),
        (
            "dogs",
            "Dogs bark at the mailman and fetch sticks in the park.",
        ),
        ("ships", "Container ships cross the ocean carrying cargo."),
    ] {
        app.submit_text(&pid, name, text).await;
    }
    let outcome = app
        .worker()
        .await
        .step(Duration::from_millis(300))
        .await
        .unwrap();
    assert_eq!(outcome.stored, 3, "{outcome:?}");
    pid
}

fn agent_body(name: &str) -> Value {
    json!({
        "name": name,
        "prompt": [
            {"role": "system", "template": "Use this context:\n{context}"},
            {"role": "user", "template": "{question}"}
        ],
        "placeholders": [
            {"name": "question", "type": "query"},
            {"name": "context", "type": "similarity", "target": "question", "params": {"k": 1, "fetch_k": 1}}
        ]
    })
}

async fn app() -> TestApp {
    spawn_app_with(AppOptions {
        no_worker: true,
        ..AppOptions::default()
    })
    .await
}

#[tokio::test]
async fn an_execution_streams_the_answer_and_keeps_a_trace() {
    let app = app().await;
    let fake = FakeLlm::start().await;
    let pid = pipeline_with_documents(&app).await;
    let llm = openai_llm(&app, &fake, json!({})).await;
    let created = app.post("/agents", &agent_body("helper")).await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.text);
    assert_eq!(created.body["prompt"][0]["include"], true);
    assert_eq!(
        created.body["placeholders"][1]["params"],
        json!({"k": 1, "fetch_k": 1, "lambda_mult": 0.5, "threshold": null, "embedding": null})
    );
    assert_eq!(created.body["placeholders"][0]["params"], Value::Null);
    let agent = created.body["id"].as_str().unwrap();

    let dry = app
        .master(Method::POST, &format!("/agents/{agent}/search"))
        .header("x-pipeline-id", &pid)
        .json(&json!({"variables": {"question": "purring cats"}, "classification": "public"}))
        .send()
        .await
        .unwrap();
    assert_eq!(dry.status(), StatusCode::OK);
    let dry: Value = dry.json().await.unwrap();
    assert_eq!(dry["context"].as_array().unwrap().len(), 1, "{dry}");

    fake.script(Answer::new(["Cats ", "purr."]).usage(7, 2));
    let response = within(
        app.master(Method::POST, &format!("/agents/{agent}/execute"))
            .header("x-pipeline-id", &pid)
            .header("x-llm-id", &llm)
            .json(&json!({"variables": {"question": "purring cats"}, "classification": "public", "tracing": true}))
            .send(),
    )
    .await
    .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let trace_id = response
        .headers()
        .get("x-service-tracing-id")
        .unwrap()
        .to_str()
        .unwrap()
        .to_owned();
    let body = within(response.text()).await.unwrap();
    assert!(body.ends_with("\"total_tokens\":9}}\n"), "{body}");
    let sent = fake.last_request().json();
    assert_eq!(
        sent["messages"][0]["content"],
        "Use this context:\nCats purr and sleep in the sun all afternoon."
    );
    assert_eq!(
        sent["messages"][1],
        json!({"role": "user", "content": "purring cats"})
    );

    let trace = app.get(&format!("/tracing/{trace_id}")).await;
    assert_eq!(trace.status, StatusCode::OK, "{}", trace.text);
    assert_eq!(trace.body["answer"], "Cats purr.");
    assert_eq!(trace.body["messages"], sent["messages"]);
    assert_eq!(trace.body["retrievals"]["context"], dry["context"]);
}
