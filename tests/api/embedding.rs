//! Embedding providers and embedding models: lists, create rules and probe, PATCH, DELETE,
//! the query action, permissions, and the `openai` provider against a fake server.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use poem::http::StatusCode as PoemStatus;
use poem::web::Data;
use poem::{EndpointExt, Request, Response, Route, handler, post};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use trove::providers::embedding::{ModelSpec, ProviderKind};
use trove::providers::openai_embedding::OpenAiEmbedder;
use uuid::Uuid;

use crate::helpers::{
    AppOptions, Reply, TestApp, assert_error, assert_invalid, assert_utc_timestamp, denied,
    is_uuid, key_set, names, ok, spawn_app, spawn_app_with, spawn_app_with_license,
    spawn_app_without_worker,
};

const MODEL_FIELDS: [&str; 9] = [
    "id",
    "name",
    "description",
    "provider",
    "model_name",
    "parameters",
    "dimensions",
    "created_at",
    "updated_at",
];

async fn create(app: &TestApp, body: Value) -> Reply {
    app.post("/embedding-models", &body).await
}

async fn provider_id(app: &TestApp, name: &str) -> String {
    let body = ok(app, &format!("/embedding-providers?name={name}")).await;
    body["data"][0]["id"]
        .as_str()
        .expect("provider id")
        .to_owned()
}

async fn model_id_by_name(app: &TestApp, name: &str) -> String {
    let body = ok(app, &format!("/embedding-models?name={name}")).await;
    body["data"][0]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("no model {name}: {body}"))
        .to_owned()
}

async fn query(app: &TestApp, id: &str, text: &str) -> Reply {
    app.post(
        &format!("/embedding-models/{id}/query"),
        &json!({ "text": text }),
    )
    .await
}

fn vector(body: &Value) -> Vec<f64> {
    body["embedding"]
        .as_array()
        .unwrap_or_else(|| panic!("no embedding: {body}"))
        .iter()
        .map(|x| x.as_f64().expect("number"))
        .collect()
}

// ---- Providers ---------------------------------------------------------------------------

#[tokio::test]
async fn providers_are_seeded_and_readable() {
    let app = spawn_app().await;
    let body = ok(&app, "/embedding-providers").await;
    let listed: BTreeSet<String> = names(&body).into_iter().collect();
    assert_eq!(
        listed,
        BTreeSet::from(["hash".to_owned(), "local".to_owned(), "openai".to_owned()])
    );
    for provider in body["data"].as_array().expect("data") {
        assert_eq!(
            key_set(provider),
            BTreeSet::from([
                "id",
                "name",
                "description",
                "parameters",
                "created_at",
                "updated_at"
            ])
        );
        assert_utc_timestamp(&provider["created_at"]);
        assert_utc_timestamp(&provider["updated_at"]);
    }

    let openai = provider_id(&app, "openai").await;
    let reply = app.get(&format!("/embedding-providers/{openai}")).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(reply.body["name"], "openai");
    let parameters = &reply.body["parameters"];
    assert_eq!(
        key_set(parameters),
        BTreeSet::from(["api_key", "base_url", "dimensions"])
    );
    assert_eq!(parameters["api_key"]["secret"], true);
    assert_eq!(parameters["base_url"]["secret"], false);
    assert_eq!(parameters["base_url"]["required"], true);
    assert_eq!(
        key_set(&parameters["dimensions"]),
        BTreeSet::from(["type", "required", "default", "secret"])
    );
    let hash = provider_id(&app, "hash").await;
    let reply = app.get(&format!("/embedding-providers/{hash}")).await;
    assert_eq!(reply.body["parameters"]["dimensions"]["default"], 384);
    let local = provider_id(&app, "local").await;
    let reply = app.get(&format!("/embedding-providers/{local}")).await;
    assert_eq!(reply.body["parameters"], json!({}));
}

#[tokio::test]
async fn provider_not_found_and_unreadable() {
    let app = spawn_app().await;
    let missing = Uuid::new_v4();
    let reply = app.get(&format!("/embedding-providers/{missing}")).await;
    assert_error(
        &reply,
        StatusCode::NOT_FOUND,
        "Embedding provider not found",
    );
    assert_eq!(reply.body["error"]["details"]["id"], missing.to_string());

    let hash = provider_id(&app, "hash").await;
    let key = app.create_key(json!({}), json!([])).await;
    let reply = app
        .as_key(&key)
        .get(&format!("/embedding-providers/{hash}"))
        .await;
    assert_error(
        &reply,
        StatusCode::NOT_FOUND,
        "Embedding provider not found",
    );
    assert_eq!(reply.body["error"]["details"]["id"], hash);
    let reply = app.as_key(&key).get("/embedding-providers").await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(reply.body["data"], json!([]));

    // An object entry makes exactly that provider visible.
    app.grant(
        &key.0,
        json!([{"object_type": "embedding-providers", "object_id": hash, "permission": 4}]),
    )
    .await;
    let reply = app.as_key(&key).get("/embedding-providers").await;
    assert_eq!(names(&reply.body), vec!["hash".to_owned()]);
    let reply = app
        .as_key(&key)
        .get(&format!("/embedding-providers/{hash}"))
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
}

#[tokio::test]
async fn providers_are_read_only() {
    let app = spawn_app().await;
    let hash = provider_id(&app, "hash").await;
    for (method, path) in [
        (Method::POST, "/embedding-providers".to_owned()),
        (Method::PATCH, format!("/embedding-providers/{hash}")),
        (Method::DELETE, format!("/embedding-providers/{hash}")),
        (Method::POST, format!("/embedding-providers/{hash}")),
    ] {
        let reply = app
            .req(method.clone(), &path)
            .as_key((&app.master_id.to_string(), &app.master_secret))
            .json(&json!({}))
            .send()
            .await;
        assert_eq!(
            reply.status,
            StatusCode::METHOD_NOT_ALLOWED,
            "{method} {path}"
        );
        assert!(reply.header("allow").unwrap_or_default().contains("GET"));
    }
}

#[tokio::test]
async fn provider_list_echoes_every_filter() {
    let app = spawn_app().await;
    let body = ok(&app, "/embedding-providers").await;
    let info = &body["query_info"];
    let mut expected = BTreeSet::new();
    expected.insert("id".to_owned());
    for op in ["", "$contains", "$startswith", "$gt", "$ge", "$lt", "$le"] {
        expected.insert(format!("name{op}"));
    }
    for field in ["created_at", "updated_at"] {
        for op in ["", "$gt", "$ge", "$lt", "$le"] {
            expected.insert(format!("{field}{op}"));
        }
    }
    assert_eq!(key_set(info), expected.iter().map(String::as_str).collect());
    for (key, value) in info.as_object().expect("object") {
        if key == "name$contains" {
            assert_eq!(value, &json!([]), "{key}");
        } else {
            assert_eq!(value, &Value::Null, "{key}");
        }
    }

    let body = ok(
        &app,
        "/embedding-providers?name$contains=a&name$contains=s&created_at$lt=2999-01-01T00:00:00%2B02:00",
    )
    .await;
    assert_eq!(names(&body), vec!["hash".to_owned()]);
    assert_eq!(body["query_info"]["name$contains"], json!(["a", "s"]));
    assert_eq!(
        body["query_info"]["created_at$lt"],
        "2998-12-31T22:00:00.000000Z"
    );
    assert_eq!(body["query_info"]["name"], Value::Null);

    let body = ok(&app, "/embedding-providers?name=local").await;
    assert_eq!(names(&body), vec!["local".to_owned()]);
    assert_eq!(body["query_info"]["name"], "local");
    let body = ok(&app, "/embedding-providers?name$startswith=o").await;
    assert_eq!(names(&body), vec!["openai".to_owned()]);
    let body = ok(&app, "/embedding-providers?order_by=-name").await;
    assert_eq!(names(&body), vec!["openai", "local", "hash"]);
    assert_eq!(body["page_info"]["order_by"], json!(["-name"]));
    let id = provider_id(&app, "openai").await;
    let body = ok(&app, &format!("/embedding-providers?id={id}")).await;
    assert_eq!(names(&body), vec!["openai".to_owned()]);
    assert_eq!(body["query_info"]["id"], id);
    let body = ok(
        &app,
        "/embedding-providers?updated_at$gt=2999-01-01T00:00:00Z",
    )
    .await;
    assert_eq!(body["data"], json!([]));
    let body = ok(&app, "/embedding-providers?limit=2&count=true").await;
    assert_eq!(body["data"].as_array().expect("data").len(), 2);
    assert_eq!(body["page_info"]["count"], 3);

    let reply = app.get("/embedding-providers?order_by=description").await;
    assert_error(
        &reply,
        StatusCode::BAD_REQUEST,
        "Invalid order_by parameter",
    );
}

// ---- Create ------------------------------------------------------------------------------

#[tokio::test]
async fn create_hash_model_returns_the_model() {
    let app = spawn_app().await;
    let reply = create(
        &app,
        json!({
            "name": "tiny",
            "description": "eight dimensions",
            "provider": "hash",
            "model_name": "feature-hash",
            "parameters": {"dimensions": 8},
            "dimensions": 8,
        }),
    )
    .await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
    let body = &reply.body;
    assert_eq!(key_set(body), MODEL_FIELDS.into());
    assert!(is_uuid(body["id"].as_str().expect("id")));
    assert_eq!(body["name"], "tiny");
    assert_eq!(body["description"], "eight dimensions");
    assert_eq!(body["provider"], "hash");
    assert_eq!(body["model_name"], "feature-hash");
    assert_eq!(body["parameters"], json!({"dimensions": 8}));
    assert_eq!(body["dimensions"], 8);
    let created = assert_utc_timestamp(&body["created_at"]);
    assert_eq!(assert_utc_timestamp(&body["updated_at"]), created);
    // Microsecond precision.
    let text = body["created_at"].as_str().expect("text");
    assert_eq!(text.split('.').nth(1).map(str::len), Some(7), "{text}");

    let id = body["id"].as_str().expect("id");
    let fetched = ok(&app, &format!("/embedding-models/{id}")).await;
    assert_eq!(&fetched, body);

    // Without `dimensions` and parameters: the probe's size (hash default 384).
    let reply = create(
        &app,
        json!({"name": "plain", "provider": "hash", "model_name": "x"}),
    )
    .await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
    assert_eq!(reply.body["dimensions"], 384);
    assert_eq!(reply.body["parameters"], json!({}));
    assert_eq!(reply.body["description"], Value::Null);
}

#[tokio::test]
async fn create_validation_errors() {
    let app = spawn_app().await;
    let hash = |extra: Value| {
        let mut body = json!({"name": "m", "provider": "hash", "model_name": "feature-hash"});
        for (k, v) in extra.as_object().expect("object") {
            body[k] = v.clone();
        }
        body
    };

    for name in [String::new(), "x".repeat(256)] {
        let reply = create(&app, hash(json!({ "name": name }))).await;
        assert_invalid(&reply, "Invalid name");
    }
    // The name is checked before the provider.
    let reply = create(
        &app,
        json!({"name": "", "provider": "nope", "model_name": "x"}),
    )
    .await;
    assert_invalid(&reply, "Invalid name");
    let reply = create(
        &app,
        json!({"name": "m", "provider": "nope", "model_name": "x"}),
    )
    .await;
    assert_invalid(&reply, "Unknown provider type: nope");

    let reply = create(
        &app,
        json!({"name": "m", "provider": "openai", "model_name": "x",
               "parameters": {"base_url": "http://127.0.0.1:9/v1", "api_key": "k", "x": 1}}),
    )
    .await;
    assert_invalid(
        &reply,
        "unknown field `x`, expected one of `base_url`, `api_key`, `dimensions`",
    );
    let reply = create(
        &app,
        json!({"name": "m", "provider": "local", "model_name": "all-MiniLM-L6-v2",
               "parameters": {"x": 1}}),
    )
    .await;
    assert_invalid(&reply, "unknown field `x`, there are no fields");
    let reply = create(&app, hash(json!({"parameters": {"x": 1}}))).await;
    assert_invalid(&reply, "unknown field `x`, expected `dimensions`");
    let reply = create(
        &app,
        json!({"name": "m", "provider": "openai", "model_name": "x",
               "parameters": {"api_key": "k"}}),
    )
    .await;
    assert_invalid(&reply, "missing field `base_url`");
    let reply = create(
        &app,
        json!({"name": "m", "provider": "openai", "model_name": "x",
               "parameters": {"base_url": "http://127.0.0.1:9/v1"}}),
    )
    .await;
    assert_invalid(&reply, "API key is required for OpenAI provider");

    let reply = create(
        &app,
        json!({"name": "m", "provider": "local", "model_name": "no-such-model"}),
    )
    .await;
    assert_invalid(&reply, "Unknown FastEmbed embedding model: no-such-model");

    for size in [0, 2001, -3] {
        let reply = create(&app, hash(json!({ "dimensions": size }))).await;
        assert_invalid(
            &reply,
            &format!("Unsupported embedding size {size}: at most 2000"),
        );
    }
    let reply = create(&app, hash(json!({"parameters": {"dimensions": 3000}}))).await;
    assert_invalid(&reply, "Unsupported embedding size 3000: at most 2000");

    let reply = create(
        &app,
        hash(json!({"parameters": {"dimensions": 8}, "dimensions": 16})),
    )
    .await;
    assert_invalid(
        &reply,
        "Failed to create embedding model: expected embedding size 16, got 8",
    );

    // Body types: 422.
    let reply = create(&app, json!({"name": "m", "provider": "hash"})).await;
    assert_eq!(
        reply.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{}",
        reply.text
    );
    let reply = create(&app, hash(json!({"parameters": [1]}))).await;
    assert_eq!(
        reply.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{}",
        reply.text
    );
    let reply = create(&app, hash(json!({"dimensions": "eight"}))).await;
    assert_eq!(
        reply.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{}",
        reply.text
    );

    // Nothing was created by the refused requests.
    let body = ok(&app, "/embedding-models").await;
    assert_eq!(names(&body), vec!["default".to_owned()]);

    // Duplicate name.
    app.create_hash_model("twice", 4).await;
    let reply = create(&app, hash(json!({"name": "twice"}))).await;
    assert_error(&reply, StatusCode::CONFLICT, "Conflict unique error");
    let reply = create(&app, hash(json!({"name": "default"}))).await;
    assert_error(&reply, StatusCode::CONFLICT, "Conflict unique error");
}

#[tokio::test]
async fn local_model_whose_folder_is_missing_fails_to_load() {
    let app = spawn_app_with(AppOptions {
        env: HashMap::from([("TROVE_MODELS_DIR".to_owned(), "/nonexistent".to_owned())]),
        ..AppOptions::default()
    })
    .await;
    for model_name in ["all-MiniLM-L6-v2", "BAAI/bge-small-en-v1.5"] {
        let reply = create(
            &app,
            json!({"name": "local", "provider": "local", "model_name": model_name}),
        )
        .await;
        assert_error(&reply, StatusCode::BAD_REQUEST, "Invalid parameter");
        let reason = reply.body["error"]["details"]["error"]
            .as_str()
            .unwrap_or_default();
        assert!(
            reason.starts_with("Failed loading embedding model: "),
            "{}",
            reply.text
        );
    }
    let reply = create(
        &app,
        json!({"name": "local", "provider": "local", "model_name": "unknown-model"}),
    )
    .await;
    assert_invalid(&reply, "Unknown FastEmbed embedding model: unknown-model");
}

#[tokio::test]
async fn license_limit_applies_to_embedding_models() {
    let (app, license) = spawn_app_with_license(
        r#"{"expires_at": null, "limits": {"embedding-models": 1}}"#,
        AppOptions::default(),
    )
    .await;
    // The license is read when the app starts.
    drop(license);
    // The seeded `default` counts.
    let reply = create(
        &app,
        json!({"name": "m", "provider": "hash", "model_name": "h"}),
    )
    .await;
    assert_error(
        &reply,
        StatusCode::FORBIDDEN,
        "License limits exceeded for Embedding Model",
    );
}

// ---- Read, list --------------------------------------------------------------------------

#[tokio::test]
async fn model_list_filters_and_get() {
    let app = spawn_app().await;
    let a = app.create_hash_model("alpha", 4).await;
    app.create_hash_model("beta", 8).await;
    let reply = create(
        &app,
        json!({"name": "gamma", "description": "third one", "provider": "hash",
               "model_name": "other-label"}),
    )
    .await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);

    let body = ok(&app, "/embedding-models?order_by=name").await;
    assert_eq!(names(&body), vec!["alpha", "beta", "default", "gamma"]);
    for model in body["data"].as_array().expect("data") {
        assert_eq!(key_set(model), MODEL_FIELDS.into());
    }
    let body = ok(&app, "/embedding-models?name$contains=a&order_by=name").await;
    assert_eq!(names(&body), vec!["alpha", "beta", "default", "gamma"]);
    let body = ok(&app, "/embedding-models?name$startswith=g").await;
    assert_eq!(names(&body), vec!["gamma"]);
    let body = ok(&app, "/embedding-models?model_name$contains=other").await;
    assert_eq!(names(&body), vec!["gamma"]);
    assert_eq!(
        body["query_info"],
        json!({"model_name$contains": ["other"]})
    );
    let body = ok(&app, "/embedding-models?description$contains=third").await;
    assert_eq!(names(&body), vec!["gamma"]);
    let body = ok(
        &app,
        "/embedding-models?provider=hash&model_name=feature-hash&order_by=-name",
    )
    .await;
    let listed = names(&body);
    assert!(
        listed.ends_with(&["beta".to_owned(), "alpha".to_owned()]),
        "{listed:?}"
    );
    let body = ok(&app, "/embedding-models?provider=openai").await;
    assert_eq!(body["data"], json!([]));
    let body = ok(&app, "/embedding-models?name$gt=beta&name$lt=gamma").await;
    assert_eq!(names(&body), vec!["default"]);
    let body = ok(
        &app,
        "/embedding-models?order_by=provider&order_by=model_name&order_by=id",
    )
    .await;
    assert_eq!(body["data"].as_array().expect("data").len(), 4);
    let reply = app.get("/embedding-models?order_by=parameters").await;
    assert_error(
        &reply,
        StatusCode::BAD_REQUEST,
        "Invalid order_by parameter",
    );

    let missing = Uuid::new_v4();
    let reply = app.get(&format!("/embedding-models/{missing}")).await;
    assert_error(&reply, StatusCode::NOT_FOUND, "Embedding model not found");
    assert_eq!(reply.body["error"]["details"]["id"], missing.to_string());
    let id = a["id"].as_str().expect("id");
    let body = ok(&app, &format!("/embedding-models/{id}")).await;
    assert_eq!(body["name"], "alpha");
}

// ---- Query -------------------------------------------------------------------------------

#[tokio::test]
async fn query_returns_a_unit_vector_of_the_model_size() {
    let app = spawn_app().await;
    let model = app.create_hash_model("small", 16).await;
    let id = model["id"].as_str().expect("id");
    let reply = query(&app, id, "The quick brown fox").await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(
        key_set(&reply.body),
        BTreeSet::from(["embedding", "dimensions"])
    );
    assert_eq!(reply.body["dimensions"], 16);
    let first = vector(&reply.body);
    assert_eq!(first.len(), 16);
    let norm = first.iter().map(|x| x * x).sum::<f64>().sqrt();
    assert!((norm - 1.0).abs() < 1e-5, "norm {norm}");

    let again = query(&app, id, "the QUICK brown fox!").await;
    assert_eq!(
        vector(&again.body),
        first,
        "deterministic, case-insensitive"
    );
    let other = query(&app, id, "Something else entirely").await;
    assert_ne!(vector(&other.body), first);
    let empty = query(&app, id, "").await;
    assert_eq!(empty.status, StatusCode::OK, "{}", empty.text);
    assert_eq!(vector(&empty.body)[0], 1.0);

    // The seeded default model answers too.
    let default = model_id_by_name(&app, "default").await;
    let reply = query(&app, &default, "hello").await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(reply.body["dimensions"], 384);

    let missing = Uuid::new_v4();
    let reply = query(&app, &missing.to_string(), "x").await;
    assert_error(&reply, StatusCode::NOT_FOUND, "Embedding model not found");
    assert_eq!(reply.body["error"]["details"]["id"], missing.to_string());
    let reply = app
        .post(&format!("/embedding-models/{id}/query"), &json!({}))
        .await;
    assert_eq!(
        reply.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{}",
        reply.text
    );
}

// ---- PATCH -------------------------------------------------------------------------------

#[tokio::test]
async fn patch_changes_name_description_and_reprobes_parameters() {
    let app = spawn_app().await;
    let model = app.create_hash_model("before", 8).await;
    let id = model["id"].as_str().expect("id");
    let path = format!("/embedding-models/{id}");

    let reply = app
        .patch(
            &path,
            &json!({"name": "after", "description": "changed", "provider": "openai",
                    "model_name": "ignored", "dimensions": 99}),
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(reply.body["name"], "after");
    assert_eq!(reply.body["description"], "changed");
    assert_eq!(reply.body["provider"], "hash");
    assert_eq!(reply.body["model_name"], "feature-hash");
    assert_eq!(reply.body["dimensions"], 8);
    assert_eq!(reply.body["created_at"], model["created_at"]);
    assert!(
        assert_utc_timestamp(&reply.body["updated_at"])
            > assert_utc_timestamp(&model["updated_at"])
    );

    // `{}` keeps everything; null clears the description, a null name is omitted.
    let reply = app.patch(&path, &json!({})).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(reply.body["name"], "after");
    let reply = app
        .patch(&path, &json!({"description": null, "name": null}))
        .await;
    assert_eq!(reply.body["description"], Value::Null);
    assert_eq!(reply.body["name"], "after");

    // Parameters are validated and probed again; the size cannot change.
    let reply = app
        .patch(&path, &json!({"parameters": {"dimensions": 16}}))
        .await;
    assert_invalid(
        &reply,
        "Failed to create embedding model: expected embedding size 8, got 16",
    );
    let reply = app.patch(&path, &json!({"parameters": {}})).await;
    assert_invalid(
        &reply,
        "Failed to create embedding model: expected embedding size 8, got 384",
    );
    let reply = app.patch(&path, &json!({"parameters": {"size": 8}})).await;
    assert_invalid(&reply, "unknown field `size`, expected `dimensions`");
    let reply = app
        .patch(&path, &json!({"parameters": {"dimensions": 8}}))
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(reply.body["parameters"], json!({"dimensions": 8}));
    let body = ok(&app, &path).await;
    assert_eq!(body["parameters"], json!({"dimensions": 8}));

    let reply = app.patch(&path, &json!({"name": ""})).await;
    assert_invalid(&reply, "Invalid name");
    let reply = app.patch(&path, &json!({"name": "default"})).await;
    assert_error(&reply, StatusCode::CONFLICT, "Conflict unique error");
    let reply = app
        .patch(&format!("/embedding-models/{}", Uuid::new_v4()), &json!({}))
        .await;
    assert_error(&reply, StatusCode::NOT_FOUND, "Embedding model not found");
}

// ---- DELETE ------------------------------------------------------------------------------

#[tokio::test]
async fn delete_unused_default_then_create_a_new_default() {
    let app = spawn_app().await;
    let default = model_id_by_name(&app, "default").await;
    let reply = app.delete(&format!("/embedding-models/{default}")).await;
    assert_eq!(reply.status, StatusCode::NO_CONTENT, "{}", reply.text);
    assert!(reply.text.is_empty());
    let reply = app.get(&format!("/embedding-models/{default}")).await;
    assert_error(&reply, StatusCode::NOT_FOUND, "Embedding model not found");
    let reply = app.delete(&format!("/embedding-models/{default}")).await;
    assert_error(&reply, StatusCode::NOT_FOUND, "Embedding model not found");

    let reply = create(
        &app,
        json!({"name": "default", "provider": "hash", "model_name": "feature-hash",
               "parameters": {"dimensions": 256}}),
    )
    .await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
    assert_eq!(reply.body["dimensions"], 256);
}

#[tokio::test]
async fn delete_removes_permission_entries_and_refuses_a_model_in_use() {
    let app = spawn_app().await;
    let model = app.create_hash_model("shared", 4).await;
    let id = model["id"].as_str().expect("id").to_owned();
    let key = app.create_key(json!({}), json!([])).await;
    app.grant(
        &key.0,
        json!([{"object_type": "embedding-models", "object_id": id, "permission": 4}]),
    )
    .await;

    // A pipeline using the model (inserted directly: only the foreign key matters here).
    let pipeline = Uuid::new_v4();
    let splitter: Uuid = sqlx::query_scalar("SELECT id FROM text_splitters LIMIT 1")
        .fetch_one(&app.pool)
        .await
        .expect("splitter");
    sqlx::query(
        "INSERT INTO pipelines (id, name, default_text_splitter_id, has_full_text_search, metadata_schema)
         VALUES ($1, 'uses-model', $2, false, '{}')",
    )
    .bind(pipeline)
    .bind(splitter)
    .execute(&app.pool)
    .await
    .expect("pipeline");
    sqlx::query(
        "INSERT INTO vector_embeddings (id, pipeline_id, embedding_model_id, dimensions) VALUES ($1, $2, $3, 4)",
    )
    .bind(Uuid::new_v4())
    .bind(pipeline)
    .bind(Uuid::parse_str(&id).expect("uuid"))
    .execute(&app.pool)
    .await
    .expect("vector embedding");

    let reply = app.delete(&format!("/embedding-models/{id}")).await;
    assert_error(&reply, StatusCode::CONFLICT, "Conflict related error");
    let body = ok(&app, &format!("/embedding-models/{id}")).await;
    assert_eq!(body["name"], "shared");
    let entries = ok(&app, &format!("/api-keys/{}/permissions", key.0)).await;
    assert_eq!(entries.as_array().expect("entries").len(), 1, "{entries}");

    sqlx::query("DELETE FROM pipelines WHERE id = $1")
        .bind(pipeline)
        .execute(&app.pool)
        .await
        .expect("delete pipeline");
    let reply = app.delete(&format!("/embedding-models/{id}")).await;
    assert_eq!(reply.status, StatusCode::NO_CONTENT, "{}", reply.text);
    let entries = ok(&app, &format!("/api-keys/{}/permissions", key.0)).await;
    assert_eq!(entries, json!([]));
}

// ---- Permissions -------------------------------------------------------------------------

/// What the permission matrix of `resource_permissions` does not cover: executing a model
/// (`query`) needs execute, and creating one needs write on its provider.
#[tokio::test]
async fn querying_a_model_needs_execute_and_creating_one_needs_write_on_its_provider() {
    let app = spawn_app().await;
    let model = app.create_hash_model("guarded", 4).await;
    let id = model["id"].as_str().expect("id").to_owned();
    let path = format!("/embedding-models/{id}");
    let query_path = format!("{path}/query");
    let text = json!({"text": "hello"});

    // Read only: query needs execute.
    let reader = app
        .create_key(json!({"embedding-models": 4}), json!([]))
        .await;
    let reply = app.as_key(&reader).post(&query_path, &text).await;
    assert_error(
        &reply,
        StatusCode::FORBIDDEN,
        &denied("EXECUTE", "embedding-models", Some(&id)),
    );

    // Read and execute on this model only (object entry).
    let runner = app.create_key(json!({}), json!([])).await;
    app.grant(
        &runner.0,
        json!([{"object_type": "embedding-models", "object_id": id, "permission": 5}]),
    )
    .await;
    let reply = app.as_key(&runner).post(&query_path, &text).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(reply.body["dimensions"], 4);
    let reply = app.as_key(&runner).get("/embedding-models").await;
    assert_eq!(names(&reply.body), vec!["guarded".to_owned()]);

    // Write on models but not on the provider: the provider is "not found".
    let body = json!({"name": "new", "provider": "hash", "model_name": "h"});
    let writer = app
        .create_key(json!({"embedding-models": 6}), json!([]))
        .await;
    let reply = app.as_key(&writer).post("/embedding-models", &body).await;
    assert_error(
        &reply,
        StatusCode::NOT_FOUND,
        "Embedding Provider not found",
    );
    // An unknown provider name is a parameter error even then.
    let unknown = json!({"name": "new", "provider": "nope", "model_name": "h"});
    let reply = app
        .as_key(&writer)
        .post("/embedding-models", &unknown)
        .await;
    assert_invalid(&reply, "Unknown provider type: nope");
    let hash = provider_id(&app, "hash").await;
    app.grant(
        &writer.0,
        json!([{"object_type": "embedding-providers", "object_id": hash, "permission": 2}]),
    )
    .await;
    let reply = app.as_key(&writer).post("/embedding-models", &body).await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
    let reply = app
        .as_key(&writer)
        .patch(&path, &json!({"name": "renamed"}))
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    let reply = app.as_key(&writer).delete(&path).await;
    assert_eq!(reply.status, StatusCode::NO_CONTENT, "{}", reply.text);
}

// ---- The openai provider -----------------------------------------------------------------

const API_KEY: &str = "sk-test-4f1b9c0e7d2a";

/// What the fake server saw and how it answers.
#[derive(Default)]
struct FakeState {
    authorizations: Vec<String>,
    /// `(model, number of inputs, dimensions)` per request.
    requests: Vec<(String, usize, Option<u64>)>,
    /// Answer this many next requests with 503 (`Retry-After: 0`).
    unavailable: usize,
    /// Answer this many next requests with 429 (no `Retry-After`).
    rate_limited: usize,
    /// Answer every request with 500.
    broken: bool,
}

type Shared = Arc<Mutex<FakeState>>;

/// A deterministic vector of `dimensions` for a text.
fn fake_vector(text: &str, dimensions: usize) -> Vec<f32> {
    (0..dimensions)
        .map(|i| ((text.len() + 3 * i) % 11) as f32 + 1.0)
        .collect()
}

#[handler]
async fn fake_embeddings(
    req: &Request,
    body: poem::web::Json<Value>,
    state: Data<&Shared>,
) -> Response {
    let authorization = req
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let inputs: Vec<String> = body["input"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|t| t.as_str().unwrap_or_default().to_owned())
                .collect()
        })
        .unwrap_or_default();
    let dimensions = body["dimensions"].as_u64();
    let mut state = state.0.lock().expect("fake state");
    state.authorizations.push(authorization.clone());
    state.requests.push((
        body["model"].as_str().unwrap_or_default().to_owned(),
        inputs.len(),
        dimensions,
    ));
    if state.broken {
        return Response::builder()
            .status(PoemStatus::INTERNAL_SERVER_ERROR)
            .body("{\"error\": \"model crashed\"}");
    }
    if state.unavailable > 0 {
        state.unavailable -= 1;
        return Response::builder()
            .status(PoemStatus::SERVICE_UNAVAILABLE)
            .header("retry-after", "0")
            .body("overloaded");
    }
    if state.rate_limited > 0 {
        state.rate_limited -= 1;
        return Response::builder()
            .status(PoemStatus::TOO_MANY_REQUESTS)
            .body("slow down");
    }
    if authorization != format!("Bearer {API_KEY}") {
        // As OpenAI does: the message quotes the key it refused.
        let key = authorization.trim_start_matches("Bearer ");
        return Response::builder()
            .status(PoemStatus::UNAUTHORIZED)
            .content_type("application/json")
            .body(
                json!({"error": {"message": format!("Incorrect API key provided: {key}")}})
                    .to_string(),
            );
    }
    let size = usize::try_from(dimensions.unwrap_or(6)).expect("size");
    // Items in reverse order: the client must order them by `index`.
    let data: Vec<Value> = inputs
        .iter()
        .enumerate()
        .rev()
        .map(|(index, text)| {
            json!({"object": "embedding", "index": index, "embedding": fake_vector(text, size)})
        })
        .collect();
    Response::builder()
        .content_type("application/json")
        .body(json!({"object": "list", "data": data, "model": body["model"]}).to_string())
}

/// Starts the fake OpenAI-compatible server on 127.0.0.1; returns its `/v1` base URL.
async fn fake_openai(state: Shared) -> String {
    let address = crate::helpers::serve_on_loopback(
        Route::new()
            .at("/v1/embeddings", post(fake_embeddings))
            .data(state),
    );
    format!("http://{address}/v1")
}

fn openai_body(name: &str, base_url: &str, api_key: &str) -> Value {
    json!({
        "name": name,
        "provider": "openai",
        "model_name": "text-embedding-3-small",
        "parameters": {"base_url": base_url, "api_key": api_key, "dimensions": 12},
    })
}

#[tokio::test]
async fn openai_model_keeps_its_key_secret() {
    let app = spawn_app().await;
    let fake: Shared = Arc::default();
    let base_url = fake_openai(fake.clone()).await;
    fake.lock().expect("state").unavailable = 1;

    let reply = create(&app, openai_body("remote", &base_url, API_KEY)).await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
    assert_eq!(reply.body["dimensions"], 12);
    assert_eq!(reply.body["provider"], "openai");
    assert_eq!(
        reply.body["parameters"],
        json!({"base_url": base_url, "dimensions": 12})
    );
    assert!(!reply.text.contains(API_KEY));
    {
        let seen = fake.lock().expect("state");
        // The first answer was 503: the probe was retried.
        assert_eq!(seen.requests.len(), 2, "{:?}", seen.requests);
        assert_eq!(
            seen.requests[1],
            ("text-embedding-3-small".to_owned(), 1, Some(12))
        );
        assert!(
            seen.authorizations
                .iter()
                .all(|a| a == &format!("Bearer {API_KEY}"))
        );
    }
    let id = reply.body["id"].as_str().expect("id").to_owned();

    // Never returned, never stored in clear.
    let get = app.get(&format!("/embedding-models/{id}")).await;
    assert!(!get.text.contains(API_KEY), "{}", get.text);
    assert!(get.body["parameters"].get("api_key").is_none());
    let list = app.get("/embedding-models").await;
    assert!(!list.text.contains(API_KEY), "{}", list.text);
    let (parameters, secret): (Value, Option<Vec<u8>>) =
        sqlx::query_as("SELECT parameters, secret_parameters FROM embedding_models WHERE id = $1")
            .bind(Uuid::parse_str(&id).expect("uuid"))
            .fetch_one(&app.pool)
            .await
            .expect("row");
    assert_eq!(parameters, json!({"base_url": base_url, "dimensions": 12}));
    let secret = secret.expect("secret parameters stored");
    assert!(
        !secret
            .windows(API_KEY.len())
            .any(|w| w == API_KEY.as_bytes())
    );

    // The query goes through the server with the decrypted key; 429 is retried too.
    fake.lock().expect("state").rate_limited = 1;
    let reply = query(&app, &id, "hello").await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(reply.body["dimensions"], 12);
    let expected: Vec<f64> = fake_vector("hello", 12)
        .into_iter()
        .map(f64::from)
        .collect();
    assert_eq!(vector(&reply.body), expected);
    assert_eq!(fake.lock().expect("state").requests.len(), 4);

    // PATCH: parameters replaced whole, the key must be sent again.
    let path = format!("/embedding-models/{id}");
    let reply = app
        .patch(&path, &json!({"parameters": {"base_url": base_url}}))
        .await;
    assert_invalid(&reply, "API key is required for OpenAI provider");
    let reply = app
        .patch(
            &path,
            &json!({"parameters": {"base_url": base_url, "api_key": API_KEY, "dimensions": 10}}),
        )
        .await;
    assert_invalid(
        &reply,
        "Failed to create embedding model: expected embedding size 12, got 10",
    );
    let reply = app
        .patch(
            &path,
            &json!({"parameters": {"base_url": base_url, "api_key": "sk-wrong", "dimensions": 12}}),
        )
        .await;
    assert_error(&reply, StatusCode::BAD_REQUEST, "Invalid parameter");
    let reason = reply.body["error"]["details"]["error"]
        .as_str()
        .unwrap_or_default();
    assert!(
        reason.starts_with("Failed loading embedding model: ") && reason.contains("401"),
        "{reason}"
    );
    assert!(!reason.contains("sk-wrong"), "{reason}");
    let reply = app
        .patch(
            &path,
            &json!({"description": "rotated", "parameters": {"base_url": base_url, "api_key": API_KEY, "dimensions": 12}}),
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert!(!reply.text.contains(API_KEY));
    assert_eq!(reply.body["description"], "rotated");

    // A failing server: 500 `Internal error` once the retries are spent.
    fake.lock().expect("state").broken = true;
    let before = fake.lock().expect("state").requests.len();
    let reply = query(&app, &id, "hello").await;
    assert_error(&reply, StatusCode::INTERNAL_SERVER_ERROR, "Internal error");
    let reason = reply.body["error"]["details"]["error"]
        .as_str()
        .unwrap_or_default();
    assert!(
        reason.starts_with("Failed computing embeddings: ") && reason.contains("500"),
        "{reason}"
    );
    assert!(reason.contains("model crashed"), "{reason}");
    assert_eq!(fake.lock().expect("state").requests.len() - before, 4);

    // Secrets that cannot be decrypted.
    sqlx::query("UPDATE embedding_models SET secret_parameters = $2 WHERE id = $1")
        .bind(Uuid::parse_str(&id).expect("uuid"))
        .bind(vec![7u8; 40])
        .execute(&app.pool)
        .await
        .expect("corrupt");
    let reply = query(&app, &id, "hello").await;
    assert_error(
        &reply,
        StatusCode::INTERNAL_SERVER_ERROR,
        "Decryption error",
    );
}

#[tokio::test]
async fn openai_create_failures() {
    let app = spawn_app().await;
    let fake: Shared = Arc::default();
    let base_url = fake_openai(fake.clone()).await;

    // A wrong key is not retried and fails the probe.
    let reply = create(&app, openai_body("remote", &base_url, "sk-wrong")).await;
    assert_error(&reply, StatusCode::BAD_REQUEST, "Invalid parameter");
    let reason = reply.body["error"]["details"]["error"]
        .as_str()
        .unwrap_or_default();
    assert!(
        reason.starts_with("Failed loading embedding model: ")
            && reason.contains("401")
            && reason.contains("Incorrect API key provided: [redacted]"),
        "{reason}"
    );
    assert!(!reply.text.contains("sk-wrong"), "{}", reply.text);
    assert_eq!(fake.lock().expect("state").requests.len(), 1);

    // Size given and different from the probe.
    let mut body = openai_body("remote", &base_url, API_KEY);
    body["dimensions"] = json!(1536);
    let reply = create(&app, body).await;
    assert_invalid(
        &reply,
        "Failed to create embedding model: expected embedding size 1536, got 12",
    );

    // Nothing listens there.
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.local_addr().expect("address")
    };
    let reply = create(
        &app,
        openai_body("remote", &format!("http://{closed}/v1"), API_KEY),
    )
    .await;
    assert_error(&reply, StatusCode::BAD_REQUEST, "Invalid parameter");
    let reason = reply.body["error"]["details"]["error"]
        .as_str()
        .unwrap_or_default();
    assert!(
        reason.starts_with("Failed loading embedding model: "),
        "{reason}"
    );

    let body = ok(&app, "/embedding-models?provider=openai").await;
    assert_eq!(body["data"], json!([]));
}

#[tokio::test]
async fn openai_client_batches_and_orders_results() {
    let fake: Shared = Arc::default();
    let base_url = fake_openai(fake.clone()).await;
    let spec = ModelSpec {
        provider: ProviderKind::OpenAi,
        model_name: "batch-model".to_owned(),
        parameters: json!({"base_url": format!("{base_url}/"), "api_key": API_KEY}),
        dimensions: Some(6),
    };
    let embedder = OpenAiEmbedder::new(reqwest::Client::new(), &spec).expect("embedder");
    let texts: Vec<String> = (0..600).map(|i| "x".repeat(i % 17)).collect();
    let vectors = embedder.embed(&texts).await.expect("embeddings");
    assert_eq!(vectors.len(), 600);
    for (text, v) in texts.iter().zip(&vectors) {
        assert_eq!(v, &fake_vector(text, 6));
    }
    let sizes: Vec<usize> = fake
        .lock()
        .expect("state")
        .requests
        .iter()
        .map(|r| r.1)
        .collect();
    assert_eq!(sizes, vec![256, 256, 88]);
    assert!(!format!("{embedder:?}").contains(API_KEY));
}

/// A search of a pipeline whose model embeds on a remote server is never answered on a
/// remembered key check: each search embeds its query once, and a key deactivated since
/// causes no call to the model server.
#[tokio::test]
async fn searches_with_a_remote_model_check_their_key_before_embedding() {
    let app = spawn_app_without_worker().await;
    let fake: Shared = Arc::default();
    let base_url = fake_openai(fake.clone()).await;
    let model = create(&app, openai_body("remote", &base_url, API_KEY)).await;
    assert_eq!(model.status, StatusCode::CREATED, "{}", model.text);
    let pid = app
        .new_pipeline_id(json!({"embedding_model_id": model.body["id"]}))
        .await;
    app.submit_text(&pid, "doc", "a short text about harbours")
        .await;
    let outcome = app.step().await;
    assert_eq!((outcome.stored, outcome.failed), (1, 0), "{outcome:?}");
    let created = app.create_key_with(json!({"name": "searcher"})).await;
    let key = crate::helpers::key_of(&created);
    app.grant(
        &key.0,
        json!([{"object_type": "pipelines", "object_id": pid, "permission": 5, "classifications": ["*"]}]),
    )
    .await;
    let requests = || fake.lock().expect("state").requests.len();
    let search = || {
        let (app, pid, key) = (&app, &pid, &key);
        async move {
            app.as_key(key).post(&format!("/pipelines/{pid}/search"), &json!({"query": "harbours", "type": "similarity", "classification": "internal"}))
            .await
        }
    };
    let before = requests();
    for searched in 1..=3 {
        let reply = search().await;
        assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
        assert_eq!(reply.body.as_array().expect("fragments").len(), 1);
        assert_eq!(requests(), before + searched);
    }
    assert_eq!(app.state.metrics.searches_remembered.get(), 0.0);
    let off = app
        .patch(&format!("/api-keys/{}", key.0), &json!({"active": false}))
        .await;
    assert_eq!(off.status, StatusCode::OK, "{}", off.text);
    for _ in 0..2 {
        assert_error(
            &search().await,
            StatusCode::UNAUTHORIZED,
            "Invalid API Key or Secret",
        );
    }
    assert_eq!(requests(), before + 3);
}
