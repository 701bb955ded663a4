//! Agents (`/agents`), retrieval dry runs, executions and their traces through HTTP, against
//! real Postgres and NATS, the seeded embedding model and the fake model server.

use std::time::{Duration, Instant};

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use uuid::Uuid;

use crate::fake_llm::{Answer, FakeLlm, Reply as FakeReply};
use crate::helpers::{
    AppOptions, OBJECT_TYPES, Reply, Req, TestApp, assert_error, assert_invalid,
    assert_invalid_order_by, assert_not_found_with_id, assert_plain, assert_utc_timestamp,
    content_type, eventually, is_uuid, key_of, keys_of, names, spawn_app_with,
    spawn_app_with_license, spawn_app_without_worker, within,
};
use crate::llms::{
    RATE_LIMITED, assert_not_found as assert_llm_not_found, delta, ndjson, ollama_llm, openai_llm,
    read_until, sse_events, usage, use_denied,
};

/// The 403 of a key that can read the agent `id` but not execute it.
fn run_denied(id: &str) -> String {
    format!(
        "Unauthorized: access level AccessLevel(READ | EXECUTE) required for agents with id Some({id})"
    )
}

/// The documents of [`pipeline_with_documents`]: name, `team` metadata, text.
pub(crate) const DOCUMENTS: [(&str, &str, &str); 3] = [
    (
        "cats",
        "pets",
        "Cats purr and sleep in the sun all afternoon.",
    ),
    (
        "dogs",
        "pets",
        "Dogs bark at the mailman and fetch sticks in the park.",
    ),
    (
        "ships",
        "sea",
        "Container ships cross the ocean carrying cargo.",
    ),
];

/// A pipeline (full-text search on) with the three public [`DOCUMENTS`] ingested; its id.
async fn pipeline_with_documents(app: &TestApp) -> String {
    let pid = app
        .new_pipeline_id(json!({"has_full_text_search": true}))
        .await;
    for (name, team, text) in DOCUMENTS {
        let reply = app
            .submit(
                &pid,
                &json!({"external_identifier": name, "classification": "public", "text": text, "metadata": {"team": team}}),
            )
            .await;
        assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
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

/// The smallest valid agent: a system message and the user's question.
pub fn minimal_body(name: &str) -> Value {
    json!({
        "name": name,
        "prompt": [
            {"role": "system", "template": "Be brief."},
            {"role": "user", "template": "{question}"}
        ],
        "placeholders": [{"name": "question", "type": "query"}]
    })
}

/// An agent whose user message is query `q` and whose retrieval placeholder `r` (of `kind`,
/// with `params`) targets it.
fn retrieval_body(name: &str, kind: &str, params: Value) -> Value {
    json!({
        "name": name,
        "prompt": [{"role": "system", "template": "S"}, {"role": "user", "template": "{q}"}],
        "placeholders": [
            {"name": "q", "type": "query"},
            {"name": "r", "type": kind, "target": "q", "params": params}
        ]
    })
}

/// `body` with `field` replaced.
fn with(body: &Value, field: &str, value: Value) -> Value {
    let mut body = body.clone();
    body[field] = value;
    body
}

async fn app() -> TestApp {
    spawn_app_without_worker().await
}

/// Creates an agent with the master key; returns the 201 body.
async fn create_agent(app: &TestApp, body: &Value) -> Value {
    let reply = app.post("/agents", body).await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
    reply.body
}

/// Creates an agent with the master key; returns its id.
async fn create_agent_id(app: &TestApp, body: &Value) -> String {
    create_agent(app, body).await["id"]
        .as_str()
        .expect("id")
        .to_owned()
}

fn assert_agent_not_found(reply: &Reply, id: &str) {
    assert_not_found_with_id(reply, "Agent not found", id);
}

fn assert_no_details(reply: &Reply) {
    assert!(
        reply.body["error"].get("details").is_none(),
        "unexpected details: {}",
        reply.text
    );
}

fn assert_unprocessable(reply: &Reply) {
    assert_plain(
        reply,
        StatusCode::UNPROCESSABLE_ENTITY,
        "Failed to deserialize the JSON body into the target type:",
    );
}

/// The document names of search-result fragments, in result order.
fn documents_of(fragments: &Value) -> Vec<&'static str> {
    fragments
        .as_array()
        .unwrap_or_else(|| panic!("not an array: {fragments}"))
        .iter()
        .map(|fragment| {
            let text = fragment["page_content"].as_str().expect("page_content");
            DOCUMENTS
                .iter()
                .find(|(_, _, document)| *document == text)
                .unwrap_or_else(|| panic!("unknown fragment {fragment}"))
                .0
        })
        .collect()
}

fn sorted(mut list: Vec<&'static str>) -> Vec<&'static str> {
    list.sort_unstable();
    list
}

/// How many traces are stored.
async fn trace_count(app: &TestApp) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM agent_traces")
        .fetch_one(&app.pool)
        .await
        .expect("count traces")
}

/// `POST /agents/{agent}/search` with the master key.
async fn dry_run(app: &TestApp, agent: &str, pid: &str, body: &Value) -> Reply {
    within(
        app.req(Method::POST, &format!("/agents/{agent}/search"))
            .as_master()
            .header("x-pipeline-id", pid)
            .json(body)
            .send(),
    )
    .await
}

/// `POST /agents/{agent}/execute` with `key` and both headers.
fn execute_as(app: &TestApp, key: &(String, String), agent: &str, pid: &str, llm: &str) -> Req {
    app.req(Method::POST, &format!("/agents/{agent}/execute"))
        .as_key(key)
        .header("x-pipeline-id", pid)
        .header("x-llm-id", llm)
}

/// An execution with the master key; the response as it comes.
async fn execute(
    app: &TestApp,
    agent: &str,
    pid: &str,
    llm: &str,
    body: &Value,
) -> reqwest::Response {
    within(
        execute_as(app, &app.master_key(), agent, pid, llm)
            .json(body)
            .stream(),
    )
    .await
}

/// An execution with the master key, read whole.
async fn execute_reply(app: &TestApp, agent: &str, pid: &str, llm: &str, body: &Value) -> Reply {
    within(Reply::read(execute(app, agent, pid, llm, body).await)).await
}

fn tracing_id(response: &reqwest::Response) -> String {
    response
        .headers()
        .get("x-service-tracing-id")
        .expect("x-service-tracing-id")
        .to_str()
        .expect("visible ASCII")
        .to_owned()
}

/// Reads a trace until its answer is `expected` (2 s at most).
async fn await_trace_answer(app: &TestApp, trace: &str, expected: &str) {
    eventually(
        &format!("the answer of trace {trace} to be {expected:?}"),
        Duration::from_secs(2),
        || async {
            let reply = app.get(&format!("/tracing/{trace}")).await;
            assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
            (reply.body["answer"] == expected).then_some(())
        },
    )
    .await;
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
        .req(Method::POST, &format!("/agents/{agent}/search"))
        .as_master()
        .header("x-pipeline-id", &pid)
        .json(&json!({"variables": {"question": "purring cats"}, "classification": "public"}))
        .send()
        .await;
    assert_eq!(dry.status, StatusCode::OK);
    let dry = dry.body;
    assert_eq!(dry["context"].as_array().unwrap().len(), 1, "{dry}");

    fake.script(Answer::new(["Cats ", "purr."]).usage(7, 2));
    let response = within(
        app.req(Method::POST, &format!("/agents/{agent}/execute"))
            .as_master()
            .header("x-pipeline-id", &pid)
            .header("x-llm-id", &llm)
            .json(&json!({"variables": {"question": "purring cats"}, "classification": "public", "tracing": true}))
            .send(),
    )
    .await;
    assert_eq!(response.status, StatusCode::OK);
    let trace_id = response.header("x-service-tracing-id").unwrap().to_owned();
    let body = response.text;
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

// ---- Definitions -------------------------------------------------------------------------

#[tokio::test]
async fn create_returns_the_normalised_agent() {
    let app = app().await;
    let created = create_agent(
        &app,
        &json!({
            "name": "support",
            "prompt": [
                {"role": "system", "template": "Context:\n{context}\nLiteral {{braces}} and }} {{"},
                {"role": "assistant", "template": "Earlier: {more}", "include": false},
                {"role": "user", "template": "{question}", "include": true}
            ],
            "placeholders": [
                {"name": "question", "type": "query", "target": "ignored", "params": {"k": 3}},
                {"name": "context", "type": "similarity", "target": "question"},
                {"name": "more", "type": "mmr", "target": "question", "params": null},
                {"name": "words", "type": "search", "target": "question", "params": {"k": 2, "fetch_k": 4, "lambda_mult": 0.25, "threshold": 0.1}}
            ]
        }),
    )
    .await;

    assert_eq!(
        keys_of(&created),
        [
            "created_at",
            "description",
            "id",
            "name",
            "placeholders",
            "prompt",
            "updated_at"
        ]
    );
    let id = created["id"].as_str().expect("id").to_owned();
    assert!(is_uuid(&id));
    assert_eq!(created["name"], "support");
    assert_eq!(created["description"], Value::Null);
    assert_eq!(
        created["prompt"],
        json!([
            {"role": "system", "template": "Context:\n{context}\nLiteral {{braces}} and }} {{", "include": true},
            {"role": "assistant", "template": "Earlier: {more}", "include": false},
            {"role": "user", "template": "{question}", "include": true}
        ])
    );
    let defaults =
        json!({"k": 5, "fetch_k": 10, "lambda_mult": 0.5, "threshold": null, "embedding": null});
    assert_eq!(
        created["placeholders"],
        json!([
            {"name": "question", "type": "query", "target": null, "params": null},
            {"name": "context", "type": "similarity", "target": "question", "params": defaults},
            {"name": "more", "type": "mmr", "target": "question", "params": defaults},
            {"name": "words", "type": "search", "target": "question", "params": {"k": 2, "fetch_k": 4, "lambda_mult": 0.25, "threshold": 0.1, "embedding": null}}
        ])
    );
    for placeholder in created["placeholders"].as_array().expect("placeholders") {
        assert_eq!(
            keys_of(placeholder),
            ["name", "params", "target", "type"],
            "{placeholder}"
        );
    }
    let created_at = assert_utc_timestamp(&created["created_at"]);
    assert_eq!(assert_utc_timestamp(&created["updated_at"]), created_at);

    let reply = app.get(&format!("/agents/{id}")).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(reply.body, created);

    // A description, and an embedding given in `params`.
    let embedding = Uuid::new_v4();
    let described = create_agent(
        &app,
        &with(
            &retrieval_body(
                "described",
                "similarity",
                json!({"k": 1, "fetch_k": 1, "embedding": embedding}),
            ),
            "description",
            json!("Answers questions"),
        ),
    )
    .await;
    assert_eq!(described["description"], "Answers questions");
    assert_eq!(
        described["placeholders"][1]["params"],
        json!({"k": 1, "fetch_k": 1, "lambda_mult": 0.5, "threshold": null, "embedding": embedding})
    );
}

#[tokio::test]
async fn retrieval_params_are_checked_for_every_retrieval_type() {
    let app = app().await;
    // The retrieval placeholder is referenced by no template: rule 5 applies all the same.
    let body = |kind: &str, params: Value| {
        json!({
            "name": format!("a-{}", Uuid::new_v4().simple()),
            "prompt": [{"role": "system", "template": "S"}, {"role": "user", "template": "{question}"}],
            "placeholders": [
                {"name": "question", "type": "query"},
                {"name": "found", "type": kind, "target": "question", "params": params}
            ]
        })
    };
    for kind in ["similarity", "mmr", "search"] {
        let message = format!("Invalid placeholder of type {kind}");
        for params in [
            json!({"k": 0, "fetch_k": 10}),
            json!({"k": 5, "fetch_k": 4}),
            json!({"k": 5, "fetch_k": 10, "lambda_mult": 1.5}),
            json!({"k": 5, "fetch_k": 10, "lambda_mult": -0.1}),
            // Present `params`: omitted `k` and `fetch_k` are 0.
            json!({}),
            json!({"k": 3}),
            json!({"fetch_k": 3}),
        ] {
            let reply = app.post("/agents", &body(kind, params.clone())).await;
            assert_error(&reply, StatusCode::BAD_REQUEST, &message);
            assert_no_details(&reply);
        }
        for params in [
            json!({"k": 1, "fetch_k": 1, "lambda_mult": 0}),
            json!({"k": 65535, "fetch_k": 65535, "lambda_mult": 1}),
            json!({"k": 2, "fetch_k": 3}),
        ] {
            let created = create_agent(&app, &body(kind, params.clone())).await;
            assert_eq!(created["placeholders"][1]["params"]["k"], params["k"]);
            assert_eq!(
                created["placeholders"][1]["params"]["lambda_mult"].as_f64(),
                Some(params["lambda_mult"].as_f64().unwrap_or(0.5))
            );
        }
        // Omitted or null `params`: the defaults.
        for params in [Value::Null, json!("omit")] {
            let mut agent = body(kind, params.clone());
            if params == json!("omit") {
                agent["placeholders"][1]
                    .as_object_mut()
                    .expect("object")
                    .remove("params");
            }
            let created = create_agent(&app, &agent).await;
            assert_eq!(
                created["placeholders"][1]["params"],
                json!({"k": 5, "fetch_k": 10, "lambda_mult": 0.5, "threshold": null, "embedding": null})
            );
        }
    }
    // Out of the integer range: a body type error.
    for params in [
        json!({"k": -1, "fetch_k": 1}),
        json!({"k": 1, "fetch_k": 70000}),
    ] {
        let reply = app.post("/agents", &body("similarity", params)).await;
        assert_unprocessable(&reply);
    }
}

#[tokio::test]
async fn create_checks_the_rules_in_order() {
    let app = app().await;
    create_agent(&app, &minimal_body("taken")).await;

    // Fails every rule: name, a `history` placeholder, no system message, an undefined
    // reference, k 0; its name once fixed is taken.
    let mut body = json!({
        "name": "",
        "prompt": [{"role": "user", "template": "{question} {nowhere}"}],
        "placeholders": [
            {"name": "question", "type": "query"},
            {"name": "context", "type": "similarity", "target": "question", "params": {"k": 0, "fetch_k": 1}},
            {"name": "past", "type": "history"}
        ]
    });
    let reply = app.post("/agents", &body).await;
    assert_invalid(&reply, "Invalid name");

    body["name"] = json!("taken");
    let reply = app.post("/agents", &body).await;
    assert_error(&reply, StatusCode::NOT_IMPLEMENTED, "Not implemented");
    assert_no_details(&reply);

    body["placeholders"]
        .as_array_mut()
        .expect("placeholders")
        .pop();
    let reply = app.post("/agents", &body).await;
    assert_error(&reply, StatusCode::BAD_REQUEST, "Invalid prompt type");
    assert_no_details(&reply);

    body["prompt"] = json!([
        {"role": "system", "template": "S"},
        {"role": "user", "template": "{question} {nowhere}"}
    ]);
    let reply = app.post("/agents", &body).await;
    assert_error(&reply, StatusCode::BAD_REQUEST, "Invalid prompt");
    assert_no_details(&reply);

    body["prompt"][1]["template"] = json!("{question}");
    let reply = app.post("/agents", &body).await;
    assert_error(
        &reply,
        StatusCode::BAD_REQUEST,
        "Invalid placeholder of type similarity",
    );

    body["placeholders"][1]["params"] = json!({"k": 1, "fetch_k": 1});
    let reply = app.post("/agents", &body).await;
    assert_error(&reply, StatusCode::CONFLICT, "Conflict unique error");
    assert_no_details(&reply);

    body["name"] = json!("free");
    create_agent(&app, &body).await;
    let reply = app.get("/agents?count=true").await;
    assert_eq!(reply.body["page_info"]["count"], 2, "{}", reply.text);
}

#[tokio::test]
async fn create_rejects_each_invalid_definition() {
    let app = app().await;
    let base = minimal_body("base");
    // Taken: every invalid body below named `base` fails its rule, not uniqueness.
    create_agent(&app, &base).await;

    // Names: 1 to 255 characters (not bytes).
    for name in [String::new(), "x".repeat(256), "é".repeat(256)] {
        let reply = app.post("/agents", &with(&base, "name", json!(name))).await;
        assert_invalid(&reply, "Invalid name");
    }
    let long = create_agent(&app, &with(&base, "name", json!("é".repeat(255)))).await;
    assert_eq!(long["name"], "é".repeat(255));

    // Unimplemented placeholder types, used or not.
    for kind in ["hybrid", "history"] {
        for placeholder in [
            json!({"name": "extra", "type": kind}),
            json!({"name": "extra", "type": kind, "target": "question", "params": {"k": 1, "fetch_k": 1}}),
        ] {
            let mut body = with(&base, "name", json!(format!("with-{kind}")));
            body["placeholders"]
                .as_array_mut()
                .expect("placeholders")
                .push(placeholder);
            let reply = app.post("/agents", &body).await;
            assert_error(&reply, StatusCode::NOT_IMPLEMENTED, "Not implemented");
        }
    }

    // Roles: a system and a user message, the last a user message; excluded messages count.
    for prompt in [
        json!([]),
        json!([{"role": "user", "template": "{question}"}]),
        json!([{"role": "system", "template": "S"}]),
        json!([{"role": "assistant", "template": "A"}, {"role": "user", "template": "{question}"}]),
        json!([{"role": "system", "template": "S"}, {"role": "assistant", "template": "A"}]),
        json!([{"role": "system", "template": "S"}, {"role": "user", "template": "{question}"}, {"role": "assistant", "template": "A"}]),
        json!([{"role": "system", "template": "S"}, {"role": "user", "template": "{question}"}, {"role": "assistant", "template": "A", "include": false}]),
    ] {
        let reply = app
            .post("/agents", &with(&base, "prompt", prompt.clone()))
            .await;
        assert_error(&reply, StatusCode::BAD_REQUEST, "Invalid prompt type");
        assert_no_details(&reply);
    }
    let excluded_system = create_agent(
        &app,
        &json!({
            "name": "excluded-system",
            "prompt": [{"role": "system", "template": "S", "include": false}, {"role": "user", "template": "{question}"}],
            "placeholders": [{"name": "question", "type": "query"}]
        }),
    )
    .await;
    assert_eq!(excluded_system["prompt"][0]["include"], false);

    // Placeholder names, references and targets.
    let query = |name: &str| json!({"name": name, "type": "query"});
    let invalid_prompts = [
        // Names: identifiers of at most 64 characters, unique.
        (json!([query("question"), query("1a")]), "{question}"),
        (json!([query("question"), query("a-b")]), "{question}"),
        (json!([query("question"), query("")]), "{question}"),
        (json!([query("question"), query("é")]), "{question}"),
        (
            json!([query("question"), query(&"a".repeat(65))]),
            "{question}",
        ),
        (json!([query("question"), query("question")]), "{question}"),
        // A reference to no placeholder.
        (json!([query("question")]), "{question} {nowhere}"),
        // Retrieval placeholders without a target, or targeting no query placeholder.
        (
            json!([query("question"), {"name": "r", "type": "similarity"}]),
            "{question}",
        ),
        (
            json!([query("question"), {"name": "r", "type": "mmr", "target": null}]),
            "{question}",
        ),
        (
            json!([query("question"), {"name": "r", "type": "search", "target": "unknown"}]),
            "{question}",
        ),
        (
            json!([query("question"), {"name": "r", "type": "similarity", "target": "s"}, {"name": "s", "type": "similarity", "target": "question"}]),
            "{question}",
        ),
        (
            json!([query("question"), {"name": "r", "type": "similarity", "target": "r"}]),
            "{question}",
        ),
    ];
    for (placeholders, template) in invalid_prompts {
        let mut body = with(&base, "placeholders", placeholders.clone());
        body["prompt"][1]["template"] = json!(template);
        let reply = app.post("/agents", &body).await;
        assert_error(&reply, StatusCode::BAD_REQUEST, "Invalid prompt");
        assert_no_details(&reply);
    }
    // An excluded message is validated too.
    let mut body = base.clone();
    body["prompt"] = json!([
        {"role": "system", "template": "S"},
        {"role": "assistant", "template": "{nowhere}", "include": false},
        {"role": "user", "template": "{question}"}
    ]);
    let reply = app.post("/agents", &body).await;
    assert_error(&reply, StatusCode::BAD_REQUEST, "Invalid prompt");

    // 64 characters is the longest name; braces that make no reference are text.
    let name = "_".to_owned() + &"a".repeat(63);
    let mut body = with(&base, "name", json!("long-placeholder"));
    body["placeholders"] = json!([query(&name)]);
    body["prompt"][1]["template"] = json!(format!("{{{name}}} {{{{x}}}} {{ y }} {{1}} {{}} }}{{"));
    let created = create_agent(&app, &body).await;
    assert_eq!(created["placeholders"][0]["name"], name);

    let reply = app.post("/agents", &base).await;
    assert_error(&reply, StatusCode::CONFLICT, "Conflict unique error");
    let reply = app.get("/agents?count=true").await;
    assert_eq!(reply.body["page_info"]["count"], 4, "{}", reply.text);
}

#[tokio::test]
async fn create_body_type_errors_are_422() {
    let app = app().await;
    let base = minimal_body("typed");
    let mut unknown_role = base.clone();
    unknown_role["prompt"][0]["role"] = json!("tool");
    let mut unknown_type = base.clone();
    unknown_type["placeholders"][0]["type"] = json!("vector");
    let mut capitalised_role = base.clone();
    capitalised_role["prompt"][0]["role"] = json!("System");
    let mut without_prompt = base.clone();
    without_prompt
        .as_object_mut()
        .expect("object")
        .remove("prompt");
    let mut include_string = base.clone();
    include_string["prompt"][0]["include"] = json!("yes");
    for body in [
        unknown_role,
        unknown_type,
        capitalised_role,
        without_prompt,
        include_string,
        with(&base, "prompt", json!({})),
        json!([]),
    ] {
        let reply = app.post("/agents", &body).await;
        assert_unprocessable(&reply);
    }
    let reply = app.get("/agents?count=true").await;
    assert_eq!(reply.body["page_info"]["count"], 0, "{}", reply.text);
}

#[tokio::test]
async fn license_limits_agents() {
    let (app, _file) = spawn_app_with_license(
        r#"{"limits":{"agents":1}}"#,
        AppOptions {
            no_worker: true,
            ..AppOptions::default()
        },
    )
    .await;
    let first = create_agent_id(&app, &minimal_body("first")).await;
    let reply = app.post("/agents", &minimal_body("second")).await;
    assert_error(
        &reply,
        StatusCode::FORBIDDEN,
        "License limits exceeded for Agent",
    );
    // The license comes before validation.
    let reply = app.post("/agents", &minimal_body("")).await;
    assert_error(
        &reply,
        StatusCode::FORBIDDEN,
        "License limits exceeded for Agent",
    );
    // At the limit, changes are allowed.
    let path = format!("/agents/{first}");
    let reply = app.patch(&path, &json!({"description": "edited"})).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    let reply = app.delete(&path).await;
    assert_eq!(reply.status, StatusCode::NO_CONTENT, "{}", reply.text);
    create_agent(&app, &minimal_body("second")).await;
}

#[tokio::test]
async fn list_filters_and_ordering() {
    let app = app().await;
    let empty = app.get("/agents").await;
    assert_eq!(empty.status, StatusCode::OK, "{}", empty.text);
    assert_eq!(empty.body["data"], json!([]));

    let alpha = create_agent(
        &app,
        &with(
            &minimal_body("alpha-agent"),
            "description",
            json!("support"),
        ),
    )
    .await;
    let beta = create_agent(&app, &minimal_body("beta")).await;
    create_agent(
        &app,
        &with(&minimal_body("gamma-agent"), "description", json!("sales")),
    )
    .await;
    let query = |q: &'static str| {
        let app = &app;
        async move {
            let reply = app.get(&format!("/agents?{q}")).await;
            assert_eq!(reply.status, StatusCode::OK, "{q}: {}", reply.text);
            reply.body
        }
    };

    let body = query("name=beta").await;
    assert_eq!(names(&body), ["beta"]);
    assert_eq!(body["data"][0], beta);
    assert_eq!(body["query_info"], json!({"name": "beta"}));
    let body = query("name$contains=agent&order_by=name").await;
    assert_eq!(names(&body), ["alpha-agent", "gamma-agent"]);
    assert_eq!(body["query_info"], json!({"name$contains": ["agent"]}));
    assert_eq!(body["data"][0], alpha);
    assert_eq!(names(&query("description=support").await), ["alpha-agent"]);
    assert_eq!(
        names(&query("description$contains=a&order_by=-name").await),
        ["gamma-agent"]
    );
    assert_eq!(names(&query("name$startswith=g").await), ["gamma-agent"]);
    let body = query("order_by=-name&count=true").await;
    assert_eq!(names(&body), ["gamma-agent", "beta", "alpha-agent"]);
    assert_eq!(body["page_info"]["count"], 3);
    assert_eq!(body["page_info"]["order_by"], json!(["-name"]));
    let body = query("first=2&order_by=name").await;
    assert_eq!(names(&body), ["alpha-agent", "beta"]);
    assert_eq!(body["page_info"]["has_next"], true);

    let reply = app.get("/agents?order_by=description").await;
    assert_invalid_order_by(&reply, json!(["description"]));

    // A key sees the agents it can read: an object entry, or none.
    let reader = app.create_key_with(json!({"name": "reader"})).await;
    app.grant(
        reader["id"].as_str().expect("id"),
        json!([{"object_type": "agents", "object_id": beta["id"], "permission": 4}]),
    )
    .await;
    let reply = app.as_key(key_of(&reader)).get("/agents?count=true").await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(names(&reply.body), ["beta"]);
    assert_eq!(reply.body["page_info"]["count"], 1);
    let nobody = key_of(&app.create_key_with(json!({"name": "nobody"})).await);
    let reply = app.as_key(&nobody).get("/agents").await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(reply.body["data"], json!([]));
}

#[tokio::test]
async fn patch_changes_fields_and_replaces_arrays() {
    let app = app().await;
    let created = create_agent(
        &app,
        &with(&agent_body("helper"), "description", json!("first")),
    )
    .await;
    let id = created["id"].as_str().expect("id").to_owned();
    let path = format!("/agents/{id}");
    let created_at = assert_utc_timestamp(&created["created_at"]);

    let reply = app.patch(&path, &json!({"name": "renamed"})).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(reply.body["name"], "renamed");
    assert_eq!(reply.body["description"], "first");
    assert_eq!(reply.body["prompt"], created["prompt"]);
    assert_eq!(reply.body["placeholders"], created["placeholders"]);
    assert_eq!(reply.body["created_at"], created["created_at"]);
    let renamed_at = assert_utc_timestamp(&reply.body["updated_at"]);
    assert!(renamed_at > created_at);

    // `null` for a non-nullable field counts as omitted; `{}` is valid.
    let reply = app
        .patch(
            &path,
            &json!({"name": null, "prompt": null, "placeholders": null}),
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(reply.body["name"], "renamed");
    assert_eq!(reply.body["prompt"], created["prompt"]);
    let reply = app.patch(&path, &json!({})).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert!(assert_utc_timestamp(&reply.body["updated_at"]) > renamed_at);

    // Arrays are replaced whole; the merged agent is validated.
    let reply = app
        .patch(
            &path,
            &json!({"prompt": [{"role": "system", "template": "No context."}, {"role": "user", "template": "{question}"}]}),
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(
        reply.body["prompt"],
        json!([
            {"role": "system", "template": "No context.", "include": true},
            {"role": "user", "template": "{question}", "include": true}
        ])
    );
    assert_eq!(reply.body["placeholders"], created["placeholders"]);
    let reply = app
        .patch(
            &path,
            &json!({"placeholders": [{"name": "question", "type": "query"}], "description": null}),
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(
        reply.body["placeholders"],
        json!([{"name": "question", "type": "query", "target": null, "params": null}])
    );
    assert_eq!(reply.body["description"], Value::Null);
    assert_eq!(app.get(&path).await.body, reply.body);

    let reply = app.delete(&path).await;
    assert_eq!(reply.status, StatusCode::NO_CONTENT, "{}", reply.text);
    assert!(reply.text.is_empty());
    assert_agent_not_found(&app.get(&path).await, &id);
    assert_agent_not_found(&app.delete(&path).await, &id);
    assert_agent_not_found(&app.patch(&path, &json!({})).await, &id);
}

#[tokio::test]
async fn invalid_patch_leaves_the_agent_unchanged() {
    let app = app().await;
    create_agent(&app, &minimal_body("other")).await;
    let created = create_agent(&app, &agent_body("helper")).await;
    let path = format!("/agents/{}", created["id"].as_str().expect("id"));

    let cases: Vec<(Value, StatusCode, &str)> = vec![
        (
            json!({"name": "", "description": "x"}),
            StatusCode::BAD_REQUEST,
            "Invalid parameter",
        ),
        (
            json!({"name": "x".repeat(256)}),
            StatusCode::BAD_REQUEST,
            "Invalid parameter",
        ),
        (
            json!({"placeholders": [{"name": "question", "type": "query"}, {"name": "context", "type": "hybrid"}]}),
            StatusCode::NOT_IMPLEMENTED,
            "Not implemented",
        ),
        (
            json!({"prompt": [{"role": "user", "template": "{question}"}]}),
            StatusCode::BAD_REQUEST,
            "Invalid prompt type",
        ),
        // The prompt still references `context`.
        (
            json!({"placeholders": [{"name": "question", "type": "query"}]}),
            StatusCode::BAD_REQUEST,
            "Invalid prompt",
        ),
        (
            json!({"placeholders": [{"name": "question", "type": "query"}, {"name": "context", "type": "mmr", "target": "question", "params": {"k": 2, "fetch_k": 1}}]}),
            StatusCode::BAD_REQUEST,
            "Invalid placeholder of type mmr",
        ),
        (
            json!({"name": "other", "description": "x"}),
            StatusCode::CONFLICT,
            "Conflict unique error",
        ),
    ];
    for (body, status, message) in cases {
        let reply = app.patch(&path, &body).await;
        assert_error(&reply, status, message);
        if message == "Invalid parameter" {
            assert_invalid(&reply, "Invalid name");
        }
    }
    let mut unknown_role = created["prompt"].clone();
    unknown_role[0]["role"] = json!("tool");
    for body in [json!({"prompt": unknown_role}), json!({"name": 3})] {
        assert_unprocessable(&app.patch(&path, &body).await);
    }
    assert_eq!(app.get(&path).await.body, created);
}

/// Query placeholders `a`, `b`, `c` used by templates (`a` and `b` only in excluded or system
/// messages, mentioned in reverse order), `t` targeted by `context` only, `unused` used by
/// nothing; `context` referenced, `spare` (MMR on `c`) not.
fn strict_body(name: &str) -> Value {
    json!({
        "name": name,
        "prompt": [
            {"role": "system", "template": "Rules {b}. Context:\n{context}"},
            {"role": "assistant", "template": "Earlier {a}", "include": false},
            {"role": "user", "template": "{c}"}
        ],
        "placeholders": [
            {"name": "a", "type": "query"},
            {"name": "unused", "type": "query"},
            {"name": "b", "type": "query"},
            {"name": "context", "type": "similarity", "target": "t", "params": {"k": 1, "fetch_k": 1}},
            {"name": "c", "type": "query"},
            {"name": "t", "type": "query"},
            {"name": "spare", "type": "mmr", "target": "c", "params": {"k": 1, "fetch_k": 2}}
        ]
    })
}

#[tokio::test]
async fn prompt_lists_the_variables_an_execution_needs() {
    let app = app().await;
    let created = create_agent(&app, &strict_body("strict")).await;
    let id = created["id"].as_str().expect("id");

    let reply = app.get(&format!("/agents/{id}/prompt")).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(
        keys_of(&reply.body),
        ["messages", "placeholders", "variables"]
    );
    assert_eq!(reply.body["messages"], created["prompt"]);
    assert_eq!(reply.body["placeholders"], created["placeholders"]);
    assert_eq!(reply.body["variables"], json!(["a", "b", "c", "t"]));

    let simple = create_agent_id(&app, &agent_body("simple")).await;
    let reply = app.get(&format!("/agents/{simple}/prompt")).await;
    assert_eq!(reply.body["variables"], json!(["question"]));
    assert_eq!(
        reply.body["messages"],
        json!([
            {"role": "system", "template": "Use this context:\n{context}", "include": true},
            {"role": "user", "template": "{question}", "include": true}
        ])
    );
    let none = create_agent_id(
        &app,
        &json!({
            "name": "none",
            "prompt": [{"role": "system", "template": "S"}, {"role": "user", "template": "Hi"}],
            "placeholders": [{"name": "q", "type": "query"}]
        }),
    )
    .await;
    let reply = app.get(&format!("/agents/{none}/prompt")).await;
    assert_eq!(reply.body["variables"], json!([]));
}

// ---- Dry run -----------------------------------------------------------------------------

/// `context` (similarity on `question`, referenced), `diverse` (MMR on `question`,
/// referenced) and `words` (full text on `topic`, referenced by no template).
fn retrieving_body(name: &str) -> Value {
    json!({
        "name": name,
        "prompt": [
            {"role": "system", "template": "Context: {context}\n{diverse}"},
            {"role": "user", "template": "{question}"}
        ],
        "placeholders": [
            {"name": "question", "type": "query"},
            {"name": "topic", "type": "query"},
            {"name": "context", "type": "similarity", "target": "question", "params": {"k": 3, "fetch_k": 3}},
            {"name": "diverse", "type": "mmr", "target": "question", "params": {"k": 2, "fetch_k": 3, "lambda_mult": 0.3}},
            {"name": "words", "type": "search", "target": "topic", "params": {"k": 3, "fetch_k": 3}}
        ]
    })
}

#[tokio::test]
async fn dry_run_returns_every_retrieval_placeholder() {
    let app = app().await;
    let pid = pipeline_with_documents(&app).await;
    let agent = create_agent_id(&app, &retrieving_body("retriever")).await;
    let variables = json!({"question": "purring cats", "topic": "ocean cargo", "extra": "ignored"});

    let reply = dry_run(
        &app,
        &agent,
        &pid,
        &json!({"variables": variables, "classification": "public"}),
    )
    .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(keys_of(&reply.body), ["context", "diverse", "words"]);
    // Each placeholder is the search of its type with its target and parameters.
    for (placeholder, search) in [
        (
            "context",
            json!({"query": "purring cats", "type": "similarity", "params": {"k": 3, "fetch_k": 3}}),
        ),
        (
            "diverse",
            json!({"query": "purring cats", "type": "mmr", "params": {"k": 2, "fetch_k": 3, "lambda_mult": 0.3}}),
        ),
        (
            "words",
            json!({"query": "ocean cargo", "type": "search", "params": {"k": 3, "fetch_k": 3}}),
        ),
    ] {
        let searched = app
            .post(
                &format!("/pipelines/{pid}/search"),
                &with(&search, "classification", json!("public")),
            )
            .await;
        assert_eq!(searched.status, StatusCode::OK, "{}", searched.text);
        assert_eq!(reply.body[placeholder], searched.body, "{placeholder}");
    }
    assert_eq!(
        sorted(documents_of(&reply.body["context"])),
        ["cats", "dogs", "ships"]
    );
    assert_eq!(documents_of(&reply.body["diverse"]).len(), 2);
    assert_eq!(documents_of(&reply.body["words"]), ["ships"]);

    // Without classification nothing is retrieved.
    let reply = dry_run(&app, &agent, &pid, &json!({"variables": variables})).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(
        reply.body,
        json!({"context": [], "diverse": [], "words": []})
    );
    let reply = dry_run(
        &app,
        &agent,
        &pid,
        &json!({"variables": variables, "classification": []}),
    )
    .await;
    assert_eq!(
        reply.body,
        json!({"context": [], "diverse": [], "words": []})
    );

    // A filter applies to its placeholder only; other names are ignored.
    let reply = dry_run(
        &app,
        &agent,
        &pid,
        &json!({
            "variables": variables,
            "classification": ["public"],
            "filters": {"context": {"team": {"$eq": "sea"}}, "words": {"team": {"$eq": "pets"}}, "question": {"team": {"$eq": "none"}}, "elsewhere": {}}
        }),
    )
    .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(documents_of(&reply.body["context"]), ["ships"]);
    assert_eq!(documents_of(&reply.body["diverse"]).len(), 2);
    assert_eq!(documents_of(&reply.body["words"]), Vec::<&str>::new());
    let reply = dry_run(
        &app,
        &agent,
        &pid,
        &json!({"variables": variables, "classification": "public", "filters": {"context": {"team": {"$in": ["pets"]}}}}),
    )
    .await;
    assert_eq!(
        sorted(documents_of(&reply.body["context"])),
        ["cats", "dogs"]
    );
    assert_eq!(documents_of(&reply.body["words"]), ["ships"]);

    // Only retrieval targets are needed: the first placeholder (definition order) lacking one.
    let reply = dry_run(
        &app,
        &agent,
        &pid,
        &json!({"variables": {"topic": "x"}, "classification": "public"}),
    )
    .await;
    assert_invalid(&reply, "Missing target for placeholder: context");
    let reply = dry_run(
        &app,
        &agent,
        &pid,
        &json!({"variables": {"question": "x"}, "classification": "public"}),
    )
    .await;
    assert_invalid(&reply, "Missing target for placeholder: words");
    let strict = create_agent_id(&app, &strict_body("strict")).await;
    let reply = dry_run(
        &app,
        &strict,
        &pid,
        &json!({"variables": {"t": "purring cats", "c": "dogs"}, "classification": "public"}),
    )
    .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(keys_of(&reply.body), ["context", "spare"]);
    let reply = dry_run(&app, &strict, &pid, &json!({"variables": {"t": "x"}})).await;
    assert_invalid(&reply, "Missing target for placeholder: spare");
}

#[tokio::test]
async fn dry_run_checks_headers_agent_and_pipeline() {
    let app = app().await;
    let pid = pipeline_with_documents(&app).await;
    let agent = create_agent_id(&app, &agent_body("helper")).await;
    let unknown = Uuid::new_v4().to_string();
    let body = json!({"variables": {"question": "cats"}, "classification": "public"});
    let path = |agent: &str| format!("/agents/{agent}/search");

    // Headers come before the agent.
    for agent in [&agent, &unknown] {
        let reply = app.post(&path(agent), &body).await;
        assert_plain(
            &reply,
            StatusCode::BAD_REQUEST,
            "Header of type `x-pipeline-id` was missing",
        );
        let reply = app
            .req(Method::POST, &path(agent))
            .as_master()
            .header("x-pipeline-id", "not-a-uuid")
            .json(&body)
            .send()
            .await;
        assert_error(&reply, StatusCode::BAD_REQUEST, "Invalid pipeline ID");
        assert_no_details(&reply);
    }

    // The agent before the pipeline; no details.
    for pipeline in [&pid, &unknown] {
        let reply = dry_run(&app, &unknown, pipeline, &body).await;
        assert_error(&reply, StatusCode::NOT_FOUND, "Agent not found");
        assert_no_details(&reply);
    }
    let reply = dry_run(&app, &agent, &unknown, &json!({})).await;
    assert_error(&reply, StatusCode::NOT_FOUND, "Pipeline not found");
    assert_eq!(reply.body["error"]["details"], json!({"id": unknown}));

    // R|X on the agent and on the pipeline.
    let run_as = |key: (String, String)| {
        let app = &app;
        let path = path(&agent);
        let pid = pid.clone();
        let body = body.clone();
        async move {
            app.req(Method::POST, &path)
                .as_key(&key)
                .header("x-pipeline-id", &pid)
                .json(&body)
                .send()
                .await
        }
    };
    let key = |permissions: Value| {
        let app = &app;
        async move {
            key_of(
                &app.create_key_with(
                    json!({"name": "k", "permissions": permissions, "classifications": ["*"]}),
                )
                .await,
            )
        }
    };
    let reply = run_as(key(json!({"agents": 4, "pipelines": 5})).await).await;
    assert_error(&reply, StatusCode::FORBIDDEN, &run_denied(&agent));
    let reply = run_as(key(json!({"agents": 1, "pipelines": 5})).await).await;
    assert_error(&reply, StatusCode::NOT_FOUND, "Agent not found");
    assert_no_details(&reply);
    let reply = run_as(key(json!({"agents": 5, "pipelines": 4})).await).await;
    assert_error(&reply, StatusCode::NOT_FOUND, "Pipeline not found");
    let reply = run_as(key(json!({"agents": 5, "pipelines": 5})).await).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(documents_of(&reply.body["context"]), ["cats"]);
}

#[tokio::test]
async fn dry_run_search_errors() {
    let app = app().await;
    let pid = pipeline_with_documents(&app).await;
    let agent = create_agent_id(&app, &retrieving_body("retriever")).await;
    let variables = json!({"question": "purring cats", "topic": "ocean cargo"});

    // Filter grammar: a body type error.
    for filter in [
        json!({"team": "sea"}),
        json!({"team": {"$ne": "sea"}}),
        json!({"team": {"$eq": "sea", "$neq": "x"}}),
        json!({"team": {"$eq": null}}),
    ] {
        let reply = dry_run(
            &app,
            &agent,
            &pid,
            &json!({"variables": variables, "classification": "public", "filters": {"context": filter}}),
        )
        .await;
        assert_unprocessable(&reply);
    }
    // A filter that does not fit the schema: 500 in agent requests.
    let reply = dry_run(
        &app,
        &agent,
        &pid,
        &json!({"variables": variables, "classification": "public", "filters": {"diverse": {"color": {"$eq": "red"}}}}),
    )
    .await;
    assert_error(&reply, StatusCode::INTERNAL_SERVER_ERROR, "Internal error");
    assert_eq!(
        reply.body["error"]["details"],
        json!({"error": "Schema error"}),
        "{}",
        reply.text
    );
    // An embedding the pipeline does not use.
    let embedding = Uuid::new_v4();
    let stray = create_agent_id(
        &app,
        &retrieval_body(
            "stray",
            "similarity",
            json!({"k": 1, "fetch_k": 1, "embedding": embedding}),
        ),
    )
    .await;
    let reply = dry_run(
        &app,
        &stray,
        &pid,
        &json!({"variables": {"q": "cats"}, "classification": "public"}),
    )
    .await;
    assert_error(
        &reply,
        StatusCode::BAD_REQUEST,
        "Vector embedding not found",
    );
    assert_eq!(
        reply.body["error"]["details"],
        json!({"embedding_id": embedding})
    );
    // The pipeline's own model given as `embedding` is fine.
    let model = app.seeded("/embedding-models", "default").await;
    let own = create_agent_id(
        &app,
        &retrieval_body(
            "own",
            "similarity",
            json!({"k": 1, "fetch_k": 1, "embedding": model}),
        ),
    )
    .await;
    let reply = dry_run(
        &app,
        &own,
        &pid,
        &json!({"variables": {"q": "purring cats"}, "classification": "public"}),
    )
    .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(documents_of(&reply.body["r"]), ["cats"]);

    // A `search` placeholder on a pipeline without full-text search.
    let plain = app.new_pipeline_id(json!({})).await;
    let reply = dry_run(
        &app,
        &agent,
        &plain,
        &json!({"variables": variables, "classification": "public"}),
    )
    .await;
    assert_error(
        &reply,
        StatusCode::NOT_IMPLEMENTED,
        "Full text search is not enabled for this pipeline",
    );
    assert_eq!(
        reply.body["error"]["details"],
        json!({"params": {"k": 3, "fetch_k": 3, "lambda_mult": 0.5, "threshold": null, "embedding": null}})
    );
}

// ---- Execution ---------------------------------------------------------------------------

#[tokio::test]
async fn execute_checks_headers_first() {
    let app = app().await;
    let fake = FakeLlm::start().await;
    let pid = pipeline_with_documents(&app).await;
    let llm = openai_llm(&app, &fake, json!({})).await;
    let agent = create_agent_id(&app, &agent_body("helper")).await;
    let unknown = Uuid::new_v4().to_string();
    let body =
        json!({"variables": {"question": "cats"}, "classification": "public", "tracing": true});

    for agent in [&agent, &unknown] {
        let request = || {
            app.req(Method::POST, &format!("/agents/{agent}/execute"))
                .as_master()
        };
        let reply = request().header("x-llm-id", &llm).json(&body).send().await;
        assert_plain(
            &reply,
            StatusCode::BAD_REQUEST,
            "Header of type `x-pipeline-id` was missing",
        );
        let reply = request().json(&body).send().await;
        assert_plain(
            &reply,
            StatusCode::BAD_REQUEST,
            "Header of type `x-pipeline-id` was missing",
        );
        let reply = request()
            .header("x-pipeline-id", &pid)
            .json(&body)
            .send()
            .await;
        assert_plain(
            &reply,
            StatusCode::BAD_REQUEST,
            "Header of type `x-llm-id` was missing",
        );
        let reply = request()
            .header("x-pipeline-id", "not-a-uuid")
            .header("x-llm-id", &llm)
            .json(&body)
            .send()
            .await;
        assert_error(&reply, StatusCode::BAD_REQUEST, "Invalid pipeline ID");
        assert_no_details(&reply);
        let reply = request()
            .header("x-pipeline-id", &pid)
            .header("x-llm-id", "not-a-uuid")
            .json(&body)
            .send()
            .await;
        assert_error(&reply, StatusCode::BAD_REQUEST, "Invalid LLM ID");
        assert_no_details(&reply);
    }
    assert!(fake.requests().is_empty());
    assert_eq!(trace_count(&app).await, 0);
}

#[tokio::test]
async fn execute_checks_in_order_and_calls_no_model() {
    let app = app().await;
    let fake = FakeLlm::start().await;
    let pid = pipeline_with_documents(&app).await;
    let llm = openai_llm(&app, &fake, json!({})).await;
    let keyless = openai_llm(&app, &fake, json!({"api_key": null})).await;
    let agent = create_agent_id(&app, &strict_body("strict")).await;
    let unknown = Uuid::new_v4().to_string();
    let master = app.master_key();
    let all = json!({"a": "1", "b": "2", "c": "3", "t": "cats"});
    let body = |variables: &Value| json!({"variables": variables, "classification": "public", "tracing": true});
    let send = |key: &(String, String), agent: &str, pid: &str, llm: &str, body: Value| {
        let request = execute_as(&app, key, agent, pid, llm).json(&body);
        async move { within(request.send()).await }
    };

    // The agent (404 with its id, whatever else is wrong).
    let reply = send(&master, &unknown, &unknown, &unknown, json!({})).await;
    assert_agent_not_found(&reply, &unknown);
    let key = |permissions: Value| {
        let app = &app;
        async move {
            key_of(
                &app.create_key_with(
                    json!({"name": "k", "permissions": permissions, "classifications": ["*"]}),
                )
                .await,
            )
        }
    };
    let read_only = key(json!({"agents": 4, "pipelines": 5, "llms": 5})).await;
    let reply = send(&read_only, &agent, &unknown, &unknown, json!({})).await;
    assert_error(&reply, StatusCode::FORBIDDEN, &run_denied(&agent));
    let execute_only = key(json!({"agents": 1, "pipelines": 5, "llms": 5})).await;
    let reply = send(&execute_only, &agent, &pid, &llm, body(&all)).await;
    assert_agent_not_found(&reply, &agent);

    // Then the pipeline.
    let reply = send(&master, &agent, &unknown, &unknown, json!({})).await;
    assert_error(&reply, StatusCode::NOT_FOUND, "Pipeline not found");
    assert_eq!(reply.body["error"]["details"], json!({"id": unknown}));
    let no_pipeline = key(json!({"agents": 5, "pipelines": 4, "llms": 5})).await;
    let reply = send(&no_pipeline, &agent, &pid, &llm, body(&all)).await;
    assert_error(&reply, StatusCode::NOT_FOUND, "Pipeline not found");

    // Then the LLM.
    let reply = send(&master, &agent, &pid, &unknown, json!({})).await;
    assert_llm_not_found(&reply, &unknown);
    let llm_reader = key(json!({"agents": 5, "pipelines": 5, "llms": 4})).await;
    let reply = send(&llm_reader, &agent, &pid, &llm, json!({})).await;
    assert_error(&reply, StatusCode::FORBIDDEN, &use_denied(&llm));
    let llm_runner = key(json!({"agents": 5, "pipelines": 5, "llms": 1})).await;
    let reply = send(&llm_runner, &agent, &pid, &llm, body(&all)).await;
    assert_llm_not_found(&reply, &llm);

    // Then the variables a template names (definition order; an excluded message counts),
    // then the targets, then the LLM's key.
    let reply = send(&master, &agent, &pid, &keyless, body(&json!({}))).await;
    assert_invalid(&reply, "Missing prompt variables: a, b, c");
    let reply = send(
        &master,
        &agent,
        &pid,
        &keyless,
        body(&json!({"c": "3", "t": "x", "unused": "u"})),
    )
    .await;
    assert_invalid(&reply, "Missing prompt variables: a, b");
    let reply = send(
        &master,
        &agent,
        &pid,
        &keyless,
        body(&json!({"b": "2", "t": "x"})),
    )
    .await;
    assert_invalid(&reply, "Missing prompt variables: a, c");
    let reply = send(
        &master,
        &agent,
        &pid,
        &keyless,
        body(&json!({"a": "1", "b": "2", "c": "3"})),
    )
    .await;
    assert_invalid(&reply, "Missing target for placeholder: context");
    for stream in [json!(true), json!(false), json!("sse")] {
        let reply = send(
            &master,
            &agent,
            &pid,
            &keyless,
            json!({"variables": all, "classification": "public", "tracing": true, "stream": stream}),
        )
        .await;
        assert_invalid(&reply, "API key is required for OpenAI provider");
    }
    // Any other `stream` is a body type error.
    let reply = send(
        &master,
        &agent,
        &pid,
        &llm,
        json!({"variables": all, "stream": "yes"}),
    )
    .await;
    assert_unprocessable(&reply);

    assert!(fake.requests().is_empty());
    assert_eq!(trace_count(&app).await, 0);

    // All set: the model answers.
    let response = execute(&app, &agent, &pid, &llm, &body(&all)).await;
    assert_eq!(response.status(), StatusCode::OK);
    within(response.text()).await.expect("body");
    assert_eq!(fake.requests().len(), 1);
    assert_eq!(trace_count(&app).await, 1);
}

#[tokio::test]
async fn execute_search_errors_call_no_model() {
    let app = app().await;
    let fake = FakeLlm::start().await;
    let pid = pipeline_with_documents(&app).await;
    let plain = app.new_pipeline_id(json!({})).await;
    let llm = openai_llm(&app, &fake, json!({})).await;
    let agent = create_agent_id(&app, &retrieving_body("retriever")).await;
    let variables = json!({"question": "purring cats", "topic": "ocean cargo"});

    let reply = execute_reply(
        &app,
        &agent,
        &plain,
        &llm,
        &json!({"variables": variables, "classification": "public", "tracing": true}),
    )
    .await;
    assert_error(
        &reply,
        StatusCode::NOT_IMPLEMENTED,
        "Full text search is not enabled for this pipeline",
    );
    let reply = execute_reply(
        &app,
        &agent,
        &pid,
        &llm,
        &json!({"variables": variables, "classification": "public", "tracing": true, "filters": {"words": {"team": "sea"}}}),
    )
    .await;
    assert_unprocessable(&reply);
    let reply = execute_reply(
        &app,
        &agent,
        &pid,
        &llm,
        &json!({"variables": variables, "classification": "public", "tracing": true, "filters": {"words": {"colour": {"$eq": "red"}}}}),
    )
    .await;
    assert_error(&reply, StatusCode::INTERNAL_SERVER_ERROR, "Internal error");
    assert_eq!(
        reply.body["error"]["details"],
        json!({"error": "Schema error"})
    );
    let embedding = Uuid::new_v4();
    let stray = create_agent_id(
        &app,
        &retrieval_body(
            "stray",
            "mmr",
            json!({"k": 1, "fetch_k": 1, "embedding": embedding}),
        ),
    )
    .await;
    let reply = execute_reply(
        &app,
        &stray,
        &pid,
        &llm,
        &json!({"variables": {"q": "cats"}, "classification": "public", "tracing": true}),
    )
    .await;
    assert_error(
        &reply,
        StatusCode::BAD_REQUEST,
        "Vector embedding not found",
    );
    assert_eq!(
        reply.body["error"]["details"],
        json!({"embedding_id": embedding})
    );

    assert!(fake.requests().is_empty());
    assert_eq!(trace_count(&app).await, 0);
}

#[tokio::test]
async fn execute_renders_values_literally_and_sends_included_messages() {
    let app = app().await;
    let fake = FakeLlm::start().await;
    let pid = pipeline_with_documents(&app).await;
    let llm = openai_llm(&app, &fake, json!({})).await;
    let agent = create_agent_id(
        &app,
        &json!({
            "name": "renderer",
            "prompt": [
                {"role": "system", "template": "Context:\n{context}\n{{literal}} {note}"},
                {"role": "assistant", "template": "Hidden {hidden}", "include": false},
                {"role": "assistant", "template": "Shown"},
                {"role": "user", "template": "{question}"}
            ],
            "placeholders": [
                {"name": "question", "type": "query"},
                {"name": "hidden", "type": "query"},
                {"name": "note", "type": "query"},
                {"name": "context", "type": "similarity", "target": "question", "params": {"k": 2, "fetch_k": 2}}
            ]
        }),
    )
    .await;
    let variables = json!({
        "question": "purring cats {context} {hidden}",
        "hidden": "secret",
        "note": "{question} {{x}}"
    });

    let dry = dry_run(
        &app,
        &agent,
        &pid,
        &json!({"variables": variables, "classification": "public"}),
    )
    .await;
    assert_eq!(dry.status, StatusCode::OK, "{}", dry.text);
    let texts: Vec<&str> = dry.body["context"]
        .as_array()
        .expect("fragments")
        .iter()
        .map(|fragment| fragment["page_content"].as_str().expect("text"))
        .collect();
    assert_eq!(texts.len(), 2, "{}", dry.text);

    let response = execute(
        &app,
        &agent,
        &pid,
        &llm,
        &json!({"variables": variables, "classification": "public", "tracing": true}),
    )
    .await;
    assert_eq!(response.status(), StatusCode::OK);
    let trace = tracing_id(&response);
    within(response.text()).await.expect("body");
    let sent = fake.last_request().json();
    let expected = json!([
        {"role": "system", "content": format!("Context:\n{}\n{{literal}} {{question}} {{{{x}}}}", texts.join("\n\n"))},
        {"role": "assistant", "content": "Shown"},
        {"role": "user", "content": "purring cats {context} {hidden}"}
    ]);
    assert_eq!(sent["messages"], expected);
    assert_eq!(sent["model"], "gpt-fake");
    let reply = app.get(&format!("/tracing/{trace}")).await;
    assert_eq!(reply.body["messages"], expected);
    assert_eq!(reply.body["retrievals"], dry.body);

    // Nothing retrieved: the placeholder is empty.
    let response = execute(&app, &agent, &pid, &llm, &json!({"variables": variables})).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert!(response.headers().get("x-service-tracing-id").is_none());
    within(response.text()).await.expect("body");
    assert_eq!(
        fake.last_request().json()["messages"][0]["content"],
        "Context:\n\n{literal} {question} {{x}}"
    );
    assert_eq!(trace_count(&app).await, 1);
}

#[tokio::test]
async fn execute_answers_in_the_three_stream_modes() {
    let app = app().await;
    let fake = FakeLlm::start().await;
    let pid = pipeline_with_documents(&app).await;
    let llm = openai_llm(&app, &fake, json!({})).await;
    let agent = create_agent_id(&app, &agent_body("helper")).await;
    let body = |stream: Value| json!({"variables": {"question": "purring cats"}, "classification": "public", "stream": stream});
    let lines = vec![
        delta("Cats "),
        delta("purr."),
        json!({"type": "done", "finish_reason": "stop", "usage": usage(7, 2)}),
    ];

    for stream in [json!(true), Value::Null] {
        fake.script(Answer::new(["Cats ", "purr."]).usage(7, 2));
        let response = execute(&app, &agent, &pid, &llm, &body(stream)).await;
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(content_type(&response), "application/x-ndjson");
        assert!(response.headers().get("x-service-tracing-id").is_none());
        let text = within(response.text()).await.expect("body");
        assert_eq!(ndjson(&text), lines);
    }
    let mut omitted = body(Value::Null);
    omitted.as_object_mut().expect("object").remove("stream");
    fake.script(Answer::new(["Cats ", "purr."]).usage(7, 2));
    let response = execute(&app, &agent, &pid, &llm, &omitted).await;
    assert_eq!(content_type(&response), "application/x-ndjson");
    assert_eq!(ndjson(&within(response.text()).await.expect("body")), lines);

    fake.script(
        Answer::new(["Cats ", "purr."])
            .usage(7, 2)
            .finish_reason("length"),
    );
    let response = execute(&app, &agent, &pid, &llm, &body(json!("sse"))).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(content_type(&response), "text/event-stream");
    let text = within(response.text()).await.expect("body");
    assert!(
        text.starts_with("event: delta\ndata: {\"content\":\"Cats \"}\n\nevent: delta\ndata: {\"content\":\"purr.\"}\n\nevent: done\ndata: "),
        "{text:?}"
    );
    assert_eq!(
        sse_events(&text),
        vec![
            ("delta".to_owned(), json!({"content": "Cats "})),
            ("delta".to_owned(), json!({"content": "purr."})),
            (
                "done".to_owned(),
                json!({"finish_reason": "length", "usage": usage(7, 2)})
            ),
        ]
    );

    fake.script(Answer::new(["Cats ", "purr."]).usage(7, 2));
    let response = execute(&app, &agent, &pid, &llm, &body(json!(false))).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(content_type(&response), "text/plain; charset=utf-8");
    assert_eq!(within(response.text()).await.expect("body"), "Cats purr.");
    assert_eq!(fake.requests().len(), 5);
    assert_eq!(trace_count(&app).await, 0);
}

#[tokio::test]
async fn execute_deltas_arrive_before_the_answer_is_complete() {
    let app = app().await;
    let fake = FakeLlm::start().await;
    let pid = pipeline_with_documents(&app).await;
    let llm = openai_llm(&app, &fake, json!({})).await;
    let agent = create_agent_id(&app, &agent_body("helper")).await;
    fake.script(
        Answer::new(["Cats ", "purr."])
            .usage(7, 2)
            .hold_after_first(),
    );

    let mut response = execute(
        &app,
        &agent,
        &pid,
        &llm,
        &json!({"variables": {"question": "purring cats"}, "classification": "public"}),
    )
    .await;
    assert_eq!(response.status(), StatusCode::OK);
    let mut buffer = Vec::new();
    // The fake holds after its first chunk: this line can only come from incremental delivery.
    read_until(&mut response, &mut buffer, |b| b.contains(&b'\n')).await;
    assert_eq!(
        ndjson(&String::from_utf8(buffer.clone()).expect("UTF-8")),
        vec![delta("Cats ")]
    );

    fake.release();
    let rest = within(response.bytes()).await.expect("rest of the body");
    buffer.extend_from_slice(&rest);
    assert_eq!(
        ndjson(&String::from_utf8(buffer).expect("UTF-8")),
        vec![
            delta("Cats "),
            delta("purr."),
            json!({"type": "done", "finish_reason": "stop", "usage": usage(7, 2)}),
        ]
    );
}

#[tokio::test]
async fn execute_refused_by_the_model_server_is_a_stream_error() {
    let app = app().await;
    let fake = FakeLlm::start().await;
    let pid = pipeline_with_documents(&app).await;
    let llm = openai_llm(&app, &fake, json!({})).await;
    let agent = create_agent_id(&app, &agent_body("helper")).await;

    for stream in [json!(false), json!(true), json!("sse")] {
        fake.script(FakeReply::rate_limited());
        let reply = execute_reply(
            &app,
            &agent,
            &pid,
            &llm,
            &json!({"variables": {"question": "cats"}, "classification": "public", "tracing": true, "stream": stream}),
        )
        .await;
        assert_error(&reply, StatusCode::INTERNAL_SERVER_ERROR, RATE_LIMITED);
        assert_eq!(reply.header("x-service-tracing-id"), None, "{stream}");
    }
    assert_eq!(fake.requests().len(), 3);
    assert_eq!(trace_count(&app).await, 0);

    // With `stream` false a break mid-answer is a stream error too, without a trace.
    fake.script(Answer::default().break_after(1));
    let reply = execute_reply(
        &app,
        &agent,
        &pid,
        &llm,
        &json!({"variables": {"question": "cats"}, "tracing": true, "stream": false}),
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
    assert_eq!(reply.header("x-service-tracing-id"), None);
    assert_eq!(trace_count(&app).await, 0);
}

#[tokio::test]
async fn execute_with_an_ollama_llm() {
    let app = app().await;
    let fake = FakeLlm::start().await;
    let pid = pipeline_with_documents(&app).await;
    let llm = ollama_llm(&app, &fake, json!({"parameters": {"temperature": 0.1}})).await;
    let agent = create_agent_id(&app, &agent_body("helper")).await;
    fake.script(Answer::new(["Hi", " there"]).usage(5, 2));

    let response = execute(
        &app,
        &agent,
        &pid,
        &llm,
        &json!({"variables": {"question": "purring cats"}, "classification": "public", "tracing": true}),
    )
    .await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(content_type(&response), "application/x-ndjson");
    let trace = tracing_id(&response);
    assert_eq!(
        ndjson(&within(response.text()).await.expect("body")),
        vec![
            delta("Hi"),
            delta(" there"),
            json!({"type": "done", "finish_reason": "stop", "usage": usage(5, 2)}),
        ]
    );
    let request = fake.last_request();
    assert_eq!(request.path, "/api/chat");
    assert_eq!(request.header("authorization"), None);
    let sent = request.json();
    assert_eq!(sent["model"], "llama-fake");
    assert_eq!(sent["options"], json!({"temperature": 0.1}));
    assert_eq!(
        sent["messages"],
        json!([
            {"role": "system", "content": "Use this context:\nCats purr and sleep in the sun all afternoon."},
            {"role": "user", "content": "purring cats"}
        ])
    );
    let reply = app.get(&format!("/tracing/{trace}")).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(reply.body["answer"], "Hi there");
    assert_eq!(reply.body["llm_id"], llm);

    let response = execute(
        &app,
        &agent,
        &pid,
        &llm,
        &json!({"variables": {"question": "purring cats"}, "stream": false}),
    )
    .await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        within(response.text()).await.expect("body"),
        "Hello, world!"
    );
}

// ---- Traces ------------------------------------------------------------------------------

#[tokio::test]
async fn trace_is_readable_by_its_key_only_for_60_minutes() {
    let app = app().await;
    let fake = FakeLlm::start().await;
    let pid = pipeline_with_documents(&app).await;
    let llm = openai_llm(&app, &fake, json!({})).await;
    let agent = create_agent_id(&app, &agent_body("helper")).await;
    let runner = app
        .create_key_with(json!({"name": "runner", "permissions": {"agents": 5, "pipelines": 5, "llms": 5}, "classifications": ["*"]}))
        .await;
    let runner = key_of(&runner);
    let body = json!({"variables": {"question": "purring cats"}, "classification": "public", "tracing": true});
    fake.script(Answer::new(["Cats ", "purr."]));

    let response = within(
        execute_as(&app, &runner, &agent, &pid, &llm)
            .json(&body)
            .send(),
    )
    .await;
    assert_eq!(response.status, StatusCode::OK);
    let id = response
        .header("x-service-tracing-id")
        .expect("x-service-tracing-id")
        .to_owned();
    assert!(is_uuid(&id), "{id}");
    let sent = fake.last_request().json();

    let path = format!("/tracing/{id}");
    let reply = app.as_key(&runner).get(&path).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(
        keys_of(&reply.body),
        [
            "agent_id",
            "answer",
            "created_at",
            "id",
            "llm_id",
            "messages",
            "pipeline_id",
            "retrievals"
        ]
    );
    assert_eq!(reply.body["id"], id);
    assert_eq!(reply.body["agent_id"], agent);
    assert_eq!(reply.body["pipeline_id"], pid);
    assert_eq!(reply.body["llm_id"], llm);
    assert_utc_timestamp(&reply.body["created_at"]);
    assert_eq!(reply.body["messages"], sent["messages"]);
    assert_eq!(reply.body["answer"], "Cats purr.");
    let dry = dry_run(&app, &agent, &pid, &body).await;
    assert_eq!(reply.body["retrievals"], dry.body);
    assert_eq!(documents_of(&reply.body["retrievals"]["context"]), ["cats"]);

    // Another key, even the master key or one with every permission: not found.
    let everything: serde_json::Map<String, Value> = OBJECT_TYPES
        .iter()
        .map(|object_type| ((*object_type).to_owned(), json!(7)))
        .collect();
    let admin = key_of(
        &app.create_key_with(
            json!({"name": "admin", "permissions": everything, "classifications": ["*"]}),
        )
        .await,
    );
    let not_found = format!("Trace with id {id} not found");
    for key in [&admin, &app.master_key()] {
        let reply = app.as_key(key).get(&path).await;
        assert_error(&reply, StatusCode::NOT_FOUND, &not_found);
        assert_no_details(&reply);
    }
    let unknown = Uuid::new_v4();
    let reply = app
        .as_key(&runner)
        .get(&format!("/tracing/{unknown}"))
        .await;
    assert_error(
        &reply,
        StatusCode::NOT_FOUND,
        &format!("Trace with id {unknown} not found"),
    );
    assert_no_details(&reply);

    // After 60 minutes it is gone.
    let updated = sqlx::query(
        "UPDATE agent_traces SET created_at = now() - interval '61 minutes' WHERE id = $1",
    )
    .bind(Uuid::parse_str(&id).expect("uuid"))
    .execute(&app.pool)
    .await
    .expect("age the trace");
    assert_eq!(updated.rows_affected(), 1);
    let reply = app.as_key(&runner).get(&path).await;
    assert_error(&reply, StatusCode::NOT_FOUND, &not_found);
    assert_no_details(&reply);
}

#[tokio::test]
async fn trace_of_a_client_that_left_keeps_the_partial_answer() {
    let app = app().await;
    let fake = FakeLlm::start().await;
    let pid = pipeline_with_documents(&app).await;
    let llm = openai_llm(&app, &fake, json!({})).await;
    let agent = create_agent_id(&app, &agent_body("helper")).await;
    fake.script(Answer::new(["Cats ", "purr."]).hold_after_first());

    let mut response = execute(
        &app,
        &agent,
        &pid,
        &llm,
        &json!({"variables": {"question": "purring cats"}, "classification": "public", "tracing": true}),
    )
    .await;
    assert_eq!(response.status(), StatusCode::OK);
    let trace = tracing_id(&response);
    let mut buffer = Vec::new();
    read_until(&mut response, &mut buffer, |b| b.contains(&b'\n')).await;
    assert_eq!(
        ndjson(&String::from_utf8(buffer).expect("UTF-8")),
        vec![delta("Cats ")]
    );
    // Readable while the answer is being generated, without an answer.
    let reply = app.get(&format!("/tracing/{trace}")).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(reply.body["answer"], Value::Null);
    assert_eq!(
        reply.body["messages"],
        fake.last_request().json()["messages"]
    );

    let pending =
        r#"axum_http_requests_pending{endpoint="/agents/{agent_id}/execute",method="POST"}"#;
    assert_eq!(app.api_metric(pending).await, 1.0, "the stream is open");

    drop(response);
    fake.assert_client_left("Trove").await;
    await_trace_answer(&app, &trace, "Cats ").await;
    assert_eq!(app.api_metric(pending).await, 0.0, "the stream was closed");
}

#[tokio::test]
async fn trace_of_an_answer_broken_mid_stream_is_partial() {
    let app = app().await;
    let fake = FakeLlm::start().await;
    let pid = pipeline_with_documents(&app).await;
    let llm = openai_llm(&app, &fake, json!({})).await;
    let agent = create_agent_id(&app, &agent_body("helper")).await;
    let body = |stream: Value| json!({"variables": {"question": "purring cats"}, "classification": "public", "tracing": true, "stream": stream});

    fake.script(Answer::new(["Cats ", "purr", "."]).break_after(1));
    let response = execute(&app, &agent, &pid, &llm, &body(json!(true))).await;
    assert_eq!(response.status(), StatusCode::OK);
    let trace = tracing_id(&response);
    let text = within(response.text()).await.expect("a cleanly ended body");
    assert_eq!(ndjson(&text), vec![delta("Cats ")]);
    await_trace_answer(&app, &trace, "Cats ").await;

    fake.script(Answer::new(["Cats ", "purr", "."]).break_after(2));
    let response = execute(&app, &agent, &pid, &llm, &body(json!("sse"))).await;
    assert_eq!(response.status(), StatusCode::OK);
    let trace = tracing_id(&response);
    let text = within(response.text()).await.expect("a cleanly ended body");
    assert_eq!(
        sse_events(&text),
        vec![
            ("delta".to_owned(), json!({"content": "Cats "})),
            ("delta".to_owned(), json!({"content": "purr"})),
        ]
    );
    await_trace_answer(&app, &trace, "Cats purr").await;
}

#[tokio::test]
async fn trace_of_a_plain_execution_has_the_whole_answer() {
    let app = app().await;
    let fake = FakeLlm::start().await;
    let pid = pipeline_with_documents(&app).await;
    let llm = openai_llm(&app, &fake, json!({})).await;
    let agent = create_agent_id(&app, &agent_body("helper")).await;
    fake.script(Answer::new(["Cats ", "purr."]));

    let response = execute(
        &app,
        &agent,
        &pid,
        &llm,
        &json!({"variables": {"question": "purring cats"}, "classification": "public", "tracing": true, "stream": false}),
    )
    .await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(content_type(&response), "text/plain; charset=utf-8");
    let trace = tracing_id(&response);
    assert_eq!(within(response.text()).await.expect("body"), "Cats purr.");
    let reply = app.get(&format!("/tracing/{trace}")).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(reply.body["answer"], "Cats purr.");
    assert_eq!(
        reply.body["messages"],
        fake.last_request().json()["messages"]
    );
    assert_eq!(trace_count(&app).await, 1);
}

#[tokio::test]
async fn an_execution_whose_model_server_stalls_times_out() {
    let app = spawn_app_with(AppOptions {
        no_worker: true,
        env: [("TROVE_LLM_READ_TIMEOUT".to_owned(), "0.3".to_owned())].into(),
        ..AppOptions::default()
    })
    .await;
    let fake = FakeLlm::start().await;
    let pid = pipeline_with_documents(&app).await;
    let llm = openai_llm(&app, &fake, json!({})).await;
    let agent = create_agent_id(&app, &agent_body("helper")).await;
    let body = |stream: Value| json!({"variables": {"question": "purring cats"}, "classification": "public", "stream": stream, "tracing": true});

    // No head within the read timeout: 500 before anything is streamed, no trace.
    for stream in [json!(true), json!(false)] {
        fake.script(FakeReply::Hang);
        let started = Instant::now();
        let reply = execute_reply(&app, &agent, &pid, &llm, &body(stream)).await;
        assert_error(
            &reply,
            StatusCode::INTERNAL_SERVER_ERROR,
            "Stream error: timed out waiting for the model server to answer after 300ms",
        );
        assert!(reply.header("x-service-tracing-id").is_none());
        assert!(started.elapsed() < Duration::from_secs(3));
    }
    assert_eq!(trace_count(&app).await, 0);

    // A stall after the first chunk ends the NDJSON body without `done`; the trace keeps
    // the partial answer.
    fake.script(Answer::new(["Cats ", "purr."]).hold_after_first());
    let response = execute(&app, &agent, &pid, &llm, &body(json!(true))).await;
    assert_eq!(response.status(), StatusCode::OK);
    let trace = tracing_id(&response);
    let text = within(response.text()).await.expect("body");
    assert_eq!(ndjson(&text), vec![delta("Cats ")]);
    await_trace_answer(&app, &trace, "Cats ").await;
    fake.release();
}
