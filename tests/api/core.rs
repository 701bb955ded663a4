//! Core routes, framework-level errors, request ids, CORS, metrics and statistics.

use reqwest::{Method, StatusCode};
use serde_json::json;

use crate::helpers::spawn_app;

#[tokio::test]
async fn root_names_the_service_without_request_id() {
    let app = spawn_app().await;
    let reply = app.send(Method::GET, "/", None, None).await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.text, "Trove Knowledge Retrieval and Agent Service");
    assert!(reply.header("content-type").unwrap_or_default().starts_with("text/plain"));
    assert!(reply.header("x-request-id").is_none());
}

#[tokio::test]
async fn healthz_reports_components() {
    let app = spawn_app().await;
    let reply = app.send(Method::GET, "/healthz", None, None).await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.body, json!({"status":"ok","components":{"database":"ok","queue":"ok","sidecar":"ok"}}));
    assert!(reply.header("x-request-id").is_none());
    assert!(reply.header("access-control-allow-origin").is_none());
}

#[tokio::test]
async fn unknown_path_is_an_empty_404_without_request_id() {
    let app = spawn_app().await;
    let reply = app.send(Method::GET, "/no/such/path", None, None).await;
    assert_eq!(reply.status, StatusCode::NOT_FOUND);
    assert_eq!(reply.text, "");
    assert!(reply.header("x-request-id").is_none());
}

#[tokio::test]
async fn wrong_method_is_405_with_allow() {
    let app = spawn_app().await;
    let reply = app.send(Method::PUT, "/api-keys", None, None).await;
    assert_eq!(reply.status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(reply.text, "");
    let allow = reply.header("allow").unwrap_or_default().to_owned();
    assert!(allow.contains("GET") && allow.contains("POST"), "{allow}");
}
