//! The MCP server at `/mcp`: transport rules, sessions, protocol revisions, the three tools
//! and their errors, through real HTTP (JSON-RPC bodies; SSE `data:` lines parsed when the
//! server answers with an event stream).

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use uuid::Uuid;

use crate::helpers::{
    Reply, Req, SEARCH_RESULT_FIELDS, TestApp, assert_error, assert_text, keys_of, model_of,
    spawn_app, spawn_app_without_worker, spawn_app_without_worker_with, str_of,
};

const ACCEPT_BOTH: &str = "application/json, text/event-stream";
const REVISIONS: [&str; 5] = [
    "2024-11-05",
    "2025-03-26",
    "2025-06-18",
    "2025-11-25",
    "2026-07-28",
];

/// The JSON-RPC messages of a reply: the JSON body, or every non-empty SSE `data:` line.
fn messages(reply: &Reply) -> Vec<Value> {
    let content_type = reply.header("content-type").unwrap_or_default();
    if content_type.starts_with("text/event-stream") {
        reply
            .text
            .lines()
            .filter_map(|line| line.strip_prefix("data:"))
            .map(str::trim_start)
            .filter(|data| !data.is_empty())
            .map(|data| serde_json::from_str(data).expect("SSE data is JSON"))
            .collect()
    } else if reply.body.is_null() {
        Vec::new()
    } else {
        vec![reply.body.clone()]
    }
}

/// The response message (the one with an `id`) of a reply.
fn response(reply: &Reply) -> Value {
    messages(reply)
        .into_iter()
        .rev()
        .find(|m| m.get("id").is_some())
        .unwrap_or_else(|| {
            panic!(
                "no JSON-RPC response in {} {:?}: {}",
                reply.status,
                reply.header("content-type"),
                reply.text
            )
        })
}

/// A JSON-RPC request body.
fn request(id: i64, method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
}

fn initialize_body(revision: &str) -> Value {
    request(
        1,
        "initialize",
        json!({
            "protocolVersion": revision,
            "capabilities": {},
            "clientInfo": {"name": "trove-tests", "version": "1.0"},
        }),
    )
}

/// A client of `/mcp` for one key, with an optional session.
struct Client<'a> {
    app: &'a TestApp,
    key: (String, String),
    session: Option<String>,
    next_id: i64,
}

impl<'a> Client<'a> {
    fn new(app: &'a TestApp, key: (String, String)) -> Self {
        Self {
            app,
            key,
            session: None,
            next_id: 10,
        }
    }

    /// A POST to `/mcp` with the key, both accepted types and the session (if any).
    fn post(&self) -> Req {
        let mut builder = self
            .app
            .req(Method::POST, "/mcp")
            .as_key(&self.key)
            .header("accept", ACCEPT_BOTH)
            .header("content-type", "application/json");
        if let Some(session) = &self.session {
            builder = builder.header("mcp-session-id", session);
        }
        builder
    }

    async fn send(&self, body: &Value) -> Reply {
        self.post().body(body.to_string()).send().await
    }

    /// `initialize` on a revision, then `notifications/initialized`; keeps the session.
    async fn initialize(&mut self, revision: &str) -> Value {
        let reply = self.send(&initialize_body(revision)).await;
        assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
        self.session = Some(
            reply
                .header("mcp-session-id")
                .expect("a session id")
                .to_owned(),
        );
        let result = response(&reply)["result"].clone();
        let note = self
            .send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await;
        assert_eq!(note.status, StatusCode::ACCEPTED, "{}", note.text);
        result
    }

    /// A request in the session; returns the response message.
    async fn call(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let reply = self.send(&request(self.next_id, method, params)).await;
        assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
        let message = response(&reply);
        assert_eq!(message["id"], self.next_id, "{message}");
        message
    }

    /// `tools/call`; returns the response message.
    async fn tool(&mut self, name: &str, arguments: Value) -> Value {
        self.call("tools/call", json!({"name": name, "arguments": arguments}))
            .await
    }

    /// A successful tool call: checks the result's shape and returns `structuredContent`.
    async fn tool_ok(&mut self, name: &str, arguments: Value) -> Value {
        let message = self.tool(name, arguments).await;
        let result = &message["result"];
        assert_eq!(result["isError"], false, "{message}");
        let content = result["content"].as_array().expect("content");
        assert_eq!(content.len(), 1, "{message}");
        assert_eq!(content[0]["type"], "text");
        let text = str_of(&content[0], "text");
        let structured = result["structuredContent"].clone();
        assert_eq!(
            text,
            serde_json::to_string(&structured).unwrap(),
            "the text block is the output as JSON with sorted keys"
        );
        structured
    }

    /// A tool call answered with a JSON-RPC error: returns the error object.
    async fn tool_error(&mut self, name: &str, arguments: Value) -> Value {
        let message = self.tool(name, arguments).await;
        assert!(message.get("result").is_none(), "{message}");
        message["error"].clone()
    }

    /// A tool call answered with `isError` true: returns the text of its one block.
    async fn tool_argument_error(&mut self, name: &str, arguments: Value) -> String {
        let message = self.tool(name, arguments).await;
        let result = &message["result"];
        assert_eq!(result["isError"], true, "{message}");
        let content = result["content"].as_array().expect("content");
        assert_eq!(content.len(), 1, "{message}");
        str_of(&content[0], "text").to_owned()
    }
}

/// A master-key client with a 2025-11-25 session.
async fn session(app: &TestApp) -> Client<'_> {
    let mut client = Client::new(app, app.master_key());
    client.initialize("2025-11-25").await;
    client
}

fn assert_sorted_keys(value: &Value) {
    let keys: Vec<&String> = value.as_object().expect("object").keys().collect();
    let mut sorted = keys.clone();
    sorted.sort();
    assert_eq!(keys, sorted, "keys in alphabetical order: {value}");
}

// ---------------------------------------------------------------------------------------------
// Lifecycle and protocol revisions
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn initialize_answers_each_supported_revision_and_falls_back_to_2025_11_25() {
    let app = spawn_app().await;
    for (requested, expected) in REVISIONS
        .iter()
        .map(|r| (*r, *r))
        .chain([("2099-01-01", "2025-11-25"), ("2024-01-01", "2025-11-25")])
    {
        let client = Client::new(&app, app.master_key());
        let reply = client.send(&initialize_body(requested)).await;
        assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
        // 2026-07-28 has no sessions: none of its responses carries a session id.
        assert_eq!(
            reply.header("mcp-session-id").is_some(),
            expected != "2026-07-28",
            "{requested}"
        );
        assert!(reply.header("x-request-id").is_some());
        let message = response(&reply);
        assert_eq!(message["id"], 1);
        let result = &message["result"];
        assert_eq!(result["protocolVersion"], expected, "requested {requested}");
        assert_eq!(result["capabilities"], json!({"tools": {}}), "{result}");
        assert_eq!(result["serverInfo"]["name"], "rmcp");
        assert_eq!(result["serverInfo"]["version"], "3.11.0");
        let instructions = str_of(result, "instructions");
        for tool in [
            "get_pipelines",
            "get_pipeline_classifications",
            "search_knowledge",
        ] {
            assert!(instructions.contains(tool), "{instructions}");
        }
        assert!(result.get("resultType").is_none(), "{result}");
    }
}

#[tokio::test]
async fn a_session_serves_requests_until_it_is_deleted() {
    let app = spawn_app().await;
    let mut client = session(&app).await;
    let session_id = client.session.clone().unwrap();

    let ping = client.call("ping", json!({})).await;
    assert_eq!(ping["result"], json!({}));
    let listed = client.call("tools/list", json!({})).await;
    assert_eq!(listed["result"]["tools"].as_array().unwrap().len(), 3);

    // The server-to-client stream of the session.
    let stream = app
        .req(Method::GET, "/mcp")
        .as_key(&client.key)
        .header("accept", "text/event-stream")
        .header("mcp-session-id", &session_id)
        .stream()
        .await;
    assert_eq!(stream.status(), StatusCode::OK);
    assert!(
        stream.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream")
    );
    drop(stream);

    let ended = app
        .req(Method::DELETE, "/mcp")
        .as_key(&client.key)
        .header("mcp-session-id", &session_id)
        .send()
        .await;
    assert!(ended.status.is_success(), "{}", ended.status);

    // An ended session is unknown.
    let reply = client.send(&request(99, "ping", json!({}))).await;
    assert_text(
        &reply,
        StatusCode::NOT_FOUND,
        "Not Found: Session not found",
    );
    let reply = app
        .req(Method::DELETE, "/mcp")
        .as_key(&client.key)
        .header("mcp-session-id", &session_id)
        .send()
        .await;
    assert_text(
        &reply,
        StatusCode::NOT_FOUND,
        "Not Found: Session not found",
    );
    let reply = app
        .req(Method::GET, "/mcp")
        .as_key(&client.key)
        .header("accept", "text/event-stream")
        .header("mcp-session-id", &session_id)
        .send()
        .await;
    assert_text(
        &reply,
        StatusCode::NOT_FOUND,
        "Not Found: Session not found",
    );
}

#[tokio::test]
async fn other_methods_answer_empty_lists_and_logging_is_not_offered() {
    let app = spawn_app().await;
    let mut client = session(&app).await;
    let resources = client.call("resources/list", json!({})).await;
    assert_eq!(resources["result"]["resources"], json!([]), "{resources}");
    let prompts = client.call("prompts/list", json!({})).await;
    assert_eq!(prompts["result"]["prompts"], json!([]), "{prompts}");
    let completion = client
        .call(
            "completion/complete",
            json!({"ref": {"type": "ref/prompt", "name": "x"}, "argument": {"name": "a", "value": "b"}}),
        )
        .await;
    assert_eq!(
        completion["result"]["completion"]["values"],
        json!([]),
        "{completion}"
    );
    let logging = client
        .call("logging/setLevel", json!({"level": "info"}))
        .await;
    assert_eq!(logging["error"]["code"], -32601, "{logging}");
    let unknown = client.tool_error("no_such_tool", json!({})).await;
    assert_eq!(unknown["code"], -32602);
    assert_eq!(unknown["message"], "tool not found");
}

#[tokio::test]
async fn revision_2026_07_28_is_stateless_with_request_metadata() {
    let app = spawn_app().await;
    let id = app.new_pipeline_id(json!({})).await;
    let meta = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
    });
    let client = Client::new(&app, app.master_key());
    let send = |method: &'static str, name: Option<&'static str>, params: Value| {
        let mut builder = client
            .post()
            .header("mcp-protocol-version", "2026-07-28")
            .header("mcp-method", method);
        if let Some(name) = name {
            builder = builder.header("mcp-name", name);
        }
        builder.body(request(5, method, params).to_string()).send()
    };

    let reply = send("tools/list", None, json!({"_meta": meta})).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert!(reply.header("mcp-session-id").is_none());
    let message = response(&reply);
    let result = message["result"].as_object().unwrap();
    assert_eq!(result["resultType"], "complete");
    assert_eq!(result["tools"].as_array().unwrap().len(), 3);
    assert!(
        reply.text.contains("{\"resultType\":\"complete\""),
        "resultType before the other fields: {}",
        reply.text
    );

    let reply = send(
        "tools/call",
        Some("get_pipelines"),
        json!({"name": "get_pipelines", "arguments": {}, "_meta": meta}),
    )
    .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    let result = &response(&reply)["result"];
    assert_eq!(result["resultType"], "complete");
    assert_eq!(result["isError"], false);
    assert_eq!(result["structuredContent"]["results"][0]["pipeline_id"], id);

    // `ping` answers an empty result; logging is not offered.
    let reply = send("ping", None, json!({"_meta": meta})).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(
        response(&reply)["result"],
        json!({"resultType": "complete"})
    );
    let reply = send(
        "logging/setLevel",
        None,
        json!({"level": "info", "_meta": meta}),
    )
    .await;
    assert_eq!(response(&reply)["error"]["code"], -32601, "{}", reply.text);
    let reply = send("resources/list", None, json!({"_meta": meta})).await;
    assert_eq!(response(&reply)["result"]["resources"], json!([]));

    // Pipeline not found keeps -32002 on this revision too.
    let missing = Uuid::new_v4().to_string();
    let reply = send(
        "tools/call",
        Some("get_pipeline_classifications"),
        json!({"name": "get_pipeline_classifications", "arguments": {"pipeline_id": missing}, "_meta": meta}),
    )
    .await;
    let error = &response(&reply)["error"];
    assert_eq!(error["code"], -32002, "{}", reply.text);
    assert_eq!(error["message"], "Pipeline not found");
    assert_eq!(error["data"], json!({"id": missing}));

    // `_meta` missing or incomplete: 400 with JSON-RPC -32602.
    for params in [
        json!({}),
        json!({"_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}}),
    ] {
        let reply = send("tools/list", None, params).await;
        assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{}", reply.text);
        assert!(
            reply
                .header("content-type")
                .unwrap_or_default()
                .starts_with("application/json")
        );
        let error = &reply.body["error"];
        assert_eq!(error["code"], -32602, "{}", reply.text);
        let text = str_of(error, "message");
        assert!(
            text.starts_with("request _meta is missing or has malformed required fields: "),
            "{text}"
        );
        assert!(
            text.contains("io.modelcontextprotocol/clientCapabilities"),
            "{text}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// tools/list
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn tools_list_describes_three_read_only_tools() {
    let app = spawn_app().await;
    let mut client = session(&app).await;
    let message = client.call("tools/list", json!({})).await;
    let result = &message["result"];
    assert!(result.get("nextCursor").is_none(), "one page");
    let tools = result["tools"].as_array().unwrap();
    let names: Vec<&str> = tools.iter().map(|t| str_of(t, "name")).collect();
    assert_eq!(
        names,
        [
            "get_pipeline_classifications",
            "get_pipelines",
            "search_knowledge"
        ]
    );
    for tool in tools {
        let name = str_of(tool, "name");
        assert_eq!(
            keys_of(tool),
            [
                "annotations",
                "description",
                "inputSchema",
                "name",
                "outputSchema"
            ],
            "{tool}"
        );
        assert!(!str_of(tool, "description").is_empty());
        for schema in [&tool["inputSchema"], &tool["outputSchema"]] {
            assert_eq!(
                schema["$schema"], "https://json-schema.org/draft/2020-12/schema",
                "{name}"
            );
            assert_eq!(schema["type"], "object");
        }
        let annotations = &tool["annotations"];
        assert!(annotations.get("title").is_none());
        assert_eq!(annotations["readOnlyHint"], true);
        assert_eq!(annotations["destructiveHint"], false);
        assert_eq!(annotations["openWorldHint"], false);
        assert_eq!(
            annotations["idempotentHint"],
            name != "get_pipelines",
            "{name}"
        );
    }
    assert_eq!(
        tools[2]["inputSchema"]["required"],
        json!(["pipeline_id", "query", "classifications", "type"])
    );
    assert_eq!(
        tools[2]["inputSchema"]["properties"]["type"]["enum"],
        json!(["similarity", "mmr", "search", "query", "hybrid", "history"])
    );
    assert_eq!(tools[0]["inputSchema"]["required"], json!(["pipeline_id"]));
}

// ---------------------------------------------------------------------------------------------
// get_pipelines
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn get_pipelines_lists_readable_pipelines_by_id_with_offset_paging() {
    let app = spawn_app().await;
    let mut created = Vec::new();
    for name in ["alpha-docs", "beta-docs", "gamma_notes"] {
        created.push(app.new_pipeline(json!({"name": name})).await);
    }
    let full_text = app
        .new_pipeline(json!({"name": "delta-docs", "embedding_model_id": null, "has_full_text_search": true, "description": "fts"}))
        .await;
    created.push(full_text.clone());
    let mut ids: Vec<String> = created.iter().map(|p| str_of(p, "id").to_owned()).collect();
    ids.sort();

    let mut client = session(&app).await;
    let output = client.tool_ok("get_pipelines", json!({})).await;
    assert_eq!(keys_of(&output), ["results"]);
    let results = output["results"].as_array().unwrap();
    let listed: Vec<&str> = results.iter().map(|p| str_of(p, "pipeline_id")).collect();
    assert_eq!(listed, ids, "ordered by pipeline id");
    for item in results {
        assert_eq!(
            keys_of(item),
            [
                "default_text_splitter_id",
                "description",
                "embedding_model_id",
                "name",
                "pipeline_id"
            ]
        );
        assert_sorted_keys(item);
        let pipeline = created
            .iter()
            .find(|p| p["id"] == item["pipeline_id"])
            .unwrap();
        assert_eq!(item["name"], pipeline["name"]);
        assert_eq!(item["description"], pipeline["description"]);
        assert_eq!(
            item["default_text_splitter_id"],
            pipeline["default_text_splitter_id"]
        );
        assert_eq!(
            item["embedding_model_id"], pipeline["default_vector_embedding_id"],
            "the vector embedding id"
        );
    }
    let fts = results.iter().find(|p| p["name"] == "delta-docs").unwrap();
    assert_eq!(fts["embedding_model_id"], Value::Null);
    assert_eq!(fts["description"], "fts");

    // Paging.
    let page = client
        .tool_ok("get_pipelines", json!({"limit": 2, "offset": 1}))
        .await;
    let listed: Vec<&str> = page["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| str_of(p, "pipeline_id"))
        .collect();
    assert_eq!(listed, ids[1..3]);
    let page = client.tool_ok("get_pipelines", json!({"limit": 0})).await;
    assert_eq!(page, json!({"results": []}));
    let page = client
        .tool_ok(
            "get_pipelines",
            json!({"limit": null, "offset": null, "query": null}),
        )
        .await;
    assert_eq!(page["results"].as_array().unwrap().len(), 4);
    let page = client.tool_ok("get_pipelines", json!({"offset": 10})).await;
    assert_eq!(page, json!({"results": []}));

    // Name filter: case-sensitive substring, `%` and `_` are wildcards.
    let names = |output: &Value| -> Vec<String> {
        let mut names: Vec<String> = output["results"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| str_of(p, "name").to_owned())
            .collect();
        names.sort();
        names
    };
    let found = client
        .tool_ok("get_pipelines", json!({"query": "-docs"}))
        .await;
    assert_eq!(names(&found), ["alpha-docs", "beta-docs", "delta-docs"]);
    let found = client
        .tool_ok("get_pipelines", json!({"query": "DOCS"}))
        .await;
    assert!(names(&found).is_empty());
    let found = client
        .tool_ok("get_pipelines", json!({"query": "a_n"}))
        .await;
    assert_eq!(names(&found), ["gamma_notes"]);
    let found = client
        .tool_ok("get_pipelines", json!({"query": "al%docs"}))
        .await;
    assert_eq!(names(&found), ["alpha-docs"]);
    // Arguments outside the schema are ignored.
    let found = client
        .tool_ok("get_pipelines", json!({"query": "beta", "unknown": 1}))
        .await;
    assert_eq!(names(&found), ["beta-docs"]);

    // Argument errors are tool results with isError.
    let text = client
        .tool_argument_error("get_pipelines", json!({"limit": -1}))
        .await;
    assert!(
        text.starts_with("failed to deserialize parameters: "),
        "{text}"
    );
    let text = client
        .tool_argument_error("get_pipelines", json!({"query": 5}))
        .await;
    assert!(
        text.starts_with("failed to deserialize parameters: invalid type"),
        "{text}"
    );
}

#[tokio::test]
async fn get_pipelines_shows_only_pipelines_the_key_can_read() {
    let app = spawn_app().await;
    let first = app.new_pipeline_id(json!({})).await;
    let _second = app.new_pipeline_id(json!({})).await;

    let none = app.create_key(json!({}), json!([])).await;
    let mut client = Client::new(&app, none.clone());
    client.initialize("2025-06-18").await;
    let output = client.tool_ok("get_pipelines", json!({})).await;
    assert_eq!(output, json!({"results": []}));

    app.grant(
        &none.0,
        json!([{"object_type": "pipelines", "object_id": first, "permission": 4}]),
    )
    .await;
    let output = client.tool_ok("get_pipelines", json!({})).await;
    let results = output["results"].as_array().unwrap();
    assert_eq!(results.len(), 1);
    assert_eq!(results[0]["pipeline_id"], first);
}

// ---------------------------------------------------------------------------------------------
// get_pipeline_classifications
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn get_pipeline_classifications_needs_read_and_allow_list_star() {
    let app = spawn_app().await;
    let id = app.new_pipeline_id(json!({})).await;
    let mut client = session(&app).await;
    let output = client
        .tool_ok("get_pipeline_classifications", json!({"pipeline_id": id}))
        .await;
    assert_eq!(keys_of(&output), ["classifications", "hierarchy"]);
    let mut names: Vec<String> = serde_json::from_value(output["classifications"].clone()).unwrap();
    names.sort();
    assert_eq!(names, ["internal", "public"]);
    assert_eq!(output["hierarchy"], json!([["internal", "public"]]));

    // Not a UUID.
    let error = client
        .tool_error(
            "get_pipeline_classifications",
            json!({"pipeline_id": "abc"}),
        )
        .await;
    assert_eq!(error["code"], -32600, "{error}");
    assert_eq!(error["message"], "invalid length: found 3");
    // Unknown pipeline.
    let missing = Uuid::new_v4().to_string();
    let error = client
        .tool_error(
            "get_pipeline_classifications",
            json!({"pipeline_id": missing}),
        )
        .await;
    assert_eq!(error["code"], -32002);
    assert_eq!(error["message"], "Pipeline not found");
    assert_eq!(error["data"], json!({"id": missing}));
    // Missing or mistyped argument.
    let text = client
        .tool_argument_error("get_pipeline_classifications", json!({}))
        .await;
    assert_eq!(
        text,
        "failed to deserialize parameters: missing field `pipeline_id`"
    );
    let text = client
        .tool_argument_error("get_pipeline_classifications", json!({"pipeline_id": 7}))
        .await;
    assert!(
        text.starts_with("failed to deserialize parameters: invalid type: integer `7`"),
        "{text}"
    );

    // Read without `*`: authorization error; no read: not found.
    let limited = app
        .create_key(json!({"pipelines": 4}), json!(["public"]))
        .await;
    let mut limited = Client::new(&app, limited);
    limited.initialize("2025-03-26").await;
    let error = limited
        .tool_error("get_pipeline_classifications", json!({"pipeline_id": id}))
        .await;
    assert_eq!(error["code"], -32603);
    assert_eq!(error["message"], "Authorization error: AccessLevel(READ)");
    let none = app.create_key(json!({}), json!(["*"])).await;
    let mut none = Client::new(&app, none);
    none.initialize("2024-11-05").await;
    let error = none
        .tool_error("get_pipeline_classifications", json!({"pipeline_id": id}))
        .await;
    assert_eq!(error["code"], -32002);
    assert_eq!(error["data"], json!({"id": id}));
}

// ---------------------------------------------------------------------------------------------
// search_knowledge
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn search_knowledge_runs_similarity_and_mmr() {
    let app = spawn_app_without_worker().await;
    let pipeline = app
        .new_pipeline(json!({"has_full_text_search": true}))
        .await;
    let pid = str_of(&pipeline, "id").to_owned();
    submit_harbour_and_garden(&app, &pid).await;
    let reply = app
        .submit(
            &pid,
            &json!({"external_identifier": "secret", "classification": "internal", "text": "Internal Zanzibar memo."}),
        )
        .await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
    let outcome = app.step().await;
    assert_eq!(outcome.stored, 3, "{outcome:?}");

    let mut client = session(&app).await;
    let output = client
        .tool_ok(
            "search_knowledge",
            json!({"pipeline_id": pid, "query": "Zanzibar harbour", "classifications": ["public"], "type": "similarity"}),
        )
        .await;
    assert_eq!(keys_of(&output), ["results"]);
    let results = output["results"].as_array().unwrap();
    assert_eq!(results.len(), 2, "public only: {output}");
    for fragment in results {
        assert_eq!(keys_of(fragment), SEARCH_RESULT_FIELDS);
        assert_sorted_keys(fragment);
        assert_eq!(fragment["embedding"], Value::Null);
        assert_eq!(fragment["expired_at"], Value::Null);
        assert_eq!(fragment["classification"], "public");
        assert_eq!(fragment["order_id"], 0);
    }
    assert!(
        str_of(&results[0], "page_content").contains("Zanzibar"),
        "closest first: {output}"
    );
    assert!(results[0]["score"].as_f64() <= results[1]["score"].as_f64());

    // Hierarchical classifications: `internal` inherits `public`.
    let output = client
        .tool_ok(
            "search_knowledge",
            json!({"pipeline_id": pid, "query": "Zanzibar", "classifications": ["internal"], "type": "mmr", "embedding_model_id": model_of(&pipeline), "params": {"k": 2, "fetch_k": 3}}),
        )
        .await;
    assert_eq!(output["results"].as_array().unwrap().len(), 2, "{output}");

    // `params` present: an omitted `k` is 0; no classification: nothing.
    for arguments in [
        json!({"pipeline_id": pid, "query": "Zanzibar", "classifications": ["public"], "type": "similarity", "params": {}}),
        json!({"pipeline_id": pid, "query": "Zanzibar", "classifications": [], "type": "similarity"}),
        json!({"pipeline_id": pid, "query": "Zanzibar", "classifications": ["public"], "type": "mmr", "params": {"k": 3}}),
    ] {
        let output = client.tool_ok("search_knowledge", arguments).await;
        assert_eq!(output, json!({"results": []}));
    }
}

/// Extension (model migration): `embedding_model_id` may name a model added to the pipeline
/// once it is `ready`; before, the search is refused.
#[tokio::test]
async fn search_knowledge_uses_a_model_added_to_the_pipeline_once_it_is_ready() {
    let app = spawn_app_without_worker().await;
    let pid = app.new_pipeline_id(json!({})).await;
    submit_harbour_and_garden(&app, &pid).await;
    while app.step().await.jobs > 0 {}
    let model = app.create_hash_model("mcp-added", 48).await;
    let model_id = str_of(&model, "id").to_owned();
    let reply = app
        .post(
            &format!("/pipelines/{pid}/embedding-models"),
            &json!({"embedding_model_id": model_id}),
        )
        .await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
    let arguments = json!({"pipeline_id": pid, "query": "Zanzibar harbour", "classifications": ["public"], "type": "similarity", "embedding_model_id": model_id});
    let mut client = session(&app).await;
    let error = client
        .tool_error("search_knowledge", arguments.clone())
        .await;
    assert_eq!(error["message"], "Conflict related error", "{error}");

    while app.step().await.jobs > 0 {}
    let output = client.tool_ok("search_knowledge", arguments).await;
    let results = output["results"].as_array().unwrap();
    assert_eq!(results.len(), 2, "{output}");
    assert!(str_of(&results[0], "page_content").contains("Zanzibar"));
    // The same scores as the REST search naming the model.
    let reply = app
        .post(
            &format!("/pipelines/{pid}/search"),
            &json!({"query": "Zanzibar harbour", "type": "similarity", "classification": "public", "params": {"k": 4, "embedding": model_id}}),
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    let scores = |hits: &[Value]| hits.iter().map(|h| h["score"].clone()).collect::<Vec<_>>();
    assert_eq!(scores(results), scores(reply.body.as_array().unwrap()));
}

#[tokio::test]
async fn search_knowledge_runs_full_text_search() {
    let app = spawn_app_without_worker().await;
    let pipeline = app
        .new_pipeline(json!({"has_full_text_search": true}))
        .await;
    let pid = str_of(&pipeline, "id").to_owned();
    submit_harbour_and_garden(&app, &pid).await;
    let outcome = app.step().await;
    assert_eq!(outcome.stored, 2, "{outcome:?}");
    let mut client = session(&app).await;

    // Undefined classification names are ignored.
    let output = client
        .tool_ok(
            "search_knowledge",
            json!({"pipeline_id": pid, "query": "orchids", "classifications": ["public", "undefined"], "type": "search"}),
        )
        .await;
    let results = output["results"].as_array().unwrap();
    assert_eq!(results.len(), 1, "{output}");
    assert!(str_of(&results[0], "page_content").contains("orchids"));

    assert_eq!(results[0]["embedding"], Value::Null);
    assert_eq!(results[0]["expired_at"], Value::Null);
    assert!(results[0]["score"].as_f64().unwrap() > 0.0);
}

#[tokio::test]
async fn search_knowledge_errors() {
    let app = spawn_app().await;
    let pipeline = app.new_pipeline(json!({})).await;
    let pid = str_of(&pipeline, "id").to_owned();
    let base = |kind: &str| json!({"pipeline_id": pid, "query": "q", "classifications": ["public"], "type": kind});
    let mut client = session(&app).await;

    // Types that do not run.
    let error = client.tool_error("search_knowledge", base("query")).await;
    assert_eq!(error["code"], -32603);
    assert_eq!(error["message"], "Invalid search type or parameters");
    for (kind, message) in [
        ("hybrid", "Hybrid placeholder is not implemented yet"),
        ("history", "History placeholder is not implemented yet"),
    ] {
        let error = client.tool_error("search_knowledge", base(kind)).await;
        assert_eq!(error["code"], -32603);
        assert_eq!(error["message"], message);
        let params = &error["data"]["params"]["params"];
        assert_eq!(params["k"], 5, "{error}");
        assert_eq!(params["fetch_k"], 10, "{error}");
        assert_eq!(params["lambda_mult"], 0.5, "{error}");
    }
    // Full-text search on a pipeline without it.
    let error = client.tool_error("search_knowledge", base("search")).await;
    assert_eq!(error["code"], -32603);
    assert_eq!(
        error["message"],
        "Full text search is not enabled for this pipeline"
    );

    // Arguments not matching the schema.
    let text = client
        .tool_argument_error("search_knowledge", base("fuzzy"))
        .await;
    assert!(
        text.starts_with("failed to deserialize parameters: unknown variant `fuzzy`"),
        "{text}"
    );
    let text = client
        .tool_argument_error(
            "search_knowledge",
            json!({"pipeline_id": pid, "query": "q", "type": "similarity"}),
        )
        .await;
    assert_eq!(
        text,
        "failed to deserialize parameters: missing field `classifications`"
    );
    let mut big_k = base("similarity");
    big_k["params"] = json!({"k": 65536});
    let text = client.tool_argument_error("search_knowledge", big_k).await;
    assert!(
        text.starts_with("failed to deserialize parameters: "),
        "{text}"
    );

    // Identifiers.
    let mut bad = base("similarity");
    bad["pipeline_id"] = json!("abc");
    let error = client.tool_error("search_knowledge", bad).await;
    assert_eq!(error["code"], -32600);
    assert_eq!(error["message"], "invalid length: found 3");
    let mut bad = base("similarity");
    bad["embedding_model_id"] = json!("not-a-uuid");
    let error = client.tool_error("search_knowledge", bad).await;
    assert_eq!(error["code"], -32600);
    let mut other_model = base("similarity");
    other_model["embedding_model_id"] = json!(Uuid::new_v4());
    let error = client.tool_error("search_knowledge", other_model).await;
    assert_eq!(error["code"], -32600);
    assert_eq!(error["message"], "Embedding model not found");
    // The vector embedding id is not a model id.
    let mut association = base("similarity");
    association["embedding_model_id"] = pipeline["default_vector_embedding_id"].clone();
    let error = client.tool_error("search_knowledge", association).await;
    assert_eq!(error["message"], "Embedding model not found");

    // A full-text-only pipeline has no model, for every type.
    let fts = app
        .new_pipeline_id(json!({"embedding_model_id": null, "has_full_text_search": true}))
        .await;
    for kind in ["search", "similarity"] {
        let error = client
            .tool_error(
                "search_knowledge",
                json!({"pipeline_id": fts, "query": "q", "classifications": ["public"], "type": kind}),
            )
            .await;
        assert_eq!(error["code"], -32600);
        assert_eq!(error["message"], "Missing embedding model ID");
    }

    // Unknown pipeline, or read without execute.
    let missing = Uuid::new_v4().to_string();
    let mut unknown = base("similarity");
    unknown["pipeline_id"] = json!(missing);
    let error = client.tool_error("search_knowledge", unknown).await;
    assert_eq!(error["code"], -32002);
    assert_eq!(error["data"], json!({"id": missing}));
    let reader = app.create_key(json!({"pipelines": 4}), json!(["*"])).await;
    let mut reader = Client::new(&app, reader);
    reader.initialize("2025-11-25").await;
    let error = reader
        .tool_error("search_knowledge", base("similarity"))
        .await;
    assert_eq!(error["code"], -32002);
    assert_eq!(error["message"], "Pipeline not found");
    let runner = app.create_key(json!({"pipelines": 5}), json!([])).await;
    let mut runner = Client::new(&app, runner);
    runner.initialize("2025-11-25").await;
    let output = runner.tool_ok("search_knowledge", base("similarity")).await;
    assert_eq!(output, json!({"results": []}));
}

// ---------------------------------------------------------------------------------------------
// HTTP errors before a tool runs
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn transport_errors_have_the_interface_statuses_and_texts() {
    let app = spawn_app().await;
    let key = app.master_key();
    let client = Client::new(&app, key.clone());
    let init = initialize_body("2025-11-25").to_string();

    // Host not allowed.
    let reply = client
        .post()
        .header("host", "evil.example")
        .body(init.clone())
        .send()
        .await;
    assert_text(
        &reply,
        StatusCode::FORBIDDEN,
        "Forbidden: Host header is not allowed",
    );
    for host in ["localhost:8080", "127.0.0.1", "[::1]:1234"] {
        let reply = client
            .post()
            .header("host", host)
            .body(init.clone())
            .send()
            .await;
        assert_eq!(reply.status, StatusCode::OK, "{host}: {}", reply.text);
    }

    // GET and DELETE without a session.
    let reply = app
        .req(Method::GET, "/mcp")
        .as_key(&key)
        .header("accept", "text/event-stream")
        .send()
        .await;
    assert_text(
        &reply,
        StatusCode::BAD_REQUEST,
        "Bad Request: Session ID is required",
    );
    let reply = app.as_key(&key).delete("/mcp").await;
    assert_text(
        &reply,
        StatusCode::BAD_REQUEST,
        "Bad Request: Session ID is required",
    );

    // Unknown session.
    let unknown = Uuid::new_v4().to_string();
    let reply = client
        .post()
        .header("mcp-session-id", &unknown)
        .body(request(2, "tools/list", json!({})).to_string())
        .send()
        .await;
    assert_text(
        &reply,
        StatusCode::NOT_FOUND,
        "Not Found: Session not found",
    );

    // Paths under /mcp, other methods.
    let reply = app
        .req(Method::POST, "/mcp/")
        .as_key(&key)
        .body(init.clone())
        .send()
        .await;
    assert_eq!(reply.status, StatusCode::NOT_FOUND);
    assert!(reply.text.is_empty());
    assert!(reply.header("x-request-id").is_none());
    let reply = app.as_key(&key).get("/mcp/x").await;
    assert_eq!(reply.status, StatusCode::NOT_FOUND);
    assert!(reply.text.is_empty());
    for method in [Method::PUT, Method::PATCH] {
        let reply = app.req(method, "/mcp").as_key(&key).send().await;
        assert_text(&reply, StatusCode::METHOD_NOT_ALLOWED, "Method Not Allowed");
        let allow = reply.header("allow").unwrap();
        for m in ["GET", "POST", "DELETE"] {
            assert!(allow.contains(m), "{allow}");
        }
    }

    // Accept.
    for accept in [None, Some("application/json"), Some("text/event-stream")] {
        let mut builder = app
            .req(Method::POST, "/mcp")
            .as_key(&key)
            .header("content-type", "application/json");
        if let Some(accept) = accept {
            builder = builder.header("accept", accept);
        }
        let reply = builder.body(init.clone()).send().await;
        assert_text(
            &reply,
            StatusCode::NOT_ACCEPTABLE,
            "Not Acceptable: Client must accept both application/json and text/event-stream",
        );
    }
    let reply = app
        .req(Method::GET, "/mcp")
        .as_key(&key)
        .header("accept", "application/json")
        .send()
        .await;
    assert_text(
        &reply,
        StatusCode::NOT_ACCEPTABLE,
        "Not Acceptable: Client must accept text/event-stream",
    );

    // Content type and body.
    let reply = app
        .req(Method::POST, "/mcp")
        .as_key(&key)
        .header("accept", ACCEPT_BOTH)
        .header("content-type", "text/plain")
        .body(init.clone())
        .send()
        .await;
    assert_text(
        &reply,
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "Unsupported Media Type: Content-Type must be application/json",
    );
    let reply = app
        .req(Method::POST, "/mcp")
        .as_key(&key)
        .header("accept", ACCEPT_BOTH)
        .body(init.clone())
        .send()
        .await;
    assert_eq!(reply.status, StatusCode::UNSUPPORTED_MEDIA_TYPE);
    for body in ["not json", "{\"jsonrpc\": \"2.0\"}", "[]"] {
        let reply = client.post().body(body).send().await;
        assert_eq!(reply.status, StatusCode::UNSUPPORTED_MEDIA_TYPE, "{body}");
        assert!(
            reply.text.starts_with("fail to deserialize request body "),
            "{}",
            reply.text
        );
    }
    let huge = format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\",\"params\":{{\"pad\":\"{}\"}}}}",
        "x".repeat(4 * 1024 * 1024)
    );
    let reply = client.post().body(huge).send().await;
    assert_text(
        &reply,
        StatusCode::PAYLOAD_TOO_LARGE,
        "Payload Too Large: request body exceeds 4194304 bytes",
    );

    // Not initialize, no session.
    for body in [
        request(2, "tools/list", json!({})),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    ] {
        let reply = client.send(&body).await;
        assert_text(
            &reply,
            StatusCode::UNPROCESSABLE_ENTITY,
            "Unexpected message, expect initialize request",
        );
    }

    // Unsupported protocol revision header.
    let reply = client
        .post()
        .header("mcp-protocol-version", "1999-01-01")
        .body(request(2, "tools/list", json!({})).to_string())
        .send()
        .await;
    assert_text(
        &reply,
        StatusCode::BAD_REQUEST,
        "Bad Request: Unsupported MCP-Protocol-Version: 1999-01-01",
    );
    let reply = app
        .req(Method::GET, "/mcp")
        .as_key(&key)
        .header("accept", "text/event-stream")
        .header("mcp-protocol-version", "1999-01-01")
        .header("mcp-session-id", &unknown)
        .send()
        .await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{}", reply.text);
}

#[tokio::test]
async fn authentication_failures_are_the_rest_401s() {
    let app = spawn_app().await;
    let init = initialize_body("2025-11-25").to_string();
    let post = || {
        app.req(Method::POST, "/mcp")
            .header("accept", ACCEPT_BOTH)
            .header("content-type", "application/json")
            .body(init.clone())
    };
    let reply = post().send().await;
    assert_error(
        &reply,
        StatusCode::UNAUTHORIZED,
        "Unauthorized: No API Key specified.",
    );
    let reply = post()
        .header("x-api-key", app.master_id.to_string())
        .send()
        .await;
    assert_error(
        &reply,
        StatusCode::UNAUTHORIZED,
        "Unauthorized: No API Secret Key specified.",
    );
    let reply = post()
        .header("x-api-key", "not-a-uuid")
        .header("x-api-key-secret", "x")
        .send()
        .await;
    assert_error(&reply, StatusCode::UNAUTHORIZED, "Invalid key ID");
    let reply = post()
        .header("x-api-key", app.master_id.to_string())
        .header("x-api-key-secret", "wrong")
        .send()
        .await;
    assert_error(
        &reply,
        StatusCode::UNAUTHORIZED,
        "Invalid API Key or Secret",
    );
    assert!(reply.header("x-request-id").is_some());

    // Every request of a session is checked: a deactivated key is refused at once.
    let key = app.create_key(json!({"pipelines": 4}), json!([])).await;
    let mut client = Client::new(&app, key.clone());
    client.initialize("2025-11-25").await;
    let reply = app
        .patch(&format!("/api-keys/{}", key.0), &json!({"active": false}))
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    let reply = client.send(&request(3, "tools/list", json!({}))).await;
    assert_error(
        &reply,
        StatusCode::UNAUTHORIZED,
        "Invalid API Key or Secret",
    );
    // GET and DELETE need the key too.
    let reply = app
        .req(Method::DELETE, "/mcp")
        .header("mcp-session-id", client.session.as_deref().unwrap())
        .send()
        .await;
    assert_error(
        &reply,
        StatusCode::UNAUTHORIZED,
        "Unauthorized: No API Key specified.",
    );
}

#[tokio::test]
async fn mcp_requests_are_labelled_mcp_in_metrics_and_carry_request_ids() {
    let app = spawn_app().await;
    let client = Client::new(&app, app.master_key());
    let reply = client
        .post()
        .header("x-request-id", "my-request")
        .body(initialize_body("2025-11-25").to_string())
        .send()
        .await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.header("x-request-id"), Some("my-request"));
    assert_eq!(reply.header("access-control-allow-origin"), Some("*"));
    let reply = app.req(Method::PUT, "/mcp").send().await;
    assert_eq!(reply.status, StatusCode::METHOD_NOT_ALLOWED);

    let metrics = app.req(Method::GET, "/metrics").send().await.text;
    assert!(
        metrics
            .contains(r#"axum_http_requests_total{endpoint="/mcp",method="POST",status="200"} 1"#),
        "{metrics}"
    );
    assert!(
        metrics
            .contains(r#"axum_http_requests_total{endpoint="/mcp",method="PUT",status="405"} 1"#),
        "{metrics}"
    );
    assert!(
        metrics.contains(r#"axum_http_requests_pending{endpoint="/mcp",method="POST"} 0"#),
        "{metrics}"
    );

    // CORS preflight.
    let reply = app
        .req(Method::OPTIONS, "/mcp")
        .header("origin", "http://example.com")
        .header("access-control-request-method", "POST")
        .send()
        .await;
    assert_eq!(reply.status, StatusCode::OK);
    let allowed = reply.header("access-control-allow-methods").unwrap();
    assert!(allowed.contains("POST"), "{allowed}");
}

#[tokio::test]
async fn search_knowledge_runs_hybrid_searches_with_the_extension_on() {
    let app = spawn_app_without_worker_with(&[("TROVE_EXTENSIONS", "hybrid")]).await;
    let pipeline = app
        .new_pipeline(json!({"has_full_text_search": true}))
        .await;
    let pid = str_of(&pipeline, "id").to_owned();
    submit_harbour_and_garden(&app, &pid).await;
    assert_eq!(app.step().await.stored, 2);
    let mut client = session(&app).await;
    let tools = client.call("tools/list", json!({})).await;
    let search = &tools["result"]["tools"][2];
    assert_eq!(search["name"], "search_knowledge");
    assert!(
        search["inputSchema"]["properties"]["params"]["properties"]["rrf_k"].is_object(),
        "{search}"
    );
    let output = client
        .tool_ok(
            "search_knowledge",
            json!({"pipeline_id": pid, "query": "Zanzibar flowers", "classifications": ["public"],
                   "type": "hybrid", "params": {"k": 2, "rrf_k": 10}}),
        )
        .await;
    let results = output["results"].as_array().unwrap();
    assert_eq!(results.len(), 2, "{output}");
    assert_eq!(results[0]["full_text_rank"], 1, "{output}");
    assert!(str_of(&results[0], "page_content").contains("Zanzibar"));
    assert_eq!(results[0]["embedding"], Value::Null);
}

/// Submits the two documents the search tests look for: `harbour` (“Zanzibar harbour ships and
/// cargo manifests.”) and `garden` (“Botanical garden orchids and ferns.”).
async fn submit_harbour_and_garden(app: &TestApp, pid: &str) {
    app.submit_text(
        pid,
        "harbour",
        "Zanzibar harbour ships and cargo manifests.",
    )
    .await;
    app.submit_text(pid, "garden", "Botanical garden orchids and ferns.")
        .await;
}
