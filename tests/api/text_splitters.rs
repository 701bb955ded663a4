//! Text splitter providers and text splitters.

use std::collections::BTreeSet;

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use uuid::Uuid;

use crate::helpers::{
    AppOptions, TestApp, assert_error, assert_invalid, assert_invalid_order_by,
    assert_utc_timestamp, create_denied, ids, is_uuid, key_of, key_set, names, spawn_app,
    spawn_app_with_license,
};

/// The listed object named `name` (master key, seeded objects included).
async fn by_name(app: &TestApp, path: &str, name: &str) -> Value {
    let reply = app.get(&format!("{path}?name={name}")).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    let data = reply.body["data"].as_array().expect("data");
    assert_eq!(data.len(), 1, "{}", reply.text);
    data[0].clone()
}

async fn create(app: &TestApp, body: Value) -> Value {
    let reply = app.post("/text-splitters", &body).await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
    reply.body
}

fn seeded_parameters() -> [(&'static str, Value); 3] {
    [
        (
            "recursive-character",
            json!({"separators": ["\n\n", "\n", " ", ""], "chunk_size": 1000, "chunk_overlap": 200}),
        ),
        (
            "character",
            json!({"separator": "\n\n", "chunk_size": 1000, "chunk_overlap": 200}),
        ),
        (
            "token",
            json!({"chunk_size": 256, "chunk_overlap": 32, "tokenizer": "whitespace"}),
        ),
    ]
}

fn parameter(ty: &str, default: Value) -> Value {
    json!({"type": ty, "required": false, "default": default, "secret": false})
}

// ---- Seeded objects ----------------------------------------------------------------------

#[tokio::test]
async fn seeded_providers_exist_with_their_parameters() {
    let app = spawn_app().await;
    let reply = app.get("/text-splitter-providers").await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    let mut listed = names(&reply.body);
    listed.sort();
    assert_eq!(listed, ["character", "recursive-character", "token"]);
    assert_eq!(reply.body["page_info"]["has_next"], false);

    let expected = [
        (
            "recursive-character",
            json!({
                "separators": parameter("array", json!(["\n\n", "\n", " ", ""])),
                "chunk_size": parameter("integer", json!(1000)),
                "chunk_overlap": parameter("integer", json!(200)),
            }),
        ),
        (
            "character",
            json!({
                "separator": parameter("string", json!("\n\n")),
                "chunk_size": parameter("integer", json!(1000)),
                "chunk_overlap": parameter("integer", json!(200)),
            }),
        ),
        (
            "token",
            json!({
                "chunk_size": parameter("integer", json!(256)),
                "chunk_overlap": parameter("integer", json!(32)),
                "tokenizer": parameter("string", json!("whitespace")),
            }),
        ),
    ];
    for (name, parameters) in expected {
        let listed = by_name(&app, "/text-splitter-providers", name).await;
        assert_eq!(listed["parameters"], parameters, "{name}");
        assert_eq!(
            key_set(&listed),
            BTreeSet::from([
                "id",
                "name",
                "description",
                "parameters",
                "created_at",
                "updated_at"
            ])
        );
        assert_utc_timestamp(&listed["created_at"]);
        assert_utc_timestamp(&listed["updated_at"]);
        let id = listed["id"].as_str().expect("id");
        let reply = app.get(&format!("/text-splitter-providers/{id}")).await;
        assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
        assert_eq!(reply.body, listed);
    }
}

#[tokio::test]
async fn unknown_provider_is_404_with_its_id() {
    let app = spawn_app().await;
    let id = Uuid::new_v4();
    let reply = app.get(&format!("/text-splitter-providers/{id}")).await;
    assert_error(
        &reply,
        StatusCode::NOT_FOUND,
        "Text Splitter provider not found",
    );
    assert_eq!(reply.body["error"]["details"]["id"], id.to_string());
}

#[tokio::test]
async fn providers_are_read_only() {
    let app = spawn_app().await;
    let provider = by_name(&app, "/text-splitter-providers", "token").await;
    let id = provider["id"].as_str().expect("id");
    let reply = app
        .post("/text-splitter-providers", &json!({"name": "x"}))
        .await;
    assert_eq!(
        reply.status,
        StatusCode::METHOD_NOT_ALLOWED,
        "{}",
        reply.text
    );
    let reply = app.delete(&format!("/text-splitter-providers/{id}")).await;
    assert_eq!(
        reply.status,
        StatusCode::METHOD_NOT_ALLOWED,
        "{}",
        reply.text
    );
}

#[tokio::test]
async fn seeded_splitters_exist_with_their_parameters() {
    let app = spawn_app().await;
    let reply = app.get("/text-splitters").await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(reply.body["data"].as_array().expect("data").len(), 3);
    for (name, parameters) in seeded_parameters() {
        let listed = by_name(&app, "/text-splitters", name).await;
        assert_eq!(listed["provider"], name);
        assert_eq!(listed["parameters"], parameters, "{name}");
        assert_eq!(listed["description"], Value::Null);
        let id = listed["id"].as_str().expect("id");
        let reply = app.get(&format!("/text-splitters/{id}")).await;
        assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
        assert_eq!(reply.body, listed);
    }
}

// ---- Create ------------------------------------------------------------------------------

#[tokio::test]
async fn create_fills_defaults() {
    let app = spawn_app().await;
    for (provider, defaults) in seeded_parameters() {
        let name = format!("mine-{provider}");
        let body = create(&app, json!({"name": name, "provider": provider})).await;
        assert_eq!(
            key_set(&body),
            BTreeSet::from([
                "id",
                "name",
                "description",
                "provider",
                "parameters",
                "created_at",
                "updated_at"
            ])
        );
        assert!(is_uuid(body["id"].as_str().expect("id")));
        assert_eq!(body["name"], name);
        assert_eq!(body["description"], Value::Null);
        assert_eq!(body["provider"], provider);
        assert_eq!(body["parameters"], defaults, "{provider}");
        let created_at = assert_utc_timestamp(&body["created_at"]);
        assert_eq!(assert_utc_timestamp(&body["updated_at"]), created_at);
        let id = body["id"].as_str().expect("id");
        let reply = app.get(&format!("/text-splitters/{id}")).await;
        assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
        assert_eq!(reply.body, body);
    }

    // Partial parameters: the others take their defaults; null means "default" too.
    let body = create(
        &app,
        json!({
            "name": "partial",
            "description": "short chunks",
            "provider": "recursive-character",
            "parameters": {"chunk_size": 500, "chunk_overlap": 50, "separators": null}
        }),
    )
    .await;
    assert_eq!(body["description"], "short chunks");
    assert_eq!(
        body["parameters"],
        json!({"separators": ["\n\n", "\n", " ", ""], "chunk_size": 500, "chunk_overlap": 50})
    );
    let body = create(
        &app,
        json!({"name": "tokens", "provider": "token", "parameters": {"tokenizer": "embedding-model"}, "description": null}),
    )
    .await;
    assert_eq!(
        body["parameters"],
        json!({"chunk_size": 256, "chunk_overlap": 32, "tokenizer": "embedding-model"})
    );
    assert_eq!(body["description"], Value::Null);
    let body = create(
        &app,
        json!({"name": "null-parameters", "provider": "character", "parameters": null}),
    )
    .await;
    assert_eq!(
        body["parameters"],
        json!({"separator": "\n\n", "chunk_size": 1000, "chunk_overlap": 200})
    );
}

#[tokio::test]
async fn unknown_parameter_keys_and_body_fields_are_ignored() {
    let app = spawn_app().await;
    let body = create(
        &app,
        json!({
            "name": "lenient",
            "provider": "character",
            "parameters": {"separator": "\n", "chunk_size": 300, "chunk_overlap": 10, "foo": 1, "separators": ["x"]},
            "id": Uuid::new_v4(),
            "unknown": true
        }),
    )
    .await;
    assert_eq!(
        body["parameters"],
        json!({"separator": "\n", "chunk_size": 300, "chunk_overlap": 10})
    );
    assert!(body.get("unknown").is_none());
}

#[tokio::test]
async fn create_errors() {
    let app = spawn_app().await;

    for name in [String::new(), "x".repeat(256)] {
        let reply = app
            .post(
                "/text-splitters",
                &json!({"name": name, "provider": "character"}),
            )
            .await;
        assert_invalid(&reply, "Invalid name");
    }
    // 255 characters (not bytes) is fine.
    create(
        &app,
        json!({"name": "é".repeat(255), "provider": "character"}),
    )
    .await;

    let reply = app
        .post(
            "/text-splitters",
            &json!({"name": "a", "provider": "sentence"}),
        )
        .await;
    assert_invalid(&reply, "Text splitter provider not found: sentence");

    let cases = [
        (
            json!({"chunk_size": 100}),
            "recursive-character",
            "Invalid text splitter parameters: chunk_overlap must be smaller than chunk_size",
        ),
        (
            json!({"chunk_size": 0, "chunk_overlap": 0}),
            "character",
            "Invalid text splitter parameters: chunk_size must be a positive integer",
        ),
        (
            json!({"chunk_overlap": -1}),
            "token",
            "Invalid text splitter parameters: chunk_overlap must be a non-negative integer",
        ),
        (
            json!({"chunk_size": "10"}),
            "token",
            "Invalid text splitter parameters: chunk_size must be a positive integer",
        ),
        (
            json!({"separators": []}),
            "recursive-character",
            "Invalid text splitter parameters: separators must be a non-empty list of strings",
        ),
        (
            json!({"separator": 3}),
            "character",
            "Invalid text splitter parameters: separator must be a string",
        ),
        (
            json!({"tokenizer": "bpe"}),
            "token",
            "Invalid text splitter parameters: tokenizer must be one of whitespace, embedding-model",
        ),
    ];
    for (parameters, provider, reason) in cases {
        let reply = app
            .post(
                "/text-splitters",
                &json!({"name": "bad", "provider": provider, "parameters": parameters}),
            )
            .await;
        assert_invalid(&reply, reason);
    }

    // Unique names, seeded ones included.
    let reply = app
        .post(
            "/text-splitters",
            &json!({"name": "character", "provider": "token"}),
        )
        .await;
    assert_error(&reply, StatusCode::CONFLICT, "Conflict unique error");
    create(&app, json!({"name": "twice", "provider": "token"})).await;
    let reply = app
        .post(
            "/text-splitters",
            &json!({"name": "twice", "provider": "character"}),
        )
        .await;
    assert_error(&reply, StatusCode::CONFLICT, "Conflict unique error");

    // Body types: 422.
    for body in [
        json!({"name": "a"}),
        json!({"provider": "token"}),
        json!({"name": "a", "provider": "token", "parameters": [1]}),
        json!({"name": "a", "provider": "token", "parameters": "x"}),
        json!({"name": 1, "provider": "token"}),
    ] {
        let reply = app.post("/text-splitters", &body).await;
        assert_eq!(reply.status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
        assert!(
            reply
                .text
                .starts_with("Failed to deserialize the JSON body into the target type: "),
            "{}",
            reply.text
        );
    }

    // Nothing was created by the failures.
    let reply = app.get("/text-splitters?count=true").await;
    assert_eq!(reply.body["page_info"]["count"], 5, "{}", reply.text);
}

// ---- Get, update, delete -----------------------------------------------------------------

#[tokio::test]
async fn patch_replaces_parameters_whole_and_revalidates() {
    let app = spawn_app().await;
    let created = create(
        &app,
        json!({
            "name": "editable",
            "description": "first",
            "provider": "character",
            "parameters": {"separator": "\n", "chunk_size": 500, "chunk_overlap": 100}
        }),
    )
    .await;
    let id = created["id"].as_str().expect("id");
    let path = format!("/text-splitters/{id}");

    // Omitted parameters take their defaults again: the object is replaced whole.
    let reply = app
        .patch(
            &path,
            &json!({"parameters": {"chunk_size": 300, "chunk_overlap": 0, "extra": 1}, "provider": "token"}),
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(
        reply.body["parameters"],
        json!({"separator": "\n\n", "chunk_size": 300, "chunk_overlap": 0})
    );
    assert_eq!(reply.body["provider"], "character", "provider is fixed");
    assert_eq!(reply.body["name"], "editable");
    assert_eq!(reply.body["description"], "first");
    assert_eq!(reply.body["created_at"], created["created_at"]);
    assert!(
        assert_utc_timestamp(&reply.body["updated_at"])
            > assert_utc_timestamp(&created["updated_at"])
    );

    // Validated against the splitter's own provider.
    let reply = app
        .patch(
            &path,
            &json!({"parameters": {"tokenizer": "bpe", "chunk_size": 10}}),
        )
        .await;
    assert_invalid(
        &reply,
        "Invalid text splitter parameters: chunk_overlap must be smaller than chunk_size",
    );
    let reply = app
        .patch(&path, &json!({"parameters": {"separator": ["a"]}}))
        .await;
    assert_invalid(
        &reply,
        "Invalid text splitter parameters: separator must be a string",
    );
    let reply = app.patch(&path, &json!({"name": ""})).await;
    assert_invalid(&reply, "Invalid name");
    let reply = app.patch(&path, &json!({"name": "token"})).await;
    assert_error(&reply, StatusCode::CONFLICT, "Conflict unique error");
    let reply = app.patch(&path, &json!({"parameters": 5})).await;
    assert_eq!(
        reply.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{}",
        reply.text
    );

    // Nothing changed by the refusals.
    let reply = app.get(&path).await;
    assert_eq!(reply.body["name"], "editable");
    assert_eq!(
        reply.body["parameters"],
        json!({"separator": "\n\n", "chunk_size": 300, "chunk_overlap": 0})
    );

    // `{}` is valid; null clears the description and counts as omitted for the others.
    let reply = app.patch(&path, &json!({})).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    let reply = app
        .patch(
            &path,
            &json!({"name": null, "description": null, "parameters": null}),
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(reply.body["name"], "editable");
    assert_eq!(reply.body["description"], Value::Null);
    assert_eq!(reply.body["parameters"]["chunk_size"], 300);
    let reply = app
        .patch(&path, &json!({"name": "renamed", "description": "second"}))
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(reply.body["name"], "renamed");
    assert_eq!(reply.body["description"], "second");
    let reply = app.get(&path).await;
    assert_eq!(reply.body["name"], "renamed");
}

#[tokio::test]
async fn delete_then_404() {
    let app = spawn_app().await;
    let created = create(&app, json!({"name": "short-lived", "provider": "token"})).await;
    let id = created["id"].as_str().expect("id");
    let path = format!("/text-splitters/{id}");
    let reply = app.delete(&path).await;
    assert_eq!(reply.status, StatusCode::NO_CONTENT, "{}", reply.text);
    assert!(reply.text.is_empty());
    let reply = app.get(&path).await;
    assert_error(&reply, StatusCode::NOT_FOUND, "Text Splitter not found");
    let reply = app.delete(&path).await;
    assert_error(&reply, StatusCode::NOT_FOUND, "Text Splitter not found");
    // The name is free again.
    create(&app, json!({"name": "short-lived", "provider": "token"})).await;
    // A seeded splitter nothing uses can be deleted too.
    let seeded = by_name(&app, "/text-splitters", "token").await;
    let reply = app
        .delete(&format!(
            "/text-splitters/{}",
            seeded["id"].as_str().expect("id")
        ))
        .await;
    assert_eq!(reply.status, StatusCode::NO_CONTENT, "{}", reply.text);
}

#[tokio::test]
async fn delete_removes_permission_entries_on_the_splitter() {
    let app = spawn_app().await;
    let created = create(&app, json!({"name": "granted", "provider": "token"})).await;
    let id = created["id"].as_str().expect("id").to_owned();
    let key = app.create_key_with(json!({"name": "reader"})).await;
    let key_id = key["id"].as_str().expect("id");
    app.grant(
        key_id,
        json!([{"object_type": "text-splitters", "object_id": id, "permission": 4}]),
    )
    .await;
    let reply = app.delete(&format!("/text-splitters/{id}")).await;
    assert_eq!(reply.status, StatusCode::NO_CONTENT, "{}", reply.text);
    let reply = app.get(&format!("/api-keys/{key_id}/permissions")).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(reply.body, json!([]));
}

async fn insert_pipeline(app: &TestApp, splitter: &str) -> Uuid {
    let id = Uuid::new_v4();
    sqlx::query(
        "INSERT INTO pipelines (id, name, default_text_splitter_id, has_full_text_search, metadata_schema)
         VALUES ($1, $2, $3, true, $4)",
    )
    .bind(id)
    .bind(format!("pipeline-{id}"))
    .bind(Uuid::parse_str(splitter).expect("uuid"))
    .bind(json!({"type": "object", "properties": {}}))
    .execute(&app.pool)
    .await
    .expect("insert pipeline");
    id
}

async fn insert_version(app: &TestApp, pipeline: Uuid, splitter: &str, status: &str) -> Uuid {
    let id = Uuid::now_v7();
    let now = chrono::Utc::now();
    sqlx::query(
        "INSERT INTO documents (id, version, pipeline_id, external_identifier, classification, metadata,
                                status, text_splitter_id, expire_older_versions, created_at, updated_at)
         VALUES ($1, $2, $3, $4, 'public', '{}', $5, $6, true, $7, $7)",
    )
    .bind(id)
    .bind(now.timestamp_micros())
    .bind(pipeline)
    .bind(format!("doc-{id}"))
    .bind(status)
    .bind(Uuid::parse_str(splitter).expect("uuid"))
    .bind(now)
    .execute(&app.pool)
    .await
    .expect("insert document version");
    id
}

#[tokio::test]
async fn delete_while_used_by_a_pipeline_is_409() {
    let app = spawn_app().await;
    let created = create(&app, json!({"name": "in-use", "provider": "character"})).await;
    let id = created["id"].as_str().expect("id");
    let pipeline = insert_pipeline(&app, id).await;
    let reply = app.delete(&format!("/text-splitters/{id}")).await;
    assert_error(&reply, StatusCode::CONFLICT, "Conflict related error");
    let reply = app.get(&format!("/text-splitters/{id}")).await;
    assert_eq!(reply.status, StatusCode::OK, "still there: {}", reply.text);

    // Once the pipeline no longer uses it, it can go.
    sqlx::query("DELETE FROM pipelines WHERE id = $1")
        .bind(pipeline)
        .execute(&app.pool)
        .await
        .expect("delete pipeline");
    let reply = app.delete(&format!("/text-splitters/{id}")).await;
    assert_eq!(reply.status, StatusCode::NO_CONTENT, "{}", reply.text);
}

#[tokio::test]
async fn delete_while_a_pending_version_overrides_it_is_409() {
    let app = spawn_app().await;
    let default = by_name(&app, "/text-splitters", "recursive-character").await;
    let pipeline = insert_pipeline(&app, default["id"].as_str().expect("id")).await;
    let created = create(&app, json!({"name": "override", "provider": "token"})).await;
    let id = created["id"].as_str().expect("id");
    let done = insert_version(&app, pipeline, id, "success").await;
    let failed = insert_version(&app, pipeline, id, "failed").await;
    let pending = insert_version(&app, pipeline, id, "pending").await;

    let reply = app.delete(&format!("/text-splitters/{id}")).await;
    assert_error(&reply, StatusCode::CONFLICT, "Conflict related error");
    // The refused delete changed nothing (one transaction).
    let kept: Vec<Option<Uuid>> =
        sqlx::query_scalar("SELECT text_splitter_id FROM documents ORDER BY id")
            .fetch_all(&app.pool)
            .await
            .expect("read versions");
    assert!(
        kept.iter()
            .all(|s| s.map(|s| s.to_string()) == Some(id.to_owned()))
    );

    // Processed versions do not hold it: once the pending one is done, the delete succeeds
    // and their override is cleared.
    sqlx::query("UPDATE documents SET status = 'success' WHERE id = $1")
        .bind(pending)
        .execute(&app.pool)
        .await
        .expect("finish version");
    let reply = app.delete(&format!("/text-splitters/{id}")).await;
    assert_eq!(reply.status, StatusCode::NO_CONTENT, "{}", reply.text);
    for version in [done, failed, pending] {
        let splitter: Option<Uuid> =
            sqlx::query_scalar("SELECT text_splitter_id FROM documents WHERE id = $1")
                .bind(version)
                .fetch_one(&app.pool)
                .await
                .expect("version kept");
        assert_eq!(splitter, None);
    }
}

// ---- Permissions -------------------------------------------------------------------------

#[tokio::test]
async fn create_needs_write_on_the_type_and_on_the_provider() {
    let app = spawn_app().await;
    let body = json!({"name": "new", "provider": "character"});

    // Without write on the type: 403 with id None (before the provider is looked at).
    let reader = key_of(
        &app.create_key_with(json!({"name": "r", "permissions": {"text-splitters": 4, "text-splitter-providers": 7}}))
            .await,
    );
    let reply = app.as_key(&reader).post("/text-splitters", &body).await;
    assert_error(
        &reply,
        StatusCode::FORBIDDEN,
        &create_denied("text-splitters"),
    );

    // Write on the type, but not on the provider: 404 `Text Splitter not found`.
    let no_provider = key_of(
        &app.create_key_with(json!({"name": "np", "permissions": {"text-splitters": 6, "text-splitter-providers": 4}}))
            .await,
    );
    let reply = app
        .as_key(&no_provider)
        .post("/text-splitters", &body)
        .await;
    assert_error(&reply, StatusCode::NOT_FOUND, "Text Splitter not found");
    // An unknown provider is still a validation error.
    let reply = app
        .as_key(&no_provider)
        .post(
            "/text-splitters",
            &json!({"name": "new", "provider": "nope"}),
        )
        .await;
    assert_invalid(&reply, "Text splitter provider not found: nope");

    // Write on that one provider object is enough.
    let provider = by_name(&app, "/text-splitter-providers", "character").await;
    let provider_key = app
        .create_key_with(json!({"name": "p", "permissions": {"text-splitters": 6}}))
        .await;
    app.grant(
        provider_key["id"].as_str().expect("id"),
        json!([{"object_type": "text-splitter-providers", "object_id": provider["id"], "permission": 2}]),
    )
    .await;
    let provider_key = key_of(&provider_key);
    let reply = app
        .as_key(&provider_key)
        .post("/text-splitters", &body)
        .await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
    let reply = app
        .as_key(&provider_key)
        .post(
            "/text-splitters",
            &json!({"name": "other", "provider": "token"}),
        )
        .await;
    assert_error(&reply, StatusCode::NOT_FOUND, "Text Splitter not found");
}

#[tokio::test]
async fn permissions_on_providers() {
    let app = spawn_app().await;
    let token = by_name(&app, "/text-splitter-providers", "token").await;
    let token_id = token["id"].as_str().expect("id").to_owned();
    let nothing = key_of(&app.create_key_with(json!({"name": "nothing"})).await);
    let reply = app
        .as_key(&nothing)
        .get(&format!("/text-splitter-providers/{token_id}"))
        .await;
    assert_error(
        &reply,
        StatusCode::NOT_FOUND,
        "Text Splitter provider not found",
    );
    assert_eq!(reply.body["error"]["details"]["id"], token_id.as_str());
    let reply = app.as_key(&nothing).get("/text-splitter-providers").await;
    assert_eq!(reply.body["data"], json!([]));

    let object_key = app.create_key_with(json!({"name": "object"})).await;
    app.grant(
        object_key["id"].as_str().expect("id"),
        json!([{"object_type": "text-splitter-providers", "object_id": token_id, "permission": 4}]),
    )
    .await;
    let object_key = key_of(&object_key);
    let reply = app
        .as_key(&object_key)
        .get("/text-splitter-providers")
        .await;
    assert_eq!(ids(&reply.body), std::slice::from_ref(&token_id));
    let reply = app
        .as_key(&object_key)
        .get(&format!("/text-splitter-providers/{token_id}"))
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(reply.body, token);
}

#[tokio::test]
async fn requests_without_a_key_are_401() {
    let app = spawn_app().await;
    for path in ["/text-splitters", "/text-splitter-providers"] {
        let reply = app.req(Method::GET, path).send().await;
        assert_error(
            &reply,
            StatusCode::UNAUTHORIZED,
            "Unauthorized: No API Key specified.",
        );
    }
}

// ---- Lists -------------------------------------------------------------------------------

#[tokio::test]
async fn splitter_list_filters_and_pagination() {
    let app = spawn_app().await;
    create(
        &app,
        json!({"name": "alpha", "provider": "token", "description": "for code"}),
    )
    .await;
    create(
        &app,
        json!({"name": "alphabet", "provider": "character", "description": "for prose"}),
    )
    .await;
    let beta = create(&app, json!({"name": "beta", "provider": "token"})).await;

    let query = |q: &'static str| {
        let app = &app;
        async move {
            let reply = app.get(&format!("/text-splitters?{q}")).await;
            assert_eq!(reply.status, StatusCode::OK, "{q}: {}", reply.text);
            reply.body
        }
    };

    let body = query("name=alpha").await;
    assert_eq!(names(&body), ["alpha"]);
    assert_eq!(body["query_info"], json!({"name": "alpha"}));
    let mut listed = names(&query("name$startswith=alpha").await);
    listed.sort();
    assert_eq!(listed, ["alpha", "alphabet"]);
    let body = query("name$contains=ph&name$contains=bet&order_by=name").await;
    assert_eq!(names(&body), ["alphabet"]);
    assert_eq!(body["query_info"], json!({"name$contains": ["ph", "bet"]}));
    let body = query("provider=token&order_by=name").await;
    assert_eq!(names(&body), ["alpha", "beta", "token"]);
    assert_eq!(
        names(&query("description$contains=prose").await),
        ["alphabet"]
    );
    assert_eq!(names(&query("description=for%20code").await), ["alpha"]);
    assert_eq!(names(&query("name$gt=s&order_by=name").await), ["token"]);
    let beta_id = beta["id"].as_str().expect("id");
    let body = app.get(&format!("/text-splitters?id={beta_id}")).await.body;
    assert_eq!(names(&body), ["beta"]);
    let created_at = beta["created_at"].as_str().expect("created_at");
    let body = app
        .get(&format!("/text-splitters?created_at$ge={created_at}"))
        .await
        .body;
    assert_eq!(names(&body), ["beta"]);
    // Unknown parameters are ignored.
    assert_eq!(names(&query("name=beta&colour=red").await), ["beta"]);

    // Ordering.
    let body = query("order_by=-name").await;
    assert_eq!(
        names(&body),
        [
            "token",
            "recursive-character",
            "character",
            "beta",
            "alphabet",
            "alpha"
        ]
    );
    assert_eq!(body["page_info"]["order_by"], json!(["-name"]));
    let body = query("order_by=provider&order_by=name").await;
    assert_eq!(
        names(&body),
        [
            "alphabet",
            "character",
            "recursive-character",
            "alpha",
            "beta",
            "token"
        ]
    );
    let reply = app
        .get("/text-splitters?order_by=parameters&order_by=description")
        .await;
    assert_invalid_order_by(&reply, json!(["parameters", "description"]));

    // Cursor pagination.
    let first = query("first=4&order_by=name&count=true").await;
    assert_eq!(names(&first), ["alpha", "alphabet", "beta", "character"]);
    assert_eq!(first["page_info"]["has_next"], true);
    assert_eq!(first["page_info"]["has_prev"], false);
    assert_eq!(first["page_info"]["count"], 6);
    let after = first["page_info"]["after"].as_str().expect("after");
    let reply = app
        .get(&format!(
            "/text-splitters?first=4&order_by=name&after={after}"
        ))
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(names(&reply.body), ["recursive-character", "token"]);
    assert_eq!(reply.body["page_info"]["has_next"], false);
    assert_eq!(reply.body["page_info"]["has_prev"], true);

    // Offset pagination.
    let body = query("limit=2&offset=1&order_by=name&count=true").await;
    assert_eq!(names(&body), ["alphabet", "beta"]);
    assert_eq!(
        body["page_info"],
        json!({"limit": 2, "offset": 1, "order_by": ["name"], "count": 6})
    );

    let reply = app.get("/text-splitters?first=1&limit=1").await;
    assert_error(&reply, StatusCode::BAD_REQUEST, "Pagination error");

    // Objects in the list are the full objects.
    let listed = by_name(&app, "/text-splitters", "beta").await;
    assert_eq!(listed, beta);
}

#[tokio::test]
async fn provider_list_filters_and_ordering() {
    let app = spawn_app().await;
    let body = app
        .get("/text-splitter-providers?order_by=-name")
        .await
        .body;
    assert_eq!(names(&body), ["token", "recursive-character", "character"]);
    let body = app
        .get("/text-splitter-providers?name$contains=char&order_by=name")
        .await
        .body;
    assert_eq!(names(&body), ["character", "recursive-character"]);
    let body = app
        .get("/text-splitter-providers?name$startswith=rec")
        .await
        .body;
    assert_eq!(names(&body), ["recursive-character"]);
    let body = app
        .get("/text-splitter-providers?created_at$lt=2000-01-01T00:00:00Z")
        .await
        .body;
    assert_eq!(body["data"], json!([]));
    assert_eq!(
        body["query_info"],
        json!({"created_at$lt": "2000-01-01T00:00:00.000000Z"})
    );
    // `description` is neither a filter nor a sort field here.
    let body = app
        .get("/text-splitter-providers?description=x&limit=1&count=true")
        .await
        .body;
    assert_eq!(body["data"].as_array().expect("data").len(), 1);
    assert_eq!(body["page_info"]["count"], 3);
    assert_eq!(body["query_info"], json!({}));
    let reply = app
        .get("/text-splitter-providers?order_by=description")
        .await;
    assert_invalid_order_by(&reply, json!(["description"]));
}

// ---- License -----------------------------------------------------------------------------

#[tokio::test]
async fn license_limit_counts_the_seeded_splitters() {
    let (app, _file) =
        spawn_app_with_license(r#"{"limits":{"text-splitters":3}}"#, AppOptions::default()).await;
    let reply = app
        .post(
            "/text-splitters",
            &json!({"name": "fourth", "provider": "token"}),
        )
        .await;
    assert_error(
        &reply,
        StatusCode::FORBIDDEN,
        "License limits exceeded for Text Splitter",
    );
    // The license comes before validation.
    let reply = app
        .post("/text-splitters", &json!({"name": "", "provider": "nope"}))
        .await;
    assert_error(
        &reply,
        StatusCode::FORBIDDEN,
        "License limits exceeded for Text Splitter",
    );
    // At the limit, changes are still allowed; reads and deletes never check.
    let token = by_name(&app, "/text-splitters", "token").await;
    let path = format!("/text-splitters/{}", token["id"].as_str().expect("id"));
    let reply = app.patch(&path, &json!({"description": "edited"})).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    let reply = app.delete(&path).await;
    assert_eq!(reply.status, StatusCode::NO_CONTENT, "{}", reply.text);
    create(&app, json!({"name": "third again", "provider": "token"})).await;
}

#[tokio::test]
async fn license_exceeded_refuses_changes() {
    let (app, _file) =
        spawn_app_with_license(r#"{"limits":{"text-splitters":2}}"#, AppOptions::default()).await;
    let token = by_name(&app, "/text-splitters", "token").await;
    let path = format!("/text-splitters/{}", token["id"].as_str().expect("id"));
    let reply = app.patch(&path, &json!({"description": "edited"})).await;
    assert_error(
        &reply,
        StatusCode::FORBIDDEN,
        "Invalid license: Exceeded(\"text-splitters\")",
    );
    let reply = app.get(&path).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    let reply = app.delete(&path).await;
    assert_eq!(reply.status, StatusCode::NO_CONTENT, "{}", reply.text);
}
