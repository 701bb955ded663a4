//! The OpenAPI document of a deployment: the interface's (poem-openapi's, from the API types)
//! with each extension that is on described where it changes the interface, and nowhere else.
//! With no extension on, the interface's document is served unchanged.
//!
//! The request fields of an extension are in the API types for parsing, but skipped in their
//! schemas (`#[oai(skip)]`); [`document`] adds them when the extension is on, marked as such.
//! An extension's own operations (`conversations`) are described by a document of their own,
//! whose paths, schemas and tag [`document`] takes in.

use serde_json::{Map, Value, json};

use crate::config::{Extension, Extensions};
use crate::retrieval::kinds::{DEFAULT_HYBRID_FETCH_K, DEFAULT_RERANK_CANDIDATES, DEFAULT_RRF_K};

/// The document served at `/openapi.json` and shown by the references.
pub fn document(interface: &str, extensions: Extensions) -> String {
    if extensions == Extensions::NONE {
        return interface.to_owned();
    }
    let Ok(mut document) = serde_json::from_str::<Value>(interface) else {
        return interface.to_owned();
    };
    for extension in Extension::ALL {
        if extensions.has(extension) {
            describe(&mut document, extension);
        }
    }
    let on: Vec<&str> = Extension::ALL
        .into_iter()
        .filter(|e| extensions.has(*e))
        .map(Extension::name)
        .collect();
    if let Some(Value::String(description)) = document.pointer_mut("/info/description") {
        description.push_str(&format!(
            " Extensions of the interface on in this deployment: {}.",
            on.join(", ")
        ));
    }
    document.to_string()
}

/// The properties of a schema of `components/schemas`.
fn properties<'a>(document: &'a mut Value, schema: &str) -> Option<&'a mut Map<String, Value>> {
    document
        .pointer_mut(&format!("/components/schemas/{schema}/properties"))
        .and_then(Value::as_object_mut)
}

/// Appends `text` to the description of a schema of `components/schemas`.
fn describe_schema(document: &mut Value, schema: &str, text: &str) {
    if let Some(Value::Object(object)) =
        document.pointer_mut(&format!("/components/schemas/{schema}"))
    {
        let description = object
            .entry("description")
            .or_insert_with(|| Value::String(String::new()));
        if let Value::String(description) = description {
            if !description.is_empty() {
                description.push(' ');
            }
            description.push_str(text);
        }
    }
}

fn describe(document: &mut Value, extension: Extension) {
    match extension {
        Extension::Hybrid => describe_hybrid(document),
        Extension::Conversations => {
            add_operations(document, &super::contexts::openapi_document());
            describe_memory(document);
            describe_enriched_completions(document);
        }
    }
}

/// Takes in the paths, schemas and tags of `operations`, the document of an extension's own
/// operations (whose descriptions say which extension they belong to). A schema both
/// documents name (a shared type, such as `RoleName`) is the interface's already.
fn add_operations(document: &mut Value, operations: &str) {
    let Ok(mut operations) = serde_json::from_str::<Value>(operations) else {
        return;
    };
    for pointer in ["/paths", "/components/schemas"] {
        let (Some(Value::Object(target)), Some(Value::Object(source))) = (
            document.pointer_mut(pointer),
            operations.pointer_mut(pointer).map(Value::take),
        ) else {
            continue;
        };
        for (name, item) in source {
            target.entry(name).or_insert(item);
        }
    }
    let (Some(Value::Array(tags)), Some(Value::Array(added))) = (
        document.pointer_mut("/tags"),
        operations.pointer_mut("/tags").map(Value::take),
    ) else {
        return;
    };
    for tag in added {
        if !tags.iter().any(|known| known["name"] == tag["name"]) {
            tags.push(tag);
        }
    }
    // The interface's tags are in name order; the added ones join them there.
    tags.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
}

/// `hybrid` searches and placeholders: the fusion parameters, the ranks of each list.
fn describe_hybrid(document: &mut Value) {
    let fusion = [
        (
            "rrf_k",
            json!({
                "type": "number",
                "format": "double",
                "exclusiveMinimum": true,
                "minimum": 0,
                "description": format!(
                    "Extension `hybrid`: the constant k of reciprocal rank fusion \
                     (score = Σ weight / (k + rank)); default {DEFAULT_RRF_K}."
                ),
            }),
        ),
        (
            "similarity_weight",
            json!({
                "type": "number",
                "format": "double",
                "minimum": 0,
                "description": "Extension `hybrid`: the weight of the vector list; default 1 \
                                (not 0 together with `full_text_weight`).",
            }),
        ),
        (
            "full_text_weight",
            json!({
                "type": "number",
                "format": "double",
                "minimum": 0,
                "description": "Extension `hybrid`: the weight of the lexical list; default 1.",
            }),
        ),
    ];
    let rerank = [
        (
            "rerank",
            json!({
                "type": "string",
                "format": "uuid",
                "description": "Extension `hybrid`, similarity and hybrid: the id of an LLM \
                                registered with the provider `cohere` or `tei` that reorders the \
                                first results; `score` becomes its relevance (higher is better).",
            }),
        ),
        (
            "rerank_candidates",
            json!({
                "type": "integer",
                "format": "uint16",
                "minimum": 1,
                "maximum": 1000,
                "description": format!(
                    "Extension `hybrid`: how many of the first results go to the reranker; \
                     default {DEFAULT_RERANK_CANDIDATES}."
                ),
            }),
        ),
    ];
    for schema in ["SearchParams", "PlaceholderParams"] {
        if let Some(properties) = properties(document, schema) {
            for (name, property) in fusion.iter().chain(&rerank) {
                properties.insert((*name).to_owned(), property.clone());
            }
            if let Some(Value::Object(fetch_k)) = properties.get_mut("fetch_k") {
                fetch_k.insert(
                    "description".to_owned(),
                    json!(format!(
                        "MMR candidates; with the extension `hybrid`, a hybrid search's \
                         candidates per list (default {DEFAULT_HYBRID_FETCH_K} whenever \
                         omitted, never fewer than k)."
                    )),
                );
            }
        }
    }
    if let Some(properties) = properties(document, "Fragment") {
        for (name, list) in [("similarity_rank", "vector"), ("full_text_rank", "lexical")] {
            properties.insert(
                name.to_owned(),
                json!({
                    "type": "integer",
                    "format": "int64",
                    "nullable": true,
                    "description": format!(
                        "Extension `hybrid`, hybrid search results only: the fragment's rank in \
                         the {list} list, from 1; null when absent from it."
                    ),
                }),
            );
        }
    }
    describe_schema(
        document,
        "SearchKind",
        "With the extension `hybrid`: `hybrid` fuses the similarity list and a full-text list \
         of fragments holding any word of the query by reciprocal rank (score: higher is \
         better); it needs an embedding model and full-text search.",
    );
    if let Some(Value::Array(providers)) =
        document.pointer_mut("/components/schemas/LlmProviderName/enum")
    {
        providers.extend([json!("cohere"), json!("tei")]);
    }
    describe_schema(
        document,
        "LlmProviderName",
        "With the extension `hybrid`: `cohere` (`POST <endpoint>/rerank` with `{model, query, \
         documents, top_n}`; `model` required) and `tei` (text-embeddings-inference) register \
         rerankers, which searches name in `params.rerank` and chats refuse.",
    );
    if let Some(Value::Object(ok)) =
        document.pointer_mut("/paths/~1pipelines~1{pipeline_id}~1search/post/responses/200")
    {
        ok.insert(
            "headers".to_owned(),
            json!({"x-trove-rerank": {
                "description": "Extension `hybrid`: `skipped` when the search's reranker failed \
                                (timeout, refused connection, non-2xx answer, malformed body) and \
                                the results keep their order before reranking.",
                "schema": {"type": "string"},
            }}),
        );
    }
    describe_schema(
        document,
        "PlaceholderTypeName",
        "With the extension `hybrid`, `hybrid` placeholders are retrieval placeholders.",
    );
}

/// The schemas of the interface that [`describe_memory`] describes further.
const MEMORY_SCHEMAS: [&str; 2] = ["PlaceholderTypeName", "PlaceholderParams"];

/// `history` placeholders and executions with a context (`x-context-id`).
fn describe_memory(document: &mut Value) {
    if let Some(Value::Array(parameters)) =
        document.pointer_mut("/paths/~1agents~1{agent_id}~1execute/post/parameters")
    {
        parameters.push(json!({
            "name": super::agents::CONTEXT_HEADER,
            "in": "header",
            "required": false,
            "deprecated": false,
            "explode": true,
            "description": "Extension `conversations`: a context of the calling key (else 404 \
                            `Context not found`; not a UUID: 400 `Invalid context ID`). Its \
                            most recent messages fill the `history` placeholder, and once the \
                            answer is complete the user's turn and the answer are appended to \
                            it.",
            "schema": {"type": "string", "format": "uuid"},
        }));
    }
    describe_schema(
        document,
        MEMORY_SCHEMAS[0],
        "With the extension `conversations`, `history` placeholders (at most one per agent) \
         hold the most recent messages of the execution's context (`x-context-id`; none \
         without): a message whose template is only `{history}` becomes those messages, one \
         per message with its role; elsewhere `{history}` becomes `role: content` lines.",
    );
    describe_schema(
        document,
        MEMORY_SCHEMAS[1],
        "Extension `conversations`, `history` placeholders: only `k`, how many of the most \
         recent messages (1 to 1000, default 10).",
    );
}

/// The relay's path in the document.
const RELAY: &str = "/paths/~1compat~1v1~1chat~1completions/post";

/// Enriched chat completions: the relay with `X-Agent-Id`, `X-Pipeline-Id` and
/// `X-Pipeline-Classification` runs an agent and answers in the chat-completions form.
fn describe_enriched_completions(document: &mut Value) {
    let Some(Value::Object(operation)) = document.pointer_mut(RELAY) else {
        return;
    };
    let header = |name: &str, description: &str, schema: Value| {
        json!({
            "name": name,
            "in": "header",
            "required": false,
            "deprecated": false,
            "explode": true,
            "description": description,
            "schema": schema,
        })
    };
    let uuid = || json!({"type": "string", "format": "uuid"});
    let parameters = operation
        .entry("parameters")
        .or_insert_with(|| Value::Array(Vec::new()));
    if let Value::Array(parameters) = parameters {
        parameters.extend([
            header(
                "X-Agent-Id",
                "Extension `conversations`: the agent of an enriched completion (R|X; not a \
                 UUID: 400 `Invalid agent ID`).",
                uuid(),
            ),
            header(
                "X-Pipeline-Id",
                "Extension `conversations`: the pipeline it retrieves from (R|X; not a UUID: \
                 400 `Invalid pipeline ID`).",
                uuid(),
            ),
            header(
                "X-Pipeline-Classification",
                "Extension `conversations`: the classifications it retrieves, names separated \
                 by commas (hierarchical matching, undefined names ignored).",
                json!({"type": "string"}),
            ),
        ]);
    }
    if let Some(Value::String(description)) = operation.get_mut("description") {
        description.push_str(
            "\n\nExtension `conversations`: with all three headers, an enriched completion \
             instead of 501. The agent runs as an execution against the pipeline and the LLM \
             (R|X on each): the last `user` message is the value of its one query variable \
             (more than one: 400 `Invalid parameter`, `Missing prompt variables: <names>`), \
             the messages before it fill its `history` placeholder (its `k` most recent; \
             without one they are not sent), retrieval uses the classifications of \
             `X-Pipeline-Classification` and the body's `filters` (as in an execution). The \
             answer is a `chat.completion` object, or with `stream` true server-sent \
             `chat.completion.chunk` objects ending with `data: [DONE]`; `usage` when the \
             model reports it. Errors are the interface's JSON errors; nothing is stored.",
        );
    }
    if let Some(Value::Object(answer)) = operation
        .get_mut("responses")
        .and_then(|responses| responses.get_mut("default"))
    {
        if let Some(Value::Object(content)) = answer.get_mut("content") {
            content.insert(
                "text/event-stream".to_owned(),
                json!({"schema": {"type": "string"}}),
            );
        }
        if let Some(Value::String(description)) = answer.get_mut("description") {
            description.push_str(
                "; with the extension `conversations` and the enrichment headers, the agent's \
                 answer as `chat.completion` (JSON) or `chat.completion.chunk` events \
                 (`text/event-stream`)",
            );
        }
    }
}

#[cfg(test)]
#[expect(clippy::unwrap_used, reason = "tests fail loudly")]
mod tests {
    use super::*;

    #[test]
    fn without_extensions_the_interface_document_is_served_unchanged() {
        let interface = super::super::openapi_document();
        assert_eq!(document(&interface, Extensions::NONE), interface);
    }

    #[test]
    fn the_hybrid_extension_is_described_where_it_changes_the_interface() {
        let interface = super::super::openapi_document();
        let on: Value = serde_json::from_str(&document(
            &interface,
            Extensions::NONE.with(Extension::Hybrid),
        ))
        .unwrap();
        let off: Value = serde_json::from_str(&interface).unwrap();
        for schema in ["SearchParams", "PlaceholderParams"] {
            let path = format!("/components/schemas/{schema}/properties/rrf_k");
            assert!(on.pointer(&path).is_some(), "{path}");
            assert!(off.pointer(&path).is_none(), "{path}");
        }
        assert!(
            on.pointer("/components/schemas/Fragment/properties/similarity_rank")
                .is_some()
        );
        assert!(
            on["info"]["description"]
                .as_str()
                .unwrap()
                .ends_with("Extensions of the interface on in this deployment: hybrid.")
        );
        assert!(on.pointer("/paths/~1contexts").is_none());
    }

    /// The relay's operation with the extension `conversations` is an artifact like the
    /// interface's document: a change to it must be reviewed and accepted.
    #[test]
    fn the_conversations_extension_describes_enriched_completions() {
        let interface = super::super::openapi_document();
        let off: Value = serde_json::from_str(&interface).unwrap();
        let on: Value = serde_json::from_str(&document(
            &interface,
            Extensions::NONE.with(Extension::Conversations),
        ))
        .unwrap();
        assert!(off.pointer(&format!("{RELAY}/parameters")).is_none());
        let relay = on.pointer(RELAY).unwrap();
        insta::with_settings!({
            snapshot_path => concat!(env!("CARGO_MANIFEST_DIR"), "/snapshots"),
            prepend_module_to_snapshot => false,
        }, {
            insta::assert_json_snapshot!("openapi_conversations_relay", relay);
        });
    }

    #[test]
    fn the_conversations_extension_adds_its_operations_schemas_and_tag() {
        let interface = super::super::openapi_document();
        let off: Value = serde_json::from_str(&interface).unwrap();
        let on: Value = serde_json::from_str(&document(
            &interface,
            Extensions::NONE.with(Extension::Conversations),
        ))
        .unwrap();
        let paths = [
            "/contexts",
            "/contexts/{context_id}",
            "/contexts/{context_id}/messages",
            "/contexts/{context_id}/messages/{message_id}",
        ];
        for path in paths {
            let pointer = format!("/paths/{}", path.replace('/', "~1"));
            assert!(off.pointer(&pointer).is_none(), "{path}");
            let operations = on
                .pointer(&pointer)
                .and_then(Value::as_object)
                .unwrap_or_else(|| panic!("{path}"));
            for (method, operation) in operations {
                let description = operation["description"].as_str().unwrap_or_default();
                assert!(
                    description.starts_with("Extension `conversations`."),
                    "{method} {path}: {description:?}"
                );
            }
        }
        for schema in [
            "Context",
            "ContextMessage",
            "ContextList",
            "CreateContextBody",
        ] {
            let pointer = format!("/components/schemas/{schema}");
            assert!(off.pointer(&pointer).is_none(), "{schema}");
            assert!(on.pointer(&pointer).is_some(), "{schema}");
        }
        // Every schema of the interface is kept as it was, but those `history` placeholders
        // change, which say so.
        for (name, schema) in off["components"]["schemas"].as_object().unwrap() {
            if MEMORY_SCHEMAS.contains(&name.as_str()) {
                let description = on["components"]["schemas"][name]["description"].as_str();
                assert!(
                    description.unwrap().contains("Extension `conversations`")
                        || description.unwrap().contains("extension `conversations`"),
                    "{name}"
                );
            } else {
                assert_eq!(&on["components"]["schemas"][name], schema, "{name}");
            }
        }
        let execute = "/paths/~1agents~1{agent_id}~1execute/post/parameters";
        let header = |document: &Value| {
            document
                .pointer(execute)
                .unwrap()
                .as_array()
                .unwrap()
                .iter()
                .any(|parameter| parameter["name"] == "x-context-id" && parameter["in"] == "header")
        };
        assert!(header(&on) && !header(&off));
        let tags: Vec<&str> = on["tags"]
            .as_array()
            .unwrap()
            .iter()
            .map(|tag| tag["name"].as_str().unwrap())
            .collect();
        assert!(tags.contains(&"Conversations"), "{tags:?}");
        assert!(tags.is_sorted(), "{tags:?}");
        assert!(
            on["info"]["description"]
                .as_str()
                .unwrap()
                .ends_with("Extensions of the interface on in this deployment: conversations.")
        );
    }
}
