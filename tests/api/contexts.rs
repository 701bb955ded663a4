//! Conversation contexts and their messages (extension `conversations`): with the switch off
//! their routes are unknown paths and the document is the interface's; with it on, contexts
//! owned by their key, messages encrypted at rest, lists, errors, deletions and retention.

use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use uuid::Uuid;

use crate::helpers::{
    AppOptions, Reply, TestApp, assert_error, assert_invalid_order_by, assert_invalid_parameter,
    assert_not_found_with_id, assert_plain, assert_text, assert_utc_timestamp,
    ends_with_line_column, eventually, ids, keys_of, spawn_app_with_license,
    spawn_app_without_worker_with, str_of,
};

/// An API key as `(id, secret)`.
type Key = (String, String);

/// An app with the extension on, and with `extra` environment values.
async fn conversations_app(extra: &[(&str, &str)]) -> TestApp {
    let mut env = vec![("TROVE_EXTENSIONS", "conversations")];
    env.extend_from_slice(extra);
    spawn_app_without_worker_with(&env).await
}

/// A key without any permission.
async fn plain_key(app: &TestApp) -> Key {
    app.create_key(json!({}), json!([])).await
}

/// `POST /contexts` with `key`, expecting 201; the context.
async fn create_context(app: &TestApp, key: &Key, body: Value) -> Value {
    let reply = app.as_key(key).post("/contexts", &body).await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
    reply.body
}

/// An app with the extension on, a key without permissions and a context of that key made
/// from `body`: the app, the key, the context and its id.
async fn app_with_context(body: Value) -> (TestApp, Key, Value, String) {
    let app = conversations_app(&[]).await;
    let key = plain_key(&app).await;
    let context = create_context(&app, &key, body).await;
    let id = str_of(&context, "id").to_owned();
    (app, key, context, id)
}

/// `POST /contexts/{id}/messages` with `key`, expecting 201; the message.
async fn add_message(app: &TestApp, key: &Key, context: &str, role: &str, content: &str) -> Value {
    let reply = app
        .as_key(key)
        .post(
            &format!("/contexts/{context}/messages"),
            &json!({"role": role, "content": content}),
        )
        .await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
    reply.body
}

/// `GET path` with `key`, expecting 200; the body.
async fn ok_as(app: &TestApp, key: &Key, path: &str) -> Value {
    let reply = app.as_key(key).get(path).await;
    assert_eq!(reply.status, StatusCode::OK, "{path}: {}", reply.text);
    reply.body
}

/// The `name` of each context of a list (null for a context without one).
fn names(body: &Value) -> Vec<Option<String>> {
    body["data"]
        .as_array()
        .unwrap_or_else(|| panic!("no data: {body}"))
        .iter()
        .map(|c| c["name"].as_str().map(str::to_owned))
        .collect()
}

/// Names as [`names`] returns them.
fn named(list: &[&str]) -> Vec<Option<String>> {
    list.iter().map(|n| Some((*n).to_owned())).collect()
}

/// The `content` of each message of a list.
fn contents(body: &Value) -> Vec<String> {
    body["data"]
        .as_array()
        .unwrap_or_else(|| panic!("no data: {body}"))
        .iter()
        .map(|m| str_of(m, "content").to_owned())
        .collect()
}

fn uuid(text: &str) -> Uuid {
    Uuid::parse_str(text).unwrap_or_else(|e| panic!("{text}: {e}"))
}

/// The contexts of a key.
const CONTEXTS_OF_KEY: &str = "SELECT count(*) FROM contexts WHERE api_key_id = $1";
/// The messages of a context.
const MESSAGES_OF_CONTEXT: &str = "SELECT count(*) FROM context_messages WHERE context_id = $1";
/// One message.
const MESSAGE: &str = "SELECT count(*) FROM context_messages WHERE id = $1";

/// Sets a context's `updated_at` back by `hours`.
async fn age(app: &TestApp, context: &str, hours: i32) {
    sqlx::query(
        "UPDATE contexts SET updated_at = now() - make_interval(hours => $2) WHERE id = $1",
    )
    .bind(uuid(context))
    .bind(hours)
    .execute(&app.pool)
    .await
    .expect("age the context");
}

/// Every route of a context, as `(method, path, body)`.
fn routes_of(context: &str, message: &str) -> Vec<(Method, String, Option<Value>)> {
    let patch = json!({"name": "taken"});
    let post = json!({"role": "user", "content": "hello"});
    vec![
        (Method::GET, format!("/contexts/{context}"), None),
        (Method::PATCH, format!("/contexts/{context}"), Some(patch)),
        (Method::DELETE, format!("/contexts/{context}"), None),
        (Method::GET, format!("/contexts/{context}/messages"), None),
        (
            Method::POST,
            format!("/contexts/{context}/messages"),
            Some(post),
        ),
        (
            Method::DELETE,
            format!("/contexts/{context}/messages/{message}"),
            None,
        ),
    ]
}

async fn send(app: &TestApp, key: &Key, method: Method, path: &str, body: Option<&Value>) -> Reply {
    app.req(method, path)
        .as_key(key)
        .json_opt(body)
        .send()
        .await
}

// ---- The switch ---------------------------------------------------------------------------

#[tokio::test]
async fn with_the_extension_off_contexts_are_unknown_paths_and_the_document_is_the_interfaces() {
    for extensions in ["", "hybrid"] {
        let app = spawn_app_without_worker_with(&[("TROVE_EXTENSIONS", extensions)]).await;
        let master = app.master_key();
        let id = Uuid::now_v7().to_string();
        let mut routes = routes_of(&id, &id);
        routes.push((Method::GET, "/contexts".to_owned(), None));
        routes.push((Method::POST, "/contexts".to_owned(), Some(json!({}))));
        routes.push((Method::GET, "/contexts/not-a-uuid".to_owned(), None));
        for (method, path, body) in routes {
            let reply = send(&app, &master, method.clone(), &path, body.as_ref()).await;
            let unknown = send(
                &app,
                &master,
                method.clone(),
                "/no/such/path",
                body.as_ref(),
            )
            .await;
            assert_eq!(unknown.status, StatusCode::NOT_FOUND);
            assert_eq!(
                (reply.status, &reply.text, reply.header("x-request-id")),
                (unknown.status, &unknown.text, None),
                "{extensions:?}: {method} {path}"
            );
            assert_eq!(reply.header("content-type"), unknown.header("content-type"));
        }
        let document = app.req(Method::GET, "/openapi.json").send().await;
        if extensions.is_empty() {
            assert_eq!(document.text, trove::http::openapi_document());
        }
        assert!(document.body["paths"].get("/contexts").is_none());
        assert!(
            document.body["components"]["schemas"]
                .get("Context")
                .is_none()
        );
    }
}

#[tokio::test]
async fn with_the_extension_on_the_document_and_the_references_describe_contexts() {
    let app = conversations_app(&[]).await;
    let document = app.req(Method::GET, "/openapi.json").send().await.body;
    let interface: Value =
        serde_json::from_str(&trove::http::openapi_document()).expect("interface document");
    for path in [
        "/contexts",
        "/contexts/{context_id}",
        "/contexts/{context_id}/messages",
        "/contexts/{context_id}/messages/{message_id}",
    ] {
        let operations = document["paths"][path]
            .as_object()
            .unwrap_or_else(|| panic!("no {path}"));
        for (method, operation) in operations {
            assert!(
                operation["description"]
                    .as_str()
                    .unwrap_or_default()
                    .starts_with("Extension `conversations`."),
                "{method} {path}"
            );
            assert_eq!(operation["tags"], json!(["Conversations"]));
        }
    }
    // The interface's paths are all there, as they were, but for the header of an execution's
    // context added to the execution and the relay's enriched completions (see `enriched.rs`).
    let execute = "/agents/{agent_id}/execute";
    let relay = "/compat/v1/chat/completions";
    for (path, operations) in interface["paths"].as_object().expect("paths") {
        if path != execute && path != relay {
            assert_eq!(&document["paths"][path], operations, "{path}");
        }
    }
    let mut operation = document["paths"][execute]["post"].clone();
    let added = operation["parameters"]
        .as_array_mut()
        .expect("parameters")
        .pop()
        .expect("a parameter");
    assert_eq!(
        (&added["name"], &added["in"]),
        (&json!("x-context-id"), &json!("header"))
    );
    assert_eq!(operation, interface["paths"][execute]["post"]);
    assert_eq!(
        document["components"]["schemas"]["ContextMessage"]["properties"]["role"]["$ref"],
        "#/components/schemas/RoleName"
    );
    let page = app.req(Method::GET, "/docs").send().await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(page.text.contains("/contexts/{context_id}/messages"));
    // An API route: 405 with the accepted methods, a request id.
    let reply = app.req(Method::PUT, "/contexts").send().await;
    assert_eq!(reply.status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(reply.header("allow"), Some("GET,POST"));
}

// ---- Contexts -----------------------------------------------------------------------------

#[tokio::test]
async fn a_context_is_created_read_changed_and_deleted_with_every_field() {
    let app = conversations_app(&[]).await;
    let key = plain_key(&app).await;

    let reply = app.as_key(&key).post("/contexts", &json!({})).await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
    assert!(reply.header("x-request-id").is_some());
    let bare = reply.body;
    assert_eq!(
        keys_of(&bare),
        [
            "created_at",
            "description",
            "id",
            "metadata",
            "name",
            "updated_at"
        ]
    );
    assert_eq!(uuid(str_of(&bare, "id")).get_version_num(), 7);
    assert_eq!(
        (&bare["name"], &bare["description"], &bare["metadata"]),
        (&Value::Null, &Value::Null, &json!({}))
    );
    assert_eq!(
        assert_utc_timestamp(&bare["created_at"]),
        assert_utc_timestamp(&bare["updated_at"])
    );
    let nulls = create_context(
        &app,
        &key,
        json!({"name": null, "description": null, "metadata": null, "colour": "red"}),
    )
    .await;
    assert_eq!(keys_of(&nulls), keys_of(&bare));
    assert_eq!(nulls["metadata"], json!({}));

    let full = create_context(
        &app,
        &key,
        json!({"name": "Support call", "description": "Printer trouble",
               "metadata": {"ticket": 42, "tags": ["printer"], "customer": {"tier": "gold"}}}),
    )
    .await;
    assert_eq!(full["name"], "Support call");
    assert_eq!(full["description"], "Printer trouble");
    assert_eq!(
        full["metadata"],
        json!({"ticket": 42, "tags": ["printer"], "customer": {"tier": "gold"}})
    );
    let id = str_of(&full, "id").to_owned();
    let path = format!("/contexts/{id}");
    assert_eq!(ok_as(&app, &key, &path).await, full);

    // Omitted fields keep their values; `updated_at` moves, `created_at` does not.
    let renamed = app
        .as_key(&key)
        .patch(&path, &json!({"name": "Printer call"}))
        .await;
    assert_eq!(renamed.status, StatusCode::OK, "{}", renamed.text);
    let renamed = renamed.body;
    assert_eq!(renamed["name"], "Printer call");
    assert_eq!(renamed["description"], full["description"]);
    assert_eq!(renamed["metadata"], full["metadata"]);
    assert_eq!(renamed["created_at"], full["created_at"]);
    assert!(
        assert_utc_timestamp(&renamed["updated_at"]) > assert_utc_timestamp(&full["updated_at"])
    );
    // `null` clears the description and resets the metadata.
    let cleared = app
        .as_key(&key)
        .patch(&path, &json!({"description": null, "metadata": null}))
        .await
        .body;
    assert_eq!(cleared["name"], "Printer call");
    assert_eq!(cleared["description"], Value::Null);
    assert_eq!(cleared["metadata"], json!({}));
    let changed = app
        .as_key(&key)
        .patch(
            &path,
            &json!({"name": null, "description": "Again", "metadata": {"k": [1, 2]}}),
        )
        .await
        .body;
    assert_eq!(changed["name"], Value::Null);
    assert_eq!(changed["description"], "Again");
    assert_eq!(changed["metadata"], json!({"k": [1, 2]}));
    // `{}` changes nothing but `updated_at`.
    let touched = app.as_key(&key).patch(&path, &json!({})).await.body;
    assert_eq!(
        (
            &touched["name"],
            &touched["description"],
            &touched["metadata"]
        ),
        (
            &changed["name"],
            &changed["description"],
            &changed["metadata"]
        )
    );
    assert!(
        assert_utc_timestamp(&touched["updated_at"]) > assert_utc_timestamp(&changed["updated_at"])
    );
    assert_eq!(ok_as(&app, &key, &path).await, touched);

    let listed = ok_as(&app, &key, "/contexts").await;
    assert_eq!(listed["data"][2], touched, "the list shows the same object");

    let reply = app.as_key(&key).delete(&path).await;
    assert_text(&reply, StatusCode::NO_CONTENT, "");
    for method in [Method::GET, Method::DELETE] {
        let reply = send(&app, &key, method, &path, None).await;
        assert_not_found_with_id(&reply, "Context not found", &id);
    }
    let listed = ok_as(&app, &key, "/contexts").await;
    assert_eq!(ids(&listed), [str_of(&bare, "id"), str_of(&nulls, "id")]);
}

#[tokio::test]
async fn messages_are_added_listed_oldest_first_and_deleted() {
    let (app, key, context, id) = app_with_context(json!({"name": "chat"})).await;
    let messages_path = format!("/contexts/{id}/messages");
    let context_updated = |body: &Value| assert_utc_timestamp(&body["updated_at"]);

    let empty = ok_as(&app, &key, &messages_path).await;
    assert_eq!(empty["data"], json!([]));

    let mut previous = context_updated(&context);
    let mut messages = Vec::new();
    for (role, content) in [
        ("system", "You answer briefly."),
        ("user", "What is Trove?"),
        ("assistant", "A retrieval service."),
    ] {
        let message = add_message(&app, &key, &id, role, content).await;
        assert_eq!(
            keys_of(&message),
            [
                "content",
                "context_id",
                "created_at",
                "execution_id",
                "id",
                "role"
            ]
        );
        assert_eq!(
            (
                &message["role"],
                &message["content"],
                &message["context_id"]
            ),
            (&json!(role), &json!(content), &json!(id))
        );
        assert_eq!(message["execution_id"], Value::Null);
        assert_eq!(uuid(str_of(&message, "id")).get_version_num(), 7);
        // The context's `updated_at` moves to the message's time.
        let now = ok_as(&app, &key, &format!("/contexts/{id}")).await;
        assert!(context_updated(&now) > previous, "{role}");
        assert_eq!(
            context_updated(&now),
            assert_utc_timestamp(&message["created_at"])
        );
        previous = context_updated(&now);
        messages.push(message);
    }

    let listed = ok_as(&app, &key, &messages_path).await;
    assert_eq!(listed["data"], json!(messages), "oldest first, as posted");
    assert_eq!(listed["page_info"]["order_by"], Value::Null);
    assert_eq!(listed["query_info"], json!({}));
    let newest_first = ok_as(&app, &key, &format!("{messages_path}?order_by=-created_at")).await;
    assert_eq!(
        contents(&newest_first),
        [
            "A retrieval service.",
            "What is Trove?",
            "You answer briefly."
        ]
    );
    let by_id = ok_as(&app, &key, &format!("{messages_path}?order_by=id")).await;
    assert_eq!(by_id["data"], listed["data"], "ids are time-ordered");
    let users = ok_as(&app, &key, &format!("{messages_path}?role=user")).await;
    assert_eq!(contents(&users), ["What is Trove?"]);
    assert_eq!(users["query_info"], json!({"role": "user"}));
    let one = str_of(&messages[1], "id");
    let by_one = ok_as(&app, &key, &format!("{messages_path}?id={one}")).await;
    assert_eq!(contents(&by_one), ["What is Trove?"]);
    let first = str_of(&messages[0], "created_at");
    let later = ok_as(
        &app,
        &key,
        &format!("{messages_path}?created_at$gt={first}"),
    )
    .await;
    assert_eq!(contents(&later).len(), 2);
    let page = ok_as(&app, &key, &format!("{messages_path}?first=2")).await;
    assert_eq!(contents(&page), ["You answer briefly.", "What is Trove?"]);
    assert_eq!(page["page_info"]["has_next"], true);
    let after = str_of(&page["page_info"], "after");
    let rest = ok_as(
        &app,
        &key,
        &format!("{messages_path}?first=2&after={after}"),
    )
    .await;
    assert_eq!(contents(&rest), ["A retrieval service."]);
    assert_eq!(rest["page_info"]["has_next"], false);
    let offset = ok_as(
        &app,
        &key,
        &format!("{messages_path}?limit=1&offset=1&count=true"),
    )
    .await;
    assert_eq!(contents(&offset), ["What is Trove?"]);
    assert_eq!(offset["page_info"]["count"], 3);
    let reply = app
        .as_key(&key)
        .get(&format!("{messages_path}?order_by=content"))
        .await;
    assert_invalid_order_by(&reply, json!(["content"]));
    let reply = app
        .as_key(&key)
        .get(&format!("{messages_path}?first=1&offset=1"))
        .await;
    assert_error(&reply, StatusCode::BAD_REQUEST, "Pagination error");

    // Deleting a message moves the context's `updated_at`; an unknown one changes nothing.
    let gone = str_of(&messages[1], "id").to_owned();
    let message_path = format!("{messages_path}/{gone}");
    let reply = app.as_key(&key).delete(&message_path).await;
    assert_text(&reply, StatusCode::NO_CONTENT, "");
    let after_delete = ok_as(&app, &key, &format!("/contexts/{id}")).await;
    assert!(context_updated(&after_delete) > previous);
    let listed = ok_as(&app, &key, &messages_path).await;
    assert_eq!(
        contents(&listed),
        ["You answer briefly.", "A retrieval service."]
    );
    let reply = app.as_key(&key).delete(&message_path).await;
    assert_not_found_with_id(&reply, "Message not found", &gone);
    // A message of another context is not found in this one.
    let other = create_context(&app, &key, json!({})).await;
    let kept = str_of(&messages[0], "id");
    let reply = app
        .as_key(&key)
        .delete(&format!(
            "/contexts/{}/messages/{kept}",
            str_of(&other, "id")
        ))
        .await;
    assert_not_found_with_id(&reply, "Message not found", kept);
    assert_eq!(app.count(MESSAGE, kept).await, 1);
    let unchanged = ok_as(&app, &key, &format!("/contexts/{id}")).await;
    assert_eq!(unchanged["updated_at"], after_delete["updated_at"]);
}

#[tokio::test]
async fn the_context_list_pages_filters_and_orders_like_the_other_lists() {
    let app = conversations_app(&[]).await;
    let key = plain_key(&app).await;
    let mut created = Vec::new();
    for (name, description) in [
        (json!("alpha"), json!("first of all")),
        (json!("bravo"), Value::Null),
        (json!("charlie"), json!("third of all")),
        (json!("delta"), Value::Null),
        (Value::Null, json!("nameless")),
    ] {
        created.push(
            create_context(
                &app,
                &key,
                json!({"name": name, "description": description}),
            )
            .await,
        );
    }
    let all: Vec<String> = created.iter().map(|c| str_of(c, "id").to_owned()).collect();
    let list = |query: &str| {
        let path = format!("/contexts?{query}");
        let app = &app;
        let key = &key;
        async move { ok_as(app, key, &path).await }
    };

    // Default: cursor mode, id order (creation order: ids are time-ordered).
    let body = list("").await;
    assert_eq!(ids(&body), all);
    assert_eq!(body["page_info"]["has_next"], false);
    assert_eq!(body["page_info"]["order_by"], Value::Null);
    assert_eq!(body["query_info"], json!({}));
    let mut seen = Vec::new();
    let mut query = "first=2".to_owned();
    loop {
        let body = list(&query).await;
        seen.extend(ids(&body));
        if body["page_info"]["has_next"] == false {
            break;
        }
        assert!(seen.len() < 10, "paging does not end");
        query = format!("first=2&after={}", str_of(&body["page_info"], "after"));
    }
    assert_eq!(seen, all);
    let body = list("last=2").await;
    assert_eq!(ids(&body), all[3..].to_vec());
    let body = list(&format!(
        "last=2&before={}",
        str_of(&body["page_info"], "before")
    ))
    .await;
    assert_eq!(ids(&body), all[1..3].to_vec());
    let body = list("first=0").await;
    assert_eq!(
        (&body["data"], &body["page_info"]["has_next"]),
        (&json!([]), &json!(true))
    );
    let body = list("limit=2&offset=2&count=true").await;
    assert_eq!(ids(&body), all[2..4].to_vec());
    assert_eq!(
        body["page_info"],
        json!({"limit": 2, "offset": 2, "order_by": null, "count": 5})
    );

    // Filters.
    let body = list(&format!("id={}", all[2])).await;
    assert_eq!(names(&body), named(&["charlie"]));
    assert_eq!(body["query_info"], json!({"id": all[2]}));
    let body = list("name=bravo").await;
    assert_eq!(names(&body), named(&["bravo"]));
    let body = list("name$contains=a&name$contains=l").await;
    assert_eq!(names(&body), named(&["alpha", "charlie", "delta"]));
    assert_eq!(body["query_info"], json!({"name$contains": ["a", "l"]}));
    let body = list("name$startswith=ch").await;
    assert_eq!(names(&body), named(&["charlie"]));
    let body = list("name$gt=bravo").await;
    assert_eq!(names(&body), named(&["charlie", "delta"]));
    let body = list("name$ge=bravo&name$lt=delta").await;
    assert_eq!(names(&body), named(&["bravo", "charlie"]));
    let body = list("name$le=bravo").await;
    assert_eq!(names(&body), named(&["alpha", "bravo"]));
    let body = list("description=nameless").await;
    assert_eq!(names(&body), vec![None]);
    let body = list("description$contains=of%20all").await;
    assert_eq!(names(&body), named(&["alpha", "charlie"]));
    let pivot = str_of(&created[2], "created_at");
    let body = list(&format!("created_at$gt={pivot}")).await;
    assert_eq!(ids(&body), all[3..].to_vec());
    let body = list(&format!(
        "created_at$ge={pivot}&created_at$lt={}",
        str_of(&created[4], "created_at")
    ))
    .await;
    assert_eq!(ids(&body), all[2..4].to_vec());
    let body = list(&format!("created_at$le={pivot}")).await;
    assert_eq!(ids(&body), all[..3].to_vec());
    let body = list(&format!("created_at={pivot}")).await;
    assert_eq!(ids(&body), [all[2].clone()]);
    // Adding a message to the first context makes it the most recently updated.
    let message = add_message(&app, &key, &all[0], "user", "hi").await;
    let touched = str_of(&message, "created_at");
    let body = list(&format!("updated_at={touched}")).await;
    assert_eq!(ids(&body), [all[0].clone()]);
    let body = list(&format!("updated_at$ge={touched}")).await;
    assert_eq!(ids(&body), [all[0].clone()]);
    let body = list(&format!(
        "updated_at$lt={touched}&updated_at$gt=2000-01-01T00:00:00Z"
    ))
    .await;
    assert_eq!(ids(&body), all[1..].to_vec());
    let body = list(&format!("updated_at$le={touched}&count=true")).await;
    assert_eq!(body["page_info"]["count"], 5);

    // Orders.
    let body = list("order_by=name").await;
    let mut ascending = named(&["alpha", "bravo", "charlie", "delta"]);
    ascending.push(None);
    assert_eq!(names(&body), ascending);
    assert_eq!(body["page_info"]["order_by"], json!(["name"]));
    let body = list("order_by=-name").await;
    let mut descending = ascending.clone();
    descending.reverse();
    assert_eq!(names(&body), descending);
    let body = list("order_by=-created_at").await;
    let mut reversed = all.clone();
    reversed.reverse();
    assert_eq!(ids(&body), reversed);
    let body = list("order_by=-updated_at&order_by=id").await;
    assert_eq!(ids(&body)[0], all[0]);
    assert_eq!(body["page_info"]["order_by"], json!(["-updated_at", "id"]));
    let body = list("order_by=-id").await;
    assert_eq!(ids(&body), reversed);
    let body = list("order_by=name&order_by=id&first=2").await;
    let body = list(&format!(
        "order_by=name&order_by=id&first=10&after={}",
        str_of(&body["page_info"], "after")
    ))
    .await;
    assert_eq!(names(&body), ascending[2..].to_vec());

    // Errors, as every list answers them.
    let reply = app
        .as_key(&key)
        .get("/contexts?order_by=description&order_by=metadata")
        .await;
    assert_invalid_order_by(&reply, json!(["description", "metadata"]));
    let reply = app.as_key(&key).get("/contexts?order_by=+name").await;
    assert_error(
        &reply,
        StatusCode::BAD_REQUEST,
        "Invalid order_by parameter",
    );
    for query in [
        "first=1&limit=1",
        "first=1&last=1",
        "after=zzz",
        "last=1&offset=1",
    ] {
        let reply = app.as_key(&key).get(&format!("/contexts?{query}")).await;
        assert_error(&reply, StatusCode::BAD_REQUEST, "Pagination error");
        assert!(reply.body["error"].get("details").is_none(), "{query}");
    }
    for query in [
        "first=-1",
        "id=123",
        "created_at$gt=2024-01-01",
        "name=a&name=b",
    ] {
        let reply = app.as_key(&key).get(&format!("/contexts?{query}")).await;
        assert_plain(
            &reply,
            StatusCode::BAD_REQUEST,
            "Failed to deserialize query string",
        );
    }
    let body = list("colour=blue&metadata=x").await;
    assert_eq!(ids(&body), all, "unknown parameters are ignored");
    assert_eq!(body["query_info"], json!({}));
}

// ---- Ownership ----------------------------------------------------------------------------

#[tokio::test]
async fn only_the_owner_finds_its_contexts_whatever_the_permissions() {
    let (app, owner, context, id) = app_with_context(json!({"name": "private"})).await;
    let message = add_message(&app, &owner, &id, "user", "secret question").await;
    let message_id = str_of(&message, "id").to_owned();
    let before = ok_as(&app, &owner, &format!("/contexts/{id}")).await;

    // Another key, one holding every permission on both types, and the master key.
    let other = plain_key(&app).await;
    let granted = app
        .create_key(json!({"contexts": 7, "context-messages": 7}), json!([]))
        .await;
    let master = app.master_key();
    for key in [&other, &granted, &master] {
        for (method, path, body) in routes_of(&id, &message_id) {
            let reply = send(&app, key, method.clone(), &path, body.as_ref()).await;
            assert_not_found_with_id(&reply, "Context not found", &id);
            assert!(reply.header("x-request-id").is_some(), "{method} {path}");
        }
        let listed = ok_as(&app, key, "/contexts?count=true").await;
        assert_eq!(listed["data"], json!([]));
        assert_eq!(listed["page_info"]["count"], 0);
    }
    // Nothing changed for the owner.
    assert_eq!(
        ok_as(&app, &owner, &format!("/contexts/{id}")).await,
        before
    );
    let messages = ok_as(&app, &owner, &format!("/contexts/{id}/messages")).await;
    assert_eq!(messages["data"], json!([message]));

    // Each key lists its own.
    let mine = create_context(&app, &other, json!({"name": "mine"})).await;
    let masters = create_context(&app, &master, json!({"name": "master's"})).await;
    for (key, own) in [(&owner, &context), (&other, &mine), (&master, &masters)] {
        let listed = ok_as(&app, key, "/contexts").await;
        assert_eq!(ids(&listed), [str_of(own, "id")]);
    }
    let reply = app
        .as_key(&owner)
        .get(&format!("/contexts/{}", str_of(&mine, "id")))
        .await;
    assert_not_found_with_id(&reply, "Context not found", str_of(&mine, "id"));
}

#[tokio::test]
async fn deleting_a_key_deletes_its_contexts_and_their_messages() {
    let app = conversations_app(&[]).await;
    let leaving = plain_key(&app).await;
    let staying = plain_key(&app).await;
    let doomed = create_context(&app, &leaving, json!({})).await;
    let doomed = str_of(&doomed, "id").to_owned();
    add_message(&app, &leaving, &doomed, "user", "bye").await;
    let kept = create_context(&app, &staying, json!({})).await;
    let kept = str_of(&kept, "id").to_owned();
    add_message(&app, &staying, &kept, "user", "still here").await;

    let reply = app.delete(&format!("/api-keys/{}", leaving.0)).await;
    assert_eq!(reply.status, StatusCode::NO_CONTENT, "{}", reply.text);
    assert_eq!(app.count(CONTEXTS_OF_KEY, &leaving.0).await, 0);
    assert_eq!(app.count(MESSAGES_OF_CONTEXT, &doomed).await, 0);
    let listed = ok_as(&app, &staying, &format!("/contexts/{kept}/messages")).await;
    assert_eq!(contents(&listed), ["still here"]);
}

#[tokio::test]
async fn deleting_a_context_deletes_its_messages() {
    let (app, key, _, id) = app_with_context(json!({})).await;
    for content in ["one", "two"] {
        add_message(&app, &key, &id, "user", content).await;
    }
    assert_eq!(app.count(MESSAGES_OF_CONTEXT, &id).await, 2);
    let reply = app.as_key(&key).delete(&format!("/contexts/{id}")).await;
    assert_eq!(reply.status, StatusCode::NO_CONTENT);
    assert_eq!(app.count(MESSAGES_OF_CONTEXT, &id).await, 0);
    let reply = app
        .as_key(&key)
        .get(&format!("/contexts/{id}/messages"))
        .await;
    assert_not_found_with_id(&reply, "Context not found", &id);
}

// ---- At rest ------------------------------------------------------------------------------

#[tokio::test]
async fn message_content_is_encrypted_at_rest() {
    let (app, key, _, id) = app_with_context(json!({})).await;
    let text = "The launch code is 0000 and the plan is secret.";
    let message = add_message(&app, &key, &id, "user", text).await;
    let stored: Vec<u8> = sqlx::query_scalar("SELECT content FROM context_messages WHERE id = $1")
        .bind(uuid(str_of(&message, "id")))
        .fetch_one(&app.pool)
        .await
        .expect("stored content");
    // A 12-byte nonce, the ciphertext and a 16-byte tag; no trace of the text.
    assert_eq!(stored.len(), 12 + text.len() + 16);
    assert!(!stored.windows(6).any(|w| w == b"launch" || w == b"secret"));
    assert_eq!(
        app.state.cipher.decrypt_text(&stored).expect("decrypt"),
        text
    );
}

// ---- Bad input ----------------------------------------------------------------------------

#[tokio::test]
async fn nul_characters_are_refused_and_nothing_is_stored() {
    let (app, key, context, id) = app_with_context(json!({"name": "n"})).await;
    for (body, field) in [
        (json!({"name": "a\u{0}b"}), "name"),
        (json!({"description": "\u{0}"}), "description"),
        (json!({"metadata": {"note": "x\u{0}"}}), "metadata.note"),
    ] {
        let reason = format!("{field} contains the NUL character (U+0000)");
        let reply = app.as_key(&key).post("/contexts", &body).await;
        assert_invalid_parameter(&reply, &reason);
        let reply = app
            .as_key(&key)
            .patch(&format!("/contexts/{id}"), &body)
            .await;
        assert_invalid_parameter(&reply, &reason);
    }
    let reply = app
        .as_key(&key)
        .post(
            &format!("/contexts/{id}/messages"),
            &json!({"role": "user", "content": "before\u{0}after"}),
        )
        .await;
    assert_invalid_parameter(&reply, "content contains the NUL character (U+0000)");
    assert_eq!(app.count(CONTEXTS_OF_KEY, &key.0).await, 1);
    assert_eq!(app.count(MESSAGES_OF_CONTEXT, &id).await, 0);
    assert_eq!(ok_as(&app, &key, &format!("/contexts/{id}")).await, context);
}

#[tokio::test]
async fn bad_bodies_and_ids_answer_as_the_interface_says_and_store_nothing() {
    let (app, key, _, id) = app_with_context(json!({})).await;
    let messages = format!("/contexts/{id}/messages");

    let unprocessable = "Failed to deserialize the JSON body into the target type: ";
    for (body, reason) in [
        (json!({"content": "x"}), "missing field `role`"),
        (json!({"role": "user"}), "missing field `content`"),
        (
            json!({"role": "bot", "content": "x"}),
            "unknown variant `bot`, expected one of `system`, `user`, `assistant`",
        ),
        (
            json!({"role": "User", "content": "x"}),
            "unknown variant `User`, expected one of `system`, `user`, `assistant`",
        ),
        (
            json!({"role": "user", "content": 5}),
            "invalid type: integer `5`, expected a string",
        ),
        (
            json!({"role": "user", "content": null}),
            "invalid type: null, expected a string",
        ),
    ] {
        let reply = app.as_key(&key).post(&messages, &body).await;
        assert_plain(
            &reply,
            StatusCode::UNPROCESSABLE_ENTITY,
            &format!("{unprocessable}{reason}"),
        );
        assert!(ends_with_line_column(&reply.text), "{}", reply.text);
    }
    for (body, reason) in [
        (
            json!({"name": 5}),
            "invalid type: integer `5`, expected a string",
        ),
        (
            json!({"metadata": [1]}),
            "invalid type: sequence, expected a map",
        ),
        (
            json!({"metadata": "x"}),
            "invalid type: string \"x\", expected a map",
        ),
    ] {
        let reply = app.as_key(&key).post("/contexts", &body).await;
        assert_plain(
            &reply,
            StatusCode::UNPROCESSABLE_ENTITY,
            &format!("{unprocessable}{reason}"),
        );
        let reply = app
            .as_key(&key)
            .patch(&format!("/contexts/{id}"), &body)
            .await;
        assert_plain(
            &reply,
            StatusCode::UNPROCESSABLE_ENTITY,
            &format!("{unprocessable}{reason}"),
        );
    }
    for name in [String::new(), "n".repeat(256)] {
        let body = json!({"name": name});
        let reply = app.as_key(&key).post("/contexts", &body).await;
        assert_invalid_parameter(&reply, "Invalid name");
        let reply = app
            .as_key(&key)
            .patch(&format!("/contexts/{id}"), &body)
            .await;
        assert_invalid_parameter(&reply, "Invalid name");
    }
    let longest = create_context(&app, &key, json!({"name": "é".repeat(255)})).await;
    assert_eq!(longest["name"], "é".repeat(255));

    // Unknown fields are ignored.
    let message = add_message(&app, &key, &id, "user", "hello").await;
    let reply = app
        .as_key(&key)
        .post(
            &messages,
            &json!({"role": "assistant", "content": "", "execution_id": Uuid::now_v7()}),
        )
        .await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
    assert_eq!(reply.body["execution_id"], Value::Null);
    assert_eq!(reply.body["content"], "");

    // Path ids that are not UUIDs.
    let message_id = str_of(&message, "id");
    for (method, path, parameter, value) in [
        (Method::GET, "/contexts/abc".to_owned(), "context_id", "abc"),
        (
            Method::PATCH,
            "/contexts/abc".to_owned(),
            "context_id",
            "abc",
        ),
        (
            Method::DELETE,
            "/contexts/abc".to_owned(),
            "context_id",
            "abc",
        ),
        (
            Method::GET,
            "/contexts/abc/messages".to_owned(),
            "context_id",
            "abc",
        ),
        (
            Method::POST,
            "/contexts/abc/messages".to_owned(),
            "context_id",
            "abc",
        ),
        (
            Method::DELETE,
            format!("/contexts/abc/messages/{message_id}"),
            "context_id",
            "abc",
        ),
        (
            Method::DELETE,
            format!("/contexts/{id}/messages/xyz"),
            "message_id",
            "xyz",
        ),
    ] {
        let body = json!({"role": "user", "content": "x"});
        let reply = send(&app, &key, method.clone(), &path, Some(&body)).await;
        assert_plain(
            &reply,
            StatusCode::BAD_REQUEST,
            &format!(
                "Invalid URL: Cannot parse `{parameter}` with value `{value}`: UUID parsing failed: "
            ),
        );
    }
    // No key: 401 before anything else.
    let reply = app.req(Method::GET, "/contexts/abc").send().await;
    assert_error(
        &reply,
        StatusCode::UNAUTHORIZED,
        "Unauthorized: No API Key specified.",
    );

    assert_eq!(app.count(CONTEXTS_OF_KEY, &key.0).await, 2);
    assert_eq!(app.count(MESSAGES_OF_CONTEXT, &id).await, 2);
}

#[tokio::test]
async fn creates_and_changes_check_the_license() {
    let (app, _license) = spawn_app_with_license(
        r#"{"expires_at": "2000-01-01T00:00:00Z", "limits": {}}"#,
        AppOptions {
            env: [("TROVE_EXTENSIONS".to_owned(), "conversations".to_owned())].into(),
            no_worker: true,
            ..AppOptions::default()
        },
    )
    .await;
    let reply = app.post("/contexts", &json!({})).await;
    assert_error(&reply, StatusCode::FORBIDDEN, "Invalid license: Expired");
    // A context kept from before the license expired: read and deleted, not changed.
    let id = Uuid::now_v7();
    sqlx::query("INSERT INTO contexts (id, api_key_id) VALUES ($1, $2)")
        .bind(id)
        .bind(app.master_id)
        .execute(&app.pool)
        .await
        .expect("insert a context");
    let path = format!("/contexts/{id}");
    let reply = app.patch(&path, &json!({"name": "x"})).await;
    assert_error(&reply, StatusCode::FORBIDDEN, "Invalid license: Expired");
    let reply = app
        .post(
            &format!("{path}/messages"),
            &json!({"role": "user", "content": "x"}),
        )
        .await;
    assert_error(&reply, StatusCode::FORBIDDEN, "Invalid license: Expired");
    let context = app.get(&path).await;
    assert_eq!(context.status, StatusCode::OK, "{}", context.text);
    assert_eq!(context.body["name"], Value::Null);
    assert_eq!(app.count(MESSAGES_OF_CONTEXT, &id.to_string()).await, 0);
    let reply = app.delete(&path).await;
    assert_eq!(reply.status, StatusCode::NO_CONTENT);
}

// ---- Retention ----------------------------------------------------------------------------

#[tokio::test]
async fn serve_deletes_contexts_not_updated_for_the_retention() {
    let app = conversations_app(&[("TROVE_CONTEXT_RETENTION", "30s")]).await;
    let key = plain_key(&app).await;
    let old = create_context(&app, &key, json!({"name": "old"})).await;
    let old = str_of(&old, "id").to_owned();
    add_message(&app, &key, &old, "user", "long ago").await;
    let recent = create_context(&app, &key, json!({"name": "recent"})).await;
    let recent = str_of(&recent, "id").to_owned();
    age(&app, &old, 1).await;

    // The sweep runs every 3 s (a tenth of the retention).
    eventually(
        "the old context is swept",
        Duration::from_secs(20),
        || async {
            let reply = app.as_key(&key).get(&format!("/contexts/{old}")).await;
            (reply.status == StatusCode::NOT_FOUND).then_some(())
        },
    )
    .await;
    assert_eq!(app.count(MESSAGES_OF_CONTEXT, &old).await, 0);
    let listed = ok_as(&app, &key, "/contexts").await;
    assert_eq!(ids(&listed), [recent]);
}

#[tokio::test]
async fn the_retention_counts_from_the_last_change() {
    let app = conversations_app(&[]).await;
    let key = plain_key(&app).await;
    let mut contexts = Vec::new();
    for name in ["idle", "answered", "renamed", "fresh"] {
        let context = create_context(&app, &key, json!({"name": name})).await;
        contexts.push(str_of(&context, "id").to_owned());
    }
    for context in &contexts[..3] {
        age(&app, context, 2).await;
    }
    // A message or a change since then keeps a context.
    add_message(&app, &key, &contexts[1], "assistant", "an answer").await;
    let reply = app
        .as_key(&key)
        .patch(
            &format!("/contexts/{}", contexts[2]),
            &json!({"name": "renamed again"}),
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK);

    let retention = Duration::from_secs(3600);
    let deleted = trove::service::contexts::delete_expired(&app.state.pool, retention)
        .await
        .expect("sweep");
    assert_eq!(deleted, 1);
    let listed = ok_as(&app, &key, "/contexts").await;
    assert_eq!(ids(&listed), contexts[1..].to_vec());
    let deleted = trove::service::contexts::delete_expired(&app.state.pool, retention)
        .await
        .expect("sweep");
    assert_eq!(deleted, 0);
}
