//! The license (`TROVE_LICENSE`): expiry and per-type count limits.

use std::collections::HashMap;

use reqwest::{Method, StatusCode};
use serde_json::json;
use uuid::Uuid;

use crate::helpers::{
    AppOptions, TempFile, TestApp, assert_error, key_of, spawn_app, spawn_app_with_license,
};

async fn app_with_license(content: &str) -> (TestApp, TempFile) {
    spawn_app_with_license(content, AppOptions::default()).await
}

/// Restarts on the database of `app` with a license. The master key of `app` (same secret)
/// stays the master key: installation happens once.
async fn restart_with_license(app: &TestApp, content: &str) -> (TestApp, TempFile) {
    spawn_app_with_license(
        content,
        AppOptions {
            database: Some(app.database.clone()),
            ..AppOptions::default()
        },
    )
    .await
}

const EXPIRED: &str = r#"{"expires_at": "2000-01-01T00:00:00Z", "limits": {}}"#;

#[tokio::test]
async fn expired_license_refuses_creates_and_changes_but_not_reads() {
    let (app, _file) = app_with_license(EXPIRED).await;
    let reply = app.post("/api-keys", &json!({"name": "new"})).await;
    assert_error(&reply, StatusCode::FORBIDDEN, "Invalid license: Expired");

    let master = app.master_id;
    let reply = app
        .patch(&format!("/api-keys/{master}"), &json!({"name": "renamed"}))
        .await;
    assert_error(&reply, StatusCode::FORBIDDEN, "Invalid license: Expired");

    let reply = app.get("/api-keys").await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(reply.body["data"].as_array().map(Vec::len), Some(1));
    assert_eq!(reply.body["data"][0]["name"], "master");
    let reply = app.get(&format!("/api-keys/{master}")).await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.body["name"], "master");
    let reply = app.get("/permissions").await;
    assert_eq!(reply.status, StatusCode::OK);
    let reply = app.post("/login", &json!({})).await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
    assert_eq!(reply.body["key"], "master");
}

#[tokio::test]
async fn expired_license_refuses_permission_changes_but_not_deletes() {
    let first = spawn_app().await;
    let target = first
        .create_key_with(json!({"name": "target", "permissions": {"llms": 4}}))
        .await;
    let target_id = target["id"].as_str().expect("id").to_owned();
    let (app, _file) = restart_with_license(&first, EXPIRED).await;
    let master = first.master_key();

    let path = format!("/api-keys/{target_id}/permissions");
    let reply = app
        .as_key(&master)
        .post(&path, &json!([{"object_type": "agents", "permission": 4}]))
        .await;
    assert_error(&reply, StatusCode::FORBIDDEN, "Invalid license: Expired");
    let reply = app.as_key(&master).get(&path).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(reply.body.as_array().map(Vec::len), Some(1));
    assert_eq!(reply.body[0]["object_type"], "llms");

    let reply = app
        .as_key(&master)
        .patch(&format!("/api-keys/{target_id}"), &json!({"active": false}))
        .await;
    assert_error(&reply, StatusCode::FORBIDDEN, "Invalid license: Expired");
    // The key that existed before still works, and can be deleted.
    let reply = app
        .req(Method::POST, "/login")
        .as_key(key_of(&target))
        .send()
        .await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
    let reply = app
        .as_key(&master)
        .delete(&format!("/api-keys/{target_id}"))
        .await;
    assert_eq!(reply.status, StatusCode::NO_CONTENT, "{}", reply.text);
}

#[tokio::test]
async fn license_is_checked_after_permission_and_existence_before_validation() {
    let first = spawn_app().await;
    let reader = first.create_key(json!({"api-keys": 4}), json!([])).await;
    let (app, _file) = restart_with_license(&first, EXPIRED).await;
    let master = first.master_key();

    // Permission before the license.
    let reply = app
        .as_key(&reader)
        .post("/api-keys", &json!({"name": "x"}))
        .await;
    assert_error(
        &reply,
        StatusCode::FORBIDDEN,
        "Unauthorized: access level AccessLevel(WRITE) required for api-keys with id None",
    );
    // Existence before the license.
    let missing = Uuid::new_v4();
    let reply = app
        .as_key(&master)
        .patch(&format!("/api-keys/{missing}"), &json!({"name": "x"}))
        .await;
    assert_error(&reply, StatusCode::NOT_FOUND, "ApiKey not found");
    // Body parsing before the license.
    let reply = app
        .as_key(&master)
        .post("/api-keys", &json!({"name": 3}))
        .await;
    assert_eq!(
        reply.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{}",
        reply.text
    );
    // Validation after the license.
    for body in [
        json!({"name": ""}),
        json!({"name": "x", "permissions": {"widgets": 4}}),
    ] {
        let reply = app.as_key(&master).post("/api-keys", &body).await;
        assert_error(&reply, StatusCode::FORBIDDEN, "Invalid license: Expired");
    }
}

#[tokio::test]
async fn license_without_expiry_allows_creates() {
    let (app, _file) = app_with_license(
        r#"{"expires_at": "2999-01-01T00:00:00Z", "limits": {"agents": 0}, "customer": "acme"}"#,
    )
    .await;
    let reply = app.post("/api-keys", &json!({"name": "fine"})).await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
}

#[tokio::test]
async fn api_key_limit_counts_the_master_key() {
    let (app, _file) = app_with_license(r#"{"expires_at": null, "limits": {"api-keys": 2}}"#).await;
    let first = app.post("/api-keys", &json!({"name": "one"})).await;
    assert_eq!(first.status, StatusCode::CREATED, "{}", first.text);
    let reply = app.post("/api-keys", &json!({"name": "two"})).await;
    assert_error(
        &reply,
        StatusCode::FORBIDDEN,
        "License limits exceeded for Api Key",
    );
    // At the limit, changes still pass.
    let id = first.body["id"].as_str().expect("id");
    let reply = app
        .patch(&format!("/api-keys/{id}"), &json!({"name": "uno"}))
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    app.grant(id, json!([{"object_type": "agents", "permission": 4}]))
        .await;
    // Deleting frees a place.
    let reply = app.delete(&format!("/api-keys/{id}")).await;
    assert_eq!(reply.status, StatusCode::NO_CONTENT);
    let reply = app.post("/api-keys", &json!({"name": "two"})).await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
    // `POST /login` is never checked.
    assert_eq!(
        app.post("/login", &json!({})).await.status,
        StatusCode::CREATED
    );
}

#[tokio::test]
async fn exceeded_limit_refuses_every_create_and_change() {
    let (app, _file) = app_with_license(r#"{"limits": {"api-keys": 0}}"#).await;
    let reply = app.post("/api-keys", &json!({"name": "new"})).await;
    assert_error(
        &reply,
        StatusCode::FORBIDDEN,
        "Invalid license: Exceeded(\"api-keys\")",
    );
    let master = app.master_id;
    let reply = app
        .patch(&format!("/api-keys/{master}"), &json!({"name": "renamed"}))
        .await;
    assert_error(
        &reply,
        StatusCode::FORBIDDEN,
        "Invalid license: Exceeded(\"api-keys\")",
    );
    // Reads and the key check are not affected.
    assert_eq!(app.get("/api-keys").await.status, StatusCode::OK);
    assert_eq!(
        app.post("/login", &json!({})).await.status,
        StatusCode::CREATED
    );
}

#[tokio::test]
async fn exceeded_limit_refuses_permission_changes_but_not_deletes() {
    let first = spawn_app().await;
    let target = first.create_key_with(json!({"name": "target"})).await;
    let target_id = target["id"].as_str().expect("id").to_owned();
    // Two keys exist (master and target) for a limit of one.
    let (app, _file) = restart_with_license(&first, r#"{"limits": {"api-keys": 1}}"#).await;
    let master = first.master_key();
    let exceeded = "Invalid license: Exceeded(\"api-keys\")";

    let reply = app
        .as_key(&master)
        .post(
            &format!("/api-keys/{target_id}/permissions"),
            &json!([{"object_type": "agents", "permission": 4}]),
        )
        .await;
    assert_error(&reply, StatusCode::FORBIDDEN, exceeded);
    let reply = app
        .as_key(&master)
        .patch(
            &format!("/api-keys/{target_id}"),
            &json!({"description": "x"}),
        )
        .await;
    assert_error(&reply, StatusCode::FORBIDDEN, exceeded);
    let reply = app
        .as_key(&master)
        .post("/api-keys", &json!({"name": "third"}))
        .await;
    assert_error(&reply, StatusCode::FORBIDDEN, exceeded);

    // Deleting brings the count back to the limit: changes pass, creates still do not.
    let reply = app
        .as_key(&master)
        .delete(&format!("/api-keys/{target_id}"))
        .await;
    assert_eq!(reply.status, StatusCode::NO_CONTENT, "{}", reply.text);
    let reply = app
        .as_key(&master)
        .patch(
            &format!("/api-keys/{}", first.master_id),
            &json!({"description": "at the limit"}),
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    let reply = app
        .as_key(&master)
        .post("/api-keys", &json!({"name": "third"}))
        .await;
    assert_error(
        &reply,
        StatusCode::FORBIDDEN,
        "License limits exceeded for Api Key",
    );
}

#[tokio::test]
async fn unreadable_license_stops_the_configuration() {
    let base = |license: String| {
        let env: HashMap<&str, String> = HashMap::from([
            (
                "TROVE_DATABASE_URL",
                "postgres://trove@127.0.0.1:1/none".to_owned(),
            ),
            (
                "TROVE_SECRET",
                "dGVzdHRlc3R0ZXN0dGVzdHRlc3R0ZXN0dGVzdHRlc3Q=".to_owned(),
            ),
            ("TROVE_LICENSE", license),
        ]);
        trove::config::Config::from_lookup(move |k| env.get(k).cloned())
    };
    let missing = std::env::temp_dir().join(format!("no-such-license-{}.json", Uuid::new_v4()));
    let error = base(missing.to_string_lossy().into_owned()).expect_err("unreadable license");
    assert_eq!(error.variable, "TROVE_LICENSE");

    let malformed = TempFile::new("{not json");
    let error = base(malformed.path()).expect_err("malformed license");
    assert_eq!(error.variable, "TROVE_LICENSE");

    let valid = TempFile::new(r#"{"expires_at": null, "limits": {"api-keys": 3}}"#);
    assert!(base(valid.path()).is_ok());
}
