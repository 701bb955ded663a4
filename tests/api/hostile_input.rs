//! Hostile input through HTTP: strings Postgres cannot store (U+0000) are refused at the edge
//! with the field named, nothing stored; text that is only forwarded keeps them.

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::fake_llm::{Answer, FakeLlm};
use crate::helpers::{TestApp, assert_error, assert_plain, eventually, spawn_app};
use crate::llms::openai_llm;

fn assert_nul_refused(reply: &crate::helpers::Reply, field: &str) {
    assert_error(reply, StatusCode::BAD_REQUEST, "Invalid parameter");
    assert_eq!(
        reply.body["error"]["details"]["error"],
        format!("{field} contains the NUL character (U+0000)"),
        "{}",
        reply.text
    );
}

async fn count_of(app: &TestApp, path: &str) -> u64 {
    let reply = app.get(&format!("{path}?count=true")).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    reply.body["page_info"]["count"]
        .as_u64()
        .unwrap_or_else(|| panic!("count: {}", reply.text))
}

#[tokio::test]
async fn nul_in_stored_strings_is_refused_with_the_field_named() {
    let app = spawn_app().await;
    let keys = count_of(&app, "/api-keys").await;
    let reply = app
        .post("/api-keys", &json!({"name": "a\u{0}b", "permissions": {}}))
        .await;
    assert_nul_refused(&reply, "name");
    assert_eq!(count_of(&app, "/api-keys").await, keys, "nothing stored");

    let reply = app.post("/taxonomies", &json!({"name": "t\u{0}"})).await;
    assert_nul_refused(&reply, "name");
    assert_eq!(count_of(&app, "/taxonomies").await, 0);

    let reply = app
        .post(
            "/llms",
            &json!({"name": "llm", "provider": "openai", "endpoint": "http://127.0.0.1:9/v1", "parameters": {"stop": ["x", "\u{0}"]}}),
        )
        .await;
    assert_nul_refused(&reply, "parameters.stop.1");

    let reply = app
        .post(
            "/agents",
            &json!({"name": "agent", "prompt": [{"role": "system", "template": "s"}, {"role": "user", "template": "u\u{0}"}], "placeholders": []}),
        )
        .await;
    assert_nul_refused(&reply, "prompt.1.template");

    // In a list's query string: the query-string error, no database error.
    let reply = app.get("/api-keys?name=a%00").await;
    assert_plain(
        &reply,
        StatusCode::BAD_REQUEST,
        "Failed to deserialize query string: name: the NUL character (U+0000) is not allowed",
    );
}

#[tokio::test]
async fn nul_in_documents_is_refused_and_nothing_is_stored() {
    let app = spawn_app().await;
    let pid = app.new_pipeline_id(json!({})).await;
    let documents = format!("/pipelines/{pid}/documents");
    for (body, field) in [
        (
            json!({"external_identifier": "a", "classification": "public", "text": "PDF text\u{0}with a NUL"}),
            "text",
        ),
        (
            json!({"external_identifier": "b", "classification": "public", "text": "fine", "metadata": {"team": "x\u{0}"}}),
            "metadata.team",
        ),
        (
            json!({"external_identifier": "c\u{0}", "classification": "public", "text": "fine"}),
            "external_identifier",
        ),
    ] {
        let reply = app.post(&documents, &body).await;
        assert_nul_refused(&reply, field);
    }
    assert_eq!(count_of(&app, &documents).await, 0);

    // A search query holding U+0000 is refused the same way; its filters are the filter
    // language's business.
    let reply = app
        .post(
            &format!("/pipelines/{pid}/search"),
            &json!({"query": "a\u{0}", "type": "search", "classification": "public"}),
        )
        .await;
    assert_nul_refused(&reply, "query");
}

#[tokio::test]
async fn forwarded_text_keeps_nul() {
    let app = spawn_app().await;
    let fake = FakeLlm::start().await;
    let llm = openai_llm(&app, &fake, json!({})).await;
    fake.script(Answer::new(["ok"]));
    let response = app
        .req(Method::POST, "/compat/v1/chat/completions")
        .as_master()
        .header("x-llm-id", &llm)
        .json(&json!({"messages": [{"role": "user", "content": "a\u{0}b"}]}))
        .send()
        .await;
    assert_eq!(response.status, StatusCode::OK);
    let sent: Value = fake.last_request().json();
    assert_eq!(sent["messages"][0]["content"], "a\u{0}b");
}

/// Postgres connections terminated under the service (`pg_terminate_backend`, as a restart or
/// a failover does): requests answer the interface's statuses — a refused key check 401 and
/// counted, a failed statement 500, never a 404 or 403 from a lookup that could not run — and
/// the service recovers without a restart.
#[tokio::test]
async fn terminated_database_connections_are_outages_then_recovered() {
    let app = spawn_app().await;
    let pid = app.new_pipeline_id(json!({})).await;
    let paths = [
        format!("/pipelines/{pid}"),
        format!("/pipelines/{pid}/documents"),
        "/api-keys".to_owned(),
    ];
    for path in &paths {
        let reply = app.get(path).await;
        assert_eq!(reply.status, StatusCode::OK, "{path}: {}", reply.text);
    }

    let terminated: Vec<bool> = sqlx::query_scalar(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
         WHERE datname = $1 AND pid <> pg_backend_pid()",
    )
    .bind(&app.database)
    .fetch_all(&app.pool)
    .await
    .unwrap();
    assert!(
        terminated.iter().any(|t| *t),
        "the service's connections were terminated"
    );

    let refused_keys = std::cell::Cell::new(0.0);
    eventually(
        "the service recovered without a restart",
        std::time::Duration::from_secs(5),
        || async {
            let mut all_ok = true;
            for path in &paths {
                let reply = app.get(path).await;
                assert!(
                    matches!(reply.status.as_u16(), 200 | 401 | 500),
                    "{path}: {} {}",
                    reply.status,
                    reply.text
                );
                if reply.status == StatusCode::UNAUTHORIZED {
                    assert_error(
                        &reply,
                        StatusCode::UNAUTHORIZED,
                        "Invalid API Key or Secret",
                    );
                    refused_keys.set(refused_keys.get() + 1.0);
                }
                all_ok &= reply.status == StatusCode::OK;
            }
            all_ok.then_some(())
        },
    )
    .await;
    let refused_keys = refused_keys.get();
    // Every key check the outage refused was counted as one.
    assert_eq!(
        app.api_metric("trove_key_check_unavailable_total").await,
        refused_keys
    );
}
