//! Agents with memory (extension `conversations`): the `history` placeholder, executions that
//! read a context through `x-context-id` and append their exchange to it once the answer is
//! complete, through HTTP against real Postgres and the fake model server.

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use uuid::Uuid;

use crate::fake_llm::{Answer, FakeLlm, Reply as FakeReply};
use crate::helpers::{
    Reply, Req, TestApp, assert_error, assert_not_found_with_id, assert_plain,
    assert_utc_timestamp, spawn_app_without_worker, spawn_app_without_worker_with, str_of, within,
};
use crate::llms::{delta, ndjson, openai_llm, read_until, sse_events};

/// An app with the extension on.
async fn conversations_app() -> TestApp {
    spawn_app_without_worker_with(&[("TROVE_EXTENSIONS", "conversations")]).await
}

/// An agent whose system message embeds the history and whose second message is only the
/// history, before the user's question.
fn remembering_agent(name: &str, history_params: Value) -> Value {
    json!({
        "name": name,
        "prompt": [
            {"role": "system", "template": "Be brief. Before:\n{history}"},
            {"role": "user", "template": "  {history}\n"},
            {"role": "user", "template": "{question}"}
        ],
        "placeholders": [
            {"name": "question", "type": "query"},
            {"name": "history", "type": "history", "params": history_params}
        ]
    })
}

/// What an execution needs: the app, the fake model, a pipeline, an LLM and a context of the
/// master key.
struct Setup {
    app: TestApp,
    fake: FakeLlm,
    pid: String,
    llm: String,
    context: String,
}

impl Setup {
    async fn new() -> Self {
        let app = conversations_app().await;
        let fake = FakeLlm::start().await;
        let pid = app.new_pipeline_id(json!({})).await;
        let llm = openai_llm(&app, &fake, json!({})).await;
        let context = new_context(&app).await;
        Self {
            app,
            fake,
            pid,
            llm,
            context,
        }
    }

    /// Creates an agent with the master key; its id.
    async fn agent(&self, body: &Value) -> String {
        let reply = self.app.post("/agents", body).await;
        assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
        str_of(&reply.body, "id").to_owned()
    }

    /// An execution of `agent` with the master key in `context` (if any).
    fn execute(&self, agent: &str, context: Option<&str>) -> Req {
        let request = self
            .app
            .req(Method::POST, &format!("/agents/{agent}/execute"))
            .as_master()
            .header("x-pipeline-id", &self.pid)
            .header("x-llm-id", &self.llm);
        match context {
            Some(context) => request.header("x-context-id", context),
            None => request,
        }
    }

    /// Asks `question` in the context, answered `answer` (NDJSON); the response body.
    async fn ask(&self, agent: &str, question: &str, answer: &str) -> String {
        self.fake.script(Answer::new([answer]));
        let response = within(
            self.execute(agent, Some(&self.context))
                .json(&json!({"variables": {"question": question}}))
                .stream(),
        )
        .await;
        assert_eq!(response.status(), StatusCode::OK);
        within(response.text()).await.expect("body")
    }

    /// The context's messages as `(role, content)`, oldest first.
    async fn messages(&self) -> Vec<(String, String)> {
        pairs(&self.messages_body().await)
    }

    async fn messages_body(&self) -> Value {
        let reply = self
            .app
            .get(&format!("/contexts/{}/messages", self.context))
            .await;
        assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
        reply.body
    }

    /// The messages the model received in its last request.
    fn last_sent(&self) -> Value {
        self.fake.last_request().json()["messages"].clone()
    }
}

/// Creates a context with the master key; its id.
async fn new_context(app: &TestApp) -> String {
    let reply = app.post("/contexts", &json!({"name": "chat"})).await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
    str_of(&reply.body, "id").to_owned()
}

/// The `(role, content)` of each message of a list.
fn pairs(body: &Value) -> Vec<(String, String)> {
    body["data"]
        .as_array()
        .unwrap_or_else(|| panic!("no data: {body}"))
        .iter()
        .map(|m| {
            (
                str_of(m, "role").to_owned(),
                str_of(m, "content").to_owned(),
            )
        })
        .collect()
}

fn assert_unprocessable(reply: &Reply) {
    assert_plain(
        reply,
        StatusCode::UNPROCESSABLE_ENTITY,
        "Failed to deserialize the JSON body into the target type:",
    );
}

fn said(role: &str, content: &str) -> (String, String) {
    (role.to_owned(), content.to_owned())
}

fn chat(role: &str, content: &str) -> Value {
    json!({"role": role, "content": content})
}

#[tokio::test]
async fn with_the_switch_off_history_is_not_implemented_and_the_header_ignored() {
    let app = spawn_app_without_worker().await;
    let reply = app
        .post("/agents", &remembering_agent("memory", Value::Null))
        .await;
    assert_error(&reply, StatusCode::NOT_IMPLEMENTED, "Not implemented");
    let minimal = crate::agents::minimal_body("plain");
    let created = app.post("/agents", &minimal).await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.text);
    let agent = str_of(&created.body, "id").to_owned();
    let patch = json!({"placeholders": remembering_agent("x", Value::Null)["placeholders"]});
    let reply = app.patch(&format!("/agents/{agent}"), &patch).await;
    assert_error(&reply, StatusCode::NOT_IMPLEMENTED, "Not implemented");

    let fake = FakeLlm::start().await;
    let pid = app.new_pipeline_id(json!({})).await;
    let llm = openai_llm(&app, &fake, json!({})).await;
    for context in ["not-a-uuid", &Uuid::new_v4().to_string()] {
        let reply = within(
            app.req(Method::POST, &format!("/agents/{agent}/execute"))
                .as_master()
                .header("x-pipeline-id", &pid)
                .header("x-llm-id", &llm)
                .header("x-context-id", context)
                .json(&json!({"variables": {"question": "Hi"}, "stream": false}))
                .send(),
        )
        .await;
        assert_eq!(reply.status, StatusCode::OK, "{context}: {}", reply.text);
        assert_eq!(reply.text, "Hello, world!");
    }
    assert_eq!(fake.requests().len(), 2);
    let document = app.get("/openapi.json").await;
    let parameters = &document.body["paths"]["/agents/{agent_id}/execute"]["post"]["parameters"];
    assert!(
        !parameters.to_string().contains("x-context-id"),
        "{parameters}"
    );
}

#[tokio::test]
async fn history_placeholders_are_checked_and_shown_with_their_k() {
    let app = conversations_app().await;
    let created = app
        .post("/agents", &remembering_agent("memory", Value::Null))
        .await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.text);
    let history =
        json!({"name": "history", "type": "history", "target": null, "params": {"k": 10}});
    assert_eq!(created.body["placeholders"][1], history);
    let agent = str_of(&created.body, "id").to_owned();
    for path in [
        format!("/agents/{agent}"),
        format!("/agents/{agent}/prompt"),
    ] {
        let reply = app.get(&path).await;
        assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
        assert_eq!(reply.body["placeholders"][1], history, "{path}");
    }
    let listed = app.get("/agents").await;
    assert_eq!(
        listed.body["data"][0]["placeholders"][1], history,
        "{}",
        listed.text
    );
    let prompt = app.get(&format!("/agents/{agent}/prompt")).await;
    assert_eq!(prompt.body["variables"], json!(["question"]));

    for (name, params, k) in [
        ("empty", json!({}), 10),
        ("one", json!({"k": 1}), 1),
        ("most", json!({"k": 1000, "fetch_k": 3}), 1000),
    ] {
        let reply = app.post("/agents", &remembering_agent(name, params)).await;
        assert_eq!(reply.status, StatusCode::CREATED, "{name}: {}", reply.text);
        assert_eq!(reply.body["placeholders"][1]["params"], json!({"k": k}));
    }
    for k in [json!(0), json!(1001), json!(65535)] {
        let reply = app
            .post("/agents", &remembering_agent("bad", json!({"k": k})))
            .await;
        assert_error(
            &reply,
            StatusCode::BAD_REQUEST,
            "Invalid placeholder of type history",
        );
    }
    for k in [json!("ten"), json!(2.5), json!(-1)] {
        let reply = app
            .post("/agents", &remembering_agent("bad", json!({"k": k})))
            .await;
        assert_unprocessable(&reply);
    }
    let mut two = remembering_agent("two", Value::Null);
    two["placeholders"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "older", "type": "history"}));
    let reply = app.post("/agents", &two).await;
    assert_error(
        &reply,
        StatusCode::BAD_REQUEST,
        "Invalid placeholder of type history",
    );

    // An invalid change leaves the agent as it was; a valid one changes k.
    let reply = app
        .patch(
            &format!("/agents/{agent}"),
            &json!({"placeholders": two["placeholders"]}),
        )
        .await;
    assert_error(
        &reply,
        StatusCode::BAD_REQUEST,
        "Invalid placeholder of type history",
    );
    let changed = json!({"placeholders": remembering_agent("x", json!({"k": 4}))["placeholders"]});
    let reply = app.patch(&format!("/agents/{agent}"), &changed).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(reply.body["placeholders"][1]["params"], json!({"k": 4}));

    let document = app.get("/openapi.json").await;
    let parameters = &document.body["paths"]["/agents/{agent_id}/execute"]["post"]["parameters"];
    assert!(
        parameters.to_string().contains("\"x-context-id\""),
        "{parameters}"
    );
    let types = &document.body["components"]["schemas"]["PlaceholderTypeName"];
    assert!(
        types["description"]
            .as_str()
            .unwrap()
            .contains("extension `conversations`"),
        "{types}"
    );
}

#[tokio::test]
async fn a_conversation_of_three_executions_remembers_its_exchanges() {
    let setup = Setup::new().await;
    let agent = setup.agent(&remembering_agent("memory", Value::Null)).await;
    let before = setup.app.get(&format!("/contexts/{}", setup.context)).await;

    setup.ask(&agent, "Q1", "A1").await;
    assert_eq!(
        setup.last_sent(),
        json!([chat("system", "Be brief. Before:\n"), chat("user", "Q1")])
    );
    setup.ask(&agent, "Q2", "A2").await;
    setup.fake.script(Answer::new(["A", "3"]));
    let response = within(
        setup
            .execute(&agent, Some(&setup.context))
            .json(&json!({"variables": {"question": "Q3"}, "tracing": true, "stream": false}))
            .stream(),
    )
    .await;
    assert_eq!(response.status(), StatusCode::OK);
    let trace = response
        .headers()
        .get("x-service-tracing-id")
        .expect("trace id")
        .to_str()
        .unwrap()
        .to_owned();
    assert_eq!(within(response.text()).await.unwrap(), "A3");

    let third = json!([
        chat(
            "system",
            "Be brief. Before:\nuser: Q1\nassistant: A1\nuser: Q2\nassistant: A2"
        ),
        chat("user", "Q1"),
        chat("assistant", "A1"),
        chat("user", "Q2"),
        chat("assistant", "A2"),
        chat("user", "Q3"),
    ]);
    assert_eq!(setup.last_sent(), third);
    let traced = setup.app.get(&format!("/tracing/{trace}")).await;
    assert_eq!(traced.body["messages"], third, "{}", traced.text);

    let body = setup.messages_body().await;
    assert_eq!(
        pairs(&body),
        [
            said("user", "Q1"),
            said("assistant", "A1"),
            said("user", "Q2"),
            said("assistant", "A2"),
            said("user", "Q3"),
            said("assistant", "A3"),
        ]
    );
    let executions: Vec<&str> = body["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| str_of(m, "execution_id"))
        .collect();
    assert!(
        executions.chunks(2).all(|pair| pair[0] == pair[1]),
        "{executions:?}"
    );
    assert!(
        executions[0] != executions[2] && executions[2] != executions[4],
        "{executions:?}"
    );
    // A traced execution's id is its trace's.
    assert_eq!(executions[4], trace);
    let after = setup.app.get(&format!("/contexts/{}", setup.context)).await;
    assert!(
        assert_utc_timestamp(&after.body["updated_at"])
            > assert_utc_timestamp(&before.body["updated_at"]),
        "{} then {}",
        before.text,
        after.text
    );

    // k keeps the most recent messages; several variables make the user's turn one line each.
    let mut recent = remembering_agent("recent", json!({"k": 3}));
    recent["prompt"] = json!([
        {"role": "system", "template": "S"},
        {"role": "user", "template": "{history}"},
        {"role": "user", "template": "{topic}: {question}"}
    ]);
    recent["placeholders"]
        .as_array_mut()
        .unwrap()
        .insert(0, json!({"name": "topic", "type": "query"}));
    let recent = setup.agent(&recent).await;
    let reply = within(
        setup
            .execute(&recent, Some(&setup.context))
            .json(&json!({"variables": {"question": "Q4", "topic": "T"}, "stream": false}))
            .send(),
    )
    .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(
        setup.last_sent(),
        json!([
            chat("system", "S"),
            chat("assistant", "A2"),
            chat("user", "Q3"),
            chat("assistant", "A3"),
            chat("user", "T: Q4"),
        ])
    );
    let messages = setup.messages().await;
    assert_eq!(
        messages[6..],
        [
            said("user", "topic: T\nquestion: Q4"),
            said("assistant", "Hello, world!")
        ]
    );

    // Without the header the history is empty and nothing is stored.
    setup.fake.script(Answer::new(["A5"]));
    let reply = within(
        setup
            .execute(&agent, None)
            .json(&json!({"variables": {"question": "Q5"}, "stream": false}))
            .send(),
    )
    .await;
    assert_eq!(reply.text, "A5");
    assert_eq!(
        setup.last_sent(),
        json!([chat("system", "Be brief. Before:\n"), chat("user", "Q5")])
    );
    assert_eq!(setup.messages().await.len(), 8);
}

#[tokio::test]
async fn refused_executions_store_nothing_and_send_nothing() {
    let setup = Setup::new().await;
    let agent = setup.agent(&remembering_agent("memory", Value::Null)).await;
    let other_key = setup.app.create_key(json!({}), json!([])).await;
    let reply = setup
        .app
        .as_key(&other_key)
        .post("/contexts", &json!({}))
        .await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
    let others = str_of(&reply.body, "id").to_owned();
    let unknown = Uuid::new_v4().to_string();
    let body = json!({"variables": {"question": "Q"}});

    let send = |context: &str, body: &Value| {
        within(setup.execute(&agent, Some(context)).json(body).send())
    };
    for bad in ["not-a-uuid", "", "1234"] {
        let reply: Reply = send(bad, &body).await;
        assert_error(&reply, StatusCode::BAD_REQUEST, "Invalid context ID");
    }
    for missing in [&others, &unknown] {
        let reply = send(missing, &body).await;
        assert_not_found_with_id(&reply, "Context not found", missing);
        // Checked before the body is read.
        let reply = send(missing, &json!({"variables": 5})).await;
        assert_not_found_with_id(&reply, "Context not found", missing);
    }
    // The other key's context is unchanged and its own key sees it.
    let reply = setup
        .app
        .as_key(&other_key)
        .get(&format!("/contexts/{others}/messages"))
        .await;
    assert_eq!(reply.body["data"], json!([]), "{}", reply.text);
    // The header's checks come after the interface's own header checks.
    let reply = within(
        setup
            .app
            .req(Method::POST, &format!("/agents/{agent}/execute"))
            .as_master()
            .header("x-pipeline-id", "nope")
            .header("x-llm-id", &setup.llm)
            .header("x-context-id", "not-a-uuid")
            .json(&body)
            .send(),
    )
    .await;
    assert_error(&reply, StatusCode::BAD_REQUEST, "Invalid pipeline ID");

    // A 4xx after the context's check (a missing variable) appends nothing.
    let reply = send(&setup.context, &json!({"variables": {}})).await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{}", reply.text);
    assert!(
        reply.text.contains("Missing prompt variables: question"),
        "{}",
        reply.text
    );
    assert!(setup.fake.requests().is_empty());
    assert!(setup.messages().await.is_empty());
}

#[tokio::test]
async fn streamed_answers_append_once_complete_and_failures_append_nothing() {
    let setup = Setup::new().await;
    let agent = setup.agent(&remembering_agent("memory", Value::Null)).await;
    let ask = |question: &str, stream: Value| {
        within(
            setup
                .execute(&agent, Some(&setup.context))
                .json(&json!({"variables": {"question": question}, "stream": stream}))
                .stream(),
        )
    };

    setup.fake.script(Answer::new(["N", "D"]));
    let response = ask("ndjson", json!(true)).await;
    let text = within(response.text()).await.unwrap();
    assert_eq!(ndjson(&text)[..2], [delta("N"), delta("D")]);
    setup.fake.script(Answer::new(["S", "SE"]));
    let response = ask("sse", json!("sse")).await;
    let text = within(response.text()).await.unwrap();
    assert_eq!(sse_events(&text).len(), 3, "{text}");
    let complete = [
        said("user", "ndjson"),
        said("assistant", "ND"),
        said("user", "sse"),
        said("assistant", "SSE"),
    ];
    assert_eq!(setup.messages().await, complete);

    // The model server fails before answering, or breaks off mid-stream: nothing is appended.
    setup
        .fake
        .script(FakeReply::json(500, json!({"error": {"message": "down"}})));
    let response = ask("failed", json!(true)).await;
    assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
    setup
        .fake
        .script(FakeReply::json(500, json!({"error": {"message": "down"}})));
    let response = ask("failed whole", json!(false)).await;
    assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
    for stream in [json!(true), json!("sse"), json!(false)] {
        setup
            .fake
            .script(Answer::new(["Half", "way"]).break_after(1));
        let response = ask("broken", stream.clone()).await;
        let _ = within(response.text()).await;
    }
    // The client leaves mid-stream.
    setup
        .fake
        .script(Answer::new(["Never", "ends"]).hold_after_first());
    let mut response = ask("left", json!(true)).await;
    let mut buffer = Vec::new();
    read_until(&mut response, &mut buffer, |b| b.ends_with(b"\n")).await;
    drop(response);
    setup.fake.assert_client_left("the service").await;
    setup.fake.release();
    assert_eq!(setup.fake.requests().len(), 8);
    assert_eq!(setup.messages().await, complete);
}

#[tokio::test]
async fn a_context_deleted_during_an_execution_gets_nothing_and_the_answer_ends_well() {
    let setup = Setup::new().await;
    let agent = setup.agent(&remembering_agent("memory", Value::Null)).await;
    setup
        .fake
        .script(Answer::new(["Still ", "here"]).hold_after_first());
    let mut response = within(
        setup
            .execute(&agent, Some(&setup.context))
            .json(&json!({"variables": {"question": "Q"}}))
            .stream(),
    )
    .await;
    assert_eq!(response.status(), StatusCode::OK);
    let mut buffer = Vec::new();
    read_until(&mut response, &mut buffer, |b| b.ends_with(b"\n")).await;
    let reply = setup
        .app
        .delete(&format!("/contexts/{}", setup.context))
        .await;
    assert_eq!(reply.status, StatusCode::NO_CONTENT, "{}", reply.text);
    setup.fake.release();
    let rest = within(response.text()).await.unwrap();
    buffer.extend_from_slice(rest.as_bytes());
    let lines = ndjson(std::str::from_utf8(&buffer).unwrap());
    assert_eq!(lines[..2], [delta("Still "), delta("here")]);
    assert_eq!(lines[2]["type"], "done");
    // The append was tried before the last line was sent.
    let stored: i64 = sqlx::query_scalar("SELECT count(*) FROM context_messages")
        .fetch_one(&setup.app.pool)
        .await
        .unwrap();
    assert_eq!(stored, 0);
    let reply = setup.app.get(&format!("/contexts/{}", setup.context)).await;
    assert_not_found_with_id(&reply, "Context not found", &setup.context);
}
