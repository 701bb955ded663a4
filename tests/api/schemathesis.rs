//! Property-based testing of the whole HTTP interface with schemathesis: the OpenAPI document
//! Trove serves is the specification; every generated request must get an answer that is not
//! an undocumented server error and whose body matches the document's schema for its status.
//!
//! The test starts Trove with a master key and a fake model server, creates one object of
//! every kind for the path parameters and headers to name, in three sets: one for the
//! operations that read or run objects, one for those that change them or delete what they
//! hold, one for those that delete them. Then it runs `tests/python/schemathesis_run.py` with
//! `TROVE_TEST_PYTHON`.

use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use uuid::Uuid;

use crate::fake_llm::FakeLlm;
use crate::helpers::{TestApp, key_of, spawn_app, str_of, wait_until_processed};
use crate::llms::openai_llm;

/// The interpreter with schemathesis: `TROVE_TEST_PYTHON` (exported by `scripts/test`), else
/// the project's venv.
fn python() -> std::path::PathBuf {
    std::env::var_os("TROVE_TEST_PYTHON").map_or_else(
        || std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(".data/venv/bin/python"),
        std::path::PathBuf::from,
    )
}

/// The metadata schema of the fixture pipelines: one field of each filterable type.
fn metadata_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "year": {"type": "integer"},
            "team": {"type": "string"},
            "score": {"type": "number"},
            "draft": {"type": "boolean"},
        },
    })
}

/// A pipeline on `model` with full-text search, two classifications, an index on `year` and
/// three processed documents; returns `(pipeline id, a document id, the index id)`.
async fn pipeline_with_documents(app: &TestApp, model: &str) -> (String, String, String) {
    let pid = app
        .new_pipeline_id(json!({
            "embedding_model_id": model,
            "has_full_text_search": true,
            "metadata_schema": metadata_schema(),
        }))
        .await;
    let index = app
        .post(
            &format!("/pipelines/{pid}/indexes"),
            &json!({"field": "year"}),
        )
        .await;
    assert_eq!(index.status, StatusCode::CREATED, "{}", index.text);
    let mut document = String::new();
    for (i, classification) in ["public", "internal", "public"].iter().enumerate() {
        let reply = app
            .submit(
                &pid,
                &json!({
                    "external_identifier": format!("doc-{i}"),
                    "classification": classification,
                    "metadata": {"year": 2020 + i, "team": "reef", "score": 0.5, "draft": i == 1},
                    "text": format!("Kelp forests {i} shelter fish.\n\nOtters eat urchins near the reef."),
                }),
            )
            .await;
        assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
        document = str_of(&reply.body, "id").to_owned();
    }
    wait_until_processed(app, &pid, 3).await;
    (pid, document, str_of(&index.body, "id").to_owned())
}

/// POSTs `body` to `path` with the master key, expecting 201; returns the new id.
async fn created_id(app: &TestApp, path: &str, body: Value) -> String {
    let reply = app.post(path, &body).await;
    assert_eq!(reply.status, StatusCode::CREATED, "{path}: {}", reply.text);
    str_of(&reply.body, "id").to_owned()
}

/// An agent answering `question` from the fragments of a similarity placeholder.
fn agent_body() -> Value {
    json!({
        "name": format!("agent-{}", Uuid::new_v4().simple()),
        "prompt": [
            {"role": "system", "template": "Answer from: {context}"},
            {"role": "user", "template": "{question}"},
        ],
        "placeholders": [
            {"name": "question", "type": "query"},
            {"name": "context", "type": "similarity", "target": "question", "params": {"k": 2, "fetch_k": 4}},
        ],
    })
}

/// A taxonomy with one link (`region` europe → `team` reef).
async fn taxonomy(app: &TestApp) -> String {
    let id = created_id(
        app,
        "/taxonomies",
        json!({"name": format!("tax-{}", Uuid::new_v4().simple())}),
    )
    .await;
    let reply = app
        .post(
            &format!("/taxonomies/{id}/entries"),
            &json!({"entries": [{
                "parent_field": "region",
                "parent_value": format!("europe-{}", Uuid::new_v4().simple()),
                "child_field": "team",
                "child_value": "reef",
            }]}),
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    id
}

/// Runs the agent with tracing; returns the execution id.
async fn traced_execution(app: &TestApp, agent: &str, pid: &str, llm: &str) -> String {
    let response = app
        .req(Method::POST, &format!("/agents/{agent}/execute")).as_master()
        .header("x-pipeline-id", pid)
        .header("x-llm-id", llm)
        .json(&json!({"variables": {"question": "kelp"}, "classification": "public", "tracing": true, "stream": false}))
        .send()
        .await;
    assert_eq!(response.status, StatusCode::OK);
    response
        .header("x-service-tracing-id")
        .expect("tracing header")
        .to_owned()
}

/// One object of every kind the path parameters and headers name.
async fn fixture_set(app: &TestApp, fake: &FakeLlm, hash_model: &str) -> Value {
    let (pipeline, document, index) = pipeline_with_documents(app, hash_model).await;
    let llm = openai_llm(app, fake, json!({})).await;
    let agent = created_id(app, "/agents", agent_body()).await;
    let (api_key, _) = key_of(
        &app.create_key_with(json!({"name": "fuzzed", "permissions": {"pipelines": 4}}))
            .await,
    );
    let text_splitter = created_id(
        app,
        "/text-splitters",
        json!({"name": format!("ts-{}", Uuid::new_v4().simple()), "provider": "character"}),
    )
    .await;
    let execution = traced_execution(app, &agent, &pipeline, &llm).await;
    json!({
        "pipeline_id": pipeline,
        "document_id": document,
        "index_id": index,
        "llm_id": llm,
        "agent_id": agent,
        "api_key_id": api_key,
        "taxonomy_id": taxonomy(app).await,
        "text_splitter_id": text_splitter,
        "execution_id": execution,
    })
}

#[tokio::test]
async fn schemathesis_finds_no_server_error_nor_schema_violation() {
    let app = spawn_app().await;
    let fake = FakeLlm::start().await;
    let mut sets = Vec::new();
    for role in ["kept", "changed", "deleted"] {
        let model = str_of(
            &app.create_hash_model(&format!("fuzz-{role}"), 64).await,
            "id",
        )
        .to_owned();
        let mut set = fixture_set(&app, &fake, &model).await;
        set["embedding_model_id"] = json!(model);
        set["embedding_provider_id"] = json!(app.seeded("/embedding-providers", "hash").await);
        set["text_splitter_provider_id"] =
            json!(app.seeded("/text-splitter-providers", "character").await);
        sets.push((role, set));
    }
    let fixtures = Value::Object(
        sets.into_iter()
            .map(|(role, set)| (role.to_owned(), set))
            .collect(),
    );

    let (key_id, secret) = app.master_key();
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/schemathesis_run.py");
    let mut command = tokio::process::Command::new(python());
    command
        .arg(script)
        .env("TROVE_URL", &app.address)
        .env("TROVE_KEY_ID", key_id)
        .env("TROVE_KEY_SECRET", secret)
        .env("TROVE_FIXTURES", fixtures.to_string())
        .current_dir(std::env::temp_dir())
        .kill_on_drop(true);
    let output = tokio::time::timeout(Duration::from_secs(900), command.output())
        .await
        .expect("the schemathesis run finished within 15 minutes")
        .expect("the venv's Python runs (scripts/test installs schemathesis into .data/venv)");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "status {}\nstdout: {stdout}\nstderr: {stderr}",
        output.status
    );
    println!("{stdout}");
    // `ok: <cases> cases in <s> s, 0 untyped 2xx responses, derandomized`
    let summary = stdout.lines().last().unwrap_or_default();
    let cases: usize = summary
        .strip_prefix("ok: ")
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no summary line\nstdout: {stdout}\nstderr: {stderr}"));
    assert!(summary.contains(", 0 untyped 2xx responses,"), "{summary}");
    // Every operation, every phase: a run that tested little says so here.
    assert!(cases >= 2_000, "only {cases} requests: {stdout}");
}
