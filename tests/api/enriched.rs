//! Enriched chat completions (extension `conversations`): `POST /compat/v1/chat/completions`
//! with `X-Agent-Id`, `X-Pipeline-Id` and `X-Pipeline-Classification` runs the agent against
//! the pipeline and the LLM, and answers in the chat-completions form. Through HTTP against
//! real Postgres and NATS, the seeded embedding model and the fake model server.

use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use uuid::Uuid;

use crate::agents::DOCUMENTS;
use crate::fake_llm::{Answer, FakeLlm, Reply as FakeReply};
use crate::helpers::{
    Reply, Req, TestApp, assert_error, assert_invalid, assert_not_found_with_id, assert_plain,
    key_of, spawn_app_without_worker, spawn_app_without_worker_with, str_of, within,
};
use crate::llms::{KEY, openai_llm};

const PATH: &str = "/compat/v1/chat/completions";

const MISSING_HEADERS: &str = "Missing required headers: either all of X-Agent-Id, X-Pipeline-Id, and X-Pipeline-Classification must be provided, or none of them";

const NOT_IMPLEMENTED: &str = "Trove enriched completions not implemented yet";

/// An agent that retrieves one fragment for its question and remembers the conversation.
fn agent_body(name: &str) -> Value {
    json!({
        "name": name,
        "prompt": [
            {"role": "system", "template": "Use this context:\n{context}"},
            {"role": "user", "template": "{history}"},
            {"role": "user", "template": "{question}"}
        ],
        "placeholders": [
            {"name": "question", "type": "query"},
            {"name": "context", "type": "similarity", "target": "question", "params": {"k": 1, "fetch_k": 1}},
            {"name": "history", "type": "history", "params": {"k": 10}}
        ]
    })
}

fn said(role: &str, content: &str) -> Value {
    json!({"role": role, "content": content})
}

/// A conversation: a system message, an earlier exchange, and the question about cats.
fn conversation() -> Value {
    json!([
        said("system", "You are a pet expert."),
        said("user", "Hello?"),
        said("assistant", "Hi! Ask me anything."),
        said("user", "What do cats do all afternoon?"),
    ])
}

/// An app with the extension on (or off), a pipeline with the three public [`DOCUMENTS`]
/// ingested, the fake model, an LLM on it and the agent of [`agent_body`].
struct Setup {
    app: TestApp,
    fake: FakeLlm,
    pid: String,
    llm: String,
    agent: String,
}

impl Setup {
    async fn new() -> Self {
        let app = spawn_app_without_worker_with(&[("TROVE_EXTENSIONS", "conversations")]).await;
        Self::on(app).await
    }

    async fn on(app: TestApp) -> Self {
        let fake = FakeLlm::start().await;
        let pid = app.new_pipeline_id(json!({})).await;
        for (name, team, text) in DOCUMENTS {
            let reply = app
                .submit(
                    &pid,
                    &json!({"external_identifier": name, "classification": "public", "text": text, "metadata": {"team": team}}),
                )
                .await;
            assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
        }
        let outcome = app.step().await;
        assert_eq!(outcome.stored, 3, "{outcome:?}");
        let llm = openai_llm(&app, &fake, json!({})).await;
        let reply = app.post("/agents", &agent_body("memory")).await;
        let agent = if reply.status == StatusCode::CREATED {
            str_of(&reply.body, "id").to_owned()
        } else {
            // The extension is off: no history placeholder.
            assert_eq!(reply.status, StatusCode::NOT_IMPLEMENTED, "{}", reply.text);
            let mut body = agent_body("plain");
            body["prompt"] = json!([
                {"role": "system", "template": "Use this context:\n{context}"},
                {"role": "user", "template": "{question}"}
            ]);
            body["placeholders"]
                .as_array_mut()
                .expect("placeholders")
                .pop();
            let reply = app.post("/agents", &body).await;
            assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
            str_of(&reply.body, "id").to_owned()
        };
        Self {
            app,
            fake,
            pid,
            llm,
            agent,
        }
    }

    /// An enriched completion of `agent` with the master key, classification `public`.
    fn request(&self, agent: &str) -> Req {
        self.request_with(&self.llm, agent, &self.pid, "public")
    }

    /// An enriched completion with the master key and these header values.
    fn request_with<V>(&self, llm: &str, agent: &str, pipeline: &str, classification: V) -> Req
    where
        V: TryInto<reqwest::header::HeaderValue>,
        V::Error: std::fmt::Debug,
    {
        self.app
            .req(Method::POST, PATH)
            .as_master()
            .header("x-llm-id", llm)
            .header("X-Agent-Id", agent)
            .header("X-Pipeline-Id", pipeline)
            .header("X-Pipeline-Classification", classification)
    }

    /// Creates an agent with the master key; its id.
    async fn agent(&self, body: &Value) -> String {
        let reply = self.app.post("/agents", body).await;
        assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
        str_of(&reply.body, "id").to_owned()
    }

    /// The messages the model received in its last request.
    fn last_sent(&self) -> Value {
        self.fake.last_request().json()["messages"].clone()
    }
}

async fn send(request: Req) -> Reply {
    within(request.send()).await
}

/// The `data:` payloads of a server-sent events body, `[DONE]` as a string.
fn data_lines(text: &str) -> Vec<Value> {
    assert!(text.ends_with("\n\n"), "unterminated event: {text:?}");
    text.trim_end_matches('\n')
        .split("\n\n")
        .map(|event| {
            let data = event
                .strip_prefix("data: ")
                .unwrap_or_else(|| panic!("not a data line: {event:?}"));
            if data == "[DONE]" {
                Value::String(data.to_owned())
            } else {
                serde_json::from_str(data).unwrap_or_else(|e| panic!("{e}: {data:?}"))
            }
        })
        .collect()
}

#[tokio::test]
async fn with_the_switch_off_enriched_completions_are_not_implemented() {
    let setup = Setup::on(spawn_app_without_worker().await).await;
    let reply = send(
        setup
            .request(&setup.agent)
            .json(&json!({"messages": conversation()})),
    )
    .await;
    assert_error(&reply, StatusCode::NOT_IMPLEMENTED, NOT_IMPLEMENTED);
    // Before the body, as today.
    let reply = send(
        setup
            .request(&setup.agent)
            .header("content-type", "application/json")
            .body("{"),
    )
    .await;
    assert_error(&reply, StatusCode::NOT_IMPLEMENTED, NOT_IMPLEMENTED);
    let reply = send(
        setup
            .request("not-a-uuid")
            .json(&json!({"messages": conversation()})),
    )
    .await;
    assert_error(&reply, StatusCode::NOT_IMPLEMENTED, NOT_IMPLEMENTED);
    let reply = send(
        setup
            .app
            .req(Method::POST, PATH)
            .as_master()
            .header("x-llm-id", &setup.llm)
            .header("X-Agent-Id", &setup.agent)
            .json(&json!({"messages": conversation()})),
    )
    .await;
    assert_error(&reply, StatusCode::BAD_REQUEST, MISSING_HEADERS);
    assert!(setup.fake.requests().is_empty());

    let document = setup.app.get("/openapi.json").await;
    let relay = &document.body["paths"][PATH]["post"];
    assert!(relay.get("parameters").is_none(), "{relay}");
}

#[tokio::test]
async fn headers_are_checked_as_the_interface_says_before_the_body() {
    let setup = Setup::new().await;
    let agent = setup.agent.clone();
    // `x-llm-id` first, then all or none, before the body is read.
    let reply = send(
        setup
            .app
            .req(Method::POST, PATH)
            .as_master()
            .header("X-Agent-Id", &agent)
            .header("content-type", "application/json")
            .body("{"),
    )
    .await;
    assert_plain(
        &reply,
        StatusCode::BAD_REQUEST,
        "Header of type `x-llm-id` was missing",
    );
    let reply = send(
        setup
            .app
            .req(Method::POST, PATH)
            .as_master()
            .header("x-llm-id", &setup.llm)
            .header("X-Pipeline-Id", &setup.pid)
            .header("X-Pipeline-Classification", "public")
            .header("content-type", "application/json")
            .body("{"),
    )
    .await;
    assert_error(&reply, StatusCode::BAD_REQUEST, MISSING_HEADERS);
    let reply = send(
        setup
            .request("not-a-uuid")
            .header("content-type", "application/json")
            .body("{"),
    )
    .await;
    assert_error(&reply, StatusCode::BAD_REQUEST, "Invalid agent ID");
    let reply = send(
        setup
            .request_with(&setup.llm, &agent, "nope", "public")
            .header("content-type", "application/json")
            .body("{"),
    )
    .await;
    assert_error(&reply, StatusCode::BAD_REQUEST, "Invalid pipeline ID");
    let reply = send(
        setup
            .request_with(
                &setup.llm,
                &agent,
                &setup.pid,
                reqwest::header::HeaderValue::from_bytes(b"caf\xc3\xa9").expect("header"),
            )
            .json(&json!({"messages": conversation()})),
    )
    .await;
    assert_plain(
        &reply,
        StatusCode::BAD_REQUEST,
        "invalid HTTP header (x-pipeline-classification)",
    );
    // Then the body: not JSON, not the chat-completions shape.
    let reply = send(
        setup
            .request(&agent)
            .header("content-type", "application/json")
            .body("{"),
    )
    .await;
    assert_plain(
        &reply,
        StatusCode::BAD_REQUEST,
        "Failed to parse the request body as JSON: ",
    );
    for body in [
        json!({}),
        json!({"messages": "hi"}),
        json!({"messages": [{"role": "tool", "content": "42"}]}),
        json!({"messages": conversation(), "stream": "sse"}),
        json!({"messages": conversation(), "filters": {"context": {"team": {"$nope": 1}}}}),
    ] {
        let reply = send(setup.request(&agent).json(&body)).await;
        assert_plain(
            &reply,
            StatusCode::UNPROCESSABLE_ENTITY,
            "Failed to deserialize the JSON body into the target type:",
        );
    }
    assert!(setup.fake.requests().is_empty());
}

#[tokio::test]
async fn a_whole_answer_is_one_chat_completion_with_retrieval_and_history() {
    let setup = Setup::new().await;
    setup
        .fake
        .script(Answer::new(["Cats ", "sleep."]).usage(9, 2));
    let reply = send(
        setup
            .request(&setup.agent)
            .json(&json!({"model": "whatever", "messages": conversation(), "temperature": 0.3})),
    )
    .await;

    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(reply.header("content-type"), Some("application/json"));
    let body = &reply.body;
    assert_eq!(body["object"], "chat.completion");
    assert!(str_of(body, "id").starts_with("chatcmpl-"), "{body}");
    assert!(body["created"].as_u64().is_some_and(|t| t > 1_600_000_000));
    assert_eq!(body["model"], "gpt-fake");
    assert_eq!(
        body["choices"],
        json!([{"index": 0, "message": {"role": "assistant", "content": "Cats sleep."}, "finish_reason": "stop"}])
    );
    assert_eq!(
        body["usage"],
        json!({"prompt_tokens": 9, "completion_tokens": 2, "total_tokens": 11})
    );
    // The fragment about cats, the earlier messages in their place, the question last.
    assert_eq!(
        setup.last_sent(),
        json!([
            said("system", &format!("Use this context:\n{}", DOCUMENTS[0].2)),
            said("system", "You are a pet expert."),
            said("user", "Hello?"),
            said("assistant", "Hi! Ask me anything."),
            said("user", "What do cats do all afternoon?"),
        ])
    );
    let sent = setup.fake.last_request().json();
    assert_eq!(sent["model"], "gpt-fake");
    assert_eq!(sent["stream"], true);
}

#[tokio::test]
async fn a_streamed_answer_is_chat_completion_chunks_ending_with_done() {
    let setup = Setup::new().await;
    setup.fake.script(Answer::default().usage(7, 4));
    let response = within(
        setup
            .request(&setup.agent)
            .json(&json!({"messages": conversation(), "stream": true}))
            .stream(),
    )
    .await;

    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(crate::helpers::content_type(&response), "text/event-stream");
    let text = within(response.text()).await.expect("body");
    let events = data_lines(&text);
    assert_eq!(events.last(), Some(&json!("[DONE]")), "{text}");
    let chunks = &events[..events.len() - 1];
    let id = str_of(&chunks[0], "id");
    let mut content = String::new();
    for chunk in chunks {
        assert_eq!(chunk["object"], "chat.completion.chunk", "{chunk}");
        assert_eq!(chunk["id"], id);
        assert_eq!(chunk["model"], "gpt-fake");
        assert_eq!(chunk["choices"][0]["index"], 0);
        content.push_str(
            chunk["choices"][0]["delta"]["content"]
                .as_str()
                .unwrap_or(""),
        );
    }
    assert_eq!(content, "Hello, world!");
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    assert_eq!(chunks[0]["choices"][0]["finish_reason"], Value::Null);
    assert!(chunks[1]["choices"][0]["delta"].get("role").is_none());
    let last = chunks.last().expect("a last chunk");
    assert_eq!(last["choices"][0]["finish_reason"], "stop");
    assert_eq!(last["choices"][0]["delta"], json!({}));
    assert_eq!(
        last["usage"],
        json!({"prompt_tokens": 7, "completion_tokens": 4, "total_tokens": 11})
    );
    assert_eq!(
        setup.last_sent()[0]["content"],
        format!("Use this context:\n{}", DOCUMENTS[0].2)
    );
    assert_eq!(setup.last_sent().as_array().map(Vec::len), Some(5));

    // Without usage from the model, none is invented.
    setup.fake.script(Answer::new(["Hi"]).without_usage());
    let response = within(
        setup
            .request(&setup.agent)
            .json(&json!({"messages": conversation(), "stream": true}))
            .stream(),
    )
    .await;
    let events = data_lines(&within(response.text()).await.expect("body"));
    assert!(
        events.iter().all(|event| event.get("usage").is_none()),
        "{events:?}"
    );
    setup.fake.script(Answer::new(["Hi"]).without_usage());
    let reply = send(
        setup
            .request(&setup.agent)
            .json(&json!({"messages": conversation()})),
    )
    .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert!(reply.body.get("usage").is_none(), "{}", reply.text);
}

#[tokio::test]
async fn classifications_filters_and_history_as_an_execution() {
    let setup = Setup::new().await;
    // Several classifications, separated by commas; undefined names are ignored.
    let reply = send(
        setup
            .request_with(&setup.llm, &setup.agent, &setup.pid, "secret, public")
            .json(&json!({"messages": conversation()})),
    )
    .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(
        setup.last_sent()[0]["content"],
        format!("Use this context:\n{}", DOCUMENTS[0].2)
    );
    // None of them defined: nothing retrieved.
    let reply = send(
        setup
            .request_with(&setup.llm, &setup.agent, &setup.pid, "secret")
            .json(&json!({"messages": conversation()})),
    )
    .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(setup.last_sent()[0]["content"], "Use this context:\n");
    // The body's filters, per retrieval placeholder.
    let reply = send(setup.request(&setup.agent).json(&json!({
        "messages": conversation(),
        "filters": {"context": {"team": {"$eq": "sea"}}},
    })))
    .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(
        setup.last_sent()[0]["content"],
        format!("Use this context:\n{}", DOCUMENTS[2].2)
    );
    // Only the history placeholder's k most recent earlier messages; content parts are
    // joined; messages after the last user message are not read.
    let mut body = agent_body("short memory");
    body["placeholders"][2]["params"] = json!({"k": 2});
    let short = setup.agent(&body).await;
    let reply = send(setup.request(&short).json(&json!({"messages": [
        said("user", "First?"),
        said("assistant", "One."),
        said("user", "Second?"),
        {"role": "developer", "content": [{"type": "text", "text": "Be"}, {"type": "text", "text": "brief."}]},
        {"role": "user", "content": [{"type": "text", "text": "Cats?"}]},
        said("assistant", "Prefilled"),
    ]})))
    .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(
        setup.last_sent(),
        json!([
            said("system", &format!("Use this context:\n{}", DOCUMENTS[0].2)),
            said("user", "Second?"),
            said("system", "Be\nbrief."),
            said("user", "Cats?"),
        ])
    );
    // An agent without a history placeholder sends no earlier message, as an execution with
    // a context does.
    let plain = setup
        .agent(&json!({
            "name": "no memory",
            "prompt": [{"role": "system", "template": "S"}, {"role": "user", "template": "{q}"}],
            "placeholders": [{"name": "q", "type": "query"}]
        }))
        .await;
    let reply = send(
        setup
            .request(&plain)
            .json(&json!({"messages": conversation()})),
    )
    .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(
        setup.last_sent(),
        json!([
            said("system", "S"),
            said("user", "What do cats do all afternoon?")
        ])
    );
}

#[tokio::test]
async fn refused_requests_send_nothing_and_answer_the_interfaces_errors() {
    let setup = Setup::new().await;
    let two = setup
        .agent(&json!({
            "name": "two variables",
            "prompt": [{"role": "system", "template": "{topic}"}, {"role": "user", "template": "{q}"}],
            "placeholders": [{"name": "q", "type": "query"}, {"name": "topic", "type": "query"}]
        }))
        .await;
    let reply = send(
        setup
            .request(&two)
            .json(&json!({"messages": conversation()})),
    )
    .await;
    assert_invalid(&reply, "Missing prompt variables: q, topic");
    // No user message: the agent's variable has no value.
    let reply = send(
        setup
            .request(&setup.agent)
            .json(&json!({"messages": [said("system", "S")]})),
    )
    .await;
    assert_invalid(&reply, "Missing prompt variables: question");

    let unknown = Uuid::new_v4().to_string();
    let body = json!({"messages": conversation()});
    let reply = send(setup.request(&unknown).json(&body)).await;
    assert_not_found_with_id(&reply, "Agent not found", &unknown);
    let reply = send(
        setup
            .request_with(&setup.llm, &setup.agent, &unknown, "public")
            .json(&body),
    )
    .await;
    assert_not_found_with_id(&reply, "Pipeline not found", &unknown);
    let reply = send(
        setup
            .request_with(&unknown, &setup.agent, &setup.pid, "public")
            .json(&body),
    )
    .await;
    assert_not_found_with_id(&reply, "LLM not found", &unknown);

    // R|X on each: read without execute on the agent is 403, no read 404.
    let agent = &setup.agent;
    let app = &setup.app;
    let key_with = |permissions: Value| async move {
        key_of(
            &app.create_key_with(json!({"name": "k", "permissions": permissions}))
                .await,
        )
    };
    let key = key_with(json!({"agents": 4, "pipelines": 5, "llms": 5})).await;
    let reply = send(setup.request(agent).as_key(&key).json(&body)).await;
    assert_error(
        &reply,
        StatusCode::FORBIDDEN,
        &format!(
            "Unauthorized: access level AccessLevel(READ | EXECUTE) required for agents with id Some({agent})"
        ),
    );
    let key = key_with(json!({"agents": 5, "pipelines": 5, "llms": 1})).await;
    let reply = send(setup.request(agent).as_key(&key).json(&body)).await;
    assert_not_found_with_id(&reply, "LLM not found", &setup.llm);
    let reply = send(setup.request(&setup.agent).json(&json!({
        "messages": conversation(),
        "filters": {"context": {"nowhere": {"$eq": 1}}},
    })))
    .await;
    assert_eq!(
        reply.status,
        StatusCode::INTERNAL_SERVER_ERROR,
        "{}",
        reply.text
    );
    assert_eq!(reply.message(), "Internal error");
    assert!(
        setup.fake.requests().is_empty(),
        "a refused request reached the model"
    );

    // A model server error before the head is the interface's 500, not the server's body.
    for stream in [false, true] {
        setup.fake.script(FakeReply::rate_limited());
        let reply = send(
            setup
                .request(&setup.agent)
                .json(&json!({"messages": conversation(), "stream": stream})),
        )
        .await;
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
        assert!(!reply.text.contains(KEY), "{}", reply.text);
    }
}

#[tokio::test]
async fn the_openapi_document_describes_the_enriched_mode_with_the_switch_on() {
    let setup_app = spawn_app_without_worker_with(&[("TROVE_EXTENSIONS", "conversations")]).await;
    let document = setup_app.get("/openapi.json").await;
    let relay = &document.body["paths"][PATH]["post"];
    let names: Vec<&str> = relay["parameters"]
        .as_array()
        .map(|p| p.iter().filter_map(|p| p["name"].as_str()).collect())
        .unwrap_or_default();
    for name in ["X-Agent-Id", "X-Pipeline-Id", "X-Pipeline-Classification"] {
        assert!(names.contains(&name), "{name}: {relay}");
    }
    assert!(
        relay["description"]
            .as_str()
            .is_some_and(|d| d.contains("Extension `conversations`")),
        "{relay}"
    );
}

/// The Python interpreter with the OpenAI SDK (see `relay::python_with_openai_sdk`).
fn python_with_openai_sdk() -> std::path::PathBuf {
    std::env::var_os("TROVE_TEST_PYTHON").map_or_else(
        || std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(".data/venv/bin/python"),
        std::path::PathBuf::from,
    )
}

#[tokio::test]
async fn openai_python_sdk_against_enriched_completions() {
    let setup = Setup::new().await;
    setup
        .fake
        .script(Answer::new(["Cats", " sleep."]).usage(5, 2));
    setup
        .fake
        .script(Answer::new(["They", " purr", "."]).paced(Duration::from_millis(200)));
    let (key_id, secret) = setup.app.master_key();
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/python/enriched_openai_sdk.py");
    let mut command = tokio::process::Command::new(python_with_openai_sdk());
    command
        .arg(script)
        .env("TROVE_URL", &setup.app.address)
        .env("TROVE_KEY_ID", key_id)
        .env("TROVE_KEY_SECRET", secret)
        .env("TROVE_LLM_ID", &setup.llm)
        .env("TROVE_AGENT_ID", &setup.agent)
        .env("TROVE_PIPELINE_ID", &setup.pid)
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
    let requests = setup.fake.requests();
    assert_eq!(requests.len(), 2);
    for request in &requests {
        assert_eq!(
            request.json()["messages"],
            json!([
                said("system", &format!("Use this context:\n{}", DOCUMENTS[0].2)),
                said("user", "Hello?"),
                said("assistant", "Hi! Ask me anything."),
                said("user", "What do cats do all afternoon?"),
            ])
        );
        assert_eq!(
            request.header("authorization"),
            Some(&*format!("Bearer {KEY}"))
        );
    }
}
