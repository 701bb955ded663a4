//! The MCP server at `/mcp` driven by the rmcp client (its streamable HTTP transport) over real
//! HTTP: the handshake on every protocol revision, `tools/list`, each tool on ingested data, and
//! the errors a client observes. The raw JSON-RPC tests of the same server are in `mcp.rs`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use poem::web::Data;
use poem::{EndpointExt, Route, handler, post};
use reqwest::{Method, StatusCode};
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig, ErrorData,
    Implementation, JsonObject, ProtocolVersion, Tool,
};
use rmcp::service::RunningService;
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::{ClientLifecycleMode, ClientServiceExt, RoleClient, ServiceError, ServiceExt};
use serde_json::{Value, json};
use uuid::Uuid;

use crate::helpers::{
    SEARCH_RESULT_FIELDS, TestApp, keys_of, model_of, spawn_app, spawn_app_without_worker, str_of,
};

/// The revisions with an `initialize` handshake and sessions.
const SESSION_REVISIONS: [ProtocolVersion; 4] = [
    ProtocolVersion::V_2024_11_05,
    ProtocolVersion::V_2025_03_26,
    ProtocolVersion::V_2025_06_18,
    ProtocolVersion::V_2025_11_25,
];

const DRAFT_2020_12: &str = "https://json-schema.org/draft/2020-12/schema";

type Client = RunningService<RoleClient, ClientConfig>;

/// What the client announces, asking for `revision`.
fn client_info(revision: ProtocolVersion) -> ClientConfig {
    ClientConfig::new(
        ClientCapabilities::default(),
        Implementation::new("trove-tests", "1.0.0"),
    )
    .with_protocol_version(revision)
}

/// The transport configuration for `/mcp` of an app with a key (`x-api-key`,
/// `x-api-key-secret`) and extra headers.
fn config(
    app: &TestApp,
    key: &(String, String),
    extra: &[(&'static str, &str)],
) -> StreamableHttpClientTransportConfig {
    let mut headers = HashMap::new();
    for (name, value) in [("x-api-key", key.0.as_str()), ("x-api-key-secret", &key.1)]
        .into_iter()
        .chain(extra.iter().copied())
    {
        headers.insert(
            reqwest::header::HeaderName::from_static(name),
            reqwest::header::HeaderValue::from_str(value).expect("header value"),
        );
    }
    StreamableHttpClientTransportConfig::with_uri(format!("{}/mcp", app.address))
        .custom_headers(headers)
}

fn transport(
    app: &TestApp,
    key: &(String, String),
) -> StreamableHttpClientTransport<impl rmcp::transport::streamable_http_client::StreamableHttpClient>
{
    StreamableHttpClientTransport::from_config(config(app, key, &[]))
}

/// A client that completed `initialize` on `revision` with `key`.
async fn connect_as(app: &TestApp, key: &(String, String), revision: ProtocolVersion) -> Client {
    client_info(revision.clone())
        .serve(transport(app, key))
        .await
        .unwrap_or_else(|e| panic!("initialize on {revision}: {e}"))
}

/// A master-key client on 2025-11-25.
async fn connect(app: &TestApp) -> Client {
    connect_as(app, &app.master_key(), ProtocolVersion::V_2025_11_25).await
}

fn arguments(value: Value) -> JsonObject {
    match value {
        Value::Object(map) => map,
        other => panic!("arguments must be an object: {other}"),
    }
}

async fn call(
    client: &Client,
    name: &'static str,
    args: Value,
) -> Result<CallToolResult, ServiceError> {
    client
        .call_tool(CallToolRequestParams::new(name).with_arguments(arguments(args)))
        .await
}

/// The one text block of a result.
fn text_of(result: &CallToolResult) -> &str {
    assert_eq!(result.content.len(), 1, "{result:?}");
    &result.content[0]
        .as_text()
        .unwrap_or_else(|| panic!("not a text block: {result:?}"))
        .text
}

/// A successful call: `isError` false, the text block is the structured output serialized as
/// JSON (keys alphabetical); returns the structured output.
async fn call_ok(client: &Client, name: &'static str, args: Value) -> Value {
    let result = call(client, name, args)
        .await
        .unwrap_or_else(|e| panic!("{name}: {e:?}"));
    assert_eq!(result.is_error, Some(false), "{result:?}");
    let structured = result
        .structured_content
        .clone()
        .unwrap_or_else(|| panic!("no structured content: {result:?}"));
    let text = text_of(&result);
    assert_eq!(
        text,
        serde_json::to_string(&sorted_keys(&structured)).expect("JSON"),
        "the text block is the output as JSON, keys in alphabetical order"
    );
    structured
}

/// The JSON-RPC error of a call.
async fn call_error(client: &Client, name: &'static str, args: Value) -> ErrorData {
    match call(client, name, args).await {
        Err(ServiceError::McpError(error)) => error,
        other => panic!("{name}: expected a JSON-RPC error, got {other:?}"),
    }
}

/// A call whose arguments do not match the input schema: a result with `isError` true and one
/// text block; returns the text.
async fn call_argument_error(client: &Client, name: &'static str, args: Value) -> String {
    let result = call(client, name, args)
        .await
        .unwrap_or_else(|e| panic!("{name}: {e:?}"));
    assert_eq!(result.is_error, Some(true), "{result:?}");
    assert_eq!(result.structured_content, None, "{result:?}");
    text_of(&result).to_owned()
}

fn assert_code(error: &ErrorData, code: i32, message: &str) {
    assert_eq!(error.code.0, code, "{error:?}");
    assert_eq!(error.message, message, "{error:?}");
}

/// The value with every object's keys inserted in alphabetical order.
fn sorted_keys(value: &Value) -> Value {
    match value {
        Value::Object(map) => {
            let mut names: Vec<&String> = map.keys().collect();
            names.sort();
            Value::Object(
                names
                    .into_iter()
                    .map(|name| (name.clone(), sorted_keys(&map[name])))
                    .collect(),
            )
        }
        Value::Array(items) => Value::Array(items.iter().map(sorted_keys).collect()),
        other => other.clone(),
    }
}

/// The message of an error and of its sources.
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(inner) = source {
        text.push_str(" <- ");
        text.push_str(&inner.to_string());
        source = inner.source();
    }
    text
}

// ---------------------------------------------------------------------------------------------
// Lifecycle and protocol revisions
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn rmcp_client_initializes_on_every_session_revision() {
    let app = spawn_app().await;
    let pid = app.new_pipeline_id(json!({})).await;
    for revision in SESSION_REVISIONS {
        let client = connect_as(&app, &app.master_key(), revision.clone()).await;
        let info = client.peer_info().expect("server info after initialize");
        assert_eq!(info.protocol_version, revision);
        let capabilities = serde_json::to_value(&info.capabilities).expect("JSON");
        assert_eq!(capabilities, json!({"tools": {}}), "{revision}");
        let server = info.server_info.clone().expect("serverInfo");
        assert_eq!(server.name, "rmcp");
        assert_eq!(server.version, "3.11.0");
        assert_eq!(
            info.instructions.as_deref(),
            Some(trove::mcp::handler::INSTRUCTIONS)
        );

        // The session serves requests.
        let tools = client.list_all_tools().await.expect("tools/list");
        assert_eq!(tools.len(), 3, "{revision}");
        let output = call_ok(&client, "get_pipelines", json!({})).await;
        assert_eq!(output["results"][0]["pipeline_id"], pid, "{revision}");
        client.cancel().await.expect("close");
    }
}

#[tokio::test]
async fn rmcp_client_asking_for_an_unknown_revision_gets_2025_11_25() {
    let app = spawn_app().await;
    let unknown: ProtocolVersion = serde_json::from_value(json!("2099-01-01")).expect("version");
    let client = connect_as(&app, &app.master_key(), unknown).await;
    let info = client.peer_info().expect("server info");
    assert_eq!(info.protocol_version, ProtocolVersion::V_2025_11_25);
    assert_eq!(client.list_all_tools().await.expect("tools/list").len(), 3);
    client.cancel().await.expect("close");
}

/// On 2026-07-28: the revision, capabilities and instructions, `tools/list` and a tool call.
async fn assert_stateless_session(client: &Client, pid: &str) {
    let info = client.peer_info().expect("server info");
    assert_eq!(info.protocol_version, ProtocolVersion::V_2026_07_28);
    assert_eq!(
        serde_json::to_value(&info.capabilities).expect("JSON"),
        json!({"tools": {}})
    );
    assert_eq!(
        info.instructions.as_deref(),
        Some(trove::mcp::handler::INSTRUCTIONS)
    );
    let tools = client.list_all_tools().await.expect("tools/list");
    assert_eq!(tools.len(), 3);
    let output = call_ok(client, "get_pipelines", json!({})).await;
    assert_eq!(output["results"][0]["pipeline_id"], pid);
}

/// `initialize` naming 2026-07-28: the server echoes the revision, and from then on the client
/// sends every request with the revision's `_meta` and `MCP-Protocol-Version`, `Mcp-Method` and
/// `Mcp-Name` headers.
#[tokio::test]
async fn rmcp_client_on_2026_07_28_initialize_then_stateless_requests() {
    let app = spawn_app().await;
    let pid = app.new_pipeline_id(json!({})).await;
    let client = connect_as(&app, &app.master_key(), ProtocolVersion::V_2026_07_28).await;
    assert_stateless_session(&client, &pid).await;
    let missing = Uuid::new_v4().to_string();
    let error = call_error(
        &client,
        "get_pipeline_classifications",
        json!({"pipeline_id": missing}),
    )
    .await;
    assert_code(&error, -32002, "Pipeline not found");
    assert_eq!(error.data, Some(json!({"id": missing})));
    client.cancel().await.expect("close");
}

/// The revision's own start: `server/discover` instead of `initialize`, then stateless requests.
#[tokio::test]
async fn rmcp_client_on_2026_07_28_discovers_then_sends_stateless_requests() {
    let app = spawn_app().await;
    let pid = app.new_pipeline_id(json!({})).await;
    let client = client_info(ProtocolVersion::V_2026_07_28)
        .serve_with_lifecycle(
            transport(&app, &app.master_key()),
            ClientLifecycleMode::Discover {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            },
        )
        .await
        .unwrap_or_else(|e| panic!("discover: {}", error_chain(&e)));
    assert_stateless_session(&client, &pid).await;
    let missing = Uuid::new_v4().to_string();
    let error = call_error(
        &client,
        "search_knowledge",
        json!({"pipeline_id": missing, "query": "q", "classifications": [], "type": "similarity"}),
    )
    .await;
    assert_code(&error, -32002, "Pipeline not found");
    assert_eq!(error.data, Some(json!({"id": missing})));
    let error = call_error(&client, "no_such_tool", json!({})).await;
    assert_code(&error, -32602, "tool not found");
    client.cancel().await.expect("close");
}

// ---------------------------------------------------------------------------------------------
// tools/list
// ---------------------------------------------------------------------------------------------

/// The property names of a schema, sorted.
fn properties(schema: &JsonObject) -> Vec<String> {
    keys_of(&schema["properties"])
}

#[tokio::test]
async fn rmcp_client_lists_the_three_read_only_tools() {
    let app = spawn_app().await;
    let client = connect(&app).await;
    let page = client.list_tools(None).await.expect("tools/list");
    assert_eq!(page.next_cursor, None, "one page");
    let tools: Vec<Tool> = page.tools;
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    assert_eq!(
        names,
        [
            "get_pipeline_classifications",
            "get_pipelines",
            "search_knowledge"
        ],
        "alphabetical"
    );
    for tool in &tools {
        let name = tool.name.as_ref();
        assert_eq!(tool.title, None, "{name}");
        assert!(
            tool.description.as_deref().is_some_and(|d| !d.is_empty()),
            "{name}"
        );
        let output = tool.output_schema.as_ref().expect("outputSchema");
        for schema in [&tool.input_schema, output] {
            assert_eq!(schema["$schema"], DRAFT_2020_12, "{name}");
            assert_eq!(schema["type"], "object", "{name}");
        }
        let annotations = tool.annotations.as_ref().expect("annotations");
        assert_eq!(annotations.title, None, "{name}");
        assert_eq!(annotations.read_only_hint, Some(true), "{name}");
        assert_eq!(annotations.destructive_hint, Some(false), "{name}");
        assert_eq!(annotations.open_world_hint, Some(false), "{name}");
        assert_eq!(
            annotations.idempotent_hint,
            Some(name != "get_pipelines"),
            "{name}"
        );
    }

    let classifications = &tools[0];
    assert_eq!(properties(&classifications.input_schema), ["pipeline_id"]);
    assert_eq!(
        classifications.input_schema["required"],
        json!(["pipeline_id"])
    );
    let output = classifications
        .output_schema
        .as_ref()
        .expect("outputSchema");
    assert_eq!(properties(output), ["classifications", "hierarchy"]);
    assert_eq!(output["required"], json!(["classifications", "hierarchy"]));

    let pipelines = &tools[1];
    assert_eq!(
        properties(&pipelines.input_schema),
        ["limit", "offset", "query"]
    );
    assert!(pipelines.input_schema.get("required").is_none());
    assert_eq!(pipelines.input_schema["properties"]["limit"]["default"], 10);
    for field in ["limit", "offset"] {
        let property = &pipelines.input_schema["properties"][field];
        assert_eq!(property["type"], json!(["integer", "null"]), "{field}");
        assert_eq!(property["minimum"], 0, "{field}");
    }
    assert_eq!(
        pipelines.input_schema["properties"]["query"]["type"],
        json!(["string", "null"])
    );
    let output = pipelines.output_schema.as_ref().expect("outputSchema");
    assert_eq!(properties(output), ["results"]);
    assert_eq!(
        keys_of(&output["properties"]["results"]["items"]["properties"]),
        [
            "default_text_splitter_id",
            "description",
            "embedding_model_id",
            "name",
            "pipeline_id"
        ]
    );

    let search = &tools[2];
    assert_eq!(
        properties(&search.input_schema),
        [
            "classifications",
            "embedding_model_id",
            "params",
            "pipeline_id",
            "query",
            "type"
        ]
    );
    assert_eq!(
        search.input_schema["required"],
        json!(["pipeline_id", "query", "classifications", "type"])
    );
    assert_eq!(
        search.input_schema["properties"]["type"]["enum"],
        json!(["similarity", "mmr", "search", "query", "hybrid", "history"])
    );
    assert_eq!(
        keys_of(&search.input_schema["properties"]["params"]["properties"]),
        ["embedding", "fetch_k", "k", "lambda_mult", "threshold"]
    );
    for field in ["k", "fetch_k"] {
        let property = &search.input_schema["properties"]["params"]["properties"][field];
        assert_eq!(property["minimum"], 0, "{field}");
        assert_eq!(property["maximum"], 65535, "{field}");
    }
    let output = search.output_schema.as_ref().expect("outputSchema");
    assert_eq!(
        keys_of(&output["properties"]["results"]["items"]["properties"]),
        SEARCH_RESULT_FIELDS
    );
    client.cancel().await.expect("close");
}

// ---------------------------------------------------------------------------------------------
// The tools on ingested data
// ---------------------------------------------------------------------------------------------

const HARBOUR: &str = "Zanzibar harbour ships and cargo manifests.";
const GARDEN: &str = "Botanical garden orchids and ferns.";
const MEMO: &str = "Internal Zanzibar memo.";

/// A pipeline with full-text search and three ingested documents (`harbour` and `garden`
/// public, `memo` internal); returns the pipeline and the documents' 201 bodies by name.
async fn ingested(app: &TestApp) -> (Value, HashMap<&'static str, Value>) {
    let pipeline = app
        .new_pipeline(json!({"name": "harbour-docs", "has_full_text_search": true}))
        .await;
    let pid = str_of(&pipeline, "id").to_owned();
    let mut ids = HashMap::new();
    for (name, classification, text) in [
        ("harbour", "public", HARBOUR),
        ("garden", "public", GARDEN),
        ("memo", "internal", MEMO),
    ] {
        let reply = app
            .submit(
                &pid,
                &json!({"external_identifier": name, "classification": classification, "text": text}),
            )
            .await;
        assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
        ids.insert(name, reply.body);
    }
    let outcome = app.step().await;
    assert_eq!(outcome.stored, 3, "{outcome:?}");
    (pipeline, ids)
}

/// The REST search answer for the same request (`POST /pipelines/{id}/search`).
async fn rest_search(app: &TestApp, pid: &str, body: Value) -> Vec<Value> {
    let reply = app.post(&format!("/pipelines/{pid}/search"), &body).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    reply.body.as_array().expect("array").clone()
}

/// A REST search hit as `search_knowledge` shows it: `embedding` and `expired_at` null.
fn as_mcp_fragment(hit: &Value) -> Value {
    let mut fragment = hit.clone();
    fragment["embedding"] = Value::Null;
    fragment["expired_at"] = Value::Null;
    fragment
}

#[tokio::test]
async fn rmcp_client_calls_each_tool_on_ingested_data() {
    let app = spawn_app_without_worker().await;
    let (pipeline, docs) = ingested(&app).await;
    let pid = str_of(&pipeline, "id").to_owned();
    let other = app
        .new_pipeline(json!({"name": "garden_notes", "description": "plants"}))
        .await;
    let client = connect(&app).await;

    // get_pipelines: every pipeline, by id, with exactly the five fields.
    let summary = |p: &Value| {
        json!({
            "default_text_splitter_id": p["default_text_splitter_id"],
            "description": p["description"],
            "embedding_model_id": p["default_vector_embedding_id"],
            "name": p["name"],
            "pipeline_id": p["id"],
        })
    };
    let mut expected = vec![summary(&pipeline), summary(&other)];
    expected.sort_by(|a, b| str_of(a, "pipeline_id").cmp(str_of(b, "pipeline_id")));
    let output = call_ok(&client, "get_pipelines", json!({})).await;
    assert_eq!(output, json!({ "results": expected }));
    assert_eq!(
        output["results"][0]["description"],
        expected[0]["description"]
    );
    let page = call_ok(&client, "get_pipelines", json!({"limit": 1, "offset": 1})).await;
    assert_eq!(page, json!({ "results": [expected[1]] }));
    let found = call_ok(&client, "get_pipelines", json!({"query": "n_n"})).await;
    assert_eq!(
        found,
        json!({ "results": [summary(&other)] }),
        "`_` is a wildcard"
    );
    let none = call_ok(&client, "get_pipelines", json!({"limit": 0})).await;
    assert_eq!(none, json!({"results": []}));

    // get_pipeline_classifications.
    let output = call_ok(
        &client,
        "get_pipeline_classifications",
        json!({"pipeline_id": pid}),
    )
    .await;
    assert_eq!(keys_of(&output), ["classifications", "hierarchy"]);
    let mut names: Vec<String> =
        serde_json::from_value(output["classifications"].clone()).expect("names");
    names.sort();
    assert_eq!(names, ["internal", "public"]);
    assert_eq!(output["hierarchy"], json!([["internal", "public"]]));

    // search_knowledge, similarity: the public fragments, closest first, as REST orders them.
    let output = call_ok(
        &client,
        "search_knowledge",
        json!({"pipeline_id": pid, "query": "Zanzibar harbour", "classifications": ["public"], "type": "similarity"}),
    )
    .await;
    let results = output["results"].as_array().expect("results");
    assert_eq!(results.len(), 2, "{output}");
    for (fragment, (name, text)) in results
        .iter()
        .zip([("harbour", HARBOUR), ("garden", GARDEN)])
    {
        assert_eq!(keys_of(fragment), SEARCH_RESULT_FIELDS);
        assert_eq!(fragment["document_id"], docs[name]["id"], "{output}");
        assert_eq!(fragment["page_content"], text);
        assert_eq!(fragment["classification"], "public");
        assert_eq!(fragment["metadata"], json!({}));
        assert_eq!(fragment["version"], docs[name]["version"]);
        assert_eq!(fragment["order_id"], 0);
        assert_eq!(fragment["embedding"], Value::Null);
        assert_eq!(fragment["expired_at"], Value::Null);
        assert!(Uuid::parse_str(str_of(fragment, "id")).is_ok());
    }
    assert!(results[0]["score"].as_f64() <= results[1]["score"].as_f64());
    let rest = rest_search(
        &app,
        &pid,
        json!({"query": "Zanzibar harbour", "type": "similarity", "classification": ["public"]}),
    )
    .await;
    let rest: Vec<Value> = rest.iter().map(as_mcp_fragment).collect();
    assert_eq!(results, &rest, "the same fragments as REST, in its order");

    // mmr: `internal` inherits `public`.
    let output = call_ok(
        &client,
        "search_knowledge",
        json!({"pipeline_id": pid, "query": "Zanzibar", "classifications": ["internal"], "type": "mmr", "params": {"k": 3, "fetch_k": 3}}),
    )
    .await;
    let rest = rest_search(
        &app,
        &pid,
        json!({"query": "Zanzibar", "type": "mmr", "classification": ["internal"], "params": {"k": 3, "fetch_k": 3}}),
    )
    .await;
    assert_eq!(rest.len(), 3);
    let rest: Vec<Value> = rest.iter().map(as_mcp_fragment).collect();
    assert_eq!(output, json!({ "results": rest }));

    // search (full text), with an undefined classification name ignored.
    let output = call_ok(
        &client,
        "search_knowledge",
        json!({"pipeline_id": pid, "query": "orchids", "classifications": ["public", "undefined"], "type": "search", "embedding_model_id": model_of(&pipeline)}),
    )
    .await;
    let results = output["results"].as_array().expect("results");
    assert_eq!(results.len(), 1, "{output}");
    assert_eq!(results[0]["document_id"], docs["garden"]["id"]);
    assert_eq!(results[0]["page_content"], GARDEN);
    assert!(results[0]["score"].as_f64().expect("rank") > 0.0);

    // Nothing: `params` present without `k`, no classification.
    for args in [
        json!({"pipeline_id": pid, "query": "Zanzibar", "classifications": ["public"], "type": "similarity", "params": {}}),
        json!({"pipeline_id": pid, "query": "Zanzibar", "classifications": [], "type": "similarity"}),
    ] {
        let output = call_ok(&client, "search_knowledge", args).await;
        assert_eq!(output, json!({"results": []}));
    }
    client.cancel().await.expect("close");
}

// ---------------------------------------------------------------------------------------------
// Tool errors
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn rmcp_client_observes_each_tool_error() {
    let app = spawn_app().await;
    let pipeline = app.new_pipeline(json!({})).await;
    let pid = str_of(&pipeline, "id").to_owned();
    let model = model_of(&pipeline);
    let base = |kind: &str| json!({"pipeline_id": pid, "query": "q", "classifications": ["public"], "type": kind});
    let client = connect(&app).await;

    // -32602: unknown tool.
    let error = call_error(&client, "no_such_tool", json!({})).await;
    assert_code(&error, -32602, "tool not found");
    assert_eq!(error.data, None);

    // Arguments not matching the input schema: `isError` results.
    let text = call_argument_error(&client, "get_pipeline_classifications", json!({})).await;
    assert_eq!(
        text,
        "failed to deserialize parameters: missing field `pipeline_id`"
    );
    let text = call_argument_error(&client, "get_pipelines", json!({"query": 5})).await;
    assert_eq!(
        text,
        "failed to deserialize parameters: invalid type: integer `5`, expected a string"
    );
    let text = call_argument_error(&client, "search_knowledge", base("fuzzy")).await;
    assert_eq!(
        text,
        "failed to deserialize parameters: unknown variant `fuzzy`, expected one of \
         `similarity`, `mmr`, `search`, `query`, `hybrid`, `history`"
    );

    // -32600: identifiers that are not UUIDs, a model the pipeline does not use, no model.
    let error = call_error(
        &client,
        "get_pipeline_classifications",
        json!({"pipeline_id": "abc"}),
    )
    .await;
    assert_code(&error, -32600, "invalid length: found 3");
    let mut bad = base("similarity");
    bad["embedding_model_id"] = json!("not-a-uuid");
    let error = call_error(&client, "search_knowledge", bad).await;
    let expected = Uuid::parse_str("not-a-uuid")
        .expect_err("not a UUID")
        .to_string();
    assert_code(&error, -32600, &expected);
    let mut other_model = base("similarity");
    other_model["embedding_model_id"] = json!(Uuid::new_v4());
    let error = call_error(&client, "search_knowledge", other_model).await;
    assert_code(&error, -32600, "Embedding model not found");
    let fts = app
        .new_pipeline_id(json!({"embedding_model_id": null, "has_full_text_search": true}))
        .await;
    let error = call_error(
        &client,
        "search_knowledge",
        json!({"pipeline_id": fts, "query": "q", "classifications": ["public"], "type": "search"}),
    )
    .await;
    assert_code(&error, -32600, "Missing embedding model ID");

    // -32002: pipeline missing.
    let missing = Uuid::new_v4().to_string();
    for name in ["get_pipeline_classifications", "search_knowledge"] {
        let mut args = base("similarity");
        args["pipeline_id"] = json!(missing);
        let error = call_error(&client, name, args).await;
        assert_code(&error, -32002, "Pipeline not found");
        assert_eq!(error.data, Some(json!({"id": missing})), "{name}");
    }

    // -32603: types that do not run, full text on a pipeline without it.
    let error = call_error(&client, "search_knowledge", base("query")).await;
    assert_code(&error, -32603, "Invalid search type or parameters");
    assert_eq!(error.data, None);
    for (kind, message) in [
        ("hybrid", "Hybrid placeholder is not implemented yet"),
        ("history", "History placeholder is not implemented yet"),
    ] {
        let error = call_error(&client, "search_knowledge", base(kind)).await;
        assert_code(&error, -32603, message);
        assert_eq!(
            error.data,
            Some(json!({"params": {"params": {
                "embedding": model,
                "fetch_k": 10,
                "k": 5,
                "lambda_mult": 0.5,
                "threshold": null,
            }}})),
            "{kind}"
        );
    }
    let error = call_error(&client, "search_knowledge", base("search")).await;
    assert_code(
        &error,
        -32603,
        "Full text search is not enabled for this pipeline",
    );
    client.cancel().await.expect("close");

    // Permissions: read without allow-list `*` (-32603), no read (-32002), read without
    // execute for a search (-32002).
    let limited = app
        .create_key(json!({"pipelines": 4}), json!(["public"]))
        .await;
    let client = connect_as(&app, &limited, ProtocolVersion::V_2025_06_18).await;
    let error = call_error(
        &client,
        "get_pipeline_classifications",
        json!({"pipeline_id": pid}),
    )
    .await;
    assert_code(&error, -32603, "Authorization error: AccessLevel(READ)");
    let error = call_error(&client, "search_knowledge", base("similarity")).await;
    assert_code(&error, -32002, "Pipeline not found");
    assert_eq!(error.data, Some(json!({"id": pid})));
    client.cancel().await.expect("close");
    let nothing = app.create_key(json!({}), json!(["*"])).await;
    let client = connect_as(&app, &nothing, ProtocolVersion::V_2024_11_05).await;
    let error = call_error(
        &client,
        "get_pipeline_classifications",
        json!({"pipeline_id": pid}),
    )
    .await;
    assert_code(&error, -32002, "Pipeline not found");
    assert_eq!(error.data, Some(json!({"id": pid})));
    assert_eq!(
        call_ok(&client, "get_pipelines", json!({})).await,
        json!({"results": []})
    );
    client.cancel().await.expect("close");
}

// ---------------------------------------------------------------------------------------------
// HTTP errors a client observes
// ---------------------------------------------------------------------------------------------

/// Initializes with a transport configuration; returns the error's text (with its sources).
async fn initialize_error(config: StreamableHttpClientTransportConfig) -> String {
    match client_info(ProtocolVersion::V_2025_11_25)
        .serve(StreamableHttpClientTransport::from_config(config))
        .await
    {
        Ok(_) => panic!("initialize succeeded"),
        Err(error) => error_chain(&error),
    }
}

#[tokio::test]
async fn rmcp_client_observes_the_http_errors() {
    let app = spawn_app().await;
    let master = app.master_key();

    // 401: the REST authentication errors, as the body of the failed POST.
    let wrong = (master.0.clone(), "wrong".to_owned());
    let raw = app
        .req(Method::POST, "/mcp")
        .as_key(&wrong)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .body("{}")
        .send()
        .await;
    assert_eq!(raw.status, StatusCode::UNAUTHORIZED);
    assert_eq!(raw.message(), "Invalid API Key or Secret");
    let text = initialize_error(config(&app, &wrong, &[])).await;
    assert!(
        text.contains(&format!("HTTP 401 Unauthorized: {}", raw.text)),
        "{text}"
    );
    let anonymous = StreamableHttpClientTransportConfig::with_uri(format!("{}/mcp", app.address));
    let text = initialize_error(anonymous).await;
    assert!(
        text.contains("HTTP 401 Unauthorized: ")
            && text.contains("Unauthorized: No API Key specified."),
        "{text}"
    );

    // 403: a Host other than localhost, 127.0.0.1, ::1.
    let text = initialize_error(config(&app, &master, &[("host", "evil.example")])).await;
    assert!(
        text.contains("HTTP 403 Forbidden: Forbidden: Host header is not allowed"),
        "{text}"
    );

    // 413: a request body over 4 MiB.
    let client = connect(&app).await;
    let error = call(
        &client,
        "get_pipelines",
        json!({"query": "x".repeat(4 * 1024 * 1024)}),
    )
    .await
    .expect_err("too large");
    let text = error_chain(&error);
    assert!(
        text.contains(
            "HTTP 413 Payload Too Large: Payload Too Large: request body exceeds 4194304 bytes"
        ),
        "{text}"
    );
    // The session still works.
    assert_eq!(
        call_ok(&client, "get_pipelines", json!({})).await,
        json!({"results": []})
    );

    // 401 within a session: the key is checked on every request.
    let key = app.create_key(json!({"pipelines": 4}), json!([])).await;
    let session = connect_as(&app, &key, ProtocolVersion::V_2025_11_25).await;
    assert_eq!(
        call_ok(&session, "get_pipelines", json!({})).await,
        json!({"results": []})
    );
    let reply = app
        .patch(&format!("/api-keys/{}", key.0), &json!({"active": false}))
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    let error = call(&session, "get_pipelines", json!({}))
        .await
        .expect_err("deactivated key");
    let text = error_chain(&error);
    assert!(
        text.contains("HTTP 401 Unauthorized: ") && text.contains("Invalid API Key or Secret"),
        "{text}"
    );
    session.cancel().await.expect("close");
    client.cancel().await.expect("close");
}

// ---------------------------------------------------------------------------------------------
// One query embedding per search_knowledge call
// ---------------------------------------------------------------------------------------------

const FAKE_API_KEY: &str = "sk-mcp-test-5d0c";

/// What the fake embedding server saw (the inputs of each request) and whether it fails.
#[derive(Default)]
struct FakeEmbeddings {
    requests: Vec<Vec<String>>,
    broken: bool,
}

type SharedFake = Arc<Mutex<FakeEmbeddings>>;

#[handler]
fn fake_embeddings(body: poem::web::Json<Value>, state: Data<&SharedFake>) -> poem::Response {
    let inputs: Vec<String> = body["input"]
        .as_array()
        .map(|items| {
            items
                .iter()
                .map(|t| t.as_str().unwrap_or_default().to_owned())
                .collect()
        })
        .unwrap_or_default();
    let mut state = state.0.lock().expect("fake state");
    state.requests.push(inputs.clone());
    if state.broken {
        return poem::Response::builder()
            .status(poem::http::StatusCode::INTERNAL_SERVER_ERROR)
            .body("{\"error\": \"model crashed\"}");
    }
    let size = usize::try_from(body["dimensions"].as_u64().unwrap_or(8)).expect("size");
    let data: Vec<Value> = inputs
        .iter()
        .enumerate()
        .map(|(index, text)| {
            let vector: Vec<f32> = (0..size)
                .map(|i| ((text.len() + 3 * i) % 11) as f32 + 1.0)
                .collect();
            json!({"object": "embedding", "index": index, "embedding": vector})
        })
        .collect();
    poem::Response::builder()
        .content_type("application/json")
        .body(json!({"object": "list", "data": data, "model": body["model"]}).to_string())
}

/// Starts the fake OpenAI-compatible embedding server; returns its `/v1` base URL.
async fn fake_openai(state: SharedFake) -> String {
    let address = crate::helpers::serve_on_loopback(
        Route::new()
            .at("/v1/embeddings", post(fake_embeddings))
            .data(state),
    );
    format!("http://{address}/v1")
}

#[tokio::test]
async fn search_knowledge_embeds_the_query_once_per_call() {
    let app = spawn_app_without_worker().await;
    let fake: SharedFake = Arc::default();
    let base_url = fake_openai(fake.clone()).await;
    let reply = app
        .post(
            "/embedding-models",
            &json!({
                "name": "remote",
                "provider": "openai",
                "model_name": "text-embedding-3-small",
                "parameters": {"base_url": base_url, "api_key": FAKE_API_KEY, "dimensions": 12},
            }),
        )
        .await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
    let model = str_of(&reply.body, "id").to_owned();
    let pipeline = app
        .new_pipeline(json!({"embedding_model_id": model, "has_full_text_search": true}))
        .await;
    let pid = str_of(&pipeline, "id").to_owned();
    let document = app.submit_text(&pid, "harbour", HARBOUR).await;
    assert_eq!(app.step().await.stored, 1);
    let requests = || fake.lock().expect("fake state").requests.clone();
    assert_eq!(
        requests().last(),
        Some(&vec![HARBOUR.to_owned()]),
        "the document was embedded by the fake server"
    );

    let client = connect(&app).await;
    for (kind, query) in [
        ("similarity", "Zanzibar harbour"),
        ("mmr", "cargo manifests"),
        ("search", "harbour"),
    ] {
        let before = requests().len();
        let output = call_ok(
            &client,
            "search_knowledge",
            json!({"pipeline_id": pid, "query": query, "classifications": ["public"], "type": kind}),
        )
        .await;
        let results = output["results"].as_array().expect("results");
        assert_eq!(results.len(), 1, "{kind}: {output}");
        assert_eq!(results[0]["document_id"], document["id"], "{kind}");
        let seen = requests();
        assert_eq!(
            seen[before..],
            [vec![query.to_owned()]],
            "{kind}: one embedding request, for the query"
        );
    }

    // REST embeds once too (full-text search does not embed).
    let before = requests().len();
    let hits = rest_search(
        &app,
        &pid,
        json!({"query": "Zanzibar harbour", "type": "similarity", "classification": ["public"]}),
    )
    .await;
    assert_eq!(hits.len(), 1);
    assert_eq!(requests()[before..], [vec!["Zanzibar harbour".to_owned()]]);
    let before = requests().len();
    let hits = rest_search(
        &app,
        &pid,
        json!({"query": "harbour", "type": "search", "classification": ["public"]}),
    )
    .await;
    assert_eq!(hits.len(), 1);
    assert_eq!(requests().len(), before);

    // A failing embedding server: -32603 with the failure's description.
    fake.lock().expect("fake state").broken = true;
    let error = call_error(
        &client,
        "search_knowledge",
        json!({"pipeline_id": pid, "query": "Zanzibar", "classifications": ["public"], "type": "similarity"}),
    )
    .await;
    assert_eq!(error.code.0, -32603, "{error:?}");
    assert!(
        error.message.starts_with("Failed computing embeddings: ")
            && error.message.contains("model crashed"),
        "{error:?}"
    );
    client.cancel().await.expect("close");
}
