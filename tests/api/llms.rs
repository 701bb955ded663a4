//! LLM registrations (`/llms`) and direct queries (`POST /llms/{id}/query`) through HTTP,
//! against the fake model server.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use uuid::Uuid;

use crate::fake_llm::{Answer, DEFAULT_PROMPT_TOKENS, FakeLlm, Reply as FakeReply};
use crate::helpers::{
    AppOptions, Reply, TestApp, assert_error, assert_invalid, assert_invalid_order_by,
    assert_plain, assert_utc_timestamp, content_type, eventually, is_uuid, key_of, key_set, names,
    spawn_app, spawn_app_with, spawn_app_with_license, within,
};

/// The API key of the LLMs registered here (never to be seen in a response).
pub const KEY: &str = "sk-trove-test-7c1e5a9b3d";

/// The 403 message of a key lacking R|X on the LLM `id`.
pub fn use_denied(id: &str) -> String {
    format!(
        "Unauthorized: access level AccessLevel(READ | EXECUTE) required for llms with id Some({id})"
    )
}

/// The 500 message of a request the fake refused with [`FakeReply::rate_limited`].
pub const RATE_LIMITED: &str = r#"Stream error: model server answered 429 Too Many Requests: {"error":{"code":"rate_limit_exceeded","message":"Rate limit reached","type":"requests"}}"#;

/// Creates an LLM with the master key; returns the 201 body.
pub async fn create(app: &TestApp, body: Value) -> Value {
    let reply = app.post("/llms", &body).await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
    assert!(!reply.text.contains(KEY), "{}", reply.text);
    reply.body
}

/// Registers an `openai` LLM on the fake, model `gpt-fake`, key [`KEY`], `extra` fields
/// replacing these; returns its id.
pub async fn openai_llm(app: &TestApp, fake: &FakeLlm, extra: Value) -> String {
    let mut body = json!({
        "name": format!("openai-{}", Uuid::new_v4().simple()),
        "provider": "openai",
        "endpoint": fake.openai_endpoint(),
        "model": "gpt-fake",
        "api_key": KEY,
    });
    merge(&mut body, extra);
    create(app, body).await["id"]
        .as_str()
        .expect("id")
        .to_owned()
}

/// Registers an `ollama` LLM on the fake, model `llama-fake`, no key; returns its id.
pub async fn ollama_llm(app: &TestApp, fake: &FakeLlm, extra: Value) -> String {
    let mut body = json!({
        "name": format!("ollama-{}", Uuid::new_v4().simple()),
        "provider": "ollama",
        "endpoint": fake.base_url(),
        "model": "llama-fake",
    });
    merge(&mut body, extra);
    create(app, body).await["id"]
        .as_str()
        .expect("id")
        .to_owned()
}

fn merge(body: &mut Value, extra: Value) {
    if let (Some(body), Value::Object(extra)) = (body.as_object_mut(), extra) {
        body.extend(extra);
    }
}

pub fn assert_not_found(reply: &Reply, id: &str) {
    crate::helpers::assert_not_found(reply, "LLM not found", id);
}

/// `POST /llms/{id}/query` with the master key; the response as it comes.
async fn query(app: &TestApp, id: &str, body: &Value) -> reqwest::Response {
    query_as(app, &app.master_key(), id, body).await
}

/// `POST /llms/{id}/query` with `key`; the response as it comes.
async fn query_as(
    app: &TestApp,
    key: &(String, String),
    id: &str,
    body: &Value,
) -> reqwest::Response {
    within(
        app.req(Method::POST, &format!("/llms/{id}/query"))
            .as_key(key)
            .json(body)
            .stream(),
    )
    .await
}

/// The NDJSON lines of a body (each ends with `\n`), parsed.
pub fn ndjson(text: &str) -> Vec<Value> {
    assert!(
        text.is_empty() || text.ends_with('\n'),
        "unterminated line: {text:?}"
    );
    text.lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line:?}")))
        .collect()
}

/// The `(event, data)` pairs of a server-sent events body.
pub fn sse_events(text: &str) -> Vec<(String, Value)> {
    assert!(text.ends_with("\n\n"), "unterminated event: {text:?}");
    text.trim_end_matches('\n')
        .split("\n\n")
        .map(|event| {
            let mut name = None;
            let mut data = None;
            for line in event.lines() {
                if let Some(value) = line.strip_prefix("event: ") {
                    name = Some(value.to_owned());
                } else if let Some(value) = line.strip_prefix("data: ") {
                    data = Some(serde_json::from_str(value).expect("data is JSON"));
                } else {
                    panic!("unexpected line {line:?} in {text:?}");
                }
            }
            (name.expect("event name"), data.expect("event data"))
        })
        .collect()
}

/// An NDJSON delta line.
pub fn delta(content: &str) -> Value {
    json!({"type": "delta", "content": content})
}

/// A `usage` object.
pub fn usage(prompt: u64, completion: u64) -> Value {
    json!({"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion})
}

/// The NDJSON lines of the fake's default answer ("Hello, world!" in four chunks).
fn default_lines() -> Vec<Value> {
    vec![
        delta("Hello"),
        delta(", "),
        delta("world"),
        delta("!"),
        json!({"type": "done", "finish_reason": "stop", "usage": usage(DEFAULT_PROMPT_TOKENS, 4)}),
    ]
}

/// Reads body chunks into `buffer` until `done` holds.
pub async fn read_until(
    response: &mut reqwest::Response,
    buffer: &mut Vec<u8>,
    done: impl Fn(&[u8]) -> bool,
) {
    while !done(buffer) {
        let chunk = within(response.chunk())
            .await
            .expect("body chunk")
            .unwrap_or_else(|| {
                panic!(
                    "body ended early: {:?}",
                    String::from_utf8_lossy(buffer.as_slice())
                )
            });
        buffer.extend_from_slice(&chunk);
    }
}

// ---- Registrations ---------------------------------------------------------------------

#[tokio::test]
async fn create_get_list_update_delete() {
    let app = spawn_app().await;
    let created = create(
        &app,
        json!({
            "name": "gpt",
            "description": "A remote model",
            "provider": "openai",
            "endpoint": "https://models.example/v1/",
            "model": "gpt-4o",
            "api_key": KEY,
            "parameters": {"temperature": 0.2, "max_tokens": 100},
        }),
    )
    .await;
    assert_eq!(
        key_set(&created),
        BTreeSet::from([
            "id",
            "name",
            "description",
            "provider",
            "endpoint",
            "model",
            "parameters",
            "has_api_key",
            "created_at",
            "updated_at"
        ])
    );
    let id = created["id"].as_str().expect("id").to_owned();
    assert!(is_uuid(&id));
    assert_eq!(created["name"], "gpt");
    assert_eq!(created["description"], "A remote model");
    assert_eq!(created["provider"], "openai");
    assert_eq!(created["endpoint"], "https://models.example/v1");
    assert_eq!(created["model"], "gpt-4o");
    assert_eq!(
        created["parameters"],
        json!({"temperature": 0.2, "max_tokens": 100})
    );
    assert_eq!(created["has_api_key"], true);
    let created_at = assert_utc_timestamp(&created["created_at"]);
    assert_eq!(assert_utc_timestamp(&created["updated_at"]), created_at);
    // The key is stored encrypted.
    let stored: Vec<u8> = sqlx::query_scalar("SELECT api_key FROM llms WHERE id = $1")
        .bind(Uuid::parse_str(&id).expect("uuid"))
        .fetch_one(&app.pool)
        .await
        .expect("stored key");
    assert!(!stored.is_empty());
    assert!(!stored.windows(KEY.len()).any(|w| w == KEY.as_bytes()));

    // Defaults: no description, no model, no key, no parameters.
    let local = create(
        &app,
        json!({"name": "local", "provider": "ollama", "endpoint": "http://localhost:11434", "model": "llama3"}),
    )
    .await;
    assert_eq!(local["description"], Value::Null);
    assert_eq!(local["endpoint"], "http://localhost:11434");
    assert_eq!(local["has_api_key"], false);
    assert_eq!(local["parameters"], json!({}));
    let bare = create(
        &app,
        json!({"name": "bare", "provider": "openai", "endpoint": "http://127.0.0.1:1/v1", "parameters": null}),
    )
    .await;
    assert_eq!(bare["model"], Value::Null);
    assert_eq!(bare["has_api_key"], false);
    assert_eq!(bare["parameters"], json!({}));

    let path = format!("/llms/{id}");
    let reply = app.get(&path).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(reply.body, created);
    assert!(!reply.text.contains(KEY));
    let reply = app.get("/llms?count=true").await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(reply.body["page_info"]["count"], 3, "{}", reply.text);
    assert!(!reply.text.contains(KEY));

    // PATCH: a new name; the rest kept.
    let reply = app.patch(&path, &json!({"name": "gpt-renamed"})).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert!(!reply.text.contains(KEY));
    assert_eq!(reply.body["name"], "gpt-renamed");
    assert_eq!(reply.body["description"], "A remote model");
    assert_eq!(reply.body["endpoint"], "https://models.example/v1");
    assert_eq!(reply.body["model"], "gpt-4o");
    assert_eq!(reply.body["parameters"], created["parameters"]);
    assert_eq!(reply.body["has_api_key"], true);
    assert_eq!(reply.body["created_at"], created["created_at"]);
    assert!(assert_utc_timestamp(&reply.body["updated_at"]) > created_at);
    // Parameters are replaced whole; the endpoint is normalised; null clears the description.
    let reply = app
        .patch(
            &path,
            &json!({"parameters": {"top_p": 0.5}, "endpoint": "http://other.example/v1/", "description": null}),
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(reply.body["parameters"], json!({"top_p": 0.5}));
    assert_eq!(reply.body["endpoint"], "http://other.example/v1");
    assert_eq!(reply.body["description"], Value::Null);
    assert_eq!(reply.body["has_api_key"], true);
    // `api_key: null` removes the key; a new one sets it again.
    let reply = app.patch(&path, &json!({"api_key": null})).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(reply.body["has_api_key"], false);
    let reply = app.patch(&path, &json!({"api_key": "sk-other"})).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(reply.body["has_api_key"], true);
    assert!(!reply.text.contains("sk-other"));
    let before = app.get(&path).await.body;

    // An invalid change leaves the object unchanged.
    let reply = app
        .patch(&path, &json!({"name": "changed", "endpoint": "ftp://x"}))
        .await;
    assert_invalid(
        &reply,
        "Invalid endpoint: scheme must be http or https, got ftp",
    );
    let reply = app.patch(&path, &json!({"name": "local"})).await;
    assert_error(&reply, StatusCode::CONFLICT, "Conflict unique error");
    let reply = app
        .patch(&path, &json!({"name": "", "description": "x"}))
        .await;
    assert_invalid(&reply, "Invalid name");
    let local_path = format!("/llms/{}", local["id"].as_str().expect("id"));
    let reply = app.patch(&local_path, &json!({"model": null})).await;
    assert_invalid(&reply, "Model is required for Ollama provider");
    assert_eq!(app.get(&local_path).await.body, local);
    assert_eq!(app.get(&path).await.body, before);

    let reply = app.delete(&path).await;
    assert_eq!(reply.status, StatusCode::NO_CONTENT, "{}", reply.text);
    assert!(reply.text.is_empty());
    assert_not_found(&app.get(&path).await, &id);
    assert_not_found(&app.delete(&path).await, &id);
    assert_not_found(&app.patch(&path, &json!({})).await, &id);
}

#[tokio::test]
async fn list_filters_and_ordering() {
    let app = spawn_app().await;
    let empty = app.get("/llms").await;
    assert_eq!(empty.status, StatusCode::OK, "{}", empty.text);
    assert_eq!(empty.body["data"], json!([]));
    assert_eq!(empty.body["page_info"]["has_next"], false);

    let alpha = create(
        &app,
        json!({"name": "alpha-gpt", "provider": "openai", "endpoint": "http://a.example/v1", "model": "gpt-4o", "api_key": KEY}),
    )
    .await;
    create(
        &app,
        json!({"name": "beta-llama", "provider": "ollama", "endpoint": "http://b.example", "model": "llama3"}),
    )
    .await;
    create(
        &app,
        json!({"name": "gamma-gpt", "provider": "openai", "endpoint": "http://c.example/v1", "model": "gpt-4o-mini", "description": "small"}),
    )
    .await;
    let query = |q: &'static str| {
        let app = &app;
        async move {
            let reply = app.get(&format!("/llms?{q}")).await;
            assert_eq!(reply.status, StatusCode::OK, "{q}: {}", reply.text);
            assert!(!reply.text.contains(KEY));
            reply.body
        }
    };

    let body = query("provider=openai&order_by=name").await;
    assert_eq!(names(&body), ["alpha-gpt", "gamma-gpt"]);
    assert_eq!(body["query_info"], json!({"provider": "openai"}));
    assert_eq!(body["data"][0], alpha);
    assert_eq!(names(&query("provider=ollama").await), ["beta-llama"]);
    assert_eq!(names(&query("model=llama3").await), ["beta-llama"]);
    assert_eq!(names(&query("model=gpt-4o").await), ["alpha-gpt"]);
    let body = query("name$contains=gpt&order_by=-name").await;
    assert_eq!(names(&body), ["gamma-gpt", "alpha-gpt"]);
    assert_eq!(body["query_info"], json!({"name$contains": ["gpt"]}));
    assert_eq!(
        names(&query("endpoint=http%3A%2F%2Fb.example").await),
        ["beta-llama"]
    );
    assert_eq!(
        names(&query("description$contains=sma").await),
        ["gamma-gpt"]
    );
    assert_eq!(
        names(&query("order_by=-name").await),
        ["gamma-gpt", "beta-llama", "alpha-gpt"]
    );
    let body = query("order_by=provider&order_by=name").await;
    assert_eq!(names(&body), ["beta-llama", "alpha-gpt", "gamma-gpt"]);
    assert_eq!(body["page_info"]["order_by"], json!(["provider", "name"]));
    let body = query("first=2&order_by=name&count=true").await;
    assert_eq!(names(&body), ["alpha-gpt", "beta-llama"]);
    assert_eq!(body["page_info"]["has_next"], true);
    assert_eq!(body["page_info"]["count"], 3);
    assert_eq!(
        names(&query("limit=1&offset=2&order_by=name").await),
        ["gamma-gpt"]
    );

    let reply = app.get("/llms?order_by=model&order_by=endpoint").await;
    assert_invalid_order_by(&reply, json!(["model", "endpoint"]));
}

#[tokio::test]
async fn create_errors() {
    let app = spawn_app().await;
    let base = json!({"name": "m", "provider": "openai", "endpoint": "http://h.example/v1", "api_key": KEY});
    let with = |extra: Value| {
        let mut body = base.clone();
        merge(&mut body, extra);
        body
    };

    for name in [String::new(), "x".repeat(256)] {
        let reply = app.post("/llms", &with(json!({"name": name}))).await;
        assert_invalid(&reply, "Invalid name");
        assert!(!reply.text.contains(KEY));
    }
    let reply = app.post("/llms", &with(json!({"endpoint": "v1"}))).await;
    assert_invalid(&reply, "Invalid endpoint: relative URL without a base");
    let reply = app
        .post("/llms", &with(json!({"endpoint": "ftp://x"})))
        .await;
    assert_invalid(
        &reply,
        "Invalid endpoint: scheme must be http or https, got ftp",
    );
    for endpoint in ["http://h.example/v1?q=1", "http://h.example/v1#top"] {
        let reply = app
            .post("/llms", &with(json!({"endpoint": endpoint})))
            .await;
        assert_invalid(
            &reply,
            "Invalid endpoint: must not have a query string or a fragment",
        );
    }
    for model in [json!(null), json!("")] {
        let reply = app
            .post(
                "/llms",
                &with(
                    json!({"provider": "ollama", "endpoint": "http://h.example", "model": model}),
                ),
            )
            .await;
        assert_invalid(&reply, "Model is required for Ollama provider");
    }
    // Name is checked before endpoint, endpoint before model.
    let reply = app
        .post(
            "/llms",
            &json!({"name": "", "provider": "ollama", "endpoint": "ftp://x"}),
        )
        .await;
    assert_invalid(&reply, "Invalid name");
    let reply = app
        .post(
            "/llms",
            &json!({"name": "o", "provider": "ollama", "endpoint": "ftp://x"}),
        )
        .await;
    assert_invalid(
        &reply,
        "Invalid endpoint: scheme must be http or https, got ftp",
    );

    // Body types: 422 plain text.
    for body in [
        with(json!({"provider": "anthropic"})),
        json!({"name": "m", "endpoint": "http://h.example/v1"}),
        with(json!({"endpoint": 3})),
        with(json!({"parameters": [1]})),
        json!([]),
    ] {
        let reply = app.post("/llms", &body).await;
        assert_plain(
            &reply,
            StatusCode::UNPROCESSABLE_ENTITY,
            "Failed to deserialize the JSON body into the target type:",
        );
    }

    let first = create(&app, with(json!({}))).await;
    let reply = app.post("/llms", &with(json!({}))).await;
    assert_error(&reply, StatusCode::CONFLICT, "Conflict unique error");
    let reply = app.get("/llms?count=true").await;
    assert_eq!(reply.body["page_info"]["count"], 1, "{}", reply.text);
    assert_eq!(reply.body["data"][0], first);
}

#[tokio::test]
async fn license_limits_llms() {
    let (app, _file) =
        spawn_app_with_license(r#"{"limits":{"llms":1}}"#, AppOptions::default()).await;
    let body =
        |name: &str| json!({"name": name, "provider": "openai", "endpoint": "http://h.example/v1"});
    let first = create(&app, body("first")).await;
    let reply = app.post("/llms", &body("second")).await;
    assert_error(
        &reply,
        StatusCode::FORBIDDEN,
        "License limits exceeded for LLM",
    );
    // The license comes before validation.
    let reply = app.post("/llms", &body("")).await;
    assert_error(
        &reply,
        StatusCode::FORBIDDEN,
        "License limits exceeded for LLM",
    );
    // At the limit, changes are allowed.
    let path = format!("/llms/{}", first["id"].as_str().expect("id"));
    let reply = app.patch(&path, &json!({"description": "edited"})).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    let reply = app.delete(&path).await;
    assert_eq!(reply.status, StatusCode::NO_CONTENT, "{}", reply.text);
    create(&app, body("second")).await;
}

// ---- Queries -----------------------------------------------------------------------------

#[tokio::test]
async fn query_streams_ndjson_by_default() {
    let app = spawn_app().await;
    let fake = FakeLlm::start().await;
    let id = openai_llm(&app, &fake, json!({})).await;

    for body in [
        json!({"prompt": "Say hello."}),
        json!({"prompt": "Say hello.", "stream": true}),
        json!({"prompt": "Say hello.", "stream": null}),
    ] {
        let response = query(&app, &id, &body).await;
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(content_type(&response), "application/x-ndjson");
        let text = within(response.text()).await.expect("body");
        assert_eq!(ndjson(&text), default_lines(), "{body}");
    }
    let request = fake.last_request();
    assert_eq!(request.path, "/v1/chat/completions");
    assert_eq!(
        request.header("authorization"),
        Some(&*format!("Bearer {KEY}"))
    );
    assert_eq!(
        request.json()["messages"],
        json!([{"role": "user", "content": "Say hello."}])
    );
}

#[tokio::test]
async fn query_streams_server_sent_events() {
    let app = spawn_app().await;
    let fake = FakeLlm::start().await;
    let id = openai_llm(&app, &fake, json!({})).await;
    fake.script(
        Answer::new(["Hel", "lo"])
            .usage(5, 2)
            .finish_reason("length"),
    );

    let response = query(&app, &id, &json!({"prompt": "hi", "stream": "sse"})).await;

    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(content_type(&response), "text/event-stream");
    let text = within(response.text()).await.expect("body");
    assert!(
        text.starts_with("event: delta\ndata: {\"content\":\"Hel\"}\n\nevent: delta\ndata: {\"content\":\"lo\"}\n\nevent: done\ndata: "),
        "{text:?}"
    );
    assert_eq!(
        sse_events(&text),
        vec![
            ("delta".to_owned(), json!({"content": "Hel"})),
            ("delta".to_owned(), json!({"content": "lo"})),
            (
                "done".to_owned(),
                json!({"finish_reason": "length", "usage": usage(5, 2)})
            ),
        ]
    );
}

#[tokio::test]
async fn query_without_stream_answers_the_whole_text() {
    let app = spawn_app().await;
    let fake = FakeLlm::start().await;
    let id = openai_llm(&app, &fake, json!({})).await;

    let response = query(&app, &id, &json!({"prompt": "hi", "stream": false})).await;

    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(content_type(&response), "text/plain; charset=utf-8");
    assert_eq!(
        within(response.text()).await.expect("body"),
        "Hello, world!"
    );

    // Any other `stream` is a body type error.
    let reply =
        Reply::read(query(&app, &id, &json!({"prompt": "hi", "stream": "yes"})).await).await;
    assert_plain(
        &reply,
        StatusCode::UNPROCESSABLE_ENTITY,
        "Failed to deserialize the JSON body into the target type:",
    );
    let reply = Reply::read(query(&app, &id, &json!({"stream": false})).await).await;
    assert_plain(
        &reply,
        StatusCode::UNPROCESSABLE_ENTITY,
        "Failed to deserialize the JSON body into the target type:",
    );
    assert_eq!(fake.requests().len(), 1);
}

#[tokio::test]
async fn query_deltas_arrive_before_the_answer_is_complete() {
    let app = spawn_app().await;
    let fake = FakeLlm::start().await;
    let id = openai_llm(&app, &fake, json!({})).await;
    fake.script(Answer::default().hold_after_first());

    let mut response = query(&app, &id, &json!({"prompt": "hi"})).await;
    assert_eq!(response.status(), StatusCode::OK);
    let mut buffer = Vec::new();
    // The fake holds after its first chunk: this line can only come from incremental delivery.
    read_until(&mut response, &mut buffer, |b| b.contains(&b'\n')).await;
    let first = String::from_utf8(buffer.clone()).expect("UTF-8");
    assert_eq!(ndjson(&first), vec![delta("Hello")]);

    fake.release();
    let rest = within(response.bytes()).await.expect("rest of the body");
    buffer.extend_from_slice(&rest);
    assert_eq!(
        ndjson(&String::from_utf8(buffer).expect("UTF-8")),
        default_lines()
    );
}

#[tokio::test]
async fn sse_events_arrive_before_the_answer_is_complete() {
    let app = spawn_app().await;
    let fake = FakeLlm::start().await;
    let id = openai_llm(&app, &fake, json!({})).await;
    fake.script(Answer::default().hold_after_first());

    let mut response = query(&app, &id, &json!({"prompt": "hi", "stream": "sse"})).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(content_type(&response), "text/event-stream");
    let mut buffer = Vec::new();
    // The fake holds after its first chunk: this event can only come from incremental delivery.
    read_until(&mut response, &mut buffer, |b| {
        b.windows(2).any(|w| w == b"\n\n")
    })
    .await;
    let first = String::from_utf8(buffer.clone()).expect("UTF-8");
    assert_eq!(
        sse_events(&first),
        vec![("delta".to_owned(), json!({"content": "Hello"}))]
    );

    fake.release();
    let rest = within(response.bytes()).await.expect("rest of the body");
    buffer.extend_from_slice(&rest);
    let events = sse_events(&String::from_utf8(buffer).expect("UTF-8"));
    assert_eq!(events.len(), 5, "{events:?}");
    assert_eq!(events[4].0, "done");
    assert_eq!(events[4].1["finish_reason"], "stop");
}

#[tokio::test]
async fn query_parameters_are_merged_over_the_llms() {
    let app = spawn_app().await;
    let fake = FakeLlm::start().await;
    let id = openai_llm(
        &app,
        &fake,
        json!({"parameters": {"temperature": 0.1, "max_tokens": 50, "model": "llm-param-model", "stream": false}}),
    )
    .await;

    let response = query(
        &app,
        &id,
        &json!({
            "prompt": "Say hello.",
            "parameters": {
                "temperature": 0.7,
                "top_p": 0.9,
                "model": "request-model",
                "messages": [{"role": "system", "content": "injected"}],
                "stream": false,
            },
        }),
    )
    .await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        ndjson(&within(response.text()).await.expect("body")),
        default_lines()
    );

    assert_eq!(
        fake.last_request().json(),
        json!({
            "model": "gpt-fake",
            "messages": [{"role": "user", "content": "Say hello."}],
            "stream": true,
            "stream_options": {"include_usage": true},
            "temperature": 0.7,
            "max_tokens": 50,
            "top_p": 0.9,
        })
    );
}

#[tokio::test]
async fn query_ollama_llm() {
    let app = spawn_app().await;
    let fake = FakeLlm::start().await;
    let id = ollama_llm(&app, &fake, json!({"parameters": {"temperature": 0.1}})).await;
    fake.script(
        Answer::new(["Hi", " there"])
            .usage(5, 2)
            .finish_reason("length"),
    );

    let response = query(
        &app,
        &id,
        &json!({"prompt": "Say hi.", "parameters": {"num_ctx": 1024}}),
    )
    .await;

    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(content_type(&response), "application/x-ndjson");
    assert_eq!(
        ndjson(&within(response.text()).await.expect("body")),
        vec![
            delta("Hi"),
            delta(" there"),
            json!({"type": "done", "finish_reason": "length", "usage": usage(5, 2)}),
        ]
    );
    let request = fake.last_request();
    assert_eq!(request.path, "/api/chat");
    assert_eq!(request.header("authorization"), None);
    assert_eq!(
        request.json(),
        json!({
            "model": "llama-fake",
            "messages": [{"role": "user", "content": "Say hi."}],
            "stream": true,
            "options": {"temperature": 0.1, "num_ctx": 1024},
        })
    );

    // Whole text too.
    let response = query(&app, &id, &json!({"prompt": "Say hi.", "stream": false})).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        within(response.text()).await.expect("body"),
        "Hello, world!"
    );
}

#[tokio::test]
async fn query_openai_llm_without_key_is_400_before_anything_is_sent() {
    let app = spawn_app().await;
    let fake = FakeLlm::start().await;
    let id = openai_llm(&app, &fake, json!({"api_key": null})).await;
    let with_key = openai_llm(&app, &fake, json!({})).await;
    let reply = app
        .patch(&format!("/llms/{with_key}"), &json!({"api_key": null}))
        .await;
    assert_eq!(reply.body["has_api_key"], false, "{}", reply.text);

    for llm in [&id, &with_key] {
        for stream in [json!(true), json!(false), json!("sse")] {
            let reply =
                Reply::read(query(&app, llm, &json!({"prompt": "hi", "stream": stream})).await)
                    .await;
            assert_invalid(&reply, "API key is required for OpenAI provider");
        }
    }
    assert!(fake.requests().is_empty());
}

#[tokio::test]
async fn query_refused_by_the_model_server_is_a_stream_error() {
    let app = spawn_app().await;
    let fake = FakeLlm::start().await;
    let id = openai_llm(&app, &fake, json!({})).await;

    for stream in [json!(true), json!(false), json!("sse")] {
        fake.script(FakeReply::rate_limited());
        let reply =
            Reply::read(query(&app, &id, &json!({"prompt": "hi", "stream": stream})).await).await;
        assert_error(&reply, StatusCode::INTERNAL_SERVER_ERROR, RATE_LIMITED);
    }
    assert_eq!(fake.requests().len(), 3);
}

#[tokio::test]
async fn query_error_never_shows_the_key() {
    let app = spawn_app().await;
    let fake = FakeLlm::start().await;
    let id = openai_llm(&app, &fake, json!({})).await;

    for stream in [json!(true), json!(false)] {
        fake.script(FakeReply::EchoKey { status: 401 });
        let reply =
            Reply::read(query(&app, &id, &json!({"prompt": "hi", "stream": stream})).await).await;
        assert_eq!(
            reply.status,
            StatusCode::INTERNAL_SERVER_ERROR,
            "{}",
            reply.text
        );
        assert!(
            reply.message().starts_with(
                "Stream error: model server answered 401 Unauthorized: {\"error\":{\"code\":\"invalid_api_key\",\"message\":\"Incorrect API key provided: [redacted]."
            ),
            "{}",
            reply.text
        );
        assert!(!reply.text.contains(KEY), "{}", reply.text);
        // The fake did echo it.
        assert!(String::from_utf8_lossy(&fake.last_request().response_body).contains(KEY));
    }
}

#[tokio::test]
async fn query_permissions() {
    let app = spawn_app().await;
    let fake = FakeLlm::start().await;
    let id = openai_llm(&app, &fake, json!({})).await;
    let body = json!({"prompt": "hi", "stream": false});

    let read_only = key_of(
        &app.create_key_with(json!({"name": "r", "permissions": {"llms": 4}}))
            .await,
    );
    let reply = Reply::read(query_as(&app, &read_only, &id, &body).await).await;
    assert_error(&reply, StatusCode::FORBIDDEN, &use_denied(&id));
    let execute_only = key_of(
        &app.create_key_with(json!({"name": "x", "permissions": {"llms": 1}}))
            .await,
    );
    let reply = Reply::read(query_as(&app, &execute_only, &id, &body).await).await;
    assert_not_found(&reply, &id);
    let write_only = key_of(
        &app.create_key_with(json!({"name": "w", "permissions": {"llms": 2}}))
            .await,
    );
    let reply = Reply::read(query_as(&app, &write_only, &id, &body).await).await;
    assert_not_found(&reply, &id);
    assert!(fake.requests().is_empty());

    // R|X through an object entry.
    let user = app.create_key_with(json!({"name": "rx"})).await;
    app.grant(
        user["id"].as_str().expect("id"),
        json!([{"object_type": "llms", "object_id": id, "permission": 5}]),
    )
    .await;
    let response = query_as(&app, &key_of(&user), &id, &body).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        within(response.text()).await.expect("body"),
        "Hello, world!"
    );
}

#[tokio::test]
async fn query_broken_mid_stream_ends_without_done() {
    let app = spawn_app().await;
    let fake = FakeLlm::start().await;
    let id = openai_llm(&app, &fake, json!({})).await;

    fake.script(Answer::default().break_after(1));
    let response = query(&app, &id, &json!({"prompt": "hi"})).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(content_type(&response), "application/x-ndjson");
    let text = within(response.text()).await.expect("a cleanly ended body");
    assert_eq!(ndjson(&text), vec![delta("Hello")]);

    fake.script(Answer::default().break_after(2));
    let response = query(&app, &id, &json!({"prompt": "hi", "stream": "sse"})).await;
    assert_eq!(response.status(), StatusCode::OK);
    let text = within(response.text()).await.expect("a cleanly ended body");
    assert_eq!(
        sse_events(&text),
        vec![
            ("delta".to_owned(), json!({"content": "Hello"})),
            ("delta".to_owned(), json!({"content": ", "})),
        ]
    );

    // With `stream` false the break is a stream error.
    fake.script(Answer::default().break_after(1));
    let reply =
        Reply::read(query(&app, &id, &json!({"prompt": "hi", "stream": false})).await).await;
    assert_eq!(
        reply.status,
        StatusCode::INTERNAL_SERVER_ERROR,
        "{}",
        reply.text
    );
    assert!(
        reply.message().starts_with("Stream error: "),
        "{}",
        reply.text
    );
}

/// Reads the first NDJSON line of a query, drops the response, and waits (2 s at most) for the
/// fake to see Trove's connection to it closed.
async fn leave_after_the_first_delta(answer: Answer) {
    let app = spawn_app().await;
    let fake = FakeLlm::start().await;
    let id = openai_llm(&app, &fake, json!({})).await;
    fake.script(answer);

    let mut response = query(&app, &id, &json!({"prompt": "hi"})).await;
    assert_eq!(response.status(), StatusCode::OK);
    let mut buffer = Vec::new();
    read_until(&mut response, &mut buffer, |b| b.contains(&b'\n')).await;
    assert_eq!(
        ndjson(&String::from_utf8(buffer).expect("UTF-8")),
        vec![delta("Hello")]
    );

    drop(response);

    fake.assert_client_left("Trove").await;
}

#[tokio::test]
async fn client_leaving_mid_answer_closes_the_model_server_connection() {
    // The model server goes on generating (for 5 s in all) after the client left.
    leave_after_the_first_delta(Answer::long_paced_hello()).await;
}

/// While the model server sends nothing, Trove writes nothing either: it notices that its
/// client left from the connection itself, not from a failed write.
#[tokio::test]
async fn client_leaving_while_the_model_server_is_silent_closes_its_connection() {
    leave_after_the_first_delta(Answer::default().hold_after_first()).await;
}

#[tokio::test]
async fn client_leaving_a_plain_answer_closes_the_model_server_connection() {
    let app = spawn_app().await;
    let fake = FakeLlm::start().await;
    let id = openai_llm(&app, &fake, json!({})).await;
    fake.script(Answer::default().hold_after_first());

    // Unread: the client goes away before the answer.
    let request = app
        .req(Method::POST, &format!("/llms/{id}/query"))
        .as_master()
        .json(&json!({"prompt": "hi", "stream": false}))
        .stream();
    let client = tokio::spawn(request);
    // The whole answer is being collected: the model server got the request and holds.
    eventually(
        "the model server got the request",
        Duration::from_secs(10),
        || async { (!fake.requests().is_empty()).then_some(()) },
    )
    .await;
    client.abort();

    fake.assert_client_left("Trove").await;
}

#[tokio::test]
async fn model_server_that_never_answers_times_out() {
    let app = spawn_app_with(AppOptions {
        env: [("TROVE_LLM_READ_TIMEOUT".to_owned(), "0.3".to_owned())].into(),
        ..AppOptions::default()
    })
    .await;
    let fake = FakeLlm::start().await;
    let id = openai_llm(&app, &fake, json!({})).await;

    for stream in [json!(true), json!(false)] {
        fake.script(FakeReply::Hang);
        let started = Instant::now();
        let reply =
            Reply::read(query(&app, &id, &json!({"prompt": "hi", "stream": stream})).await).await;
        let waited = started.elapsed();
        assert_error(
            &reply,
            StatusCode::INTERNAL_SERVER_ERROR,
            "Stream error: timed out waiting for the model server to answer after 300ms",
        );
        assert!(
            waited >= Duration::from_millis(300) && waited < Duration::from_secs(3),
            "{waited:?}"
        );
    }
}
