//! API keys, key check and permissions.

use reqwest::{Method, StatusCode};
use serde_json::json;

use crate::helpers::spawn_app;

#[tokio::test]
async fn login_with_the_master_key() {
    let app = spawn_app().await;
    let reply = app.post("/login", &json!({})).await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text);
    assert_eq!(reply.body["message"], "OK");
    assert_eq!(reply.body["key"], "master");
    assert_eq!(reply.body["permissions"]["pipelines"], json!({"access_level": 7, "classifications": ["*"]}));
    assert!(reply.header("x-request-id").is_some());
}

#[tokio::test]
async fn missing_key_is_401() {
    let app = spawn_app().await;
    let reply = app.send(Method::POST, "/login", None, None).await;
    assert_eq!(reply.status, StatusCode::UNAUTHORIZED);
    assert_eq!(reply.message(), "Unauthorized: No API Key specified.");
}
