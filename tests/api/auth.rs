//! Authentication: the key headers, the refusals and the order of checks.

use reqwest::header::HeaderValue;
use reqwest::{Method, StatusCode};
use serde_json::json;
use uuid::Uuid;

use crate::helpers::{assert_error, assert_plain, key_of, spawn_app};

#[tokio::test]
async fn missing_key_header_is_401() {
    let app = spawn_app().await;
    for (method, path) in [
        (Method::POST, "/login"),
        (Method::GET, "/api-keys"),
        (Method::GET, "/permissions"),
    ] {
        let reply = app
            .req(method, path)
            .header("x-api-key-secret", &app.master_secret)
            .send()
            .await;
        assert_error(
            &reply,
            StatusCode::UNAUTHORIZED,
            "Unauthorized: No API Key specified.",
        );
    }
}

#[tokio::test]
async fn missing_secret_header_is_401() {
    let app = spawn_app().await;
    let reply = app
        .req(Method::POST, "/login")
        .header("x-api-key", app.master_id.to_string())
        .send()
        .await;
    assert_error(
        &reply,
        StatusCode::UNAUTHORIZED,
        "Unauthorized: No API Secret Key specified.",
    );
}

#[tokio::test]
async fn key_that_is_not_a_uuid_is_invalid_key_id() {
    let app = spawn_app().await;
    let key = ("not-a-uuid".to_owned(), app.master_secret.clone());
    let reply = app.req(Method::POST, "/login").as_key(&key).send().await;
    assert_error(&reply, StatusCode::UNAUTHORIZED, "Invalid key ID");
}

#[tokio::test]
async fn unknown_key_or_wrong_secret_is_refused() {
    let app = spawn_app().await;
    let unknown = (Uuid::new_v4().to_string(), app.master_secret.clone());
    let reply = app
        .req(Method::POST, "/login")
        .as_key(&unknown)
        .send()
        .await;
    assert_error(
        &reply,
        StatusCode::UNAUTHORIZED,
        "Invalid API Key or Secret",
    );

    let wrong = (app.master_id.to_string(), "x".repeat(48));
    let reply = app.req(Method::POST, "/login").as_key(&wrong).send().await;
    assert_error(
        &reply,
        StatusCode::UNAUTHORIZED,
        "Invalid API Key or Secret",
    );

    let created = app.create_key(json!({"api-keys": 4}), json!([])).await;
    let swapped = (created.0.clone(), app.master_secret.clone());
    let reply = app.as_key(&swapped).get("/api-keys").await;
    assert_error(
        &reply,
        StatusCode::UNAUTHORIZED,
        "Invalid API Key or Secret",
    );
    // The right pair works.
    let reply = app.as_key(&created).get("/api-keys").await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
}

#[tokio::test]
async fn inactive_key_is_refused() {
    let app = spawn_app().await;
    let created = app.create_key_with(json!({"name": "soon off"})).await;
    let key = key_of(&created);
    assert_eq!(
        app.req(Method::POST, "/login")
            .as_key(&key)
            .send()
            .await
            .status,
        StatusCode::CREATED
    );
    let reply = app
        .patch(&format!("/api-keys/{}", key.0), &json!({"active": false}))
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    let reply = app.req(Method::POST, "/login").as_key(&key).send().await;
    assert_error(
        &reply,
        StatusCode::UNAUTHORIZED,
        "Invalid API Key or Secret",
    );
}

#[tokio::test]
async fn expired_key_is_refused() {
    let app = spawn_app().await;
    let created = app.create_key_with(json!({"name": "expiring"})).await;
    let key = key_of(&created);
    let reply = app
        .patch(
            &format!("/api-keys/{}", key.0),
            &json!({"expiration": "2001-02-03T04:05:06Z"}),
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    let reply = app.req(Method::POST, "/login").as_key(&key).send().await;
    assert_error(
        &reply,
        StatusCode::UNAUTHORIZED,
        "Invalid API Key or Secret",
    );
}

#[tokio::test]
async fn key_with_a_future_expiration_works() {
    let app = spawn_app().await;
    let created = app.create_key_with(json!({"name": "later"})).await;
    let key = key_of(&created);
    let reply = app
        .patch(
            &format!("/api-keys/{}", key.0),
            &json!({"expiration": "2999-01-01T00:00:00Z"}),
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    let reply = app.req(Method::POST, "/login").as_key(&key).send().await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
}

#[tokio::test]
async fn header_values_beyond_visible_ascii_count_as_missing() {
    let app = spawn_app().await;
    let accented = HeaderValue::from_bytes("clé".as_bytes()).expect("header value");
    let reply = app
        .req(Method::POST, "/login")
        .header("x-api-key", accented.clone())
        .header("x-api-key-secret", &app.master_secret)
        .send()
        .await;
    assert_error(
        &reply,
        StatusCode::UNAUTHORIZED,
        "Unauthorized: No API Key specified.",
    );

    let reply = app
        .req(Method::POST, "/login")
        .header("x-api-key", app.master_id.to_string())
        .header("x-api-key-secret", accented)
        .send()
        .await;
    assert_error(
        &reply,
        StatusCode::UNAUTHORIZED,
        "Unauthorized: No API Secret Key specified.",
    );

    // A space is not a visible character either.
    let spaced = HeaderValue::from_static("abc def");
    let reply = app
        .req(Method::POST, "/login")
        .header("x-api-key", spaced)
        .header("x-api-key-secret", &app.master_secret)
        .send()
        .await;
    assert_error(
        &reply,
        StatusCode::UNAUTHORIZED,
        "Unauthorized: No API Key specified.",
    );
}

#[tokio::test]
async fn authentication_is_checked_before_path_query_and_body() {
    let app = spawn_app().await;
    // No key, invalid path UUID, invalid JSON: 401.
    let reply = app
        .req(Method::PATCH, "/api-keys/abc")
        .header("content-type", "application/json")
        .body("{bad")
        .send()
        .await;
    assert_error(
        &reply,
        StatusCode::UNAUTHORIZED,
        "Unauthorized: No API Key specified.",
    );
    // No key and a bad query string: 401.
    let reply = app
        .req(Method::GET, "/api-keys?first=abc&name=a&name=b")
        .send()
        .await;
    assert_error(
        &reply,
        StatusCode::UNAUTHORIZED,
        "Unauthorized: No API Key specified.",
    );
    // No key, no content type: 401, not 415.
    let reply = app.req(Method::POST, "/api-keys").body("{}").send().await;
    assert_error(
        &reply,
        StatusCode::UNAUTHORIZED,
        "Unauthorized: No API Key specified.",
    );
    // Wrong secret with an invalid path and body: still 401.
    let wrong = (app.master_id.to_string(), "y".repeat(48));
    let reply = app
        .req(Method::PATCH, "/api-keys/abc")
        .as_key(&wrong)
        .header("content-type", "application/json")
        .body("{bad")
        .send()
        .await;
    assert_error(
        &reply,
        StatusCode::UNAUTHORIZED,
        "Invalid API Key or Secret",
    );
}

#[tokio::test]
async fn with_a_valid_key_the_path_is_checked_before_the_body() {
    let app = spawn_app().await;
    let reply = app
        .req(Method::PATCH, "/api-keys/abc")
        .as_master()
        .header("content-type", "application/json")
        .body("{bad")
        .send()
        .await;
    assert_plain(&reply, StatusCode::BAD_REQUEST, "Invalid URL: Cannot parse");
    // Invalid path and no content type: the path still wins.
    let reply = app
        .req(Method::PATCH, "/api-keys/abc")
        .as_master()
        .body("{}")
        .send()
        .await;
    assert_plain(&reply, StatusCode::BAD_REQUEST, "Invalid URL: Cannot parse");
}

#[tokio::test]
async fn with_a_valid_key_the_query_is_checked_before_the_body() {
    let app = spawn_app().await;
    let reply = app
        .req(Method::GET, "/api-keys?first=abc")
        .as_master()
        .header("content-type", "application/json")
        .body("{bad")
        .send()
        .await;
    assert_plain(
        &reply,
        StatusCode::BAD_REQUEST,
        "Failed to deserialize query string",
    );
}

#[tokio::test]
async fn body_is_checked_before_existence_and_permission() {
    let app = spawn_app().await;
    // Unknown key id and an invalid body: the body error comes first.
    let reply = app
        .req(Method::PATCH, &format!("/api-keys/{}", Uuid::new_v4()))
        .as_master()
        .header("content-type", "application/json")
        .body("{bad")
        .send()
        .await;
    assert_plain(
        &reply,
        StatusCode::BAD_REQUEST,
        "Failed to parse the request body as JSON: ",
    );
    // A key without write on api-keys sending a malformed create: 422 before 403.
    let reader = app.create_key(json!({"api-keys": 4}), json!([])).await;
    let reply = app
        .as_key(&reader)
        .post("/api-keys", &json!({"name": 1}))
        .await;
    assert_plain(
        &reply,
        StatusCode::UNPROCESSABLE_ENTITY,
        "Failed to deserialize the JSON body into the target type: ",
    );
}
