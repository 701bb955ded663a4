//! The chat-completions relay (`POST /compat/v1/chat/completions`) through HTTP, against the
//! fake model server.

use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use uuid::Uuid;

use crate::fake_llm::{Answer, FakeLlm, Reply as FakeReply, refused_addr};
use crate::helpers::{
    Reply, Req, TestApp, assert_error, assert_invalid, assert_plain, key_of, spawn_app, within,
};
use crate::llms::{KEY, assert_not_found, create, ollama_llm, openai_llm, read_until};

const PATH: &str = "/compat/v1/chat/completions";

const MISSING_HEADERS: &str = "Missing required headers: either all of X-Agent-Id, X-Pipeline-Id, and X-Pipeline-Classification must be provided, or none of them";

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

fn chat_body() -> Value {
    json!({"messages": [{"role": "user", "content": "Say hello."}]})
}

/// A relay request with the master key and `x-llm-id` (when given).
fn relay_request(app: &TestApp, llm_id: Option<&str>) -> Req {
    let request = app.req(Method::POST, PATH).as_master();
    match llm_id {
        Some(id) => request.header("x-llm-id", id),
        None => request,
    }
}

/// Sends a relay request; the response unread (relayed answers stream).
async fn send(request: Req) -> reqwest::Response {
    within(request.stream()).await
}

async fn reply_of(request: Req) -> Reply {
    Reply::read(send(request).await).await
}

fn content_type(response: &reqwest::Response) -> Option<String> {
    response
        .headers()
        .get("content-type")
        .map(|v| v.to_str().expect("ASCII").to_owned())
}

#[tokio::test]
async fn llm_id_header_is_required_and_a_uuid() {
    let app = spawn_app().await;
    let reply = reply_of(relay_request(&app, None).json(&chat_body())).await;
    assert_plain(
        &reply,
        StatusCode::BAD_REQUEST,
        "Header of type `x-llm-id` was missing",
    );
    assert_eq!(reply.text, "Header of type `x-llm-id` was missing");

    let reply = reply_of(relay_request(&app, Some("nope")).json(&chat_body())).await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{}", reply.text);
    assert!(
        reply.message().starts_with("Invalid LLM ID: "),
        "{}",
        reply.text
    );
    assert!(
        reply
            .header("content-type")
            .unwrap_or_default()
            .starts_with("application/json")
    );

    // Headers are checked before the body is read.
    let reply = reply_of(
        relay_request(&app, None)
            .header("content-type", "application/json")
            .body("{not json"),
    )
    .await;
    assert_plain(
        &reply,
        StatusCode::BAD_REQUEST,
        "Header of type `x-llm-id` was missing",
    );
    let reply = reply_of(relay_request(&app, None).body("[1]")).await;
    assert_plain(
        &reply,
        StatusCode::BAD_REQUEST,
        "Header of type `x-llm-id` was missing",
    );
}

#[tokio::test]
async fn enrichment_headers_are_all_or_none() {
    let app = spawn_app().await;
    let llm_id = Uuid::new_v4().to_string();
    let headers = [
        ("X-Agent-Id", Uuid::new_v4().to_string()),
        ("X-Pipeline-Id", Uuid::new_v4().to_string()),
        ("X-Pipeline-Classification", "public".to_owned()),
    ];
    let subsets: [&[usize]; 6] = [&[0], &[1], &[2], &[0, 1], &[0, 2], &[1, 2]];
    for subset in subsets {
        let mut request = relay_request(&app, Some(&llm_id));
        for index in subset {
            let (name, value) = &headers[*index];
            request = request.header(name, value);
        }
        // Before the body: an invalid body still gets the header error.
        let reply = reply_of(
            request
                .header("content-type", "application/json")
                .body("{not json"),
        )
        .await;
        assert_error(&reply, StatusCode::BAD_REQUEST, MISSING_HEADERS);
    }

    let mut request = relay_request(&app, Some(&llm_id));
    for (name, value) in &headers {
        request = request.header(name, value);
    }
    let reply = reply_of(request.json(&chat_body())).await;
    assert_error(
        &reply,
        StatusCode::NOT_IMPLEMENTED,
        "Trove enriched completions not implemented yet",
    );
    // Before the body, and before the LLM is looked up.
    let mut request = relay_request(&app, Some(&llm_id));
    for (name, value) in &headers {
        request = request.header(name, value);
    }
    let reply = reply_of(request.header("content-type", "application/json").body("[")).await;
    assert_error(
        &reply,
        StatusCode::NOT_IMPLEMENTED,
        "Trove enriched completions not implemented yet",
    );
}

#[tokio::test]
async fn body_must_be_a_json_object_and_the_llm_must_exist() {
    let app = spawn_app().await;
    let fake = FakeLlm::start().await;
    let id = openai_llm(&app, &fake, json!({})).await;

    for body in ["[1]", "\"text\"", "3"] {
        let reply = reply_of(
            relay_request(&app, Some(&id))
                .header("content-type", "application/json")
                .body(body),
        )
        .await;
        assert_plain(
            &reply,
            StatusCode::UNPROCESSABLE_ENTITY,
            "Failed to deserialize the JSON body into the target type:",
        );
    }
    let reply = reply_of(
        relay_request(&app, Some(&id))
            .header("content-type", "application/json")
            .body("{"),
    )
    .await;
    assert_plain(
        &reply,
        StatusCode::BAD_REQUEST,
        "Failed to parse the request body as JSON: ",
    );
    assert!(fake.requests().is_empty());

    let unknown = Uuid::new_v4().to_string();
    let reply = reply_of(relay_request(&app, Some(&unknown)).json(&chat_body())).await;
    assert_not_found(&reply, &unknown);
}

#[tokio::test]
async fn relays_a_completion_byte_for_byte() {
    let app = spawn_app().await;
    let fake = FakeLlm::start().await;
    let id = openai_llm(
        &app,
        &fake,
        json!({"parameters": {"temperature": 0.1, "max_tokens": 50, "stream": true}}),
    )
    .await;
    let body = json!({
        "model": "client-model",
        "messages": [{"role": "user", "content": "Say hello."}],
        "temperature": 0.9,
        "user": "u-1",
    });

    let response = send(
        relay_request(&app, Some(&id))
            .header("x-custom", "yes")
            .json(&body),
    )
    .await;

    assert_eq!(response.status(), StatusCode::OK);
    let received_type = content_type(&response);
    let received = within(response.bytes()).await.expect("body");
    let exchange = fake.last_request();
    assert_eq!(exchange.path, "/v1/chat/completions");
    assert_eq!(received, exchange.response_body);
    assert_eq!(received_type.as_deref(), Some("application/json"));
    assert_eq!(
        serde_json::from_slice::<Value>(&received).expect("JSON")["choices"][0]["message"]["content"],
        "Hello, world!"
    );
    // The request: the LLM's key, none of the client's headers, the LLM's model, its
    // parameters filling absent keys only (`stream` never).
    assert_eq!(
        exchange.header("authorization"),
        Some(&*format!("Bearer {KEY}"))
    );
    for name in ["x-custom", "x-api-key", "x-api-key-secret", "x-llm-id"] {
        assert_eq!(exchange.header(name), None, "{name} forwarded");
    }
    assert_eq!(
        exchange.json(),
        json!({
            "model": "gpt-fake",
            "messages": [{"role": "user", "content": "Say hello."}],
            "temperature": 0.9,
            "user": "u-1",
            "max_tokens": 50,
        })
    );
}

#[tokio::test]
async fn relays_a_stream_as_it_comes() {
    let app = spawn_app().await;
    let fake = FakeLlm::start().await;
    let id = openai_llm(&app, &fake, json!({})).await;
    fake.script(Answer::default().hold_after_first());

    let mut response = send(relay_request(&app, Some(&id)).json(&json!({
        "messages": [{"role": "user", "content": "Say hello."}],
        "stream": true,
    })))
    .await;

    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        content_type(&response).as_deref(),
        Some("text/event-stream")
    );
    let mut buffer = Vec::new();
    // The fake holds after its first content chunk: it can only arrive incrementally.
    read_until(&mut response, &mut buffer, |b| {
        contains(b, b"\"content\":\"Hello\"")
    })
    .await;
    assert!(!contains(&buffer, b"[DONE]"));
    fake.release();
    let rest = within(response.bytes()).await.expect("rest of the body");
    buffer.extend_from_slice(&rest);
    let exchange = fake.last_request();
    assert_eq!(buffer, exchange.response_body.to_vec());
    assert!(buffer.ends_with(b"data: [DONE]\n\n"));
    assert_eq!(exchange.json()["stream"], true);
    assert_eq!(exchange.json()["model"], "gpt-fake");
}

#[tokio::test]
async fn model_server_errors_come_back_unchanged() {
    let app = spawn_app().await;
    let fake = FakeLlm::start().await;
    let id = openai_llm(&app, &fake, json!({})).await;

    for stream in [false, true] {
        fake.script(FakeReply::rate_limited());
        let response = send(relay_request(&app, Some(&id)).json(&json!({
            "messages": [{"role": "user", "content": "hi"}],
            "stream": stream,
        })))
        .await;
        assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(content_type(&response).as_deref(), Some("application/json"));
        let received = within(response.bytes()).await.expect("body");
        assert_eq!(received, fake.last_request().response_body);
    }
    fake.script(FakeReply::json(400, json!({"error": {"message": "bad"}})));
    let response = send(relay_request(&app, Some(&id)).json(&chat_body())).await;
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    assert_eq!(
        within(response.bytes()).await.expect("body"),
        fake.last_request().response_body
    );
}

#[tokio::test]
async fn ollama_llm_is_relayed_to_its_openai_compatible_path() {
    let app = spawn_app().await;
    let fake = FakeLlm::start().await;
    let id = ollama_llm(&app, &fake, json!({"parameters": {"seed": 7}})).await;

    let response = send(relay_request(&app, Some(&id)).json(&chat_body())).await;

    assert_eq!(response.status(), StatusCode::OK);
    let received = within(response.bytes()).await.expect("body");
    let exchange = fake.last_request();
    assert_eq!(exchange.path, "/v1/chat/completions");
    assert_eq!(received, exchange.response_body);
    assert_eq!(exchange.header("authorization"), None);
    assert_eq!(
        exchange.json(),
        json!({
            "model": "llama-fake",
            "messages": [{"role": "user", "content": "Say hello."}],
            "seed": 7,
        })
    );
}

#[tokio::test]
async fn openai_llm_without_key_is_400_before_anything_is_sent() {
    let app = spawn_app().await;
    let fake = FakeLlm::start().await;
    let id = openai_llm(&app, &fake, json!({"api_key": null})).await;

    let reply = reply_of(relay_request(&app, Some(&id)).json(&chat_body())).await;

    assert_invalid(&reply, "API key is required for OpenAI provider");
    assert!(fake.requests().is_empty());
}

#[tokio::test]
async fn relay_permissions() {
    let app = spawn_app().await;
    let fake = FakeLlm::start().await;
    let id = openai_llm(&app, &fake, json!({})).await;

    let read_only = key_of(
        &app.create_key_with(json!({"name": "r", "permissions": {"llms": 4}}))
            .await,
    );
    let reply = reply_of(
        app.req(Method::POST, PATH)
            .as_key(&read_only)
            .header("x-llm-id", &id)
            .json(&chat_body()),
    )
    .await;
    assert_error(
        &reply,
        StatusCode::FORBIDDEN,
        &format!(
            "Unauthorized: access level AccessLevel(READ | EXECUTE) required for llms with id Some({id})"
        ),
    );
    let execute_only = key_of(
        &app.create_key_with(json!({"name": "x", "permissions": {"llms": 1}}))
            .await,
    );
    let reply = reply_of(
        app.req(Method::POST, PATH)
            .as_key(&execute_only)
            .header("x-llm-id", &id)
            .json(&chat_body()),
    )
    .await;
    assert_not_found(&reply, &id);
    assert!(fake.requests().is_empty());

    let user = key_of(
        &app.create_key_with(json!({"name": "rx", "permissions": {"llms": 5}}))
            .await,
    );
    let response = send(
        app.req(Method::POST, PATH)
            .as_key(&user)
            .header("x-llm-id", &id)
            .json(&chat_body()),
    )
    .await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        within(response.bytes()).await.expect("body"),
        fake.last_request().response_body
    );

    // No key at all: 401 before the headers are looked at.
    let reply = reply_of(app.req(Method::POST, PATH).json(&chat_body())).await;
    assert_error(
        &reply,
        StatusCode::UNAUTHORIZED,
        "Unauthorized: No API Key specified.",
    );
}

#[tokio::test]
async fn unreachable_model_server_is_500() {
    let app = spawn_app().await;
    let endpoint = format!("http://{}/v1", refused_addr());
    let created = create(
        &app,
        json!({"name": "nowhere", "provider": "openai", "endpoint": endpoint, "model": "m", "api_key": KEY}),
    )
    .await;
    let id = created["id"].as_str().expect("id");

    let reply = reply_of(relay_request(&app, Some(id)).json(&chat_body())).await;

    assert_eq!(
        reply.status,
        StatusCode::INTERNAL_SERVER_ERROR,
        "{}",
        reply.text
    );
    assert!(
        reply
            .header("content-type")
            .unwrap_or_default()
            .starts_with("application/json"),
        "{:?}",
        reply.header("content-type")
    );
    let message = reply.message();
    assert!(message.to_lowercase().contains("connect"), "{}", reply.text);
    assert!(!reply.text.contains(KEY), "{}", reply.text);
}

/// Reads a relayed stream up to its first content chunk, drops the response, and waits (2 s at
/// most) for the fake to see Trove's connection to it closed.
async fn leave_after_the_first_chunk(answer: Answer) {
    let app = spawn_app().await;
    let fake = FakeLlm::start().await;
    let id = openai_llm(&app, &fake, json!({})).await;
    fake.script(answer);

    let mut response = send(relay_request(&app, Some(&id)).json(&json!({
        "messages": [{"role": "user", "content": "hi"}],
        "stream": true,
    })))
    .await;
    assert_eq!(response.status(), StatusCode::OK);
    let mut buffer = Vec::new();
    read_until(&mut response, &mut buffer, |b| {
        contains(b, b"\"content\":\"Hello\"")
    })
    .await;

    drop(response);

    fake.assert_client_left("Trove").await;
}

#[tokio::test]
async fn client_leaving_mid_stream_closes_the_model_server_connection() {
    // The model server goes on generating (for 5 s in all) after the client left.
    leave_after_the_first_chunk(Answer::long_paced_hello()).await;
}

/// As `llms::client_leaving_while_the_model_server_is_silent_closes_its_connection`: the
/// departure is noticed from the connection, with nothing to write.
#[tokio::test]
async fn client_leaving_while_the_model_server_is_silent_closes_its_connection() {
    leave_after_the_first_chunk(Answer::default().hold_after_first()).await;
}

/// The Python interpreter with the OpenAI SDK: `TROVE_TEST_PYTHON` (exported by
/// `scripts/test`), else the project's venv.
fn python_with_openai_sdk() -> std::path::PathBuf {
    std::env::var_os("TROVE_TEST_PYTHON").map_or_else(
        || std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(".data/venv/bin/python"),
        std::path::PathBuf::from,
    )
}

#[tokio::test]
async fn openai_python_sdk_through_the_relay() {
    let app = spawn_app().await;
    let fake = FakeLlm::start().await;
    let llm = openai_llm(&app, &fake, json!({})).await;
    fake.script(Answer::new(["Hello", " there"]).usage(5, 2));
    fake.script(Answer::new(["one", "two", "three"]).paced(Duration::from_millis(200)));
    fake.script(FakeReply::rate_limited());
    let (key_id, secret) = app.master_key();
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/relay_openai_sdk.py");
    let mut command = tokio::process::Command::new(python_with_openai_sdk());
    command
        .arg(script)
        .env("TROVE_URL", &app.address)
        .env("TROVE_KEY_ID", key_id)
        .env("TROVE_KEY_SECRET", secret)
        .env("TROVE_LLM_ID", &llm)
        .env("TROVE_UNKNOWN_LLM_ID", Uuid::new_v4().to_string())
        .kill_on_drop(true);
    let output = tokio::time::timeout(Duration::from_secs(60), command.output())
        .await
        .expect("the SDK script finished in time")
        .expect("the venv's Python runs (scripts/test installs the OpenAI SDK into .data/venv)");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success() && stdout.trim() == "ok",
        "status {}\nstdout: {stdout}\nstderr: {stderr}",
        output.status
    );
    let requests = fake.requests();
    assert_eq!(requests.len(), 3, "the unknown LLM reached no model server");
    assert_eq!(requests[0].json()["model"], "gpt-fake");
    assert_eq!(requests[1].json()["stream"], true);
    assert_eq!(
        requests[1].header("authorization"),
        Some(&*format!("Bearer {KEY}"))
    );
}
