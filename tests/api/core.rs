//! Core routes, reference routes, request ids, CORS and framework-level errors.

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::helpers::{assert_plain, ends_with_line_column, eventually, is_uuid, spawn_app};

/// The routes without an API key that carry neither a request id nor cross-origin headers.
const REFERENCE_ROUTES: [&str; 7] = [
    "/",
    "/healthz",
    "/metrics",
    "/openapi.json",
    "/docs",
    "/_docs",
    "/_docs-alt",
];

#[tokio::test]
async fn root_names_the_service_without_request_id() {
    let app = spawn_app().await;
    let reply = app.req(Method::GET, "/").send().await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.text, "Trove Knowledge Retrieval and Agent Service");
    assert!(
        reply
            .header("content-type")
            .unwrap_or_default()
            .starts_with("text/plain")
    );
    assert!(reply.header("x-request-id").is_none());
}

#[tokio::test]
async fn healthz_reports_components() {
    let app = spawn_app().await;
    let reply = app.req(Method::GET, "/healthz").send().await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(
        reply.body,
        json!({"status":"ok","components":{"database":"ok","queue":"ok","sidecar":"ok"}})
    );
    assert!(reply.header("x-request-id").is_none());
    assert!(reply.header("access-control-allow-origin").is_none());
}

#[tokio::test]
async fn openapi_document_names_trove_and_its_release() {
    let app = spawn_app().await;
    let reply = app.req(Method::GET, "/openapi.json").send().await;
    assert_eq!(reply.status, StatusCode::OK);
    assert!(
        reply
            .header("content-type")
            .unwrap_or_default()
            .starts_with("application/json"),
        "{:?}",
        reply.header("content-type")
    );
    assert_eq!(reply.body["info"]["title"], "Trove");
    let version = reply.body["info"]["version"].as_str().unwrap_or_default();
    let bytes = version.as_bytes();
    assert!(
        bytes.len() == 7
            && bytes[4] == b'-'
            && bytes
                .iter()
                .enumerate()
                .all(|(i, b)| i == 4 || b.is_ascii_digit()),
        "version not <year>-<month>: {version:?}"
    );
    let paths = reply.body["paths"].as_object().expect("paths object");
    assert!(paths.contains_key("/api-keys"), "{:?}", paths.keys());
}

#[tokio::test]
async fn documentation_pages_are_html_served_from_the_binary() {
    let app = spawn_app().await;
    for path in ["/docs", "/_docs", "/_docs-alt"] {
        let reply = app.req(Method::GET, path).send().await;
        assert_eq!(reply.status, StatusCode::OK, "{path}");
        assert!(
            reply
                .header("content-type")
                .unwrap_or_default()
                .starts_with("text/html"),
            "{path}: {:?}",
            reply.header("content-type")
        );
        assert!(reply.text.contains("<html"), "{path}: not an HTML page");
        for cdn in ["cdn.jsdelivr.net", "unpkg.com", "cdnjs.cloudflare.com"] {
            assert!(!reply.text.contains(cdn), "{path} references {cdn}");
        }
    }
}

#[tokio::test]
async fn reference_routes_carry_no_request_id_nor_cors_headers() {
    let app = spawn_app().await;
    for path in REFERENCE_ROUTES {
        let reply = app
            .req(Method::GET, path)
            .header("origin", "https://example.com")
            .header("x-request-id", "client-chosen-id")
            .send()
            .await;
        assert_eq!(reply.status, StatusCode::OK, "{path}");
        assert!(reply.header("x-request-id").is_none(), "{path}");
        assert!(
            reply.header("access-control-allow-origin").is_none(),
            "{path}"
        );
    }
}

#[tokio::test]
async fn unknown_path_is_an_empty_404_without_request_id() {
    let app = spawn_app().await;
    let reply = app.req(Method::GET, "/no/such/path").send().await;
    assert_eq!(reply.status, StatusCode::NOT_FOUND);
    assert_eq!(reply.text, "");
    assert!(reply.header("x-request-id").is_none());
}

#[tokio::test]
async fn wrong_method_is_405_with_allow() {
    let app = spawn_app().await;
    let reply = app.req(Method::PUT, "/api-keys").send().await;
    assert_eq!(reply.status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(reply.text, "");
    let allow = reply.header("allow").unwrap_or_default().to_owned();
    assert!(allow.contains("GET") && allow.contains("POST"), "{allow}");
    assert!(!allow.contains("PUT"), "{allow}");

    let reply = app.req(Method::PUT, "/api-keys/abc").send().await;
    assert_eq!(reply.status, StatusCode::METHOD_NOT_ALLOWED);
    let allow = reply.header("allow").unwrap_or_default().to_owned();
    for method in ["GET", "PATCH", "DELETE"] {
        assert!(allow.contains(method), "{allow}");
    }
}

#[tokio::test]
async fn api_responses_get_a_generated_request_id() {
    let app = spawn_app().await;
    let first = app.get("/api-keys").await;
    assert_eq!(first.status, StatusCode::OK);
    let first_id = first.header("x-request-id").expect("x-request-id");
    assert!(is_uuid(first_id), "{first_id}");
    let second = app.get("/api-keys").await;
    let second_id = second.header("x-request-id").expect("x-request-id");
    assert!(is_uuid(second_id), "{second_id}");
    assert_ne!(first_id, second_id);
    // Error answers of API routes carry one too.
    let refused = app.req(Method::GET, "/api-keys").send().await;
    assert_eq!(refused.status, StatusCode::UNAUTHORIZED);
    assert!(is_uuid(
        refused.header("x-request-id").expect("x-request-id")
    ));
}

#[tokio::test]
async fn client_request_id_is_kept_whatever_the_header_case() {
    let app = spawn_app().await;
    for name in ["x-request-id", "X-Request-Id", "X-REQUEST-ID"] {
        let reply = app
            .req(Method::GET, "/api-keys")
            .as_master()
            .header(name, "my-trace-0001")
            .send()
            .await;
        assert_eq!(reply.status, StatusCode::OK);
        assert_eq!(
            reply.header("x-request-id"),
            Some("my-trace-0001"),
            "{name}"
        );
    }
    let reply = app
        .req(Method::POST, "/login")
        .header("X-Request-Id", "refused-0002")
        .send()
        .await;
    assert_eq!(reply.status, StatusCode::UNAUTHORIZED);
    assert_eq!(reply.header("x-request-id"), Some("refused-0002"));
}

#[tokio::test]
async fn cors_preflight_accepts_any_origin() {
    let app = spawn_app().await;
    let reply = app
        .req(Method::OPTIONS, "/api-keys")
        .header("Origin", "https://example.com")
        .header("Access-Control-Request-Method", "POST")
        .header(
            "Access-Control-Request-Headers",
            "x-api-key, x-api-key-secret, content-type",
        )
        .send()
        .await;
    assert!(reply.status.is_success(), "{}", reply.status);
    assert_eq!(reply.header("access-control-allow-origin"), Some("*"));
}

#[tokio::test]
async fn api_responses_carry_cors_headers() {
    let app = spawn_app().await;
    let reply = app
        .req(Method::GET, "/api-keys")
        .as_master()
        .header("Origin", "https://example.com")
        .send()
        .await;
    assert_eq!(reply.status, StatusCode::OK);
    let origin = reply
        .header("access-control-allow-origin")
        .expect("access-control-allow-origin");
    assert!(origin == "*" || origin == "https://example.com", "{origin}");
}

// ---- Framework errors -------------------------------------------------------------------

#[tokio::test]
async fn invalid_json_is_400_plain_text() {
    let app = spawn_app().await;
    let reply = app
        .req(Method::POST, "/api-keys")
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
    assert!(reply.text.len() > "Failed to parse the request body as JSON: ".len());
}

#[tokio::test]
async fn body_over_two_megabytes_is_413() {
    let app = spawn_app().await;
    let size = 2 * 1024 * 1024 + 10;
    let body = format!("\"{}\"", "a".repeat(size - 2));
    assert_eq!(body.len(), size);
    let reply = app
        .req(Method::POST, "/api-keys")
        .as_master()
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await;
    assert_eq!(reply.status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(
        reply.text,
        "Failed to buffer the request body: length limit exceeded"
    );
}

#[tokio::test]
async fn missing_or_other_content_type_is_415() {
    let app = spawn_app().await;
    let body = r#"{"name":"k"}"#;
    let without = app
        .req(Method::POST, "/api-keys")
        .as_master()
        .body(body)
        .send()
        .await;
    assert_eq!(without.status, StatusCode::UNSUPPORTED_MEDIA_TYPE);
    assert_eq!(
        without.text,
        "Expected request with Content-Type: application/json"
    );
    let other = app
        .req(Method::POST, "/api-keys")
        .as_master()
        .header("content-type", "text/plain")
        .body(body)
        .send()
        .await;
    assert_eq!(other.status, StatusCode::UNSUPPORTED_MEDIA_TYPE);
    assert_eq!(
        other.text,
        "Expected request with Content-Type: application/json"
    );
}

#[tokio::test]
async fn wrong_type_or_missing_field_is_422_with_position() {
    let app = spawn_app().await;
    let prefix = "Failed to deserialize the JSON body into the target type: ";
    for body in [
        json!({"name": 5}),
        json!({}),
        json!({"name": "k", "description": 3}),
        json!({"name": "k", "permissions": {"agents": "all"}}),
        json!({"name": "k", "classifications": "a"}),
        json!([]),
    ] {
        let reply = app.post("/api-keys", &body).await;
        assert_plain(&reply, StatusCode::UNPROCESSABLE_ENTITY, prefix);
        assert!(
            ends_with_line_column(&reply.text),
            "{body}: no position in {:?}",
            reply.text
        );
    }
    // PATCH and the permissions body as well.
    let id = app.master_id;
    let reply = app
        .patch(&format!("/api-keys/{id}"), &json!({"active": "no"}))
        .await;
    assert_plain(&reply, StatusCode::UNPROCESSABLE_ENTITY, prefix);
    assert!(ends_with_line_column(&reply.text), "{}", reply.text);
    let reply = app
        .post(
            &format!("/api-keys/{id}/permissions"),
            &json!([{"object_type": "agents"}]),
        )
        .await;
    assert_plain(&reply, StatusCode::UNPROCESSABLE_ENTITY, prefix);
    assert!(ends_with_line_column(&reply.text), "{}", reply.text);
}

#[tokio::test]
async fn permission_value_out_of_range_is_422() {
    let app = spawn_app().await;
    let prefix = "Failed to deserialize the JSON body into the target type: ";
    for value in [json!(8), json!(-1), json!(4.5)] {
        let reply = app
            .post(
                "/api-keys",
                &json!({"name": "k", "permissions": {"agents": value}}),
            )
            .await;
        assert_plain(&reply, StatusCode::UNPROCESSABLE_ENTITY, prefix);
    }
    let created = app.create_key(json!({}), json!([])).await;
    let reply = app
        .post(
            &format!("/api-keys/{}/permissions", created.0),
            &json!([{"object_type": "agents", "permission": 8}]),
        )
        .await;
    assert_plain(&reply, StatusCode::UNPROCESSABLE_ENTITY, prefix);
}

#[tokio::test]
async fn invalid_uuid_in_path_is_400_invalid_url() {
    let app = spawn_app().await;
    for (method, path) in [
        (Method::GET, "/api-keys/abc"),
        (Method::DELETE, "/api-keys/abc"),
        (Method::GET, "/api-keys/abc/permissions"),
        (Method::GET, "/permissions/api-keys/abc"),
    ] {
        let id = app.master_id.to_string();
        let reply = app
            .req(method, path)
            .as_key((&id, &app.master_secret))
            .send()
            .await;
        assert_plain(&reply, StatusCode::BAD_REQUEST, "Invalid URL: Cannot parse");
        assert!(reply.text.contains("abc"), "{path}: {}", reply.text);
    }
}

#[tokio::test]
async fn bad_query_parameters_are_400_plain_text() {
    let app = spawn_app().await;
    for query in [
        "first=abc",
        "first=-1",
        "last=x",
        "limit=-5",
        "offset=1.5",
        "count=maybe",
        "active=perhaps",
        "id=not-a-uuid",
        "created_at$gt=yesterday",
    ] {
        let reply = app.get(&format!("/api-keys?{query}")).await;
        assert_plain(
            &reply,
            StatusCode::BAD_REQUEST,
            "Failed to deserialize query string",
        );
        assert!(
            reply
                .header("content-type")
                .unwrap_or_default()
                .starts_with("text/plain"),
            "{query}"
        );
    }
}

#[tokio::test]
async fn repeated_non_repeatable_parameter_is_400_plain_text() {
    let app = spawn_app().await;
    for query in [
        "name=a&name=b",
        "first=1&first=2",
        "active=true&active=false",
        "description=a&description=b",
    ] {
        let reply = app.get(&format!("/api-keys?{query}")).await;
        assert_plain(
            &reply,
            StatusCode::BAD_REQUEST,
            "Failed to deserialize query string",
        );
    }
}

#[tokio::test]
async fn timestamp_offsets_need_an_encoded_plus() {
    let app = spawn_app().await;
    let reply = app
        .get("/api-keys?created_at$gt=2024-01-01T00:00:00+01:00")
        .await;
    assert_plain(
        &reply,
        StatusCode::BAD_REQUEST,
        "Failed to deserialize query string",
    );
    let reply = app
        .get("/api-keys?created_at$gt=2024-01-01T00:00:00%2B01:00")
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    assert_eq!(reply.body["data"].as_array().map(Vec::len), Some(1));
    let echoed: Value = reply.body["query_info"]["created_at$gt"].clone();
    let at = crate::helpers::assert_utc_timestamp(&echoed);
    assert_eq!(at.to_rfc3339(), "2023-12-31T23:00:00+00:00");
}

/// Connections the server closed (as on a restart) are found by the ping a connection gets
/// before use after a second idle, so requests after that second all succeed.
#[tokio::test]
async fn connections_closed_by_the_server_are_replaced_after_a_second_idle() {
    let app = crate::helpers::spawn_app_without_worker().await;
    for _ in 0..3 {
        let reply = app.get("/pipelines").await;
        assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    }
    let closed: i64 = sqlx::query_scalar(
        "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM (
             SELECT pid FROM pg_stat_activity
             WHERE datname = current_database() AND pid <> pg_backend_pid()
               AND backend_type = 'client backend'
             OFFSET 0) AS others",
    )
    .fetch_one(&app.pool)
    .await
    .unwrap();
    assert!(closed > 0, "no service connection was open");
    // Time passes: the ping before use happens only after a second idle.
    tokio::time::sleep(std::time::Duration::from_millis(1200)).await;
    for _ in 0..5 {
        let reply = app.get("/pipelines").await;
        assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    }
}

/// One value read on a hot path's connection.
async fn scalar<T>(connection: &mut trove::store::Connection, sql: &'static str) -> T
where
    T: for<'r> sqlx::Decode<'r, sqlx::Postgres> + sqlx::Type<sqlx::Postgres> + Send + Unpin,
{
    sqlx::query_scalar(sql)
        .fetch_one(&mut **connection)
        .await
        .unwrap()
}

/// The hot paths' connections: the one parked last is handed out first (sqlx's pool hands
/// out the one idle longest, a different server process each time after a burst), and one
/// dropped without being parked goes back to sqlx's pool instead.
#[tokio::test]
async fn warm_connections_are_reused_most_recent_first() {
    let app = crate::helpers::spawn_app_without_worker().await;
    let pool = &app.state.pool;
    async fn backend(connection: &mut trove::store::Connection) -> i32 {
        scalar(connection, "SELECT pg_backend_pid()").await
    }
    // Several idle connections in sqlx's pool, so that it would rotate among them.
    let mut opened = Vec::new();
    for _ in 0..4 {
        opened.push(pool.acquire().await.unwrap());
    }
    drop(opened);
    eventually(
        "the four connections back idle in sqlx's pool",
        std::time::Duration::from_secs(5),
        || async { (pool.pg_pool().num_idle() >= 4).then_some(()) },
    )
    .await;

    let mut first = pool.acquire_warm().await.unwrap();
    let parked = backend(&mut first).await;
    first.park();
    for _ in 0..5 {
        let mut again = pool.acquire_warm().await.unwrap();
        assert_eq!(backend(&mut again).await, parked);
        again.park();
    }

    // Two taken at once: the second comes from sqlx's pool. Dropped without `park`, it goes
    // back there; the parked one is still handed out first.
    let mut held = pool.acquire_warm().await.unwrap();
    let mut other = pool.acquire_warm().await.unwrap();
    let dropped = backend(&mut other).await;
    assert_ne!(dropped, parked);
    drop(other);
    assert_eq!(backend(&mut held).await, parked);
    held.park();
    let mut next = pool.acquire_warm().await.unwrap();
    assert_eq!(backend(&mut next).await, parked);
}

/// A walk's candidate list is set once for a parked connection's session and remembered with
/// it; a connection from sqlx's pool, whose session may have been given any, is set again.
#[tokio::test]
async fn a_parked_connection_remembers_its_candidate_list() {
    let app = crate::helpers::spawn_app_without_worker().await;
    let pool = &app.state.pool;
    async fn ef_search(connection: &mut trove::store::Connection) -> String {
        scalar(connection, "SELECT current_setting('hnsw.ef_search')").await
    }
    // Changes the session's list behind the remembered value (which nothing in the service
    // does), to see whether `use_ef_search` sets it again.
    async fn set_behind(connection: &mut trove::store::Connection) {
        let _: String = scalar(
            connection,
            "SELECT set_config('hnsw.ef_search', '77', false)",
        )
        .await;
    }
    let mut first = pool.acquire_warm().await.unwrap();
    first.use_ef_search(123).await.unwrap();
    assert_eq!(ef_search(&mut first).await, "123");
    // A remembered list is not set again.
    set_behind(&mut first).await;
    first.use_ef_search(123).await.unwrap();
    assert_eq!(ef_search(&mut first).await, "77");
    first.use_ef_search(124).await.unwrap();
    assert_eq!(ef_search(&mut first).await, "124");
    first.park();

    let mut again = pool.acquire_warm().await.unwrap();
    set_behind(&mut again).await;
    again.use_ef_search(124).await.unwrap();
    assert_eq!(
        ef_search(&mut again).await,
        "77",
        "the parked value is remembered"
    );

    // Taken while the parked one is held: from sqlx's pool, its list unknown, so it is set.
    let mut other = pool.acquire_warm().await.unwrap();
    set_behind(&mut other).await;
    drop(other);
    let mut from_pool = pool.acquire_warm().await.unwrap();
    from_pool.use_ef_search(124).await.unwrap();
    assert_eq!(ef_search(&mut from_pool).await, "124");
    again.park();
}
